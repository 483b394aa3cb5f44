#include "tests/support/json_fields.h"

#include <regex>

namespace strata::test_support {
namespace {

// The raw text of "name"'s value matched by `value_pattern` (one capture group), or "".
std::string Match(const std::string& line, const std::string& name,
                  const std::string& value_pattern) {
  std::smatch match;
  if (std::regex_search(line, match, std::regex("\"" + name + "\":" + value_pattern))) {
    return match[1].str();
  }
  return "";
}

}  // namespace

int64_t JsonInt(const std::string& line, const std::string& name) {
  const std::string text = Match(line, name, "(-?\\d+)");
  return text.empty() ? -1 : std::stoll(text);
}

std::string JsonString(const std::string& line, const std::string& name) {
  return Match(line, name, "\"([^\"]*)\"");
}

bool JsonBool(const std::string& line, const std::string& name) {
  return Match(line, name, "(true|false)") == "true";
}

}  // namespace strata::test_support

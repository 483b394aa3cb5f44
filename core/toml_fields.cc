#include "core/toml_fields.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "core/byte_size.h"
#include "core/fmt_absl.h"
#include "core/status_macros.h"

namespace strata {
namespace {

absl::Status Bad(std::string message) { return absl::InvalidArgumentError(std::move(message)); }

}  // namespace

absl::StatusOr<std::string> ReadConfigFile(const std::string& path) {
  std::ifstream file(path);
  if (!file) return Bad(fmt::format("cannot read config file '{}'", path));
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

absl::StatusOr<toml::table> ParseTomlText(std::string_view text) {
  try {
    return toml::parse(text);
  } catch (const toml::parse_error& error) {
    return Bad(fmt::format("config: line {}: {}", error.source().begin.line,
                           std::string(error.description())));
  }
}

absl::Status CheckLogLevel(std::string_view key, std::string_view level) {
  static constexpr std::string_view kLevels[] = {"trace", "debug",    "info", "warn",
                                                 "error", "critical", "off"};
  if (std::find(std::begin(kLevels), std::end(kLevels), level) == std::end(kLevels)) {
    return Bad(
        fmt::format("config: {} '{}' is not one of trace, debug, info, warn, error, critical, off",
                    key, level));
  }
  return absl::OkStatus();
}

absl::Status ReadTomlBytes(const toml::node& node, std::string_view key, uint64_t& out) {
  if (auto v = node.is_integer() ? node.value<int64_t>() : std::nullopt) {
    if (*v < 0) return Bad(fmt::format("config: {} must not be negative", key));
    out = static_cast<uint64_t>(*v);
    return absl::OkStatus();
  }
  if (auto s = node.value<std::string>()) {
    absl::StatusOr<uint64_t> bytes = ParseByteSize(*s);
    if (!bytes.ok()) return Bad(fmt::format("config: {}: {}", key, bytes.status().message()));
    out = *bytes;
    return absl::OkStatus();
  }
  return Bad(fmt::format("config: {} must be a byte size", key));
}

absl::Status ReadTomlBool(const toml::node& node, std::string_view key, bool& out) {
  if (!node.is_boolean()) return Bad(fmt::format("config: {} must be true or false", key));
  out = *node.value<bool>();
  return absl::OkStatus();
}

absl::Status ReadTomlString(const toml::node& node, std::string_view key, std::string& out) {
  auto v = node.value<std::string>();
  if (!v) return Bad(fmt::format("config: {} must be a string", key));
  out = *v;
  return absl::OkStatus();
}

absl::Status ReadTomlStrings(const toml::node& node, std::string_view key,
                             std::vector<std::string>& out) {
  const toml::array* array = node.as_array();
  if (array == nullptr) return Bad(fmt::format("config: {} must be an array of strings", key));
  out.clear();
  for (const toml::node& element : *array) {
    std::string text;
    STRATA_RETURN_IF_ERROR(ReadTomlString(element, key, text));
    out.push_back(std::move(text));
  }
  return absl::OkStatus();
}

absl::Status ReadTomlNonNegative(const toml::node& node, std::string_view key, double& out) {
  std::optional<double> v;
  if (node.is_floating_point()) v = node.value<double>();
  if (node.is_integer()) v = static_cast<double>(*node.value<int64_t>());
  if (!v || !std::isfinite(*v) || *v < 0) {
    return Bad(fmt::format("config: {} must be a number, not negative", key));
  }
  out = *v;
  return absl::OkStatus();
}

absl::Status ForEachTomlField(
    const toml::table& root,
    absl::FunctionRef<absl::Status(std::string_view section, std::string_view key,
                                   const std::string& name, const toml::node& value)>
        apply) {
  for (const auto& [section_key, section_node] : root) {
    const std::string_view section = section_key.str();
    const toml::table* table = section_node.as_table();
    if (table == nullptr) {
      return absl::InvalidArgumentError(fmt::format("config: '{}' must be a table", section));
    }
    for (const auto& [key_node, value] : *table) {
      const std::string name = fmt::format("{}.{}", section, key_node.str());
      if (absl::Status s = apply(section, key_node.str(), name, value); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status UnknownTomlKey(std::string_view name) {
  return absl::InvalidArgumentError(fmt::format("config: unknown key '{}'", name));
}

absl::Status UnknownTomlSection(std::string_view section) {
  return absl::InvalidArgumentError(fmt::format("config: unknown section '{}'", section));
}

}  // namespace strata

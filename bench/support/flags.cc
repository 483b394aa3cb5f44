#include "bench/support/flags.h"

#include <cstdio>

namespace strata::bench {

bool ParseFlags(int argc, char** argv, std::string_view usage,
                absl::FunctionRef<bool(std::string_view name, const std::string& value)> set) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const size_t eq = arg.find('=');
    const std::string value(eq == std::string_view::npos ? "" : arg.substr(eq + 1));
    if (!set(arg.substr(0, eq), value)) {
      std::fprintf(stderr, "usage: %s %.*s\n", argv[0], static_cast<int>(usage.size()),
                   usage.data());
      return false;
    }
  }
  return true;
}

}  // namespace strata::bench

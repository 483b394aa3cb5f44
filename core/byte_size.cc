#include "core/byte_size.h"

#include <charconv>
#include <cmath>
#include <string_view>
#include <system_error>
#include <utility>

#include "fmt/format.h"

namespace strata {

absl::StatusOr<uint64_t> ParseByteSize(std::string_view text) {
  static constexpr std::pair<std::string_view, uint64_t> kUnits[] = {{"KiB", uint64_t{1} << 10},
                                                                     {"MiB", uint64_t{1} << 20},
                                                                     {"GiB", uint64_t{1} << 30},
                                                                     {"TiB", uint64_t{1} << 40},
                                                                     {"KB", 1000},
                                                                     {"MB", 1000 * 1000},
                                                                     {"GB", 1000 * 1000 * 1000},
                                                                     {"B", 1}};
  std::string_view number = text;
  uint64_t multiplier = 1;
  for (const auto& [suffix, factor] : kUnits) {
    if (text.size() > suffix.size() && text.ends_with(suffix)) {
      number = text.substr(0, text.size() - suffix.size());
      multiplier = factor;
      break;
    }
  }
  while (!number.empty() && number.back() == ' ') number.remove_suffix(1);
  double value = 0;
  const auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (number.empty() || error != std::errc() || end != number.data() + number.size() || value < 0 ||
      !std::isfinite(value) || value * static_cast<double>(multiplier) > 1.8e19) {
    return absl::InvalidArgumentError(
        fmt::format("'{}' is not a byte size (e.g. 4096, 512MiB, 8GiB)", text));
  }
  return static_cast<uint64_t>(value * static_cast<double>(multiplier));
}

}  // namespace strata

// fmt formatters for abseil types (Debian's abseil has its own string_view type, which fmt does
// not know): absl::string_view formats as text, absl::Status as "CODE: message" (or "OK").
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "fmt/format.h"

template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<std::string_view> {
  auto format(absl::string_view s, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(std::string_view(s.data(), s.size()), ctx);
  }
};

template <>
struct fmt::formatter<absl::Status> : fmt::formatter<std::string_view> {
  auto format(const absl::Status& status, fmt::format_context& ctx) const {
    const std::string text = status.ToString();
    return fmt::formatter<std::string_view>::format(text, ctx);
  }
};

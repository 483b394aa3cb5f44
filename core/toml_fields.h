// What stratad's and strata-controller's config loaders share: reading a config file and parsing
// its TOML, walking its sections' fields, reading one field into a typed value with the error every
// Strata config reports for a field of the wrong type or out of range ("config: <key> must be
// ..."), and the log level check. Plain functions; thread-safe.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fmt/format.h"
#include "toml++/toml.h"

namespace strata {

// The text of the config file at `path`; kInvalidArgument when it cannot be read.
absl::StatusOr<std::string> ReadConfigFile(const std::string& path);

// The TOML document in `text`; kInvalidArgument naming the line of a syntax error.
absl::StatusOr<toml::table> ParseTomlText(std::string_view text);

// Calls `apply(section, key, name, value)` for every `key = value` of every `[section]` of
// `root`, in order (`name` is "section.key", for error messages), and returns its first error;
// kInvalidArgument for a top-level entry that is not a section (a table).
absl::Status ForEachTomlField(
    const toml::table& root,
    absl::FunctionRef<absl::Status(std::string_view section, std::string_view key,
                                   const std::string& name, const toml::node& value)>
        apply);

// The errors for a key, and a section, that a config does not know.
absl::Status UnknownTomlKey(std::string_view name);
absl::Status UnknownTomlSection(std::string_view section);

// OK for "trace" .. "critical" and "off"; kInvalidArgument naming `key` otherwise.
absl::Status CheckLogLevel(std::string_view key, std::string_view level);

// A byte size: an integer of bytes or a string such as "8GiB". Integers only: toml++ converts a
// float to an integer too, with undefined behaviour out of range (found by config_fuzz).
absl::Status ReadTomlBytes(const toml::node& node, std::string_view key, uint64_t& out);

// An integer in [0, max of T].
template <typename T>
absl::Status ReadTomlUint(const toml::node& node, std::string_view key, T& out) {
  auto v = node.is_integer() ? node.value<int64_t>() : std::nullopt;
  if (!v || *v < 0 || static_cast<uint64_t>(*v) > std::numeric_limits<T>::max()) {
    return absl::InvalidArgumentError(fmt::format("config: {} must be an integer in [0, {}]", key,
                                                  std::numeric_limits<T>::max()));
  }
  out = static_cast<T>(*v);
  return absl::OkStatus();
}

absl::Status ReadTomlBool(const toml::node& node, std::string_view key, bool& out);
absl::Status ReadTomlString(const toml::node& node, std::string_view key, std::string& out);
absl::Status ReadTomlStrings(const toml::node& node, std::string_view key,
                             std::vector<std::string>& out);
// A finite number (an integer is taken as one) that is not negative.
absl::Status ReadTomlNonNegative(const toml::node& node, std::string_view key, double& out);

}  // namespace strata

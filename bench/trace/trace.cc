#include "bench/trace/trace.h"

#include <charconv>
#include <fstream>

#include "absl/container/flat_hash_set.h"
#include "core/fmt_absl.h"
#include "core/status_macros.h"
#include "fmt/format.h"

namespace strata::bench {
namespace {

// The text right after `"name":` (whitespace skipped); kInvalidArgument when absent.
absl::StatusOr<std::string_view> FieldValue(std::string_view line, std::string_view name) {
  const std::string quoted = fmt::format("\"{}\"", name);
  size_t at = line.find(quoted);
  if (at == std::string_view::npos) {
    return absl::InvalidArgumentError(fmt::format("missing field '{}'", name));
  }
  at = line.find_first_not_of(" \t", at + quoted.size());
  if (at == std::string_view::npos || line[at] != ':') {
    return absl::InvalidArgumentError(fmt::format("field '{}' has no value", name));
  }
  at = line.find_first_not_of(" \t", at + 1);
  if (at == std::string_view::npos) {
    return absl::InvalidArgumentError(fmt::format("field '{}' has no value", name));
  }
  return line.substr(at);
}

// Parses a non-negative integer at the start of `text`, advancing past it.
absl::StatusOr<uint64_t> TakeUnsigned(std::string_view& text, std::string_view name) {
  uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc()) {
    return absl::InvalidArgumentError(
        fmt::format("field '{}' is not a non-negative integer", name));
  }
  text.remove_prefix(end - text.data());
  return value;
}

absl::StatusOr<uint64_t> UnsignedField(std::string_view line, std::string_view name) {
  STRATA_ASSIGN_OR_RETURN(std::string_view value, FieldValue(line, name));
  return TakeUnsigned(value, name);
}

absl::StatusOr<std::vector<uint64_t>> UnsignedArrayField(std::string_view line,
                                                         std::string_view name) {
  STRATA_ASSIGN_OR_RETURN(std::string_view text, FieldValue(line, name));
  if (text.empty() || text.front() != '[') {
    return absl::InvalidArgumentError(fmt::format("field '{}' is not an array", name));
  }
  text.remove_prefix(1);
  std::vector<uint64_t> values;
  auto skip_space = [&] {
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  };
  skip_space();
  if (!text.empty() && text.front() == ']') return values;
  while (true) {
    skip_space();
    STRATA_ASSIGN_OR_RETURN(uint64_t value, TakeUnsigned(text, name));
    values.push_back(value);
    skip_space();
    if (text.empty()) break;
    if (text.front() == ']') return values;
    if (text.front() != ',') break;
    text.remove_prefix(1);
  }
  return absl::InvalidArgumentError(fmt::format("field '{}' is not a closed array", name));
}

}  // namespace

uint64_t Trace::total_blocks() const {
  uint64_t total = 0;
  for (const TraceRequest& request : requests) total += request.blocks.size();
  return total;
}

uint64_t Trace::unique_blocks() const {
  absl::flat_hash_set<uint64_t> seen;
  for (const TraceRequest& request : requests)
    seen.insert(request.blocks.begin(), request.blocks.end());
  return seen.size();
}

absl::StatusOr<TraceRequest> ParseTraceLine(std::string_view line) {
  TraceRequest request;
  STRATA_ASSIGN_OR_RETURN(uint64_t timestamp, UnsignedField(line, "timestamp"));
  STRATA_ASSIGN_OR_RETURN(uint64_t input_tokens, UnsignedField(line, "input_length"));
  STRATA_ASSIGN_OR_RETURN(request.blocks, UnsignedArrayField(line, "hash_ids"));
  if (input_tokens == 0 || input_tokens > UINT32_MAX) {
    return absl::InvalidArgumentError(fmt::format("input_length {} is out of range", input_tokens));
  }
  request.timestamp_ms = static_cast<int64_t>(timestamp);
  request.input_tokens = static_cast<uint32_t>(input_tokens);
  const uint64_t expected = (input_tokens + kTraceBlockTokens - 1) / kTraceBlockTokens;
  if (request.blocks.size() != expected) {
    return absl::InvalidArgumentError(fmt::format("{} hash_ids for input_length {} (expected {})",
                                                  request.blocks.size(), input_tokens, expected));
  }
  return request;
}

absl::StatusOr<Trace> LoadTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(fmt::format("cannot open trace '{}'", path));
  Trace trace{.name = path};
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    absl::StatusOr<TraceRequest> request = ParseTraceLine(line);
    if (!request.ok()) {
      return absl::InvalidArgumentError(
          fmt::format("{}:{}: {}", path, number, request.status().message()));
    }
    trace.requests.push_back(*std::move(request));
  }
  return trace;
}

}  // namespace strata::bench

// A status code a peer sent (absl::StatusCode's number) back into a Status. Internal to
// storage/remote; header-only, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "fmt/format.h"

namespace strata::storage::remote::internal {

// `code` with `message`; kInternal for a number that names no code (a peer is not trusted to
// send only valid ones).
inline absl::Status StatusFromWire(int32_t code, std::string_view message) {
  if (code < 0 || code > static_cast<int32_t>(absl::StatusCode::kUnauthenticated)) {
    return absl::InternalError(fmt::format("peer sent status code {}: {}", code, message));
  }
  return absl::Status(static_cast<absl::StatusCode>(code), std::string(message));
}

}  // namespace strata::storage::remote::internal

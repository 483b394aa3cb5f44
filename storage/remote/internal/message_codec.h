// The framing every peer-protocol message shares (peer_messages.h, remote_messages.h): one type
// byte, then core/byte_codec.h fields. Internal to storage/remote; header-only, thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "core/byte_codec.h"
#include "fmt/format.h"

namespace strata::storage::remote::internal {

// A writer with the message's type byte written.
inline ByteWriter StartMessage(uint8_t type) {
  ByteWriter writer;
  writer.U8(type);
  return writer;
}

// A reader past the payload's type byte, or nothing when the payload is not of `type`.
inline std::optional<ByteReader> OpenMessage(std::string_view payload, uint8_t type) {
  ByteReader reader(payload);
  uint8_t found = 0;
  if (!reader.U8(found) || found != type) return std::nullopt;
  return reader;
}

inline absl::Status Malformed(std::string_view what) {
  return absl::InvalidArgumentError(fmt::format("malformed {}", what));
}

}  // namespace strata::storage::remote::internal

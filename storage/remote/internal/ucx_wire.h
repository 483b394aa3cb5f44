// The active messages UcxTransport's two ends exchange (internal to storage/remote). Every
// message is a fixed header (plain little-endian struct, copied out of UCX's buffer before it is
// read) and optional data. A header of the wrong size for its id is a protocol error: the
// message is dropped and counted, never trusted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

namespace strata::storage::remote::internal {

inline constexpr uint32_t kWireMagic = 0x53545254;  // "STRT"
// Version 1 served its region before authenticating; no version since speaks to it.
inline constexpr uint16_t kMinWireVersion = 2;
inline constexpr uint16_t kWireVersion = 2;

enum AmId : unsigned {
  // Sent by both ends after each has authenticated the other (kAmAuth): the region and its rkey
  // (the data).
  kAmHello = 1,
  // A Call: data is the request; the reply: data is the reply bytes, or the error message.
  kAmCall = 2,
  kAmCallReply = 3,
  // Active-message reads: the peer answers a request with the bytes of its region.
  kAmReadRequest = 4,
  kAmReadData = 5,
  // Mutual authentication (peer_auth.h), the only message a link carries before it succeeds.
  kAmAuth = 6,
};
inline constexpr unsigned kAmIdCount = 7;

inline constexpr size_t kAuthNonceBytes = 32;
inline constexpr size_t kAuthProofBytes = 32;  // HMAC-SHA256

enum class LinkRole : uint8_t { kDialler = 1, kListener = 2 };
enum class AuthStep : uint8_t { kChallenge = 1, kProof = 2, kRefusal = 3 };

// kAmAuth's header (no data). A challenge carries the sender's nonce and versions; a proof
// carries them again and the HMAC; a refusal carries nothing else.
struct AuthMessage {
  uint32_t magic = kWireMagic;
  uint8_t step = 0;  // AuthStep
  uint8_t role = 0;  // LinkRole of the sender
  uint16_t min_version = 0;
  uint16_t max_version = 0;
  uint16_t reserved = 0;
  uint8_t nonce[kAuthNonceBytes] = {};
  uint8_t proof[kAuthProofBytes] = {};
};

struct HelloHeader {
  uint32_t magic = kWireMagic;
  uint32_t version = kWireVersion;
  uint64_t region_base = 0;  // the sender's virtual address of its region (for RMA)
  uint64_t region_bytes = 0;
  uint8_t host_id[16] = {};  // the sender's boot id: equal ids share a host
};

struct CallHeader {
  uint64_t call_id = 0;
};

struct CallReplyHeader {
  uint64_t call_id = 0;
  int32_t code = 0;  // absl::StatusCode; data is the message when not OK
  uint32_t reserved = 0;
};

// Names one segment of one request, in data messages and their answers.
struct SegmentHeader {
  uint64_t request_id = 0;
  uint64_t remote_offset = 0;  // in the receiver's region (read requests)
  uint64_t length = 0;
  uint32_t segment = 0;
  int32_t code = 0;  // absl::StatusCode of read data; 0 in requests
};

// Copies a header out of UCX's buffer when its size is right.
template <typename Header>
std::optional<Header> ParseHeader(const void* bytes, size_t length) {
  if (length != sizeof(Header) || bytes == nullptr) return std::nullopt;
  Header header;
  std::memcpy(&header, bytes, sizeof(Header));
  return header;
}

}  // namespace strata::storage::remote::internal

// The messages daemons exchange about themselves over a Transport's Call (PeerSet's part of the
// peer protocol): the handshake that introduces a peer (its name, address and layouts; the
// transport has authenticated the link before any of this crosses), and the health ping. Every Call
// payload starts with one byte naming its message type; types from kFirstApplicationMessage up
// belong to the layers above (the remote tier, PD transfer) and PeerSet passes them through.
//
// Encoding: core/byte_codec.h (little-endian integers, strings and lists prefixed with their
// u32 length), after the type byte. Decoding is strict (a truncated, overlong or trailing-bytes
// message is kInvalidArgument) and bounded (strings up to kMaxTextBytes, lists up to kMaxLayouts),
// so a hostile peer cannot make a daemon allocate. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace strata::storage::remote {

// Version 1 carried the cluster token in its handshake; from 2 the transport authenticates.
inline constexpr uint32_t kPeerProtocolVersion = 2;
inline constexpr size_t kMaxTextBytes = 4096;
inline constexpr size_t kMaxLayouts = 256;

enum class PeerMessage : uint8_t {
  kHandshake = 1,
  kPing = 2,
};
inline constexpr uint8_t kFirstApplicationMessage = 16;

// Sent by the dialling daemon as its first call; the listener admits it or refuses.
struct Handshake {
  uint32_t protocol_version = kPeerProtocolVersion;
  std::string node_id;            // the sender's instance id
  std::string listen_address;     // where the sender's own listener is ("" when none)
  std::vector<uint64_t> layouts;  // KvLayout fingerprints the sender serves
};

// The listener's answer to an admitted handshake.
struct HandshakeReply {
  std::string node_id;
  std::vector<uint64_t> layouts;
};

std::string EncodeHandshake(const Handshake& handshake);
std::string EncodeHandshakeReply(const HandshakeReply& reply);
std::string EncodePing();

// The message type of a call payload; kInvalidArgument for an empty payload.
absl::StatusOr<uint8_t> MessageType(std::string_view payload);
// Decode a whole payload (its type byte included).
absl::StatusOr<Handshake> DecodeHandshake(std::string_view payload);
absl::StatusOr<HandshakeReply> DecodeHandshakeReply(std::string_view payload);

}  // namespace strata::storage::remote

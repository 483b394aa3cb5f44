#include "storage/remote/peer_messages.h"

#include <optional>

#include "fmt/format.h"
#include "storage/remote/internal/message_codec.h"

namespace strata::storage::remote {
namespace {

// The handshake reply travels as a call's reply, with its own type byte so a reply of another
// kind is never taken for one.
constexpr uint8_t kHandshakeReplyType = 0x81;

}  // namespace

std::string EncodeHandshake(const Handshake& handshake) {
  ByteWriter writer = internal::StartMessage(static_cast<uint8_t>(PeerMessage::kHandshake));
  writer.U32(handshake.protocol_version);
  writer.String(handshake.node_id);
  writer.String(handshake.listen_address);
  writer.Array(handshake.layouts);
  return writer.Take();
}

std::string EncodeHandshakeReply(const HandshakeReply& reply) {
  ByteWriter writer = internal::StartMessage(kHandshakeReplyType);
  writer.String(reply.node_id);
  writer.Array(reply.layouts);
  return writer.Take();
}

std::string EncodePing() {
  return internal::StartMessage(static_cast<uint8_t>(PeerMessage::kPing)).Take();
}

absl::StatusOr<uint8_t> MessageType(std::string_view payload) {
  if (payload.empty()) return internal::Malformed("peer message: empty");
  return static_cast<uint8_t>(payload[0]);
}

absl::StatusOr<Handshake> DecodeHandshake(std::string_view payload) {
  std::optional<ByteReader> reader =
      internal::OpenMessage(payload, static_cast<uint8_t>(PeerMessage::kHandshake));
  Handshake handshake;
  if (!reader || !reader->U32(handshake.protocol_version) ||
      !reader->String(handshake.node_id, kMaxTextBytes) ||
      !reader->String(handshake.listen_address, kMaxTextBytes) ||
      !reader->Array(handshake.layouts, kMaxLayouts) || !reader->empty()) {
    return internal::Malformed("peer handshake");
  }
  return handshake;
}

absl::StatusOr<HandshakeReply> DecodeHandshakeReply(std::string_view payload) {
  std::optional<ByteReader> reader = internal::OpenMessage(payload, kHandshakeReplyType);
  HandshakeReply reply;
  if (!reader || !reader->String(reply.node_id, kMaxTextBytes) ||
      !reader->Array(reply.layouts, kMaxLayouts) || !reader->empty()) {
    return internal::Malformed("peer handshake reply");
  }
  return reply;
}

}  // namespace strata::storage::remote

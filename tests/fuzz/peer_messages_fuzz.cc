// Fuzzes the peer protocol's decoders (storage/remote/peer_messages.h, remote_messages.h and the
// framing they share, internal/message_codec.h): every payload a peer can send is offered to
// every Decode* function. Invalid payloads must be rejected with a status; a payload that decodes
// must re-encode to the same bytes (the encoding is canonical and the decoders strict).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "storage/remote/peer_messages.h"
#include "storage/remote/remote_messages.h"
#include "tests/fuzz/fuzz_check.h"

namespace remote = strata::storage::remote;

namespace {

// Decodes `payload` with `decode`; when it decodes, the value must encode back to `payload`.
template <typename Decode, typename Encode>
void RoundTrip(std::string_view payload, Decode decode, Encode encode) {
  auto decoded = decode(payload);
  if (!decoded.ok()) return;
  FUZZ_CHECK(encode(*decoded) == payload);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view payload(reinterpret_cast<const char*>(data), size);
  auto type = remote::MessageType(payload);
  FUZZ_CHECK(type.ok() == !payload.empty());
  if (type.ok()) FUZZ_CHECK(*type == data[0]);

  RoundTrip(payload, remote::DecodeHandshake, remote::EncodeHandshake);
  RoundTrip(payload, remote::DecodeHandshakeReply, remote::EncodeHandshakeReply);
  RoundTrip(payload, remote::DecodeQuery, remote::EncodeQuery);
  RoundTrip(payload, remote::DecodeQueryReply, remote::EncodeQueryReply);
  RoundTrip(payload, remote::DecodeLease, remote::EncodeLease);
  RoundTrip(payload, remote::DecodeLeaseReply, remote::EncodeLeaseReply);
  RoundTrip(payload, remote::DecodeRelease, remote::EncodeRelease);
  RoundTrip(payload, remote::DecodePush, remote::EncodePush);
  RoundTrip(payload, remote::DecodePushReply, remote::EncodePushReply);
  RoundTrip(payload, remote::DecodeStreamOpen, remote::EncodeStreamOpen);
  RoundTrip(payload, remote::DecodeStreamLayers, remote::EncodeStreamLayers);
  RoundTrip(payload, remote::DecodeStreamCommit, remote::EncodeStreamCommit);
  RoundTrip(payload, remote::DecodeStreamAbort, remote::EncodeStreamAbort);
  for (remote::RemoteMessage answered :
       {remote::RemoteMessage::kStreamOpen, remote::RemoteMessage::kStreamCommit}) {
    RoundTrip(
        payload, [&](std::string_view p) { return remote::DecodeStreamReply(answered, p); },
        [&](const remote::StreamReply& reply) {
          return remote::EncodeStreamReply(answered, reply);
        });
  }
  for (remote::RemoteMessage acked :
       {remote::RemoteMessage::kStreamLayers, remote::RemoteMessage::kStreamAbort}) {
    if (remote::DecodeStreamAck(acked, payload).ok()) {
      FUZZ_CHECK(remote::EncodeStreamAck(acked) == payload);
    }
  }
  return 0;
}

// Fuzzes a peer link's authentication before it succeeds (storage/remote/internal/peer_auth.h),
// the only messages a daemon reads from a link that has not proved itself. The first byte picks
// the mode:
//   even: a stranger (who does not hold the secret) sends the input's messages, each a length
//         byte and that many bytes, to one end (dialler or listener by the next bit). The end must
//         never authenticate, must answer only with its proof (over its own nonce) or a refusal,
//         and once it has refused must take nothing more.
//   odd:  two ends holding one secret run the handshake through a network the input controls:
//         each input byte delivers, drops, duplicates or corrupts the next message in either
//         direction. An end may authenticate only on messages that were not corrupted in a field
//         the proof covers, only once the other end has sent its proof, and then on the version
//         both ends speak.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <string_view>

#include "storage/remote/internal/peer_auth.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

namespace wire = strata::storage::remote::internal;

constexpr std::string_view kSecret = "fuzz cluster secret";

bool NoneOwn(const wire::AuthNonce&) { return false; }

// Whether a byte flipped at `offset` of `message` changes what the receiver checks (the reserved
// field and a challenge's unused proof bytes are not checked).
bool Covered(const wire::AuthMessage& message, size_t offset) {
  const size_t reserved = offsetof(wire::AuthMessage, reserved);
  const size_t proof = offsetof(wire::AuthMessage, proof);
  if (offset >= reserved && offset < reserved + sizeof(message.reserved)) return false;
  if (offset >= proof) return message.step == static_cast<uint8_t>(wire::AuthStep::kProof);
  return true;
}

void CheckReply(const wire::PeerAuth& end, const wire::PeerAuth::Outcome& outcome) {
  if (!outcome.reply) return;
  const auto step = static_cast<wire::AuthStep>(outcome.reply->step);
  FUZZ_CHECK(step == wire::AuthStep::kProof || step == wire::AuthStep::kRefusal);
  FUZZ_CHECK(step == wire::AuthStep::kRefusal || outcome.refused.ok());
  if (step == wire::AuthStep::kProof) {
    FUZZ_CHECK(std::memcmp(outcome.reply->nonce, end.nonce().data(), wire::kAuthNonceBytes) == 0);
  }
}

void Stranger(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const auto role = (data[0] & 1) != 0 ? wire::LinkRole::kDialler : wire::LinkRole::kListener;
  wire::PeerAuth end(kSecret, role, {}, wire::NewAuthNonce());
  bool refused = false;
  size_t at = 1;
  while (at < size) {
    const size_t length = data[at++];
    const size_t take = length < size - at ? length : size - at;
    wire::PeerAuth::Outcome outcome = end.Receive(data + at, take, NoneOwn);
    at += take;
    CheckReply(end, outcome);
    FUZZ_CHECK(!outcome.authenticated && !end.authenticated());
    if (refused) FUZZ_CHECK(!outcome.refused.ok() && !outcome.reply);
    refused = refused || !outcome.refused.ok();
  }
}

// A message on its way, and what its sender sent.
struct InFlight {
  wire::AuthMessage message;
  wire::AuthMessage sent;

  explicit InFlight(const wire::AuthMessage& m) : message(m), sent(m) {}
  // Whether a byte the receiver checks differs from what was sent (a byte flipped twice does not).
  bool Corrupted() const {
    const auto* now = reinterpret_cast<const uint8_t*>(&message);
    const auto* then = reinterpret_cast<const uint8_t*>(&sent);
    for (size_t offset = 0; offset < sizeof(wire::AuthMessage); ++offset) {
      if (now[offset] != then[offset] && Covered(sent, offset)) return true;
    }
    return false;
  }
};

struct End {
  wire::PeerAuth auth;
  std::deque<InFlight> inbox;
  bool sent_proof = false;
  bool took_corrupted = false;
  bool refused = false;
};

void Network(const uint8_t* data, size_t size) {
  const wire::WireVersions dialler_versions{.min = wire::kMinWireVersion,
                                            .max = static_cast<uint16_t>(wire::kWireVersion + 1)};
  End ends[2] = {
      {.auth = wire::PeerAuth(kSecret, wire::LinkRole::kDialler, dialler_versions,
                              wire::NewAuthNonce())},
      {.auth = wire::PeerAuth(kSecret, wire::LinkRole::kListener, {}, wire::NewAuthNonce())},
  };
  ends[1].inbox.emplace_back(ends[0].auth.Challenge());
  ends[0].inbox.emplace_back(ends[1].auth.Challenge());
  for (size_t at = 0; at < size; ++at) {
    End& to = ends[data[at] & 1];
    End& from = ends[(data[at] & 1) ^ 1];
    if (to.inbox.empty()) continue;
    switch ((data[at] >> 1) % 4) {
      case 0: {  // deliver
        const InFlight next = to.inbox.front();
        to.inbox.pop_front();
        const bool was_refused = to.refused;
        wire::PeerAuth::Outcome outcome =
            to.auth.Receive(&next.message, sizeof(next.message), NoneOwn);
        CheckReply(to.auth, outcome);
        to.took_corrupted = to.took_corrupted || next.Corrupted();
        if (was_refused) FUZZ_CHECK(!outcome.refused.ok() && !outcome.reply);
        to.refused = to.refused || !outcome.refused.ok();
        if (outcome.authenticated) {
          FUZZ_CHECK(!to.took_corrupted);
          FUZZ_CHECK(from.sent_proof);
          FUZZ_CHECK(to.auth.version() == wire::kWireVersion);
        }
        if (outcome.reply) {
          to.sent_proof =
              to.sent_proof || outcome.reply->step == static_cast<uint8_t>(wire::AuthStep::kProof);
          from.inbox.emplace_back(*outcome.reply);
        }
        break;
      }
      case 1:  // drop
        to.inbox.pop_front();
        break;
      case 2:  // duplicate
        to.inbox.push_back(to.inbox.front());
        break;
      case 3: {  // corrupt one byte, at the offset the next input byte names
        if (++at >= size) return;
        const size_t offset = data[at] % sizeof(wire::AuthMessage);
        reinterpret_cast<uint8_t*>(&to.inbox.front().message)[offset] ^= 0x01;
        break;
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 4096) return 0;
  if ((data[0] & 1) == 0) {
    Stranger(data + 1, size - 1);
  } else {
    Network(data + 1, size - 1);
  }
  return 0;
}

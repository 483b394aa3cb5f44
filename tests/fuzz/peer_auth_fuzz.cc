// Fuzzes a peer link's authentication before it succeeds (storage/remote/internal/peer_auth.h),
// the only messages a daemon reads from a link that has not proved itself. The first byte picks
// the mode:
//   even: a stranger (who does not hold the secret) sends the input's messages, each a length
//         byte and that many bytes, to one end (dialler or listener by the next bit) of a daemon
//         that has one other link open. The end must never authenticate, must answer only with
//         its proof (over its own nonce) or a refusal, must never answer a challenge that carries
//         a nonce of the daemon's own links with its proof, and once it has refused must take
//         nothing more.
//   odd:  two ends holding one secret run the handshake through a network the input controls:
//         each input byte delivers, drops, duplicates or corrupts the next message in either
//         direction, or has a relay hand an end its own challenge as the other end's. An end may
//         authenticate only on messages that were not corrupted in a field the proof covers, only
//         once the other end has sent its proof, and then on the version both ends speak; a
//         relayed challenge is always refused.
// The nonces are fixed (a link draws fresh ones, NewAuthNonce): an input replays the same way, and
// the fuzzer can learn a nonce of the daemon's own and send it back.
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

wire::AuthNonce Filled(uint8_t byte) {
  wire::AuthNonce nonce;
  nonce.fill(byte);
  return nonce;
}

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
  wire::PeerAuth end(kSecret, role, {}, Filled(0x5e));
  const wire::AuthNonce other_link = Filled(0x0e);
  // As UcxTransport::IsOwnNonce: the nonce of any of the daemon's links.
  auto is_own_nonce = [&](const wire::AuthNonce& nonce) {
    return nonce == end.nonce() || nonce == other_link;
  };
  bool refused = false;
  size_t at = 1;
  while (at < size) {
    const size_t length = data[at++];
    const size_t take = length < size - at ? length : size - at;
    const uint8_t* message = data + at;
    wire::PeerAuth::Outcome outcome = end.Receive(message, take, is_own_nonce);
    at += take;
    CheckReply(end, outcome);
    if (outcome.reply && outcome.reply->step == static_cast<uint8_t>(wire::AuthStep::kProof)) {
      // The end took the message's challenge.
      FUZZ_CHECK(take == sizeof(wire::AuthMessage));
      wire::AuthNonce nonce;
      std::memcpy(nonce.data(), message + offsetof(wire::AuthMessage, nonce), nonce.size());
      FUZZ_CHECK(!is_own_nonce(nonce));
    }
    FUZZ_CHECK(!outcome.authenticated && !end.authenticated());
    if (refused) FUZZ_CHECK(!outcome.refused.ok() && !outcome.reply);
    refused = refused || !outcome.refused.ok();
  }
}

// A message on its way, and what its sender sent.
struct InFlight {
  wire::AuthMessage message;
  wire::AuthMessage sent;
  // The receiver's own challenge, handed back by a relay as the other end's.
  bool relayed = false;

  explicit InFlight(const wire::AuthMessage& m, bool relayed_back = false)
      : message(m), sent(m), relayed(relayed_back) {}
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
      {.auth = wire::PeerAuth(kSecret, wire::LinkRole::kDialler, dialler_versions, Filled(0xd1))},
      {.auth = wire::PeerAuth(kSecret, wire::LinkRole::kListener, {}, Filled(0x1d))},
  };
  ends[1].inbox.emplace_back(ends[0].auth.Challenge());
  ends[0].inbox.emplace_back(ends[1].auth.Challenge());
  for (size_t at = 0; at < size; ++at) {
    End& to = ends[data[at] & 1];
    End& from = ends[(data[at] & 1) ^ 1];
    const int action = (data[at] >> 1) % 5;
    if (action == 4) {  // a relay hands `to` its own challenge, in the other end's role
      wire::AuthMessage relayed = to.auth.Challenge();
      relayed.role = from.auth.Challenge().role;
      to.inbox.emplace_front(relayed, /*relayed_back=*/true);
      continue;
    }
    if (to.inbox.empty()) continue;
    switch (action) {
      case 0: {  // deliver
        const InFlight next = to.inbox.front();
        to.inbox.pop_front();
        const bool was_refused = to.refused;
        wire::PeerAuth::Outcome outcome = to.auth.Receive(
            &next.message, sizeof(next.message),
            [&to](const wire::AuthNonce& nonce) { return nonce == to.auth.nonce(); });
        CheckReply(to.auth, outcome);
        to.took_corrupted = to.took_corrupted || next.Corrupted();
        if (was_refused) FUZZ_CHECK(!outcome.refused.ok() && !outcome.reply);
        if (next.relayed && !next.Corrupted()) {
          FUZZ_CHECK(!outcome.refused.ok() && !outcome.authenticated);
        }
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

#include "storage/remote/internal/peer_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "fmt/format.h"

namespace strata::storage::remote::internal {
namespace {

constexpr std::string_view kTranscriptLabel = "strata peer link authentication";

LinkRole Opposite(LinkRole role) {
  return role == LinkRole::kDialler ? LinkRole::kListener : LinkRole::kDialler;
}

std::string_view RoleName(uint8_t role) {
  switch (static_cast<LinkRole>(role)) {
    case LinkRole::kDialler:
      return "dialler";
    case LinkRole::kListener:
      return "listener";
  }
  return "unknown role";
}

// A challenge's part of the transcript: role, versions, nonce.
void AppendChallenge(std::string& transcript, const AuthMessage& challenge) {
  transcript.push_back(static_cast<char>(challenge.role));
  for (uint16_t version : {challenge.min_version, challenge.max_version}) {
    transcript.push_back(static_cast<char>(version & 0xff));
    transcript.push_back(static_cast<char>(version >> 8));
  }
  transcript.append(reinterpret_cast<const char*>(challenge.nonce), kAuthNonceBytes);
}

}  // namespace

AuthNonce NewAuthNonce() {
  AuthNonce nonce{};
  if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1) {
    // OpenSSL's generator failing is not something a link can work around: no link may use a
    // predictable nonce.
    std::abort();
  }
  return nonce;
}

PeerAuth::PeerAuth(std::string_view secret, LinkRole role, WireVersions versions, AuthNonce nonce)
    : secret_(secret), role_(role), versions_(versions), nonce_(nonce) {}

AuthMessage PeerAuth::Challenge() const {
  AuthMessage message;
  message.step = static_cast<uint8_t>(AuthStep::kChallenge);
  message.role = static_cast<uint8_t>(role_);
  message.min_version = versions_.min;
  message.max_version = versions_.max;
  std::memcpy(message.nonce, nonce_.data(), kAuthNonceBytes);
  return message;
}

AuthMessage PeerAuth::Proof() const {
  AuthMessage message = Challenge();
  message.step = static_cast<uint8_t>(AuthStep::kProof);
  const auto proof = ProofOf(role_);
  std::memcpy(message.proof, proof.data(), kAuthProofBytes);
  return message;
}

std::array<uint8_t, kAuthProofBytes> PeerAuth::ProofOf(LinkRole prover) const {
  const AuthMessage mine = Challenge();
  const AuthMessage& dialler = role_ == LinkRole::kDialler ? mine : peer_challenge_;
  const AuthMessage& listener = role_ == LinkRole::kDialler ? peer_challenge_ : mine;
  std::string transcript(kTranscriptLabel);
  transcript.push_back(static_cast<char>(prover));
  AppendChallenge(transcript, dialler);
  AppendChallenge(transcript, listener);
  std::array<uint8_t, kAuthProofBytes> proof{};
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
       reinterpret_cast<const unsigned char*>(transcript.data()), transcript.size(), proof.data(),
       &length);
  return proof;
}

absl::Status PeerAuth::TakeChallenge(const AuthMessage& message,
                                     absl::FunctionRef<bool(const AuthNonce&)> is_own_nonce) {
  if (message.role != static_cast<uint8_t>(Opposite(role_))) {
    return absl::PermissionDeniedError(
        fmt::format("the peer claims the {} role on a link where it is the {}",
                    RoleName(message.role), RoleName(static_cast<uint8_t>(Opposite(role_)))));
  }
  const uint16_t low = std::max(message.min_version, versions_.min);
  const uint16_t high = std::min(message.max_version, versions_.max);
  if (message.min_version > message.max_version || low > high) {
    return absl::FailedPreconditionError(
        fmt::format("the peer speaks wire versions {}-{}, this daemon {}-{}", message.min_version,
                    message.max_version, versions_.min, versions_.max));
  }
  AuthNonce nonce;
  std::memcpy(nonce.data(), message.nonce, kAuthNonceBytes);
  if (is_own_nonce(nonce)) {
    return absl::PermissionDeniedError("the peer's challenge reflects one of this daemon's own");
  }
  peer_challenge_ = message;
  std::memset(peer_challenge_.proof, 0, kAuthProofBytes);
  peer_challenge_.step = static_cast<uint8_t>(AuthStep::kChallenge);
  version_ = high;
  return absl::OkStatus();
}

PeerAuth::Outcome PeerAuth::Refuse(absl::Status why, bool tell_peer) {
  state_ = State::kRefused;
  Outcome outcome;
  if (tell_peer) {
    AuthMessage refusal;
    refusal.step = static_cast<uint8_t>(AuthStep::kRefusal);
    refusal.role = static_cast<uint8_t>(role_);
    outcome.reply = refusal;
  }
  outcome.refused = std::move(why);
  return outcome;
}

PeerAuth::Outcome PeerAuth::Receive(const void* bytes, size_t length,
                                    absl::FunctionRef<bool(const AuthNonce&)> is_own_nonce) {
  std::optional<AuthMessage> message = ParseHeader<AuthMessage>(bytes, length);
  if (state_ == State::kRefused || state_ == State::kAuthenticated) {
    return Refuse(absl::PermissionDeniedError("an authentication message after the handshake"),
                  false);
  }
  if (!message || message->magic != kWireMagic) {
    return Refuse(absl::PermissionDeniedError("the peer is not a Strata transport"), false);
  }
  const auto step = static_cast<AuthStep>(message->step);
  if (step == AuthStep::kRefusal) {
    return Refuse(absl::PermissionDeniedError(
                      "the peer refused this daemon's proof (the cluster secrets differ)"),
                  false);
  }
  if (step != AuthStep::kChallenge && step != AuthStep::kProof) {
    return Refuse(
        absl::PermissionDeniedError(fmt::format("unknown authentication step {}", message->step)),
        false);
  }
  Outcome outcome;
  if (state_ == State::kAwaitChallenge) {
    if (absl::Status taken = TakeChallenge(*message, is_own_nonce); !taken.ok()) {
      return Refuse(std::move(taken), true);
    }
    state_ = State::kAwaitProof;
    outcome.reply = Proof();
  } else if (step == AuthStep::kChallenge ||
             std::memcmp(message->nonce, peer_challenge_.nonce, kAuthNonceBytes) != 0 ||
             message->min_version != peer_challenge_.min_version ||
             message->max_version != peer_challenge_.max_version ||
             message->role != peer_challenge_.role) {
    return Refuse(absl::PermissionDeniedError("the peer changed its challenge"), true);
  }
  if (step == AuthStep::kChallenge) return outcome;
  const auto expected = ProofOf(Opposite(role_));
  if (CRYPTO_memcmp(expected.data(), message->proof, kAuthProofBytes) != 0) {
    return Refuse(absl::PermissionDeniedError(
                      "the peer's proof is wrong: it does not hold this cluster's secret"),
                  true);
  }
  state_ = State::kAuthenticated;
  outcome.authenticated = true;
  return outcome;
}

}  // namespace strata::storage::remote::internal

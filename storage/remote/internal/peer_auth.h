// PeerAuth is one link's mutual authentication by the cluster secret, run by UcxTransport before
// anything else crosses the link: until both ends have proved that they hold the secret, neither
// sends its region, its rkey, a byte of KV or an answer to any request (internal to
// storage/remote).
//
// Protocol (challenge-response, HMAC-SHA256 from OpenSSL; the secret itself never crosses):
//   1. As the link opens, each end sends a challenge: its role (dialler or listener), the range
//      of wire versions it speaks, and a fresh 32-byte random nonce.
//   2. On the peer's challenge, each end checks it (magic, opposite role, a common version, a
//      nonce that is not one of its own) and sends its proof: HMAC(secret, transcript), where
//      the transcript names the prover's role and both challenges (the dialler's first), so a
//      proof is bound to this link's two nonces and to the versions both ends offered. A proof
//      message repeats its sender's challenge, so the two may arrive in either order.
//   3. On the peer's proof, each end checks it in constant time. A wrong proof is answered with
//      a refusal (no other content) and the link is closed.
// A replayed handshake fails (the other end's nonce is new on every link); a reflected one fails
// (a proof names its prover's role, and an end refuses a challenge carrying a nonce it issued
// itself, which is how a relay between two of one daemon's links would make it prove to itself).
//
// Not thread-safe: one PeerAuth per link, used on the transport's progress thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "storage/remote/internal/ucx_wire.h"

namespace strata::storage::remote::internal {

using AuthNonce = std::array<uint8_t, kAuthNonceBytes>;

// A nonce from OpenSSL's CSPRNG.
AuthNonce NewAuthNonce();

// The wire versions an end speaks (both inclusive).
struct WireVersions {
  uint16_t min = kMinWireVersion;
  uint16_t max = kWireVersion;
};

class PeerAuth {
 public:
  // `secret` must not be empty; `nonce` is this link's fresh nonce (NewAuthNonce()).
  PeerAuth(std::string_view secret, LinkRole role, WireVersions versions, AuthNonce nonce);

  // The first message this end sends.
  AuthMessage Challenge() const;

  struct Outcome {
    // To send to the peer (a proof, or a refusal before the link is closed).
    std::optional<AuthMessage> reply;
    // Not OK: close the link, for this reason (after sending `reply`, if any).
    absl::Status refused;
    // The peer has just proved that it holds the secret.
    bool authenticated = false;
  };
  // One authentication message from the peer (`bytes`, `length` as received). `is_own_nonce`
  // tells whether a nonce is one this transport issued on any link. A message after the link is
  // authenticated or refused, or of the wrong size, is a refusal.
  Outcome Receive(const void* bytes, size_t length,
                  absl::FunctionRef<bool(const AuthNonce&)> is_own_nonce);

  bool authenticated() const { return state_ == State::kAuthenticated; }
  const AuthNonce& nonce() const { return nonce_; }
  // The version both ends speak (the highest common one); 0 until the peer's challenge arrived.
  uint16_t version() const { return version_; }

 private:
  enum class State : uint8_t { kAwaitChallenge, kAwaitProof, kAuthenticated, kRefused };

  // Checks and records the peer's challenge (also carried by its proof); the refusal, if any.
  absl::Status TakeChallenge(const AuthMessage& message,
                             absl::FunctionRef<bool(const AuthNonce&)> is_own_nonce);
  AuthMessage Proof() const;
  // HMAC(secret, transcript) for the proof of `prover`.
  std::array<uint8_t, kAuthProofBytes> ProofOf(LinkRole prover) const;
  Outcome Refuse(absl::Status why, bool tell_peer);

  const std::string secret_;
  const LinkRole role_;
  const WireVersions versions_;
  const AuthNonce nonce_;
  State state_ = State::kAwaitChallenge;
  AuthMessage peer_challenge_{};
  uint16_t version_ = 0;
};

}  // namespace strata::storage::remote::internal

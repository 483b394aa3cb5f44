// PeerAuth's handshake between two ends in memory: who authenticates whom, in either message
// order, and every way a stranger, a replay or a reflection is refused.
#include "storage/remote/internal/peer_auth.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace strata::storage::remote::internal {
namespace {

bool NoneOwn(const AuthNonce&) { return false; }

// Delivers `message` to `to`, as the transport does with a kAmAuth header.
PeerAuth::Outcome Deliver(PeerAuth& to, const AuthMessage& message,
                          absl::FunctionRef<bool(const AuthNonce&)> own = NoneOwn) {
  return to.Receive(&message, sizeof(message), own);
}

struct Ends {
  PeerAuth dialler;
  PeerAuth listener;
};

Ends MakeEnds(std::string_view dialler_secret = "s3cret",
              std::string_view listener_secret = "s3cret", WireVersions dialler_versions = {},
              WireVersions listener_versions = {}) {
  return Ends{PeerAuth(dialler_secret, LinkRole::kDialler, dialler_versions, NewAuthNonce()),
              PeerAuth(listener_secret, LinkRole::kListener, listener_versions, NewAuthNonce())};
}

TEST(PeerAuthTest, HoldersOfOneSecretAuthenticateEachOther) {
  Ends ends = MakeEnds();
  PeerAuth::Outcome at_listener = Deliver(ends.listener, ends.dialler.Challenge());
  ASSERT_TRUE(at_listener.refused.ok()) << at_listener.refused;
  ASSERT_TRUE(at_listener.reply.has_value());
  EXPECT_EQ(at_listener.reply->step, static_cast<uint8_t>(AuthStep::kProof));
  EXPECT_FALSE(at_listener.authenticated);  // a challenge proves nothing

  PeerAuth::Outcome at_dialler = Deliver(ends.dialler, ends.listener.Challenge());
  ASSERT_TRUE(at_dialler.reply.has_value());
  PeerAuth::Outcome verified = Deliver(ends.dialler, *at_listener.reply);
  EXPECT_TRUE(verified.authenticated) << verified.refused;
  EXPECT_TRUE(ends.dialler.authenticated());
  PeerAuth::Outcome done = Deliver(ends.listener, *at_dialler.reply);
  EXPECT_TRUE(done.authenticated);
  EXPECT_FALSE(done.reply.has_value());
  EXPECT_TRUE(ends.listener.authenticated());
  EXPECT_EQ(ends.listener.version(), kWireVersion);
}

TEST(PeerAuthTest, AProofMayArriveBeforeTheChallenge) {
  Ends ends = MakeEnds();
  PeerAuth::Outcome at_listener = Deliver(ends.listener, ends.dialler.Challenge());
  // The dialler sees the listener's proof first: it carries the listener's challenge too.
  PeerAuth::Outcome at_dialler = Deliver(ends.dialler, *at_listener.reply);
  EXPECT_TRUE(at_dialler.authenticated) << at_dialler.refused;
  ASSERT_TRUE(at_dialler.reply.has_value());
  EXPECT_TRUE(Deliver(ends.listener, *at_dialler.reply).authenticated);
}

TEST(PeerAuthTest, AWrongSecretIsRefusedByBothEndsWithARefusalOnly) {
  Ends ends = MakeEnds("s3cret", "other");
  PeerAuth::Outcome at_listener = Deliver(ends.listener, ends.dialler.Challenge());
  PeerAuth::Outcome at_dialler = Deliver(ends.dialler, ends.listener.Challenge());
  PeerAuth::Outcome verdict = Deliver(ends.dialler, *at_listener.reply);
  EXPECT_EQ(verdict.refused.code(), absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(verdict.reply.has_value());
  EXPECT_EQ(verdict.reply->step, static_cast<uint8_t>(AuthStep::kRefusal));
  const AuthMessage empty{};
  EXPECT_EQ(0, std::memcmp(verdict.reply->nonce, empty.nonce, kAuthNonceBytes));
  EXPECT_EQ(0, std::memcmp(verdict.reply->proof, empty.proof, kAuthProofBytes));
  EXPECT_FALSE(ends.dialler.authenticated());
  EXPECT_EQ(Deliver(ends.listener, *at_dialler.reply).refused.code(),
            absl::StatusCode::kPermissionDenied);
  // An end that has refused takes nothing more.
  EXPECT_NE(Deliver(ends.listener, *verdict.reply).refused.message().find("after the handshake"),
            std::string::npos);
  // A fresh end that receives a refusal learns that its proof was refused.
  PeerAuth refused_end("s3cret", LinkRole::kDialler, {}, NewAuthNonce());
  EXPECT_NE(Deliver(refused_end, *verdict.reply).refused.message().find("secrets differ"),
            std::string::npos);
}

TEST(PeerAuthTest, AReplayedProofFailsOnANewLink) {
  // A recorded handshake: the dialler's challenge, and its proof over the old listener's nonce.
  Ends old_link = MakeEnds();
  const AuthMessage recorded_challenge = old_link.dialler.Challenge();
  const AuthMessage recorded_proof =
      *Deliver(old_link.dialler, old_link.listener.Challenge()).reply;

  PeerAuth fresh("s3cret", LinkRole::kListener, {}, NewAuthNonce());
  EXPECT_TRUE(Deliver(fresh, recorded_challenge).refused.ok());
  PeerAuth::Outcome replayed = Deliver(fresh, recorded_proof);
  EXPECT_EQ(replayed.refused.code(), absl::StatusCode::kPermissionDenied) << replayed.refused;
  EXPECT_FALSE(fresh.authenticated());
}

TEST(PeerAuthTest, AReflectedOrRelayedChallengeIsRefused) {
  PeerAuth mine("s3cret", LinkRole::kListener, {}, NewAuthNonce());
  PeerAuth other_link("s3cret", LinkRole::kDialler, {}, NewAuthNonce());
  // A stranger relays this daemon's own dialler challenge (from another of its links) back to it.
  const AuthMessage relayed = other_link.Challenge();
  const AuthNonce own = other_link.nonce();
  PeerAuth::Outcome outcome =
      Deliver(mine, relayed, [&](const AuthNonce& nonce) { return nonce == own; });
  EXPECT_EQ(outcome.refused.code(), absl::StatusCode::kPermissionDenied) << outcome.refused;
  ASSERT_TRUE(outcome.reply.has_value());
  EXPECT_EQ(outcome.reply->step, static_cast<uint8_t>(AuthStep::kRefusal));

  // A challenge claiming this end's own role is refused too (a proof names its prover's role).
  PeerAuth listener("s3cret", LinkRole::kListener, {}, NewAuthNonce());
  PeerAuth fake("s3cret", LinkRole::kListener, {}, NewAuthNonce());
  EXPECT_EQ(Deliver(listener, fake.Challenge()).refused.code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(PeerAuthTest, VersionsAreNegotiatedAndDisjointRangesRefused) {
  Ends ends = MakeEnds("s", "s", {.min = 2, .max = 3}, {.min = 2, .max = 2});
  Deliver(ends.listener, ends.dialler.Challenge());
  Deliver(ends.dialler, ends.listener.Challenge());
  EXPECT_EQ(ends.listener.version(), 2);
  EXPECT_EQ(ends.dialler.version(), 2);

  Ends apart = MakeEnds("s", "s", {.min = 3, .max = 3}, {.min = 2, .max = 2});
  EXPECT_EQ(Deliver(apart.listener, apart.dialler.Challenge()).refused.code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(PeerAuthTest, MalformedOrChangedMessagesAreRefused) {
  PeerAuth end("s", LinkRole::kListener, {}, NewAuthNonce());
  const char junk[5] = {1, 2, 3, 4, 5};
  EXPECT_FALSE(end.Receive(junk, sizeof(junk), NoneOwn).refused.ok());

  PeerAuth fresh("s", LinkRole::kListener, {}, NewAuthNonce());
  PeerAuth dialler("s", LinkRole::kDialler, {}, NewAuthNonce());
  AuthMessage wrong_magic = dialler.Challenge();
  wrong_magic.magic ^= 1;
  EXPECT_FALSE(Deliver(fresh, wrong_magic).refused.ok());

  // A proof whose challenge differs from the one the peer sent first.
  PeerAuth listener("s", LinkRole::kListener, {}, NewAuthNonce());
  Deliver(listener, dialler.Challenge());
  AuthMessage proof = *Deliver(dialler, listener.Challenge()).reply;
  proof.nonce[0] ^= 1;
  EXPECT_EQ(Deliver(listener, proof).refused.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(listener.authenticated());
}

}  // namespace
}  // namespace strata::storage::remote::internal

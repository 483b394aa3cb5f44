// FaultInjectingTransport around a real UcxTransport (tcp on lo): each fault shows the way its
// network counterpart does, and requests no rule matches pass through untouched.
#include "storage/remote/fault_injecting_transport.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>

#include "absl/synchronization/notification.h"
#include "storage/remote/ucx_transport.h"

namespace strata::storage::remote {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kRegionBytes = 4u << 20;

struct Outcome {
  absl::Notification done;
  absl::Status status;
  std::string reply;
  std::chrono::steady_clock::time_point at;

  Transport::Completion Completion() {
    return [this](absl::Status result) {
      status = std::move(result);
      at = std::chrono::steady_clock::now();
      done.Notify();
    };
  }
  Transport::Reply Reply() {
    return [this](absl::StatusOr<std::string> result) {
      status = result.status();
      if (result.ok()) reply = std::move(*result);
      at = std::chrono::steady_clock::now();
      done.Notify();
    };
  }
  absl::Status Wait() {
    if (!done.WaitForNotificationWithTimeout(absl::Seconds(20))) {
      return absl::InternalError("test: the request did not complete in time");
    }
    return status;
  }
};

Deadline In(std::chrono::milliseconds delay) { return std::chrono::steady_clock::now() + delay; }

class FaultInjectingTransportTest : public testing::Test {
 protected:
  void SetUp() override {
    for (size_t i = 0; i < server_region_.size(); ++i) {
      server_region_[i] = static_cast<std::byte>(i * 7 + 1);
    }
    server_ = Make(server_region_, "127.0.0.1:0", ServerHandlers());
    Transport::Handlers client_handlers;
    client_handlers.on_peer_down = [this](PeerId, const absl::Status&) { peer_down_.Notify(); };
    client_ = Make(client_region_, "", std::move(client_handlers));
    faulty_ = std::make_unique<FaultInjectingTransport>(*client_);
    auto peer = faulty_->Connect(server_->listen_address(), 10s);
    ASSERT_TRUE(peer.ok()) << peer.status();
    peer_ = *peer;
  }

  static Transport::Handlers ServerHandlers() {
    Transport::Handlers handlers;
    handlers.on_call = [](PeerId, std::string request, Transport::Reply reply) {
      std::move(reply)("reply to " + request);
    };
    return handlers;
  }

  static std::unique_ptr<UcxTransport> Make(std::vector<std::byte>& region, std::string listen,
                                            Transport::Handlers handlers) {
    UcxTransportOptions options;
    options.region = region;
    options.cluster_secret = "fault test secret";
    options.listen_address = std::move(listen);
    options.transports = "tcp";
    options.net_devices = "lo";
    options.handlers = std::move(handlers);
    auto created = UcxTransport::Create(std::move(options));
    EXPECT_TRUE(created.ok()) << created.status();
    return created.ok() ? std::move(*created) : nullptr;
  }

  std::vector<Segment> FirstMiB() {
    return {{.remote_offset = 0, .local = std::span(client_region_).first(1u << 20)}};
  }
  bool MatchesServer() const {
    return std::memcmp(client_region_.data(), server_region_.data(), 1u << 20) == 0;
  }

  std::vector<std::byte> server_region_ = std::vector<std::byte>(kRegionBytes);
  std::vector<std::byte> client_region_ = std::vector<std::byte>(kRegionBytes);
  absl::Notification peer_down_;
  std::unique_ptr<UcxTransport> server_;
  std::unique_ptr<UcxTransport> client_;
  std::unique_ptr<FaultInjectingTransport> faulty_;
  PeerId peer_ = 0;
};

TEST_F(FaultInjectingTransportTest, UnmatchedRequestsPassThrough) {
  faulty_->AddRule({.kind = FaultKind::kDrop, .peer = peer_ + 100});
  Outcome read;
  faulty_->Read(peer_, FirstMiB(), In(10s), read.Completion());
  ASSERT_TRUE(read.Wait().ok()) << read.status;
  EXPECT_TRUE(MatchesServer());
  Outcome call;
  faulty_->Call(peer_, "x", In(10s), call.Reply());
  ASSERT_TRUE(call.Wait().ok()) << call.status;
  EXPECT_EQ(call.reply, "reply to x");
  EXPECT_EQ(faulty_->counts().dropped, 0u);
}

TEST_F(FaultInjectingTransportTest, ADroppedRequestEndsAtItsDeadline) {
  faulty_->AddRule({.kind = FaultKind::kDrop, .requests = RequestKind::kCall, .count = 1});
  Outcome dropped;
  const auto start = std::chrono::steady_clock::now();
  faulty_->Call(peer_, "x", In(80ms), dropped.Reply());
  EXPECT_EQ(dropped.Wait().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(dropped.at - start, 80ms);
  EXPECT_LT(dropped.at - start, 2s);
  // The rule had one hit: the next call goes through.
  Outcome next;
  faulty_->Call(peer_, "y", In(10s), next.Reply());
  EXPECT_TRUE(next.Wait().ok()) << next.status;
  EXPECT_EQ(faulty_->counts().dropped, 1u);
}

TEST_F(FaultInjectingTransportTest, ADelayedRequestArrivesLateButWhole) {
  faulty_->AddRule({.kind = FaultKind::kDelay, .requests = RequestKind::kRead, .delay = 100ms});
  Outcome read;
  const auto start = std::chrono::steady_clock::now();
  faulty_->Read(peer_, FirstMiB(), In(10s), read.Completion());
  ASSERT_TRUE(read.Wait().ok()) << read.status;
  EXPECT_GE(read.at - start, 100ms);
  EXPECT_TRUE(MatchesServer());
}

TEST_F(FaultInjectingTransportTest, CorruptionFlipsOneByteOfWhatArrived) {
  faulty_->AddRule({.kind = FaultKind::kCorrupt, .count = 2});
  Outcome read;
  faulty_->Read(peer_, FirstMiB(), In(10s), read.Completion());
  ASSERT_TRUE(read.Wait().ok()) << read.status;
  size_t differing = 0;
  for (size_t i = 0; i < (1u << 20); ++i) differing += client_region_[i] != server_region_[i];
  EXPECT_EQ(differing, 1u);
  Outcome call;
  faulty_->Call(peer_, "abcd", In(10s), call.Reply());
  ASSERT_TRUE(call.Wait().ok()) << call.status;
  EXPECT_NE(call.reply, "reply to abcd");
  EXPECT_EQ(call.reply.size(), std::string("reply to abcd").size());
  EXPECT_EQ(faulty_->counts().corrupted, 2u);
}

TEST_F(FaultInjectingTransportTest, ACutLinkFailsTheTransferAndGoesDown) {
  faulty_->AddRule({.kind = FaultKind::kCut, .requests = RequestKind::kRead});
  Outcome read;
  faulty_->Read(peer_, FirstMiB(), In(10s), read.Completion());
  EXPECT_EQ(read.Wait().code(), absl::StatusCode::kUnavailable) << read.status;
  EXPECT_TRUE(peer_down_.WaitForNotificationWithTimeout(absl::Seconds(10)));
  Outcome after;
  faulty_->Call(peer_, "x", In(10s), after.Reply());
  EXPECT_EQ(after.Wait().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(faulty_->counts().cut, 1u);
}

TEST_F(FaultInjectingTransportTest, HeldRequestsCanBeCancelledAndDieWithTheWrapper) {
  faulty_->AddRule({.kind = FaultKind::kDrop});
  Outcome cancelled;
  const RequestId id = faulty_->Call(peer_, "x", In(60s), cancelled.Reply());
  faulty_->Cancel(id);
  EXPECT_EQ(cancelled.Wait().code(), absl::StatusCode::kCancelled);
  Outcome orphan;
  faulty_->Read(peer_, FirstMiB(), In(60s), orphan.Completion());
  faulty_.reset();
  EXPECT_EQ(orphan.Wait().code(), absl::StatusCode::kCancelled);
}

TEST_F(FaultInjectingTransportTest, CancelReachesAForwardedRequest) {
  Transport::Handlers silent;
  std::vector<Transport::Reply> held;
  absl::Mutex held_mu;
  // A server that never answers, so the forwarded call is in flight when it is cancelled.
  std::vector<std::byte> region(kRegionBytes);
  silent.on_call = [&](PeerId, std::string, Transport::Reply reply) {
    absl::MutexLock lock(&held_mu);
    held.push_back(std::move(reply));
  };
  auto quiet = Make(region, "127.0.0.1:0", std::move(silent));
  auto peer = faulty_->Connect(quiet->listen_address(), 10s);
  ASSERT_TRUE(peer.ok()) << peer.status();
  Outcome call;
  const RequestId id = faulty_->Call(*peer, "x", In(60s), call.Reply());
  faulty_->Cancel(id);
  EXPECT_EQ(call.Wait().code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace strata::storage::remote

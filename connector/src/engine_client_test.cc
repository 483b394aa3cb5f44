#include "connector/src/engine_client.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <atomic>
#include <cstring>
#include <numeric>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "connector/src/testing/test_daemon.h"
#include "core/frame_io.h"
#include "core/key_hasher.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "strata/v1/engine.pb.h"
#include "tests/support/test_layout.h"

namespace strata::connector::internal {
namespace {

using std::chrono::milliseconds;
using testing::TestDaemon;

KvLayout TestLayout() { return test_support::SmallLayout({.model_id = "client-test"}); }

std::vector<ChunkKey> Keys(size_t num_chunks, uint32_t first_token = 0) {
  std::vector<uint32_t> tokens(num_chunks * 16);
  std::iota(tokens.begin(), tokens.end(), first_token);
  return KeyHasher::Create(TestLayout(), {})->PrefixKeys(tokens, {});
}

EngineClientOptions ClientOptions(const std::string& path) {
  EngineClientOptions options;
  options.socket_path = path;
  options.engine_id = "client-test";
  options.layout = TestLayout();
  return options;
}

// A peer we control: listens on a socket, answers handshakes like a daemon (with a memfd arena),
// then misbehaves as told.
class FakePeer {
 public:
  enum class Mode {
    kSilent,           // never answers requests after the handshake
    kWrongRequestId,   // answers with another request id
    kSilentHandshake,  // never answers the handshake
    kLate,             // answers every request, kLateBy after it arrived
  };
  static constexpr milliseconds kLateBy{60};

  FakePeer(std::string path, Mode mode) : path_(std::move(path)), mode_(mode) {
    listen_.Reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path_.c_str(), sizeof(address.sun_path) - 1);
    ::unlink(path_.c_str());
    EXPECT_EQ(::bind(listen_.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    EXPECT_EQ(::listen(listen_.get(), 8), 0);
    thread_ = std::jthread([this](std::stop_token stop) { Run(stop); });
  }
  ~FakePeer() {
    thread_.request_stop();
    ::shutdown(listen_.get(), SHUT_RDWR);
    thread_.join();
    ::unlink(path_.c_str());
  }

  int requests_seen() const { return requests_.load(); }
  // Handles named by the abort requests received (kLate).
  std::vector<uint64_t> aborted() const {
    absl::MutexLock lock(&mu_);
    return aborted_;
  }

 private:
  void Run(std::stop_token stop) {
    while (!stop.stop_requested()) {
      ScopedFd conn(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!conn.valid()) return;
      Serve(conn.get(), stop);
    }
  }

  void Serve(int fd, std::stop_token stop) {
    while (!stop.stop_requested()) {
      auto frame = RecvFrame(fd, milliseconds(50));
      if (!frame.ok()) {
        if (frame.status().code() == absl::StatusCode::kDeadlineExceeded) continue;
        return;
      }
      v1::EngineRequest request;
      ASSERT_TRUE(request.ParseFromString(frame->payload));
      v1::EngineResponse response;
      response.set_request_id(request.request_id());
      if (request.has_handshake()) {
        if (mode_ == Mode::kSilentHandshake) continue;
        auto* body = response.mutable_handshake();
        body->set_session_id(77);
        body->set_protocol_version(v1::ENGINE_PROTOCOL_VERSION);
        body->set_arena_size_bytes(1 << 16);
        body->set_page_bytes(4096);
        body->set_layout_fingerprint(TestLayout().Fingerprint());
        ScopedFd arena(::memfd_create("fake-arena", MFD_CLOEXEC));
        ASSERT_EQ(::ftruncate(arena.get(), 1 << 16), 0);
        const int arena_fd[] = {arena.get()};
        ASSERT_TRUE(SendFrame(fd, response.SerializeAsString(), milliseconds(100), arena_fd).ok());
        continue;
      }
      ++requests_;
      if (mode_ == Mode::kSilent) continue;
      if (mode_ == Mode::kLate) {
        std::this_thread::sleep_for(kLateBy);
        AnswerLate(request, response);
        (void)SendFrame(fd, response.SerializeAsString(), milliseconds(100));
        continue;
      }
      response.set_request_id(request.request_id() + 100);
      response.mutable_lookup()->set_hit_chunks(1);
      (void)SendFrame(fd, response.SerializeAsString(), milliseconds(100));
    }
  }

  // A lookup hits one chunk, a store reserves a handle per item, an abort is recorded.
  void AnswerLate(const v1::EngineRequest& request, v1::EngineResponse& response) {
    if (request.has_prepare_store()) {
      for (int i = 0; i < request.prepare_store().items_size(); ++i) {
        response.mutable_prepare_store()->add_chunks()->set_handle(1000 + i);
      }
    } else if (request.has_abort()) {
      absl::MutexLock lock(&mu_);
      for (uint64_t handle : request.abort().handles()) {
        aborted_.push_back(handle);
        response.mutable_handles()->add_statuses();
      }
    } else {
      response.mutable_lookup()->set_hit_chunks(1);
    }
  }

  const std::string path_;
  const Mode mode_;
  ScopedFd listen_;
  std::atomic<int> requests_{0};
  mutable absl::Mutex mu_;
  std::vector<uint64_t> aborted_ ABSL_GUARDED_BY(mu_);
  std::jthread thread_;
};

TEST(EngineClientTest, ConnectsHandshakesAndMapsTheArena) {
  TestDaemon daemon;
  ASSERT_TRUE(daemon.Start().ok());
  std::vector<std::pair<void*, uint64_t>> mapped;
  std::vector<void*> unmapped;
  EngineClientOptions options = ClientOptions(daemon.socket_path());
  options.hooks.on_map = [&](void* base, uint64_t size) {
    mapped.emplace_back(base, size);
    return absl::OkStatus();
  };
  options.hooks.on_unmap = [&](void* base) { unmapped.push_back(base); };
  auto client = EngineClient::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_FALSE((*client)->connected());
  ASSERT_TRUE((*client)->Connect(milliseconds(1000)).ok());
  EXPECT_TRUE((*client)->connected());
  EXPECT_EQ((*client)->generation(), 1u);
  EXPECT_NE((*client)->session_id(), 0u);
  ASSERT_EQ(mapped.size(), 1u);
  EXPECT_EQ(mapped[0].second, daemon.tier()->arena_size_bytes());
  // Dropping the session drops the client's mapping: the unmap hook runs.
  (*client)->Disconnect();
  EXPECT_FALSE((*client)->connected());
  ASSERT_EQ(unmapped.size(), 1u);
  EXPECT_EQ(unmapped[0], mapped[0].first);
  EXPECT_EQ((*client)->stats().connects, 1u);
}

// The client maps the arena's pages into its mapping on a thread of its own as the daemon
// allocates them, and allocates none itself (the engine's cgroup is never charged for them).
TEST(EngineClientTest, MapsTheArenaPagesTheDaemonAllocatesAndAllocatesNone) {
  TestDaemon daemon({.capacity_bytes = 3 * BackgroundPrefault::kStepBytes, .page_bytes = 2 << 20});
  ASSERT_TRUE(daemon.Start().ok());
  auto client = *EngineClient::Create(ClientOptions(daemon.socket_path()));
  ASSERT_TRUE(client->Connect(milliseconds(1000)).ok());
  const auto allocated = [&] {
    struct stat st {};
    EXPECT_EQ(::fstat(daemon.tier()->arena_fd(), &st), 0);
    return static_cast<uint64_t>(st.st_blocks) * 512;
  };
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_EQ(client->arena_prefaulted_bytes(), 0u);
  EXPECT_EQ(allocated(), 0u) << "the client allocated arena pages";

  const BackgroundPrefault daemon_side(daemon.tier()->arena_pages(),
                                       BackgroundPrefault::Mode::kAllocate);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (client->arena_prefaulted_bytes() < daemon.tier()->arena_size_bytes() &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(client->arena_prefaulted_bytes(), daemon.tier()->arena_size_bytes());
  EXPECT_EQ(allocated(), daemon.tier()->arena_size_bytes());
}

// Records the token ids of every stored chunk, in commit order.
class TokenRecorder final : public storage::ChunkObserver {
 public:
  void OnStored(const ChunkKey&, const ChunkKey&, uint32_t,
                std::span<const uint32_t> token_ids) override {
    stored.emplace_back(token_ids.begin(), token_ids.end());
  }
  void OnRemoved(const ChunkKey&, storage::RemovalCause) override {}
  void OnCleared() override {}

  std::vector<std::vector<uint32_t>> stored;
};

TEST(EngineClientTest, SendsTokenIdsOnlyWhenTheDaemonAsks) {
  std::vector<uint32_t> tokens(32);
  std::iota(tokens.begin(), tokens.end(), 500);
  const std::vector<ChunkKey> keys = Keys(2);
  for (const bool asked : {true, false}) {
    TokenRecorder recorder;
    TestDaemon daemon({.observer = &recorder, .kv_event_token_ids = asked});
    ASSERT_TRUE(daemon.Start().ok());
    auto client = *EngineClient::Create(ClientOptions(daemon.socket_path()));
    // The store opens the session itself: it still knows whether to send tokens.
    std::vector<StoreItem> items;
    for (size_t i = 0; i < keys.size(); ++i) {
      items.push_back(
          {.key = keys[i], .num_tokens = 16, .token_ids = std::span(tokens).subspan(16 * i, 16)});
    }
    auto stored = client->PrepareStore(items, milliseconds(1000));
    ASSERT_TRUE(stored.ok()) << stored.status();
    std::vector<uint64_t> handles;
    for (const StorePlacement& p : stored->value) {
      ASSERT_TRUE(p.status.ok()) << p.status;
      handles.push_back(p.handle);
    }
    ASSERT_TRUE(client->Commit(stored->generation, handles, milliseconds(1000)).ok());
    const std::vector<std::vector<uint32_t>> expected =
        asked ? std::vector<std::vector<uint32_t>>{{tokens.begin(), tokens.begin() + 16},
                                                   {tokens.begin() + 16, tokens.end()}}
              : std::vector<std::vector<uint32_t>>{{}, {}};
    EXPECT_EQ(recorder.stored, expected) << "asked: " << asked;
  }
}

TEST(EngineClientTest, StoresThenLoadsThroughTheArena) {
  TestDaemon daemon;
  ASSERT_TRUE(daemon.Start().ok());
  auto client = *EngineClient::Create(ClientOptions(daemon.socket_path()));
  const std::vector<ChunkKey> keys = Keys(3);
  const uint64_t chunk_bytes = TestLayout().chunk_bytes(16);

  auto lookup = client->LookupChain(keys, milliseconds(1000));
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  EXPECT_EQ(lookup->chunks, 0u);

  std::vector<StoreItem> items;
  for (size_t i = 0; i < keys.size(); ++i) {
    items.push_back({keys[i], 16, i > 0 ? keys[i - 1] : ChunkKey()});
  }
  auto stored = client->PrepareStore(items, milliseconds(1000));
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->value.size(), 3u);
  ASSERT_NE(stored->arena, nullptr);
  std::vector<uint64_t> handles;
  for (size_t i = 0; i < 3; ++i) {
    const StorePlacement& p = stored->value[i];
    ASSERT_TRUE(p.status.ok()) << p.status;
    ASSERT_EQ(p.disposition, StoreDisposition::kReserved);
    ASSERT_EQ(p.size_bytes, chunk_bytes);
    uint64_t written = 0;
    for (const ArenaExtent& e : p.extents) {
      ASSERT_TRUE(stored->arena->Contains(e.offset, e.length));
      for (uint64_t b = 0; b < e.length; ++b) {
        stored->arena->base()[e.offset + b] = static_cast<std::byte>((written + b) * 3 + i);
      }
      written += e.length;
    }
    EXPECT_EQ(written, chunk_bytes);
    handles.push_back(p.handle);
  }
  auto committed = client->Commit(stored->generation, handles, milliseconds(1000));
  ASSERT_TRUE(committed.ok()) << committed.status();
  for (const absl::Status& s : *committed) EXPECT_TRUE(s.ok()) << s;

  auto hit = client->LookupChain(keys, milliseconds(1000));
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(hit->chunks, 3u);
  EXPECT_EQ(hit->host_chunks, 3u);  // the test daemon has only a host tier
  // A second store of the same keys has nothing to write.
  auto again = client->PrepareStore(items, milliseconds(1000));
  ASSERT_TRUE(again.ok());
  for (const StorePlacement& p : again->value) {
    EXPECT_EQ(p.disposition, StoreDisposition::kAlreadyPresent);
  }

  auto loaded = client->PrepareLoad(keys, 0, milliseconds(1000));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::vector<uint64_t> leases;
  for (size_t i = 0; i < 3; ++i) {
    const LoadPlacement& p = loaded->value[i];
    ASSERT_TRUE(p.status.ok()) << p.status;
    std::vector<std::byte> payload;
    for (const ArenaExtent& e : p.extents) {
      payload.insert(payload.end(), loaded->arena->base() + e.offset,
                     loaded->arena->base() + e.offset + e.length);
    }
    ASSERT_EQ(payload.size(), chunk_bytes);
    for (uint64_t b = 0; b < chunk_bytes; ++b) {
      ASSERT_EQ(payload[b], static_cast<std::byte>(b * 3 + i)) << "chunk " << i << " byte " << b;
    }
    EXPECT_EQ(p.checksum, XXH3_64bits(payload.data(), payload.size()));
    leases.push_back(p.handle);
  }
  auto released = client->Release(loaded->generation, leases, milliseconds(1000));
  ASSERT_TRUE(released.ok());
  for (const absl::Status& s : *released) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(client->stats().disconnects, 0u);
}

TEST(EngineClientTest, SilentDaemonTimesOutWithinTheBudgetAndIsDroppedOnceItOwesTooMuch) {
  TestDaemon dir;  // only for a temp directory
  FakePeer peer((dir.dir() / "silent.sock").string(), FakePeer::Mode::kSilent);
  auto client = *EngineClient::Create(ClientOptions((dir.dir() / "silent.sock").string()));
  ASSERT_TRUE(client->Connect(milliseconds(1000)).ok());
  const auto start = std::chrono::steady_clock::now();
  auto lookup = client->LookupChain(Keys(4), milliseconds(20));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(lookup.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(took, milliseconds(19));
  EXPECT_LT(took, milliseconds(80));
  EXPECT_TRUE(client->connected()) << "a late reply is no reason to drop the session";
  EXPECT_EQ(client->stats().timeouts, 1u);
  EXPECT_EQ(client->stats().disconnects, 0u);
  // A daemon that owes more than kMaxOwedReplies answers no more: the session is dropped.
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(client->LookupChain(Keys(4), milliseconds(2)).status().code(),
              absl::StatusCode::kDeadlineExceeded);
  }
  EXPECT_FALSE(client->connected());
  EXPECT_EQ(client->stats().disconnects, 1u);
  // Inside the backoff period the next call fails at once, without a connect attempt.
  const auto again_start = std::chrono::steady_clock::now();
  EXPECT_EQ(client->LookupChain(Keys(4), milliseconds(20)).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - again_start, milliseconds(5));
  EXPECT_EQ(client->stats().connects, 1u);
}

TEST(EngineClientTest, LateRepliesAreDiscardedAndWhatTheyGrantedIsGivenBack) {
  TestDaemon dir;
  FakePeer peer((dir.dir() / "late.sock").string(), FakePeer::Mode::kLate);
  auto client = *EngineClient::Create(ClientOptions((dir.dir() / "late.sock").string()));
  ASSERT_TRUE(client->Connect(milliseconds(1000)).ok());
  EXPECT_EQ(client->LookupChain(Keys(2), milliseconds(10)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  const std::vector<ChunkKey> keys = Keys(2);
  std::vector<StoreItem> items(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) items[i] = {.key = keys[i], .num_tokens = 16};
  EXPECT_EQ(client->PrepareStore(items, milliseconds(10)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  // The next call reads both late replies first, then gets its own answer, on the same session;
  // the call after it first aborts the reservations the late store reply made.
  auto lookup = client->LookupChain(Keys(2), milliseconds(2000));
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  EXPECT_EQ(lookup->chunks, 1u);
  EXPECT_TRUE(client->connected());
  EXPECT_EQ(client->stats().late_replies, 2u);
  EXPECT_TRUE(peer.aborted().empty());
  ASSERT_TRUE(client->LookupChain(Keys(2), milliseconds(2000)).ok());
  EXPECT_EQ(peer.aborted(), (std::vector<uint64_t>{1000, 1001}));
  EXPECT_EQ(client->stats().disconnects, 0u);
  EXPECT_EQ(client->stats().connects, 1u);
}

TEST(EngineClientTest, SilentHandshakeFailsWithinTheBudget) {
  TestDaemon dir;
  FakePeer peer((dir.dir() / "mute.sock").string(), FakePeer::Mode::kSilentHandshake);
  auto client = *EngineClient::Create(ClientOptions((dir.dir() / "mute.sock").string()));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(client->LookupChain(Keys(1), milliseconds(20)).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(80));
  EXPECT_FALSE(client->connected());
  EXPECT_EQ(client->stats().connect_failures, 1u);
}

TEST(EngineClientTest, ResponseToAnotherRequestDropsTheSession) {
  TestDaemon dir;
  FakePeer peer((dir.dir() / "wrong.sock").string(), FakePeer::Mode::kWrongRequestId);
  auto client = *EngineClient::Create(ClientOptions((dir.dir() / "wrong.sock").string()));
  auto lookup = client->LookupChain(Keys(2), milliseconds(500));
  EXPECT_EQ(lookup.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(client->connected());
  EXPECT_EQ(client->stats().disconnects, 1u);
}

TEST(EngineClientTest, ReconnectsWithBackoffAndNeverReusesOldHandles) {
  TestDaemon daemon;
  ManualClock clock;
  EngineClientOptions options = ClientOptions(daemon.socket_path());
  options.clock = &clock;
  options.reconnect_min_backoff = milliseconds(100);
  options.reconnect_max_backoff = milliseconds(400);
  auto client = *EngineClient::Create(options);

  // No daemon yet: the attempt fails; the next ones wait for the backoff.
  EXPECT_EQ(client->Connect(milliseconds(100)).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(client->stats().connect_failures, 1u);
  ASSERT_TRUE(daemon.Start().ok());
  EXPECT_EQ(client->LookupChain(Keys(1), milliseconds(100)).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(client->stats().connect_failures, 1u) << "no attempt inside the backoff";
  clock.Advance(milliseconds(100));
  ASSERT_TRUE(client->LookupChain(Keys(1), milliseconds(1000)).ok());
  const uint64_t first_generation = client->generation();
  EXPECT_EQ(first_generation, 1u);

  // A lease on the first session.
  std::vector<StoreItem> items = {{Keys(1)[0], 16, ChunkKey()}};
  auto stored = client->PrepareStore(items, milliseconds(1000));
  ASSERT_TRUE(stored.ok());
  ASSERT_TRUE(client
                  ->Commit(stored->generation, std::vector<uint64_t>{stored->value[0].handle},
                           milliseconds(1000))
                  .ok());
  auto leased = client->PrepareLoad(Keys(1), 0, milliseconds(1000));
  ASSERT_TRUE(leased.ok());
  ASSERT_TRUE(leased->value[0].status.ok());

  // The daemon goes away: the next call fails and drops the session.
  daemon.Stop();
  EXPECT_FALSE(client->LookupChain(Keys(1), milliseconds(200)).ok());
  EXPECT_FALSE(client->connected());
  ASSERT_TRUE(daemon.Start(/*keep_tier=*/true).ok());
  EXPECT_EQ(client->LookupChain(Keys(1), milliseconds(200)).status().code(),
            absl::StatusCode::kUnavailable);
  clock.Advance(milliseconds(100));
  auto after = client->LookupChain(Keys(1), milliseconds(1000));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->chunks, 1u) << "the tier kept the chunk";
  EXPECT_EQ(client->generation(), first_generation + 1);

  // The lease of the old session died with it: releasing it is refused without being sent.
  const uint64_t requests_before = client->stats().requests;
  auto released = client->Release(
      leased->generation, std::vector<uint64_t>{leased->value[0].handle}, milliseconds(1000));
  EXPECT_EQ(released.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(client->stats().requests, requests_before);
  // The old session's arena mapping stays valid while a result holds it.
  EXPECT_NE(leased->arena, nullptr);
  EXPECT_EQ(leased->arena->generation(), first_generation);
}

TEST(EngineClientTest, DaemonErrorsKeepTheSession) {
  TestDaemon daemon;
  ASSERT_TRUE(daemon.Start().ok());
  auto client = *EngineClient::Create(ClientOptions(daemon.socket_path()));
  KvLayout other = TestLayout();
  other.model_id = "another-model";
  std::vector<uint32_t> tokens(16, 1);
  const std::vector<ChunkKey> foreign = KeyHasher::Create(other, {})->PrefixKeys(tokens, {});
  auto lookup = client->LookupChain(foreign, milliseconds(1000));
  EXPECT_EQ(lookup.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(client->connected());
  EXPECT_TRUE(client->LookupChain(Keys(1), milliseconds(1000)).ok());
  EXPECT_EQ(client->stats().disconnects, 0u);
}

TEST(EngineClientTest, RejectsUnusableOptions) {
  EngineClientOptions options = ClientOptions("");
  EXPECT_EQ(EngineClient::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = ClientOptions(std::string(200, 'x'));
  EXPECT_EQ(EngineClient::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = ClientOptions("/tmp/x.sock");
  options.layout.num_layers = 0;
  EXPECT_EQ(EngineClient::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = ClientOptions("/tmp/x.sock");
  options.reconnect_max_backoff = milliseconds(1);
  EXPECT_EQ(EngineClient::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::connector::internal

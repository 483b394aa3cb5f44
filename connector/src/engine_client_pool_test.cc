// EngineClient's device pool (T0) calls against the daemon's real session server (TestDaemon with
// a HostRuntime pool): the grant mapped at handshake and again after a reconnect, chunks written
// by one engine and read in place by another, and the failures an engine must survive.
#include <cstring>
#include <numeric>
#include <thread>

#include "connector/src/engine_client.h"
#include "connector/src/testing/pool_pages.h"
#include "connector/src/testing/test_daemon.h"
#include "core/key_hasher.h"
#include "gtest/gtest.h"
#include "storage/device/host_runtime.h"
#include "tests/support/test_layout.h"

namespace strata::connector::internal {
namespace {

using std::chrono::milliseconds;
using testing::FillPoolPages;
using testing::PoolPagesHold;
using testing::TestDaemon;

constexpr milliseconds kTimeout{2000};

KvLayout PoolLayout() { return test_support::SmallLayout({.model_id = "pool-client-test"}); }

// 2 layers x 2 KiB per 16-token page: 8 pages.
testing::TestDaemonOptions PoolDaemon() { return {.device_pool_bytes = 8 * 4096}; }

std::vector<ChunkKey> PicKeys(size_t num_chunks, uint32_t first_token = 0) {
  const auto hasher = KeyHasher::Create(PoolLayout(), {});
  std::vector<ChunkKey> keys;
  for (size_t i = 0; i < num_chunks; ++i) {
    std::vector<uint32_t> tokens(32);
    std::iota(tokens.begin(), tokens.end(), first_token + 1000 * static_cast<uint32_t>(i));
    keys.push_back(hasher->PicKey(tokens, /*compile_variant=*/0));
  }
  return keys;
}

EngineClientOptions Options(const std::string& path, storage::DeviceRuntime* runtime,
                            std::string engine_id) {
  EngineClientOptions options;
  options.socket_path = path;
  options.engine_id = std::move(engine_id);
  options.layout = PoolLayout();
  options.device_runtime = runtime;
  options.reconnect_min_backoff = milliseconds(1);
  options.reconnect_max_backoff = milliseconds(1);
  return options;
}

TEST(EngineClientPoolTest, TheHandshakeMapsTheGrantedPool) {
  TestDaemon daemon(PoolDaemon());
  ASSERT_TRUE(daemon.Start().ok());
  storage::HostRuntime runtime;
  auto client = *EngineClient::Create(Options(daemon.socket_path(), &runtime, "writer"));
  ASSERT_TRUE(client->Connect(kTimeout).ok());
  const std::optional<DevicePoolGrant> grant = client->device_pool();
  ASSERT_TRUE(grant.has_value());
  EXPECT_EQ(grant->backend, "host");
  EXPECT_EQ(grant->geometry.num_layers, 2u);
  EXPECT_EQ(grant->geometry.num_pages, 8u);
  EXPECT_EQ(grant->geometry.page_bytes, 2048u);
  EXPECT_EQ(grant->block_tokens, 16u);

  // The daemon's pool and the client's mapping are the same memory.
  storage::DevicePool* pool = *daemon.device_pools()->ForLayout(PoolLayout());
  std::memset(pool->PageData(1, 6), 0x5a, grant->geometry.page_bytes);
  auto reserved = client->PoolReserve(PicKeys(1), std::vector<uint32_t>{1}, kTimeout);
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  ASSERT_NE(reserved->device_pool, nullptr);
  EXPECT_EQ(reserved->device_pool->generation(), client->generation());
  const std::byte* mapped = reserved->device_pool->base() + pool->geometry().offset(1, 6);
  EXPECT_EQ(mapped[0], std::byte{0x5a});
  EXPECT_EQ(mapped[grant->geometry.page_bytes - 1], std::byte{0x5a});
}

// One engine reserves, writes and commits chunks; another finds them, references them and reads
// the same pages in place (not copies); released, they stay resident.
TEST(EngineClientPoolTest, ChunksWrittenByOneEngineAreReadInPlaceByAnother) {
  TestDaemon daemon(PoolDaemon());
  ASSERT_TRUE(daemon.Start().ok());
  storage::HostRuntime runtime;
  auto writer = *EngineClient::Create(Options(daemon.socket_path(), &runtime, "writer"));
  auto reader = *EngineClient::Create(Options(daemon.socket_path(), &runtime, "reader"));
  const std::vector<ChunkKey> keys = PicKeys(2);

  auto before = reader->PoolLookup(keys, kTimeout);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(*before, (std::vector<bool>{false, false}));

  auto reserved = writer->PoolReserve(keys, std::vector<uint32_t>{2, 3}, kTimeout);
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  ASSERT_EQ(reserved->value.size(), 2u);
  std::vector<uint64_t> handles;
  for (size_t i = 0; i < 2; ++i) {
    const PoolPlacement& chunk = reserved->value[i];
    ASSERT_TRUE(chunk.status.ok()) << chunk.status;
    EXPECT_EQ(chunk.pages.size(), i == 0 ? 2u : 3u);
    FillPoolPages(*reserved->device_pool, chunk.pages, static_cast<uint8_t>(0x30 + i));
    handles.push_back(chunk.handle);
  }
  auto committed = writer->Commit(reserved->generation, handles, kTimeout);
  ASSERT_TRUE(committed.ok()) << committed.status();
  for (const absl::Status& status : *committed) EXPECT_TRUE(status.ok()) << status;

  auto after = reader->PoolLookup(keys, kTimeout);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, (std::vector<bool>{true, true}));
  auto acquired = reader->PoolAcquire(keys, kTimeout);
  ASSERT_TRUE(acquired.ok()) << acquired.status();
  ASSERT_EQ(acquired->value.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const PoolPlacement& chunk = acquired->value[i];
    ASSERT_TRUE(chunk.status.ok()) << chunk.status;
    EXPECT_EQ(chunk.pages, reserved->value[i].pages) << "the same pages, not a copy";
    EXPECT_TRUE(PoolPagesHold(*acquired->device_pool, chunk.pages, static_cast<uint8_t>(0x30 + i)));
  }
  EXPECT_NE(acquired->device_pool.get(), reserved->device_pool.get())
      << "each client maps the pool itself";

  // A chunk already there is not reserved again; an unknown one is not acquired.
  auto again = writer->PoolReserve(std::span(keys).first(1), std::vector<uint32_t>{2}, kTimeout);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->value[0].status.code(), absl::StatusCode::kAlreadyExists);
  auto missing = reader->PoolAcquire(PicKeys(1, 77), kTimeout);
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->value[0].status.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(missing->value[0].pages.empty());

  std::vector<uint64_t> refs{acquired->value[0].handle, acquired->value[1].handle};
  auto released = reader->Release(acquired->generation, refs, kTimeout);
  ASSERT_TRUE(released.ok());
  for (const absl::Status& status : *released) EXPECT_TRUE(status.ok()) << status;
  const storage::DevicePoolStats stats = (*daemon.device_pools()->ForLayout(PoolLayout()))->Stats();
  EXPECT_EQ(stats.referenced_pages, 0u);
  EXPECT_EQ(stats.committed_pages, 5u);
}

// Admission refuses what free plus evictable pages cannot cover, per chunk, and the session
// keeps serving; bad arguments are refused before anything is sent.
TEST(EngineClientPoolTest, RefusalsArePerChunkAndKeepTheSession) {
  TestDaemon daemon(PoolDaemon());
  ASSERT_TRUE(daemon.Start().ok());
  storage::HostRuntime runtime;
  auto client = *EngineClient::Create(Options(daemon.socket_path(), &runtime, "engine"));
  const std::vector<ChunkKey> keys = PicKeys(2);
  auto reserved = client->PoolReserve(keys, std::vector<uint32_t>{6, 6}, kTimeout);
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  EXPECT_TRUE(reserved->value[0].status.ok()) << reserved->value[0].status;
  EXPECT_EQ(reserved->value[1].status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(reserved->value[1].handle, 0u);

  const uint64_t sent = client->stats().requests;
  auto mismatched = client->PoolReserve(keys, std::vector<uint32_t>{1}, kTimeout);
  EXPECT_EQ(mismatched.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->stats().requests, sent) << "nothing sent";

  // Prefix keys are not pool keys: the daemon's INVALID_ARGUMENT, and the session stays.
  const std::vector<uint32_t> tokens(16, 3);
  const std::vector<ChunkKey> prefix = KeyHasher::Create(PoolLayout(), {})->PrefixKeys(tokens, {});
  EXPECT_EQ(client->PoolLookup(prefix, kTimeout).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(client->connected());
  const std::vector<uint64_t> handle{reserved->value[0].handle};
  auto aborted = client->Abort(reserved->generation, handle, kTimeout);
  ASSERT_TRUE(aborted.ok());
  EXPECT_TRUE((*aborted)[0].ok()) << (*aborted)[0];
}

// Without a device runtime the grant is known and lookups work, but nothing that hands out pages
// is sent; a daemon without pools answers FAILED_PRECONDITION.
TEST(EngineClientPoolTest, WithoutAMappedPoolNothingHandsOutPages) {
  TestDaemon daemon(PoolDaemon());
  ASSERT_TRUE(daemon.Start().ok());
  auto unmapped = *EngineClient::Create(Options(daemon.socket_path(), nullptr, "scheduler"));
  ASSERT_TRUE(unmapped->Connect(kTimeout).ok());
  EXPECT_TRUE(unmapped->device_pool().has_value());
  EXPECT_TRUE(unmapped->PoolLookup(PicKeys(1), kTimeout).ok());
  const uint64_t sent = unmapped->stats().requests;
  EXPECT_EQ(unmapped->PoolAcquire(PicKeys(1), kTimeout).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(unmapped->PoolReserve(PicKeys(1), std::vector<uint32_t>{1}, kTimeout).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(unmapped->stats().requests, sent) << "nothing sent";

  TestDaemon plain;
  ASSERT_TRUE(plain.Start().ok());
  storage::HostRuntime runtime;
  auto client = *EngineClient::Create(Options(plain.socket_path(), &runtime, "engine"));
  ASSERT_TRUE(client->Connect(kTimeout).ok());
  EXPECT_FALSE(client->device_pool().has_value());
  EXPECT_EQ(client->PoolLookup(PicKeys(1), kTimeout).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client->PoolAcquire(PicKeys(1), kTimeout).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(client->connected());
}

// A dropped session takes its references and reservations with it (the daemon returns the
// pages), but the pages an engine still reads stay mapped; the next session maps the pool again
// under a new generation, and the old handles are refused without being sent.
TEST(EngineClientPoolTest, AReconnectMapsThePoolAgainAndOldHandlesDie) {
  TestDaemon daemon(PoolDaemon());
  ASSERT_TRUE(daemon.Start().ok());
  storage::HostRuntime runtime;
  auto client = *EngineClient::Create(Options(daemon.socket_path(), &runtime, "engine"));
  const std::vector<ChunkKey> keys = PicKeys(1);
  auto reserved = client->PoolReserve(keys, std::vector<uint32_t>{4}, kTimeout);
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  ASSERT_TRUE(reserved->value[0].status.ok());
  FillPoolPages(*reserved->device_pool, reserved->value[0].pages, 0x77);

  client->Disconnect();
  EXPECT_FALSE(client->device_pool().has_value());
  EXPECT_TRUE(PoolPagesHold(*reserved->device_pool, reserved->value[0].pages, 0x77))
      << "the old mapping lives while a result holds it";
  const std::vector<uint64_t> handle{reserved->value[0].handle};
  EXPECT_EQ(client->Commit(reserved->generation, handle, kTimeout).status().code(),
            absl::StatusCode::kAborted);

  // The daemon aborted the dead session's reservation: its 4 pages are free again.
  storage::DevicePool* pool = *daemon.device_pools()->ForLayout(PoolLayout());
  const uint64_t deadline_ms = 2000;
  for (uint64_t waited = 0; pool->Stats().reserved_pages != 0 && waited < deadline_ms; ++waited) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  EXPECT_EQ(pool->Stats().reserved_pages, 0u);

  auto again = client->PoolReserve(keys, std::vector<uint32_t>{4}, kTimeout);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE(again->value[0].status.ok()) << again->value[0].status;
  EXPECT_GT(again->generation, reserved->generation);
  ASSERT_NE(again->device_pool, nullptr);
  EXPECT_EQ(again->device_pool->generation(), again->generation);
  EXPECT_NE(again->device_pool.get(), reserved->device_pool.get());
  // Both mappings are the daemon's one pool.
  FillPoolPages(*again->device_pool, again->value[0].pages, 0x19);
  EXPECT_TRUE(PoolPagesHold(*reserved->device_pool, again->value[0].pages, 0x19));
}

}  // namespace
}  // namespace strata::connector::internal

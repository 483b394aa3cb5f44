// stratad as a real process: start-up, graceful drain on SIGTERM, and an engine process that
// dies mid-store.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <iostream>
#include <numeric>
#include <regex>
#include <thread>

#include "core/fmt_absl.h"
#include "core/key_hasher.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "storage/codec/codec_registry.h"
#include "tests/support/daemon_process.h"
#include "tests/support/raw_engine_client.h"
#include "tests/support/test_layout.h"

namespace strata {
namespace {

using std::chrono::milliseconds;
using test_support::DaemonProcess;
using test_support::RawEngineClient;

// 128 KiB per chunk: two 64 KiB pages.
KvLayout SmallLayout() {
  return test_support::SmallLayout(
      {.model_id = "itest-model", .num_layers = 4, .head_dim = 64, .chunk_tokens = 64});
}

std::vector<ChunkKey> Keys(size_t num_chunks, uint32_t first_token) {
  std::vector<uint32_t> tokens(num_chunks * 64);
  std::iota(tokens.begin(), tokens.end(), first_token);
  return KeyHasher::Create(SmallLayout(), {})->PrefixKeys(tokens, {});
}

// Leases the first `count` chunks of `keys` and checks every 4 KiB of them holds
// `byte_of(i)` for chunk i.
void ExpectLoadsByteExact(RawEngineClient& engine, std::span<const ChunkKey> keys,
                          const std::function<uint8_t(uint32_t)>& byte_of) {
  v1::EngineRequest load = test_support::PrepareLoadRequest(keys);
  absl::StatusOr<v1::EngineResponse> leased = engine.Call(load);
  ASSERT_TRUE(leased.ok());
  for (uint32_t i = 0; i < keys.size(); ++i) {
    const v1::LoadPlacement& chunk = leased->prepare_load().chunks(static_cast<int>(i));
    ASSERT_EQ(chunk.status().code(), 0) << i << ": " << chunk.status().message();
    for (const v1::Extent& extent : chunk.extents()) {
      for (uint64_t b = 0; b < extent.length(); b += 4096) {
        ASSERT_EQ(static_cast<uint8_t>(engine.arena()[extent.offset() + b]), byte_of(i))
            << "chunk " << i;
      }
    }
  }
}

// A disk directory for one test that outlives the daemon processes using it.
std::filesystem::path FreshDiskDir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                    fmt::format("strata-itest-{}-{}", name, getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

// A daemon with a host tier of `host_capacity` over a 16 MiB disk tier in `disk_dir`, with the
// [disk] lines `disk_toml` added.
test_support::DaemonProcessOptions DiskDaemonOptions(const std::filesystem::path& disk_dir,
                                                     std::string host_capacity,
                                                     std::string_view disk_toml) {
  return {
      .host_capacity = std::move(host_capacity),
      .extra_toml = fmt::format(
          "[disk]\ndirectory = \"{}\"\ncapacity_bytes = \"16MiB\"\nsegment_bytes = \"1MiB\"\n{}",
          disk_dir.string(), disk_toml)};
}

// The chunks of `keys` a Lookup finds.
uint32_t LookupHits(RawEngineClient& engine, const std::vector<ChunkKey>& keys) {
  absl::StatusOr<v1::EngineResponse> found = engine.Call(test_support::LookupRequest(keys));
  return found.ok() ? found->lookup().hit_chunks() : 0;
}

TEST(DaemonProcess, ServesAndStopsCleanlyOnSigterm) {
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start();
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  grpc::ClientContext context;
  v1::HealthResponse health;
  ASSERT_TRUE((*daemon)->control().Health(&context, v1::HealthRequest(), &health).ok());
  EXPECT_EQ(health.status(), v1::HealthResponse::SERVING_STATUS_SERVING);
  EXPECT_TRUE(std::filesystem::exists((*daemon)->engine_socket()));

  const test_support::ExitInfo exit = (*daemon)->Stop();
  EXPECT_TRUE(exit.exited);
  EXPECT_EQ(exit.code, 0) << (*daemon)->Log();
  EXPECT_LT(exit.stop_time, milliseconds(5000));
  std::cout << "stratad stopped in " << exit.stop_time.count() << " ms\n";
  EXPECT_FALSE(std::filesystem::exists((*daemon)->engine_socket()));
}

// gRPC binds with SO_REUSEPORT unless told not to: a second daemon on a port in use would start
// and take part of the first one's calls.
TEST(DaemonProcess, ASecondDaemonOnATakenControlPortIsRefused) {
  absl::StatusOr<std::unique_ptr<DaemonProcess>> first = DaemonProcess::Start();
  ASSERT_TRUE(first.ok()) << first.status();
  std::smatch port;
  const std::string log = (*first)->Log();
  ASSERT_TRUE(std::regex_search(log, port, std::regex(R"(control on 127\.0\.0\.1:(\d+))"))) << log;
  absl::StatusOr<std::unique_ptr<DaemonProcess>> second =
      DaemonProcess::Start({.extra_args = {"--listen", "127.0.0.1:" + port[1].str()}});
  ASSERT_FALSE(second.ok()) << "a second daemon serves on the first one's port";
  EXPECT_THAT(std::string(second.status().message()), testing::HasSubstr("address in use"));
  grpc::ClientContext context;
  v1::HealthResponse health;
  EXPECT_TRUE((*first)->control().Health(&context, v1::HealthRequest(), &health).ok());
}

// The bytes of the daemon's host arena (its memfd "strata-host") that hold memory; -1 when the
// daemon has none open.
int64_t ArenaAllocatedBytes(pid_t pid) {
  const std::filesystem::path fds = fmt::format("/proc/{}/fd", pid);
  std::error_code error;
  for (const auto& fd : std::filesystem::directory_iterator(fds, error)) {
    const std::string target = std::filesystem::read_symlink(fd.path(), error).string();
    if (target.find("memfd:strata-host") == std::string::npos) continue;
    struct stat st {};
    if (::stat(fd.path().c_str(), &st) == 0) return static_cast<int64_t>(st.st_blocks) * 512;
  }
  return -1;
}

// A daemon is ready at once and allocates its host arena on a background thread from start-up
// (host.background_prefault), so that engines' first stores do not fault page by page; with it
// off, pages are allocated only as stores touch them.
TEST(DaemonProcess, TheArenaIsAllocatedInTheBackgroundFromStartUp) {
  constexpr int64_t kCapacity = 256 << 20;
  for (const bool background : {true, false}) {
    absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
        DaemonProcess::Start({.host_capacity = "256MiB", .background_prefault = background});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    int64_t allocated = ArenaAllocatedBytes((*daemon)->pid());
    while (background && allocated < kCapacity && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(20));
      allocated = ArenaAllocatedBytes((*daemon)->pid());
    }
    if (!background) std::this_thread::sleep_for(milliseconds(300));
    EXPECT_EQ(ArenaAllocatedBytes((*daemon)->pid()), background ? kCapacity : 0)
        << "background_prefault " << background;
    EXPECT_EQ((*daemon)->Stop().code, 0);
  }
}

// A device pool left on "auto" uses the GPU or, without one the daemon can use (a GPU node whose
// unit or pod hides the devices), fails start-up saying so, unless host memory is allowed.
TEST(DaemonProcess, ADevicePoolWithoutAGpuFailsStartUpUnlessHostMemoryIsAllowed) {
  const std::string pool = "[device_pool]\nbytes_per_layout = \"1MiB\"\n";
  absl::StatusOr<std::unique_ptr<DaemonProcess>> strict =
      DaemonProcess::Start({.extra_toml = pool});
  if (strict.ok()) {
    // This machine has a GPU the daemon can use: the pool is on it.
    EXPECT_THAT((*strict)->Log(), testing::HasSubstr("in cuda memory"));
  } else {
    EXPECT_THAT(std::string(strict.status().message()), testing::HasSubstr("found no usable GPU"));
    EXPECT_THAT(std::string(strict.status().message()), testing::HasSubstr("allow_host_fallback"));
  }
  absl::StatusOr<std::unique_ptr<DaemonProcess>> allowed =
      DaemonProcess::Start({.extra_toml = pool + "allow_host_fallback = true\n"});
  ASSERT_TRUE(allowed.ok()) << allowed.status();
  if (!strict.ok()) {
    EXPECT_THAT((*allowed)->Log(), testing::HasSubstr("pooling host memory"));
  }
}

TEST(DaemonProcess, DrainsWhileSessionsHoldLeasesAndReservations) {
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start();
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  RawEngineClient engine((*daemon)->engine_socket());
  ASSERT_TRUE(engine.Handshake(SmallLayout()).ok());
  ASSERT_TRUE(engine.Store(Keys(4, 0), 64, 1).ok());
  ASSERT_TRUE(engine.Store(Keys(2, 5000), 64, 2, /*commit=*/false).ok());
  v1::EngineRequest load = test_support::PrepareLoadRequest(Keys(4, 0));
  absl::StatusOr<v1::EngineResponse> leased = engine.Call(load);
  ASSERT_TRUE(leased.ok());
  ASSERT_EQ(leased->prepare_load().chunks(3).status().code(), 0);

  const test_support::ExitInfo exit = (*daemon)->Stop();
  EXPECT_TRUE(exit.exited);
  EXPECT_EQ(exit.code, 0) << (*daemon)->Log();
  EXPECT_LT(exit.stop_time, milliseconds(5000));
  EXPECT_FALSE(engine.Receive().ok()) << "the session ends with the daemon";
}

// Starts a daemon with `options`, stores `keys` (16) four at a time (chunk i holds byte
// 10 * (i / 4) + i % 4) and SIGKILLs it: what only its host tier held is gone.
void StoreInBatchesAndCrash(const test_support::DaemonProcessOptions& options,
                            const std::vector<ChunkKey>& keys) {
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(options);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  RawEngineClient engine((*daemon)->engine_socket());
  ASSERT_TRUE(engine.Handshake(SmallLayout()).ok());
  for (size_t batch = 0; batch < 4; ++batch) {
    const std::vector<ChunkKey> part(keys.begin() + 4 * batch, keys.begin() + 4 * batch + 4);
    ASSERT_TRUE(engine.Store(part, 64, static_cast<uint8_t>(10 * batch)).ok());
  }
  (*daemon)->Kill();
}

TEST(DaemonProcess, ChunksDemotedToDiskSurviveACrash) {
  // A host tier of 8 chunks over a disk tier that outlives the daemon's own directory. The
  // arena is prefaulted, so registered with the disk tier's engines: demotions write from it
  // and promotions read into it through registered buffers.
  const std::filesystem::path disk_dir = FreshDiskDir("disk");
  // Synchronous demotion: every evicted chunk is on disk before the kill (a staged one would die
  // with the process).
  test_support::DaemonProcessOptions options =
      DiskDaemonOptions(disk_dir, "1MiB", "demotion_queue_bytes = 0\n");
  options.prefault = true;
  const std::vector<ChunkKey> keys = Keys(16, 0);
  ASSERT_NO_FATAL_FAILURE(StoreInBatchesAndCrash(options, keys));
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(options);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  RawEngineClient engine((*daemon)->engine_socket());
  ASSERT_TRUE(engine.Handshake(SmallLayout()).ok());
  const uint32_t hits = LookupHits(engine, keys);
  EXPECT_GE(hits, 4u) << "the first batch was evicted to disk before the crash\n"
                      << (*daemon)->Log();
  EXPECT_LT(hits, 16u) << "the last chunks lived only in the host tier";

  ExpectLoadsByteExact(engine, std::span(keys).first(hits),
                       [](uint32_t i) { return static_cast<uint8_t>(10 * (i / 4) + i % 4); });
  EXPECT_EQ((*daemon)->Stop().code, 0);
  std::filesystem::remove_all(disk_dir);
}

TEST(DaemonProcess, ChunksDemotedEncodedSurviveACrashAndLoadAsTheyDecode) {
  // [disk] codec = "int8": evictions are written encoded, and after a SIGKILL and a restart the
  // disk's records (and the layout it keeps) load as one encode and decode of the codec gives them.
  const std::filesystem::path disk_dir = FreshDiskDir("codec");
  const test_support::DaemonProcessOptions options =
      DiskDaemonOptions(disk_dir, "1MiB", "demotion_queue_bytes = 0\ncodec = \"int8\"\n");
  const std::vector<ChunkKey> keys = Keys(16, 0);
  ASSERT_NO_FATAL_FAILURE(StoreInBatchesAndCrash(options, keys));
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(options);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  grpc::ClientContext context;
  v1::StatsResponse stats;
  ASSERT_TRUE((*daemon)->control().Stats(&context, v1::StatsRequest(), &stats).ok());
  ASSERT_EQ(stats.tiers_size(), 2);
  EXPECT_GE(stats.tiers(1).encoded_chunks(), 4u) << (*daemon)->Log();
  EXPECT_LT(stats.tiers(1).stored_bytes() * 18, stats.tiers(1).payload_bytes() * 10);

  RawEngineClient engine((*daemon)->engine_socket());
  ASSERT_TRUE(engine.Handshake(SmallLayout()).ok());
  const uint32_t hits = LookupHits(engine, keys);
  ASSERT_GE(hits, 4u) << (*daemon)->Log();
  const KvLayout layout = SmallLayout();
  const storage::Codec& int8 = **storage::CodecRegistry::Find("int8");
  v1::EngineRequest load = test_support::PrepareLoadRequest(std::span(keys).first(hits));
  absl::StatusOr<v1::EngineResponse> leased = engine.Call(load);
  ASSERT_TRUE(leased.ok());
  for (uint32_t i = 0; i < hits; ++i) {
    const v1::LoadPlacement& chunk = leased->prepare_load().chunks(static_cast<int>(i));
    ASSERT_EQ(chunk.status().code(), 0) << i << ": " << chunk.status().message();
    const std::vector<std::byte> stored(layout.chunk_bytes(64),
                                        std::byte{static_cast<uint8_t>(10 * (i / 4) + i % 4)});
    std::vector<std::byte> expected(stored.size());
    ASSERT_TRUE(int8.Decode(layout, *int8.Encode(layout, 64, stored, {}), expected).ok());
    std::vector<std::byte> loaded;
    for (const v1::Extent& extent : chunk.extents()) {
      const std::byte* at = engine.arena() + extent.offset();
      loaded.insert(loaded.end(), at, at + extent.length());
    }
    EXPECT_EQ(loaded, expected) << "chunk " << i;
  }
  EXPECT_EQ((*daemon)->Stop().code, 0);
  std::filesystem::remove_all(disk_dir);
}

TEST(DaemonProcess, WrittenThroughChunksSurviveACrashWithoutEverBeingEvicted) {
  const std::filesystem::path disk_dir = FreshDiskDir("write-through");
  // A host tier of 32 chunks: nothing is evicted.
  const test_support::DaemonProcessOptions options =
      DiskDaemonOptions(disk_dir, "4MiB", "write_through = true\n");
  const std::vector<ChunkKey> keys = Keys(8, 0);
  {
    absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(options);
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    RawEngineClient engine((*daemon)->engine_socket());
    ASSERT_TRUE(engine.Handshake(SmallLayout()).ok());
    ASSERT_TRUE(engine.Store(keys, 64, 7).ok());  // chunk i holds byte 7 + i
    // The writes run in the background: wait until the disk tier shows all eight.
    uint64_t on_disk = 0;
    for (int attempt = 0; attempt < 200 && on_disk < keys.size(); ++attempt) {
      grpc::ClientContext context;
      v1::StatsResponse stats;
      ASSERT_TRUE((*daemon)->control().Stats(&context, v1::StatsRequest(), &stats).ok());
      for (const v1::TierStats& tier : stats.tiers()) {
        if (tier.tier() == v1::TIER_DISK) on_disk = tier.chunks();
      }
      if (on_disk < keys.size()) std::this_thread::sleep_for(milliseconds(25));
    }
    ASSERT_EQ(on_disk, keys.size()) << (*daemon)->Log();
    (*daemon)->Kill();
  }
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(options);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  RawEngineClient engine((*daemon)->engine_socket());
  ASSERT_TRUE(engine.Handshake(SmallLayout()).ok());
  ASSERT_EQ(LookupHits(engine, keys), keys.size()) << (*daemon)->Log();
  ExpectLoadsByteExact(engine, keys, [](uint32_t i) { return static_cast<uint8_t>(7 + i); });
  EXPECT_EQ((*daemon)->Stop().code, 0);
  std::filesystem::remove_all(disk_dir);
}

// [disk.tenant_codecs] through a real stratad: the engine's requests name their tenant, and the
// chunks written through to disk are int8 ([disk] codec) except tenant "exact"'s, stored as they
// are and loaded back byte-exact after a SIGKILL and a restart.
TEST(DaemonProcess, ATenantsOwnDiskCodecDecidesHowItsChunksAreStored) {
  const std::filesystem::path disk_dir = FreshDiskDir("tenant-codecs");
  const test_support::DaemonProcessOptions options = DiskDaemonOptions(
      disk_dir, "4MiB",
      "write_through = true\ncodec = \"int8\"\n[disk.tenant_codecs]\nexact = \"\"\n");
  const std::vector<ChunkKey> exact = Keys(4, 0);
  const std::vector<ChunkKey> others = Keys(4, 100);
  auto disk_stats = [](DaemonProcess& daemon) {
    grpc::ClientContext context;
    v1::StatsResponse stats;
    EXPECT_TRUE(daemon.control().Stats(&context, v1::StatsRequest(), &stats).ok());
    for (const v1::TierStats& tier : stats.tiers()) {
      if (tier.tier() == v1::TIER_DISK) return tier;
    }
    return v1::TierStats();
  };
  {
    absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(options);
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    RawEngineClient engine((*daemon)->engine_socket());
    ASSERT_TRUE(engine.Handshake(SmallLayout()).ok());
    ASSERT_TRUE(engine.Store(exact, 64, 30, true, "exact").ok());
    ASSERT_TRUE(engine.Store(others, 64, 60, true, "bulk").ok());
    v1::TierStats disk;
    for (int attempt = 0; attempt < 200 && disk.chunks() < 8; ++attempt) {
      disk = disk_stats(**daemon);
      if (disk.chunks() < 8) std::this_thread::sleep_for(milliseconds(25));
    }
    ASSERT_EQ(disk.chunks(), 8u) << (*daemon)->Log();
    EXPECT_EQ(disk.encoded_chunks(), 4u) << (*daemon)->Log();
    (*daemon)->Kill();
  }
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(options);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  EXPECT_EQ(disk_stats(**daemon).encoded_chunks(), 4u);
  RawEngineClient engine((*daemon)->engine_socket());
  ASSERT_TRUE(engine.Handshake(SmallLayout()).ok());
  ASSERT_EQ(LookupHits(engine, exact), exact.size()) << (*daemon)->Log();
  ExpectLoadsByteExact(engine, exact, [](uint32_t i) { return static_cast<uint8_t>(30 + i); });
  EXPECT_EQ((*daemon)->Stop().code, 0);
  std::filesystem::remove_all(disk_dir);
}

TEST(DaemonProcess, EngineKilledMidStoreLeavesNothingBehind) {
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start();
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  absl::StatusOr<v1::TierStats> baseline = (*daemon)->HostStats();
  ASSERT_TRUE(baseline.ok()) << baseline.status();

  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const std::string socket = (*daemon)->engine_socket();
  const pid_t engine = ::fork();
  ASSERT_GE(engine, 0);
  if (engine == 0) {
    // The engine: stores some chunks, reserves more and starts writing them, then is killed.
    RawEngineClient client(socket);
    const bool ok = client.Handshake(SmallLayout()).ok() && client.Store(Keys(3, 0), 64, 1).ok() &&
                    client.Store(Keys(5, 9000), 64, 2, /*commit=*/false).ok();
    const char byte = ok ? '1' : '0';
    [[maybe_unused]] ssize_t n = ::write(ready[1], &byte, 1);
    ::pause();
    _exit(0);
  }
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ASSERT_EQ(byte, '1');
  absl::StatusOr<v1::TierStats> busy = (*daemon)->HostStats();
  ASSERT_TRUE(busy.ok());
  EXPECT_EQ(busy->reserved_bytes(), 5 * SmallLayout().chunk_bytes(64));

  ::kill(engine, SIGKILL);
  ::waitpid(engine, nullptr, 0);
  absl::StatusOr<v1::TierStats> after = (*daemon)->HostStats();
  for (int i = 0; i < 200 && after.ok() && after->reserved_bytes() != 0; ++i) {
    std::this_thread::sleep_for(milliseconds(10));
    after = (*daemon)->HostStats();
  }
  ASSERT_TRUE(after.ok()) << "the daemon stays healthy";
  EXPECT_EQ(after->reserved_bytes(), 0u);
  EXPECT_EQ(after->chunks(), 3u) << "committed chunks stay cached";
  EXPECT_EQ(after->used_bytes(), baseline->used_bytes() + 3 * SmallLayout().chunk_bytes(64))
      << "arena usage returns to the baseline plus what was committed";
  EXPECT_EQ(after->leases(), 0u);

  // And it keeps serving new engines.
  RawEngineClient next(socket);
  ASSERT_TRUE(next.Handshake(SmallLayout()).ok());
  EXPECT_TRUE(next.Store(Keys(2, 70000), 64, 3).ok());
  EXPECT_EQ((*daemon)->Stop().code, 0);
}

}  // namespace
}  // namespace strata

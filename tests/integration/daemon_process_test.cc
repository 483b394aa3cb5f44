// stratad as a real process: start-up, graceful drain on SIGTERM, and an engine process that
// dies mid-store.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <numeric>
#include <thread>

#include "core/fmt_absl.h"
#include "core/key_hasher.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "tests/support/daemon_process.h"
#include "tests/support/raw_engine_client.h"

namespace strata {
namespace {

using std::chrono::milliseconds;
using test_support::DaemonProcess;
using test_support::RawEngineClient;

KvLayout SmallLayout() {
  KvLayout layout;
  layout.model_id = "itest-model";
  layout.num_layers = 4;
  layout.num_kv_heads = 2;
  layout.head_dim = 64;
  layout.dtype = KvDtype::kFloat16;
  layout.chunk_tokens = 64;  // 128 KiB per chunk: two 64 KiB pages
  return layout;
}

std::vector<ChunkKey> Keys(size_t num_chunks, uint32_t first_token) {
  std::vector<uint32_t> tokens(num_chunks * 64);
  std::iota(tokens.begin(), tokens.end(), first_token);
  return KeyHasher::Create(SmallLayout(), {})->PrefixKeys(tokens, {});
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

TEST(DaemonProcess, DrainsWhileSessionsHoldLeasesAndReservations) {
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start();
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  RawEngineClient engine((*daemon)->engine_socket());
  ASSERT_TRUE(engine.Handshake(SmallLayout()).ok());
  ASSERT_TRUE(engine.Store(Keys(4, 0), 64, 1).ok());
  ASSERT_TRUE(engine.Store(Keys(2, 5000), 64, 2, /*commit=*/false).ok());
  v1::EngineRequest load;
  for (const ChunkKey& key : Keys(4, 0)) *load.mutable_prepare_load()->add_keys() = ToProto(key);
  absl::StatusOr<v1::EngineResponse> leased = engine.Call(load);
  ASSERT_TRUE(leased.ok());
  ASSERT_EQ(leased->prepare_load().chunks(3).status().code(), 0);

  const test_support::ExitInfo exit = (*daemon)->Stop();
  EXPECT_TRUE(exit.exited);
  EXPECT_EQ(exit.code, 0) << (*daemon)->Log();
  EXPECT_LT(exit.stop_time, milliseconds(5000));
  EXPECT_FALSE(engine.Receive().ok()) << "the session ends with the daemon";
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

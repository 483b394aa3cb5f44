// A process that stores chunks is SIGKILLed in the middle of a write burst; the tier reopened
// afterwards serves every chunk whose Put returned OK, byte-exact, and no torn chunk.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <thread>
#include <vector>

#include "storage/disk/testing/disk_tier_test_util.h"

namespace strata::storage {
namespace {

using testing::DiskTierTest;
using testing::KeyOf;
using testing::PutChunk;
using testing::ReadChunk;

using DiskTierCrashTest = DiskTierTest;

uint64_t SizeOf(uint64_t id) { return 4096 + (id * 104729) % 200000; }

// Child: two threads store chunks first_id, first_id + 1, ... and report each id whose Put
// returned OK on `report_fd`, until killed.
[[noreturn]] void WriteUntilKilled(const DiskTierOptions& options, uint64_t first_id,
                                   int report_fd) {
  auto tier = DiskTier::Open(options);
  if (!tier.ok()) _exit(2);
  std::vector<std::thread> writers;
  for (uint64_t lane = 0; lane < 2; ++lane) {
    writers.emplace_back([&, lane] {
      for (uint64_t id = first_id + lane;; id += 2) {
        if (!PutChunk(**tier, id, SizeOf(id)).ok()) _exit(3);
        if (::write(report_fd, &id, sizeof(id)) != sizeof(id)) _exit(4);
      }
    });
  }
  for (auto& writer : writers) writer.join();
  _exit(0);
}

TEST_P(DiskTierCrashTest, SigkillDuringAWriteBurstLosesNoCommittedChunk) {
  options_.capacity_bytes = 256 << 20;
  options_.segment_bytes = 4 << 20;
  options_.make_engine = nullptr;  // the child builds its own engines; no fault plan
  options_.io.kind = GetParam();
  std::vector<uint64_t> committed;
  uint64_t next_id = 0;
  for (int round = 0; round < 3; ++round) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(fds[0]);
      WriteUntilKilled(options_, next_id, fds[1]);
    }
    ::close(fds[1]);
    // Let the burst run for a while, then kill it mid-write.
    const size_t target = committed.size() + 60 + 17 * round;
    uint64_t id = 0;
    while (committed.size() < target) {
      const ssize_t n = ::read(fds[0], &id, sizeof(id));
      ASSERT_EQ(n, static_cast<ssize_t>(sizeof(id))) << "child stopped early";
      committed.push_back(id);
    }
    ASSERT_EQ(::kill(child, SIGKILL), 0);
    int wstatus = 0;
    ASSERT_EQ(::waitpid(child, &wstatus, 0), child);
    ASSERT_TRUE(WIFSIGNALED(wstatus)) << "child exited with " << WEXITSTATUS(wstatus);
    // Ids reported before the kill.
    while (::read(fds[0], &id, sizeof(id)) == static_cast<ssize_t>(sizeof(id))) {
      committed.push_back(id);
    }
    ::close(fds[0]);

    auto tier = OpenTier();
    ASSERT_TRUE(tier.ok()) << tier.status();
    for (uint64_t c : committed) {
      ASSERT_TRUE(ReadChunk(**tier, c, SizeOf(c)).ok()) << "round " << round << " chunk " << c;
    }
    uint64_t max_id = 0;
    for (uint64_t c : committed) max_id = std::max(max_id, c);
    // Chunks in flight at the kill: absent, or complete and exact; never torn.
    for (uint64_t c = next_id; c <= max_id + 8; ++c) {
      if ((*tier)->Contains(KeyOf(c))) {
        EXPECT_TRUE(ReadChunk(**tier, c, SizeOf(c)).ok()) << "round " << round << " chunk " << c;
      }
    }
    EXPECT_EQ((*tier)->stats().checksum_failures, 0u);
    next_id = max_id + 16;
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, DiskTierCrashTest,
                         ::testing::Values(IoEngineKind::kIoUring, IoEngineKind::kSync),
                         testing::EngineParamName);

}  // namespace
}  // namespace strata::storage

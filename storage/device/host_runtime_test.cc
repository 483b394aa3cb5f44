#include "storage/device/host_runtime.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <xxhash.h>

#include "gtest/gtest.h"

namespace strata::storage {
namespace {

using std::chrono::milliseconds;

std::vector<uint8_t> Pattern(size_t size, uint8_t seed) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
  return bytes;
}

class ForeignEvent final : public DeviceEvent {
 public:
  absl::Status Wait() override { return absl::OkStatus(); }
  absl::StatusOr<bool> Query() override { return true; }
};

TEST(HostRuntimeTest, CopiesRunsInOrderAndEventsComplete) {
  HostRuntime runtime;
  auto stream = runtime.CreateStream("test");
  ASSERT_TRUE(stream.ok());
  auto event = runtime.CreateEvent();
  ASSERT_TRUE(event.ok());

  const auto a = Pattern(1 << 16, 3);
  std::vector<uint8_t> b(a.size()), c(a.size());
  // b <- a, then c <- b: the second run sees the first one's result only if they run in order.
  const CopyRun runs1[] = {{a.data(), b.data(), a.size()}};
  const CopyRun runs2[] = {{b.data(), c.data(), a.size() / 2},
                           {b.data() + a.size() / 2, c.data() + a.size() / 2, a.size() / 2}};
  ASSERT_TRUE((*stream)->Copy(runs1).ok());
  ASSERT_TRUE((*stream)->Copy(runs2).ok());
  ASSERT_TRUE((*stream)->Record(**event).ok());
  ASSERT_TRUE((*event)->Wait().ok());
  EXPECT_EQ(c, a);
  auto done = (*event)->Query();
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
}

TEST(HostRuntimeTest, UnrecordedEventIsComplete) {
  HostRuntime runtime;
  auto event = runtime.CreateEvent();
  ASSERT_TRUE(event.ok());
  EXPECT_TRUE((*event)->Wait().ok());
  EXPECT_TRUE(*(*event)->Query());
}

// Layer-wise pipelining: copies for later layers are still running when an earlier layer's event
// completes, and events complete in layer order.
TEST(HostRuntimeTest, LayerEventsCompleteInOrderWhileLaterLayersCopy) {
  HostRuntime runtime({.copy_hook = [](const CopyRun&) {
    std::this_thread::sleep_for(milliseconds(30));
    return absl::OkStatus();
  }});
  auto stream = runtime.CreateStream("layers");
  ASSERT_TRUE(stream.ok());
  constexpr int kLayers = 4;
  std::vector<std::unique_ptr<DeviceEvent>> events;
  std::vector<std::vector<uint8_t>> src, dst;
  for (int i = 0; i < kLayers; ++i) {
    events.push_back(*runtime.CreateEvent());
    src.push_back(Pattern(4096, static_cast<uint8_t>(i)));
    dst.emplace_back(4096, 0);
  }
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kLayers; ++i) {
    const CopyRun run{src[i].data(), dst[i].data(), 4096};
    ASSERT_TRUE((*stream)->Copy({&run, 1}).ok());
    ASSERT_TRUE((*stream)->Record(*events[i]).ok());
  }
  // Enqueueing does not wait for the copies.
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(25));
  for (int i = 0; i < kLayers; ++i) {
    ASSERT_TRUE(events[i]->Wait().ok());
    EXPECT_EQ(dst[i], src[i]) << "layer " << i;
    for (int j = 0; j < i; ++j) EXPECT_TRUE(*events[j]->Query()) << j << " before " << i;
    if (i + 1 < kLayers) {
      EXPECT_FALSE(*events[kLayers - 1]->Query()) << "last layer done when layer " << i << " is";
    }
  }
}

TEST(HostRuntimeTest, ReRecordedEventWaitsForTheLatestRecord) {
  std::atomic<bool> slow{false};
  HostRuntime runtime({.copy_hook = [&](const CopyRun&) {
    if (slow.load()) std::this_thread::sleep_for(milliseconds(50));
    return absl::OkStatus();
  }});
  auto stream = *runtime.CreateStream("rerecord");
  auto event = *runtime.CreateEvent();
  ASSERT_TRUE(stream->Record(*event).ok());
  ASSERT_TRUE(event->Wait().ok());
  slow = true;
  const auto src = Pattern(64, 1);
  std::vector<uint8_t> dst(64, 0);
  const CopyRun run{src.data(), dst.data(), 64};
  ASSERT_TRUE(stream->Copy({&run, 1}).ok());
  ASSERT_TRUE(stream->Record(*event).ok());
  EXPECT_FALSE(*event->Query());
  ASSERT_TRUE(event->Wait().ok());
  EXPECT_EQ(dst, src);
}

TEST(HostRuntimeTest, FailedCopyPutsTheStreamInErrorUntilSynchronize) {
  const auto poison = Pattern(128, 9);
  HostRuntime runtime({.copy_hook = [&](const CopyRun& run) {
    if (run.src == poison.data()) return absl::DataLossError("injected copy failure");
    return absl::OkStatus();
  }});
  auto stream = *runtime.CreateStream("errors");
  auto before = *runtime.CreateEvent();
  auto after = *runtime.CreateEvent();
  auto later = *runtime.CreateEvent();
  const auto good = Pattern(128, 1);
  std::vector<uint8_t> dst1(128, 0), dst2(128, 0), dst3(128, 0);
  const CopyRun ok_run{good.data(), dst1.data(), 128};
  ASSERT_TRUE(stream->Copy({&ok_run, 1}).ok());
  ASSERT_TRUE(stream->Record(*before).ok());
  // The poisoned run fails and the run after it in the same batch is skipped.
  const CopyRun bad_batch[] = {{poison.data(), dst2.data(), 128}, {good.data(), dst3.data(), 128}};
  ASSERT_TRUE(stream->Copy(bad_batch).ok());
  ASSERT_TRUE(stream->Record(*after).ok());
  EXPECT_TRUE(before->Wait().ok());
  EXPECT_EQ(after->Wait().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(after->Query().status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(dst1, good);
  EXPECT_EQ(dst3, std::vector<uint8_t>(128, 0));
  EXPECT_EQ(stream->Synchronize().code(), absl::StatusCode::kDataLoss);
  // Cleared: new work completes cleanly.
  ASSERT_TRUE(stream->Copy({&ok_run, 1}).ok());
  ASSERT_TRUE(stream->Record(*later).ok());
  EXPECT_TRUE(later->Wait().ok());
  EXPECT_TRUE(stream->Synchronize().ok());
}

TEST(HostRuntimeTest, StreamWaitsForAnotherStreamsEvent) {
  HostRuntime runtime({.copy_hook = [](const CopyRun& run) {
    if (run.size_bytes == 1000) std::this_thread::sleep_for(milliseconds(40));
    return absl::OkStatus();
  }});
  auto producer = *runtime.CreateStream("producer");
  auto consumer = *runtime.CreateStream("consumer");
  auto produced = *runtime.CreateEvent();
  auto consumed = *runtime.CreateEvent();
  const auto src = Pattern(1000, 5);
  std::vector<uint8_t> middle(1000, 0), dst(1000, 0);
  const CopyRun first{src.data(), middle.data(), 1000};   // slow
  const CopyRun second{middle.data(), dst.data(), 1000};  // must see the first's result
  ASSERT_TRUE(producer->Copy({&first, 1}).ok());
  ASSERT_TRUE(producer->Record(*produced).ok());
  ASSERT_TRUE(consumer->WaitForEvent(*produced).ok());
  ASSERT_TRUE(consumer->Copy({&second, 1}).ok());
  ASSERT_TRUE(consumer->Record(*consumed).ok());
  ASSERT_TRUE(consumed->Wait().ok());
  EXPECT_EQ(dst, src);
  EXPECT_TRUE(consumer->WaitForExternal(0).ok());  // CPU engines: nothing to wait for
}

TEST(HostRuntimeTest, RejectsNullRunsAndForeignEvents) {
  HostRuntime runtime;
  auto stream = *runtime.CreateStream("bad");
  std::vector<uint8_t> dst(8);
  const CopyRun null_src{nullptr, dst.data(), 8};
  EXPECT_EQ(stream->Copy({&null_src, 1}).code(), absl::StatusCode::kInvalidArgument);
  const CopyRun empty{nullptr, nullptr, 0};
  EXPECT_TRUE(stream->Copy({&empty, 1}).ok());
  ForeignEvent foreign;
  EXPECT_EQ(stream->Record(foreign).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(stream->WaitForEvent(foreign).code(), absl::StatusCode::kInvalidArgument);
}

TEST(HostRuntimeTest, DestroyingAStreamRunsQueuedWork) {
  HostRuntime runtime({.copy_hook = [](const CopyRun&) {
    std::this_thread::sleep_for(milliseconds(5));
    return absl::OkStatus();
  }});
  const auto src = Pattern(256, 2);
  std::vector<uint8_t> dst(256, 0);
  {
    auto stream = *runtime.CreateStream("drain");
    std::vector<CopyRun> runs;
    for (size_t i = 0; i < 256; i += 32) runs.push_back({src.data() + i, dst.data() + i, 32});
    ASSERT_TRUE(stream->Copy(runs).ok());
  }
  EXPECT_EQ(dst, src);
}

// Batches of 8 MiB or more are split across the stream's copy threads, cutting runs anywhere.
TEST(HostRuntimeTest, LargeBatchesAreSplitAcrossCopyThreadsByteExact) {
  HostRuntime runtime({.copy_threads = 3});
  auto stream = *runtime.CreateStream("big");
  // The helpers exist and are named after the stream.
  int helpers = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name == "strata-big0" || name == "strata-big1") ++helpers;
  }
  EXPECT_EQ(helpers, 2);

  constexpr size_t kBytes = 12 << 20;
  constexpr size_t kRun = 5003;  // odd: slices cut runs in the middle
  const auto src = Pattern(kBytes, 17);
  std::vector<uint8_t> dst(kBytes + kRun, 0);
  std::vector<CopyRun> runs;
  std::vector<size_t> order;
  for (size_t off = 0; off < kBytes; off += kRun) order.push_back(off);
  std::vector<size_t> targets = order;
  std::reverse(targets.begin(), targets.end());
  for (size_t i = 0; i < order.size(); ++i) {
    const size_t size = std::min(kRun, kBytes - order[i]);
    runs.push_back({src.data() + order[i], dst.data() + targets[i], size});
  }
  auto event = *runtime.CreateEvent();
  ASSERT_TRUE(stream->Copy(runs).ok());
  ASSERT_TRUE(stream->Record(*event).ok());
  ASSERT_TRUE(event->Wait().ok());
  for (size_t i = 0; i < order.size(); ++i) {
    const size_t size = std::min(kRun, kBytes - order[i]);
    ASSERT_EQ(std::memcmp(dst.data() + targets[i], src.data() + order[i], size), 0) << i;
  }
  EXPECT_TRUE(stream->Synchronize().ok());
}

// Digested copies, small (the stream's thread alone) and large (split across copy threads by
// digest): each digest equals xxh3-64 of its runs' source bytes in order, digest-only runs
// (null dst) are folded but not copied, and a later call continues the same digests.
TEST(HostRuntimeTest, DigestedCopiesFoldEachDigestsRunsInOrder) {
  HostRuntime runtime({.copy_threads = 3});
  ASSERT_TRUE(runtime.Capabilities().digested_copies);
  auto stream = *runtime.CreateStream("digest");
  for (const size_t run_bytes : {size_t{3001}, size_t{(1 << 20) + 17}}) {
    constexpr size_t kDigests = 5, kRunsPerDigest = 6;
    const size_t total = kDigests * kRunsPerDigest * run_bytes;
    const auto src = Pattern(total, 3);
    std::vector<uint8_t> dst(total, 0);
    CopyDigests digests(kDigests);
    // Two calls, each with three runs of every digest, interleaved across digests; run r of
    // digest d reads src block d * kRunsPerDigest + r; every third run is digest-only.
    for (size_t call = 0; call < 2; ++call) {
      std::vector<CopyRun> runs;
      std::vector<uint32_t> digest_of;
      for (size_t r = call * 3; r < call * 3 + 3; ++r) {
        for (uint32_t d = 0; d < kDigests; ++d) {
          const size_t block = (d * kRunsPerDigest + r) * run_bytes;
          runs.push_back(
              {src.data() + block, r % 3 == 2 ? nullptr : dst.data() + block, run_bytes});
          digest_of.push_back(d);
        }
      }
      ASSERT_TRUE(stream->CopyDigested(runs, digest_of, digests).ok());
    }
    ASSERT_TRUE(stream->Synchronize().ok());
    for (uint32_t d = 0; d < kDigests; ++d) {
      const size_t first = d * kRunsPerDigest * run_bytes;
      EXPECT_EQ(digests.Digest(d), XXH3_64bits(src.data() + first, kRunsPerDigest * run_bytes))
          << "digest " << d << ", runs of " << run_bytes;
      for (size_t r = 0; r < kRunsPerDigest; ++r) {
        const size_t block = first + r * run_bytes;
        const bool copied = r % 3 != 2;
        EXPECT_EQ(std::memcmp(dst.data() + block, src.data() + block, run_bytes) == 0, copied)
            << "digest " << d << " run " << r;
      }
    }
  }
}

TEST(HostRuntimeTest, DigestedCopyRejectsMismatchedArguments) {
  HostRuntime runtime;
  auto stream = *runtime.CreateStream("digest-bad");
  std::vector<uint8_t> src(64, 1), dst(64, 0);
  const CopyRun run{src.data(), dst.data(), 64};
  CopyDigests digests(1);
  const std::vector<uint32_t> none, out_of_range = {1}, fine = {0};
  EXPECT_EQ(stream->CopyDigested({&run, 1}, none, digests).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(stream->CopyDigested({&run, 1}, out_of_range, digests).code(),
            absl::StatusCode::kInvalidArgument);
  const CopyRun no_source{nullptr, dst.data(), 64};
  EXPECT_EQ(stream->CopyDigested({&no_source, 1}, fine, digests).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(dst[0], 0) << "nothing was enqueued";
  EXPECT_EQ(digests.Digest(0), XXH3_64bits(nullptr, 0));
}

TEST(HostRuntimeTest, RegistrationTracksRanges) {
  HostRuntime runtime;
  std::vector<uint8_t> memory(1 << 16);
  EXPECT_EQ(runtime.RegisterHostMemory(nullptr, 16).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(runtime.RegisterHostMemory(memory.data(), 0).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(runtime.RegisterHostMemory(memory.data(), 4096).ok());
  EXPECT_EQ(runtime.RegisterHostMemory(memory.data() + 100, 4096).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(runtime.RegisterHostMemory(memory.data() + 4096, 4096).ok());
  EXPECT_EQ(runtime.RegisteredHostMemory().size(), 2u);
  EXPECT_TRUE(runtime.UnregisterHostMemory(memory.data()).ok());
  EXPECT_EQ(runtime.UnregisterHostMemory(memory.data()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(runtime.RegisteredHostMemory().size(), 1u);
}

TEST(HostRuntimeTest, AllocatesAlignedMemory) {
  HostRuntime runtime;
  EXPECT_EQ(runtime.Allocate(0, MemoryKind::kDevice).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto allocation = runtime.Allocate(1000, MemoryKind::kDevice);
  ASSERT_TRUE(allocation.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*allocation)->data()) % 256, 0u);
  EXPECT_EQ((*allocation)->size_bytes(), 1000u);
  EXPECT_EQ((*allocation)->kind(), MemoryKind::kDevice);
  std::memset((*allocation)->data(), 0xab, 1000);
}

}  // namespace
}  // namespace strata::storage

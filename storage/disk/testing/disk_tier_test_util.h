// A DiskTier test fixture parameterized over the IoEngine kind, whose engines all share one
// FaultPlan, plus helpers that store and verify deterministic chunks. Test-only.
#pragma once

#include <sys/stat.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "storage/disk/disk_tier.h"
#include "storage/host/payload_view.h"
#include "storage/host/test_util.h"
#include "storage/io/aligned_buffer.h"
#include "storage/io/testing/fault_injecting_io_engine.h"
#include "storage/io/testing/io_test_util.h"

namespace strata::storage::testing {

inline constexpr uint64_t kTestFingerprint = 0xF1F2F3F4u;

inline ChunkKey KeyOf(uint64_t id) { return SyntheticKey(kTestFingerprint, id); }

// Chunk `id`'s payload: `size` bytes derived from id.
inline std::vector<std::byte> PayloadOf(uint64_t id, uint64_t size) { return Pattern(id, size); }

// Runs `fn(id)` for ids t * 1000 + i (i < per_thread) on `threads` threads, thread t taking
// its ids in order; returns when all are done.
inline void ForIdsOnThreads(uint64_t threads, uint64_t per_thread,
                            const std::function<void(uint64_t)>& fn) {
  std::vector<std::jthread> workers;
  for (uint64_t t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (uint64_t i = 0; i < per_thread; ++i) fn(t * 1000 + i);
    });
  }
}

inline absl::Status PutChunk(DiskTier& tier, uint64_t id, uint64_t size) {
  const std::vector<std::byte> payload = PayloadOf(id, size);
  return tier.Put(KeyOf(id), kTestFingerprint, payload, ChecksumBytes(payload),
                  static_cast<uint32_t>(id % 1000));
}

// Reads chunk `id` into an aligned buffer and compares it with PayloadOf(id, size).
inline absl::Status ReadChunk(DiskTier& tier, uint64_t id, uint64_t size) {
  AlignedBuffer buffer(size);
  absl::Status status = tier.Read(KeyOf(id), buffer.span().first(size));
  if (!status.ok()) return status;
  const std::vector<std::byte> expected = PayloadOf(id, size);
  if (size > 0 && std::memcmp(buffer.data(), expected.data(), size) != 0) {
    return absl::InternalError("bytes differ");
  }
  return absl::OkStatus();
}

class DiskTierTest : public ::testing::TestWithParam<IoEngineKind> {
 protected:
  void SetUp() override {
    ASSERT_FALSE(scratch_.path().empty());
    auto probe = EngineOfKind(GetParam());
    if (!probe.ok()) GTEST_SKIP() << "io_uring unavailable here: " << probe.status();
    options_.directory = scratch_.path() + "/tier";
    options_.capacity_bytes = 16 << 20;
    options_.segment_bytes = 1 << 20;
    options_.max_io_bytes = 64 << 10;
    options_.make_engine = [kind = GetParam(),
                            plan = plan_]() -> absl::StatusOr<std::unique_ptr<IoEngine>> {
      auto engine = EngineOfKind(kind);
      if (!engine.ok()) return engine.status();
      return std::unique_ptr<IoEngine>(
          std::make_unique<FaultInjectingIoEngine>(std::move(engine).value(), plan));
    };
  }

  absl::StatusOr<std::unique_ptr<DiskTier>> OpenTier() { return DiskTier::Open(options_); }

  // Segment files of the tier, in id order.
  std::vector<std::filesystem::path> SegmentFiles() const {
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(options_.directory)) {
      if (SegmentFile::ParseFileName(entry.path().filename()).has_value()) {
        files.push_back(entry.path());
      }
    }
    std::sort(files.begin(), files.end());
    return files;
  }

  // Disk blocks the segment files take (preallocated ones included).
  uint64_t SegmentFileBytes() const {
    uint64_t total = 0;
    for (const auto& file : SegmentFiles()) total += BlockBytes(file);
    return total;
  }

  // Disk blocks every file of the tier's directory takes: segments and index.
  uint64_t DirectoryFileBytes() const {
    uint64_t total = 0;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(options_.directory)) {
      if (entry.is_regular_file()) total += BlockBytes(entry.path());
    }
    return total;
  }

  static uint64_t BlockBytes(const std::filesystem::path& file) {
    struct stat st {};
    return ::stat(file.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_blocks) * 512 : 0;
  }

  ScratchDir scratch_;
  std::shared_ptr<FaultPlan> plan_ = std::make_shared<FaultPlan>();
  DiskTierOptions options_;
};

inline std::string EngineParamName(const ::testing::TestParamInfo<IoEngineKind>& info) {
  return info.param == IoEngineKind::kIoUring ? "IoUring" : "Sync";
}

}  // namespace strata::storage::testing

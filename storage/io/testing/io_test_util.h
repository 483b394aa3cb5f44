// Helpers shared by the disk tier's tests and benchmarks: a scratch directory removed on
// destruction, engines of a chosen kind, and a write-then-read round trip. Test-only.
#pragma once

#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "storage/io/io_engine.h"

namespace strata::storage::testing {

// A fresh directory under `parent` (default: gtest's TempDir), removed with its contents.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& parent = ::testing::TempDir()) {
    std::string pattern = parent + "/strata-disk-XXXXXX";
    path_ = ::mkdtemp(pattern.data()) != nullptr ? pattern : "";
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline const char* KindName(IoEngineKind kind) {
  return kind == IoEngineKind::kIoUring ? "io_uring" : "sync";
}

// An engine of `kind`, or a status the caller turns into GTEST_SKIP when io_uring is refused.
inline absl::StatusOr<std::unique_ptr<IoEngine>> EngineOfKind(IoEngineKind kind) {
  return MakeIoEngine(IoEngineOptions{.kind = kind, .queue_depth = 32});
}

// Writes `source` at offset 0 in requests of `request_bytes` and reads it back into `target`,
// both through `engine`; every request must transfer all its bytes.
inline void RoundTrip(IoEngine& engine, int fd, std::span<std::byte> source,
                      std::span<std::byte> target, uint32_t request_bytes) {
  ASSERT_EQ(source.size() % request_bytes, 0u);
  std::vector<IoRequest> writes;
  for (uint64_t at = 0; at < source.size(); at += request_bytes) {
    writes.push_back({.op = IoOp::kWrite,
                      .fd = fd,
                      .offset = at,
                      .data = source.data() + at,
                      .size_bytes = request_bytes});
  }
  std::vector<IoRequest> reads = writes;
  for (IoRequest& read : reads) {
    read.op = IoOp::kRead;
    read.data = target.data() + read.offset;
  }
  auto written = RunToCompletion(engine, writes);
  ASSERT_TRUE(written.ok()) << written.status();
  for (int64_t result : *written) ASSERT_EQ(result, request_bytes);
  auto read = RunToCompletion(engine, reads);
  ASSERT_TRUE(read.ok()) << read.status();
  for (int64_t result : *read) ASSERT_EQ(result, request_bytes);
  ASSERT_EQ(std::memcmp(source.data(), target.data(), source.size()), 0);
}

}  // namespace strata::storage::testing

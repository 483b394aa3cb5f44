// Helpers shared by the disk tier's tests and benchmarks: a scratch directory removed on
// destruction, and engines of a chosen kind. Test-only.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "storage/disk/io_engine.h"

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

}  // namespace strata::storage::testing

// A small ext4 filesystem in a file, loop-mounted for the soak's disk tier, so that filling the
// disk fills this filesystem, never the machine's. Needs root and a loop device: Mount says why
// when it cannot (the soak then reports the disk-full fault as skipped). Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace strata::soak {

class LoopFilesystem {
 public:
  // Makes `bytes` of ext4 in `image_path` and mounts it on `mount_dir` (created).
  // kFailedPrecondition with the tool's complaint when it cannot.
  static absl::StatusOr<std::unique_ptr<LoopFilesystem>> Mount(const std::string& image_path,
                                                               const std::string& mount_dir,
                                                               uint64_t bytes);
  // Unmounts (a filler first released) and removes the image.
  ~LoopFilesystem();
  LoopFilesystem(const LoopFilesystem&) = delete;
  LoopFilesystem& operator=(const LoopFilesystem&) = delete;

  const std::string& dir() const { return mount_dir_; }

  // Allocates a file that takes all the free space but `leave_bytes`: the disk is full for
  // whoever writes next. kInternal when fallocate fails.
  absl::Status Fill(uint64_t leave_bytes);
  // Frees what Fill took (no-op when nothing is filled).
  void Release();
  bool filled() const { return !filler_path_.empty(); }

 private:
  LoopFilesystem(std::string image_path, std::string mount_dir)
      : image_path_(std::move(image_path)), mount_dir_(std::move(mount_dir)) {}

  std::string image_path_;
  std::string mount_dir_;
  std::string filler_path_;
};

}  // namespace strata::soak

#include "tests/soak/loop_filesystem.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/scoped_fd.h"
#include "fmt/format.h"

namespace strata::soak {
namespace {

// Runs a shell command line built from paths this file made; its output goes to `log`.
absl::Status RunTool(const std::string& command, const std::string& log) {
  const int rc = std::system(fmt::format("{} >{} 2>&1", command, log).c_str());
  if (rc == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(
      fmt::format("`{}` failed (status {}); see {}", command, rc, log));
}

}  // namespace

absl::StatusOr<std::unique_ptr<LoopFilesystem>> LoopFilesystem::Mount(const std::string& image_path,
                                                                      const std::string& mount_dir,
                                                                      uint64_t bytes) {
  if (::geteuid() != 0) return absl::FailedPreconditionError("mounting a loop device needs root");
  std::error_code ec;
  std::filesystem::create_directories(mount_dir, ec);
  if (ec) return absl::InternalError(fmt::format("mkdir {}: {}", mount_dir, ec.message()));
  {
    ScopedFd image(::open(image_path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600));
    if (!image.valid() || ::ftruncate(image.get(), static_cast<off_t>(bytes)) != 0) {
      return absl::InternalError(
          fmt::format("cannot size {}: {}", image_path, std::strerror(errno)));
    }
  }
  const std::string log = image_path + ".log";
  absl::Status made = RunTool(fmt::format("mkfs.ext4 -q -F {}", image_path), log);
  if (made.ok()) made = RunTool(fmt::format("mount -o loop {} {}", image_path, mount_dir), log);
  if (!made.ok()) {
    std::filesystem::remove(image_path, ec);
    return made;
  }
  return std::unique_ptr<LoopFilesystem>(new LoopFilesystem(image_path, mount_dir));
}

LoopFilesystem::~LoopFilesystem() {
  Release();
  (void)RunTool(fmt::format("umount {}", mount_dir_), image_path_ + ".log");
  std::error_code ec;
  std::filesystem::remove(image_path_, ec);
  std::filesystem::remove(image_path_ + ".log", ec);
}

absl::Status LoopFilesystem::Fill(uint64_t leave_bytes) {
  Release();
  struct statvfs fs {};
  if (::statvfs(mount_dir_.c_str(), &fs) != 0) {
    return absl::InternalError(fmt::format("statvfs {}: {}", mount_dir_, std::strerror(errno)));
  }
  const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  if (free_bytes <= leave_bytes) return absl::OkStatus();  // already full enough
  const std::string path = mount_dir_ + "/soak-filler";
  ScopedFd file(::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600));
  if (!file.valid())
    return absl::InternalError(fmt::format("open {}: {}", path, std::strerror(errno)));
  filler_path_ = path;
  if (::fallocate(file.get(), 0, 0, static_cast<off_t>(free_bytes - leave_bytes)) != 0) {
    return absl::InternalError(fmt::format("fallocate {}: {}", path, std::strerror(errno)));
  }
  return absl::OkStatus();
}

void LoopFilesystem::Release() {
  if (filler_path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove(filler_path_, ec);
  filler_path_.clear();
}

}  // namespace strata::soak

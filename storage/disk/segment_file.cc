#include "storage/disk/segment_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>

#include "core/status_util.h"
#include "fmt/format.h"

namespace strata::storage {

absl::StatusOr<std::shared_ptr<SegmentFile>> SegmentFile::Open(const std::string& directory,
                                                               uint64_t id, bool create) {
  std::string path = fmt::format("{}/{}", directory, FileName(id));
  const int flags = O_RDWR | O_DIRECT | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0);
  ScopedFd fd(::open(path.c_str(), flags, 0640));
  if (!fd.valid()) {
    if (errno == EINVAL) {
      return absl::FailedPreconditionError(
          fmt::format("disk tier: {} does not support O_DIRECT", directory));
    }
    return ErrnoToStatus(errno, fmt::format("disk tier: open {}", path));
  }
  if (create) {
    // The new name must survive a power loss as surely as the records fdatasync'd into it.
    ScopedFd dir(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir.valid() || ::fsync(dir.get()) != 0) {
      const int error_number = errno;
      ::unlink(path.c_str());
      return ErrnoToStatus(error_number, fmt::format("disk tier: fsync directory {}", directory));
    }
  }
  return std::shared_ptr<SegmentFile>(new SegmentFile(id, std::move(path), std::move(fd)));
}

absl::StatusOr<uint64_t> SegmentFile::SizeBytes() const {
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0) return ErrnoToStatus(errno, fmt::format("fstat {}", path_));
  return static_cast<uint64_t>(st.st_size);
}

std::string SegmentFile::FileName(uint64_t id) { return fmt::format("segment-{:010d}.log", id); }

std::optional<uint64_t> SegmentFile::ParseFileName(const std::string& name) {
  constexpr std::string_view kPrefix = "segment-";
  constexpr std::string_view kSuffix = ".log";
  if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) ||
      !name.ends_with(kSuffix)) {
    return std::nullopt;
  }
  const char* first = name.data() + kPrefix.size();
  const char* last = name.data() + name.size() - kSuffix.size();
  uint64_t id = 0;
  const auto [end, error] = std::from_chars(first, last, id);
  if (error != std::errc() || end != last) return std::nullopt;
  return id;
}

}  // namespace strata::storage

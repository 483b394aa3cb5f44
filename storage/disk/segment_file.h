// SegmentFile is one append-only file of the disk tier's log, "segment-<id>.log" in the tier's
// directory, opened with O_DIRECT. The tier shares it through std::shared_ptr: a reader or the
// compactor that holds a reference keeps the descriptor open (and the bytes readable) after the
// tier retires the segment and unlinks its file. Immutable after construction; thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "core/scoped_fd.h"

namespace strata::storage {

class SegmentFile {
 public:
  // Opens (create = false) or creates (create = true, the file must not exist; the directory is
  // fsync'd so the new name is durable) segment `id` under `directory`. kFailedPrecondition
  // when the file system refuses O_DIRECT.
  static absl::StatusOr<std::shared_ptr<SegmentFile>> Open(const std::string& directory,
                                                           uint64_t id, bool create);

  uint64_t id() const { return id_; }
  int fd() const { return fd_.get(); }
  const std::string& path() const { return path_; }

  // The file's current size in bytes.
  absl::StatusOr<uint64_t> SizeBytes() const;

  // "segment-0000000042.log"
  static std::string FileName(uint64_t id);
  // The id of a segment file name, or nullopt for any other name.
  static std::optional<uint64_t> ParseFileName(const std::string& name);

 private:
  SegmentFile(uint64_t id, std::string path, ScopedFd fd)
      : id_(id), path_(std::move(path)), fd_(std::move(fd)) {}

  uint64_t id_;
  std::string path_;
  ScopedFd fd_;
};

}  // namespace strata::storage

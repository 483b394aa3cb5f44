// What a process holds, read from /proc: its resident memory, its file descriptors by kind and
// its memory mappings. The soak (tests/soak) samples the daemon with it to find leaks: a
// descriptor or mapping that outlives the engine it served. Pure functions; thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace strata::soak {

struct ProcessUsage {
  uint64_t rss_bytes = 0;  // VmRSS
  // Descriptors by what they point at: "socket", "anon_inode:[eventfd]", "memfd", "pipe",
  // "/dev/...", "file" for a regular file. Files under `owned_dir` (the disk tier's segments
  // and RocksDB files, which open and close as the tier works) are counted apart.
  std::map<std::string, uint64_t> fds_by_kind;
  uint64_t fds = 0;  // every descriptor but those under owned_dir
  uint64_t owned_dir_fds = 0;
  // Mappings of something (a file, a memfd, shared memory, a device), but files under
  // owned_dir. Anonymous memory (malloc's heaps and its large blocks, thread stacks) merges and
  // splits as it is allocated: its leaks show in rss_bytes.
  uint64_t mappings = 0;
  uint64_t owned_dir_mappings = 0;
  uint64_t anonymous_mappings = 0;
  uint64_t threads = 0;
  std::string maps;  // /proc/PID/maps as read, to show what a leak is
};

// kNotFound when the process is gone, kInternal when /proc cannot be read.
absl::StatusOr<ProcessUsage> ReadProcessUsage(pid_t pid, const std::string& owned_dir);

// The process's VmRSS alone (one small read of /proc/PID/status, for frequent sampling);
// kNotFound when the process is gone.
absl::StatusOr<uint64_t> ReadRssBytes(pid_t pid);

// "socket 12, memfd 3, ..." for a report.
std::string DescribeFds(const ProcessUsage& usage);

}  // namespace strata::soak

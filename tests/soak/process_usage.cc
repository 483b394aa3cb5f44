#include "tests/soak/process_usage.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "fmt/format.h"

namespace strata::soak {
namespace {

// The kind of a descriptor from its /proc/PID/fd link target.
std::string FdKind(const std::string& target) {
  if (target.starts_with("socket:")) return "socket";
  if (target.starts_with("pipe:")) return "pipe";
  if (target.starts_with("anon_inode:")) return target;
  if (target.starts_with("/memfd:")) return "memfd";
  if (target.starts_with("/dev/")) return target;
  return "file";
}

bool Under(const std::string& path, const std::string& dir) {
  return !dir.empty() && path.starts_with(dir);
}

// VmRSS and Threads from /proc/PID/status into `usage`; kNotFound when the process is gone.
absl::Status ReadStatus(const std::filesystem::path& proc, ProcessUsage& usage) {
  std::ifstream status(proc / "status");
  if (!status) return absl::NotFoundError(fmt::format("{} is gone", proc.string()));
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with("VmRSS:")) {
      std::istringstream fields(line.substr(6));
      uint64_t kib = 0;
      fields >> kib;
      usage.rss_bytes = kib * 1024;
    } else if (line.starts_with("Threads:")) {
      usage.threads = std::stoull(line.substr(8));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<uint64_t> ReadRssBytes(pid_t pid) {
  ProcessUsage usage;
  if (absl::Status s = ReadStatus(fmt::format("/proc/{}", pid), usage); !s.ok()) return s;
  return usage.rss_bytes;
}

absl::StatusOr<ProcessUsage> ReadProcessUsage(pid_t pid, const std::string& owned_dir) {
  const std::filesystem::path proc = fmt::format("/proc/{}", pid);
  ProcessUsage usage;
  if (absl::Status s = ReadStatus(proc, usage); !s.ok()) return s;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(proc / "fd", ec)) {
    std::error_code gone;
    const std::string target = std::filesystem::read_symlink(entry.path(), gone).string();
    if (gone) continue;  // closed while listed
    if (Under(target, owned_dir)) {
      ++usage.owned_dir_fds;
      continue;
    }
    ++usage.fds_by_kind[FdKind(target)];
    ++usage.fds;
  }
  if (ec)
    return absl::InternalError(fmt::format("cannot list {}/fd: {}", proc.string(), ec.message()));
  std::ifstream maps(proc / "maps");
  if (!maps) return absl::NotFoundError(fmt::format("process {} is gone", pid));
  for (std::string line; std::getline(maps, line);) {
    usage.maps += line + '\n';
    std::istringstream fields(line);
    std::string range, perms, offset, device, inode, path;
    fields >> range >> perms >> offset >> device >> inode >> path;
    if (path.empty() || path.starts_with("[")) {  // [heap], [stack], [vdso] ...
      ++usage.anonymous_mappings;
    } else if (Under(path, owned_dir)) {
      ++usage.owned_dir_mappings;
    } else {
      ++usage.mappings;
    }
  }
  return usage;
}

std::string DescribeFds(const ProcessUsage& usage) {
  std::string text;
  for (const auto& [kind, count] : usage.fds_by_kind) {
    text += fmt::format("{}{} {}", text.empty() ? "" : ", ", kind, count);
  }
  return text;
}

}  // namespace strata::soak

#include "storage/remote/data_path.h"

#include <array>

namespace strata::storage::remote {
namespace {

// UCX_TLS names (and aliases) of the shared-memory and RDMA transports.
constexpr std::array<std::string_view, 8> kSharedMemoryNames = {"sm",    "shm",  "posix", "sysv",
                                                                "xpmem", "knem", "cma",   "all"};
constexpr std::array<std::string_view, 11> kRdmaNames = {
    "ib", "rc", "rc_v", "rc_x", "rc_verbs", "rc_mlx5", "dc", "dc_x", "dc_mlx5", "ud", "ud_v"};

bool Names(std::string_view name, std::span<const std::string_view> family) {
  for (std::string_view member : family) {
    if (name == member) return true;
  }
  return false;
}

}  // namespace

AllowedTransports ParseAllowedTransports(std::string_view transports) {
  const bool exclusions = transports.starts_with('^');
  if (exclusions) transports.remove_prefix(1);
  bool names_shared_memory = false;
  bool excludes_shared_memory = false;
  bool names_rdma = false;
  for (std::string_view rest = transports; !rest.empty();) {
    const size_t comma = rest.find(',');
    std::string_view name = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    // A leading '\' asks UCX for the exact transport, not its alias ("\posix").
    if (name.starts_with('\\')) name.remove_prefix(1);
    names_shared_memory |= Names(name, kSharedMemoryNames);
    excludes_shared_memory |= name == "sm" || name == "shm";
    names_rdma |= Names(name, kRdmaNames);
  }
  // UCX's default and exclusion lists allow every transport UCX finds. Shared memory is always
  // there; RDMA may not be, so it counts only when named (an unused RDMA claim would send tcp
  // links through emulated RMA).
  if (transports.empty()) return {.shared_memory = true, .rdma = false};
  if (exclusions) return {.shared_memory = !excludes_shared_memory, .rdma = false};
  return {.shared_memory = names_shared_memory, .rdma = names_rdma};
}

DataPath ChooseDataPath(DataPath configured, const AllowedTransports& allowed, bool same_host) {
  if (configured != DataPath::kAuto) return configured;
  if (allowed.rdma && !same_host) return DataPath::kRma;
  return DataPath::kActiveMessages;
}

std::string_view DataPathName(DataPath path) {
  switch (path) {
    case DataPath::kAuto:
      return "auto";
    case DataPath::kRma:
      return "rma";
    case DataPath::kActiveMessages:
      return "am";
  }
  return "unknown";
}

}  // namespace strata::storage::remote

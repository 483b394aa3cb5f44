// How a UcxTransport link chooses between one-sided RMA and active messages when configured
// with DataPath::kAuto, from what the two ends know without measuring: which UCX transports are
// allowed and whether the peer shares this host. Measured on this machine (bench/micro/
// remote_bench, 32 MiB fetches): over tcp, UCX emulates RMA at ~1.05 GB/s against ~4.5 GB/s for
// active messages; over shared memory, endpoints that detect a dead peer (which the transport
// needs) lose UCX's posix RMA path, and RMA runs at ~1.1 GB/s against ~4-5.5 GB/s for active
// messages. So links take active messages, and RMA only where a configured RDMA transport does
// it in hardware. Pure functions; thread-safe.
#pragma once

#include <string_view>

#include "storage/remote/transport.h"

namespace strata::storage::remote {

// `transports` is UCX_TLS syntax: a comma-separated list ("tcp", "posix,cma,tcp", "all"), or a
// list of exclusions after a '^' ("^ib"). Empty means UCX's default, which allows everything.
struct AllowedTransports {
  bool shared_memory = false;
  bool rdma = false;
};
AllowedTransports ParseAllowedTransports(std::string_view transports);

// The data path a link takes: `configured` unless it is kAuto.
DataPath ChooseDataPath(DataPath configured, const AllowedTransports& allowed, bool same_host);

}  // namespace strata::storage::remote

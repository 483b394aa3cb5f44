#include "storage/io/io_engine.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "core/fmt_absl.h"
#include "core/status_macros.h"
#include "core/status_util.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "storage/io/sync_io_engine.h"
#include "storage/io/uring_io_engine.h"

namespace strata::storage {

absl::Status FdatasyncFd(int fd) {
  while (::fdatasync(fd) != 0) {
    if (errno != EINTR) return ErrnoToStatus(errno, fmt::format("fdatasync fd {}", fd));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> RunToCompletion(IoEngine& engine,
                                                     std::span<const IoRequest> requests) {
  return RunToCompletion(engine, requests, [](size_t, int64_t) {});
}

absl::StatusOr<std::vector<int64_t>> RunToCompletion(
    IoEngine& engine, std::span<const IoRequest> requests,
    absl::FunctionRef<void(size_t, int64_t)> in_order) {
  if (engine.in_flight() != 0) {
    return absl::FailedPreconditionError("RunToCompletion: engine has requests in flight");
  }
  std::vector<int64_t> results(requests.size(), 0);
  std::vector<bool> completed(requests.size(), false);
  size_t prefix = 0;  // requests [0, prefix) completed and handed to in_order
  std::vector<IoRequest> window;
  std::vector<IoCompletion> completions(engine.queue_depth());
  size_t next = 0;
  size_t done = 0;
  while (done < requests.size()) {
    const size_t room = engine.queue_depth() - engine.in_flight();
    const size_t count = std::min(room, requests.size() - next);
    window.clear();
    for (size_t i = 0; i < count; ++i) {
      IoRequest request = requests[next + i];
      request.tag = next + i;  // the index, to put the result in place
      window.push_back(request);
    }
    STRATA_RETURN_IF_ERROR(engine.Submit(window));
    next += count;
    STRATA_ASSIGN_OR_RETURN(const size_t n, engine.Wait(1, completions));
    for (size_t i = 0; i < n; ++i) {
      results[completions[i].tag] = completions[i].result;
      completed[completions[i].tag] = true;
    }
    done += n;
    for (; prefix < requests.size() && completed[prefix]; ++prefix) {
      in_order(prefix, results[prefix]);
    }
  }
  return results;
}

absl::StatusOr<std::unique_ptr<IoEngine>> MakeIoEngine(const IoEngineOptions& options) {
  if (options.queue_depth < 16) {
    return absl::InvalidArgumentError(
        fmt::format("io engine: queue_depth {} is below 16", options.queue_depth));
  }
  if (options.kind == IoEngineKind::kSync) {
    return std::make_unique<SyncIoEngine>(options.queue_depth);
  }
  absl::StatusOr<std::unique_ptr<UringIoEngine>> uring = UringIoEngine::Create(options.queue_depth);
  if (uring.ok()) return std::unique_ptr<IoEngine>(std::move(uring).value());
  if (options.kind == IoEngineKind::kIoUring) return uring.status();
  spdlog::warn("io engine: io_uring unavailable ({}); using synchronous pread/pwrite",
               uring.status());
  return std::make_unique<SyncIoEngine>(options.queue_depth);
}

absl::StatusOr<IoEngineKind> ParseIoEngineKind(std::string_view name) {
  if (name == "auto") return IoEngineKind::kAuto;
  if (name == "io_uring") return IoEngineKind::kIoUring;
  if (name == "sync") return IoEngineKind::kSync;
  return absl::InvalidArgumentError(
      fmt::format("io engine: unknown kind '{}' (auto, io_uring, sync)", name));
}

}  // namespace strata::storage

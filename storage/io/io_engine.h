// IoEngine is the seam between the disk tier and the kernel's block I/O: batched, async-style
// reads and writes of aligned buffers at offsets of open files, plus fdatasync.
//
// Threading contract: an IoEngine is not thread-safe. It belongs to one thread at a time (an
// io_uring ring must not be shared between threads that submit concurrently); a component that
// does I/O from several threads keeps one engine per thread or lends engines from a pool so that
// each is used by one thread at a time (DiskTier does the latter). Completions are reaped by the
// thread that calls Wait; nothing runs on other threads.
//
// Alignment: files are opened with O_DIRECT by their owners, so `data`, `offset` and
// `size_bytes` of every request must be multiples of kIoAlignment. The engine does not check
// this; the kernel answers EINVAL.
//
// Buffers: a request's buffer must stay valid and untouched until its completion is returned.
// Memory a caller uses for many requests (the host tier's arena) may be registered with the
// engine (RegisterMemory): the io_uring engine then transfers into it without pinning its pages
// per request. Registration is an optimization: every request is served with or without it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata::storage {

inline constexpr uint64_t kIoAlignment = 4096;

enum class IoOp : uint8_t { kRead, kWrite };

struct IoRequest {
  IoOp op = IoOp::kRead;
  int fd = -1;
  uint64_t offset = 0;
  std::byte* data = nullptr;  // read into / written from; const for writes
  uint32_t size_bytes = 0;
  // Returned in the request's completion; chosen by the caller.
  uint64_t tag = 0;
};

struct IoCompletion {
  uint64_t tag = 0;
  // Bytes transferred (possibly fewer than asked: a short transfer) or -errno.
  int64_t result = 0;
};

class IoEngine {
 public:
  virtual ~IoEngine() = default;

  // "io_uring" or "sync" (wrappers name their inner engine).
  virtual std::string_view name() const = 0;

  // Most requests that may be in flight (submitted, completion not yet returned by Wait).
  virtual size_t queue_depth() const = 0;

  // Requests submitted whose completions Wait has not returned yet.
  virtual size_t in_flight() const = 0;

  // Starts every request. `requests.size()` must not exceed queue_depth() - in_flight()
  // (kInvalidArgument otherwise, nothing started). A per-request failure is reported in its
  // completion; a non-OK status here means the engine itself failed and nothing was started.
  virtual absl::Status Submit(std::span<const IoRequest> requests) = 0;

  // Blocks until at least min(min_completions, in_flight()) completions are available, then
  // moves up to out.size() of them into `out` (in completion order) and returns how many.
  virtual absl::StatusOr<size_t> Wait(size_t min_completions, std::span<IoCompletion> out) = 0;

  // fdatasync(fd), blocking. The status of a failed sync carries the errno's code.
  virtual absl::Status Fdatasync(int fd) = 0;

  // Registers `regions` (disjoint; empty ones are ignored) for the requests that follow, in place
  // of any earlier registration; no regions unregisters. The engine must have nothing in flight
  // (kFailedPrecondition otherwise). The caller keeps every registered region mapped until it
  // registers other regions or destroys the engine: requests into a registered region use the
  // pages pinned at registration. On an error (the kernel refused: ENOMEM over RLIMIT_MEMLOCK,
  // EOPNOTSUPP for some file-backed memory; kInvalidArgument for overlapping regions) the engine
  // has no region registered and keeps serving every request. Engines without registration
  // accept and ignore the regions.
  virtual absl::Status RegisterMemory(std::span<const std::span<std::byte>> regions) = 0;
};

// fdatasync(fd), retried on EINTR; what both engines' Fdatasync do (a blocking call either way).
absl::Status FdatasyncFd(int fd);

// Runs `requests` to completion, at most queue_depth() at a time, and returns each one's result
// in request order (bytes transferred or -errno). The engine must have nothing in flight.
absl::StatusOr<std::vector<int64_t>> RunToCompletion(IoEngine& engine,
                                                     std::span<const IoRequest> requests);
// The same, and calls `in_order(i, result)` for every request, in request order, as soon as it
// and all requests before it have completed: a caller consumes a finished prefix (checksums
// it) while the rest is still in flight.
absl::StatusOr<std::vector<int64_t>> RunToCompletion(
    IoEngine& engine, std::span<const IoRequest> requests,
    absl::FunctionRef<void(size_t, int64_t)> in_order);

enum class IoEngineKind : uint8_t {
  kAuto,     // io_uring when the kernel lets us set up a ring, else sync (logged once per call)
  kIoUring,  // io_uring or an error
  kSync,     // pread / pwrite
};

struct IoEngineOptions {
  IoEngineKind kind = IoEngineKind::kAuto;
  // Ring size of the io_uring engine and in-flight limit of both engines; at least 16.
  uint32_t queue_depth = 32;
};

// Builds an engine. kAuto falls back to the sync engine, with a warning log line naming the
// reason, when io_uring setup fails (old kernel, seccomp, io_uring_disabled sysctl).
absl::StatusOr<std::unique_ptr<IoEngine>> MakeIoEngine(const IoEngineOptions& options);

// Parses "auto", "io_uring" or "sync"; kInvalidArgument otherwise.
absl::StatusOr<IoEngineKind> ParseIoEngineKind(std::string_view name);

}  // namespace strata::storage

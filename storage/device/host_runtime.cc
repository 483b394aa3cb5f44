#include "storage/device/host_runtime.h"

#include <pthread.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "absl/functional/function_ref.h"
#include "core/status_macros.h"
#include "fmt/format.h"
#include "storage/device/host_shared_memory.h"
#include "storage/device/streaming_copy.h"

namespace strata::storage {
namespace {

struct EventState;
bool ReachedGeneration(std::pair<EventState*, uint64_t>* arg);

// Completion state of a HostEvent, shared with the stream operations that signal it (so an
// event may be destroyed while a signal for it is still queued).
struct EventState {
  absl::Mutex mu;
  uint64_t recorded ABSL_GUARDED_BY(mu) = 0;   // generation of the latest Record
  uint64_t completed ABSL_GUARDED_BY(mu) = 0;  // latest generation that completed
  absl::Status status ABSL_GUARDED_BY(mu);     // of the completed generation
};

bool ReachedGeneration(std::pair<EventState*, uint64_t>* arg) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  return arg->first->completed >= arg->second;
}

class HostEvent final : public DeviceEvent {
 public:
  HostEvent() : state_(std::make_shared<EventState>()) {}

  absl::Status Wait() override {
    EventState& s = *state_;
    absl::MutexLock lock(&s.mu);
    std::pair<EventState*, uint64_t> arg{&s, s.recorded};
    s.mu.Await(absl::Condition(&ReachedGeneration, &arg));
    return s.status;
  }

  absl::StatusOr<bool> Query() override {
    absl::MutexLock lock(&state_->mu);
    if (state_->completed < state_->recorded) return false;
    if (!state_->status.ok()) return state_->status;
    return true;
  }

  const std::shared_ptr<EventState>& state() const { return state_; }

 private:
  std::shared_ptr<EventState> state_;
};

struct CopyOp {
  std::vector<CopyRun> runs;
  std::vector<uint32_t> digest_of;  // per run when digesting, else empty
  CopyDigests* digests = nullptr;   // null: a plain copy
  uint64_t total_bytes = 0;
};
struct SignalOp {
  std::shared_ptr<EventState> event;
  uint64_t generation = 0;
};
struct WaitOp {
  std::shared_ptr<EventState> event;
  uint64_t generation = 0;
};
struct DecodeOp {
  std::vector<DecodeLayerOp> layers;
};
using Op = std::variant<CopyOp, DecodeOp, SignalOp, WaitOp>;

// Batches at least this large are split into byte-balanced slices copied by the stream's
// helper threads as well: one core's memcpy does not saturate DRAM bandwidth, so a layer of many
// medium runs (one per engine block) moves faster on a few cores. They are also larger than a
// core's share of the last-level cache, so their destination is written with non-temporal
// stores (StreamingCopy) rather than read into the cache first.
constexpr uint64_t kParallelBatchBytes = 8ull << 20;

// One thread's share of a large batch: runs in order, with the digest each feeds (when the
// batch digests).
struct CopySlice {
  std::vector<CopyRun> runs;
  std::vector<uint32_t> digest_of;
};

// Splits `runs` into `parts` slices of (possibly partial) runs of about equal bytes, in order.
std::vector<CopySlice> Slice(const std::vector<CopyRun>& runs, uint64_t total, size_t parts) {
  std::vector<CopySlice> slices(parts);
  const uint64_t per_slice = (total + parts - 1) / parts;
  size_t slice = 0;
  uint64_t filled = 0;
  for (CopyRun run : runs) {
    while (run.size_bytes > 0) {
      const uint64_t take = std::min(run.size_bytes, per_slice - filled);
      slices[slice].runs.push_back({run.src, run.dst, take});
      run.src = static_cast<const std::byte*>(run.src) + take;
      run.dst = static_cast<std::byte*>(run.dst) + take;
      run.size_bytes -= take;
      filled += take;
      if (filled == per_slice && slice + 1 < parts) {
        ++slice;
        filled = 0;
      }
    }
  }
  return slices;
}

// Splits a digesting batch into `parts` slices by whole digests (a digest must be fed by one
// thread, in order), each digest to the slice with the fewest bytes so far.
std::vector<CopySlice> SliceByDigest(const CopyOp& op, size_t parts) {
  std::vector<uint64_t> digest_bytes(op.digests->size(), 0);
  for (size_t i = 0; i < op.runs.size(); ++i)
    digest_bytes[op.digest_of[i]] += op.runs[i].size_bytes;
  std::vector<uint64_t> slice_bytes(parts, 0);
  std::vector<size_t> slice_of(op.digests->size(), parts);  // parts: not assigned yet
  std::vector<CopySlice> slices(parts);
  for (size_t i = 0; i < op.runs.size(); ++i) {
    const uint32_t digest = op.digest_of[i];
    if (slice_of[digest] == parts) {
      slice_of[digest] = static_cast<size_t>(
          std::min_element(slice_bytes.begin(), slice_bytes.end()) - slice_bytes.begin());
      slice_bytes[slice_of[digest]] += digest_bytes[digest];
    }
    slices[slice_of[digest]].runs.push_back(op.runs[i]);
    slices[slice_of[digest]].digest_of.push_back(digest);
  }
  return slices;
}

// Copies `run` (unless its dst is null) and folds its source bytes into `digest`, piece by
// piece, so each piece is digested while the copy has it in the L1 cache.
void CopyAndDigest(const CopyRun& run, CopyDigests& digests, uint32_t digest, bool streaming) {
  constexpr uint64_t kPieceBytes = 8 << 10;
  const auto* src = static_cast<const std::byte*>(run.src);
  auto* dst = static_cast<std::byte*>(run.dst);
  for (uint64_t done = 0; done < run.size_bytes; done += kPieceBytes) {
    const uint64_t piece = std::min(kPieceBytes, run.size_bytes - done);
    if (dst != nullptr && streaming) StreamingCopy(dst + done, src + done, piece);
    if (dst != nullptr && !streaming) std::memcpy(dst + done, src + done, piece);
    digests.Update(digest, src + done, piece);
  }
}

// Copies `runs` in order, folding run i into digests[digest_of[i]] when `digests` is set; with
// `streaming`, through non-temporal stores followed by a fence, so the bytes are in place before
// the caller reports them done.
void CopyRuns(std::span<const CopyRun> runs, std::span<const uint32_t> digest_of,
              CopyDigests* digests, bool streaming) {
  for (size_t i = 0; i < runs.size(); ++i) {
    const CopyRun& run = runs[i];
    if (digests != nullptr) {
      CopyAndDigest(run, *digests, digest_of[i], streaming);
    } else if (streaming) {
      StreamingCopy(run.dst, run.src, run.size_bytes);
    } else if (run.size_bytes > 0) {
      std::memcpy(run.dst, run.src, run.size_bytes);
    }
  }
  if (streaming) StreamingCopyFence();
}

// Helper threads of one stream: Run runs task 0 on the calling thread and the others on the
// helpers, and returns when all are done. Used only by the stream's thread.
class HelperPool {
 public:
  HelperPool(size_t helpers, const std::string& name) {
    for (size_t i = 0; i < helpers; ++i) {
      threads_.emplace_back([this] { Work(); });
      const std::string thread_name = fmt::format("strata-{}{}", name, i).substr(0, 15);
      pthread_setname_np(threads_.back().native_handle(), thread_name.c_str());
    }
  }
  ~HelperPool() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    for (auto& thread : threads_) thread.join();
  }
  size_t helpers() const { return threads_.size(); }

  // Runs task(0) .. task(count - 1) (count >= 1), in any order and concurrently.
  void Run(size_t count, absl::FunctionRef<void(size_t)> task) {
    {
      absl::MutexLock lock(&mu_);
      task_ = &task;
      count_ = count;
      next_ = 1;
      pending_ = count - 1;
    }
    task(0);
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](HelperPool* pool) ABSL_NO_THREAD_SAFETY_ANALYSIS { return pool->pending_ == 0; },
        this));
    task_ = nullptr;
  }

 private:
  void Work() {
    for (;;) {
      absl::FunctionRef<void(size_t)>* task;
      size_t index;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](HelperPool* pool) ABSL_NO_THREAD_SAFETY_ANALYSIS {
              return pool->stopping_ || (pool->task_ != nullptr && pool->next_ < pool->count_);
            },
            this));
        if (stopping_) return;
        task = task_;
        index = next_++;
      }
      (*task)(index);
      absl::MutexLock lock(&mu_);
      --pending_;
    }
  }

  absl::Mutex mu_;
  absl::FunctionRef<void(size_t)>* task_ ABSL_GUARDED_BY(mu_) = nullptr;
  size_t count_ ABSL_GUARDED_BY(mu_) = 0;
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  size_t pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::jthread> threads_;  // last: joined before the state above goes
};

// Copies `slices` (one per thread of `pool`) together.
void CopySlices(HelperPool& pool, const std::vector<CopySlice>& slices, CopyDigests* digests) {
  pool.Run(slices.size(), [&](size_t i) {
    CopyRuns(slices[i].runs, slices[i].digest_of, digests, /*streaming=*/true);
  });
}

class HostStream final : public DeviceStream {
 public:
  HostStream(std::string_view name, const HostRuntimeOptions* options)
      : options_(options), name_(name) {
    if (options->copy_threads > 1) {
      pool_ = std::make_unique<HelperPool>(options->copy_threads - 1, name_);
    }
    thread_ = std::jthread([this] { Run(); });
    const std::string thread_name = fmt::format("strata-{}", name_).substr(0, 15);
    pthread_setname_np(thread_.native_handle(), thread_name.c_str());
  }

  ~HostStream() override {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    thread_.join();
  }

  absl::Status Copy(std::span<const CopyRun> runs) override {
    for (const CopyRun& run : runs) {
      if (run.size_bytes > 0 && (run.src == nullptr || run.dst == nullptr)) {
        return absl::InvalidArgumentError(
            fmt::format("host stream {}: copy run with a null pointer", name_));
      }
    }
    if (runs.empty()) return absl::OkStatus();
    uint64_t total = 0;
    for (const CopyRun& run : runs) total += run.size_bytes;
    Enqueue(CopyOp{.runs = std::vector<CopyRun>(runs.begin(), runs.end()), .total_bytes = total});
    return absl::OkStatus();
  }

  absl::Status CopyDigested(std::span<const CopyRun> runs, std::span<const uint32_t> digest_of,
                            CopyDigests& digests) override {
    if (digest_of.size() != runs.size()) {
      return absl::InvalidArgumentError(fmt::format("host stream {}: {} digest indexes for {} runs",
                                                    name_, digest_of.size(), runs.size()));
    }
    uint64_t total = 0;
    for (size_t i = 0; i < runs.size(); ++i) {
      if (runs[i].size_bytes > 0 && runs[i].src == nullptr) {
        return absl::InvalidArgumentError(
            fmt::format("host stream {}: copy run with a null source", name_));
      }
      if (digest_of[i] >= digests.size()) {
        return absl::InvalidArgumentError(
            fmt::format("host stream {}: digest {} of {}", name_, digest_of[i], digests.size()));
      }
      total += runs[i].size_bytes;
    }
    if (runs.empty()) return absl::OkStatus();
    Enqueue(CopyOp{.runs = std::vector<CopyRun>(runs.begin(), runs.end()),
                   .digest_of = std::vector<uint32_t>(digest_of.begin(), digest_of.end()),
                   .digests = &digests,
                   .total_bytes = total});
    return absl::OkStatus();
  }

  absl::Status DecodeLayers(std::span<const DecodeLayerOp> ops) override {
    STRATA_RETURN_IF_ERROR(CheckDecodeLayerOps(ops, fmt::format("host stream {}", name_)));
    if (ops.empty()) return absl::OkStatus();
    Enqueue(DecodeOp{.layers = std::vector<DecodeLayerOp>(ops.begin(), ops.end())});
    return absl::OkStatus();
  }

  absl::Status Record(DeviceEvent& event) override {
    auto* host_event = dynamic_cast<HostEvent*>(&event);
    if (host_event == nullptr) {
      return absl::InvalidArgumentError("host stream: event of another runtime");
    }
    uint64_t generation;
    {
      absl::MutexLock lock(&host_event->state()->mu);
      generation = ++host_event->state()->recorded;
    }
    Enqueue(SignalOp{host_event->state(), generation});
    return absl::OkStatus();
  }

  absl::Status WaitForEvent(DeviceEvent& event) override {
    auto* host_event = dynamic_cast<HostEvent*>(&event);
    if (host_event == nullptr) {
      return absl::InvalidArgumentError("host stream: event of another runtime");
    }
    uint64_t generation;
    {
      absl::MutexLock lock(&host_event->state()->mu);
      generation = host_event->state()->recorded;
    }
    if (generation == 0) return absl::OkStatus();  // never recorded: complete
    Enqueue(WaitOp{host_event->state(), generation});
    return absl::OkStatus();
  }

  absl::Status WaitForExternal(ExternalStream /*external*/) override { return absl::OkStatus(); }

  absl::Status Synchronize() override {
    HostEvent done;
    absl::Status recorded = Record(done);  // cannot fail: our own event type
    if (recorded.ok()) (void)done.Wait();
    absl::MutexLock lock(&mu_);
    return std::exchange(error_, absl::OkStatus());
  }

 private:
  void Enqueue(Op op) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(op));
  }

  // Runs queued operations in order until the stream is destroyed and the queue is drained.
  void Run() {
    for (;;) {
      Op op;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](HostStream* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
              return !self->queue_.empty() || self->stopping_;
            },
            this));
        if (queue_.empty()) return;  // stopping and drained
        op = std::move(queue_.front());
        queue_.pop_front();
      }
      std::visit([this](auto& o) { Execute(o); }, op);
    }
  }

  void Execute(CopyOp& op) {
    // With a copy hook (fault injection) runs go one by one, in order, on this thread.
    if (!options_->copy_hook && op.total_bytes >= kParallelBatchBytes) {
      if (pool_ == nullptr) {
        CopyRuns(op.runs, op.digest_of, op.digests, /*streaming=*/true);
      } else if (op.digests != nullptr) {
        CopySlices(*pool_, SliceByDigest(op, pool_->helpers() + 1), op.digests);
      } else {
        CopySlices(*pool_, Slice(op.runs, op.total_bytes, pool_->helpers() + 1), nullptr);
      }
      return;
    }
    for (size_t i = 0; i < op.runs.size(); ++i) {
      if (options_->copy_hook) {
        absl::Status hooked = options_->copy_hook(op.runs[i]);
        if (!hooked.ok()) {
          absl::MutexLock lock(&mu_);
          if (error_.ok()) error_ = std::move(hooked);
          break;
        }
      }
      CopyRuns(std::span(op.runs).subspan(i, 1),
               op.digests == nullptr ? std::span<const uint32_t>()
                                     : std::span<const uint32_t>(op.digest_of).subspan(i, 1),
               op.digests, /*streaming=*/false);
    }
  }

  // The layers of one call side by side on the helpers. A decode's failure is its chunk's, not
  // the stream's (DeviceStream::DecodeLayers).
  void Execute(DecodeOp& op) {
    const auto decode = [&op](size_t i) {
      const DecodeLayerOp& layer = op.layers[i];
      // A head given must be the frame's (a runtime that cannot read the frame plans from it).
      if (layer.frame_head.size() > layer.frame_bytes ||
          (!layer.frame_head.empty() &&
           std::memcmp(layer.frame_head.data(), layer.frame, layer.frame_head.size()) != 0)) {
        *layer.failure = absl::InvalidArgumentError(
            "host stream: the frame head given is not the frame's first bytes");
        return;
      }
      absl::Status decoded =
          layer.codec->DecodeLayer(*layer.layout, {layer.frame, layer.frame_bytes}, layer.layer,
                                   {layer.out, layer.out_bytes});
      if (!decoded.ok()) *layer.failure = std::move(decoded);
    };
    if (pool_ == nullptr || op.layers.size() == 1) {
      for (size_t i = 0; i < op.layers.size(); ++i) decode(i);
    } else {
      pool_->Run(op.layers.size(), decode);
    }
  }

  void Execute(SignalOp& op) {
    absl::Status status;
    {
      absl::MutexLock lock(&mu_);
      status = error_;
    }
    absl::MutexLock lock(&op.event->mu);
    if (op.generation > op.event->completed) {
      op.event->completed = op.generation;
      op.event->status = std::move(status);
    }
  }

  void Execute(WaitOp& op) {
    EventState& s = *op.event;
    absl::MutexLock lock(&s.mu);
    std::pair<EventState*, uint64_t> arg{&s, op.generation};
    s.mu.Await(absl::Condition(&ReachedGeneration, &arg));
  }

  const HostRuntimeOptions* const options_;
  const std::string name_;
  absl::Mutex mu_;
  std::deque<Op> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<HelperPool> pool_;  // null with one copy thread
  std::jthread thread_;               // last: started after, joined before, the state above
};

class HostAllocation final : public DeviceAllocation {
 public:
  HostAllocation(void* data, uint64_t size_bytes, MemoryKind kind)
      : data_(data), size_bytes_(size_bytes), kind_(kind) {}
  ~HostAllocation() override { std::free(data_); }
  void* data() const override { return data_; }
  uint64_t size_bytes() const override { return size_bytes_; }
  MemoryKind kind() const override { return kind_; }

 private:
  void* data_;
  uint64_t size_bytes_;
  MemoryKind kind_;
};

}  // namespace

size_t DefaultHostCopyThreads() {
  const size_t cores = std::max(1u, std::thread::hardware_concurrency());
  return std::clamp<size_t>(cores / 4, 2, 4);
}

HostRuntime::HostRuntime(HostRuntimeOptions options) : options_(std::move(options)) {
  capabilities_.backend = std::string(internal_device::kHostBackend);
  capabilities_.device_name = "cpu";
  capabilities_.device_ordinal = -1;
  capabilities_.device_memory = false;
  capabilities_.batched_copies = false;
  capabilities_.host_registration = false;
  capabilities_.digested_copies = true;
}

HostRuntime::~HostRuntime() = default;

absl::StatusOr<std::unique_ptr<DeviceStream>> HostRuntime::CreateStream(std::string_view name) {
  return std::make_unique<HostStream>(name, &options_);
}

absl::StatusOr<std::unique_ptr<DeviceEvent>> HostRuntime::CreateEvent() {
  return std::make_unique<HostEvent>();
}

absl::StatusOr<std::unique_ptr<DeviceAllocation>> HostRuntime::Allocate(uint64_t size_bytes,
                                                                        MemoryKind kind) {
  if (size_bytes == 0) return absl::InvalidArgumentError("host runtime: allocation of 0 bytes");
  constexpr uint64_t kAlignment = 4096;
  const uint64_t rounded = (size_bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* data = std::aligned_alloc(kAlignment, rounded);
  if (data == nullptr) {
    return absl::ResourceExhaustedError(
        fmt::format("host runtime: cannot allocate {} bytes", size_bytes));
  }
  return std::make_unique<HostAllocation>(data, size_bytes, kind);
}

absl::StatusOr<std::unique_ptr<ShareableAllocation>> HostRuntime::AllocateShareable(
    uint64_t size_bytes, std::string_view name) {
  return internal_device::AllocateHostShareable(size_bytes, name);
}

absl::StatusOr<std::unique_ptr<DeviceAllocation>> HostRuntime::OpenShared(
    const SharedMemoryHandle& handle) {
  return internal_device::OpenHostShared(handle);
}

absl::Status HostRuntime::RegisterHostMemory(void* base, uint64_t size_bytes) {
  if (base == nullptr || size_bytes == 0) {
    return absl::InvalidArgumentError("host runtime: register of a null or empty range");
  }
  const auto* begin = static_cast<const std::byte*>(base);
  absl::MutexLock lock(&mu_);
  for (const auto& [other, other_size] : registered_) {
    const auto* other_begin = static_cast<const std::byte*>(other);
    if (begin < other_begin + other_size && other_begin < begin + size_bytes) {
      return absl::InvalidArgumentError("host runtime: range overlaps a registered range");
    }
  }
  registered_.emplace(base, size_bytes);
  return absl::OkStatus();
}

absl::Status HostRuntime::UnregisterHostMemory(void* base) {
  absl::MutexLock lock(&mu_);
  if (registered_.erase(base) == 0) {
    return absl::InvalidArgumentError("host runtime: unregister of an unregistered range");
  }
  return absl::OkStatus();
}

std::map<const void*, uint64_t> HostRuntime::RegisteredHostMemory() const {
  absl::MutexLock lock(&mu_);
  return registered_;
}

}  // namespace strata::storage

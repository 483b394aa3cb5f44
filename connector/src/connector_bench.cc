// Connector micro-benchmarks against the daemon's real engine-session server (in-process, on a
// Unix socket), each with its same-run baseline:
//   BM_LookupRoundTrip   one Lookup round trip for a 32K-token prompt (128 keys of 256 tokens),
//                        keys precomputed; p50 / p99 as counters, next to BM_FramePingPong: the
//                        same frames' round trip between two threads with no work in it.
//   BM_GetNumNewMatched  the scheduler's whole call for the same prompt (key hashing included).
//   BM_LoadPath          the worker's load path end to end (PrepareLoad, per-layer copies into
//                        paged KV, per-layer waits, Release) for 16 chunks of a Llama-3-8B-like
//                        layout, in bytes per second, next to BM_Memcpy of the same bytes.
//   BM_CompressedLoadPath  the same load path for chunks the daemon holds compressed (int8,
//                        kivi4), decoded by the worker as each layer loads, next to the same
//                        chunks plain.
//   BM_StorePath         the worker's store path alone (PrepareStore, per-layer copies out of
//                        paged KV, Commit) for the same 16 chunks into a warm and into a cold
//                        arena, in bytes per second and as a ratio to a memcpy of the same bytes
//                        timed in the same rounds (x_memcpy), with the page faults it takes.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "bench/support/model_layouts.h"
#include "benchmark/benchmark.h"
#include "connector/src/engine_client.h"
#include "connector/src/testing/test_daemon.h"
#include "core/background_prefault.h"
#include "core/frame_io.h"
#include "core/scoped_fd.h"
#include "core/status_macros.h"
#include "storage/codec/codec_registry.h"
#include "storage/codec/testing/shaped_kv.h"
#include "storage/device/device_runtime_factory.h"
#include "storage/device/host_runtime.h"
#include "strata/connector.h"

namespace strata::connector {
namespace {

using std::chrono::milliseconds;

void Percentiles(benchmark::State& state, std::vector<double>& micros) {
  std::sort(micros.begin(), micros.end());
  if (micros.empty()) return;
  state.counters["p50_us"] = micros[micros.size() / 2];
  state.counters["p99_us"] = micros[std::min(micros.size() - 1, micros.size() * 99 / 100)];
}

// Commits chunks for `tokens` to the tier (placeholder bytes).
void Populate(storage::HostTier& tier, const KvLayout& layout, const std::vector<ChunkKey>& keys) {
  for (const ChunkKey& key : keys) {
    auto reserved = tier.Reserve(layout, key, {.num_tokens = layout.chunk_tokens});
    if (!reserved.ok() || reserved->outcome != storage::ReserveOutcome::kReserved) continue;
    (void)tier.Commit(std::move(reserved->reservation));
  }
}

void BM_LookupRoundTrip(benchmark::State& state) {
  const KvLayout layout = bench::Llama8bLayout();
  testing::TestDaemon daemon({.capacity_bytes = 8ull << 30, .page_bytes = 2 << 20});
  if (!daemon.Start().ok()) return state.SkipWithError("daemon");
  std::vector<uint32_t> prompt(32 * 1024);
  std::iota(prompt.begin(), prompt.end(), 1);
  const std::vector<ChunkKey> keys = KeyHasher::Create(layout, {})->PrefixKeys(prompt, {});
  // Half the chain cached: the daemon walks 64 hits and stops at a miss.
  Populate(*daemon.tier(), layout, std::vector<ChunkKey>(keys.begin(), keys.begin() + 64));
  auto client = *internal::EngineClient::Create(
      {.socket_path = daemon.socket_path(), .layout = layout, .map_arena = false});
  // range(0) keys of the chain: 128 is the 32K-token prompt; 1 shows the fixed cost.
  const std::span<const ChunkKey> sent = std::span(keys).first(state.range(0));
  const uint32_t expected = std::min<uint32_t>(64, static_cast<uint32_t>(sent.size()));
  std::vector<double> micros;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    auto hits = client->LookupChain(sent, milliseconds(1000));
    micros.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
    if (!hits.ok() || hits->chunks != expected) return state.SkipWithError("lookup failed");
  }
  Percentiles(state, micros);
}
BENCHMARK(BM_LookupRoundTrip)->Arg(128)->Arg(1)->Iterations(2000)->UseRealTime();

// BM_LookupRoundTrip's same-run baseline: a frame of range(0) bytes sent over a Unix socketpair
// to a thread that blocks for it and sends it back, received with the client's own spin; what
// this box's socket wakeups cost a round trip with no work in it (a 128-key Lookup request is
// about 2.5 KiB, its reply tens of bytes).
void BM_FramePingPong(benchmark::State& state) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return state.SkipWithError("socketpair");
  }
  ScopedFd echo_end(fds[1]);
  std::jthread echo([&echo_end] {
    // Ends when the client's end closes (declared after this thread, so it closes first).
    for (;;) {
      absl::StatusOr<ReceivedFrame> frame =
          RecvFrame(echo_end.get(), milliseconds(10'000), std::chrono::microseconds(0));
      if (!frame.ok() || !SendFrame(echo_end.get(), frame->payload, milliseconds(1000)).ok()) {
        return;
      }
    }
  });
  ScopedFd client(fds[0]);
  const std::string payload(static_cast<size_t>(state.range(0)), 'x');
  std::vector<double> micros;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    absl::Status sent = SendFrame(client.get(), payload, milliseconds(1000));
    absl::StatusOr<ReceivedFrame> reply =
        sent.ok() ? RecvFrame(client.get(), milliseconds(1000), internal::kDefaultReplySpin)
                  : absl::StatusOr<ReceivedFrame>(sent);
    micros.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
    if (!reply.ok() || reply->payload.size() != payload.size()) {
      return state.SkipWithError("ping-pong failed");
    }
  }
  Percentiles(state, micros);
}
BENCHMARK(BM_FramePingPong)->Arg(2560)->Arg(64)->Iterations(2000)->UseRealTime();

void BM_GetNumNewMatched(benchmark::State& state) {
  const KvLayout layout = bench::Llama8bLayout();
  testing::TestDaemon daemon({.capacity_bytes = 8ull << 30, .page_bytes = 2 << 20});
  if (!daemon.Start().ok()) return state.SkipWithError("daemon");
  std::vector<uint32_t> prompt(32 * 1024);
  std::iota(prompt.begin(), prompt.end(), 1);
  const std::vector<ChunkKey> keys = KeyHasher::Create(layout, {})->PrefixKeys(prompt, {});
  Populate(*daemon.tier(), layout, std::vector<ChunkKey>(keys.begin(), keys.begin() + 64));
  ConnectorOptions options;
  options.socket_path = daemon.socket_path();
  options.layout = layout;
  auto scheduler = *SchedulerConnector::Create(options);
  std::vector<double> micros;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    const MatchResult result =
        scheduler->GetNumNewMatchedTokens({.request_id = "r", .prompt_tokens = prompt}, 0);
    micros.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
    if (result.num_tokens != 64 * 256) return state.SkipWithError("wrong hits");
  }
  Percentiles(state, micros);
}
BENCHMARK(BM_GetNumNewMatched)->Iterations(1000)->UseRealTime();

constexpr int64_t kLoadChunks = 16;

// An engine's paged KV for `tokens` tokens in blocks of `block_size`: one allocation per layer
// in vLLM's FlashAttention layout [2][num_blocks][block_size][kv_heads][head_dim] from `memory`
// (touched when in host memory), and a request's blocks in reverse order (not contiguous: one
// run per block and plane).
struct EngineKv {
  std::vector<std::unique_ptr<storage::DeviceAllocation>> memory;
  std::vector<LayerKvCache> layers;
  std::vector<int32_t> block_ids;
};

EngineKv AllocateEngineKv(storage::DeviceRuntime& memory, const KvLayout& layout, int64_t tokens,
                          int64_t block_size, bool host) {
  EngineKv kv;
  const int64_t num_blocks = tokens / block_size + 1;
  const int64_t row = layout.num_kv_heads * layout.head_dim;
  const int64_t plane = num_blocks * block_size * row;
  for (uint32_t l = 0; l < layout.num_layers; ++l) {
    kv.memory.push_back(*memory.Allocate(2 * plane * 2, storage::MemoryKind::kDevice));
    if (host) std::memset(kv.memory.back()->data(), 1, 2 * plane * 2);
    kv.layers.push_back({.kv = {kv.memory.back()->data(),
                                {2, num_blocks, block_size, layout.num_kv_heads, layout.head_dim},
                                {plane, block_size * row, row, layout.head_dim, 1}}});
  }
  kv.block_ids.resize(num_blocks);
  std::iota(kv.block_ids.begin(), kv.block_ids.end(), 0);
  std::reverse(kv.block_ids.begin(), kv.block_ids.end());
  return kv;
}

ConnectorOptions WorkerOptions(const testing::TestDaemon& daemon, const KvLayout& layout,
                               int64_t block_size) {
  ConnectorOptions options;
  options.socket_path = daemon.socket_path();
  options.layout = layout;
  options.block_size = static_cast<uint32_t>(block_size);
  options.io_timeout = milliseconds(5000);
  return options;
}

// Loads `prompt`'s chunks (cached by `daemon`) into fresh paged KV in blocks of `block_size`
// through a worker on `runtime`, engine memory from `memory`, once per iteration, and counts
// the decoded bytes. The first load (page faults, arena registration) is a warm-up outside the
// timing.
void TimeLoads(benchmark::State& state, const testing::TestDaemon& daemon, const KvLayout& layout,
               const std::vector<uint32_t>& prompt, int64_t block_size,
               std::unique_ptr<storage::DeviceRuntime> runtime, storage::DeviceRuntime& memory,
               bool host_memory) {
  const int64_t tokens = kLoadChunks * layout.chunk_tokens;
  const EngineKv kv = AllocateEngineKv(memory, layout, tokens, block_size, host_memory);
  auto worker =
      *WorkerConnector::Create(WorkerOptions(daemon, layout, block_size), std::move(runtime));
  if (!worker->RegisterKvCaches(kv.layers).ok()) return state.SkipWithError("register");
  ConnectorMetadata meta{.block_size = static_cast<uint32_t>(block_size),
                         .chunk_tokens = layout.chunk_tokens};
  meta.loads.push_back({.request_id = "r",
                        .tokens = std::vector<uint32_t>(prompt.begin(), prompt.begin() + tokens),
                        .token_begin = 0,
                        .token_end = tokens,
                        .block_ids = kv.block_ids});
  const uint64_t bytes = layout.chunk_bytes(layout.chunk_tokens) * kLoadChunks;
  double first_layer_s = 0;  // from StartLoadKv to layer 0's wait returning, summed
  const auto load = [&] {
    const auto start = std::chrono::steady_clock::now();
    if (!worker->StartLoadKv(meta).ok()) return false;
    for (uint32_t l = 0; l < layout.num_layers; ++l) {
      (void)worker->WaitForLayerLoad(l);
      if (l == 0) {
        first_layer_s +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
    }
    (void)worker->WaitForSave();
    return worker->GetBlockIdsWithLoadErrors().empty();
  };
  if (!load()) return state.SkipWithError("warm-up load failed");
  if (!worker->Stats().connected) return state.SkipWithError("not connected");
  const WorkerStats warm = worker->Stats();
  first_layer_s = 0;
  for (auto _ : state) {
    if (!load()) return state.SkipWithError("load failed");
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes * state.iterations()));
  // When the engine may start on layer 0: what a layer-wise load is for.
  state.counters["first_layer_ms"] = first_layer_s * 1e3 / double(state.iterations());
  const WorkerStats done = worker->Stats();
  if (done.chunks_decoded > warm.chunks_decoded) {
    // What crossed to the device against what the engine received.
    state.counters["x_smaller"] =
        static_cast<double>(done.bytes_loaded - warm.bytes_loaded) /
        static_cast<double>(done.encoded_bytes_loaded - warm.encoded_bytes_loaded);
  }
}

// range(0): engine block size; range(1): 0 = host engine (HostRuntime), 1 = KV in GPU memory
// (CudaRuntime; skipped without a GPU); range(2) below.
void BM_LoadPath(benchmark::State& state) {
  const KvLayout layout = bench::Llama8bLayout();
  const int64_t block_size = state.range(0);
  const bool cuda = state.range(1) == 1;
  const int64_t tokens = kLoadChunks * layout.chunk_tokens;
  std::unique_ptr<storage::DeviceRuntime> runtime;
  if (cuda) {
    auto created = storage::CreateDeviceRuntime({.backend = storage::DeviceBackend::kCuda});
    if (!created.ok()) return state.SkipWithError("no CUDA device");
    runtime = std::move(*created);
  } else {
    runtime = std::make_unique<storage::HostRuntime>();
  }
  auto memory = storage::CreateDeviceRuntime(
      {.backend = cuda ? storage::DeviceBackend::kCuda : storage::DeviceBackend::kHost});
  // range(2): 1 = the daemon verifies each chunk's checksum on every lease (its default),
  // 0 = only on the first (the connector's own cost).
  testing::TestDaemon daemon({.capacity_bytes = 1ull << 30,
                              .page_bytes = 2 << 20,
                              .verify_every_n_loads = state.range(2) == 1 ? 1u : 1u << 30});
  if (!daemon.Start().ok()) return state.SkipWithError("daemon");
  std::vector<uint32_t> prompt(tokens + 1);
  std::iota(prompt.begin(), prompt.end(), 1);
  const std::vector<ChunkKey> keys = KeyHasher::Create(layout, {})->PrefixKeys(prompt, {});
  Populate(*daemon.tier(), layout, keys);
  TimeLoads(state, daemon, layout, prompt, block_size, std::move(runtime), **memory, !cuda);
}
BENCHMARK(BM_LoadPath)
    ->Args({16, 0, 0})
    ->Args({256, 0, 0})
    ->Args({16, 0, 1})
    ->Args({16, 1, 0})
    ->Args({256, 1, 0})
    ->Args({16, 1, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The load path of compressed chunks: range(0) names the codec the daemon holds the 16 chunks
// in (shaped KV: storage/codec/testing/shaped_kv.h), decoded by the worker's HostRuntime as each
// layer loads (ConnectorOptions::decode_on_device); "none" is the same chunks plain, the
// same-run baseline. Block size 16; the daemon verifies on the first lease only. x_smaller: the
// engine's bytes over the frames' (what crossed to the device).
void BM_CompressedLoadPath(benchmark::State& state) {
  static constexpr const char* kCodecs[] = {"none", "int8", "kivi4"};
  const std::string_view codec = kCodecs[state.range(0)];
  state.SetLabel(std::string(codec));
  const KvLayout layout = bench::Llama8bLayout();
  const int64_t tokens = kLoadChunks * layout.chunk_tokens;
  testing::TestDaemon daemon(
      {.capacity_bytes = 1ull << 30, .page_bytes = 2 << 20, .verify_every_n_loads = 1u << 30});
  if (!daemon.Start().ok()) return state.SkipWithError("daemon");
  std::vector<uint32_t> prompt(tokens + 1);
  std::iota(prompt.begin(), prompt.end(), 1);
  const std::vector<ChunkKey> keys = KeyHasher::Create(layout, {})->PrefixKeys(prompt, {});
  const std::vector<std::byte> kv =
      storage::testing::MakeKv(layout, layout.chunk_tokens, storage::testing::KvShape::kShaped, 1);
  for (const ChunkKey& key : keys) {
    auto reserved = daemon.tier()->Reserve(layout, key, {.num_tokens = layout.chunk_tokens});
    if (!reserved.ok() || reserved->outcome != storage::ReserveOutcome::kReserved) {
      return state.SkipWithError("reserve");
    }
    reserved->reservation.payload().CopyFrom(kv);
    if (!daemon.tier()->Commit(std::move(reserved->reservation)).ok()) {
      return state.SkipWithError("commit");
    }
  }
  if (codec != "none") {
    auto recoded =
        daemon.store()->Recode(keys, storage::Tier::kHost,
                               {.codec = *storage::CodecRegistry::Find(codec), .layout = &layout});
    if (!recoded.ok() || recoded->recoded != keys.size()) return state.SkipWithError("compress");
  }
  auto memory = storage::CreateDeviceRuntime({.backend = storage::DeviceBackend::kHost});
  TimeLoads(state, daemon, layout, prompt, 16, std::make_unique<storage::HostRuntime>(), **memory,
            true);
}
BENCHMARK(BM_CompressedLoadPath)
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

uint64_t MinorFaults() {
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<uint64_t>(usage.ru_minflt);
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The worker's store path alone, for 16 chunks of the Llama-3-8B layout from a host engine:
// StartLoadKv with the step's saves (one PrepareStore), SaveKvLayer for every layer (the copies
// engine -> arena, digesting as they go), WaitForSave (the last copies, one Commit); the chunks
// are then committed in the daemon's tier. Each iteration also times one memcpy of the same
// bytes between two warm buffers (one core), outside the store's time, for the x_memcpy ratio.
// range(0): engine block size. range(1): 1 = warm arena: a warm-up round stores the chunks,
// and the tier is emptied (RemoveAll, untimed) after every round, so each round reuses pages
// this process has touched; 0 = cold arena: every round gets a fresh daemon, session and arena
// (untimed), so each page is allocated, zeroed and mapped by the copy that first writes it;
// 2 = as 0, with the arena allocated up front (fallocate, as the daemon's host.prefault does):
// the copies only map its pages into the session's mapping; 3 = as 0, with the daemon's
// background prefault (host.background_prefault: its thread allocates the arena from start-up)
// and the session's (ArenaMapping's thread maps what is allocated), waited for before the round
// as a store a few seconds after start-up would find them; prefault_seconds is that wait.
// Counters: minor_faults per round (the whole process: the daemon runs in it),
// memcpy_bytes_per_second, x_memcpy (store bytes/s over memcpy bytes/s).
void BM_StorePath(benchmark::State& state) {
  const KvLayout layout = bench::Llama8bLayout();
  const int64_t block_size = state.range(0);
  const bool warm = state.range(1) == 1;
  const bool prefault = state.range(1) == 2;
  const bool background = state.range(1) == 3;
  const int64_t tokens = kLoadChunks * layout.chunk_tokens;
  const uint64_t bytes = layout.chunk_bytes(layout.chunk_tokens) * kLoadChunks;
  storage::HostRuntime memory;
  const EngineKv kv = AllocateEngineKv(memory, layout, tokens, block_size, /*host=*/true);
  std::vector<uint32_t> prompt(tokens);
  std::iota(prompt.begin(), prompt.end(), 1);
  ConnectorMetadata meta{.block_size = static_cast<uint32_t>(block_size),
                         .chunk_tokens = layout.chunk_tokens};
  meta.saves.push_back(
      {.request_id = "r", .tokens = prompt, .token_end = tokens, .block_ids = kv.block_ids});
  std::vector<char> src(bytes, 1), dst(bytes, 0);

  std::unique_ptr<testing::TestDaemon> daemon;
  std::unique_ptr<BackgroundPrefault> arena_prefault;  // as daemon.cc starts it
  std::unique_ptr<WorkerConnector> worker;
  double prefault_seconds = 0;
  const auto open = [&]() -> absl::Status {
    worker.reset();
    arena_prefault.reset();
    daemon = std::make_unique<testing::TestDaemon>(
        testing::TestDaemonOptions{.capacity_bytes = 1ull << 30, .page_bytes = 2 << 20});
    STRATA_RETURN_IF_ERROR(daemon->Start());
    if (prefault && ::fallocate(daemon->tier()->arena_fd(), 0, 0,
                                static_cast<off_t>(daemon->tier()->arena_size_bytes())) != 0) {
      return absl::InternalError("fallocate");
    }
    const auto started = std::chrono::steady_clock::now();
    if (background) {
      arena_prefault = std::make_unique<BackgroundPrefault>(daemon->tier()->arena_pages(),
                                                            BackgroundPrefault::Mode::kAllocate);
    }
    STRATA_ASSIGN_OR_RETURN(worker,
                            WorkerConnector::Create(WorkerOptions(*daemon, layout, block_size),
                                                    std::make_unique<storage::HostRuntime>()));
    STRATA_RETURN_IF_ERROR(worker->RegisterKvCaches(kv.layers));
    if (!worker->Stats().connected) return absl::UnavailableError("not connected");
    if (background) {
      const auto deadline = started + std::chrono::seconds(60);
      while (worker->Stats().arena_prefaulted_bytes < daemon->tier()->arena_size_bytes()) {
        if (std::chrono::steady_clock::now() > deadline) {
          return absl::DeadlineExceededError("background prefault");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      prefault_seconds += SecondsSince(started);
    }
    return absl::OkStatus();
  };
  const auto store = [&] {
    const uint64_t saved = worker->Stats().chunks_saved;
    if (!worker->StartLoadKv(meta).ok()) return false;
    for (uint32_t l = 0; l < layout.num_layers; ++l) (void)worker->SaveKvLayer(l);
    (void)worker->WaitForSave();
    return worker->Stats().chunks_saved == saved + kLoadChunks;
  };
  if (warm) {
    if (!open().ok()) return state.SkipWithError("daemon");
    if (!store()) return state.SkipWithError("warm-up store failed");
    daemon->tier()->RemoveAll();
  }
  double memcpy_seconds = 0, store_seconds = 0;
  uint64_t faults = 0;
  for (auto _ : state) {
    if (!warm && !open().ok()) return state.SkipWithError("daemon");
    const uint64_t faults_before = MinorFaults();
    const auto start = std::chrono::steady_clock::now();
    if (!store()) return state.SkipWithError("store failed");
    const double seconds = SecondsSince(start);
    faults += MinorFaults() - faults_before;
    store_seconds += seconds;
    state.SetIterationTime(seconds);
    daemon->tier()->RemoveAll();
    const auto copy_start = std::chrono::steady_clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
    memcpy_seconds += SecondsSince(copy_start);
  }
  worker.reset();
  arena_prefault.reset();
  daemon.reset();
  const double rounds = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(bytes * state.iterations()));
  state.counters["minor_faults"] = faults / rounds;
  state.counters["memcpy_bytes_per_second"] = benchmark::Counter(
      bytes * rounds / memcpy_seconds, benchmark::Counter::kDefaults, benchmark::Counter::kIs1024);
  state.counters["x_memcpy"] = memcpy_seconds / store_seconds;
  if (background) state.counters["prefault_seconds"] = prefault_seconds / rounds;
}
BENCHMARK(BM_StorePath)
    ->Args({16, 1})
    ->Args({256, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
// Cold rounds cost a daemon each: a fixed few.
BENCHMARK(BM_StorePath)
    ->Args({16, 0})
    ->Args({256, 0})
    ->Args({16, 2})
    ->Args({256, 2})
    ->Args({16, 3})
    ->Args({256, 3})
    ->Iterations(4)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// GPU baseline: the same bytes in one copy from registered host memory to device memory.
void BM_CudaBulkCopy(benchmark::State& state) {
  auto runtime = storage::CreateDeviceRuntime({.backend = storage::DeviceBackend::kCuda});
  if (!runtime.ok()) return state.SkipWithError("no CUDA device");
  const KvLayout layout = bench::Llama8bLayout();
  const uint64_t bytes = layout.chunk_bytes(layout.chunk_tokens) * kLoadChunks;
  std::vector<char> host(bytes, 1);
  if (!(*runtime)->RegisterHostMemory(host.data(), bytes).ok()) {
    return state.SkipWithError("register");
  }
  auto device = *(*runtime)->Allocate(bytes, storage::MemoryKind::kDevice);
  auto stream = *(*runtime)->CreateStream("bulk");
  const storage::CopyRun run{host.data(), device->data(), bytes};
  for (auto _ : state) {
    (void)stream->Copy({&run, 1});
    (void)stream->Synchronize();
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes * state.iterations()));
  (void)(*runtime)->UnregisterHostMemory(host.data());
}
BENCHMARK(BM_CudaBulkCopy)->UseRealTime()->Unit(benchmark::kMillisecond);

// Baseline: one memcpy of the same bytes, buffer to buffer, one core.
void BM_Memcpy(benchmark::State& state) {
  const KvLayout layout = bench::Llama8bLayout();
  const uint64_t bytes = layout.chunk_bytes(layout.chunk_tokens) * kLoadChunks;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes * state.iterations()));
}
BENCHMARK(BM_Memcpy)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace strata::connector

BENCHMARK_MAIN();

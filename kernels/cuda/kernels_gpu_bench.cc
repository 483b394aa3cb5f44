// Throughput of the CUDA kernels on the local GPU (CUDA events, manual time): gather / scatter
// between a paged cache and chunks, and fused-RoPE paged attention (decode with split-K, and
// prefill). Skips every benchmark when no CUDA device is present.
#include <cuda_runtime_api.h>

#include <numeric>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/check.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/kv_transfer.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/rope.h"
#include "kernels/testing/test_util.h"

namespace strata::kernels::cuda {
namespace {

DeviceBuffer Filled(size_t bytes) {
  absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(bytes);
  STRATA_CHECK(b.ok());
  STRATA_CHECK(cudaMemset(b->data(), 0x3c, bytes) == cudaSuccess);  // small finite halves
  return *std::move(b);
}

DeviceBuffer Upload(const void* data, size_t bytes) {
  absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(bytes);
  STRATA_CHECK(b.ok() && b->CopyFromHost(data, bytes).ok());
  return *std::move(b);
}

// Times `fn` (which enqueues on the default stream) with CUDA events.
template <class Fn>
void TimeLoop(benchmark::State& state, Fn&& fn) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  fn();  // warm-up
  for (auto _ : state) {
    cudaEventRecord(start);
    fn();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    state.SetIterationTime(ms / 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

// 32 layers, 16 chunks x 256 tokens, 8 KV heads x 128, bf16, block 16 (args: 0 gather, 1 scatter).
void BM_GpuKvTransfer(benchmark::State& state) {
  if (!DeviceAvailable().ok()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const int64_t layers = 32, chunks = 16, chunk_tokens = 256, heads = 8, dim = 128, block = 16;
  const int64_t blocks = chunks * chunk_tokens / block;
  const PagedKvSpec spec =
      PagedKvSpec::Contiguous(KvDtype::kBfloat16, 2, blocks, block, heads, dim);
  std::vector<DeviceBuffer> engine;
  std::vector<PagedKvLayer> views;
  for (int64_t l = 0; l < layers; ++l) {
    engine.push_back(Filled(2 * spec.PlaneExtentElems() * 2));
    views.push_back(PagedKvLayer::FromStackedPlanes(engine.back().data(), KvDtype::kBfloat16, 2,
                                                    spec.PlaneExtentElems(),
                                                    2 * spec.PlaneExtentElems()));
  }
  std::vector<int32_t> table(blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937_64(1));
  std::vector<DeviceBuffer> chunk_buffers;
  std::vector<ChunkCopy> copies;
  for (int64_t c = 0; c < chunks; ++c) {
    chunk_buffers.push_back(Filled(layers * 2 * chunk_tokens * heads * dim * 2));
    copies.push_back(
        {chunk_buffers.back().data(), chunk_tokens, 0, chunk_tokens, c * chunk_tokens / block, 0});
  }
  auto plan =
      TransferPlan::Create(spec, {KvDtype::kBfloat16, layers, 2, heads, dim}, copies, table);
  STRATA_CHECK(plan.ok());
  DeviceBuffer workspace = Filled(DeviceTransferPlan::WorkspaceBytes(*plan));
  auto device_plan =
      DeviceTransferPlan::Upload(*plan, workspace.data(), workspace.size_bytes(), nullptr);
  STRATA_CHECK(device_plan.ok());
  TimeLoop(state, [&] {
    STRATA_CHECK(
        (state.range(0) == 0 ? GatherKv(*device_plan, views, 0) : ScatterKv(*device_plan, views, 0))
            .ok());
  });
  state.SetBytesProcessed(state.iterations() * layers * 2 * chunks * chunk_tokens * heads * dim *
                          2);
  state.SetLabel(state.range(0) == 0 ? "gather (paged -> chunks)" : "scatter (chunks -> paged)");
}
BENCHMARK(BM_GpuKvTransfer)->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMicrosecond);

// Attention over bf16 NoPE pages: args (num_seqs, seq_len, queries per seq, splits); 32 query
// heads over 8 KV heads, head_dim 128, block 16.
void BM_GpuFusedRopeAttention(benchmark::State& state) {
  if (!DeviceAvailable().ok()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const int64_t seqs = state.range(0), seq_len = state.range(1), queries = state.range(2);
  const int64_t splits = state.range(3), kv_heads = 8, q_heads = 32, dim = 128, block = 16;
  const int64_t max_blocks = seq_len / block, blocks = seqs * max_blocks;
  const PagedKvSpec spec =
      PagedKvSpec::Contiguous(KvDtype::kBfloat16, 2, blocks, block, kv_heads, dim);
  DeviceBuffer k = Filled(spec.PlaneExtentElems() * 2), v = Filled(spec.PlaneExtentElems() * 2);
  const int64_t tokens = seqs * queries;
  DeviceBuffer q = Filled(tokens * q_heads * dim * 2), out = Filled(tokens * q_heads * dim * 2);
  std::vector<int32_t> table(blocks), lens(seqs, static_cast<int32_t>(seq_len)), qsl(seqs + 1);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937_64(2));
  std::vector<int64_t> qpos;
  for (int64_t s = 0; s <= seqs; ++s) qsl[s] = static_cast<int32_t>(s * queries);
  for (int64_t s = 0; s < seqs; ++s) {
    for (int64_t i = 0; i < queries; ++i) qpos.push_back(seq_len - queries + i);
  }
  DeviceBuffer d_table = Upload(table.data(), table.size() * 4),
               d_lens = Upload(lens.data(), lens.size() * 4),
               d_qsl = Upload(qsl.data(), qsl.size() * 4),
               d_qpos = Upload(qpos.data(), qpos.size() * 8);
  RopeConfig rc;
  rc.theta = 500000;
  rc.scaling = RopeScaling::kLlama3;
  rc.max_position = seq_len;
  rc.table_dtype = KvDtype::kBfloat16;
  auto table_host = RopeTable::Create(rc);
  STRATA_CHECK(table_host.ok());
  auto rope = DeviceRopeTable::Create(*table_host);
  STRATA_CHECK(rope.ok());
  PagedAttentionArgs a;
  a.q = ConstHeadsView::Dense(q.data(), KvDtype::kBfloat16, tokens, q_heads, dim);
  a.out = HeadsView::Dense(out.data(), KvDtype::kBfloat16, tokens, q_heads, dim);
  a.kv_spec = spec;
  a.kv = PagedKvLayer::FromSeparatePlanes(k.data(), spec.PlaneExtentElems(), v.data(),
                                          spec.PlaneExtentElems());
  a.block_table = {d_table.as<const int32_t>(), table.size()};
  a.max_blocks_per_seq = max_blocks;
  a.seq_lens = {d_lens.as<const int32_t>(), lens.size()};
  a.query_start_loc = {d_qsl.as<const int32_t>(), qsl.size()};
  a.query_positions = {d_qpos.as<const int64_t>(), qpos.size()};
  a.rope = rope->view();
  a.num_kv_splits = splits;
  a.max_query_len = queries;
  DeviceBuffer workspace = Filled(std::max<size_t>(PagedAttentionWorkspaceBytes(a), 16));
  TimeLoop(state,
           [&] { STRATA_CHECK(PagedAttention(a, workspace.data(), workspace.size_bytes()).ok()); });
  // KV bytes read once per (sequence, KV head) tile pass; causal prefill reads about half.
  state.counters["kv_GBps"] = benchmark::Counter(
      static_cast<double>(seqs * seq_len * kv_heads * dim * 2 * 2) * state.iterations(),
      benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  const double flops = 4.0 * seqs * q_heads * dim * queries *
                       (queries == 1 ? seq_len : seq_len / 2.0);  // QK^T + PV, causal
  state.counters["TFLOPs"] =
      benchmark::Counter(flops * state.iterations() / 1e12, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_GpuFusedRopeAttention)
    ->Args({32, 4096, 1, 1})
    ->Args({32, 4096, 1, 8})
    ->Args({4, 32768, 1, 32})
    ->Args({1, 4096, 4096, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace strata::kernels::cuda

BENCHMARK_MAIN();

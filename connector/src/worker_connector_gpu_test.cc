// The worker connector with the CUDA runtime (ctest label "gpu"): a CPU engine stores chunks, a
// GPU engine loads them into paged KV in device memory and stores its own from there; another
// CPU engine loads those. Byte-exact checks go through host copies of the device memory. Skips
// itself, saying why, when no CUDA device is usable.
#include <functional>
#include <numeric>
#include <random>

#include "connector/src/testing/test_daemon.h"
#include "gtest/gtest.h"
#include "storage/device/device_runtime_factory.h"
#include "storage/device/host_runtime.h"
#include "strata/connector.h"

namespace strata::connector {
namespace {

using std::chrono::milliseconds;

constexpr uint32_t kLayers = 4;
constexpr int64_t kHeads = 4;
constexpr int64_t kDim = 64;
constexpr uint32_t kChunk = 32;
constexpr int64_t kBlock = 16;
constexpr int64_t kNumBlocks = 64;
constexpr int64_t kRowElems = kHeads * kDim;
constexpr int64_t kPlaneElems = kNumBlocks * kBlock * kRowElems;

KvLayout Layout() {
  KvLayout layout;
  layout.model_id = "gpu-test";
  layout.num_layers = kLayers;
  layout.num_kv_heads = kHeads;
  layout.head_dim = kDim;
  layout.dtype = KvDtype::kFloat16;
  layout.chunk_tokens = kChunk;
  return layout;
}

ConnectorOptions Options(const std::string& socket, storage::DeviceBackend backend) {
  ConnectorOptions o;
  o.socket_path = socket;
  o.layout = Layout();
  o.block_size = kBlock;
  o.lookup_budget = milliseconds(2000);
  o.io_timeout = milliseconds(5000);
  o.device_backend = backend;
  return o;
}

uint16_t Value(uint32_t token, int64_t position, uint32_t layer, uint32_t plane, int64_t e) {
  uint64_t x = token * 0x9E3779B97F4A7C15ull ^ (position << 20) ^ (uint64_t{layer} << 40) ^
               (uint64_t{plane} << 50) ^ e;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  return static_cast<uint16_t>(x >> 17);
}

// Runs one prefill step of `tokens` (vLLM's order of calls). `kv[l]` is layer l's stacked
// [2, nb, bs, h, d] cache (host or device); `compute(l, begin, end)` writes the engine's own KV.
int64_t Step(SchedulerConnector& scheduler, WorkerConnector& worker, const std::string& id,
             const std::vector<uint32_t>& tokens, const std::vector<int32_t>& blocks,
             const std::function<void(uint32_t, int64_t, int64_t)>& compute,
             std::vector<int32_t>* errors) {
  const int64_t matched =
      scheduler.GetNumNewMatchedTokens({.request_id = id, .prompt_tokens = tokens}, 0).num_tokens;
  EXPECT_TRUE(scheduler.UpdateStateAfterAlloc(id, blocks, matched).ok());
  const int64_t len = static_cast<int64_t>(tokens.size());
  const ConnectorMetadata meta =
      scheduler.BuildConnectorMeta({.requests = {{.request_id = id,
                                                  .kind = ScheduledKind::kNew,
                                                  .num_computed_tokens = matched,
                                                  .num_scheduled_tokens = len - matched,
                                                  .block_ids = blocks}}});
  EXPECT_TRUE(worker.StartLoadKv(meta).ok());
  for (uint32_t l = 0; l < kLayers; ++l) {
    EXPECT_TRUE(worker.WaitForLayerLoad(l).ok());
    compute(l, matched, len);
    EXPECT_TRUE(worker.SaveKvLayer(l).ok());
  }
  EXPECT_TRUE(worker.WaitForSave().ok());
  *errors = worker.GetBlockIdsWithLoadErrors();
  return matched;
}

std::vector<LayerKvCache> Stacked(std::vector<void*> bases) {
  std::vector<LayerKvCache> layers;
  for (void* base : bases) {
    layers.push_back({.kv = {base,
                             {2, kNumBlocks, kBlock, kHeads, kDim},
                             {kPlaneElems, kBlock * kRowElems, kRowElems, kDim, 1}}});
  }
  return layers;
}

int64_t Offset(const std::vector<int32_t>& blocks, int64_t p, uint32_t plane) {
  return plane * kPlaneElems + (blocks[p / kBlock] * kBlock + p % kBlock) * kRowElems;
}

TEST(WorkerConnectorGpuTest, LoadsIntoAndSavesFromDeviceMemory) {
  auto gpu = storage::CreateDeviceRuntime({.backend = storage::DeviceBackend::kCuda});
  if (!gpu.ok()) GTEST_SKIP() << "no usable CUDA device: " << gpu.status().message();
  testing::TestDaemon daemon({.capacity_bytes = 256ull << 20, .page_bytes = 64 << 10});
  ASSERT_TRUE(daemon.Start().ok());
  std::vector<uint32_t> prompt(200);
  std::iota(prompt.begin(), prompt.end(), 11);
  std::vector<int32_t> blocks(13);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), std::mt19937(3));

  // A: a CPU engine computes and stores the prompt.
  std::vector<std::vector<uint16_t>> host_a(kLayers, std::vector<uint16_t>(2 * kPlaneElems));
  auto a_sched =
      *SchedulerConnector::Create(Options(daemon.socket_path(), storage::DeviceBackend::kHost));
  auto a_work =
      *WorkerConnector::Create(Options(daemon.socket_path(), storage::DeviceBackend::kHost));
  ASSERT_TRUE(a_work
                  ->RegisterKvCaches(Stacked(
                      {host_a[0].data(), host_a[1].data(), host_a[2].data(), host_a[3].data()}))
                  .ok());
  std::vector<int32_t> errors;
  const auto compute_host = [&](std::vector<std::vector<uint16_t>>& kv,
                                const std::vector<uint32_t>& tokens) {
    return [&kv, &tokens, &blocks](uint32_t l, int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        for (uint32_t plane = 0; plane < 2; ++plane) {
          for (int64_t e = 0; e < kRowElems; ++e) {
            kv[l][Offset(blocks, p, plane) + e] = Value(tokens[p], p, l, plane, e);
          }
        }
      }
    };
  };
  EXPECT_EQ(Step(*a_sched, *a_work, "a", prompt, blocks, compute_host(host_a, prompt), &errors), 0);
  EXPECT_EQ(a_work->Stats().chunks_saved, 6u);

  // B: a GPU engine loads into device memory and stores a second prompt from it.
  std::unique_ptr<storage::DeviceRuntime> helper = std::move(*gpu);
  std::vector<std::unique_ptr<storage::DeviceAllocation>> device;
  std::vector<void*> bases;
  for (uint32_t l = 0; l < kLayers; ++l) {
    device.push_back(*helper->Allocate(2 * kPlaneElems * 2, storage::MemoryKind::kDevice));
    bases.push_back(device.back()->data());
  }
  auto b_sched =
      *SchedulerConnector::Create(Options(daemon.socket_path(), storage::DeviceBackend::kCuda));
  auto b_work =
      *WorkerConnector::Create(Options(daemon.socket_path(), storage::DeviceBackend::kCuda));
  ASSERT_EQ(b_work->runtime().Capabilities().backend, "cuda");
  ASSERT_TRUE(b_work->RegisterKvCaches(Stacked(bases)).ok());
  auto stream = *helper->CreateStream("test");
  std::vector<std::vector<uint16_t>> mirror(kLayers, std::vector<uint16_t>(2 * kPlaneElems));
  const auto download = [&] {
    for (uint32_t l = 0; l < kLayers; ++l) {
      const storage::CopyRun run{bases[l], mirror[l].data(), 2 * kPlaneElems * 2};
      ASSERT_TRUE(stream->Copy({&run, 1}).ok());
    }
    ASSERT_TRUE(stream->Synchronize().ok());
  };
  // The GPU engine "computes" on the host and uploads (its kernels would write device memory).
  const auto compute_device = [&](const std::vector<uint32_t>& tokens) {
    return [&, tokens](uint32_t l, int64_t begin, int64_t end) {
      compute_host(mirror, tokens)(l, begin, end);
      std::vector<storage::CopyRun> rows;  // only the computed rows: the rest was loaded
      for (int64_t p = begin; p < end; ++p) {
        for (uint32_t plane = 0; plane < 2; ++plane) {
          const int64_t offset = Offset(blocks, p, plane);
          rows.push_back({mirror[l].data() + offset, static_cast<uint16_t*>(bases[l]) + offset,
                          kRowElems * 2});
        }
      }
      ASSERT_TRUE(stream->Copy(rows).ok());
      ASSERT_TRUE(stream->Synchronize().ok());
    };
  };
  download();
  EXPECT_EQ(Step(*b_sched, *b_work, "b", prompt, blocks, compute_device(prompt), &errors), 192);
  EXPECT_TRUE(errors.empty());
  download();
  for (uint32_t l = 0; l < kLayers; ++l) {
    for (int64_t p = 0; p < 200; ++p) {
      for (uint32_t plane = 0; plane < 2; ++plane) {
        for (int64_t e = 0; e < kRowElems; ++e) {
          ASSERT_EQ(mirror[l][Offset(blocks, p, plane) + e], Value(prompt[p], p, l, plane, e))
              << "layer " << l << " position " << p;
        }
      }
    }
  }
  EXPECT_EQ(b_work->Stats().chunks_loaded, 6u);

  std::vector<uint32_t> second(96);
  std::iota(second.begin(), second.end(), 7000);
  EXPECT_EQ(Step(*b_sched, *b_work, "b2", second, blocks, compute_device(second), &errors), 0);
  EXPECT_EQ(b_work->Stats().chunks_saved, 3u);

  // C: a CPU engine loads what the GPU engine stored.
  std::vector<std::vector<uint16_t>> host_c(kLayers, std::vector<uint16_t>(2 * kPlaneElems));
  auto c_sched =
      *SchedulerConnector::Create(Options(daemon.socket_path(), storage::DeviceBackend::kHost));
  auto c_work =
      *WorkerConnector::Create(Options(daemon.socket_path(), storage::DeviceBackend::kHost));
  ASSERT_TRUE(c_work
                  ->RegisterKvCaches(Stacked(
                      {host_c[0].data(), host_c[1].data(), host_c[2].data(), host_c[3].data()}))
                  .ok());
  EXPECT_EQ(Step(*c_sched, *c_work, "c", second, blocks, compute_host(host_c, second), &errors),
            95);
  EXPECT_TRUE(errors.empty());
  for (uint32_t l = 0; l < kLayers; ++l) {
    for (int64_t p = 0; p < 96; ++p) {
      for (int64_t e = 0; e < kRowElems; ++e) {
        ASSERT_EQ(host_c[l][Offset(blocks, p, 1) + e], Value(second[p], p, l, 1, e));
      }
    }
  }
}

}  // namespace
}  // namespace strata::connector

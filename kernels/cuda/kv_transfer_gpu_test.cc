// The CUDA gather / scatter produce exactly the bytes of the CPU reference, for vLLM's NHD and HND
// layouts, separate planes, MLA, unaligned (scalar) and aligned (16-byte vector) geometries, and
// more layers than one launch holds.
#include "kernels/cuda/kv_transfer.h"

#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/gpu_test_util.h"

namespace strata::kernels::cuda {
namespace {

using kernels::testing::HostTensor;
using testing::ToDevice;
using testing::ToHost;

struct Case {
  KvDtype dtype;
  int64_t planes, blocks, block_size, heads, dim, layers;
  bool hnd;
};

class KvTransferGpuTest : public ::testing::TestWithParam<Case> {};

TEST_P(KvTransferGpuTest, MatchesCpuReferenceBitForBit) {
  STRATA_SKIP_WITHOUT_CUDA();
  const Case& c = GetParam();
  const PagedKvSpec spec =
      c.hnd ? PagedKvSpec::ContiguousHnd(c.dtype, c.planes, c.blocks, c.block_size, c.heads, c.dim)
            : PagedKvSpec::Contiguous(c.dtype, c.planes, c.blocks, c.block_size, c.heads, c.dim);
  const int64_t plane = spec.PlaneExtentElems();
  std::mt19937_64 rng(7);
  // Engine layers, vLLM-style [planes, blocks, ...] per layer, on host and device.
  std::vector<HostTensor> host_layers;
  std::vector<DeviceBuffer> device_layers;
  std::vector<PagedKvLayer> host_views, device_views;
  for (int64_t l = 0; l < c.layers; ++l) {
    host_layers.emplace_back(c.dtype, c.planes * plane);
    host_layers.back().FillNormal(rng);
    device_layers.push_back(ToDevice(host_layers.back()));
    host_views.push_back(PagedKvLayer::FromStackedPlanes(host_layers.back().data(), c.dtype,
                                                         c.planes, plane, c.planes * plane));
    device_views.push_back(PagedKvLayer::FromStackedPlanes(device_layers.back().data(), c.dtype,
                                                           c.planes, plane, c.planes * plane));
  }
  std::vector<int32_t> table(static_cast<size_t>(c.blocks));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  // Three chunks: a full one, one starting mid-block, one copying only part of itself.
  const ChunkGeometry geometry{c.dtype, c.layers, c.planes, c.heads, c.dim};
  const int64_t b = c.block_size;
  struct ChunkSpec {
    int64_t tokens, begin, count, table_begin, slot;
  };
  const std::vector<ChunkSpec> specs = {
      {2 * b, 0, 2 * b, 0, 0}, {b + 3, 0, b + 3, 2, b / 2}, {2 * b, 1, b, 4, 1}};
  std::vector<HostTensor> host_chunks;
  std::vector<DeviceBuffer> device_chunks;
  std::vector<ChunkCopy> host_copies, device_copies;
  for (const ChunkSpec& s : specs) {
    host_chunks.emplace_back(c.dtype, c.layers * c.planes * s.tokens * c.heads * c.dim);
    host_chunks.back().Fill(-3.0f);
    device_chunks.push_back(ToDevice(host_chunks.back()));
    host_copies.push_back(
        {host_chunks.back().data(), s.tokens, s.begin, s.count, s.table_begin, s.slot});
    device_copies.push_back(
        {device_chunks.back().data(), s.tokens, s.begin, s.count, s.table_begin, s.slot});
  }
  auto host_plan = TransferPlan::Create(spec, geometry, host_copies, table);
  auto device_plan_host = TransferPlan::Create(spec, geometry, device_copies, table);
  ASSERT_TRUE(host_plan.ok()) << host_plan.status();
  ASSERT_TRUE(device_plan_host.ok()) << device_plan_host.status();
  auto workspace = DeviceBuffer::Allocate(DeviceTransferPlan::WorkspaceBytes(*device_plan_host));
  ASSERT_TRUE(workspace.ok());
  auto plan = DeviceTransferPlan::Upload(*device_plan_host, workspace->data(),
                                         workspace->size_bytes(), nullptr);
  ASSERT_TRUE(plan.ok()) << plan.status();

  // Gather: engine -> chunks.
  ASSERT_TRUE(kernels::GatherKv(*host_plan, host_views, 0).ok());
  ASSERT_TRUE(cuda::GatherKv(*plan, device_views, 0).ok());
  testing::Sync();
  for (size_t i = 0; i < specs.size(); ++i) {
    const HostTensor got = ToHost(device_chunks[i], c.dtype, host_chunks[i].size());
    ASSERT_EQ(std::memcmp(got.data(), host_chunks[i].data(), static_cast<size_t>(got.size_bytes())),
              0)
        << "chunk " << i;
  }
  // Scatter: chunks -> zeroed engine layers, one layer per launch (the layer-wise pipeline).
  for (int64_t l = 0; l < c.layers; ++l) {
    host_layers[l].Fill(0);
    ASSERT_TRUE(
        device_layers[l].CopyFromHost(host_layers[l].data(), host_layers[l].size_bytes()).ok());
    ASSERT_TRUE(kernels::ScatterKvLayer(*host_plan, host_views[l], l).ok());
    ASSERT_TRUE(cuda::ScatterKv(*plan, std::span(device_views).subspan(l, 1), l).ok());
  }
  testing::Sync();
  for (int64_t l = 0; l < c.layers; ++l) {
    const HostTensor got = ToHost(device_layers[l], c.dtype, host_layers[l].size());
    ASSERT_EQ(std::memcmp(got.data(), host_layers[l].data(), static_cast<size_t>(got.size_bytes())),
              0)
        << "layer " << l;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, KvTransferGpuTest,
    ::testing::Values(Case{KvDtype::kBfloat16, 2, 12, 16, 8, 128, 3, false},  // vector path
                      Case{KvDtype::kFloat16, 2, 12, 16, 4, 64, 2, true},     // HND, vector
                      Case{KvDtype::kFloat32, 2, 10, 5, 3, 6, 2, false},      // scalar path
                      Case{KvDtype::kBfloat16, 2, 10, 4, 2, 7, 2, true},      // scalar, HND
                      Case{KvDtype::kBfloat16, 1, 10, 16, 1, 576, 2, false},  // MLA latent
                      Case{KvDtype::kFloat16, 2, 8, 4, 1, 8, 70, false}));    // > 64 layers

TEST(KvTransferGpuValidationTest, RejectsBadLayersAndWorkspaces) {
  STRATA_SKIP_WITHOUT_CUDA();
  const PagedKvSpec spec = PagedKvSpec::Contiguous(KvDtype::kFloat16, 2, 4, 4, 1, 8);
  auto chunk = DeviceBuffer::Allocate(2 * 2 * 4 * 8 * 2);
  ASSERT_TRUE(chunk.ok());
  const std::vector<int32_t> table = {1, 0};
  auto host_plan =
      TransferPlan::Create(spec, {KvDtype::kFloat16, 2, 2, 1, 8},
                           std::vector<ChunkCopy>{{chunk->data(), 4, 0, 4, 0, 0}}, table);
  ASSERT_TRUE(host_plan.ok());
  auto workspace = DeviceBuffer::Allocate(DeviceTransferPlan::WorkspaceBytes(*host_plan));
  ASSERT_TRUE(workspace.ok());
  EXPECT_EQ(DeviceTransferPlan::Upload(*host_plan, workspace->data(), workspace->size_bytes() - 1,
                                       nullptr)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DeviceTransferPlan::Upload(*host_plan, nullptr, 1 << 20, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto plan =
      DeviceTransferPlan::Upload(*host_plan, workspace->data(), workspace->size_bytes(), nullptr);
  ASSERT_TRUE(plan.ok());
  auto layer_memory = DeviceBuffer::Allocate(2 * spec.PlaneExtentElems() * 2);
  ASSERT_TRUE(layer_memory.ok());
  PagedKvLayer layer =
      PagedKvLayer::FromStackedPlanes(layer_memory->data(), KvDtype::kFloat16, 2,
                                      spec.PlaneExtentElems(), 2 * spec.PlaneExtentElems());
  EXPECT_TRUE(cuda::GatherKv(*plan, std::span(&layer, 1), 1).ok());
  EXPECT_EQ(cuda::GatherKv(*plan, std::span(&layer, 1), 2).code(),
            absl::StatusCode::kInvalidArgument);
  PagedKvLayer short_layer = layer;
  short_layer.extent_elems[1] -= 1;
  EXPECT_EQ(cuda::ScatterKv(*plan, std::span(&short_layer, 1), 0).code(),
            absl::StatusCode::kInvalidArgument);
  testing::Sync();
}

}  // namespace
}  // namespace strata::kernels::cuda

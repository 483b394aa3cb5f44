// CudaRuntime on a real GPU (ctest label "gpu"); every test skips itself, saying why, when no
// CUDA device is visible.
#include "storage/device/cuda_runtime.h"

#include <cuda_runtime.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "storage/codec/codec_registry.h"
#include "storage/codec/encoded_chunk.h"
#include "storage/codec/quant_codec.h"
#include "storage/codec/testing/codec_test_util.h"
#include "storage/codec/testing/shaped_kv.h"
#include "storage/device/decode_check.h"
#include "storage/device/device_runtime_factory.h"

namespace strata::storage {
namespace {

class CudaRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto runtime = CudaRuntime::Create({});
    if (!runtime.ok()) {
      GTEST_SKIP() << "no CUDA device: " << runtime.status().message();
    }
    runtime_ = std::move(*runtime);
  }
  std::unique_ptr<CudaRuntime> runtime_;
};

std::vector<uint8_t> Pattern(size_t size, uint8_t seed) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(seed + i * 13 + (i >> 9));
  return bytes;
}

TEST_F(CudaRuntimeTest, ReportsCapabilities) {
  const DeviceCapabilities& caps = runtime_->Capabilities();
  EXPECT_EQ(caps.backend, "cuda");
  EXPECT_TRUE(caps.device_memory);
  EXPECT_TRUE(caps.host_registration);
  EXPECT_GT(caps.device_memory_bytes, 0u);
  EXPECT_FALSE(caps.device_name.empty());
  auto from_factory = CreateDeviceRuntime({.backend = DeviceBackend::kAuto});
  ASSERT_TRUE(from_factory.ok());
  EXPECT_EQ((*from_factory)->Capabilities().backend, "cuda") << "auto picks CUDA on a GPU";
}

// Host (a registered memfd mapping, like the shared arena) -> device -> host, through many small
// runs and one big one, with per-layer events.
TEST_F(CudaRuntimeTest, RoundTripsThroughDeviceMemoryInLayerOrder) {
  constexpr size_t kLayers = 4;
  constexpr size_t kLayerBytes = 1 << 20;
  const size_t total = kLayers * kLayerBytes;
  const int fd = ::memfd_create("cuda-test-arena", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(total)), 0);
  auto* arena =
      static_cast<uint8_t*>(::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(arena, MAP_FAILED);
  ::close(fd);
  const auto pattern = Pattern(total, 3);
  std::memcpy(arena, pattern.data(), total);
  ASSERT_TRUE(runtime_->RegisterHostMemory(arena, total).ok());
  EXPECT_EQ(runtime_->RegisterHostMemory(arena + 4096, 4096).code(),
            absl::StatusCode::kInvalidArgument);

  auto device = runtime_->Allocate(total, MemoryKind::kDevice);
  ASSERT_TRUE(device.ok()) << device.status();
  auto* dev = static_cast<uint8_t*>((*device)->data());
  auto load = *runtime_->CreateStream("load");
  std::vector<std::unique_ptr<DeviceEvent>> events;
  for (size_t l = 0; l < kLayers; ++l) {
    events.push_back(*runtime_->CreateEvent());
    std::vector<CopyRun> runs;
    if (l % 2 == 0) {
      // Many 2 KiB rows, scattered: reversed order inside the layer.
      for (size_t row = 0; row < kLayerBytes / 2048; ++row) {
        const size_t from = l * kLayerBytes + row * 2048;
        const size_t to = l * kLayerBytes + (kLayerBytes / 2048 - 1 - row) * 2048;
        runs.push_back({arena + from, dev + to, 2048});
      }
    } else {
      runs.push_back({arena + l * kLayerBytes, dev + l * kLayerBytes, kLayerBytes});
    }
    ASSERT_TRUE(load->Copy(runs).ok());
    ASSERT_TRUE(load->Record(*events[l]).ok());
  }
  for (auto& event : events) ASSERT_TRUE(event->Wait().ok());

  // Back to host, ordered after the load stream through an event.
  auto save = *runtime_->CreateStream("save");
  ASSERT_TRUE(save->WaitForEvent(*events.back()).ok());
  auto pinned = runtime_->Allocate(total, MemoryKind::kHost);
  ASSERT_TRUE(pinned.ok());
  auto* back = static_cast<uint8_t*>((*pinned)->data());
  const CopyRun all{dev, back, total};
  ASSERT_TRUE(save->Copy({&all, 1}).ok());
  ASSERT_TRUE(save->Synchronize().ok());
  for (size_t l = 0; l < kLayers; ++l) {
    for (size_t row = 0; row < kLayerBytes / 2048; ++row) {
      const size_t src_row = l % 2 == 0 ? kLayerBytes / 2048 - 1 - row : row;
      ASSERT_EQ(std::memcmp(back + l * kLayerBytes + row * 2048,
                            pattern.data() + l * kLayerBytes + src_row * 2048, 2048),
                0)
          << "layer " << l << " row " << row;
    }
  }
  EXPECT_TRUE(runtime_->UnregisterHostMemory(arena).ok());
  EXPECT_EQ(runtime_->UnregisterHostMemory(arena).code(), absl::StatusCode::kInvalidArgument);
  ::munmap(arena, total);
}

TEST_F(CudaRuntimeTest, WaitsForTheEnginesStream) {
  constexpr size_t kBytes = 64 << 20;
  auto a = runtime_->Allocate(kBytes, MemoryKind::kDevice);
  auto b = runtime_->Allocate(kBytes, MemoryKind::kDevice);
  auto host = runtime_->Allocate(kBytes, MemoryKind::kHost);
  ASSERT_TRUE(a.ok() && b.ok() && host.ok());
  cudaStream_t engine = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&engine, cudaStreamNonBlocking), cudaSuccess);
  // The "engine" writes a into b on its stream; our stream must copy b only after that.
  ASSERT_EQ(cudaMemsetAsync((*a)->data(), 0x5a, kBytes, engine), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync((*b)->data(), (*a)->data(), kBytes, cudaMemcpyDeviceToDevice, engine),
            cudaSuccess);
  auto stream = *runtime_->CreateStream("save");
  ASSERT_TRUE(stream->WaitForExternal(reinterpret_cast<ExternalStream>(engine)).ok());
  const CopyRun run{(*b)->data(), (*host)->data(), kBytes};
  ASSERT_TRUE(stream->Copy({&run, 1}).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  const auto* bytes = static_cast<const uint8_t*>((*host)->data());
  for (size_t i = 0; i < kBytes; i += 4093) ASSERT_EQ(bytes[i], 0x5a) << i;
  cudaStreamDestroy(engine);
}

// The device pool's memory (T0): device memory with an IPC handle that holds what is copied in.
// Opening the handle needs another process (CUDA refuses the process that made it), which this
// test does not start: the engine-side open is covered by HostRuntime's tests.
TEST_F(CudaRuntimeTest, ShareableMemoryHasAnIpcHandleAndHoldsCopies) {
  constexpr size_t kBytes = 1 << 20;
  auto memory = runtime_->AllocateShareable(kBytes, "strata-test-pool");
  ASSERT_TRUE(memory.ok()) << memory.status();
  const SharedMemoryHandle handle = (*memory)->handle();
  EXPECT_EQ(handle.backend, "cuda");
  EXPECT_EQ(handle.size_bytes, kBytes);
  EXPECT_EQ(handle.fd, -1);
  EXPECT_TRUE(std::any_of(handle.ipc.begin(), handle.ipc.end(),
                          [](std::byte b) { return b != std::byte{0}; }));
  EXPECT_EQ((*memory)->kind(), MemoryKind::kDevice);

  const std::vector<uint8_t> pattern = Pattern(kBytes, 5);
  std::vector<uint8_t> back(kBytes, 0);
  auto stream = *runtime_->CreateStream("pool");
  const CopyRun in{pattern.data(), (*memory)->data(), kBytes};
  const CopyRun out{(*memory)->data(), back.data(), kBytes};
  ASSERT_TRUE(stream->Copy({&in, 1}).ok());
  ASSERT_TRUE(stream->Copy({&out, 1}).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(back, pattern);

  SharedMemoryHandle host = handle;
  host.backend = "host";
  EXPECT_EQ(runtime_->OpenShared(host).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(runtime_->AllocateShareable(0, "empty").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaRuntimeTest, EventsQueryAndRejectForeignTypes) {
  auto stream = *runtime_->CreateStream("q");
  auto event = *runtime_->CreateEvent();
  EXPECT_TRUE(*event->Query()) << "never recorded: complete";
  ASSERT_TRUE(stream->Record(*event).ok());
  ASSERT_TRUE(event->Wait().ok());
  EXPECT_TRUE(*event->Query());
  class Foreign final : public DeviceEvent {
   public:
    absl::Status Wait() override { return absl::OkStatus(); }
    absl::StatusOr<bool> Query() override { return true; }
  } foreign;
  EXPECT_EQ(stream->Record(foreign).code(), absl::StatusCode::kInvalidArgument);
  const CopyRun null_run{nullptr, nullptr, 16};
  EXPECT_EQ(stream->Copy({&null_run, 1}).code(), absl::StatusCode::kInvalidArgument);
}

// H2D bandwidth from registered host memory, for the record (not a pass/fail threshold).
TEST_F(CudaRuntimeTest, DecodesTheQuantizingCodecsBitForBitAsTheCpu) {
  const DeviceCapabilities& caps = runtime_->Capabilities();
  for (const std::string& failure : caps.decode_check_failures) ADD_FAILURE() << failure;
  for (const Codec* codec : CodecRegistry::All()) {
    const bool quant = dynamic_cast<const QuantCodec*>(codec) != nullptr;
    EXPECT_EQ(runtime_->DecodesOnDevice(codec->id()), quant) << codec->name();
  }
  // Llama-3.1-8B's KV heads (8 x 128) over 4 layers, shaped KV (outlier key channels).
  for (const KvDtype dtype : {KvDtype::kBfloat16, KvDtype::kFloat16}) {
    const KvLayout layout = testing::CodecTestLayout("cuda-decode-test", dtype, 4, 8, 128, 256);
    for (const uint32_t tokens : {256u, 40u}) {
      const std::vector<std::byte> payload =
          testing::MakeKv(layout, tokens, testing::KvShape::kShaped, tokens);
      for (const auto& [name, group] :
           {std::pair{"int8", 0u}, std::pair{"kivi8", 0u}, std::pair{"kivi4", 0u},
            std::pair{"kivi4", 32u}, std::pair{"kivi2", 0u}}) {
        const Codec& codec = **CodecRegistry::Find(name);
        const std::string what = std::string(name) + " group " + std::to_string(group) + " " +
                                 DtypeName(dtype) + " " + std::to_string(tokens) + " tokens";
        const std::vector<std::byte> frame =
            testing::EncodeOrDie(codec, layout, tokens, payload, {.group_size = group});
        const absl::Status decoded = CheckDeviceDecode(*runtime_, codec, layout, tokens, frame);
        EXPECT_TRUE(decoded.ok()) << what << ": " << decoded;
        if (group != 0) {  // format 1: fp32 scales and zeros
          const std::vector<std::byte> old = testing::AsFormat1(
              frame, 1024, codec.id() == CodecId::kKivi4 ? 4 : 2, DtypeSizeBytes(dtype));
          const absl::Status checked = CheckDeviceDecode(*runtime_, codec, layout, tokens, old);
          EXPECT_TRUE(checked.ok()) << what << ", format 1: " << checked;
        }
      }
    }
  }
}

TEST_F(CudaRuntimeTest, ADecodeThatDoesNotFitFailsOnlyItself) {
  const KvLayout layout = testing::CodecTestLayout("cuda-decode-test", KvDtype::kBfloat16, 2);
  const std::vector<std::byte> payload = testing::MakeKv(layout, 64, testing::KvShape::kShaped, 1);
  const Codec& kivi4 = **CodecRegistry::Find("kivi4");
  const std::vector<std::byte> frame = testing::EncodeOrDie(kivi4, layout, 64, payload);
  const std::vector<std::byte> int8 =
      testing::EncodeOrDie(**CodecRegistry::Find("int8"), layout, 64, payload);
  auto device = runtime_->Allocate(frame.size() + 2 * layout.layer_bytes(64), MemoryKind::kDevice);
  ASSERT_TRUE(device.ok());
  auto stream = runtime_->CreateStream("decode-test");
  ASSERT_TRUE(stream.ok());
  auto* staged = static_cast<std::byte*>((*device)->data());
  const CopyRun up{frame.data(), staged, frame.size()};
  ASSERT_TRUE((*stream)->Copy({&up, 1}).ok());
  const uint64_t overhead = EncodedFrameOverheadBytes(layout.num_layers);
  absl::Status good_failure, bad_failure;
  const DecodeLayerOp good{.codec = &kivi4,
                           .layout = &layout,
                           .frame = staged,
                           .frame_bytes = frame.size(),
                           .frame_head = std::span(frame).first(overhead),
                           .layer = 0,
                           .out = staged + (frame.size() + 255) / 256 * 256,
                           .out_bytes = layout.layer_bytes(64),
                           .failure = &good_failure};
  DecodeLayerOp bad = good;
  bad.frame_head = std::span(int8).first(overhead);  // another codec's head
  bad.frame_bytes = int8.size();
  bad.out = good.out;  // nothing is enqueued for it
  bad.failure = &bad_failure;
  ASSERT_TRUE((*stream)->DecodeLayers(std::vector{good, bad}).ok());
  EXPECT_TRUE((*stream)->Synchronize().ok());
  EXPECT_TRUE(good_failure.ok()) << good_failure;
  EXPECT_EQ(bad_failure.code(), absl::StatusCode::kInvalidArgument) << bad_failure;
  // A codec with no kernels: refused, nothing enqueued.
  DecodeLayerOp cachegen = good;
  cachegen.codec = *CodecRegistry::Find("cachegen");
  EXPECT_EQ((*stream)->DecodeLayers({&cachegen, 1}).code(), absl::StatusCode::kUnimplemented);
}

TEST_F(CudaRuntimeTest, RegisteredHostToDeviceBandwidth) {
  constexpr size_t kBytes = 256 << 20;
  void* host = nullptr;
  ASSERT_EQ(::posix_memalign(&host, 4096, kBytes), 0);
  std::memset(host, 1, kBytes);
  ASSERT_TRUE(runtime_->RegisterHostMemory(host, kBytes).ok());
  auto device = runtime_->Allocate(kBytes, MemoryKind::kDevice);
  ASSERT_TRUE(device.ok());
  auto stream = *runtime_->CreateStream("bw");
  std::vector<CopyRun> runs;
  constexpr size_t kRun = 64 << 10;  // a layer-plane of a 256-token chunk at 256 B per token
  for (size_t off = 0; off < kBytes; off += kRun) {
    runs.push_back(
        {static_cast<uint8_t*>(host) + off, static_cast<uint8_t*>((*device)->data()) + off, kRun});
  }
  ASSERT_TRUE(stream->Copy(runs).ok());  // warm-up
  ASSERT_TRUE(stream->Synchronize().ok());
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(stream->Copy(runs).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("h2d_gb_per_s", std::to_string(kBytes / seconds / 1e9));
  std::printf("H2D %zu runs of %zu KiB: %.1f GB/s\n", runs.size(), kRun >> 10,
              kBytes / seconds / 1e9);
  EXPECT_TRUE(runtime_->UnregisterHostMemory(host).ok());
  std::free(host);
}

}  // namespace
}  // namespace strata::storage

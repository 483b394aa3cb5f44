#include "storage/device/decode_check.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "core/fmt_absl.h"
#include "core/status_macros.h"
#include "core/status_util.h"
#include "fmt/format.h"
#include "storage/codec/encoded_chunk.h"

namespace strata::storage {
namespace {

constexpr uint32_t kTestTokens = 40;

KvLayout TestLayout(KvDtype dtype) {
  KvLayout layout;
  layout.model_id = "strata-device-decode-check";
  layout.num_layers = 2;
  layout.num_kv_heads = 2;
  layout.head_dim = 64;
  layout.dtype = dtype;
  layout.chunk_tokens = 64;
  return layout;
}

// n / 16 for n in [-127, 127], every ninth channel 16 times larger: exact in bf16 and fp32.
std::vector<std::byte> TestPayload(const KvLayout& layout) {
  const uint64_t elements = layout.chunk_bytes(kTestTokens) / DtypeSizeBytes(layout.dtype);
  const uint64_t channels = uint64_t{layout.num_kv_heads} * layout.head_dim;
  std::vector<std::byte> payload(layout.chunk_bytes(kTestTokens));
  for (uint64_t i = 0; i < elements; ++i) {
    const auto n = static_cast<int>((i * 2654435761u >> 7) % 255) - 127;
    const float value = static_cast<float>(n) / 16.0f * ((i % channels) % 9 == 0 ? 16.0f : 1.0f);
    if (layout.dtype == KvDtype::kFloat32) {
      std::memcpy(payload.data() + 4 * i, &value, 4);
    } else {  // bf16: the top half of an fp32 whose low half is zero
      uint32_t bits;
      std::memcpy(&bits, &value, 4);
      const auto top = static_cast<uint16_t>(bits >> 16);
      std::memcpy(payload.data() + 2 * i, &top, 2);
    }
  }
  return payload;
}

}  // namespace

absl::Status CheckDeviceDecode(DeviceRuntime& runtime, const Codec& codec, const KvLayout& layout,
                               uint32_t num_tokens, std::span<const std::byte> frame) {
  const uint64_t layer_bytes = layout.layer_bytes(num_tokens);
  // What the stream's work writes is declared before the stream, so that on an early return the
  // stream is destroyed (its work drained) first.
  std::vector<std::byte> back(layout.num_layers * layer_bytes);
  // The decoded layers after the frame, at a 256-byte boundary (allocations start at one).
  const uint64_t frame_room = (frame.size() + 255) / 256 * 256;
  STRATA_ASSIGN_OR_RETURN(
      std::unique_ptr<DeviceAllocation> device,
      runtime.Allocate(frame_room + layout.num_layers * layer_bytes, MemoryKind::kDevice));
  std::vector<absl::Status> failures(layout.num_layers);
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<DeviceStream> stream,
                          runtime.CreateStream("decode-check"));
  auto* staged = static_cast<std::byte*>(device->data());
  std::byte* decoded = staged + frame_room;
  const CopyRun up{frame.data(), staged, frame.size()};
  STRATA_RETURN_IF_ERROR(stream->Copy({&up, 1}));
  const std::span<const std::byte> head(
      frame.data(), std::min<uint64_t>(frame.size(), EncodedFrameOverheadBytes(layout.num_layers)));
  std::vector<DecodeLayerOp> ops;
  for (uint32_t layer = 0; layer < layout.num_layers; ++layer) {
    ops.push_back({.codec = &codec,
                   .layout = &layout,
                   .frame = staged,
                   .frame_bytes = frame.size(),
                   .frame_head = head,
                   .layer = layer,
                   .out = decoded + layer * layer_bytes,
                   .out_bytes = layer_bytes,
                   .failure = &failures[layer]});
  }
  STRATA_RETURN_IF_ERROR(stream->DecodeLayers(ops));
  const CopyRun down{decoded, back.data(), back.size()};
  STRATA_RETURN_IF_ERROR(stream->Copy({&down, 1}));
  STRATA_RETURN_IF_ERROR(stream->Synchronize());
  std::vector<std::byte> expected(layer_bytes);
  for (uint32_t layer = 0; layer < layout.num_layers; ++layer) {
    STRATA_RETURN_IF_ERROR(failures[layer]);
    STRATA_RETURN_IF_ERROR(codec.DecodeLayer(layout, frame, layer, expected));
    if (std::memcmp(back.data() + layer * layer_bytes, expected.data(), layer_bytes) != 0) {
      return absl::InternalError(fmt::format("layer {} differs from the CPU decoder's", layer));
    }
  }
  return absl::OkStatus();
}

CodecSet CheckDeviceDecodes(DeviceRuntime& runtime, std::span<const Codec* const> codecs,
                            std::vector<std::string>* failures) {
  CodecSet passed;
  for (const Codec* codec : codecs) {
    absl::Status status;
    for (const KvDtype dtype : {KvDtype::kBfloat16, KvDtype::kFloat32}) {
      const KvLayout layout = TestLayout(dtype);
      const std::vector<std::byte> payload = TestPayload(layout);
      for (const uint32_t group : {0u, 16u}) {
        const CodecParams params{.group_size = group};
        if (group != 0 && !codec->CheckParams(layout, params).ok()) continue;  // takes none
        absl::StatusOr<std::vector<std::byte>> frame =
            codec->Encode(layout, kTestTokens, payload, params);
        status = frame.ok() ? CheckDeviceDecode(runtime, *codec, layout, kTestTokens, *frame)
                            : frame.status();
        if (!status.ok()) {
          status = Annotate(status, fmt::format("{}, group {}", DtypeName(dtype), group));
          break;
        }
      }
      if (!status.ok()) break;
    }
    if (status.ok()) {
      passed.Add(static_cast<uint32_t>(codec->id()));
    } else if (failures != nullptr) {
      failures->push_back(fmt::format("{}: {}", codec->name(), status.message()));
    }
  }
  return passed;
}

}  // namespace strata::storage

// CheckDeviceDecodes: a runtime's start-up check of its device decoders (DeviceStream::
// DecodeLayers). For each codec it encodes a small test chunk on the CPU, copies the frame to
// device memory, decodes every layer there, copies the layers back and compares them with the
// codec's own DecodeLayer, bit for bit. CudaRuntime offers a codec to its callers only once its
// kernels pass (DeviceRuntime::DecodesOnDevice), so a kernel that disagrees with the CPU decoder
// on this device costs speed (the daemon decodes instead), never wrong KV.
//
// The test chunks: 40 tokens of a bf16 and an fp32 layout of 2 layers x 2 KV heads x 64 dims
// (one chunk of 64 tokens), values n / 16 for n in [-127, 127] with every ninth channel 16 times
// larger (exact in both dtypes); each codec at its default parameters and, for the kivi codecs,
// at groups of 16 (8 residual key tokens).
//
// Thread-safety: call while nothing else uses the runtime's streams for it (it makes its own).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "core/stored_encoding.h"
#include "storage/codec/codec.h"
#include "storage/device/device_runtime.h"

namespace strata::storage {

// Decodes every layer of `frame` (a frame of `codec` for `layout`, of `num_tokens` tokens) on a
// new stream of `runtime`: copied to device memory, decoded there, copied back. OK when each
// layer equals the codec's own DecodeLayer bit for bit; otherwise the decode's error, or
// kInternal naming the first layer that differs.
absl::Status CheckDeviceDecode(DeviceRuntime& runtime, const Codec& codec, const KvLayout& layout,
                               uint32_t num_tokens, std::span<const std::byte> frame);

// The codecs of `codecs` whose decodes on `runtime` match the CPU's (CheckDeviceDecode of the
// test chunks above). A codec left out adds a
// line to `failures` (when given) saying why: its decode failed, differed, or could not run.
CodecSet CheckDeviceDecodes(DeviceRuntime& runtime, std::span<const Codec* const> codecs,
                            std::vector<std::string>* failures = nullptr);

}  // namespace strata::storage

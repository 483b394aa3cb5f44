// CudaFrameDecoder: the decodes of CudaRuntime's DeviceStream::DecodeLayers. A layer of a
// QuantCodec frame (int8, kivi8, kivi4, kivi2) is planned on the host from the frame's head
// (DecodeLayerOp::frame_head: EncodedChunk::ParseHead, then QuantCodec::Recipe) and run on the
// stream by kernels/cuda: each plane's fp16 scales and zeros widened to fp32 (CastToFloat) in the
// decoder's scratch, its codes dequantized (Dequantize: the CPU reference's arithmetic, bit for
// bit), its residual tokens copied. The sections' checksums are not read (the sections are in
// device memory): the frame's checksum, which the caller checks, covers them.
//
// Thread-compatible: one per stream, called by the thread that enqueues on that stream, with its
// device current. Owns its scratch (device memory), freed by the destructor, which must run after
// the stream's work has completed.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/stored_encoding.h"
#include "storage/codec/codec.h"
#include "storage/codec/quant_codec.h"
#include "storage/device/device_runtime.h"

namespace strata::storage {

// The registry's codecs CudaFrameDecoder has kernels for.
std::vector<const Codec*> CudaDecodableCodecs();

class CudaFrameDecoder {
 public:
  // Decodes frames of `codecs` (a subset of CudaDecodableCodecs) on `stream`.
  CudaFrameDecoder(cudaStream_t stream, CodecSet codecs) : stream_(stream), codecs_(codecs) {}
  ~CudaFrameDecoder();
  CudaFrameDecoder(const CudaFrameDecoder&) = delete;
  CudaFrameDecoder& operator=(const CudaFrameDecoder&) = delete;

  // DeviceStream::DecodeLayers for ops CheckDecodeLayerOps passed: kUnimplemented, with nothing
  // enqueued, when an op's codec is not one of the decoder's. An op whose frame head or output
  // does not fit its codec and layout gets its error in *op.failure and nothing enqueued for it.
  // Other errors are CUDA's, from enqueueing (the stream is then in error), and every op not
  // launched by then gets that error in *op.failure too.
  absl::Status Enqueue(std::span<const DecodeLayerOp> ops);

 private:
  struct Planned {
    const DecodeLayerOp* op = nullptr;
    QuantLayerRecipe recipe;
    uint64_t section_offset = 0;  // the op's layer's section in the frame
  };
  static absl::StatusOr<Planned> Plan(const DecodeLayerOp& op);
  absl::Status Launch(const Planned& planned);
  // Scratch of at least `floats` fp32 values; a larger one waits for the stream's work first.
  absl::Status ReserveScratch(uint64_t floats);

  const cudaStream_t stream_;
  const CodecSet codecs_;
  float* scratch_ = nullptr;
  uint64_t scratch_floats_ = 0;
};

}  // namespace strata::storage

#include "storage/codec/code_stream.h"

#include <zstd.h>

#include <algorithm>

#include "core/check.h"
#include "fmt/format.h"

namespace strata::storage {
namespace {

constexpr int kZstdLevel = 1;
constexpr int kZstdMinMatch = 7;

absl::Status CheckShape(const CodeShape& shape, size_t num_codes, size_t num_offsets) {
  const bool valid = (shape.bits == 2 || shape.bits == 4 || shape.bits == 8) && shape.rows >= 0 &&
                     shape.cols >= 0 && shape.group_size > 0 && shape.cols % shape.group_size == 0;
  if (!valid || shape.num_codes() != num_codes || shape.num_offsets() != num_offsets) {
    return absl::InvalidArgumentError(fmt::format(
        "code stream of {} bits, {} x {} codes in groups of {}, given {} codes and {} offsets",
        shape.bits, shape.rows, shape.cols, shape.group_size, num_codes, num_offsets));
  }
  return absl::OkStatus();
}

}  // namespace

CodeStreamEncoder::CodeStreamEncoder() : context_(ZSTD_createCCtx(), ZSTD_freeCCtx) {
  STRATA_CHECK(context_ != nullptr);
  STRATA_CHECK(
      !ZSTD_isError(ZSTD_CCtx_setParameter(context_.get(), ZSTD_c_compressionLevel, kZstdLevel)));
  STRATA_CHECK(
      !ZSTD_isError(ZSTD_CCtx_setParameter(context_.get(), ZSTD_c_minMatch, kZstdMinMatch)));
}

absl::StatusOr<std::vector<std::byte>> CodeStreamEncoder::Encode(const CodeShape& shape,
                                                                 std::span<const uint16_t> codes,
                                                                 std::span<const uint8_t> offsets) {
  if (absl::Status status = CheckShape(shape, codes.size(), offsets.size()); !status.ok()) {
    return status;
  }
  const int64_t rows = shape.rows, cols = shape.cols, groups = cols / shape.group_size;
  const int mask = (1 << shape.bits) - 1;
  std::vector<std::byte> stream(static_cast<size_t>(cols) + ZSTD_compressBound(shape.num_codes()));
  residuals_.resize(shape.num_codes());
  column_.resize(static_cast<size_t>(rows));
  for (int64_t c = 0; c < cols; ++c) {
    const int64_t group = c / shape.group_size;
    for (int64_t r = 0; r < rows; ++r) {
      column_[r] = int{codes[r * cols + c]} - int{offsets[r * groups + group]};
    }
    int center = 0;
    if (rows > 0) {
      sorted_ = column_;
      std::nth_element(sorted_.begin(), sorted_.begin() + rows / 2, sorted_.end());
      center = sorted_[rows / 2];
    }
    stream[c] = static_cast<std::byte>(center & mask);
    uint8_t* out = residuals_.data() + c * rows;
    for (int64_t r = 0; r < rows; ++r) out[r] = static_cast<uint8_t>((column_[r] - center) & mask);
  }
  const size_t size = ZSTD_compress2(context_.get(), stream.data() + cols, stream.size() - cols,
                                     residuals_.data(), residuals_.size());
  if (ZSTD_isError(size)) {
    return absl::InternalError(
        fmt::format("zstd compress of {} codes: {}", codes.size(), ZSTD_getErrorName(size)));
  }
  stream.resize(static_cast<size_t>(cols) + size);
  return stream;
}

CodeStreamDecoder::CodeStreamDecoder() : context_(ZSTD_createDCtx(), ZSTD_freeDCtx) {
  STRATA_CHECK(context_ != nullptr);
}

absl::Status CodeStreamDecoder::Decode(const CodeShape& shape, std::span<const std::byte> stream,
                                       std::span<const uint8_t> offsets,
                                       std::span<uint16_t> codes) {
  if (absl::Status status = CheckShape(shape, codes.size(), offsets.size()); !status.ok()) {
    return status;
  }
  const int64_t rows = shape.rows, cols = shape.cols, groups = cols / shape.group_size;
  if (stream.size() < static_cast<uint64_t>(cols)) {
    return absl::DataLossError(fmt::format(
        "code stream of {} bytes is shorter than its {} channel centers", stream.size(), cols));
  }
  residuals_.resize(shape.num_codes());
  const size_t size = ZSTD_decompressDCtx(context_.get(), residuals_.data(), residuals_.size(),
                                          stream.data() + cols, stream.size() - cols);
  if (ZSTD_isError(size)) {
    return absl::DataLossError(fmt::format("code stream of {} bytes does not decode: zstd {}",
                                           stream.size(), ZSTD_getErrorName(size)));
  }
  if (size != residuals_.size()) {
    return absl::DataLossError(
        fmt::format("code stream decodes to {} codes, not {} x {}", size, rows, cols));
  }
  const int mask = (1 << shape.bits) - 1;
  uint8_t max_residual = 0;
  for (const uint8_t r : residuals_) max_residual = std::max(max_residual, r);
  for (int64_t c = 0; c < cols; ++c) {
    max_residual = std::max(max_residual, std::to_integer<uint8_t>(stream[c]));
  }
  if (max_residual > mask) {
    return absl::DataLossError(
        fmt::format("code stream holds {}, beyond {} bits", max_residual, shape.bits));
  }
  // Row by row, so that the codes are written in order; each residual cache line serves 64 rows.
  const auto* centers = reinterpret_cast<const uint8_t*>(stream.data());
  for (int64_t r = 0; r < rows; ++r) {
    uint16_t* out = codes.data() + r * cols;
    for (int64_t g = 0; g < groups; ++g) {
      const int offset = offsets[r * groups + g];
      for (int64_t c = g * shape.group_size; c < (g + 1) * shape.group_size; ++c) {
        out[c] = static_cast<uint16_t>((residuals_[c * rows + r] + centers[c] + offset) & mask);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace strata::storage

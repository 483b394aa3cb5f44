#include "storage/codec/testing/codec_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>

#include "gtest/gtest.h"
#include "kernels/dtype.h"
#include "storage/codec/encoded_chunk.h"

namespace strata::storage::testing {

KvLayout CodecTestLayout(std::string model_id, KvDtype dtype, uint32_t layers, uint32_t heads,
                         uint32_t head_dim, uint32_t chunk_tokens) {
  KvLayout layout;
  layout.model_id = std::move(model_id);
  layout.num_layers = layers;
  layout.num_kv_heads = heads;
  layout.head_dim = head_dim;
  layout.dtype = dtype;
  layout.chunk_tokens = chunk_tokens;
  return layout;
}

std::vector<std::byte> EncodeOrDie(const Codec& codec, const KvLayout& layout, uint32_t num_tokens,
                                   std::span<const std::byte> payload, const CodecParams& params) {
  absl::StatusOr<std::vector<std::byte>> encoded =
      codec.Encode(layout, num_tokens, payload, params);
  EXPECT_TRUE(encoded.ok()) << encoded.status();
  return encoded.ok() ? *std::move(encoded) : std::vector<std::byte>{};
}

std::vector<std::byte> DecodeOrDie(const Codec& codec, const KvLayout& layout, uint32_t num_tokens,
                                   std::span<const std::byte> encoded) {
  std::vector<std::byte> out(layout.chunk_bytes(num_tokens));
  const absl::Status status = codec.Decode(layout, encoded, out);
  EXPECT_TRUE(status.ok()) << status;
  return out;
}

std::vector<std::byte> AsFormat1(std::span<const std::byte> frame, uint64_t cols, int bits,
                                 uint64_t dtype_bytes) {
  absl::StatusOr<EncodedChunk> chunk = EncodedChunk::Parse(frame);
  EXPECT_TRUE(chunk.ok()) << chunk.status();
  if (!chunk.ok()) return {};
  EncodedChunkHeader header = chunk->header();
  const uint64_t t = header.num_tokens, g = header.group_size;
  const uint64_t key_rows = t / g * g;
  struct Plane {
    uint64_t code_bytes, groups, residual_bytes;
  };
  const Plane planes[2] = {
      {key_rows * cols * bits / 8, key_rows / g * cols, (t - key_rows) * cols * dtype_bytes},
      {t * cols * bits / 8, t * cols / g, 0}};
  std::vector<std::vector<std::byte>> sections;
  for (uint32_t layer = 0; layer < header.num_layers; ++layer) {
    const std::span<const std::byte> in = chunk->section(layer);
    std::vector<std::byte>& out = sections.emplace_back();
    uint64_t at = 0;
    const auto copy = [&](uint64_t bytes) {
      out.insert(out.end(), in.begin() + at, in.begin() + at + bytes);
      at += bytes;
    };
    for (const Plane& plane : planes) {
      copy(plane.code_bytes);
      for (uint64_t i = 0; i < 2 * plane.groups; ++i, at += 2) {  // the scales, then the zeros
        uint16_t half;
        std::memcpy(&half, in.data() + at, 2);
        const float wide = kernels::Fp16BitsToFloat(half);
        const auto* bytes = reinterpret_cast<const std::byte*>(&wide);
        out.insert(out.end(), bytes, bytes + 4);
      }
      copy(plane.residual_bytes);
    }
    EXPECT_EQ(at, in.size());
  }
  header.format_version = 1;
  return EncodedChunkWriter::Assemble(header, sections);
}

std::vector<std::byte> Relabel(std::span<const std::byte> frame, uint16_t format_version) {
  absl::StatusOr<EncodedChunk> chunk = EncodedChunk::Parse(frame);
  EXPECT_TRUE(chunk.ok()) << chunk.status();
  if (!chunk.ok()) return {};
  EncodedChunkHeader header = chunk->header();
  header.format_version = format_version;
  std::vector<std::vector<std::byte>> sections;
  for (uint32_t l = 0; l < header.num_layers; ++l) {
    sections.emplace_back(chunk->section(l).begin(), chunk->section(l).end());
  }
  return EncodedChunkWriter::Assemble(header, sections);
}

double HalfUlp(KvDtype dtype, float y) {
  if (dtype == KvDtype::kFloat32) return 0;
  const int precision = dtype == KvDtype::kBfloat16 ? 8 : 11;  // significand bits
  const int min_exponent = dtype == KvDtype::kBfloat16 ? -126 : -14;
  int exponent = 0;
  std::frexp(std::fabs(y), &exponent);  // |y| = m * 2^exponent, m in [0.5, 1)
  return std::ldexp(1.0, std::max(exponent - 1, min_exponent) - precision);
}

void ExpectRejected(const Codec& codec, const KvLayout& layout, uint32_t num_tokens,
                    std::span<const std::byte> bytes, absl::StatusCode code,
                    const std::string& what) {
  const std::vector<std::byte> copy(bytes.begin(), bytes.end());
  std::vector<std::byte> out(layout.chunk_bytes(num_tokens));
  const absl::Status status = codec.Decode(layout, copy, out);
  EXPECT_EQ(status.code(), code) << what << ": " << status;
  std::vector<std::byte> layer_out(layout.layer_bytes(num_tokens));
  for (uint32_t layer = 0; layer < layout.num_layers; ++layer) {
    EXPECT_NE(codec.DecodeLayer(layout, copy, layer, layer_out).code(), absl::StatusCode::kOk)
        << what << " layer " << layer;
  }
}

void ExpectCorruptSectionsFailAlone(const Codec& codec, const KvLayout& layout, uint32_t num_tokens,
                                    std::span<const std::byte> encoded, int trials, uint64_t seed) {
  absl::StatusOr<EncodedChunk> chunk = EncodedChunk::Parse(encoded);
  ASSERT_TRUE(chunk.ok()) << chunk.status();
  const std::vector<std::byte> whole = DecodeOrDie(codec, layout, num_tokens, encoded);
  std::vector<std::byte> out(layout.chunk_bytes(num_tokens));
  std::vector<std::byte> layer_out(layout.layer_bytes(num_tokens));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < trials; ++trial) {
    const uint32_t layer = static_cast<uint32_t>(rng() % layout.num_layers);
    const std::span<const std::byte> section = chunk->section(layer);
    std::vector<std::byte> bad(encoded.begin(), encoded.end());
    const uint64_t at =
        static_cast<uint64_t>(section.data() - encoded.data()) + rng() % section.size();
    bad[at] ^= std::byte{static_cast<unsigned char>(1u << (rng() % 8))};
    EXPECT_EQ(codec.Decode(layout, bad, out).code(), absl::StatusCode::kDataLoss);
    for (uint32_t other = 0; other < layout.num_layers; ++other) {
      const absl::Status status = codec.DecodeLayer(layout, bad, other, layer_out);
      if (other == layer) {
        EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
      } else {
        ASSERT_TRUE(status.ok()) << status;
        EXPECT_EQ(0, std::memcmp(layer_out.data(),
                                 whole.data() + layout.plane_offset(other, 0, num_tokens),
                                 layer_out.size()));
      }
    }
  }
}

}  // namespace strata::storage::testing

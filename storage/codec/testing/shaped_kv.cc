#include "storage/codec/testing/shaped_kv.h"

#include <cmath>
#include <cstring>
#include <random>

#include "core/check.h"
#include "kernels/dtype.h"

namespace strata::storage::testing {
namespace {

void Store(KvDtype dtype, std::byte* payload, uint64_t i, float v) {
  kernels::DispatchFloatDtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T value = kernels::FromFloat<T>(v);
    std::memcpy(payload + i * sizeof(T), &value, sizeof(T));
  });
}

constexpr uint32_t kLowRankDims = 64;

std::vector<std::byte> MakeLowRankKv(const KvLayout& layout, uint32_t num_tokens, uint64_t seed) {
  std::vector<std::byte> payload(layout.chunk_bytes(num_tokens));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::bernoulli_distribution outlier(1.0 / 16);
  const uint64_t channels = uint64_t{layout.num_kv_heads} * layout.head_dim;
  const uint32_t planes = layout.planes_per_layer();
  std::vector<float> shared(uint64_t{planes} * num_tokens * kLowRankDims);
  for (float& f : shared) f = normal(rng);
  std::vector<float> channel_scale(channels);
  for (float& s : channel_scale) s = outlier(rng) ? 12.0f : 1.0f;
  std::vector<float> factors(uint64_t{num_tokens} * kLowRankDims);
  std::vector<float> loadings(uint64_t{kLowRankDims} * channels);
  uint64_t i = 0;
  for (uint32_t layer = 0; layer < layout.num_layers; ++layer) {
    for (uint32_t plane = 0; plane < planes; ++plane) {
      const bool keys = plane == 0;
      const float decay = keys ? 0.85f : 0.9f;
      for (uint32_t t = 0; t < num_tokens; ++t) {
        float weight = 1.0f;
        for (uint32_t j = 0; j < kLowRankDims; ++j, weight *= decay) {
          const uint64_t k = uint64_t{t} * kLowRankDims + j;
          factors[k] = weight * (shared[uint64_t{plane} * num_tokens * kLowRankDims + k] +
                                 0.15f * normal(rng));
        }
      }
      for (uint32_t j = 0; j < kLowRankDims; ++j) {
        for (uint64_t c = 0; c < channels; ++c) {
          loadings[j * channels + c] = normal(rng) / 8 * (keys ? channel_scale[c] : 1.0f);
        }
      }
      for (uint32_t t = 0; t < num_tokens; ++t) {
        for (uint64_t c = 0; c < channels; ++c, ++i) {
          float v = 0.01f * normal(rng);
          for (uint32_t j = 0; j < kLowRankDims; ++j) {
            v += factors[uint64_t{t} * kLowRankDims + j] * loadings[j * channels + c];
          }
          Store(layout.dtype, payload.data(), i, v);
        }
      }
    }
  }
  return payload;
}

}  // namespace

std::vector<std::byte> MakeKv(const KvLayout& layout, uint32_t num_tokens, KvShape shape,
                              uint64_t seed) {
  STRATA_CHECK(kernels::IsFloatDtype(layout.dtype));
  if (shape == KvShape::kLowRank) return MakeLowRankKv(layout, num_tokens, seed);
  std::vector<std::byte> payload(layout.chunk_bytes(num_tokens));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::bernoulli_distribution outlier(1.0 / 16);
  const uint64_t channels = uint64_t{layout.num_kv_heads} * layout.head_dim;
  std::vector<float> channel_scale(channels), channel_offset(channels), token_scale(num_tokens);
  uint64_t i = 0;
  for (uint32_t layer = 0; layer < layout.num_layers; ++layer) {
    for (uint32_t plane = 0; plane < layout.planes_per_layer(); ++plane) {
      const bool keys = plane == 0;
      if (shape == KvShape::kShaped) {
        for (uint64_t c = 0; c < channels; ++c) {
          channel_scale[c] = outlier(rng) ? 12.0f : 1.0f;
          channel_offset[c] = normal(rng);
        }
        for (float& r : token_scale) r = std::exp(0.75f * normal(rng));
      }
      for (uint32_t t = 0; t < num_tokens; ++t) {
        for (uint64_t c = 0; c < channels; ++c, ++i) {
          const float z = normal(rng);
          float v = z;
          if (shape == KvShape::kShaped) {
            v = keys ? channel_scale[c] * (z + channel_offset[c]) : token_scale[t] * z;
          }
          Store(layout.dtype, payload.data(), i, v);
        }
      }
    }
  }
  return payload;
}

}  // namespace strata::storage::testing

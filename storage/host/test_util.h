// Helpers shared by the host tier's tests and benchmarks: a small layout, synthetic keys and
// deterministic payloads. Test-only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/chunk_key.h"
#include "core/kv_layout.h"

namespace strata::storage::testing {

// 2 layers x K|V x 2 kv heads x head_dim 16 x fp16: 256 bytes per token, 16 tokens per chunk,
// so a full chunk is 4 KiB and a partial one any multiple of 256 bytes.
inline KvLayout SmallLayout(std::string model_id = "test-model") {
  KvLayout layout;
  layout.model_id = std::move(model_id);
  layout.kind = KvKind::kMha;
  layout.num_layers = 2;
  layout.num_kv_heads = 2;
  layout.head_dim = 16;
  layout.dtype = KvDtype::kFloat16;
  layout.chunk_tokens = 16;
  return layout;
}

inline uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A synthetic key of the layout with `layout_fingerprint`, distinct for every `id`.
inline ChunkKey SyntheticKey(uint64_t layout_fingerprint, uint64_t id) {
  uint8_t digest[16];
  const uint64_t words[2] = {Mix64(id), Mix64(id ^ 0x5555555555555555ull)};
  std::memcpy(digest, words, sizeof(digest));
  return ChunkKey::FromParts(HashAlgorithm::kXxh3_128, KeyNamespace::kPrefix, layout_fingerprint,
                             digest);
}

inline ChunkKey SyntheticKey(const KvLayout& layout, uint64_t id) {
  return SyntheticKey(layout.Fingerprint(), id);
}

// `size` deterministic bytes derived from `seed`.
inline std::vector<std::byte> Pattern(uint64_t seed, uint64_t size) {
  std::vector<std::byte> bytes(size);
  for (uint64_t offset = 0; offset < size; offset += 8) {
    const uint64_t word = Mix64(seed * 0x100000001B3ull + offset);
    std::memcpy(bytes.data() + offset, &word, std::min<uint64_t>(8, size - offset));
  }
  return bytes;
}

}  // namespace strata::storage::testing

// Fuzzes the codecs' decoders (storage/codec: EncodedChunk::Parse and every codec's Decode and
// DecodeLayer), which read encoded chunks that come back from disk or from a peer.
//
// Input: byte 0 a mode (bit 0: after mutating, recompute the frame's checksums so that the
// mutated sections reach the codec's own parser; bit 1: decode the bytes after byte 5 as a frame,
// with no encoding; bit 2: low-rank rather than shaped KV); byte 1 the codec (an index into
// CodecRegistry::All()); byte 2 one of four small layouts (MHA bf16, fp16 and fp32, MLA bf16);
// byte 3 the token count; bytes 4-5 CodecParams group_size and bits; then mutations of 5 bytes
// each (a little-endian u32 offset into the frame, modulo its size, and a byte XORed there).
// The payload is storage/codec/testing/shaped_kv.h's, seeded by byte 3. A token-dropping codec
// (token_drop_codec.h) gets the layout with nope keys and, for drop_h2o, an importance per token
// drawn from byte 3.
//
// Invariants: Encode is OK or kInvalidArgument; an unmutated frame decodes (a token-dropping one:
// whole, or kFailedPrecondition when it dropped tokens; its kept tokens always), and every layer
// alone decodes to the same bytes; any frame decodes OK, kInvalidArgument or kDataLoss (a
// token-dropping codec's also kFailedPrecondition; DecodeKept never) and ASan checks that nothing
// is read or written outside the spans given; when Decode succeeds every DecodeLayer succeeds with
// the same bytes as Decode's.
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <span>
#include <tuple>
#include <vector>

#include "storage/codec/codec_registry.h"
#include "storage/codec/encoded_chunk.h"
#include "storage/codec/testing/shaped_kv.h"
#include "storage/codec/token_drop_codec.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using strata::KvDtype;
using strata::KvKind;
using strata::KvLayout;
namespace storage = strata::storage;

KvLayout FuzzLayout(uint8_t choice) {
  struct Shape {
    KvKind kind;
    KvDtype dtype;
    uint32_t layers, heads, head_dim, chunk_tokens;
  };
  static constexpr Shape kShapes[] = {
      {KvKind::kMha, KvDtype::kBfloat16, 2, 2, 64, 64},
      {KvKind::kMha, KvDtype::kFloat16, 3, 1, 32, 40},
      {KvKind::kMha, KvDtype::kFloat32, 2, 2, 32, 32},
      {KvKind::kMlaLatent, KvDtype::kBfloat16, 2, 1, 64, 48},
  };
  const Shape& s = kShapes[choice % 4];
  KvLayout layout;
  layout.model_id = "codec-frame-fuzz";
  layout.kind = s.kind;
  layout.dtype = s.dtype;
  layout.num_layers = s.layers;
  layout.num_kv_heads = s.heads;
  layout.head_dim = s.head_dim;
  layout.chunk_tokens = s.chunk_tokens;
  return layout;
}

template <class T>
T Load(const std::vector<std::byte>& f, uint64_t offset) {
  T value;
  std::memcpy(&value, f.data() + offset, sizeof(T));
  return value;
}

// Rewrites each section's checksum and the header checksum (encoded_chunk.h's format) when the
// frame's layer table fits in it; otherwise leaves the frame as it is.
void FixChecksums(std::vector<std::byte>& f) {
  if (f.size() < storage::kEncodedHeaderBytes) return;
  const auto layers = Load<uint32_t>(f, 28);
  const uint64_t table_end = storage::EncodedFrameOverheadBytes(layers);
  if (layers > f.size() || table_end > f.size()) return;
  uint64_t offset = table_end;
  for (uint32_t l = 0; l < layers; ++l) {
    const uint64_t entry = storage::kEncodedHeaderBytes + storage::kEncodedLayerEntryBytes * l;
    const auto size = Load<uint64_t>(f, entry);
    if (size > f.size() - offset) return;
    const uint64_t hash = XXH3_64bits(f.data() + offset, size);
    std::memcpy(f.data() + entry + 8, &hash, 8);
    offset += size;
  }
  const uint64_t hash = XXH3_64bits(f.data() + 12, table_end - 12);
  std::memcpy(f.data() + 4, &hash, 8);
}

// What Encode sees and returns is decided by the first six input bytes alone, and MakeKv and
// Encode are pure functions of their arguments; drawing the payload (normal variates under
// coverage instrumentation) and encoding it took nine tenths of each input's time, while the
// fuzzer mostly varies the mutations after them. So each payload is drawn once per process (at
// most 4 layouts x 2 positional formats x 2 shapes x 256 seeds, 64 KiB or less each), and each
// frame is encoded once while it is among the last 4096 made.
const std::vector<std::byte>& Payload(const uint8_t* head, const KvLayout& layout,
                                      uint32_t num_tokens) {
  using Key = std::tuple<uint8_t, strata::PositionalFormat, uint8_t, uint8_t>;
  static std::map<Key, std::vector<std::byte>> drawn;
  const Key key{static_cast<uint8_t>(head[2] % 4), layout.positional,
                static_cast<uint8_t>(head[0] & 4), head[3]};
  auto it = drawn.find(key);
  if (it != drawn.end()) return it->second;
  const auto shape =
      (head[0] & 4) ? storage::testing::KvShape::kLowRank : storage::testing::KvShape::kShaped;
  return drawn.emplace(key, storage::testing::MakeKv(layout, num_tokens, shape, head[3]))
      .first->second;
}

const absl::StatusOr<std::vector<std::byte>>& Encoded(const uint8_t* head,
                                                      const storage::Codec& codec,
                                                      const KvLayout& layout, uint32_t num_tokens,
                                                      const storage::CodecParams& params) {
  using Key = std::tuple<uint8_t, uint8_t, uint8_t, uint8_t, uint8_t, uint8_t>;
  static std::map<Key, absl::StatusOr<std::vector<std::byte>>> made;
  const Key key{static_cast<uint8_t>(head[0] & 4), head[1], head[2], head[3], head[4], head[5]};
  auto it = made.find(key);
  if (it != made.end()) return it->second;
  if (made.size() >= 4096) made.clear();
  return made
      .emplace(key, codec.Encode(layout, num_tokens, Payload(head, layout, num_tokens), params))
      .first->second;
}

bool DecodeErrorCode(const absl::Status& status) {
  return status.ok() || status.code() == absl::StatusCode::kInvalidArgument ||
         status.code() == absl::StatusCode::kDataLoss;
}

// Decode's and DecodeLayer's codes for `codec`: a token-dropping codec's frame that dropped
// tokens does not decode whole (kFailedPrecondition).
bool DecodeErrorCode(const storage::Codec& codec, const absl::Status& status) {
  return DecodeErrorCode(status) ||
         (codec.drops_tokens() && status.code() == absl::StatusCode::kFailedPrecondition);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 6) return 0;
  const uint8_t mode = data[0];
  const std::span<const storage::Codec* const> codecs = storage::CodecRegistry::All();
  const storage::Codec& codec = *codecs[data[1] % codecs.size()];
  KvLayout layout = FuzzLayout(data[2]);
  if (codec.drops_tokens()) layout.positional = strata::PositionalFormat::kNope;
  const uint32_t num_tokens = 1 + data[3] % layout.chunk_tokens;
  std::vector<float> importance;
  if (codec.id() == storage::CodecId::kDropH2o) {
    std::mt19937 rng(data[3]);
    for (uint32_t t = 0; t < num_tokens; ++t) {
      importance.push_back(std::uniform_real_distribution<float>(0, 1)(rng));
    }
  }
  const storage::CodecParams params{
      .group_size = data[4], .bits = data[5], .importance = importance};

  std::vector<std::byte> frame;
  const bool raw = (mode & 2) != 0;
  if (raw) {
    frame.assign(reinterpret_cast<const std::byte*>(data + 6),
                 reinterpret_cast<const std::byte*>(data + size));
  } else {
    const absl::StatusOr<std::vector<std::byte>>& encoded =
        Encoded(data, codec, layout, num_tokens, params);
    if (!encoded.ok()) {
      FUZZ_CHECK(encoded.status().code() == absl::StatusCode::kInvalidArgument);
      return 0;
    }
    frame = *encoded;
    for (size_t i = 6; i + 5 <= size; i += 5) {
      uint32_t offset = 0;
      std::memcpy(&offset, data + i, 4);
      frame[offset % frame.size()] ^= static_cast<std::byte>(data[i + 4]);
    }
    if (mode & 1) FixChecksums(frame);
  }
  const bool mutated = raw || size > 6;

  // Decode's output is sized from the frame's own token count when it parses.
  absl::StatusOr<storage::EncodedChunk> parsed = storage::EncodedChunk::Parse(frame);
  FUZZ_CHECK(DecodeErrorCode(parsed.status()));
  const uint32_t frame_tokens = parsed.ok() && parsed->header().num_tokens <= layout.chunk_tokens
                                    ? parsed->header().num_tokens
                                    : num_tokens;
  std::vector<std::byte> out(layout.chunk_bytes(frame_tokens));
  const absl::Status decoded = codec.Decode(layout, frame, out);
  FUZZ_CHECK(DecodeErrorCode(codec, decoded));
  FUZZ_CHECK(decoded.ok() || mutated || decoded.code() == absl::StatusCode::kFailedPrecondition);
  if (codec.drops_tokens()) {
    const absl::StatusOr<storage::KeptTokens> kept =
        static_cast<const storage::TokenDropCodec&>(codec).DecodeKept(layout, frame);
    FUZZ_CHECK(DecodeErrorCode(kept.status()));
    FUZZ_CHECK(kept.ok() || mutated);
    if (kept.ok()) FUZZ_CHECK(kept->payload.size() == layout.chunk_bytes(kept->num_tokens));
  }

  std::vector<std::byte> layer_out(layout.layer_bytes(frame_tokens));
  for (uint32_t layer = 0; layer < layout.num_layers; ++layer) {
    const absl::Status status = codec.DecodeLayer(layout, frame, layer, layer_out);
    FUZZ_CHECK(DecodeErrorCode(codec, status));
    if (decoded.ok()) {
      FUZZ_CHECK(status.ok());
      FUZZ_CHECK(std::memcmp(layer_out.data(), out.data() + layer * layer_out.size(),
                             layer_out.size()) == 0);
    }
  }
  return 0;
}

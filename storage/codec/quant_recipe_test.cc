// QuantCodec::Recipe, as a device decoder uses it: from a frame's head alone (EncodedChunk::
// ParseHead), the recipe must locate every part of every layer's section, so that widening the
// scales and zeros, dequantizing the codes and copying the residual tokens (what CudaRuntime's
// DecodeLayers does with its kernels) gives the codec's own DecodeLayer bit for bit.
#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/dtype.h"
#include "kernels/quant.h"
#include "storage/codec/codec_registry.h"
#include "storage/codec/encoded_chunk.h"
#include "storage/codec/quant_codec.h"
#include "storage/codec/testing/codec_test_util.h"
#include "storage/codec/testing/shaped_kv.h"

namespace strata::storage {
namespace {

using testing::AsFormat1;
using testing::CodecTestLayout;
using testing::EncodeOrDie;
using testing::KvShape;
using testing::MakeKv;
using testing::Relabel;

const QuantCodec& Quant(std::string_view name) {
  absl::StatusOr<const Codec*> codec = CodecRegistry::Find(name);
  EXPECT_TRUE(codec.ok()) << codec.status();
  return dynamic_cast<const QuantCodec&>(**codec);
}

// What a device decoder does with one layer's recipe, on the CPU: each plane's scales and zeros
// read as fp32 (widened from fp16 where the recipe says so), its codes dequantized, its residual
// tokens copied.
std::vector<std::byte> DecodeByRecipe(const QuantLayerRecipe& recipe,
                                      std::span<const std::byte> section) {
  std::vector<std::byte> out(recipe.layer_bytes);
  for (uint32_t p = 0; p < recipe.num_planes; ++p) {
    const QuantLayerRecipe::Plane& plane = recipe.planes[p];
    std::byte* plane_out = out.data() + plane.out_offset;
    if (plane.quantized_rows > 0) {
      const bool asymmetric = plane.params.scheme == kernels::QuantScheme::kAsymmetric;
      std::vector<float> params((asymmetric ? 2 : 1) * plane.num_groups);
      for (size_t i = 0; i < params.size(); ++i) {  // the zeros follow the scales
        const std::byte* at = section.data() + plane.scales_offset + i * plane.param_bytes();
        if (plane.params.fp16_params) {
          uint16_t half;
          std::memcpy(&half, at, 2);
          params[i] = kernels::Fp16BitsToFloat(half);
        } else {
          std::memcpy(&params[i], at, 4);
        }
      }
      std::vector<uint32_t> codes(plane.code_words);
      std::memcpy(codes.data(), section.data() + plane.codes_offset, 4 * codes.size());
      const std::span<const float> all(params);
      EXPECT_TRUE(kernels::Dequantize(plane.params, codes, all.first(plane.num_groups),
                                      all.subspan(plane.num_groups),
                                      kernels::MatrixView::Dense(plane_out, recipe.dtype,
                                                                 plane.quantized_rows, recipe.cols))
                      .ok());
    }
    std::memcpy(plane_out + plane.out_bytes - plane.residual_bytes,
                section.data() + plane.residual_offset, plane.residual_bytes);
  }
  return out;
}

// Every layer of `frame`, decoded through the recipe of its head, equals DecodeLayer's.
void ExpectRecipeDecodesAsTheCodec(const QuantCodec& codec, const KvLayout& layout,
                                   std::span<const std::byte> frame, const std::string& what) {
  const uint64_t head_bytes =
      std::min<uint64_t>(frame.size(), EncodedFrameOverheadBytes(layout.num_layers));
  absl::StatusOr<EncodedChunk> head =
      EncodedChunk::ParseHead(frame.first(head_bytes), frame.size());
  ASSERT_TRUE(head.ok()) << what << ": " << head.status();
  absl::StatusOr<QuantLayerRecipe> recipe = codec.Recipe(layout, *head);
  ASSERT_TRUE(recipe.ok()) << what << ": " << recipe.status();
  EXPECT_EQ(recipe->layer_bytes, layout.layer_bytes(head->header().num_tokens)) << what;
  for (uint32_t layer = 0; layer < layout.num_layers; ++layer) {
    ASSERT_EQ(head->section_bytes(layer), recipe->section_bytes) << what;
    std::vector<std::byte> expected(recipe->layer_bytes);
    ASSERT_TRUE(codec.DecodeLayer(layout, frame, layer, expected).ok()) << what;
    EXPECT_EQ(
        DecodeByRecipe(*recipe, frame.subspan(head->section_offset(layer), recipe->section_bytes)),
        expected)
        << what << ", layer " << layer;
  }
}

TEST(QuantRecipeTest, ADecoderFollowingTheRecipeOfAFramesHeadDecodesAsTheCodec) {
  for (const KvDtype dtype : {KvDtype::kBfloat16, KvDtype::kFloat16, KvDtype::kFloat32}) {
    // 2 heads of 64: groups of 16 leave 40 % 16 = 8 residual key tokens.
    const KvLayout layout = CodecTestLayout("recipe-test", dtype, 3, 2, 64, 64);
    for (const uint32_t tokens : {40u, 64u}) {
      const std::vector<std::byte> payload = MakeKv(layout, tokens, KvShape::kShaped, tokens);
      for (const auto& [name, group] :
           {std::pair{"int8", 0u}, std::pair{"kivi8", 0u}, std::pair{"kivi4", 0u},
            std::pair{"kivi4", 16u}, std::pair{"kivi2", 16u}}) {
        const QuantCodec& codec = Quant(name);
        const std::string what = std::string(name) + " group " + std::to_string(group) + " " +
                                 std::string(DtypeName(dtype)) + ", " + std::to_string(tokens) +
                                 " tokens";
        const std::vector<std::byte> frame =
            EncodeOrDie(codec, layout, tokens, payload, {.group_size = group});
        ExpectRecipeDecodesAsTheCodec(codec, layout, frame, what);
        if (group != 0 && std::string_view(name) != "kivi8") {
          // Format 1's fp32 scales and zeros.
          ExpectRecipeDecodesAsTheCodec(
              codec, layout,
              AsFormat1(frame, 128, codec.id() == CodecId::kKivi4 ? 4 : 2, DtypeSizeBytes(dtype)),
              what + ", format 1");
        }
      }
    }
  }
}

TEST(QuantRecipeTest, ForeignFramesAndShortHeadsAreRefused) {
  const KvLayout layout = CodecTestLayout("recipe-test", KvDtype::kBfloat16, 3, 2, 64, 64);
  const std::vector<std::byte> payload = MakeKv(layout, 40, KvShape::kShaped, 3);
  const std::vector<std::byte> frame = EncodeOrDie(Quant("kivi4"), layout, 40, payload);
  const uint64_t overhead = EncodedFrameOverheadBytes(layout.num_layers);
  const auto head = [&](uint64_t bytes, uint64_t frame_bytes) {
    return EncodedChunk::ParseHead(std::span(frame).first(bytes), frame_bytes);
  };
  // A head without the whole layer table is the caller's error; a frame shorter than its table
  // is truncated.
  EXPECT_EQ(head(overhead - 1, frame.size()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(head(20, frame.size()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(head(overhead, overhead - 1).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(head(overhead, frame.size() - 1).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(head(overhead, frame.size() + 1).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<std::byte> corrupt(frame.begin(), frame.begin() + overhead);
  corrupt[40] ^= std::byte{1};  // inside the header checksum's range
  EXPECT_EQ(EncodedChunk::ParseHead(corrupt, frame.size()).status().code(),
            absl::StatusCode::kDataLoss);

  absl::StatusOr<EncodedChunk> parsed = head(overhead, frame.size());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(Quant("int8").Recipe(layout, *parsed).status().code(),
            absl::StatusCode::kInvalidArgument);
  KvLayout other = layout;
  other.model_id = "another-model";
  EXPECT_EQ(Quant("kivi4").Recipe(other, *parsed).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Format 1 sections (fp32 scales) under a format 2 header: their sizes are not the recipe's.
  const std::vector<std::byte> old = AsFormat1(frame, 128, 4, 2);
  const std::vector<std::byte> mislabelled = Relabel(old, 2);
  absl::StatusOr<EncodedChunk> mislabelled_head =
      EncodedChunk::ParseHead(std::span(mislabelled).first(overhead), mislabelled.size());
  ASSERT_TRUE(mislabelled_head.ok()) << mislabelled_head.status();
  EXPECT_EQ(Quant("kivi4").Recipe(layout, *mislabelled_head).status().code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace strata::storage

#include "core/kv_layout.h"

#include "gtest/gtest.h"

namespace strata {
namespace {

KvLayout Llama8B() {
  KvLayout layout;
  layout.model_id = "meta-llama/Llama-3.1-8B";
  layout.num_layers = 32;
  layout.num_kv_heads = 8;
  layout.head_dim = 128;
  layout.dtype = KvDtype::kBfloat16;
  return layout;
}

TEST(KvLayout, GeometryOfLlama8B) {
  const KvLayout layout = Llama8B();
  ASSERT_TRUE(layout.Validate().ok());
  EXPECT_EQ(layout.bytes_per_token(), 128u * 1024);
  EXPECT_EQ(layout.chunk_bytes(256), 32u << 20);
  EXPECT_EQ(layout.layer_bytes(256), (32u << 20) / 32);
  EXPECT_EQ(layout.plane_offset(1, 1, 256), layout.layer_bytes(256) + layout.layer_bytes(256) / 2);
}

TEST(KvLayout, MlaHasOnePlane) {
  KvLayout layout = Llama8B();
  layout.kind = KvKind::kMlaLatent;
  layout.num_kv_heads = 1;
  layout.head_dim = 576;
  EXPECT_EQ(layout.planes_per_layer(), 1u);
  EXPECT_EQ(layout.bytes_per_token(), 32u * 576 * 2);
}

TEST(KvLayout, FingerprintIsStableAndSensitiveToEveryField) {
  const KvLayout base = Llama8B();
  EXPECT_EQ(base.Fingerprint(), Llama8B().Fingerprint());
  std::vector<KvLayout> variants(10, base);
  variants[0].model_id = "other";
  variants[1].kind = KvKind::kMlaLatent;
  variants[2].num_layers = 31;
  variants[3].num_kv_heads = 4;
  variants[4].head_dim = 64;
  variants[5].dtype = KvDtype::kFloat16;
  variants[6].tp_rank = 1;
  variants[6].tp_world_size = 2;
  variants[7].tp_world_size = 2;
  variants[8].positional = PositionalFormat::kNope;
  variants[9].chunk_tokens = 16;
  for (size_t i = 0; i < variants.size(); ++i) {
    EXPECT_NE(variants[i].Fingerprint(), base.Fingerprint()) << i;
    for (size_t j = 0; j < i; ++j) EXPECT_NE(variants[i].Fingerprint(), variants[j].Fingerprint());
  }
}

TEST(KvLayout, FingerprintIsPinnedAcrossRuns) {
  // Guards the key protocol: changing this value orphans every cached chunk in every
  // deployment, so it needs a KvLayout::kFormatVersion bump and a migration note.
  EXPECT_EQ(Llama8B().Fingerprint(), 5117799709113515118ull) << std::hex << Llama8B().Fingerprint();
}

TEST(KvLayout, ValidateRejectsBadFields) {
  auto expect_bad = [](KvLayout layout, const char* what) {
    const absl::Status s = layout.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what;
  };
  KvLayout l = Llama8B();
  l.model_id.clear();
  expect_bad(l, "empty model");
  l = Llama8B();
  l.num_layers = 0;
  expect_bad(l, "zero layers");
  l = Llama8B();
  l.head_dim = 1u << 30;
  expect_bad(l, "huge head_dim");
  l = Llama8B();
  l.tp_rank = 2;
  l.tp_world_size = 2;
  expect_bad(l, "tp_rank out of range");
  l = Llama8B();
  l.chunk_tokens = 0;
  expect_bad(l, "zero chunk");
  l = Llama8B();
  l.dtype = static_cast<KvDtype>(99);
  expect_bad(l, "bad dtype");
  l = Llama8B();
  l.chunk_tokens = 1u << 20;
  expect_bad(l, "chunk above 4 GiB");
}

}  // namespace
}  // namespace strata

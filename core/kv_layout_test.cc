#include "core/kv_layout.h"

#include "gmock/gmock.h"
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

TEST(KvLayout, EncodeAndDecodeRoundTripAndRefuseAnythingElse) {
  KvLayout nope = Llama8B();
  nope.positional = PositionalFormat::kNope;
  nope.tp_rank = 1;
  nope.tp_world_size = 4;
  for (const KvLayout& layout : {Llama8B(), nope}) {
    const std::string bytes = layout.Encode();
    absl::StatusOr<KvLayout> decoded = KvLayout::Decode(bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, layout);
    EXPECT_EQ(decoded->Fingerprint(), layout.Fingerprint());
  }
  const std::string good = Llama8B().Encode();
  std::string bad_kind = good;
  bad_kind[good.size() - 36] = 9;  // kind, the first field after the model id
  KvLayout invalid = Llama8B();
  invalid.num_layers = 0;
  for (const std::string& bytes :
       {std::string(), good.substr(0, good.size() - 1), good + "x",
        "strata.kv_layoux" + good.substr(16), bad_kind, invalid.Encode()}) {
    EXPECT_EQ(KvLayout::Decode(bytes).status().code(), absl::StatusCode::kInvalidArgument)
        << bytes.size();
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

TEST(KvLayoutNames, CanonicalNamesRoundTrip) {
  for (KvKind kind : {KvKind::kMha, KvKind::kMlaLatent}) {
    EXPECT_EQ(*ParseKvKind(KvKindName(kind)), kind);
    EXPECT_EQ(*KvKindFromValue(static_cast<uint32_t>(kind)), kind);
  }
  for (KvDtype dtype : {KvDtype::kFloat16, KvDtype::kBfloat16, KvDtype::kFloat32, KvDtype::kFp8E4m3,
                        KvDtype::kInt8}) {
    EXPECT_EQ(*ParseKvDtype(DtypeName(dtype)), dtype);
    EXPECT_EQ(*KvDtypeFromValue(static_cast<uint32_t>(dtype)), dtype);
  }
  for (PositionalFormat positional : {PositionalFormat::kRopeApplied, PositionalFormat::kNope}) {
    EXPECT_EQ(*ParsePositionalFormat(PositionalFormatName(positional)), positional);
    EXPECT_EQ(*PositionalFormatFromValue(static_cast<uint32_t>(positional)), positional);
  }
  EXPECT_STREQ(KvKindName(KvKind::kMlaLatent), "mla");
  EXPECT_STREQ(DtypeName(KvDtype::kBfloat16), "bf16");
  EXPECT_STREQ(DtypeName(KvDtype::kFp8E4m3), "fp8_e4m3");
  EXPECT_STREQ(PositionalFormatName(PositionalFormat::kRopeApplied), "rope");
  EXPECT_STREQ(DtypeName(static_cast<KvDtype>(99)), "unknown");
}

TEST(KvLayoutNames, AliasesAreCaseInsensitive) {
  for (const char* name : {"bf16", "BF16", "bfloat16", "torch.bfloat16", "Torch.BFloat16"}) {
    EXPECT_EQ(*ParseKvDtype(name), KvDtype::kBfloat16) << name;
  }
  for (const char* name : {"fp16", "float16", "half", "torch.float16", "torch.half"}) {
    EXPECT_EQ(*ParseKvDtype(name), KvDtype::kFloat16) << name;
  }
  for (const char* name : {"fp32", "float32", "float", "torch.float32", "torch.float"}) {
    EXPECT_EQ(*ParseKvDtype(name), KvDtype::kFloat32) << name;
  }
  for (const char* name : {"fp8_e4m3", "fp8", "float8_e4m3fn", "torch.float8_e4m3fn"}) {
    EXPECT_EQ(*ParseKvDtype(name), KvDtype::kFp8E4m3) << name;
  }
  EXPECT_EQ(*ParseKvDtype("torch.int8"), KvDtype::kInt8);
  for (const char* name : {"mha", "MHA", "gqa", "mqa"}) {
    EXPECT_EQ(*ParseKvKind(name), KvKind::kMha) << name;
  }
  for (const char* name : {"mla", "mla_latent", "MLA"}) {
    EXPECT_EQ(*ParseKvKind(name), KvKind::kMlaLatent) << name;
  }
  EXPECT_EQ(*ParsePositionalFormat("rope_applied"), PositionalFormat::kRopeApplied);
  EXPECT_EQ(*ParsePositionalFormat("NoPE"), PositionalFormat::kNope);
}

TEST(KvLayoutNames, UnknownNamesListWhatIsAccepted) {
  using ::testing::HasSubstr;
  const absl::Status dtype = ParseKvDtype("float64").status();
  EXPECT_EQ(dtype.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dtype.message(), HasSubstr("unknown dtype 'float64'"));
  EXPECT_THAT(dtype.message(), HasSubstr("bf16 (bfloat16, torch.bfloat16), fp32 ("));
  EXPECT_THAT(dtype.message(), HasSubstr("int8 (torch.int8)"));
  // fp8 formats other than e4m3 are not silently taken for it.
  EXPECT_EQ(ParseKvDtype("fp8_e5m2").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseKvDtype("").status().code(), absl::StatusCode::kInvalidArgument);
  const absl::Status kind = ParseKvKind("gqa2").status();
  EXPECT_EQ(kind.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(kind.message(), HasSubstr("mha (gqa, mqa), mla (mla_latent)"));
  const absl::Status positional = ParsePositionalFormat("alibi").status();
  EXPECT_EQ(positional.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(positional.message(), HasSubstr("rope (rope_applied), nope"));
}

TEST(KvLayoutNames, UnknownValuesAreRejected) {
  EXPECT_EQ(KvKindFromValue(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KvKindFromValue(3).status().code(), absl::StatusCode::kInvalidArgument);
  // Not truncated to the enum's uint8_t: 257 is not 1.
  EXPECT_EQ(KvDtypeFromValue(257).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(KvDtypeFromValue(6).status().message()),
              ::testing::HasSubstr("1 = fp16, 2 = bf16, 3 = fp32, 4 = fp8_e4m3, 5 = int8"));
  EXPECT_EQ(PositionalFormatFromValue(0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KvLayout, DebugStringUsesCanonicalNames) {
  KvLayout layout = Llama8B();
  layout.kind = KvKind::kMlaLatent;
  layout.positional = PositionalFormat::kNope;
  EXPECT_EQ(layout.DebugString(),
            "model=meta-llama/Llama-3.1-8B kind=mla layers=32 kv_heads=8 head_dim=128 dtype=bf16 "
            "tp=0/1 pos=nope chunk=256");
}

}  // namespace
}  // namespace strata

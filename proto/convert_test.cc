#include "proto/convert.h"

#include <numeric>
#include <vector>

#include "core/key_hasher.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

KvLayout Layout(uint32_t layers) {
  KvLayout layout;
  layout.model_id = "convert-test";
  layout.num_layers = layers;
  layout.num_kv_heads = 2;
  layout.head_dim = 16;
  layout.dtype = KvDtype::kFloat16;
  layout.chunk_tokens = 16;
  return layout;
}

std::vector<ChunkKey> Chain(const KvLayout& layout, HashAlgorithm algorithm, size_t chunks) {
  std::vector<uint32_t> tokens(chunks * layout.chunk_tokens);
  std::iota(tokens.begin(), tokens.end(), 7);
  return KeyHasher::Create(layout, {.algorithm = algorithm})->PrefixKeys(tokens, {});
}

TEST(KeyChainTest, RoundTripsEveryKeyInOrder) {
  for (HashAlgorithm algorithm : {HashAlgorithm::kXxh3_128, HashAlgorithm::kSha256Cbor}) {
    const std::vector<ChunkKey> keys = Chain(Layout(2), algorithm, 5);
    v1::KeyChain proto;
    ASSERT_TRUE(ToProto(keys, proto).ok());
    EXPECT_EQ(proto.digests().size(), 5 * DigestSizeBytes(algorithm));
    absl::StatusOr<std::vector<ChunkKey>> back = FromProto(proto, 5);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, keys);
  }
}

TEST(KeyChainTest, EmptyChainIsNoKeys) {
  v1::KeyChain proto;
  ASSERT_TRUE(ToProto({}, proto).ok());
  absl::StatusOr<std::vector<ChunkKey>> back = FromProto(proto, 0);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->empty());
}

TEST(KeyChainTest, RefusesKeysThatCannotShareAChain) {
  std::vector<ChunkKey> keys = Chain(Layout(2), HashAlgorithm::kXxh3_128, 2);
  keys.push_back(Chain(Layout(3), HashAlgorithm::kXxh3_128, 1)[0]);  // another layout
  v1::KeyChain proto;
  EXPECT_EQ(ToProto(keys, proto).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(proto.digests().empty());
  keys.back() = Chain(Layout(2), HashAlgorithm::kSha256Cbor, 1)[0];  // another algorithm
  EXPECT_EQ(ToProto(keys, proto).code(), absl::StatusCode::kInvalidArgument);
}

TEST(KeyChainTest, RefusesMalformedChains) {
  const std::vector<ChunkKey> keys = Chain(Layout(2), HashAlgorithm::kXxh3_128, 3);
  v1::KeyChain proto;
  ASSERT_TRUE(ToProto(keys, proto).ok());
  EXPECT_EQ(FromProto(proto, 2).status().code(), absl::StatusCode::kInvalidArgument)
      << "more keys than allowed";
  v1::KeyChain torn = proto;
  torn.mutable_digests()->pop_back();
  EXPECT_EQ(FromProto(torn, 3).status().code(), absl::StatusCode::kInvalidArgument);
  v1::KeyChain unknown = proto;
  unknown.set_algorithm(v1::HASH_ALGORITHM_UNSPECIFIED);
  EXPECT_EQ(FromProto(unknown, 3).status().code(), absl::StatusCode::kInvalidArgument);
  unknown = proto;
  unknown.set_namespace_(v1::KEY_NAMESPACE_UNSPECIFIED);
  EXPECT_EQ(FromProto(unknown, 3).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata

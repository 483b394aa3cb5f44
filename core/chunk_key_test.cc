#include "core/chunk_key.h"

#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

ChunkKey MakeKey(HashAlgorithm algorithm, uint8_t fill, uint64_t fingerprint = 7,
                 KeyNamespace ns = KeyNamespace::kPrefix) {
  std::vector<uint8_t> digest(DigestSizeBytes(algorithm), fill);
  return ChunkKey::FromParts(algorithm, ns, fingerprint, digest);
}

TEST(ChunkKey, DefaultIsEmpty) {
  EXPECT_TRUE(ChunkKey().empty());
  EXPECT_FALSE(MakeKey(HashAlgorithm::kXxh3_128, 1).empty());
}

TEST(ChunkKey, ComparesAllParts) {
  const ChunkKey a = MakeKey(HashAlgorithm::kXxh3_128, 1);
  EXPECT_EQ(a, MakeKey(HashAlgorithm::kXxh3_128, 1));
  EXPECT_NE(a, MakeKey(HashAlgorithm::kXxh3_128, 2));
  EXPECT_NE(a, MakeKey(HashAlgorithm::kXxh3_128, 1, 8));
  EXPECT_NE(a, MakeKey(HashAlgorithm::kXxh3_128, 1, 7, KeyNamespace::kPositionIndependent));
  EXPECT_NE(a, MakeKey(HashAlgorithm::kSha256Cbor, 1));
  EXPECT_LT(MakeKey(HashAlgorithm::kXxh3_128, 1), MakeKey(HashAlgorithm::kXxh3_128, 2));
}

TEST(ChunkKey, HashesIntoAbslContainers) {
  absl::flat_hash_set<ChunkKey> set;
  for (int i = 0; i < 100; ++i) set.insert(MakeKey(HashAlgorithm::kXxh3_128, i));
  EXPECT_EQ(set.size(), 100u);
  EXPECT_TRUE(set.contains(MakeKey(HashAlgorithm::kXxh3_128, 42)));
}

TEST(ChunkKey, StringRoundTrip) {
  for (HashAlgorithm algorithm : {HashAlgorithm::kXxh3_128, HashAlgorithm::kSha256Cbor}) {
    for (KeyNamespace ns : {KeyNamespace::kPrefix, KeyNamespace::kPositionIndependent}) {
      const ChunkKey key = MakeKey(algorithm, 0xab, 0x0123456789abcdefull, ns);
      absl::StatusOr<ChunkKey> parsed = ChunkKey::Parse(key.ToString());
      ASSERT_TRUE(parsed.ok()) << parsed.status();
      EXPECT_EQ(*parsed, key);
    }
  }
  EXPECT_EQ(MakeKey(HashAlgorithm::kXxh3_128, 0xab, 0x0123456789abcdefull).ToString(),
            "xxh3_128:prefix:0123456789abcdef:abababababababababababababababab");
}

TEST(ChunkKey, ParseRejectsMalformedText) {
  for (const char* text : {"", "xxh3_128", "md5:prefix:0123456789abcdef:00",
                           "xxh3_128:chain:0123456789abcdef:abababababababababababababababab",
                           "xxh3_128:prefix:0123:abababababababababababababababab",
                           "xxh3_128:prefix:0123456789abcdef:abab",
                           "xxh3_128:prefix:0123456789abcdef:zzababababababababababababababab",
                           "sha256_cbor:prefix:0123456789abcdef:abababababababababababababababab",
                           "xxh3_128:prefix:0123456789abcdef:ab:ab"}) {
    EXPECT_EQ(ChunkKey::Parse(text).status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
}

TEST(ChunkKey, EventIdIsLastEightBytesBigEndian) {
  std::vector<uint8_t> digest(32, 0);
  for (int i = 0; i < 8; ++i) digest[24 + i] = static_cast<uint8_t>(i + 1);
  const ChunkKey key =
      ChunkKey::FromParts(HashAlgorithm::kSha256Cbor, KeyNamespace::kPrefix, 0, digest);
  EXPECT_EQ(key.EventId(), 0x0102030405060708ull);
}

TEST(HashAlgorithm, NamesRoundTrip) {
  EXPECT_EQ(*ParseHashAlgorithm("xxh3_128"), HashAlgorithm::kXxh3_128);
  EXPECT_EQ(*ParseHashAlgorithm("sha256_cbor"), HashAlgorithm::kSha256Cbor);
  EXPECT_EQ(ParseHashAlgorithm("sha256").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_STREQ(HashAlgorithmName(HashAlgorithm::kSha256Cbor), "sha256_cbor");
}

}  // namespace
}  // namespace strata

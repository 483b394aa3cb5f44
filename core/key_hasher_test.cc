#include "core/key_hasher.h"

#include <sys/wait.h>
#include <unistd.h>

#include <numeric>
#include <string>
#include <vector>

#include "core/hex.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

KvLayout SmallLayout(uint32_t chunk_tokens) {
  KvLayout layout;
  layout.model_id = "test-model";
  layout.num_layers = 4;
  layout.num_kv_heads = 2;
  layout.head_dim = 64;
  layout.dtype = KvDtype::kFloat16;
  layout.chunk_tokens = chunk_tokens;
  return layout;
}

KeyHasher MakeHasher(HashAlgorithm algorithm, uint32_t chunk_tokens = 16, std::string seed = "0") {
  return *KeyHasher::Create(SmallLayout(chunk_tokens), {.algorithm = algorithm, .seed = seed});
}

std::vector<uint32_t> Iota(uint32_t n, uint32_t start = 0) {
  std::vector<uint32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

std::string Hex(std::span<const uint8_t> bytes) { return HexEncode(bytes); }

// ALGORITHMS.md section 6: vLLM's sha256_cbor block hashes, PYTHONHASHSEED="0", block size 16.
TEST(KeyHasherSha256Cbor, MatchesVllmVectorsBitExactly) {
  const KeyHasher hasher = MakeHasher(HashAlgorithm::kSha256Cbor);
  EXPECT_EQ(Hex(hasher.RootDigest("")),
            "4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e");
  const std::vector<ChunkKey> keys = hasher.PrefixKeys(Iota(32), {});
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(Hex(keys[0].digest()),
            "d830de3d42c00f25a2949b5d12d98642664a44872c1614c5b0147556276afc9c");
  EXPECT_EQ(keys[0].EventId(), 12687895063098490012ull);
  EXPECT_EQ(Hex(keys[1].digest()),
            "fedd9e4abebebbe6f6cf96b682f08d316063fe2f22a5c552192dd62904fcccac");
  EXPECT_EQ(keys[0].algorithm(), HashAlgorithm::kSha256Cbor);
  EXPECT_EQ(keys[0].layout_fingerprint(), hasher.layout_fingerprint());
}

TEST(KeyHasherSha256Cbor, SeedChangesEveryKey) {
  const auto a = MakeHasher(HashAlgorithm::kSha256Cbor, 16, "0").PrefixKeys(Iota(16), {});
  const auto b = MakeHasher(HashAlgorithm::kSha256Cbor, 16, "1").PrefixKeys(Iota(16), {});
  EXPECT_NE(a[0], b[0]);
}

class KeyHasherTest : public ::testing::TestWithParam<HashAlgorithm> {};

TEST_P(KeyHasherTest, ChainIsAPrefixProperty) {
  const KeyHasher hasher = MakeHasher(GetParam(), 256);
  std::vector<uint32_t> tokens = Iota(1024, 1000);
  const auto full = hasher.PrefixKeys(tokens, {});
  ASSERT_EQ(full.size(), 4u);
  // A prompt sharing the first 512 tokens shares exactly the first two keys.
  std::vector<uint32_t> other = tokens;
  other[600] = 7;
  const auto diverged = hasher.PrefixKeys(other, {});
  EXPECT_EQ(diverged[0], full[0]);
  EXPECT_EQ(diverged[1], full[1]);
  EXPECT_NE(diverged[2], full[2]);
  EXPECT_NE(diverged[3], full[3]);  // the chain carries the difference forward
  // Incremental construction equals batch construction.
  ChunkKey parent;
  for (size_t i = 0; i < full.size(); ++i) {
    parent = hasher.NextPrefixKey(parent, std::span(tokens).subspan(i * 256, 256), {});
    EXPECT_EQ(parent, full[i]);
  }
}

TEST_P(KeyHasherTest, SameTokensAtDifferentPositionsGetDifferentPrefixKeys) {
  const KeyHasher hasher = MakeHasher(GetParam(), 16);
  std::vector<uint32_t> tokens(32, 5);  // both chunks hold the same tokens
  const auto keys = hasher.PrefixKeys(tokens, {});
  EXPECT_NE(keys[0], keys[1]);
}

TEST_P(KeyHasherTest, PartialLastChunk) {
  const KeyHasher hasher = MakeHasher(GetParam(), 16);
  const std::vector<uint32_t> tokens = Iota(40);
  EXPECT_EQ(hasher.PrefixKeys(tokens, {}).size(), 2u);
  const auto with_partial = hasher.PrefixKeys(tokens, {}, PartialChunk::kInclude);
  ASSERT_EQ(with_partial.size(), 3u);
  // The partial key covers its real token count: 8 tokens differ from the first 8 of a full
  // chunk, and from a different partial length.
  const auto longer = hasher.PrefixKeys(Iota(48), {});
  EXPECT_NE(with_partial[2], longer[2]);
  const auto shorter = hasher.PrefixKeys(Iota(39), {}, PartialChunk::kInclude);
  EXPECT_NE(with_partial[2], shorter[2]);
  EXPECT_EQ(with_partial[1], shorter[1]);
  // Exact multiples produce no partial chunk.
  EXPECT_EQ(hasher.PrefixKeys(Iota(32), {}, PartialChunk::kInclude).size(), 2u);
  EXPECT_TRUE(hasher.PrefixKeys({}, {}, PartialChunk::kInclude).empty());
}

TEST_P(KeyHasherTest, TenantSaltSeparatesTenants) {
  const KeyHasher hasher = MakeHasher(GetParam(), 16);
  const auto tokens = Iota(48);
  const auto shared = hasher.PrefixKeys(tokens, {});
  const auto alice = hasher.PrefixKeys(tokens, {.tenant_salt = "alice"});
  const auto bob = hasher.PrefixKeys(tokens, {.tenant_salt = "bob"});
  for (size_t i = 0; i < shared.size(); ++i) {
    EXPECT_NE(alice[i], shared[i]);
    EXPECT_NE(alice[i], bob[i]);
  }
  EXPECT_EQ(alice, hasher.PrefixKeys(tokens, {.tenant_salt = "alice"}));
}

TEST_P(KeyHasherTest, LoraSeparatesAdapters) {
  const KeyHasher hasher = MakeHasher(GetParam(), 16);
  const auto tokens = Iota(16);
  EXPECT_NE(hasher.PrefixKeys(tokens, {.lora_name = "sql"})[0], hasher.PrefixKeys(tokens, {})[0]);
}

TEST_P(KeyHasherTest, LayoutSeparatesModelsAndShards) {
  const KeyHasher a = MakeHasher(GetParam(), 16);
  KvLayout other_rank = SmallLayout(16);
  other_rank.tp_world_size = 2;
  other_rank.tp_rank = 1;
  const KeyHasher b = *KeyHasher::Create(other_rank, {.algorithm = GetParam()});
  EXPECT_NE(a.PrefixKeys(Iota(16), {})[0], b.PrefixKeys(Iota(16), {})[0]);
  EXPECT_NE(a.PicKey(Iota(16), 0), b.PicKey(Iota(16), 0));
}

TEST_P(KeyHasherTest, PicKeysIgnorePositionButNotVariant) {
  const KeyHasher hasher = MakeHasher(GetParam(), 16);
  const auto canonical = CanonicalPicTokens(Iota(20, 500), 16, 0);
  const ChunkKey key = hasher.PicKey(canonical, 0);
  EXPECT_EQ(key.key_namespace(), KeyNamespace::kPositionIndependent);
  EXPECT_EQ(key, hasher.PicKey(canonical, 0));
  EXPECT_NE(key, hasher.PicKey(canonical, 3));
  // Never equal to a prefix key over the same tokens (separate namespaces).
  EXPECT_NE(key, hasher.NextPrefixKey(ChunkKey(), canonical, {}));
}

TEST_P(KeyHasherTest, PicKeysAreSaltedPerTenant) {
  const KeyHasher hasher = MakeHasher(GetParam(), 16);
  const auto canonical = CanonicalPicTokens(Iota(20, 500), 16, 0);
  const ChunkKey shared = hasher.PicKey(canonical, 0);
  const ChunkKey a = hasher.PicKey(canonical, 0, "tenant-a");
  EXPECT_EQ(hasher.PicKey(canonical, 0, ""), shared) << "an empty salt is the shared namespace";
  EXPECT_NE(a, shared);
  EXPECT_EQ(a, hasher.PicKey(canonical, 0, "tenant-a"));
  EXPECT_NE(a, hasher.PicKey(canonical, 0, "tenant-b"));
  EXPECT_NE(a, hasher.PicKey(canonical, 1, "tenant-a"));
  EXPECT_EQ(a.key_namespace(), KeyNamespace::kPositionIndependent);
  // The salt is length-delimited: moving bytes between the salt and the tokens changes the key.
  EXPECT_NE(hasher.PicKey(canonical, 0, "ab"), hasher.PicKey(canonical, 0, "a"));
}

TEST_P(KeyHasherTest, KeysAreIdenticalAcrossProcesses) {
  const KeyHasher hasher = MakeHasher(GetParam(), 256);
  const auto tokens = Iota(700, 3);
  const auto keys = hasher.PrefixKeys(tokens, {.tenant_salt = "t"}, PartialChunk::kInclude);
  std::string expected;
  for (const auto& k : keys) expected += k.ToString() + "\n";

  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // A fresh hasher in another process: nothing may depend on process state.
    close(fds[0]);
    const KeyHasher fresh = MakeHasher(GetParam(), 256);
    std::string text;
    for (const auto& k : fresh.PrefixKeys(tokens, {.tenant_salt = "t"}, PartialChunk::kInclude)) {
      text += k.ToString() + "\n";
    }
    const ssize_t n = write(fds[1], text.data(), text.size());
    _exit(n == static_cast<ssize_t>(text.size()) ? 0 : 1);
  }
  close(fds[1]);
  std::string received;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) received.append(buf, n);
  close(fds[0]);
  int wstatus = 0;
  waitpid(child, &wstatus, 0);
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
  EXPECT_EQ(received, expected);
}

INSTANTIATE_TEST_SUITE_P(BothAlgorithms, KeyHasherTest,
                         ::testing::Values(HashAlgorithm::kXxh3_128, HashAlgorithm::kSha256Cbor),
                         [](const auto& info) {
                           return std::string(HashAlgorithmName(info.param));
                         });

TEST(KeyHasherXxh3, KeysArePinnedAcrossRuns) {
  // Guards the key protocol across releases: a change here orphans every cached chunk.
  const KeyHasher hasher = MakeHasher(HashAlgorithm::kXxh3_128, 16);
  const auto keys = hasher.PrefixKeys(Iota(32), {});
  EXPECT_EQ(keys[1].ToString(),
            "xxh3_128:prefix:a5258dd97c60ccca:c44e5819d9e5d7d888226da253423fd4");
  EXPECT_EQ(hasher.PicKey(Iota(16), 0).ToString(),
            "xxh3_128:pic:a5258dd97c60ccca:dcfe8032dabefaad8ea97c94be4645da");
  EXPECT_EQ(hasher.PicKey(Iota(16), 0, "tenant-a").ToString(),
            "xxh3_128:pic:a5258dd97c60ccca:8d6fe328f8e6cae690394899016449fd");
}

TEST(CanonicalPicTokens, LeadingPadToBlockBoundary) {
  EXPECT_EQ(CanonicalPicTokens(Iota(3, 10), 4, 0), (std::vector<uint32_t>{0, 10, 11, 12}));
  EXPECT_EQ(CanonicalPicTokens(Iota(4, 10), 4, 0), Iota(4, 10));
  for (uint32_t n = 1; n < 40; ++n) EXPECT_EQ(CanonicalPicTokens(Iota(n), 16, 9).size() % 16, 0u);
}

TEST(KeyHasher, CreateRejectsBadLayout) {
  KvLayout bad = SmallLayout(16);
  bad.num_kv_heads = 0;
  EXPECT_EQ(KeyHasher::Create(bad, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata

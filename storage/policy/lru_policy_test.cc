#include "storage/policy/lru_policy.h"

#include "gtest/gtest.h"

namespace strata::storage {
namespace {

PolicyChunkInfo Info(ChunkId id) { return {.id = id, .key_hash = id * 31, .size_bytes = 100}; }

TEST(LruPolicy, EvictsLeastRecentlyUsedFirst) {
  LruPolicy lru;
  for (ChunkId id = 1; id <= 4; ++id) lru.OnInsert(Info(id));
  lru.OnAccess(1);
  EXPECT_EQ(lru.PopVictim(), 2u);
  EXPECT_EQ(lru.PopVictim(), 3u);
  EXPECT_EQ(lru.PopVictim(), 4u);
  EXPECT_EQ(lru.PopVictim(), 1u);
  EXPECT_EQ(lru.PopVictim(), std::nullopt);
  EXPECT_EQ(lru.size(), 0u);
}

TEST(LruPolicy, NeverReturnsProtectedChunks) {
  LruPolicy lru;
  for (ChunkId id = 1; id <= 3; ++id) lru.OnInsert(Info(id));
  lru.SetEvictable(1, false);
  lru.SetEvictable(2, false);
  EXPECT_EQ(lru.PopVictim(), 3u);
  EXPECT_EQ(lru.PopVictim(), std::nullopt);
  EXPECT_EQ(lru.size(), 2u);
  lru.OnAccess(1);  // accesses to protected chunks do not make them evictable
  EXPECT_EQ(lru.PopVictim(), std::nullopt);
  lru.SetEvictable(2, true);
  lru.SetEvictable(1, true);
  EXPECT_EQ(lru.PopVictim(), 2u);
  EXPECT_EQ(lru.PopVictim(), 1u);
}

}  // namespace
}  // namespace strata::storage

#include "storage/device/device_pool.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/frame_io.h"
#include "gtest/gtest.h"
#include "storage/device/host_runtime.h"
#include "storage/device/testing/forked_child.h"
#include "tests/support/test_layout.h"

namespace strata::storage {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// A position-independent key (T0 holds PIC chunks), distinct for every id.
ChunkKey PicKey(uint64_t id) {
  uint8_t digest[16] = {};
  for (int i = 0; i < 8; ++i) digest[i] = static_cast<uint8_t>(id >> (8 * i));
  digest[15] = 0x7d;
  return ChunkKey::FromParts(HashAlgorithm::kXxh3_128, KeyNamespace::kPositionIndependent, 42,
                             digest);
}

KvLayout Layout() {
  return test_support::SmallLayout({.model_id = "pool-test", .head_dim = 32, .chunk_tokens = 64});
}

class DevicePoolTest : public ::testing::Test {
 protected:
  // A pool of `pages` pages of 16-token blocks of Layout(): 4 KiB per page and layer.
  std::unique_ptr<DevicePool> MakePool(uint32_t pages) {
    auto geometry = DevicePoolGeometryFor(Layout(), 16, pages);
    EXPECT_TRUE(geometry.ok()) << geometry.status();
    auto pool = DevicePool::Create(runtime_, {.geometry = *geometry, .name = "strata-test-t0"});
    EXPECT_TRUE(pool.ok()) << pool.status();
    return *std::move(pool);
  }

  // Reserves and commits `pages` pages for key `id`; returns its pages.
  std::vector<uint32_t> Store(DevicePool& pool, uint64_t id, uint32_t pages, uint64_t owner = 1) {
    auto reserved = pool.Reserve(PicKey(id), pages, owner);
    EXPECT_TRUE(reserved.ok()) << reserved.status();
    if (!reserved.ok()) return {};
    EXPECT_EQ(reserved->outcome, PoolReserveOutcome::kReserved);
    EXPECT_TRUE(pool.Commit(reserved->id).ok());
    return reserved->pages;
  }

  HostRuntime runtime_;
};

TEST_F(DevicePoolTest, GeometryIsAPagedKvCachePerLayer) {
  auto geometry = DevicePoolGeometryFor(Layout(), 16, 10);
  ASSERT_TRUE(geometry.ok()) << geometry.status();
  // One layer of a 16-token block: 2 planes x 16 tokens x 2 heads x 32 dims x 2 bytes.
  EXPECT_EQ(geometry->page_bytes, 4096u);
  EXPECT_EQ(geometry->num_layers, 2u);
  EXPECT_EQ(geometry->layer_stride_bytes(), 40960u);
  EXPECT_EQ(geometry->total_bytes(), 81920u);
  EXPECT_EQ(geometry->offset(1, 3), 40960u + 3 * 4096u);

  EXPECT_EQ(DevicePoolGeometryFor(Layout(), 48, 10).status().code(),
            absl::StatusCode::kInvalidArgument);  // 48 does not divide 64
  EXPECT_EQ(DevicePoolGeometryFor(Layout(), 0, 10).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DevicePoolGeometryFor(Layout(), 16, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  KvLayout broken = Layout();
  broken.num_layers = 0;
  EXPECT_EQ(DevicePoolGeometryFor(broken, 16, 10).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      (DevicePoolGeometry{.num_layers = 1, .num_pages = 4, .page_bytes = 100}).Validate().code(),
      absl::StatusCode::kInvalidArgument);  // not a multiple of 256
  EXPECT_EQ(
      (DevicePoolGeometry{.num_layers = 1u << 20, .num_pages = 1u << 20, .page_bytes = 1u << 20})
          .Validate()
          .code(),
      absl::StatusCode::kInvalidArgument);  // 2^60 bytes
  EXPECT_EQ(DevicePool::Create(runtime_, {.geometry = {}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(DevicePoolTest, ACommittedChunksPagesAreWhatAnEngineMappingReads) {
  auto pool = MakePool(8);
  auto reserved = pool->Reserve(PicKey(1), 3, 1);
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  ASSERT_EQ(reserved->pages.size(), 3u);
  EXPECT_EQ(pool->Lookup(std::vector<ChunkKey>{PicKey(1)}), 0u);  // not yet committed
  EXPECT_FALSE(pool->Acquire(PicKey(1), 2).has_value());
  EXPECT_EQ(pool->Reserve(PicKey(1), 3, 2)->outcome, PoolReserveOutcome::kInProgress);
  const DevicePoolGeometry& geometry = pool->geometry();
  for (uint32_t layer = 0; layer < geometry.num_layers; ++layer) {
    for (size_t i = 0; i < reserved->pages.size(); ++i) {
      std::memset(pool->PageData(layer, reserved->pages[i]), static_cast<int>(16 * layer + i + 1),
                  geometry.page_bytes);
    }
  }
  ASSERT_TRUE(pool->Commit(reserved->id).ok());
  EXPECT_EQ(pool->Reserve(PicKey(1), 3, 2)->outcome, PoolReserveOutcome::kAlreadyPresent);
  EXPECT_EQ(pool->Lookup(std::vector<ChunkKey>{PicKey(1), PicKey(2)}), 1u);

  // An engine maps the pool and finds each page at the geometry's offset.
  auto mapped = runtime_.OpenShared(pool->shared_handle());
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  auto ref = pool->Acquire(PicKey(1), 2);
  ASSERT_TRUE(ref.has_value());
  EXPECT_EQ(ref->pages, reserved->pages);
  const auto* base = static_cast<const unsigned char*>((*mapped)->data());
  for (uint32_t layer = 0; layer < geometry.num_layers; ++layer) {
    for (size_t i = 0; i < ref->pages.size(); ++i) {
      const unsigned char* page = base + geometry.offset(layer, ref->pages[i]);
      EXPECT_EQ(page[0], 16 * layer + i + 1);
      EXPECT_EQ(page[geometry.page_bytes - 1], 16 * layer + i + 1);
    }
  }
  const DevicePoolStats stats = pool->Stats();
  EXPECT_EQ(stats.capacity_pages, 8u);
  EXPECT_EQ(stats.free_pages, 5u);
  EXPECT_EQ(stats.committed_pages, 3u);
  EXPECT_EQ(stats.referenced_pages, 3u);
  EXPECT_EQ(stats.chunks, 1u);
  EXPECT_EQ(stats.references, 1u);
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_EQ(stats.commits, 1u);
  EXPECT_TRUE(pool->Release(ref->ref_id).ok());
  EXPECT_EQ(pool->Release(ref->ref_id).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(pool->CheckConsistency().ok()) << pool->CheckConsistency();
}

TEST_F(DevicePoolTest, AdmissionRefusesWhatFreeAndEvictablePagesCannotCoverAndEvictsNothing) {
  auto pool = MakePool(8);
  Store(*pool, 1, 4);
  Store(*pool, 2, 2);
  auto held = pool->Acquire(PicKey(1), 1);  // 4 pages referenced: not evictable
  ASSERT_TRUE(held.has_value());

  // 2 free + 2 evictable < 5.
  const absl::Status refused = pool->Reserve(PicKey(3), 5, 1).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.ToString().find("2 free and 2 evictable (4 referenced"), std::string::npos)
      << refused;
  EXPECT_EQ(pool->Lookup(std::vector<ChunkKey>{PicKey(2)}), 1u);  // nothing was evicted
  EXPECT_EQ(pool->Stats().admission_rejects, 1u);
  EXPECT_EQ(pool->Stats().evictions, 0u);

  // 4 fit by evicting chunk 2, never the referenced chunk 1.
  auto admitted = pool->Reserve(PicKey(3), 4, 1);
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_EQ(pool->Lookup(std::vector<ChunkKey>{PicKey(2)}), 0u);
  EXPECT_EQ(pool->Lookup(std::vector<ChunkKey>{PicKey(1)}), 1u);
  EXPECT_EQ(pool->Stats().evictions, 1u);
  EXPECT_EQ(pool->Stats().evicted_pages, 2u);
  for (uint32_t page : admitted->pages) {
    EXPECT_EQ(std::count(held->pages.begin(), held->pages.end(), page), 0) << page;
  }
  EXPECT_TRUE(pool->CheckConsistency().ok()) << pool->CheckConsistency();

  EXPECT_EQ(pool->Reserve(ChunkKey(), 1, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->Reserve(PicKey(9), 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->Reserve(PicKey(9), 9, 1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(DevicePoolTest, EvictionTakesTheLeastRecentlyUsedUnreferencedChunk) {
  auto pool = MakePool(6);
  Store(*pool, 1, 2);
  Store(*pool, 2, 2);
  Store(*pool, 3, 2);
  // Chunk 1 is read (and released): chunk 2 is now the least recently used.
  auto ref = pool->Acquire(PicKey(1), 1);
  ASSERT_TRUE(ref.has_value());
  ASSERT_TRUE(pool->Release(ref->ref_id).ok());
  Store(*pool, 4, 2);
  EXPECT_EQ(pool->Lookup(std::vector<ChunkKey>{PicKey(2)}), 0u);
  EXPECT_EQ(pool->Lookup(std::vector<ChunkKey>{PicKey(1)}), 1u);
  EXPECT_EQ(pool->Lookup(std::vector<ChunkKey>{PicKey(3)}), 1u);
  Store(*pool, 5, 2);
  EXPECT_EQ(pool->Lookup(std::vector<ChunkKey>{PicKey(3)}), 0u);
  EXPECT_TRUE(pool->CheckConsistency().ok()) << pool->CheckConsistency();
}

// on_evictable hears of every chunk that becomes evictable (its commit, its last release) with
// the owner whose it was, and nothing else; an upkeep reference counts no hit or miss.
TEST_F(DevicePoolTest, EveryChunkThatBecomesEvictableIsToldOfWithItsOwner) {
  std::vector<std::pair<ChunkKey, uint64_t>> told;
  auto geometry = DevicePoolGeometryFor(Layout(), 16, 4);
  ASSERT_TRUE(geometry.ok());
  auto pool = DevicePool::Create(
      runtime_, {.geometry = *geometry,
                 .name = "strata-test-t0",
                 .on_evictable = [&](DevicePool&, const ChunkKey& key, uint64_t owner) {
                   told.emplace_back(key, owner);
                 }});
  ASSERT_TRUE(pool.ok()) << pool.status();
  Store(**pool, 1, 1, /*owner=*/5);
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0], std::make_pair(PicKey(1), uint64_t{5}));

  auto a = (*pool)->Acquire(PicKey(1), 6);
  auto b = (*pool)->Acquire(PicKey(1), 7, PoolUse::kUpkeep);
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_FALSE((*pool)->Acquire(PicKey(2), 7, PoolUse::kUpkeep).has_value());
  EXPECT_EQ((*pool)->Stats().hits, 1u) << "the upkeep reference is not a hit";
  EXPECT_EQ((*pool)->Stats().misses, 0u) << "nor its miss a miss";
  ASSERT_TRUE((*pool)->Release(a->ref_id).ok());
  EXPECT_EQ(told.size(), 1u) << "still referenced";
  ASSERT_TRUE((*pool)->Release(b->ref_id).ok());
  ASSERT_EQ(told.size(), 2u);
  EXPECT_EQ(told[1], std::make_pair(PicKey(1), uint64_t{7}));

  // A removed chunk, an aborted reservation: never evictable.
  auto held = (*pool)->Acquire(PicKey(1), 6);
  ASSERT_TRUE((*pool)->Remove(PicKey(1)));
  ASSERT_TRUE((*pool)->Release(held->ref_id).ok());
  auto aborted = (*pool)->Reserve(PicKey(3), 1, 5);
  ASSERT_TRUE(aborted.ok());
  (*pool)->Abort(aborted->id);
  EXPECT_EQ(told.size(), 2u);
}

// A thinned chunk (kept blocks only) keeps each page's position, which every reference returns;
// it is evicted like any chunk but never handed to on_evict or on_evictable: its pages hold no
// chunk of the layout that a tier below could store.
TEST_F(DevicePoolTest, AThinnedChunksPagesKeepTheirPositionsAndAreNeverDemoted) {
  std::vector<ChunkKey> evicted, evictable;
  auto geometry = DevicePoolGeometryFor(Layout(), 16, 4);
  ASSERT_TRUE(geometry.ok());
  auto created = DevicePool::Create(
      runtime_, {.geometry = *geometry,
                 .name = "strata-test-t0",
                 .on_evict = [&](const DevicePool&, const ChunkKey& key,
                                 std::span<const uint32_t>) { evicted.push_back(key); },
                 .on_evictable = [&](DevicePool&, const ChunkKey& key,
                                     uint64_t) { evictable.push_back(key); }});
  ASSERT_TRUE(created.ok()) << created.status();
  DevicePool& pool = **created;

  const std::vector<uint32_t> positions = {0, 48};
  auto thinned = pool.Reserve(PicKey(1), 2, 1, positions);
  ASSERT_TRUE(thinned.ok()) << thinned.status();
  ASSERT_TRUE(pool.Commit(thinned->id).ok());
  Store(pool, 2, 2);
  EXPECT_EQ(evictable, std::vector<ChunkKey>{PicKey(2)}) << "only the whole chunk";

  auto ref = pool.Acquire(PicKey(1), 3);
  ASSERT_TRUE(ref.has_value());
  EXPECT_EQ(ref->pages, thinned->pages);
  EXPECT_EQ(ref->positions, positions);
  auto whole = pool.Acquire(PicKey(2), 3);
  ASSERT_TRUE(whole.has_value());
  EXPECT_TRUE(whole->positions.empty());
  ASSERT_TRUE(pool.Release(ref->ref_id).ok());
  ASSERT_TRUE(pool.Release(whole->ref_id).ok());
  EXPECT_EQ(evictable.size(), 2u) << "the thinned chunk's release is not told either";

  // Both are evicted for a chunk of 4 pages (the thinned one first, least recently used); only
  // the whole one is handed over to be demoted.
  Store(pool, 3, 4);
  EXPECT_EQ(pool.Stats().evictions, 2u);
  EXPECT_EQ(evicted, std::vector<ChunkKey>{PicKey(2)});
  EXPECT_TRUE(pool.CheckConsistency().ok()) << pool.CheckConsistency();

  // Positions must be one per page, strictly ascending.
  const std::vector<uint32_t> short_list = {0};
  const std::vector<uint32_t> descending = {16, 0};
  const std::vector<uint32_t> repeated = {16, 16};
  for (const std::vector<uint32_t>* bad : {&short_list, &descending, &repeated}) {
    EXPECT_EQ(pool.Reserve(PicKey(4), 2, 1, *bad).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(pool.Stats().reservations, 0u);
}

TEST_F(DevicePoolTest, ARemovedChunksPagesAreFreedAtItsLastRelease) {
  auto pool = MakePool(4);
  const std::vector<uint32_t> pages = Store(*pool, 1, 2);
  auto first = pool->Acquire(PicKey(1), 1);
  auto second = pool->Acquire(PicKey(1), 2);
  ASSERT_TRUE(first.has_value() && second.has_value());
  EXPECT_TRUE(pool->Remove(PicKey(1)));
  EXPECT_FALSE(pool->Remove(PicKey(1)));
  EXPECT_EQ(pool->Lookup(std::vector<ChunkKey>{PicKey(1)}), 0u);
  EXPECT_EQ(pool->Stats().pending_free_pages, 2u);
  EXPECT_EQ(pool->Stats().free_pages, 2u);

  // The key can be stored again at once, in other pages, while the old ones are read.
  const std::vector<uint32_t> again = Store(*pool, 1, 2);
  for (uint32_t page : again) EXPECT_EQ(std::count(pages.begin(), pages.end(), page), 0);
  // No room is left: 2 pages wait for their readers, 2 are the new chunk's (evictable).
  EXPECT_EQ(pool->Reserve(PicKey(2), 3, 1).status().code(), absl::StatusCode::kResourceExhausted);

  ASSERT_TRUE(pool->Release(first->ref_id).ok());
  EXPECT_EQ(pool->Stats().pending_free_pages, 2u);
  ASSERT_TRUE(pool->Release(second->ref_id).ok());
  EXPECT_EQ(pool->Stats().pending_free_pages, 0u);
  EXPECT_EQ(pool->Stats().free_pages, 2u);
  EXPECT_EQ(pool->Stats().removed, 1u);
  EXPECT_TRUE(pool->CheckConsistency().ok()) << pool->CheckConsistency();
}

TEST_F(DevicePoolTest, ADeadOwnersReferencesAndReservationsAreReturned) {
  auto pool = MakePool(8);
  Store(*pool, 1, 2);
  Store(*pool, 2, 2);
  constexpr uint64_t kDead = 7;
  ASSERT_TRUE(pool->Acquire(PicKey(1), kDead).has_value());
  ASSERT_TRUE(pool->Acquire(PicKey(1), kDead).has_value());
  ASSERT_TRUE(pool->Acquire(PicKey(2), kDead).has_value());
  auto survivor = pool->Acquire(PicKey(2), 8);
  ASSERT_TRUE(survivor.has_value());
  auto open = pool->Reserve(PicKey(3), 3, kDead);
  ASSERT_TRUE(open.ok());
  EXPECT_EQ(pool->Stats().free_pages, 1u);

  EXPECT_EQ(pool->ReleaseOwner(kDead), 3u);
  EXPECT_EQ(pool->AbortOwner(kDead), 1u);
  EXPECT_EQ(pool->ReleaseOwner(kDead), 0u);
  EXPECT_EQ(pool->Commit(open->id).code(), absl::StatusCode::kNotFound);
  const DevicePoolStats stats = pool->Stats();
  EXPECT_EQ(stats.free_pages, 4u);
  EXPECT_EQ(stats.references, 1u);
  EXPECT_EQ(stats.referenced_pages, 2u);  // chunk 2, still read by owner 8
  EXPECT_EQ(stats.reservations, 0u);
  // Chunk 3 can be reserved again; chunk 1 is evictable, chunk 2 is not.
  auto again = pool->Reserve(PicKey(3), 6, 1);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(pool->Lookup(std::vector<ChunkKey>{PicKey(1)}), 0u);
  EXPECT_EQ(pool->Lookup(std::vector<ChunkKey>{PicKey(2)}), 1u);
  EXPECT_TRUE(pool->CheckConsistency().ok()) << pool->CheckConsistency();
}

// Two engine processes map one pool and read the same committed pages (MEPIC's shared canonical
// pages), each writing only a page of its own.
TEST_F(DevicePoolTest, TwoProcessesShareOnePageSet) {
  auto pool = MakePool(8);
  const DevicePoolGeometry geometry = pool->geometry();
  auto shared = pool->Reserve(PicKey(1), 3, 1);
  ASSERT_TRUE(shared.ok());
  for (uint32_t layer = 0; layer < geometry.num_layers; ++layer) {
    for (uint32_t page : shared->pages) {
      std::memset(pool->PageData(layer, page), static_cast<int>(0x40 + 8 * layer + page),
                  geometry.page_bytes);
    }
  }
  ASSERT_TRUE(pool->Commit(shared->id).ok());

  auto engine = [geometry](int socket_fd) {
    HostRuntime runtime;
    auto frame = RecvFrame(socket_fd, milliseconds(10000));
    if (!frame.ok() || frame->passed_fds.size() != 1 || frame->payload.size() != 4 * 5) return 2;
    uint32_t words[5];  // three shared pages, the engine's own page, its marker
    std::memcpy(words, frame->payload.data(), sizeof(words));
    SharedMemoryHandle handle;
    handle.backend = "host";
    handle.size_bytes = geometry.total_bytes();
    handle.fd = frame->passed_fds[0].get();
    auto mapped = runtime.OpenShared(handle);
    if (!mapped.ok()) return 3;
    auto* base = static_cast<unsigned char*>((*mapped)->data());
    for (uint32_t layer = 0; layer < geometry.num_layers; ++layer) {
      for (int i = 0; i < 3; ++i) {
        const unsigned char* page = base + geometry.offset(layer, words[i]);
        const auto expected = static_cast<unsigned char>(0x40 + 8 * layer + words[i]);
        for (uint64_t b = 0; b < geometry.page_bytes; ++b) {
          if (page[b] != expected) return 4;
        }
      }
      std::memset(base + geometry.offset(layer, words[3]), static_cast<int>(words[4]),
                  geometry.page_bytes);
    }
    return SendFrame(socket_fd, "done", milliseconds(10000)).ok() ? 0 : 5;
  };
  testing::ForkedChild first(engine);
  testing::ForkedChild second(engine);
  ASSERT_TRUE(first.started() && second.started());
  // Each engine's request references the shared chunk and owns one private page.
  struct Request {
    testing::ForkedChild* child;
    uint64_t owner;
    uint32_t marker;
    std::optional<PoolChunkRef> ref;
    PoolReservation own;
  };
  std::vector<Request> requests = {{&first, 11, 0xa1, {}, {}}, {&second, 12, 0xb2, {}, {}}};
  for (Request& request : requests) {
    request.ref = pool->Acquire(PicKey(1), request.owner);
    ASSERT_TRUE(request.ref.has_value());
    auto own = pool->Reserve(PicKey(100 + request.owner), 1, request.owner);
    ASSERT_TRUE(own.ok());
    request.own = *own;
    const uint32_t words[5] = {request.ref->pages[0], request.ref->pages[1], request.ref->pages[2],
                               request.own.pages[0], request.marker};
    const int pool_fd[] = {pool->shared_handle().fd};
    ASSERT_TRUE(SendFrame(request.child->socket(),
                          std::string_view(reinterpret_cast<const char*>(words), sizeof(words)),
                          milliseconds(10000), pool_fd)
                    .ok());
  }
  for (Request& request : requests) {
    auto done = RecvFrame(request.child->socket(), milliseconds(10000));
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_EQ(request.child->Wait(seconds(10)), 0);
    for (uint32_t layer = 0; layer < geometry.num_layers; ++layer) {
      const auto* page =
          reinterpret_cast<const unsigned char*>(pool->PageData(layer, request.own.pages[0]));
      EXPECT_EQ(page[0], request.marker);
      EXPECT_EQ(page[geometry.page_bytes - 1], request.marker);
    }
    EXPECT_EQ(pool->ReleaseOwner(request.owner), 1u);
    EXPECT_EQ(pool->AbortOwner(request.owner), 1u);
  }
  // The shared pages were only read: still what the daemon wrote.
  const auto* shared_page =
      reinterpret_cast<const unsigned char*>(pool->PageData(1, shared->pages[2]));
  EXPECT_EQ(shared_page[0], 0x40 + 8 + shared->pages[2]);
  EXPECT_EQ(pool->Stats().free_pages, 5u);
  EXPECT_TRUE(pool->CheckConsistency().ok()) << pool->CheckConsistency();
}

TEST_F(DevicePoolTest, ConcurrentReserveAcquireReleaseAndRemoveKeepEveryPageAccountedFor) {
  auto pool = MakePool(64);
  constexpr int kThreads = 4;
  constexpr int kOperations = 4000;
  std::atomic<uint64_t> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 random(1234 + t);
      const uint64_t owner = 100 + t;
      std::vector<uint64_t> held;
      for (int i = 0; i < kOperations; ++i) {
        const uint64_t id = random() % 48;
        switch (random() % 5) {
          case 0:
          case 1: {
            auto reserved = pool->Reserve(PicKey(id), 1 + random() % 6, owner);
            if (!reserved.ok()) {
              refused.fetch_add(1);
            } else if (reserved->outcome == PoolReserveOutcome::kReserved) {
              if (random() % 8 == 0) {
                pool->Abort(reserved->id);
              } else {
                ASSERT_TRUE(pool->Commit(reserved->id).ok());
              }
            }
            break;
          }
          case 2:
            if (auto ref = pool->Acquire(PicKey(id), owner)) held.push_back(ref->ref_id);
            break;
          case 3:
            if (!held.empty()) {
              ASSERT_TRUE(pool->Release(held.back()).ok());
              held.pop_back();
            }
            break;
          case 4:
            pool->Remove(PicKey(id));
            break;
        }
      }
      EXPECT_EQ(pool->ReleaseOwner(owner), held.size());
    });
  }
  for (std::thread& thread : threads) thread.join();
  ASSERT_TRUE(pool->CheckConsistency().ok()) << pool->CheckConsistency();
  const DevicePoolStats stats = pool->Stats();
  EXPECT_EQ(stats.references, 0u);
  EXPECT_EQ(stats.reservations, 0u);
  EXPECT_EQ(stats.pending_free_pages, 0u);
  EXPECT_EQ(stats.referenced_pages, 0u);
  EXPECT_EQ(stats.free_pages + stats.committed_pages, 64u);
  EXPECT_EQ(stats.admission_rejects, refused.load());
}

}  // namespace
}  // namespace strata::storage

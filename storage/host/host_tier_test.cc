#include "storage/host/host_tier.h"

#include <sys/mman.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/host/test_util.h"

namespace strata::storage {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;
using testing::Pattern;
using testing::SmallLayout;
using testing::SyntheticKey;

constexpr uint32_t kPage = 1024;
constexpr uint64_t kFull = 4096;  // SmallLayout: 16 tokens x 256 bytes = 4 pages

std::vector<std::byte> Read(const PayloadView& payload) {
  std::vector<std::byte> bytes(payload.size_bytes());
  payload.CopyTo(bytes);
  return bytes;
}

// Copies every evicted chunk and notes whether the tier still listed it during the call.
class RecordingListener : public EvictionListener {
 public:
  struct Evicted {
    ChunkKey key;
    std::vector<std::byte> bytes;
    uint64_t checksum;
    uint32_t num_tokens;
    std::string tenant;
    bool still_indexed;
    StoredEncoding encoding;
  };

  void OnEvicted(const ChunkKey& key, const PayloadView& payload, uint64_t checksum,
                 uint32_t num_tokens, std::string_view tenant,
                 const StoredEncoding& encoding) override {
    Evicted evicted{key,        Read(payload),       checksum,
                    num_tokens, std::string(tenant), tier != nullptr && tier->Contains(key),
                    encoding};
    absl::MutexLock lock(&mu);
    chunks.push_back(std::move(evicted));
  }

  HostTier* tier = nullptr;
  absl::Mutex mu;
  std::vector<Evicted> chunks;
};

class HostTierTest : public ::testing::Test {
 protected:
  HostTierOptions Options(uint64_t capacity_bytes) {
    return {.capacity_bytes = capacity_bytes,
            .page_bytes = kPage,
            .hard_pin_quota_bytes = capacity_bytes,
            .default_lease = seconds(10),
            .clock = &clock_,
            .listener = &listener_};
  }

  std::unique_ptr<HostTier> MakeTier(const HostTierOptions& options) {
    auto tier = HostTier::Create(options);
    EXPECT_TRUE(tier.ok()) << tier.status();
    if (!tier.ok()) return nullptr;
    listener_.tier = tier->get();
    return *std::move(tier);
  }

  ChunkKey Key(uint64_t id) const { return SyntheticKey(layout_, id); }

  // Stores chunk `id` holding `tokens` tokens of Pattern(seed) (seed defaults to id).
  void Store(HostTier& tier, uint64_t id, uint32_t tokens = 16, uint64_t seed = ~0ull) {
    auto result = tier.Reserve(layout_, Key(id), {.num_tokens = tokens});
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->outcome, ReserveOutcome::kReserved);
    WriteReservation& reservation = result->reservation;
    reservation.payload().CopyFrom(Pattern(seed == ~0ull ? id : seed, reservation.size_bytes()));
    last_ranges_.assign(reservation.ranges().begin(), reservation.ranges().end());
    ASSERT_TRUE(tier.Commit(std::move(reservation)).ok());
  }

  // Leases chunk `id`, checks it holds Pattern(seed), and releases it.
  void ExpectLoads(HostTier& tier, uint64_t id, uint64_t seed = ~0ull) {
    auto lease = tier.Acquire(Key(id));
    ASSERT_TRUE(lease.ok()) << lease.status();
    ASSERT_TRUE(lease->has_value()) << "chunk " << id << " missing";
    EXPECT_EQ(Read((*lease)->payload()),
              Pattern(seed == ~0ull ? id : seed, (*lease)->size_bytes()));
  }

  ChunkLease Lease(HostTier& tier, uint64_t id, std::optional<std::chrono::nanoseconds> d = {}) {
    auto lease = tier.Acquire(Key(id), d);
    EXPECT_TRUE(lease.ok() && lease->has_value()) << "chunk " << id;
    return std::move(**lease);
  }

  void CorruptOneByte(HostTier& tier, uint64_t id) {
    uint64_t offset;
    {
      ChunkLease lease = Lease(tier, id);
      offset = lease.ranges().back().offset + lease.ranges().back().size_bytes - 1;
    }
    tier.arena_base()[offset] ^= std::byte{0x5A};
  }

  void ExpectConsistent(const HostTier& tier) {
    absl::Status status = tier.CheckConsistency();
    EXPECT_TRUE(status.ok()) << status;
  }

  KvLayout layout_ = SmallLayout();
  ArenaRangeList last_ranges_;  // of the last Store
  ManualClock clock_;
  RecordingListener listener_;
};

TEST_F(HostTierTest, CreateRejectsUnusableOptions) {
  auto code = [&](HostTierOptions options) { return HostTier::Create(options).status().code(); };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  HostTierOptions good = Options(16 * kPage);
  EXPECT_TRUE(HostTier::Create(good).ok());
  auto bad = good;
  bad.capacity_bytes = 0;
  EXPECT_EQ(code(bad), kInvalid);
  bad = good;
  bad.capacity_bytes = 16 * kPage + 1;
  EXPECT_EQ(code(bad), kInvalid);
  bad = good;
  bad.page_bytes = 0;
  EXPECT_EQ(code(bad), kInvalid);
  bad = good;
  bad.page_bytes = 100;
  EXPECT_EQ(code(bad), kInvalid);
  bad = good;
  bad.capacity_bytes = (uint64_t{1} << 32) * 64 + 64;  // 2^32 + 1 pages of 64 bytes
  bad.page_bytes = 64;
  EXPECT_EQ(code(bad), kInvalid);
  bad = good;
  bad.verify_every_n_loads = 0;
  EXPECT_EQ(code(bad), kInvalid);
  bad = good;
  bad.default_lease = seconds(0);
  EXPECT_EQ(code(bad), kInvalid);
  bad = good;
  bad.policy = "belady";
  EXPECT_EQ(code(bad), kInvalid);
  // Tenant quotas name a tenant and lie in (0, capacity].
  for (const auto& [tenant, bytes] : std::vector<std::pair<std::string, uint64_t>>{
           {"", kPage}, {"a", 0}, {"a", 16 * kPage + 1}}) {
    bad = good;
    bad.tenant_quotas = {{tenant, bytes}};
    EXPECT_EQ(code(bad), kInvalid) << "'" << tenant << "' " << bytes;
  }
  good.tenant_quotas = {{"a", 16 * kPage}, {"b", kPage}};
  EXPECT_TRUE(HostTier::Create(good).ok());
}

TEST_F(HostTierTest, StoreAndLoadRoundTrip) {
  auto tier = MakeTier(Options(16 * kPage));
  auto result = tier->Reserve(layout_, Key(1), {.num_tokens = 16});
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->outcome, ReserveOutcome::kReserved);
  WriteReservation& reservation = result->reservation;
  EXPECT_EQ(reservation.size_bytes(), kFull);
  EXPECT_EQ(reservation.key(), Key(1));
  reservation.payload().CopyFrom(Pattern(1, kFull));

  // Only committed chunks are visible.
  EXPECT_FALSE(tier->Contains(Key(1)));
  EXPECT_FALSE(tier->Acquire(Key(1))->has_value());
  EXPECT_EQ(tier->Stats().reserved_bytes, kFull);
  ASSERT_TRUE(tier->Commit(std::move(reservation)).ok());
  EXPECT_FALSE(reservation.valid());
  EXPECT_TRUE(tier->Contains(Key(1)));

  auto lease = tier->Acquire(Key(1));
  ASSERT_TRUE(lease.ok() && lease->has_value());
  const ChunkLease& held = **lease;
  EXPECT_EQ(held.key(), Key(1));
  EXPECT_EQ(held.size_bytes(), kFull);
  EXPECT_EQ(held.num_tokens(), 16u);
  EXPECT_EQ(held.checksum(), ChecksumBytes(Pattern(1, kFull)));
  EXPECT_EQ(held.deadline(), clock_.Now() + seconds(10));
  EXPECT_FALSE(held.expired());
  EXPECT_EQ(Read(held.payload()), Pattern(1, kFull));

  // Zero-copy: another mapping of the arena's fd sees the bytes at the lease's offsets.
  void* mapped =
      mmap(nullptr, tier->arena_size_bytes(), PROT_READ, MAP_SHARED, tier->arena_fd(), 0);
  ASSERT_NE(mapped, MAP_FAILED);
  const ArenaRange range = held.ranges()[0];
  EXPECT_EQ(std::memcmp(static_cast<std::byte*>(mapped) + range.offset, Pattern(1, kFull).data(),
                        range.size_bytes),
            0);
  munmap(mapped, tier->arena_size_bytes());

  const HostTierStats stats = tier->Stats();
  EXPECT_EQ(stats.capacity_bytes, 16 * kPage);
  EXPECT_EQ(stats.page_bytes, kPage);
  EXPECT_EQ(stats.chunks, 1u);
  EXPECT_EQ(stats.payload_bytes, kFull);
  EXPECT_EQ(stats.used_bytes, kFull);
  EXPECT_EQ(stats.free_bytes, 12 * kPage);
  EXPECT_EQ(stats.reserved_bytes, 0u);
  EXPECT_EQ(stats.active_leases, 1u);
  EXPECT_EQ(stats.leased_bytes, kFull);
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.misses, 1u);
  ExpectConsistent(*tier);
}

TEST_F(HostTierTest, ReserveOutcomes) {
  auto tier = MakeTier(Options(16 * kPage));
  auto first = tier->Reserve(layout_, Key(1), {.num_tokens = 16});
  ASSERT_TRUE(first.ok());
  auto second = tier->Reserve(layout_, Key(1), {.num_tokens = 16});
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->outcome, ReserveOutcome::kInProgress);
  EXPECT_FALSE(second->reservation.valid());
  ASSERT_TRUE(tier->Commit(std::move(first->reservation)).ok());
  auto third = tier->Reserve(layout_, Key(1), {.num_tokens = 16});
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->outcome, ReserveOutcome::kAlreadyPresent);

  // Abort, explicit or by destruction, frees the pages and the key.
  auto aborted = tier->Reserve(layout_, Key(2), {.num_tokens = 16});
  ASSERT_TRUE(aborted.ok());
  tier->Abort(std::move(aborted->reservation));
  EXPECT_EQ(tier->Stats().used_bytes, kFull);
  {
    auto dropped = tier->Reserve(layout_, Key(2), {.num_tokens = 16});
    ASSERT_EQ(dropped->outcome, ReserveOutcome::kReserved);
    EXPECT_EQ(tier->Stats().reserved_bytes, kFull);
  }
  EXPECT_EQ(tier->Stats().reserved_bytes, 0u);
  EXPECT_EQ(tier->Stats().used_bytes, kFull);
  EXPECT_FALSE(tier->Contains(Key(2)));
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 2));
  ExpectConsistent(*tier);
}

TEST_F(HostTierTest, LookupHitsAreAPrefix) {
  auto tier = MakeTier(Options(32 * kPage));
  for (uint64_t id : {0, 1, 3}) ASSERT_NO_FATAL_FAILURE(Store(*tier, id));
  const std::vector<ChunkKey> chain = {Key(0), Key(1), Key(2), Key(3)};
  EXPECT_EQ(tier->Lookup(chain), 2u);
  EXPECT_EQ(tier->Lookup(std::span(chain).subspan(3)), 1u);
  EXPECT_EQ(tier->Lookup({}), 0u);
  const std::vector<ChunkKey> with_empty = {Key(0), ChunkKey(), Key(1)};
  EXPECT_EQ(tier->Lookup(with_empty), 1u);
  EXPECT_EQ(tier->Stats().hits, 0u);  // lookups are not loads
}

TEST_F(HostTierTest, BadInputsAreInvalidArgument) {
  auto tier = MakeTier(Options(16 * kPage));
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 1));
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  auto reserve_code = [&](const KvLayout& layout, const ChunkKey& key, uint32_t tokens) {
    return tier->Reserve(layout, key, {.num_tokens = tokens}).status().code();
  };
  KvLayout broken = layout_;
  broken.num_layers = 0;
  EXPECT_EQ(reserve_code(broken, Key(2), 16), kInvalid);
  EXPECT_EQ(reserve_code(layout_, ChunkKey(), 16), kInvalid);
  EXPECT_EQ(reserve_code(SmallLayout("other-model"), Key(2), 16), kInvalid);  // wrong layout
  EXPECT_EQ(reserve_code(layout_, Key(2), 0), kInvalid);
  EXPECT_EQ(reserve_code(layout_, Key(2), 17), kInvalid);
  KvLayout huge = layout_;
  huge.num_layers = 64;  // a 128 KiB chunk in a 16 KiB tier
  EXPECT_EQ(reserve_code(huge, SyntheticKey(huge, 2), 16), kInvalid);
  absl::Status too_big = tier->Reserve(huge, SyntheticKey(huge, 2), {.num_tokens = 16}).status();
  EXPECT_THAT(std::string(too_big.message()), HasSubstr("exceeds the tier's capacity"));
  // Without a layout (a promotion at a lower tier's recorded size).
  auto sized_code = [&](const ChunkKey& key, uint64_t bytes, uint32_t tokens) {
    return tier->ReserveSized(key, bytes, {.num_tokens = tokens}).status().code();
  };
  EXPECT_EQ(sized_code(ChunkKey(), 4096, 16), kInvalid);
  EXPECT_EQ(sized_code(Key(2), 0, 16), kInvalid);
  EXPECT_EQ(sized_code(Key(2), 4096, 0), kInvalid);
  EXPECT_EQ(sized_code(Key(2), 17 * kPage, 16), kInvalid);
  auto sized = tier->ReserveSized(Key(3), 3000, {.num_tokens = 7});
  ASSERT_TRUE(sized.ok()) << sized.status();
  EXPECT_EQ(sized->reservation.size_bytes(), 3000u);
  EXPECT_EQ(tier->ReserveSized(Key(1), 4096, {.num_tokens = 16})->outcome,
            ReserveOutcome::kAlreadyPresent);
  tier->Abort(std::move(sized->reservation));

  EXPECT_EQ(tier->Acquire(ChunkKey()).status().code(), kInvalid);
  EXPECT_EQ(tier->Acquire(Key(1), seconds(0)).status().code(), kInvalid);
  EXPECT_EQ(tier->Acquire(Key(1), seconds(-1)).status().code(), kInvalid);
  const std::vector<ChunkKey> chain = {Key(1), ChunkKey()};
  EXPECT_EQ(tier->AcquirePrefix(chain).status().code(), kInvalid);
  EXPECT_EQ(tier->Pin(ChunkKey(), {}).code(), kInvalid);
  EXPECT_EQ(tier->Pin(Key(99), {}).code(), kInvalid);                       // unknown
  EXPECT_EQ(tier->Pin(Key(1), {.kind = PinKind::kSoft}).code(), kInvalid);  // no ttl
  EXPECT_EQ(tier->Unpin(Key(99), PinKind::kHard).code(), kInvalid);
  EXPECT_EQ(tier->Unpin(ChunkKey(), PinKind::kSoft).code(), kInvalid);
  EXPECT_EQ(tier->Remove(ChunkKey()).status().code(), kInvalid);
  auto removed = tier->Remove(Key(99));  // unknown: nothing to remove, not an error
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(removed->chunks, 0u);
  EXPECT_EQ(tier->Commit(WriteReservation()).code(), kInvalid);

  // A reservation of another tier is refused and left to abort on its own tier.
  auto other = MakeTier(Options(16 * kPage));
  auto foreign = other->Reserve(layout_, Key(5), {.num_tokens = 16});
  ASSERT_TRUE(foreign.ok());
  EXPECT_EQ(tier->Commit(std::move(foreign->reservation)).code(), kInvalid);
  EXPECT_FALSE(tier->Contains(Key(5)));
  EXPECT_FALSE(other->Contains(Key(5)));
  EXPECT_EQ(other->Stats().reservations, 1u);
  foreign->reservation = WriteReservation();
  EXPECT_EQ(other->Stats().reservations, 0u);

  EXPECT_EQ(tier->Stats().chunks, 1u);
  ExpectConsistent(*tier);
}

TEST_F(HostTierTest, PartialChunksAreAccountedToTheByte) {
  auto tier = MakeTier(Options(32 * kPage));
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 1, 3));                    // 768 bytes: 1 page
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 2, 16));                   // 4096 bytes: 4 pages
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 3, 5));                    // 1280 bytes: 2 pages
  auto open = tier->Reserve(layout_, Key(4), {.num_tokens = 9});  // 2304 bytes: 3 pages
  ASSERT_TRUE(open.ok());
  HostTierStats stats = tier->Stats();
  EXPECT_EQ(stats.payload_bytes, 768u + 4096u + 1280u);
  EXPECT_EQ(stats.reserved_bytes, 2304u);
  EXPECT_EQ(stats.used_bytes, 10u * kPage);
  EXPECT_EQ(stats.free_bytes, 22u * kPage);
  EXPECT_EQ(stats.chunks, 3u);
  EXPECT_EQ(stats.reservations, 1u);
  ASSERT_NO_FATAL_FAILURE(ExpectLoads(*tier, 1));
  ASSERT_NO_FATAL_FAILURE(ExpectLoads(*tier, 3));
  ExpectConsistent(*tier);
}

TEST_F(HostTierTest, ChunksSpanSeveralExtentsWhenFreeSpaceIsScattered) {
  auto tier = MakeTier(Options(8 * kPage));
  for (uint64_t id = 0; id < 8; ++id) ASSERT_NO_FATAL_FAILURE(Store(*tier, id, 4));  // 1 page each
  for (uint64_t id : {0, 2, 4, 6}) ASSERT_TRUE(tier->Remove(Key(id)).ok());
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 100, 16));
  ChunkLease lease = Lease(*tier, 100);
  EXPECT_EQ(lease.ranges().size(), 4u);
  EXPECT_EQ(Read(lease.payload()), Pattern(100, kFull));
  EXPECT_EQ(tier->Stats().evictions, 0u);
  for (uint64_t id : {1, 3, 5, 7}) ASSERT_NO_FATAL_FAILURE(ExpectLoads(*tier, id));
  ExpectConsistent(*tier);
}

TEST_F(HostTierTest, EvictionFollowsLruAndTellsTheListener) {
  auto tier = MakeTier(Options(4 * kFull));
  for (uint64_t id = 0; id < 4; ++id) ASSERT_NO_FATAL_FAILURE(Store(*tier, id));
  ASSERT_NO_FATAL_FAILURE(ExpectLoads(*tier, 0));  // 0 becomes the most recently used
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 4));
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 5));
  ASSERT_NO_FATAL_FAILURE(ExpectLoads(*tier, 3));
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 6));
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 7));
  std::vector<ChunkKey> evicted;
  for (const auto& chunk : listener_.chunks) evicted.push_back(chunk.key);
  EXPECT_EQ(evicted, (std::vector<ChunkKey>{Key(1), Key(2), Key(0), Key(4)}));
  for (uint64_t id : {3, 5, 6, 7}) EXPECT_TRUE(tier->Contains(Key(id))) << id;
  const HostTierStats stats = tier->Stats();
  EXPECT_EQ(stats.evictions, 4u);
  EXPECT_EQ(stats.evicted_bytes, 4 * kFull);
  EXPECT_EQ(stats.chunks, 4u);
  ExpectConsistent(*tier);
}

TEST_F(HostTierTest, ListenerReadsEveryEvictedChunkIntact) {
  auto tier = MakeTier(Options(4 * kFull));
  for (uint64_t id = 0; id < 40; ++id) {
    ASSERT_NO_FATAL_FAILURE(Store(*tier, id, 1 + id % 16));
  }
  const HostTierStats stats = tier->Stats();
  ASSERT_EQ(listener_.chunks.size(), stats.evictions);
  ASSERT_GT(stats.evictions, 30u);
  for (const auto& chunk : listener_.chunks) {
    uint64_t id = 0;
    while (Key(id) != chunk.key) ++id;
    EXPECT_EQ(chunk.num_tokens, 1 + id % 16);
    EXPECT_EQ(chunk.bytes, Pattern(id, layout_.chunk_bytes(chunk.num_tokens)));
    EXPECT_EQ(chunk.checksum, ChecksumBytes(chunk.bytes));
    EXPECT_FALSE(chunk.still_indexed) << "the listener runs after the chunk left the index";
  }
  ExpectConsistent(*tier);
}

// The listener is told each evicted chunk's tenant (the tier's label is freed with the chunk,
// so the name must be taken before); TenantOf answers for committed chunks only.
TEST_F(HostTierTest, ListenerIsToldEachEvictedChunksTenant) {
  auto tier = MakeTier(Options(2 * kFull));
  const std::optional<std::string_view> tenants[] = {"alice", std::nullopt, "bob", "alice"};
  for (uint64_t id = 0; id < 4; ++id) {
    auto r = tier->Reserve(layout_, Key(id), {.num_tokens = 16, .tenant_name = tenants[id]});
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(tier->Commit(std::move(r->reservation)).ok());
  }
  EXPECT_EQ(tier->TenantOf(Key(2)), "bob");
  EXPECT_EQ(tier->TenantOf(Key(3)), "alice");
  EXPECT_EQ(tier->TenantOf(Key(0)), "") << "evicted";
  EXPECT_EQ(tier->TenantOf(Key(9)), "") << "never stored";
  ASSERT_EQ(listener_.chunks.size(), 2u);
  EXPECT_EQ(listener_.chunks[0].key, Key(0));
  EXPECT_EQ(listener_.chunks[0].tenant, "alice");
  EXPECT_EQ(listener_.chunks[1].key, Key(1));
  EXPECT_EQ(listener_.chunks[1].tenant, "");
  ExpectConsistent(*tier);
}

TEST_F(HostTierTest, NeverEvictsLeasedPinnedOrReservedChunks) {
  auto tier = MakeTier(Options(4 * kFull));
  for (uint64_t id = 0; id < 4; ++id) ASSERT_NO_FATAL_FAILURE(Store(*tier, id));
  ChunkLease lease = Lease(*tier, 0);
  ASSERT_TRUE(tier->Pin(Key(1), {.kind = PinKind::kHard}).ok());
  ASSERT_TRUE(tier->Pin(Key(2), {.kind = PinKind::kSoft, .ttl = seconds(5)}).ok());
  auto open = tier->Reserve(layout_, Key(4), {.num_tokens = 16});  // evicts 3, the only choice
  ASSERT_TRUE(open.ok()) << open.status();
  ASSERT_EQ(open->outcome, ReserveOutcome::kReserved);
  EXPECT_FALSE(tier->Contains(Key(3)));

  auto refused = tier->Reserve(layout_, Key(5), {.num_tokens = 16});
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string message(refused.status().message());
  EXPECT_THAT(message, HasSubstr("no room for a chunk of 4096 bytes"));
  EXPECT_THAT(message, HasSubstr("hard pins 4096 bytes"));
  EXPECT_THAT(message, HasSubstr("soft pins 4096"));
  EXPECT_THAT(message, HasSubstr("unexpired leases 4096"));
  EXPECT_THAT(message, HasSubstr("open reservations 4096"));
  for (uint64_t id : {0, 1, 2}) EXPECT_TRUE(tier->Contains(Key(id)));
  EXPECT_EQ(tier->Stats().evictions, 1u);
  EXPECT_FALSE(tier->Contains(Key(5)));
  ExpectConsistent(*tier);

  // The soft pin runs out: chunk 2 becomes the victim.
  clock_.Advance(seconds(6));
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 5));
  EXPECT_FALSE(tier->Contains(Key(2)));
  EXPECT_TRUE(tier->Contains(Key(0)));
  EXPECT_TRUE(tier->Contains(Key(1)));
  ExpectConsistent(*tier);
}

TEST_F(HostTierTest, ExpiredLeasesStopProtecting) {
  auto tier = MakeTier(Options(2 * kFull));
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 0));
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 1));
  ChunkLease lease = Lease(*tier, 0, seconds(10));
  ASSERT_TRUE(tier->Pin(Key(1), {.kind = PinKind::kHard}).ok());
  EXPECT_EQ(tier->Reserve(layout_, Key(2), {.num_tokens = 16}).status().code(),
            absl::StatusCode::kResourceExhausted);
  clock_.Advance(seconds(9));
  EXPECT_FALSE(lease.expired());
  EXPECT_EQ(tier->Reserve(layout_, Key(2), {.num_tokens = 16}).status().code(),
            absl::StatusCode::kResourceExhausted);
  clock_.Advance(seconds(1));
  EXPECT_TRUE(lease.expired());
  EXPECT_EQ(tier->Stats().leased_bytes, 0u);
  EXPECT_EQ(tier->Stats().active_leases, 1u);  // expired but not yet released
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 2));    // evicts 0 under its expired lease
  EXPECT_FALSE(tier->Contains(Key(0)));
  ExpectConsistent(*tier);
  lease.Release();  // late release of an evicted chunk is harmless
  EXPECT_EQ(tier->Stats().active_leases, 0u);
  ExpectConsistent(*tier);
}

TEST_F(HostTierTest, HardPinQuota) {
  HostTierOptions options = Options(8 * kFull);
  options.hard_pin_quota_bytes = 2 * kFull;
  auto tier = MakeTier(options);
  for (uint64_t id = 0; id < 3; ++id) ASSERT_NO_FATAL_FAILURE(Store(*tier, id));
  ASSERT_TRUE(tier->Pin(Key(0), {}).ok());
  ASSERT_TRUE(tier->Pin(Key(1), {}).ok());
  absl::Status over = tier->Pin(Key(2), {});
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(over.message()), HasSubstr("exceeds the quota: 8192 of 8192 bytes"));
  EXPECT_TRUE(tier->Pin(Key(0), {}).ok());  // idempotent: no double counting
  EXPECT_EQ(tier->Stats().hard_pinned_bytes, 2 * kFull);
  ASSERT_TRUE(tier->Unpin(Key(0), PinKind::kHard).ok());
  ASSERT_TRUE(tier->Pin(Key(2), {}).ok());
  EXPECT_EQ(tier->Stats().hard_pinned_bytes, 2 * kFull);
  ASSERT_TRUE(tier->Unpin(Key(0), PinKind::kHard).ok());  // not pinned: no-op
  // Removing a pinned chunk returns its quota.
  ASSERT_TRUE(tier->Remove(Key(1)).ok());
  EXPECT_EQ(tier->Stats().hard_pinned_bytes, kFull);
  ExpectConsistent(*tier);
}

TEST_F(HostTierTest, SoftPinsExpireAndCanBeRemoved) {
  auto tier = MakeTier(Options(8 * kFull));
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 0));
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 1));
  ASSERT_TRUE(tier->Pin(Key(0), {.kind = PinKind::kSoft, .ttl = seconds(5)}).ok());
  ASSERT_TRUE(tier->Pin(Key(1), {.kind = PinKind::kSoft, .ttl = seconds(5)}).ok());
  EXPECT_EQ(tier->Stats().soft_pinned_bytes, 2 * kFull);
  ASSERT_TRUE(tier->Unpin(Key(1), PinKind::kSoft).ok());
  EXPECT_EQ(tier->Stats().soft_pinned_bytes, kFull);
  clock_.Advance(seconds(5));
  EXPECT_EQ(tier->Stats().soft_pinned_bytes, 0u);
  ExpectConsistent(*tier);
}

TEST_F(HostTierTest, CorruptionIsDataLossAndDropsTheChunk) {
  auto tier = MakeTier(Options(8 * kFull));
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 0));
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 1));
  ASSERT_NO_FATAL_FAILURE(CorruptOneByte(*tier, 0));
  auto lease = tier->Acquire(Key(0));
  ASSERT_EQ(lease.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(lease.status().message()), HasSubstr("checksum mismatch"));
  EXPECT_FALSE(tier->Contains(Key(0)));
  EXPECT_FALSE(tier->Acquire(Key(0))->has_value());
  HostTierStats stats = tier->Stats();
  EXPECT_EQ(stats.checksum_failures, 1u);
  EXPECT_EQ(stats.chunks, 1u);
  EXPECT_EQ(stats.used_bytes, kFull);
  EXPECT_EQ(stats.active_leases, 0u);
  ASSERT_NO_FATAL_FAILURE(ExpectLoads(*tier, 1));
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 0));
  ASSERT_NO_FATAL_FAILURE(ExpectLoads(*tier, 0));
  ExpectConsistent(*tier);
}

TEST_F(HostTierTest, CorruptionUnderAnotherLeaseFreesPagesAfterIt) {
  auto tier = MakeTier(Options(8 * kFull));
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 0));
  ChunkLease reader = Lease(*tier, 0);
  tier->arena_base()[reader.ranges()[0].offset] ^= std::byte{1};
  EXPECT_EQ(tier->Acquire(Key(0)).status().code(), absl::StatusCode::kDataLoss);
  HostTierStats stats = tier->Stats();
  EXPECT_EQ(stats.chunks, 0u);
  EXPECT_EQ(stats.pending_free_bytes, kFull);
  EXPECT_EQ(stats.used_bytes, kFull);
  ExpectConsistent(*tier);
  reader.Release();
  EXPECT_EQ(tier->Stats().used_bytes, 0u);
  ExpectConsistent(*tier);
}

TEST_F(HostTierTest, PrefixStopsAtCorruptChunk) {
  auto tier = MakeTier(Options(8 * kFull));
  for (uint64_t id = 0; id < 5; ++id) ASSERT_NO_FATAL_FAILURE(Store(*tier, id));
  ASSERT_NO_FATAL_FAILURE(CorruptOneByte(*tier, 2));
  const std::vector<ChunkKey> chain = {Key(0), Key(1), Key(2), Key(3), Key(4), Key(5)};
  auto prefix = tier->AcquirePrefix(chain, seconds(1), 7);
  ASSERT_TRUE(prefix.ok()) << prefix.status();
  ASSERT_EQ(prefix->leases.size(), 2u);
  EXPECT_EQ(prefix->data_loss_chunks, 1u);
  EXPECT_EQ(prefix->leases[1].key(), Key(1));
  EXPECT_EQ(prefix->leases[1].owner(), 7u);
  EXPECT_EQ(tier->Stats().active_leases, 2u);
  EXPECT_FALSE(tier->Contains(Key(2)));
  EXPECT_EQ(tier->Lookup(chain), 2u);
  prefix->leases.clear();

  auto clean = tier->AcquirePrefix(std::span(chain).subspan(3));
  ASSERT_TRUE(clean.ok());
  EXPECT_EQ(clean->leases.size(), 2u);  // 3, 4, then a miss on 5
  EXPECT_EQ(clean->data_loss_chunks, 0u);
  EXPECT_EQ(Read(clean->leases[0].payload()), Pattern(3, kFull));
  clean->leases.clear();
  EXPECT_EQ(tier->Stats().active_leases, 0u);
  ExpectConsistent(*tier);
}

TEST_F(HostTierTest, SampledVerificationChecksOneLoadInN) {
  HostTierOptions options = Options(8 * kFull);
  options.verify_every_n_loads = 4;
  auto tier = MakeTier(options);
  // The first load of a chunk is always verified.
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 0));
  tier->arena_base()[last_ranges_[0].offset] ^= std::byte{1};
  EXPECT_EQ(tier->Acquire(Key(0)).status().code(), absl::StatusCode::kDataLoss);

  ASSERT_NO_FATAL_FAILURE(Store(*tier, 1));
  ASSERT_NO_FATAL_FAILURE(ExpectLoads(*tier, 1));     // load 0: verified, intact
  ASSERT_NO_FATAL_FAILURE(CorruptOneByte(*tier, 1));  // load 1 (unverified) finds the offset
  for (int load = 2; load < 4; ++load) {
    auto lease = tier->Acquire(Key(1));
    ASSERT_TRUE(lease.ok()) << "load " << load << " is not sampled: " << lease.status();
  }
  EXPECT_EQ(tier->Acquire(Key(1)).status().code(), absl::StatusCode::kDataLoss);  // load 4
  EXPECT_EQ(tier->Stats().checksum_failures, 2u);
  ExpectConsistent(*tier);
}

TEST_F(HostTierTest, RemoveWhileLeasedKeepsPagesUntilRelease) {
  auto tier = MakeTier(Options(2 * kFull));
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 0));
  ChunkLease reader = Lease(*tier, 0);
  auto removed = tier->Remove(Key(0));
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(removed->chunks, 1u);
  EXPECT_EQ(removed->bytes, kFull);
  EXPECT_FALSE(tier->Contains(Key(0)));
  EXPECT_FALSE(tier->Acquire(Key(0))->has_value());
  EXPECT_EQ(tier->Remove(Key(0))->chunks, 0u);

  // The same key can be stored again; it gets other pages and the reader's bytes stay intact,
  // even when the tier is full and has to evict.
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 0, 16, 1000));
  EXPECT_EQ(tier->Reserve(layout_, Key(1), {.num_tokens = 16}).status().code(),
            absl::StatusCode::kOk);
  EXPECT_EQ(Read(reader.payload()), Pattern(0, kFull));
  HostTierStats stats = tier->Stats();
  EXPECT_EQ(stats.pending_free_bytes, kFull);
  EXPECT_EQ(stats.removed, 1u);
  EXPECT_EQ(stats.removed_bytes, kFull);
  ExpectConsistent(*tier);
  reader.Release();
  stats = tier->Stats();
  EXPECT_EQ(stats.pending_free_bytes, 0u);
  EXPECT_EQ(stats.used_bytes, 0u);  // chunk 0 (re-stored) was evicted for chunk 1, then aborted
  ExpectConsistent(*tier);
}

TEST_F(HostTierTest, RemovedChunkUnderExpiredLeaseIsReclaimed) {
  auto tier = MakeTier(Options(2 * kFull));
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 0));
  ChunkLease reader = Lease(*tier, 0, seconds(3));
  ASSERT_TRUE(tier->Remove(Key(0)).ok());
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 1));
  ASSERT_TRUE(tier->Pin(Key(1), {}).ok());
  EXPECT_EQ(tier->Reserve(layout_, Key(2), {.num_tokens = 16}).status().code(),
            absl::StatusCode::kResourceExhausted);
  clock_.Advance(seconds(3));
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 2));  // takes the pages of the removed chunk
  EXPECT_TRUE(reader.expired());
  ExpectConsistent(*tier);
  reader.Release();
  ExpectConsistent(*tier);
}

TEST_F(HostTierTest, RemoveIfMatchesKeys) {
  auto tier = MakeTier(Options(16 * kFull));
  const KvLayout other = SmallLayout("other-model");
  for (uint64_t id = 0; id < 4; ++id) ASSERT_NO_FATAL_FAILURE(Store(*tier, id));
  for (uint64_t id = 0; id < 3; ++id) {
    auto result = tier->Reserve(other, SyntheticKey(other, id), {.num_tokens = 8});
    ASSERT_TRUE(result.ok());
    ASSERT_TRUE(tier->Commit(std::move(result->reservation)).ok());
  }
  auto open = tier->Reserve(other, SyntheticKey(other, 9), {.num_tokens = 8});
  const uint64_t fingerprint = other.Fingerprint();
  const RemoveResult removed =
      tier->RemoveIf([&](const ChunkKey& key) { return key.layout_fingerprint() == fingerprint; });
  EXPECT_EQ(removed.chunks, 3u);
  EXPECT_EQ(removed.bytes, 3 * other.chunk_bytes(8));
  EXPECT_EQ(tier->Stats().chunks, 4u);
  EXPECT_EQ(tier->Stats().reservations, 1u);  // uncommitted chunks are not removed
  ExpectConsistent(*tier);
}

TEST_F(HostTierTest, DeadSessionsLoseTheirReservationsAndLeases) {
  auto tier = MakeTier(Options(4 * kFull));
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 0));
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 1));
  auto a = tier->Reserve(layout_, Key(2), {.num_tokens = 16, .owner = 7});
  auto b = tier->Reserve(layout_, Key(3), {.num_tokens = 16, .owner = 8});
  ASSERT_TRUE(a.ok() && b.ok());
  ChunkLease l0 = Lease(*tier, 0);
  auto l1 = tier->Acquire(Key(1), seconds(100), 7);
  auto l1b = tier->Acquire(Key(0), seconds(100), 7);
  ASSERT_TRUE(l1.ok() && l1b.ok());

  EXPECT_EQ(tier->AbortOwner(7), 1u);
  EXPECT_EQ(tier->AbortOwner(7), 0u);
  EXPECT_FALSE(tier->Contains(Key(2)));
  EXPECT_EQ(tier->Commit(std::move(a->reservation)).code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(tier->Commit(std::move(b->reservation)).ok());

  EXPECT_EQ(tier->ReleaseOwner(7), 2u);
  HostTierStats stats = tier->Stats();
  EXPECT_EQ(stats.active_leases, 1u);
  EXPECT_EQ(stats.reservations, 0u);
  ExpectConsistent(*tier);
  // Chunk 1 is evictable again (LRU evicts 3, then 1); chunk 0 is still leased by l0.
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 4));
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 5));
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 6));
  EXPECT_TRUE(tier->Contains(Key(0)));
  EXPECT_FALSE(tier->Contains(Key(1)));
  l1 = absl::StatusOr<std::optional<ChunkLease>>();  // inert handles release nothing twice
  l1b = absl::StatusOr<std::optional<ChunkLease>>();
  EXPECT_EQ(tier->Stats().active_leases, 1u);
  ExpectConsistent(*tier);
}

TEST_F(HostTierTest, BatchPinIsAllOrNothingUnderTheQuota) {
  HostTierOptions options = Options(8 * kFull);
  options.hard_pin_quota_bytes = 2 * kFull;
  auto tier = MakeTier(options);
  for (uint64_t id = 0; id < 3; ++id) ASSERT_NO_FATAL_FAILURE(Store(*tier, id));
  const std::vector<ChunkKey> three = {Key(0), Key(1), Key(2)};
  absl::StatusOr<PinResult> over = tier->PinChunks(three, {});
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(over.status().message()), HasSubstr("nothing was pinned"));
  EXPECT_EQ(tier->Stats().hard_pinned_bytes, 0u);

  // Missing keys are counted, a key listed twice counts once against the quota.
  const std::vector<ChunkKey> some = {Key(0), Key(0), Key(1), Key(9)};
  absl::StatusOr<PinResult> pinned = tier->PinChunks(some, {});
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_EQ(pinned->chunks, 2u);
  EXPECT_EQ(pinned->bytes, 2 * kFull);
  EXPECT_EQ(pinned->missing, 1u);
  EXPECT_EQ(tier->Stats().hard_pinned_bytes, 2 * kFull);

  absl::StatusOr<PinResult> unpinned = tier->UnpinChunks(some, PinKind::kHard);
  ASSERT_TRUE(unpinned.ok());
  EXPECT_EQ(unpinned->missing, 1u);
  EXPECT_EQ(tier->Stats().hard_pinned_bytes, 0u);
  const std::vector<ChunkKey> with_empty = {Key(0), ChunkKey()};
  EXPECT_EQ(tier->PinChunks(with_empty, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->PinChunks(three, {.kind = PinKind::kSoft}).status().code(),
            absl::StatusCode::kInvalidArgument);
  ExpectConsistent(*tier);
}

TEST_F(HostTierTest, StopAdmittingRefusesNewChunksButCommitsOpenOnes) {
  auto tier = MakeTier(Options(8 * kFull));
  auto open = tier->Reserve(layout_, Key(1), {.num_tokens = 16});
  ASSERT_TRUE(open.ok());
  EXPECT_TRUE(tier->admitting());
  tier->StopAdmitting();
  EXPECT_FALSE(tier->admitting());
  auto refused = tier->Reserve(layout_, Key(2), {.num_tokens = 16});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("draining"));
  EXPECT_TRUE(tier->Commit(std::move(open->reservation)).ok());
  EXPECT_TRUE(tier->Contains(Key(1)));
  ExpectConsistent(*tier);
}

TEST_F(HostTierTest, ListChunksPagesInCommitOrderAcrossRemovals) {
  auto tier = MakeTier(Options(32 * kFull));
  for (uint64_t id = 0; id < 10; ++id) ASSERT_NO_FATAL_FAILURE(Store(*tier, id));
  ASSERT_TRUE(tier->Pin(Key(3), {}).ok());
  ChunkPage first = tier->ListChunks({.limit = 4});
  ASSERT_EQ(first.chunks.size(), 4u);
  EXPECT_EQ(first.chunks[0].key, Key(0));
  EXPECT_EQ(first.chunks[3].key, Key(3));
  EXPECT_TRUE(first.chunks[3].hard_pinned);
  EXPECT_EQ(first.chunks[3].size_bytes, kFull);
  EXPECT_EQ(first.chunks[3].num_tokens, 16u);
  EXPECT_NE(first.next_cursor, 0u);

  // A chunk removed before its page is not listed; one committed meanwhile comes at the end.
  ASSERT_TRUE(tier->Remove(Key(4)).ok());
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 10));
  std::vector<ChunkKey> rest;
  uint64_t cursor = first.next_cursor;
  while (cursor != 0) {
    ChunkPage page = tier->ListChunks({.cursor = cursor, .limit = 4});
    for (const ChunkInfo& info : page.chunks) rest.push_back(info.key);
    cursor = page.next_cursor;
  }
  EXPECT_EQ(rest, (std::vector<ChunkKey>{Key(5), Key(6), Key(7), Key(8), Key(9), Key(10)}));
  EXPECT_TRUE(tier->ListChunks({.limit = 0}).chunks.empty());
  ExpectConsistent(*tier);
}

TEST_F(HostTierTest, ListChunksFiltersByLayoutWithABoundedScan) {
  auto tier = MakeTier(Options(32 * kFull));
  const KvLayout other = SmallLayout("other-model");
  for (uint64_t id = 0; id < 6; ++id) {
    const KvLayout& layout = id % 3 == 2 ? other : layout_;
    auto r = tier->Reserve(layout, SyntheticKey(layout, id), {.num_tokens = 16});
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(tier->Commit(std::move(r->reservation)).ok());
  }
  // Examining 2 chunks per call: pages may be empty yet the listing goes on.
  std::vector<ChunkKey> found;
  uint64_t cursor = 0;
  int calls = 0;
  do {
    ChunkPage page = tier->ListChunks(
        {.cursor = cursor, .limit = 10, .layout_fingerprint = other.Fingerprint(), .max_scan = 2});
    for (const ChunkInfo& info : page.chunks) found.push_back(info.key);
    cursor = page.next_cursor;
    ++calls;
  } while (cursor != 0);
  EXPECT_EQ(found, (std::vector<ChunkKey>{SyntheticKey(other, 2), SyntheticKey(other, 5)}));
  EXPECT_EQ(calls, 3);
}

TEST_F(HostTierTest, ListChunksFiltersByTenantAndReusesFreedTenantLabels) {
  auto tier = MakeTier(Options(32 * kFull));
  auto store = [&](uint64_t id, std::optional<std::string_view> tenant) {
    auto r = tier->Reserve(layout_, Key(id), {.num_tokens = 16, .tenant_name = tenant});
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->outcome, ReserveOutcome::kReserved);
    ASSERT_TRUE(tier->Commit(std::move(r->reservation)).ok());
  };
  auto listed = [&](std::string tenant) {
    std::vector<ChunkKey> keys;
    for (const ChunkInfo& info : tier->ListChunks({.tenant = std::move(tenant)}).chunks) {
      keys.push_back(info.key);
    }
    return keys;
  };
  ASSERT_NO_FATAL_FAILURE(store(0, "alice"));
  ASSERT_NO_FATAL_FAILURE(store(1, "bob"));
  ASSERT_NO_FATAL_FAILURE(store(2, "alice"));
  ASSERT_NO_FATAL_FAILURE(store(3, ""));
  ASSERT_NO_FATAL_FAILURE(store(4, std::nullopt));
  EXPECT_EQ(listed("alice"), (std::vector<ChunkKey>{Key(0), Key(2)}));
  EXPECT_EQ(listed("bob"), (std::vector<ChunkKey>{Key(1)}));
  // "" is a tenant (requests without a salt); chunks stored without a name have none.
  EXPECT_EQ(listed(""), (std::vector<ChunkKey>{Key(3)}));
  EXPECT_TRUE(listed("carol").empty());
  EXPECT_EQ(tier->ListChunks({.tenant = "carol"}).next_cursor, 0u);

  // An aborted reservation records nothing; bob's last chunk leaving frees his label, which
  // carol then gets without inheriting anything of bob's.
  {
    auto r = tier->Reserve(layout_, Key(5), {.num_tokens = 16, .tenant_name = "dave"});
    ASSERT_TRUE(r.ok());
    tier->Abort(std::move(r->reservation));
  }
  EXPECT_TRUE(listed("dave").empty());
  ASSERT_TRUE(tier->Remove(Key(1)).ok());
  EXPECT_TRUE(listed("bob").empty());
  ASSERT_NO_FATAL_FAILURE(store(6, "carol"));
  EXPECT_EQ(listed("carol"), (std::vector<ChunkKey>{Key(6)}));
  EXPECT_TRUE(listed("bob").empty());
  // The filters combine.
  EXPECT_TRUE(tier->ListChunks({.layout_fingerprint = 7, .tenant = "alice"}).chunks.empty());
  ExpectConsistent(*tier);
}

TEST_F(HostTierTest, ReserveRefusesATenantBeyondTheTenantTable) {
  // One 256-byte token per chunk in 256-byte pages: 65536 chunks fit in 16 MiB.
  constexpr uint64_t kTenants = 65535;
  auto tier = MakeTier({.capacity_bytes = (kTenants + 2) * 256,
                        .page_bytes = 256,
                        .clock = &clock_,
                        .listener = &listener_});
  std::vector<WriteReservation> open;
  for (uint64_t id = 0; id < kTenants; ++id) {
    const std::string tenant = std::to_string(id);
    auto r = tier->Reserve(layout_, Key(id), {.num_tokens = 1, .tenant_name = tenant});
    ASSERT_TRUE(r.ok()) << id << ": " << r.status();
    open.push_back(std::move(r->reservation));
  }
  auto refused = tier->Reserve(layout_, Key(kTenants), {.num_tokens = 1, .tenant_name = "new"});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  // A tenant that holds a label already, and a chunk without a tenant, still go in.
  auto known = tier->Reserve(layout_, Key(kTenants), {.num_tokens = 1, .tenant_name = "7"});
  EXPECT_TRUE(known.ok()) << known.status();
  auto unnamed = tier->Reserve(layout_, Key(kTenants + 1), {.num_tokens = 1});
  EXPECT_TRUE(unnamed.ok()) << unnamed.status();
  // Once a tenant's only chunk is aborted, its label serves the new tenant.
  tier->Abort(std::move(open[3]));
  auto after = tier->Reserve(layout_, Key(kTenants + 2), {.num_tokens = 1, .tenant_name = "new"});
  EXPECT_TRUE(after.ok()) << after.status();
}

// Records observer calls as strings: "stored <id> <parent id or -> <tokens>[ <token ids>]",
// "removed <id> <cause>", "cleared".
class RecordingObserver : public ChunkObserver {
 public:
  explicit RecordingObserver(const KvLayout& layout) : layout_(layout) {}
  void OnStored(const ChunkKey& key, const ChunkKey& parent, uint32_t num_tokens,
                std::span<const uint32_t> token_ids) override {
    events.push_back(fmt::format("stored {} {} {}{}{}", Id(key), parent.empty() ? "-" : Id(parent),
                                 num_tokens, token_ids.empty() ? "" : " ",
                                 fmt::join(token_ids, ",")));
  }
  void OnRemoved(const ChunkKey& key, RemovalCause cause) override {
    events.push_back(fmt::format("removed {} {}", Id(key), static_cast<int>(cause)));
  }
  void OnCleared() override { events.push_back("cleared"); }

  std::vector<std::string> events;

 private:
  std::string Id(const ChunkKey& key) const {
    for (uint64_t id = 0; id < 64; ++id) {
      if (SyntheticKey(layout_, id) == key) return std::to_string(id);
    }
    return "?";
  }
  KvLayout layout_;
};

TEST_F(HostTierTest, ObserverSeesStoresAndRemovalsInIndexOrder) {
  RecordingObserver observer(layout_);
  HostTierOptions options = Options(3 * kFull);
  options.observer = &observer;
  auto tier = MakeTier(options);
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 0));
  {
    // The token ids given at Reserve reach the observer at Commit.
    const std::vector<uint32_t> tokens = {9, 8, 7, 6, 5, 4, 3, 2};
    auto r =
        tier->Reserve(layout_, Key(1), {.num_tokens = 8, .parent = Key(0), .token_ids = tokens});
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(tier->Commit(std::move(r->reservation)).ok());
  }
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 2));
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 3));  // evicts 0 (LRU)
  ASSERT_TRUE(tier->Remove(Key(1)).ok());
  CorruptOneByte(*tier, 2);
  EXPECT_EQ(tier->Acquire(Key(2)).status().code(), absl::StatusCode::kDataLoss);
  ASSERT_NO_FATAL_FAILURE(Store(*tier, 4));
  EXPECT_EQ(tier->RemoveAll().chunks, 2u);
  const HostTierStats stats = tier->Stats();
  EXPECT_EQ(stats.chunks, 0u);
  EXPECT_EQ(stats.commits, 5u);
  EXPECT_EQ(stats.committed_bytes, 4 * kFull + kFull / 2);
  EXPECT_EQ(stats.hit_bytes, kFull)
      << "the corrupt chunk's load is a miss; CorruptOneByte's is a hit";
  EXPECT_EQ(observer.events,
            (std::vector<std::string>{"stored 0 - 16", "stored 1 0 8 9,8,7,6,5,4,3,2",
                                      "stored 2 - 16", "removed 0 0", "stored 3 - 16",
                                      "removed 1 1", "removed 2 2", "stored 4 - 16", "cleared"}));
  ExpectConsistent(*tier);
}

}  // namespace
}  // namespace strata::storage

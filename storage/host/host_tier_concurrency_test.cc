// Threads hammer one tier with every operation at once. Payloads are derived from their keys,
// so every reader (and the eviction listener) can check that it sees the right bytes: a page
// lost, freed twice or reused under a reader shows up as wrong bytes, a failed consistency
// check or a sanitizer report.
#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "absl/base/dynamic_annotations.h"
#include "gtest/gtest.h"
#include "storage/host/host_tier.h"
#include "storage/host/test_util.h"

// Operations per thread: the unit suite keeps the sanitizer build quick; the slow suite builds
// this file again with more.
#ifndef STRATA_HAMMER_OPERATIONS
#define STRATA_HAMMER_OPERATIONS 12000
#endif

namespace strata::storage {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr uint32_t kPage = 1024;
constexpr uint32_t kPages = 256;
constexpr uint64_t kKeys = 160;

std::vector<std::byte> ExpectedPayload(const ChunkKey& key, uint64_t size_bytes) {
  return testing::Pattern(key.ShortHash(), size_bytes);
}

bool PayloadIsIntact(const ChunkKey& key, const PayloadView& payload) {
  std::vector<std::byte> bytes(payload.size_bytes());
  payload.CopyTo(bytes);
  return bytes == ExpectedPayload(key, payload.size_bytes());
}

class CheckingListener : public EvictionListener {
 public:
  void OnEvicted(const ChunkKey& key, const PayloadView& payload, uint64_t checksum, uint32_t,
                 std::string_view, const StoredEncoding&) override {
    ++evicted;
    if (!PayloadIsIntact(key, payload) || payload.Checksum() != checksum) ++corrupt;
  }
  std::atomic<uint64_t> evicted{0};
  std::atomic<uint64_t> corrupt{0};
};

struct HammerOptions {
  int threads = 4;
  int operations_per_thread = STRATA_HAMMER_OPERATIONS;
  Clock* clock = SystemClock::Get();
  std::chrono::nanoseconds lease = seconds(60);
  // Advance a ManualClock by this much every few operations (0: never).
  std::chrono::nanoseconds tick{0};
};

struct HammerCounts {
  std::atomic<uint64_t> stores{0}, loads{0}, bad_bytes{0}, exhausted{0}, unexpected{0};
};

void Hammer(HostTier& tier, const HammerOptions& options, HammerCounts& counts, int thread) {
  const KvLayout layout = testing::SmallLayout();
  std::mt19937_64 rng(thread * 7919 + 1);
  const uint64_t owner = 100 + thread;
  std::vector<ChunkLease> held;
  auto key_of = [&](uint64_t id) { return testing::SyntheticKey(layout, id % kKeys); };
  auto check_lease = [&](const ChunkLease& lease) {
    const bool intact = PayloadIsIntact(lease.key(), lease.payload());
    // Bytes read under an expired lease may have been reused: the contract says so.
    if (!intact && !lease.expired()) ++counts.bad_bytes;
  };
  auto expect_ok = [&](const absl::Status& status) {
    if (status.ok() || status.code() == absl::StatusCode::kResourceExhausted) return;
    if (status.code() == absl::StatusCode::kAborted) return;  // lease expired while verifying
    ADD_FAILURE() << status;
    ++counts.unexpected;
  };
  for (int op = 0; op < options.operations_per_thread; ++op) {
    if (options.tick.count() > 0 && op % 16 == 0) {
      static_cast<ManualClock*>(options.clock)->Advance(options.tick);
    }
    const uint64_t id = rng() % kKeys;
    const ChunkKey key = key_of(id);
    if (!held.empty()) check_lease(held[rng() % held.size()]);
    switch (rng() % 20) {
      case 0:
      case 1:
      case 2:
      case 3:
      case 4:
      case 5: {  // store (1 in 8 aborted)
        const uint32_t tokens = rng() % 3 != 0 ? 16 : 1 + rng() % 15;
        auto reserved = tier.Reserve(layout, key, {.num_tokens = tokens, .owner = owner});
        if (!reserved.ok()) {
          if (reserved.status().code() == absl::StatusCode::kResourceExhausted) ++counts.exhausted;
          expect_ok(reserved.status());
          break;
        }
        if (reserved->outcome != ReserveOutcome::kReserved) break;
        WriteReservation& reservation = reserved->reservation;
        reservation.payload().CopyFrom(ExpectedPayload(key, reservation.size_bytes()));
        if (rng() % 8 == 0) {
          tier.Abort(std::move(reservation));
        } else {
          expect_ok(tier.Commit(std::move(reservation)));
          ++counts.stores;
        }
        break;
      }
      case 6:
      case 7:
      case 8: {  // load, keeping a few leases
        auto lease = tier.Acquire(key, options.lease, owner);
        if (!lease.ok()) {
          expect_ok(lease.status());
          break;
        }
        if (!lease->has_value()) break;
        ++counts.loads;
        check_lease(**lease);
        held.push_back(std::move(**lease));
        if (held.size() > 3) {
          check_lease(held.front());  // still intact after whatever happened meanwhile
          held.erase(held.begin());
        }
        break;
      }
      case 9:
      case 10: {  // prefix load
        std::vector<ChunkKey> chain;
        for (uint64_t i = 0; i < 4; ++i) chain.push_back(key_of(id + i));
        auto prefix = tier.AcquirePrefix(chain, options.lease, owner);
        if (!prefix.ok()) {
          expect_ok(prefix.status());
          break;
        }
        for (const ChunkLease& lease : prefix->leases) check_lease(lease);
        break;
      }
      case 11:
      case 12: {  // lookup
        std::vector<ChunkKey> chain;
        for (uint64_t i = 0; i < 8; ++i) chain.push_back(key_of(id + i));
        if (tier.Lookup(chain) > chain.size()) ++counts.unexpected;
        break;
      }
      case 13: {
        auto removed = tier.Remove(key);
        expect_ok(removed.status());
        break;
      }
      case 14: {
        const absl::Status status = tier.Pin(key, {.kind = PinKind::kHard});
        if (status.code() != absl::StatusCode::kInvalidArgument) expect_ok(status);  // unknown
        break;
      }
      case 15: {
        const absl::Status status = tier.Pin(key, {.kind = PinKind::kSoft, .ttl = milliseconds(5)});
        if (status.code() != absl::StatusCode::kInvalidArgument) expect_ok(status);
        break;
      }
      case 16: {
        const absl::Status status = tier.Unpin(key, rng() % 2 ? PinKind::kHard : PinKind::kSoft);
        if (status.code() != absl::StatusCode::kInvalidArgument) expect_ok(status);
        break;
      }
      case 17: {  // the session dies and comes back: its handles become inert
        if (rng() % 8 == 0) {
          tier.ReleaseOwner(owner);
          tier.AbortOwner(owner);
          held.clear();
        } else if (!held.empty()) {
          check_lease(held.front());
          held.front().Release();
          held.erase(held.begin());
        }
        break;
      }
      case 18: {
        if (rng() % 16 == 0) {
          const uint64_t residue = rng() % 13;
          tier.RemoveIf([&](const ChunkKey& k) { return k.ShortHash() % 13 == residue; });
        }
        break;
      }
      case 19: {
        const HostTierStats stats = tier.Stats();
        if (stats.used_bytes + stats.free_bytes != stats.capacity_bytes ||
            stats.payload_bytes + stats.reserved_bytes + stats.pending_free_bytes >
                stats.used_bytes) {
          ++counts.unexpected;
        }
        break;
      }
    }
  }
}

void RunHammer(const HammerOptions& options) {
  CheckingListener listener;
  auto created = HostTier::Create({.capacity_bytes = uint64_t{kPages} * kPage,
                                   .page_bytes = kPage,
                                   .hard_pin_quota_bytes = uint64_t{kPages} * kPage / 4,
                                   .default_lease = options.lease,
                                   .clock = options.clock,
                                   .listener = &listener});
  ASSERT_TRUE(created.ok()) << created.status();
  HostTier& tier = **created;
  if (options.tick.count() > 0) {
    // Readers overstay expiring leases on purpose, and the lease contract lets the tier reuse
    // their pages meanwhile: their copies race with the writers of the reused pages by design.
    // ThreadSanitizer is told so for the payload bytes only; the tier's own state stays checked
    // (and HammerWithLongLeases checks the payload bytes too).
    ABSL_ANNOTATE_BENIGN_RACE_SIZED(tier.arena_base(), tier.arena_size_bytes(),
                                    "payload bytes read under expired leases");
  }
  HammerCounts counts;
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < options.threads; ++t) {
      threads.emplace_back([&, t] { Hammer(tier, options, counts, t); });
    }
  }
  EXPECT_EQ(counts.bad_bytes.load(), 0u);
  EXPECT_EQ(counts.unexpected.load(), 0u);
  EXPECT_EQ(listener.corrupt.load(), 0u);
  EXPECT_GT(counts.stores.load(), 1000u);
  EXPECT_GT(counts.loads.load(), 500u);

  absl::Status consistent = tier.CheckConsistency();
  ASSERT_TRUE(consistent.ok()) << consistent;
  const HostTierStats stats = tier.Stats();
  EXPECT_EQ(stats.evictions, listener.evicted.load());
  EXPECT_GT(stats.evictions, 500u);
  EXPECT_EQ(stats.active_leases, 0u);
  EXPECT_EQ(stats.reservations, 0u);
  EXPECT_EQ(stats.reserved_bytes, 0u);
  EXPECT_EQ(stats.pending_free_bytes, 0u);
  EXPECT_EQ(stats.used_bytes + stats.free_bytes, stats.capacity_bytes);

  // Every surviving chunk loads with its own bytes, and nothing else holds pages.
  const KvLayout layout = testing::SmallLayout();
  uint64_t pages = 0;
  uint64_t payload = 0;
  for (uint64_t id = 0; id < kKeys; ++id) {
    auto lease = tier.Acquire(testing::SyntheticKey(layout, id), seconds(60));
    ASSERT_TRUE(lease.ok()) << lease.status();
    if (!lease->has_value()) continue;
    EXPECT_TRUE(PayloadIsIntact((*lease)->key(), (*lease)->payload()));
    payload += (*lease)->size_bytes();
    pages += ((*lease)->size_bytes() + kPage - 1) / kPage;
  }
  EXPECT_EQ(payload, stats.payload_bytes);
  EXPECT_EQ(pages * kPage, stats.used_bytes);
  std::printf(
      "hammer: %lu stores, %lu loads, %lu evictions, %lu removed, %lu refused (exhausted), %lu "
      "chunks left\n",
      counts.stores.load(), counts.loads.load(), stats.evictions, stats.removed,
      counts.exhausted.load(), stats.chunks);
}

TEST(HostTierConcurrency, HammerWithLongLeases) { RunHammer({}); }

// Leases expire while readers hold them and soft pins run out, driven by a clock that one
// thread after another advances: expired leases stop protecting, and pages of removed or
// evicted chunks are reclaimed under readers that overstayed.
TEST(HostTierConcurrency, HammerWithExpiringLeases) {
  ManualClock clock;
  RunHammer({.clock = &clock, .lease = milliseconds(2), .tick = std::chrono::microseconds(300)});
}

}  // namespace
}  // namespace strata::storage

// HostTier's forms: ReplaceForm swaps a committed chunk's bytes for another form in place (an
// encoded frame, or plain again), keeping everything else about the chunk; engines' Acquire
// calls never lease an encoded chunk unless their reader decodes its codec; what evicts one tells
// the listener its form.
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "storage/host/host_tier.h"
#include "storage/host/test_util.h"

namespace strata::storage {
namespace {

using testing::Pattern;

constexpr uint32_t kPage = 1024;
constexpr uint64_t kFull = 4096;  // SmallLayout: 16 tokens x 256 bytes = 4 pages
constexpr uint64_t kFrame = 1500;

// The form of each chunk the tier evicts.
class FormListener : public EvictionListener {
 public:
  void OnEvicted(const ChunkKey& key, const PayloadView& payload, uint64_t, uint32_t,
                 std::string_view, const StoredEncoding& encoding) override {
    std::vector<std::byte> bytes(payload.size_bytes());
    payload.CopyTo(bytes);
    absl::MutexLock lock(&mu);
    evicted.push_back({key, std::move(bytes), encoding});
  }
  struct Evicted {
    ChunkKey key;
    std::vector<std::byte> bytes;
    StoredEncoding encoding;
  };
  absl::Mutex mu;
  std::vector<Evicted> evicted;
};

class HostTierFormsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<HostTier>> tier =
        HostTier::Create({.capacity_bytes = 16 * kPage,
                          .page_bytes = kPage,
                          .hard_pin_quota_bytes = 8 * kPage,
                          .policy = "lru",
                          .listener = &listener_});
    ASSERT_TRUE(tier.ok()) << tier.status();
    tier_ = *std::move(tier);
  }

  ChunkKey Key(uint64_t id) const { return testing::SyntheticKey(layout_, id); }

  void Store(uint64_t id, std::optional<std::string_view> tenant = std::nullopt) {
    absl::StatusOr<ReserveResult> reserved =
        tier_->Reserve(layout_, Key(id), {.num_tokens = 16, .tenant_name = tenant});
    ASSERT_TRUE(reserved.ok()) << reserved.status();
    reserved->reservation.payload().CopyFrom(Pattern(id, kFull));
    ASSERT_TRUE(tier_->Commit(std::move(reserved->reservation)).ok());
  }

  ChunkLease LeaseAny(uint64_t id) {
    absl::StatusOr<std::optional<ChunkLease>> lease =
        tier_->AcquireForCopy(Key(id), std::nullopt, Forms::kAny);
    EXPECT_TRUE(lease.ok() && lease->has_value()) << "chunk " << id;
    return std::move(**lease);
  }

  // A made-up frame of chunk `id` and its form (no codec decodes it: the tier never does).
  static std::vector<std::byte> Frame(uint64_t id) { return Pattern(id + 1000, kFrame); }
  static StoredEncoding FormOf(uint64_t id) {
    return {.codec = 1,
            .decoded_bytes = kFull,
            .decoded_checksum = ChecksumBytes(Pattern(id, kFull)),
            .relative_error = 0.01f,
            .max_abs_error = 0.5f};
  }

  static std::vector<std::byte> Read(const ChunkLease& lease) {
    std::vector<std::byte> bytes(lease.size_bytes());
    lease.payload().CopyTo(bytes);
    return bytes;
  }

  void ExpectConsistent() {
    absl::Status status = tier_->CheckConsistency();
    EXPECT_TRUE(status.ok()) << status;
  }

  const KvLayout layout_ = testing::SmallLayout();
  FormListener listener_;
  std::unique_ptr<HostTier> tier_;
};

TEST_F(HostTierFormsTest, ReplaceFormSwapsAChunksFormInPlaceAndBack) {
  Store(1);
  {
    ChunkLease lease = LeaseAny(1);
    ASSERT_TRUE(tier_->ReplaceForm(lease, Frame(1), FormOf(1)).ok());
    // The lease reads the new form at once.
    EXPECT_EQ(lease.size_bytes(), kFrame);
    EXPECT_EQ(lease.encoding(), FormOf(1));
    EXPECT_EQ(lease.checksum(), ChecksumBytes(Frame(1)));
    EXPECT_EQ(Read(lease), Frame(1));
    ExpectConsistent();
  }
  // Cached either way, but engines never lease the frame, and that is no miss.
  EXPECT_TRUE(tier_->Contains(Key(1)));
  const ChunkKey chain[] = {Key(1)};
  EXPECT_EQ(tier_->Lookup(chain), 1u);
  const uint64_t misses = tier_->Stats().misses;
  EXPECT_FALSE(tier_->Acquire(Key(1))->has_value());
  EXPECT_FALSE(tier_->AcquireForCopy(Key(1))->has_value());
  EXPECT_TRUE(tier_->AcquirePrefix(chain)->leases.empty());
  EXPECT_EQ(tier_->Stats().misses, misses);

  HostTierStats stats = tier_->Stats();
  EXPECT_EQ(stats.encoded_chunks, 1u);
  EXPECT_EQ(stats.encoded_bytes, kFrame);
  EXPECT_EQ(stats.encoded_decoded_bytes, kFull);
  EXPECT_EQ(stats.payload_bytes, kFrame);
  EXPECT_EQ(stats.used_bytes, 2 * kPage);  // the frame's pages alone
  const ChunkPage page = tier_->ListChunks({});
  ASSERT_EQ(page.chunks.size(), 1u);
  EXPECT_EQ(page.chunks[0].size_bytes, kFrame);
  EXPECT_EQ(page.chunks[0].encoding, FormOf(1));

  {
    ChunkLease lease = LeaseAny(1);
    EXPECT_EQ(Read(lease), Frame(1));
    ASSERT_TRUE(tier_->ReplaceForm(lease, Pattern(1, kFull), StoredEncoding{}).ok());
    EXPECT_FALSE(lease.encoding().encoded());
  }
  absl::StatusOr<std::optional<ChunkLease>> plain = tier_->Acquire(Key(1));
  ASSERT_TRUE(plain.ok() && plain->has_value());
  EXPECT_EQ(Read(**plain), Pattern(1, kFull));
  EXPECT_EQ((*plain)->checksum(), ChecksumBytes(Pattern(1, kFull)));
  plain->reset();
  stats = tier_->Stats();
  EXPECT_EQ(stats.encoded_chunks, 0u);
  EXPECT_EQ(stats.payload_bytes, kFull);
  ExpectConsistent();
}

TEST_F(HostTierFormsTest, AReaderThatDecodesLeasesItsCodecsFramesAsLoads) {
  Store(1);
  Store(2);
  {
    ChunkLease lease = LeaseAny(1);
    ASSERT_TRUE(tier_->ReplaceForm(lease, Frame(1), FormOf(1)).ok());  // codec 1
  }
  EXPECT_TRUE(tier_->HoldsEncoded(Key(1)));
  EXPECT_FALSE(tier_->HoldsEncoded(Key(2)));
  EXPECT_FALSE(tier_->HoldsEncoded(Key(3)));
  const HostTierStats before = tier_->Stats();
  // A reader of codec 2 alone finds no chunk it can read, and that is no miss.
  EXPECT_FALSE(
      tier_->Acquire(Key(1), std::nullopt, 0, false, Forms::DecodedByReader(CodecSet().Add(2)))
          ->has_value());
  EXPECT_EQ(tier_->Stats().misses, before.misses);
  EXPECT_EQ(tier_->Stats().hits, before.hits);
  // A reader of codec 1 leases the frame, and that is a load: a hit, verified on lease.
  absl::StatusOr<std::optional<ChunkLease>> frame =
      tier_->Acquire(Key(1), std::nullopt, 0, false, Forms::DecodedByReader(CodecSet().Add(1)));
  ASSERT_TRUE(frame.ok() && frame->has_value());
  EXPECT_EQ((*frame)->encoding(), FormOf(1));
  EXPECT_EQ(Read(**frame), Frame(1));
  EXPECT_EQ((*frame)->checksum(), ChecksumBytes(Frame(1)));
  // Plain chunks it leases as any load does.
  absl::StatusOr<std::optional<ChunkLease>> plain =
      tier_->Acquire(Key(2), std::nullopt, 0, false, Forms::DecodedByReader(CodecSet().Add(1)));
  ASSERT_TRUE(plain.ok() && plain->has_value());
  EXPECT_FALSE((*plain)->encoding().encoded());
  EXPECT_EQ(tier_->Stats().hits, before.hits + 2);
  EXPECT_EQ(tier_->Stats().hit_bytes, before.hit_bytes + kFrame + kFull);
  frame->reset();
  plain->reset();
  ExpectConsistent();
}

TEST_F(HostTierFormsTest, ReplaceFormNeedsTheOnlyLeaseOfACommittedChunk) {
  Store(1);
  Store(2);
  ChunkLease lease = LeaseAny(1);
  {
    absl::StatusOr<std::optional<ChunkLease>> reader = tier_->Acquire(Key(1));
    ASSERT_TRUE(reader.ok() && reader->has_value());
    EXPECT_EQ(tier_->ReplaceForm(lease, Frame(1), FormOf(1)).code(),
              absl::StatusCode::kUnavailable);
    EXPECT_EQ(Read(**reader), Pattern(1, kFull));  // untouched
  }
  EXPECT_EQ(tier_->ReplaceForm(lease, {}, FormOf(1)).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(tier_->Remove(Key(1)).ok());
  EXPECT_EQ(tier_->ReplaceForm(lease, Frame(1), FormOf(1)).code(), absl::StatusCode::kAborted);
  lease.Release();
  EXPECT_EQ(tier_->ReplaceForm(lease, Frame(1), FormOf(1)).code(),
            absl::StatusCode::kInvalidArgument);
  // A hard pin's new size counts against the quota (8 pages): a 9-page form would exceed it.
  ASSERT_TRUE(tier_->Pin(Key(2), {}).ok());
  ChunkLease pinned = LeaseAny(2);
  EXPECT_EQ(tier_->ReplaceForm(pinned, Pattern(2, 9 * kPage), StoredEncoding{}).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Read(pinned), Pattern(2, kFull));
  pinned.Release();
  ExpectConsistent();
}

TEST_F(HostTierFormsTest, AReplacedChunkKeepsItsPinsTenantAndPlaceInTheListing) {
  Store(1, "acme");
  Store(2);
  ASSERT_TRUE(tier_->Pin(Key(1), {}).ok());
  {
    ChunkLease lease = LeaseAny(1);
    ASSERT_TRUE(tier_->ReplaceForm(lease, Frame(1), FormOf(1)).ok());
  }
  const ChunkPage page = tier_->ListChunks({});
  ASSERT_EQ(page.chunks.size(), 2u);
  EXPECT_EQ(page.chunks[0].key, Key(1));  // commit order kept
  EXPECT_TRUE(page.chunks[0].hard_pinned);
  EXPECT_EQ(tier_->TenantOf(Key(1)), "acme");
  EXPECT_EQ(tier_->Stats().hard_pinned_bytes, kFrame);
  EXPECT_EQ(tier_->ListChunks({.tenant = "acme"}).chunks.size(), 1u);
  ExpectConsistent();
}

TEST_F(HostTierFormsTest, AnEvictedEncodedChunkTellsTheListenerItsForm) {
  Store(1);
  {
    ChunkLease lease = LeaseAny(1);
    ASSERT_TRUE(tier_->ReplaceForm(lease, Frame(1), FormOf(1)).ok());
  }
  for (uint64_t id = 2; id <= 5; ++id) Store(id);  // 2 + 4 x 4 pages > 16: chunk 1 goes (LRU)
  absl::MutexLock lock(&listener_.mu);
  ASSERT_FALSE(listener_.evicted.empty());
  EXPECT_EQ(listener_.evicted[0].key, Key(1));
  EXPECT_EQ(listener_.evicted[0].encoding, FormOf(1));
  EXPECT_EQ(listener_.evicted[0].bytes, Frame(1));
  EXPECT_EQ(tier_->Stats().encoded_chunks, 0u);
}

TEST_F(HostTierFormsTest, AShrinkingFormEvictsNothingAndAGrowingOneFindsPagesAsAStoreDoes) {
  for (uint64_t id = 1; id <= 4; ++id) Store(id);  // 16 of 16 pages
  for (uint64_t id : {3, 4}) {
    ChunkLease lease = LeaseAny(id);
    ASSERT_TRUE(tier_->ReplaceForm(lease, Frame(id), FormOf(id)).ok());
    EXPECT_EQ(Read(lease), Frame(id));
  }
  // Chunk 3's frame took 2 of its own 4 pages under the lock (no page was free); chunk 4's the 2
  // pages chunk 3 freed, copied with no lock held. Neither evicted.
  EXPECT_EQ(tier_->Stats().evictions, 0u);
  EXPECT_EQ(tier_->Stats().free_bytes, 4 * kPage);
  Store(5);  // the tier is full again
  {
    // Chunk 3 decoded back: 4 fresh pages, found by evicting chunk 1 (the LRU victim), then the
    // frame's 2 pages are freed.
    ChunkLease lease = LeaseAny(3);
    ASSERT_TRUE(tier_->ReplaceForm(lease, Pattern(3, kFull), StoredEncoding{}).ok());
  }
  EXPECT_FALSE(tier_->Contains(Key(1)));
  EXPECT_TRUE(tier_->Contains(Key(3)));
  EXPECT_EQ(tier_->Stats().evictions, 1u);
  EXPECT_EQ(tier_->Stats().free_bytes, 2 * kPage);
  absl::StatusOr<std::optional<ChunkLease>> plain = tier_->Acquire(Key(3));
  ASSERT_TRUE(plain.ok() && plain->has_value());
  EXPECT_EQ(Read(**plain), Pattern(3, kFull));
  plain->reset();
  ExpectConsistent();
}

}  // namespace
}  // namespace strata::storage

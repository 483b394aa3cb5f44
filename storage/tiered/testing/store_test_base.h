// The fixture of the TieredStore tests (tiered_store_test.cc, host_forms_test.cc): a store
// whose host tier holds four one-page chunks of SmallLayout, over a disk tier when a test asks,
// with helpers that store, load and check chunks. For tests only; not thread-safe (a test's
// threads share the store, not the fixture).
#pragma once

#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "storage/host/test_util.h"
#include "storage/io/testing/io_test_util.h"
#include "storage/tiered/testing/disk_in_place_of.h"
#include "storage/tiered/tiered_store.h"

namespace strata::storage::testing {

constexpr uint64_t kChunkBytes = 4096;  // SmallLayout: 16 tokens x 256 bytes

// A store whose host tier holds four one-page chunks (host_chunks_), over a disk tier (when
// `with_disk`).
class TieredStoreTestBase : public ::testing::Test {
 protected:
  void Open(bool with_disk, uint64_t demotion_queue_bytes = 0, std::string codec = "") {
    TieredStoreOptions options;
    options.host = {.capacity_bytes = host_chunks_ * kChunkBytes,
                    .page_bytes = 4096,
                    .policy = "lru",
                    .tenant_quotas = tenant_quotas_};
    if (with_disk) {
      options.disk = TieredDiskOptions{.directory = scratch_.path(),
                                       .capacity_bytes = 1 << 20,
                                       .segment_bytes = 64 << 10,
                                       .codec = std::move(codec),
                                       .codec_threads = codec_threads_};
    }
    options.movement.demotion_queue_bytes = demotion_queue_bytes;
    options.movement.write_through = write_through_;
    options.host_codec = host_codec_;
    // The remote tier's place, when a test asks for three tiers: a second disk tier.
    if (remote_ != nullptr) options.lower.push_back(std::move(remote_));
    absl::StatusOr<std::unique_ptr<TieredStore>> store = TieredStore::Create(std::move(options));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  ChunkKey Key(uint64_t id) const { return SyntheticKey(layout_, id); }
  std::vector<ChunkKey> Keys(uint64_t first, uint64_t count) const {
    std::vector<ChunkKey> keys;
    for (uint64_t id = first; id < first + count; ++id) keys.push_back(Key(id));
    return keys;
  }

  void Store(uint64_t id) {
    absl::StatusOr<ReserveResult> reserved =
        store_->host().Reserve(layout_, Key(id), {.num_tokens = 16});
    ASSERT_TRUE(reserved.ok()) << reserved.status();
    ASSERT_EQ(reserved->outcome, ReserveOutcome::kReserved);
    reserved->reservation.payload().CopyFrom(Pattern(id, kChunkBytes));
    ASSERT_TRUE(store_->host().Commit(std::move(reserved->reservation)).ok());
  }

  static bool Holds(const ChunkLease& lease, uint64_t id) {
    std::vector<std::byte> bytes(kChunkBytes);
    lease.payload().CopyTo(bytes);
    return bytes == Pattern(id, kChunkBytes);
  }

  // Runs AcquireForLoad and waits for its result, whichever way it comes; `deferred` tells which.
  // Chunks of `layout` (null: layout_).
  LoadLeases Load(const std::vector<ChunkKey>& keys, bool& deferred, CodecSet reader_decodes = {},
                  const KvLayout* layout = nullptr) {
    std::promise<LoadLeases> done;
    std::future<LoadLeases> result = done.get_future();
    const std::thread::id caller = std::this_thread::get_id();
    std::optional<LoadLeases> now = store_->AcquireForLoad(
        std::make_shared<const KvLayout>(layout != nullptr ? *layout : layout_), keys,
        {.owner = 7, .reader_decodes = reader_decodes}, [&done, caller](LoadLeases leased) {
          EXPECT_NE(std::this_thread::get_id(), caller) << "completions run on the store's thread";
          done.set_value(std::move(leased));
        });
    deferred = !now.has_value();
    if (now.has_value()) return *std::move(now);
    EXPECT_EQ(result.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    return result.get();
  }

  // Opens a host tier over the disk tier over a second disk tier in the remote tier's place.
  void OpenThreeTiers() {
    absl::StatusOr<std::unique_ptr<LowerTier>> remote =
        DiskInPlaceOf::Open(remote_scratch_.path(), Tier::kRemote);
    ASSERT_TRUE(remote.ok()) << remote.status();
    remote_ = *std::move(remote);
    Open(/*with_disk=*/true);
  }

  const KvLayout layout_ = SmallLayout();
  uint32_t codec_threads_ = 2;   // the next Open's TieredDiskOptions::codec_threads
  uint64_t host_chunks_ = 4;     // the next Open's host tier capacity, in chunks
  bool write_through_ = false;   // the next Open's MovementOptions::write_through
  HostCodecOptions host_codec_;  // the next Open's [host] codec
  std::map<std::string, uint64_t> tenant_quotas_;  // the next Open's host tenant quotas
  ScratchDir scratch_;
  ScratchDir remote_scratch_;
  std::unique_ptr<LowerTier> remote_;  // the next Open's registered tier
  std::unique_ptr<TieredStore> store_;
};

}  // namespace strata::storage::testing

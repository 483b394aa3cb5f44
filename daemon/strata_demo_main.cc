// strata_demo: a tour of the host tier's API alone, in one process with an embedded configuration
// and no daemon, engine or disk (`make run` starts stratad itself; see README.md).
// Hashes a few synthetic prompts into chunk keys, stores their KV chunks in a host tier (a memfd
// shared arena), looks them up, loads them back byte-exact, pins one, forces eviction and prints
// the tier's statistics. Exits 0 when every check holds, 1 otherwise.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/key_hasher.h"
#include "fmt/format.h"
#include "storage/host/host_tier.h"

namespace strata {
namespace {

using storage::ChunkLease;
using storage::HostTier;
using storage::ReserveOutcome;

// The embedded configuration: a 256 MiB arena of 2 MiB pages, and a small Llama-like model
// whose 256-token chunk is exactly one page. The tier evicts by LRU, so that the flood of filler
// chunks below evicts every unpinned chunk; stratad's default policy, "adaptive"
// (storage/policy/adaptive_policy.h), would keep the chunks read before a flood written once.
constexpr uint64_t kArenaBytes = uint64_t{256} << 20;
constexpr uint32_t kPageBytes = 2u << 20;

KvLayout DemoLayout() {
  KvLayout layout;
  layout.model_id = "demo-llama-tiny";
  layout.kind = KvKind::kMha;
  layout.num_layers = 8;
  layout.num_kv_heads = 4;
  layout.head_dim = 64;
  layout.dtype = KvDtype::kBfloat16;
  layout.chunk_tokens = 256;
  return layout;
}

std::string MiB(uint64_t bytes) { return fmt::format("{:.1f} MiB", double(bytes) / (1 << 20)); }

// Stand-in KV bytes: a deterministic function of the chunk's key, so a load can be checked.
void FillPayload(const ChunkKey& key, std::span<std::byte> out, uint64_t offset) {
  uint64_t state = key.ShortHash() ^ (offset / 8 * 0x9E3779B97F4A7C15ull);
  for (size_t i = 0; i < out.size(); i += 8) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const uint64_t word = state ^ (state >> 29);
    std::memcpy(out.data() + i, &word, std::min<size_t>(8, out.size() - i));
  }
}

std::vector<std::byte> ExpectedPayload(const ChunkKey& key, uint64_t size_bytes) {
  std::vector<std::byte> bytes(size_bytes);
  FillPayload(key, bytes, 0);
  return bytes;
}

// Counts what the tier evicts. In stratad with a disk tier the listener is the tiered store's
// Demoter (storage/tiered/demoter.h), which copies the bytes here and demotes them to disk.
class CountingListener : public storage::EvictionListener {
 public:
  void OnEvicted(const ChunkKey&, const storage::PayloadView& payload, uint64_t checksum, uint32_t,
                 std::string_view, const StoredEncoding&) override {
    ++chunks;
    bytes += payload.size_bytes();
    if (payload.Checksum() != checksum) ++corrupt;
  }
  uint64_t chunks = 0;
  uint64_t bytes = 0;
  uint64_t corrupt = 0;
};

class Demo {
 public:
  int Run();

 private:
  // Stores every key of `chain`; returns how many chunks were new.
  absl::StatusOr<int> StoreChain(const std::vector<ChunkKey>& chain, uint32_t last_tokens);
  // Loads `chain` and checks every byte.
  bool LoadChain(const std::string& name, const std::vector<ChunkKey>& chain);
  void Check(bool ok, const std::string& what) {
    if (!ok) {
      std::printf("  FAILED: %s\n", what.c_str());
      ++failures_;
    }
  }

  const KvLayout layout_ = DemoLayout();
  CountingListener listener_;
  std::unique_ptr<HostTier> tier_;
  int failures_ = 0;
};

absl::StatusOr<int> Demo::StoreChain(const std::vector<ChunkKey>& chain, uint32_t last_tokens) {
  int stored = 0;
  for (size_t i = 0; i < chain.size(); ++i) {
    const bool last = i + 1 == chain.size();
    const uint32_t tokens = last ? last_tokens : layout_.chunk_tokens;
    absl::StatusOr<storage::ReserveResult> reserved =
        tier_->Reserve(layout_, chain[i],
                       {.num_tokens = tokens,
                        .parent = i > 0 ? chain[i - 1] : ChunkKey(),
                        .partial = tokens < layout_.chunk_tokens});
    if (!reserved.ok()) return reserved.status();
    if (reserved->outcome != ReserveOutcome::kReserved) continue;  // cached already
    storage::WriteReservation& reservation = reserved->reservation;
    // The engine would copy its KV here, range by range, straight into the shared arena.
    uint64_t offset = 0;
    const storage::MutablePayloadView payload = reservation.payload();
    for (size_t r = 0; r < payload.ranges().size(); ++r) {
      FillPayload(chain[i], payload.range_bytes(r), offset);
      offset += payload.ranges()[r].size_bytes;
    }
    if (absl::Status status = tier_->Commit(std::move(reservation)); !status.ok()) return status;
    ++stored;
  }
  return stored;
}

bool Demo::LoadChain(const std::string& name, const std::vector<ChunkKey>& chain) {
  absl::StatusOr<storage::PrefixLeases> loaded = tier_->AcquirePrefix(chain);
  if (!loaded.ok()) {
    std::printf("  load %s: %s\n", name.c_str(), loaded.status().ToString().c_str());
    return false;
  }
  bool exact = loaded->leases.size() == chain.size() && loaded->data_loss_chunks == 0;
  uint64_t bytes = 0;
  for (const ChunkLease& lease : loaded->leases) {
    std::vector<std::byte> copy(lease.size_bytes());
    lease.payload().CopyTo(copy);
    exact = exact && !lease.expired() && copy == ExpectedPayload(lease.key(), lease.size_bytes());
    bytes += lease.size_bytes();
  }
  std::printf("  load %-23s %zu/%zu chunks, %s, %s\n", name.c_str(), loaded->leases.size(),
              chain.size(), MiB(bytes).c_str(), exact ? "byte-exact" : "WRONG BYTES");
  return exact;
}

int Demo::Run() {
  absl::StatusOr<std::unique_ptr<HostTier>> created =
      HostTier::Create({.capacity_bytes = kArenaBytes,
                        .page_bytes = kPageBytes,
                        .prefault = true,
                        .arena_name = "strata-demo",
                        .hard_pin_quota_bytes = kArenaBytes / 4,
                        .default_lease = std::chrono::seconds(5),
                        .verify_every_n_loads = 1,
                        .policy = "lru",
                        .listener = &listener_});
  if (!created.ok()) {
    std::printf("cannot create the host tier: %s\n", created.status().ToString().c_str());
    return 1;
  }
  tier_ = *std::move(created);
  std::printf("strata demo: host tier of %s in %u pages of %s (memfd %d)\n",
              MiB(kArenaBytes).c_str(), uint32_t(kArenaBytes / kPageBytes), MiB(kPageBytes).c_str(),
              tier_->arena_fd());
  std::printf("layout: %s, %s per full chunk\n", layout_.DebugString().c_str(),
              MiB(layout_.chunk_bytes(layout_.chunk_tokens)).c_str());

  absl::StatusOr<KeyHasher> hasher = KeyHasher::Create(layout_, {.seed = "0"});
  if (!hasher.ok()) return 1;

  // Three prompts: two share a 1024-token document, a third is unrelated.
  struct Prompt {
    std::string name;
    std::vector<uint32_t> tokens;
    std::vector<ChunkKey> keys;
  };
  std::vector<uint32_t> document(1024);
  for (size_t i = 0; i < document.size(); ++i) document[i] = uint32_t(1000 + i * 13 % 5000);
  std::vector<Prompt> prompts(3);
  prompts[0].name = "doc + question A";
  prompts[1].name = "doc + question B";
  prompts[2].name = "unrelated chat";
  prompts[0].tokens = document;
  prompts[1].tokens = document;
  for (uint32_t i = 0; i < 300; ++i) prompts[0].tokens.push_back(7 + i);
  for (uint32_t i = 0; i < 180; ++i) prompts[1].tokens.push_back(9000 + i);
  for (uint32_t i = 0; i < 700; ++i) prompts[2].tokens.push_back(20000 + i * 3);

  std::printf("\nstore\n");
  for (Prompt& prompt : prompts) {
    prompt.keys = hasher->PrefixKeys(prompt.tokens, {}, PartialChunk::kInclude);
    const uint32_t tail = uint32_t(prompt.tokens.size() % layout_.chunk_tokens);
    absl::StatusOr<int> stored = StoreChain(prompt.keys, tail == 0 ? layout_.chunk_tokens : tail);
    if (!stored.ok()) {
      std::printf("  store %s: %s\n", prompt.name.c_str(), stored.status().ToString().c_str());
      return 1;
    }
    std::printf("  store %-22s %zu tokens -> %zu chunks, %d new, %zu already cached\n",
                prompt.name.c_str(), prompt.tokens.size(), prompt.keys.size(), *stored,
                prompt.keys.size() - *stored);
  }
  Check(tier_->Stats().chunks == 6 + 1 + 3, "10 distinct chunks stored");

  std::printf("\nlookup\n");
  for (const Prompt& prompt : prompts) {
    const size_t hits = tier_->Lookup(prompt.keys);
    std::printf("  lookup %-21s %zu/%zu chunks cached (%zu tokens)\n", prompt.name.c_str(), hits,
                prompt.keys.size(), std::min(prompt.tokens.size(), hits * layout_.chunk_tokens));
    Check(hits == prompt.keys.size(), prompt.name + " fully cached");
  }

  std::printf("\nload\n");
  for (const Prompt& prompt : prompts) {
    Check(LoadChain(prompt.name, prompt.keys), prompt.name + " loads byte-exact");
  }

  std::printf("\npin and evict\n");
  const ChunkKey& pinned = prompts[0].keys[0];
  Check(tier_->Pin(pinned, {.kind = storage::PinKind::kHard}).ok(), "hard pin");
  std::printf("  hard-pinned the first chunk of the shared document\n");
  // Fill the tier twice over with other prompts' chunks: the rest of the cache is evicted.
  const KeyExtras tenant{.tenant_salt = "filler"};
  uint64_t filler_chunks = 0;
  for (uint32_t p = 0; p < 64; ++p) {
    std::vector<uint32_t> tokens(4 * layout_.chunk_tokens);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = p * 100000 + uint32_t(i);
    absl::StatusOr<int> stored = StoreChain(hasher->PrefixKeys(tokens, tenant), 256);
    if (!stored.ok()) {
      std::printf("  filler: %s\n", stored.status().ToString().c_str());
      return 1;
    }
    filler_chunks += *stored;
  }
  const storage::HostTierStats after = tier_->Stats();
  std::printf("  stored %lu filler chunks: %lu evictions (%s), the listener saw %lu\n",
              filler_chunks, after.evictions, MiB(after.evicted_bytes).c_str(), listener_.chunks);
  Check(after.evictions > 0 && after.evictions == listener_.chunks, "listener saw every eviction");
  Check(listener_.corrupt == 0, "evicted payloads matched their checksums");
  Check(tier_->Contains(pinned), "pinned chunk survived");
  Check(tier_->Lookup(prompts[2].keys) == 0, "unpinned chunks were evicted");
  Check(LoadChain("pinned chunk", {pinned}), "pinned chunk loads byte-exact");
  Check(tier_->CheckConsistency().ok(), "tier accounting is consistent");

  const storage::HostTierStats stats = tier_->Stats();
  std::printf("\nstats\n");
  std::printf("  capacity %s, used %s (%lu chunks, payload %s), free %s\n",
              MiB(stats.capacity_bytes).c_str(), MiB(stats.used_bytes).c_str(), stats.chunks,
              MiB(stats.payload_bytes).c_str(), MiB(stats.free_bytes).c_str());
  std::printf("  pinned: hard %s, soft %s; leases %lu; reservations %lu\n",
              MiB(stats.hard_pinned_bytes).c_str(), MiB(stats.soft_pinned_bytes).c_str(),
              stats.active_leases, stats.reservations);
  std::printf("  loads: %lu hits, %lu misses; %lu evictions; %lu checksum failures\n", stats.hits,
              stats.misses, stats.evictions, stats.checksum_failures);
  std::printf("\n%s\n", failures_ == 0 ? "OK" : fmt::format("{} CHECKS FAILED", failures_).c_str());
  return failures_ == 0 ? 0 : 1;
}

}  // namespace
}  // namespace strata

int main() { return strata::Demo().Run(); }

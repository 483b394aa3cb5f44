// PageStore is a key-addressed store of KV pages in the local Strata daemon, for engines whose
// cache names pages by their own strings instead of by tokens: SGLang's HiCache hands its L3
// storage backends page hashes (python/sglang/srt/mem_cache/hicache_storage.py), and the
// SGLang backend in connector/python/strata_sglang is a thin binding of this class.
//
// Pages: one page is one daemon chunk of `layout` holding layout.chunk_tokens tokens, so its
// payload is layout.chunk_bytes(layout.chunk_tokens) bytes. In host memory a page may be
// scattered over several segments (SGLang's layer-first pools give one per layer and plane);
// its payload is the segments' bytes concatenated in order.
//
// Keys: a page key string maps to a ChunkKey by KeyOf: xxh3-128 over a domain tag
// ("strata.sglang.page.v1"), the layout's fingerprint and the string, carried with that
// fingerprint. So the same string and layout give the same key in every process and run, two
// layouts never share a page, and these keys live in a key space of their own: vLLM's keys come
// from core/KeyHasher over token ids (another domain tag and input), so an SGLang instance and a
// vLLM instance on one daemon never see each other's chunks, even for the same prompt and
// model. Lookups and loads stop at the first missing key (the daemon serves prefix chains):
// SGLang asks for leading runs of pages, so that is what its interface needs.
//
// Failure model (as the connector's): nothing here throws; every failure is a status or a
// page reported missing / not stored. While the daemon is absent, Exists answers an error at
// once (the caller reports 0), and Get and Put fail; the store reconnects by itself (with the
// EngineClient's backoff) when the daemon returns. Loads fail closed: a page whose lease, copy,
// checksum (xxh3-64 of the payload, computed by this class over the bytes it copied out) or
// release is not clean is reported missing, never served. A page is stored only when its commit
// succeeded (with the checksum of the bytes this class wrote into the arena) or the daemon
// already had it.
//
// Thread-safety: thread-safe (as EngineClient: one request at a time on the session, so
// concurrent calls wait for each other's round trips; copies run outside the session lock).
//
// Ownership: the store owns its daemon session and arena mapping. Host memory is the caller's:
// it must stay valid (and, for Put, unchanged) for the duration of a call; nothing is retained.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/chunk_key.h"
#include "core/clock.h"
#include "core/kv_layout.h"

namespace strata::connector {

namespace internal {
class EngineClient;
}  // namespace internal

struct PageStoreOptions {
  // The daemon's engine socket.
  std::string socket_path;
  // Free-form name of this engine process (the daemon's logs and metrics).
  std::string engine_id = "sglang";
  // What one page holds: chunk_tokens is the page's token count (SGLang's page_size).
  KvLayout layout;
  // Deadline of each PrepareLoad, PrepareStore, Commit and Release round trip.
  std::chrono::milliseconds io_timeout{5000};
  // Deadline of an Exists lookup (reconnect included); past it Exists fails (0 pages).
  std::chrono::milliseconds lookup_budget{20};
  std::chrono::milliseconds reconnect_min_backoff{100};
  std::chrono::milliseconds reconnect_max_backoff{1000};
  // Lease asked for each loaded page; 0: the daemon's default.
  uint32_t lease_ms = 0;
  // Time source of the reconnect backoff; not owned; must outlive the store.
  const Clock* clock = SystemClock::Get();

  // kInvalidArgument naming the first unusable field.
  absl::Status Validate() const;
};

// A byte range of host memory (a page's segment).
struct HostSegment {
  std::byte* data = nullptr;
  uint64_t size_bytes = 0;
};

// One page in host memory: its segments in payload order (sizes summing to page_bytes()).
struct HostPage {
  std::vector<HostSegment> segments;
};

struct PageStoreStats {
  uint64_t lookups = 0;          // Exists round trips that were answered
  uint64_t lookup_failures = 0;  // Exists calls that failed (daemon absent, timeout)
  uint64_t pages_stored = 0;     // committed by this store
  uint64_t pages_already_present = 0;
  uint64_t pages_store_failed = 0;  // reservations, copies or commits that failed
  uint64_t pages_loaded = 0;        // copied out and verified
  uint64_t pages_missing = 0;       // asked for and not served (absent or failed)
  uint64_t pages_corrupt = 0;       // of those, checksum mismatches
  uint64_t bytes_stored = 0;
  uint64_t bytes_loaded = 0;
  bool connected = false;
};

class PageStore {
 public:
  // kInvalidArgument for unusable options. Does not need the daemon to be up.
  static absl::StatusOr<std::unique_ptr<PageStore>> Create(const PageStoreOptions& options);
  PageStore(const PageStore&) = delete;
  PageStore& operator=(const PageStore&) = delete;
  ~PageStore();

  // The daemon key of page key `key` (see "Keys" above).
  ChunkKey KeyOf(std::string_view key) const;
  // Bytes of one page's payload.
  uint64_t page_bytes() const { return page_bytes_; }
  const KvLayout& layout() const { return options_.layout; }

  // How many leading keys of `keys` the daemon has (any tier). Errors: the daemon could not be
  // reached or did not answer within lookup_budget (kUnavailable, kDeadlineExceeded), or
  // refused the lookup.
  absl::StatusOr<size_t> Exists(std::span<const std::string> keys);

  // Stores `pages[i]` under `keys[i]`. One flag per page: true when the daemon holds the page
  // afterwards (committed now, already present, or being stored by another writer). A page
  // whose size is not page_bytes() is not stored. Errors: `keys` and `pages` differ in length
  // (kInvalidArgument), or the daemon could not be reached for the reservation.
  absl::StatusOr<std::vector<bool>> Put(std::span<const std::string> keys,
                                        std::span<const HostPage> pages);

  // Copies the pages of `keys` into `pages`. One flag per page: true when the page's bytes were
  // written to its segments and their checksum matched the one taken when it was stored. The
  // first page that is absent or fails ends the run: it and every later page are false (their
  // segments may hold partial bytes). Errors as Put's.
  absl::StatusOr<std::vector<bool>> Get(std::span<const std::string> keys,
                                        std::span<const HostPage> pages);

  PageStoreStats Stats() const;

 private:
  PageStore(const PageStoreOptions& options, std::unique_ptr<internal::EngineClient> client);

  const PageStoreOptions options_;
  const uint64_t fingerprint_;
  const uint64_t page_bytes_;
  std::unique_ptr<internal::EngineClient> client_;
  struct Counters;
  std::unique_ptr<Counters> counters_;
};

}  // namespace strata::connector

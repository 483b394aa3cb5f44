// EvictionListener is told about every chunk the host tier evicts, while the chunk's bytes are
// still readable: the disk tier implements it to demote chunks instead of losing them.
//
// Threading: OnEvicted runs on the thread whose HostTier::Reserve needed the space, after the
// chunk left the tier's index (it is no longer visible to lookups) and before its pages are
// freed, with none of the tier's locks held. Several threads may call it concurrently for
// different chunks. The payload view and the key are valid only during the call; copy what
// must outlive it. The listener may read from the tier (Lookup, Acquire) but must not Reserve
// in it, which could wait on this very eviction; it should return promptly, since the pages
// stay in use and the reserving caller waits until it does.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/chunk_key.h"
#include "core/stored_encoding.h"
#include "storage/host/payload_view.h"

namespace strata::storage {

class EvictionListener {
 public:
  virtual ~EvictionListener() = default;

  // `payload` holds the chunk's committed bytes; `checksum` is their xxh3-64 as computed at
  // commit (not re-verified here). `num_tokens` is the token count it was reserved with.
  // `tenant` is the tenant it was stored under (ReserveOptions::tenant_name; "" for none).
  // `encoding` is the payload's form: encoded() when it is a codec's frame (HostTier::
  // ReplaceForm), which the listener must decode before anyone reads it as the chunk.
  virtual void OnEvicted(const ChunkKey& key, const PayloadView& payload, uint64_t checksum,
                         uint32_t num_tokens, std::string_view tenant,
                         const StoredEncoding& encoding) = 0;
};

}  // namespace strata::storage

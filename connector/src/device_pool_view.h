// The daemon's device pool (T0, storage/device/device_pool.h) as an engine sees it once mapped in
// its process (DeviceRuntime::OpenShared of the pool's handle): a PagedKvCache whose block b is
// pool page b. So the connector's copy plans (copy_plan.h) move a chunk between the shared arena
// and T0 pages as they do with the engine's own pool (a T1 chunk into T0 pages, T0 pages back
// into a T1 chunk), and an attention backend's block table names T0 pages by their page numbers.
//
// Inside a page, one layer's block of tokens is its planes one after another (K, then V), each
// [slot][kv_head][head_dim]: block stride page_bytes, slot stride one token's row.
//
// A pure function over plain values; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "connector/src/paged_kv.h"
#include "core/kv_layout.h"
#include "storage/device/device_pool.h"

namespace strata::connector::internal {

// The pool of `geometry`, mapped at `mapped_base`, as a paged KV cache of `layout` in blocks of
// `block_tokens` tokens. kInvalidArgument when the geometry is not the one a pool of that layout
// and block size has (DevicePoolGeometryFor): a pool made for another model or block size.
absl::StatusOr<PagedKvCache> DevicePoolAsPagedKvCache(const KvLayout& layout, uint32_t block_tokens,
                                                      const storage::DevicePoolGeometry& geometry,
                                                      std::byte* mapped_base);

}  // namespace strata::connector::internal

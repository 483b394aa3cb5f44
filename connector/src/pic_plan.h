// The public plan (strata/pic_connector.h's PicPlan) of an internal PicRequest: its chunks'
// states and pages, the tokens it recomputes, where the pool lies in this process and the block
// table its attention reads. A pure function over the request; thread-safe.
#pragma once

#include <cstdint>

#include "connector/src/pic_requests.h"
#include "core/kv_layout.h"
#include "strata/pic_connector.h"

namespace strata::connector::internal {

// `positional` is the engine's layout's: rope_applied pools hold rotated keys
// (PicPoolView::keys_rotated), which the block table reads through own blocks.
PicPlan ToPicPlan(const PicRequest& request, uint32_t block_tokens, PositionalFormat positional);

}  // namespace strata::connector::internal

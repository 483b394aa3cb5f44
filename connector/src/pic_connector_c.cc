// The C ABI over PicConnector (strata/pic_connector_c.h). Every entry point catches everything.
#include "strata/pic_connector_c.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "connector/src/c_abi.h"
#include "fmt/format.h"
#include "strata/pic_connector.h"

struct strata_pic_connector {
  std::unique_ptr<strata::connector::PicConnector> impl;
};
struct strata_pic_plan {
  strata::connector::PicPlan impl;
  // Layout-compatible copies of the plan's spans (the C++ spans are another type).
  std::vector<strata_pic_span> recompute;
};

namespace {

using strata::connector::PicChunkState;
using strata::connector::PicConnector;
using strata::connector::PicPlan;
using strata::connector::PicRecomputePolicy;
using strata::connector::PicRequestOptions;
using strata::connector::PicTokenSpan;
using strata::connector::c_abi::FromStatus;
using strata::connector::c_abi::Guard;
using strata::connector::c_abi::OrEmpty;

// The C enums are the C++ enums' values.
static_assert(STRATA_PIC_MEPIC == static_cast<int>(PicRecomputePolicy::kMepic));
static_assert(STRATA_PIC_LEGOLINK == static_cast<int>(PicRecomputePolicy::kLegoLink));
static_assert(STRATA_PIC_LEGOLINK0 == static_cast<int>(PicRecomputePolicy::kLegoLinkZero));
static_assert(STRATA_PIC_CACHEBLEND == static_cast<int>(PicRecomputePolicy::kCacheBlend));
static_assert(STRATA_PIC_SHARED == static_cast<int>(PicChunkState::kShared));
static_assert(STRATA_PIC_WRITE == static_cast<int>(PicChunkState::kWrite));
static_assert(STRATA_PIC_PRIVATE == static_cast<int>(PicChunkState::kPrivate));
static_assert(STRATA_PIC_PENDING == static_cast<int>(PicChunkState::kPending));

strata_pic_span ToC(const PicTokenSpan& span) { return {span.begin, span.end}; }

absl::StatusOr<PicRequestOptions> ToOptions(const strata_pic_request_options* in) {
  PicRequestOptions out;
  if (in == nullptr) return out;
  if (in->struct_size != sizeof(strata_pic_request_options)) {
    return absl::InvalidArgumentError(
        fmt::format("options.struct_size is {}, this library expects {} (call "
                    "strata_pic_request_options_init)",
                    in->struct_size, sizeof(strata_pic_request_options)));
  }
  if (in->recompute > STRATA_PIC_CACHEBLEND) {
    return absl::InvalidArgumentError(
        fmt::format("options.recompute {} is no strata_pic_recompute", in->recompute));
  }
  out.recompute = static_cast<PicRecomputePolicy>(in->recompute);
  out.legolink_tokens = in->legolink_tokens;
  out.check_layer = in->check_layer;
  out.blend_ratio = in->blend_ratio;
  out.tenant = OrEmpty(in->tenant);
  return out;
}

// Hands `plan` to C as a new handle in *out.
strata_status Emit(PicPlan plan, strata_pic_plan** out) {
  auto handle = std::make_unique<strata_pic_plan>();
  for (const PicTokenSpan& span : plan.recompute_from_layer_zero) {
    handle->recompute.push_back(ToC(span));
  }
  handle->impl = std::move(plan);
  *out = handle.release();
  return STRATA_OK;
}

// strata_pic_publish and strata_pic_refresh: `step` on the open request, its plan in *out (when
// out is not NULL).
strata_status Step(strata_pic_connector* connector, const char* request_id, strata_pic_plan** out,
                   absl::StatusOr<PicPlan> (PicConnector::*step)(std::string_view)) {
  return Guard([&] {
    STRATA_C_REQUIRE(connector != nullptr, "connector is NULL");
    STRATA_C_REQUIRE(request_id != nullptr, "request_id is NULL");
    if (out != nullptr) *out = nullptr;
    absl::StatusOr<PicPlan> plan = ((*connector->impl).*step)(request_id);
    if (!plan.ok()) return FromStatus(plan.status());
    return out == nullptr ? STRATA_OK : Emit(*std::move(plan), out);
  });
}

}  // namespace

extern "C" {

void strata_pic_request_options_init(strata_pic_request_options* options) {
  if (options == nullptr) return;
  const PicRequestOptions defaults;
  std::memset(options, 0, sizeof(*options));
  options->struct_size = sizeof(strata_pic_request_options);
  options->recompute = static_cast<uint32_t>(defaults.recompute);
  options->legolink_tokens = defaults.legolink_tokens;
  options->check_layer = defaults.check_layer;
  options->blend_ratio = defaults.blend_ratio;
  options->tenant = nullptr;
}

strata_status strata_pic_connector_create(const strata_connector_options* options,
                                          uint32_t pad_token, strata_pic_connector** out) {
  return Guard([&] {
    STRATA_C_REQUIRE(out != nullptr, "out is NULL");
    *out = nullptr;
    auto parsed = strata::connector::c_abi::ToOptions(options);
    if (!parsed.ok()) return FromStatus(parsed.status());
    auto connector = PicConnector::Create(*parsed, pad_token);
    if (!connector.ok()) return FromStatus(connector.status());
    *out = new strata_pic_connector{std::move(*connector)};
    return STRATA_OK;
  });
}

void strata_pic_connector_destroy(strata_pic_connector* connector) {
  (void)Guard([&] {
    delete connector;
    return STRATA_OK;
  });
}

strata_status strata_pic_markers_from_separator(const uint32_t* prompt, size_t num_prompt_tokens,
                                                const uint32_t* separator, size_t separator_len,
                                                strata_pic_span* out, size_t capacity,
                                                size_t* out_count) {
  return Guard([&] {
    STRATA_C_REQUIRE(prompt != nullptr || num_prompt_tokens == 0, "prompt is NULL");
    STRATA_C_REQUIRE(separator != nullptr || separator_len == 0, "separator is NULL");
    STRATA_C_REQUIRE(out != nullptr || capacity == 0, "out is NULL");
    STRATA_C_REQUIRE(out_count != nullptr, "out_count is NULL");
    auto spans =
        PicConnector::MarkersFromSeparator({prompt, num_prompt_tokens}, {separator, separator_len});
    if (!spans.ok()) return FromStatus(spans.status());
    *out_count = spans->size();
    if (spans->size() > capacity) {
      return strata::connector::c_abi::Fail(
          STRATA_OUT_OF_RANGE, fmt::format("{} spans, room for {}", spans->size(), capacity));
    }
    for (size_t i = 0; i < spans->size(); ++i) out[i] = ToC((*spans)[i]);
    return STRATA_OK;
  });
}

strata_status strata_pic_begin(strata_pic_connector* connector, const char* request_id,
                               const uint32_t* prompt, size_t num_prompt_tokens,
                               const strata_pic_span* chunks, size_t num_chunks,
                               const strata_pic_request_options* options, strata_pic_plan** out) {
  return Guard([&] {
    STRATA_C_REQUIRE(connector != nullptr, "connector is NULL");
    STRATA_C_REQUIRE(request_id != nullptr, "request_id is NULL");
    STRATA_C_REQUIRE(prompt != nullptr || num_prompt_tokens == 0, "prompt is NULL");
    STRATA_C_REQUIRE(chunks != nullptr || num_chunks == 0, "chunks is NULL");
    STRATA_C_REQUIRE(out != nullptr, "out is NULL");
    *out = nullptr;
    auto parsed = ToOptions(options);
    if (!parsed.ok()) return FromStatus(parsed.status());
    std::vector<PicTokenSpan> spans;
    spans.reserve(num_chunks);
    for (size_t i = 0; i < num_chunks; ++i) spans.push_back({chunks[i].begin, chunks[i].end});
    auto plan = connector->impl->Begin(request_id, {prompt, num_prompt_tokens}, spans, *parsed);
    if (!plan.ok()) return FromStatus(plan.status());
    return Emit(*std::move(plan), out);
  });
}

strata_status strata_pic_publish(strata_pic_connector* connector, const char* request_id,
                                 strata_pic_plan** out) {
  return Step(connector, request_id, out, &PicConnector::Publish);
}

strata_status strata_pic_refresh(strata_pic_connector* connector, const char* request_id,
                                 strata_pic_plan** out) {
  return Step(connector, request_id, out, &PicConnector::Refresh);
}

strata_status strata_pic_verify(strata_pic_connector* connector, const char* request_id) {
  return Guard([&] {
    STRATA_C_REQUIRE(connector != nullptr, "connector is NULL");
    STRATA_C_REQUIRE(request_id != nullptr, "request_id is NULL");
    return FromStatus(connector->impl->Verify(request_id));
  });
}

strata_status strata_pic_end(strata_pic_connector* connector, const char* request_id) {
  return Guard([&] {
    STRATA_C_REQUIRE(connector != nullptr, "connector is NULL");
    STRATA_C_REQUIRE(request_id != nullptr, "request_id is NULL");
    return FromStatus(connector->impl->End(request_id));
  });
}

strata_status strata_pic_report_importance(strata_pic_connector* connector, const char* request_id,
                                           size_t chunk, const float* importance,
                                           size_t num_tokens) {
  return Guard([&] {
    STRATA_C_REQUIRE(connector != nullptr, "connector is NULL");
    STRATA_C_REQUIRE(request_id != nullptr, "request_id is NULL");
    STRATA_C_REQUIRE(importance != nullptr || num_tokens == 0, "importance is NULL");
    return FromStatus(connector->impl->ReportImportance(
        request_id, chunk, std::span<const float>(importance, num_tokens)));
  });
}

size_t strata_pic_open_requests(const strata_pic_connector* connector) {
  return connector == nullptr ? 0 : connector->impl->open_requests();
}

strata_status strata_pic_plan_info_get(const strata_pic_plan* plan, strata_pic_plan_info* out) {
  return Guard([&] {
    STRATA_C_REQUIRE(plan != nullptr, "plan is NULL");
    STRATA_C_REQUIRE(out != nullptr, "out is NULL");
    const PicPlan& p = plan->impl;
    std::memset(out, 0, sizeof(*out));
    out->padded_tokens = p.padded_tokens.data();
    out->num_padded_tokens = p.padded_tokens.size();
    out->num_chunks = p.chunks.size();
    out->recompute_from_layer_zero = plan->recompute.data();
    out->num_recompute_spans = plan->recompute.size();
    out->recomputed_tokens = p.recomputed_tokens;
    if (p.pool.has_value()) {
      out->has_pool = 1;
      out->pool_base = p.pool->base;
      out->pool_num_layers = p.pool->num_layers;
      out->pool_num_pages = p.pool->num_pages;
      out->pool_page_bytes = p.pool->page_bytes;
      out->pool_layer_stride_bytes = p.pool->layer_stride_bytes;
      out->pool_block_tokens = p.pool->block_tokens;
      out->pool_keys_rotated = p.pool->keys_rotated ? 1 : 0;
    }
    out->num_blocks = p.block_table.blocks.size();
    out->own_blocks = p.block_table.own_blocks;
    return STRATA_OK;
  });
}

strata_status strata_pic_plan_chunk(const strata_pic_plan* plan, size_t index,
                                    strata_pic_chunk_info* out) {
  return Guard([&] {
    STRATA_C_REQUIRE(plan != nullptr, "plan is NULL");
    STRATA_C_REQUIRE(out != nullptr, "out is NULL");
    if (index >= plan->impl.chunks.size()) {
      return strata::connector::c_abi::Fail(
          STRATA_OUT_OF_RANGE,
          fmt::format("chunk {} of a plan of {}", index, plan->impl.chunks.size()));
    }
    const strata::connector::PicChunk& chunk = plan->impl.chunks[index];
    out->padded = ToC(chunk.padded);
    out->source = ToC(chunk.source);
    out->state = static_cast<uint32_t>(chunk.state);
    out->pool_pages = chunk.pool_pages.data();
    out->num_pool_pages = chunk.pool_pages.size();
    out->why_private = chunk.why_private.c_str();
    out->pool_page_positions =
        chunk.pool_page_positions.empty() ? nullptr : chunk.pool_page_positions.data();
    return STRATA_OK;
  });
}

strata_status strata_pic_plan_block(const strata_pic_plan* plan, size_t index,
                                    strata_pic_block_info* out) {
  return Guard([&] {
    STRATA_C_REQUIRE(plan != nullptr, "plan is NULL");
    STRATA_C_REQUIRE(out != nullptr, "out is NULL");
    const std::vector<strata::connector::PicBlock>& blocks = plan->impl.block_table.blocks;
    if (index >= blocks.size()) {
      return strata::connector::c_abi::Fail(
          STRATA_OUT_OF_RANGE, fmt::format("block {} of a plan of {}", index, blocks.size()));
    }
    const strata::connector::PicBlock& block = blocks[index];
    out->pool = block.pool ? 1 : 0;
    out->index = block.index;
    out->has_fill = block.fill_from_page.has_value() ? 1 : 0;
    out->fill_from_page = block.fill_from_page.value_or(0);
    out->position = block.position;
    return STRATA_OK;
  });
}

void strata_pic_plan_destroy(strata_pic_plan* plan) { delete plan; }

}  // extern "C"

/* Position-independent chunk reuse in C: opaque handles over strata::connector::PicConnector
 * (strata/pic_connector.h, whose contract this follows), under the conventions of
 * strata/connector_c.h (statuses, strata_last_error, *_destroy accepting NULL, no exception
 * crossing the boundary, STRATA_OUT_OF_RANGE with the size needed for a small buffer).
 *
 * A plan is an immutable handle: the arrays its accessors point into live until
 * strata_pic_plan_destroy. A connector handle may be used from any thread; the calls for one
 * request id run one at a time.
 */
#ifndef STRATA_PIC_CONNECTOR_C_H_
#define STRATA_PIC_CONNECTOR_C_H_

#include <stddef.h>
#include <stdint.h>

#include "strata/connector_c.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum strata_pic_recompute {
  STRATA_PIC_MEPIC = 0,     /* block 1 of each shared chunk */
  STRATA_PIC_LEGOLINK = 1,  /* each shared chunk's pads and first legolink_tokens real tokens */
  STRATA_PIC_LEGOLINK0 = 2, /* nothing of a shared chunk (compiled after dummy tokens) */
  STRATA_PIC_CACHEBLEND = 3 /* blend_ratio of the shared chunks' tokens, chosen at check_layer */
} strata_pic_recompute;

typedef enum strata_pic_chunk_state {
  STRATA_PIC_SHARED = 0,  /* read its pool pages in place */
  STRATA_PIC_WRITE = 1,   /* compute its canonical KV into its pool pages, then publish */
  STRATA_PIC_PRIVATE = 2, /* compute it as prompt; why_private says why */
  STRATA_PIC_PENDING = 3  /* another engine writes it: strata_pic_refresh a step later */
} strata_pic_chunk_state;

/* Tokens [begin, end). */
typedef struct strata_pic_span {
  uint32_t begin;
  uint32_t end;
} strata_pic_span;

/* A request's options (PicRequestOptions). Initialize with strata_pic_request_options_init. */
typedef struct strata_pic_request_options {
  uint32_t struct_size; /* sizeof(strata_pic_request_options); set by the init */
  uint32_t recompute;   /* strata_pic_recompute */
  uint32_t legolink_tokens;
  uint32_t check_layer;
  double blend_ratio;
  const char* tenant; /* NULL or "": chunks shared by every request */
} strata_pic_request_options;

void strata_pic_request_options_init(strata_pic_request_options* options);

typedef struct strata_pic_connector strata_pic_connector;
typedef struct strata_pic_plan strata_pic_plan;

/* PicConnector::Create over `options` (its socket, engine, layout, hashing, block_size,
 * io_timeout_ms, backoffs and device backend). */
strata_status strata_pic_connector_create(const strata_connector_options* options,
                                          uint32_t pad_token, strata_pic_connector** out);
/* Ends every open request. */
void strata_pic_connector_destroy(strata_pic_connector* connector);

/* The chunk spans of a prompt whose chunks end at `separator`: *out_count spans written to
 * `out` (may be NULL when capacity is 0); STRATA_OUT_OF_RANGE with *out_count = the spans found
 * when capacity is smaller. STRATA_INVALID_ARGUMENT for an empty separator. */
strata_status strata_pic_markers_from_separator(const uint32_t* prompt, size_t num_prompt_tokens,
                                                const uint32_t* separator, size_t separator_len,
                                                strata_pic_span* out, size_t capacity,
                                                size_t* out_count);

/* PicConnector::Begin; `options` NULL: the defaults. *out is released with
 * strata_pic_plan_destroy. STRATA_INVALID_ARGUMENT for bad spans or options (compute the
 * request as a plain prompt); STRATA_ALREADY_EXISTS for a request id that is open. */
strata_status strata_pic_begin(strata_pic_connector* connector, const char* request_id,
                               const uint32_t* prompt, size_t num_prompt_tokens,
                               const strata_pic_span* chunks, size_t num_chunks,
                               const strata_pic_request_options* options, strata_pic_plan** out);
/* PicConnector::Publish; *out (when `out` is not NULL) is the plan again. */
strata_status strata_pic_publish(strata_pic_connector* connector, const char* request_id,
                                 strata_pic_plan** out);
/* PicConnector::Refresh; *out (when `out` is not NULL) is the plan again. */
strata_status strata_pic_refresh(strata_pic_connector* connector, const char* request_id,
                                 strata_pic_plan** out);
/* PicConnector::Verify: STRATA_ABORTED when the session that held the request's shared pages
 * dropped (recompute what was read from them). */
strata_status strata_pic_verify(strata_pic_connector* connector, const char* request_id);
strata_status strata_pic_end(strata_pic_connector* connector, const char* request_id);
/* PicConnector::ReportImportance: `importance` holds one value per token of the plan's chunk
 * `chunk` (its padded span). STRATA_OUT_OF_RANGE for a chunk past the plan's. */
strata_status strata_pic_report_importance(strata_pic_connector* connector, const char* request_id,
                                           size_t chunk, const float* importance,
                                           size_t num_tokens);
size_t strata_pic_open_requests(const strata_pic_connector* connector);

/* ---- Plans --------------------------------------------------------------------------------- */

typedef struct strata_pic_plan_info {
  const uint32_t* padded_tokens;
  size_t num_padded_tokens;
  size_t num_chunks;
  /* Computed from layer 0, ascending and disjoint. */
  const strata_pic_span* recompute_from_layer_zero;
  size_t num_recompute_spans;
  uint64_t recomputed_tokens;
  /* The device pool as this process maps it (has_pool 0: no chunk is in it): page p of layer l
   * lies at pool_base + l * pool_layer_stride_bytes + p * pool_page_bytes. */
  int32_t has_pool;
  uintptr_t pool_base;
  uint32_t pool_num_layers;
  uint32_t pool_num_pages;
  uint64_t pool_page_bytes;
  uint64_t pool_layer_stride_bytes;
  uint32_t pool_block_tokens;
  /* 1: the layout is rope_applied, and the pages hold keys after RoPE at each chunk's canonical
   * positions 0..n: an engine copies a shared chunk's pages into its own blocks re-rotating the
   * keys by padded.begin. 0: keys before RoPE, read in place (PicPoolView::keys_rotated). */
  int32_t pool_keys_rotated;
  /* The block table (PicPlan::block_table): num_blocks entries, strata_pic_plan_block. */
  size_t num_blocks;
  uint32_t own_blocks;
} strata_pic_plan_info;

typedef struct strata_pic_chunk_info {
  strata_pic_span padded; /* in the padded prompt, leading pads included */
  strata_pic_span source; /* in the prompt as given */
  uint32_t state;         /* strata_pic_chunk_state */
  const uint32_t* pool_pages;
  size_t num_pool_pages;
  const char* why_private; /* "" unless STRATA_PIC_PRIVATE or STRATA_PIC_PENDING */
  /* A thinned shared chunk's: each pool page's first token's position in the chunk's padded
   * span (num_pool_pages of them); NULL for a whole chunk (page i holds block i). */
  const uint32_t* pool_page_positions;
} strata_pic_chunk_info;

/* One block of the padded prompt as the attention reads it (PicBlock): pool 1, pool page `index`
 * read in place; pool 0, the request's own block `index` (of own_blocks), filled first from pool
 * page fill_from_page when has_fill (re-rotating its keys when pool_keys_rotated). Its tokens
 * are at positions [position, position + pool_block_tokens) of the padded prompt (a thinned
 * chunk's dropped blocks have no entry). */
typedef struct strata_pic_block_info {
  int32_t pool;
  uint32_t index;
  int32_t has_fill;
  uint32_t fill_from_page;
  uint32_t position;
} strata_pic_block_info;

strata_status strata_pic_plan_info_get(const strata_pic_plan* plan, strata_pic_plan_info* out);
/* STRATA_OUT_OF_RANGE for an index past the plan's blocks. */
strata_status strata_pic_plan_block(const strata_pic_plan* plan, size_t index,
                                    strata_pic_block_info* out);
/* STRATA_OUT_OF_RANGE for an index past the plan's chunks. */
strata_status strata_pic_plan_chunk(const strata_pic_plan* plan, size_t index,
                                    strata_pic_chunk_info* out);
void strata_pic_plan_destroy(strata_pic_plan* plan);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* STRATA_PIC_CONNECTOR_C_H_ */

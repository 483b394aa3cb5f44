/* The Strata connector's C ABI: opaque handles over the C++ API in strata/connector.h, for
 * engines and bindings that cannot link C++ directly.
 *
 * Conventions:
 *   - Every fallible function returns a strata_status; STRATA_OK is 0 and the other values are
 *     the canonical status codes (absl / gRPC numbering). On failure, strata_last_error() returns
 *     a message for the calling thread, valid until that thread's next call into this library.
 *   - No C++ exception crosses this boundary; an unexpected one becomes STRATA_INTERNAL
 *     (STRATA_RESOURCE_EXHAUSTED for an allocation failure).
 *   - Handles are created by *_create / *_build / *_deserialize and released by the matching
 *     *_destroy, which accepts NULL. Passing a NULL handle elsewhere is STRATA_INVALID_ARGUMENT.
 *   - Pointers passed in are borrowed for the duration of the call only, except the KV tensors
 *     given to strata_worker_register_kv_caches, whose memory must stay valid while the worker
 *     may copy to or from it.
 *   - Output buffers too small for a result: STRATA_OUT_OF_RANGE, with the size needed stored in
 *     the count / size out-parameter; nothing is lost (call again with a larger buffer).
 *   - Thread-safety follows the C++ classes: a scheduler handle may be used from any thread; a
 *     worker handle from one thread at a time; a metadata handle is immutable.
 */
#ifndef STRATA_CONNECTOR_C_H_
#define STRATA_CONNECTOR_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum strata_status {
  STRATA_OK = 0,
  STRATA_CANCELLED = 1,
  STRATA_UNKNOWN = 2,
  STRATA_INVALID_ARGUMENT = 3,
  STRATA_DEADLINE_EXCEEDED = 4,
  STRATA_NOT_FOUND = 5,
  STRATA_ALREADY_EXISTS = 6,
  STRATA_PERMISSION_DENIED = 7,
  STRATA_RESOURCE_EXHAUSTED = 8,
  STRATA_FAILED_PRECONDITION = 9,
  STRATA_ABORTED = 10,
  STRATA_OUT_OF_RANGE = 11,
  STRATA_UNIMPLEMENTED = 12,
  STRATA_INTERNAL = 13,
  STRATA_UNAVAILABLE = 14,
  STRATA_DATA_LOSS = 15,
  STRATA_UNAUTHENTICATED = 16
} strata_status;

/* The calling thread's message for its last failed call ("" when none). */
const char* strata_last_error(void);

/* The layout enums below are the values of the C++ enums strata::KvKind, strata::KvDtype and
 * strata::PositionalFormat (core/kv_layout.h): *_create checks them there and rejects a value
 * that names no enumerator with STRATA_INVALID_ARGUMENT. This ABI takes no names for them; the
 * CLI and the Python binding parse "bf16", "bfloat16", ... with strata::ParseKvDtype and its
 * siblings. */
typedef enum strata_kv_kind { STRATA_KV_MHA = 1, STRATA_KV_MLA_LATENT = 2 } strata_kv_kind;

typedef enum strata_dtype {
  STRATA_DTYPE_FLOAT16 = 1,
  STRATA_DTYPE_BFLOAT16 = 2,
  STRATA_DTYPE_FLOAT32 = 3,
  STRATA_DTYPE_FP8_E4M3 = 4,
  STRATA_DTYPE_INT8 = 5
} strata_dtype;

typedef enum strata_positional {
  STRATA_POSITIONAL_ROPE_APPLIED = 1,
  STRATA_POSITIONAL_NOPE = 2
} strata_positional;

/* Options of both sides (strata::connector::ConnectorOptions). Initialize with
 * strata_options_init, then set what differs; strings are copied by *_create. */
typedef struct strata_connector_options {
  uint32_t struct_size; /* sizeof(strata_connector_options); set by strata_options_init */
  const char* socket_path;
  const char* engine_id;
  /* KvLayout */
  const char* model_id;
  uint32_t kv_kind; /* strata_kv_kind */
  uint32_t num_layers;
  uint32_t num_kv_heads;
  uint32_t head_dim;
  uint32_t dtype; /* strata_dtype */
  uint32_t tp_rank;
  uint32_t tp_world_size;
  uint32_t positional; /* strata_positional */
  uint32_t chunk_tokens;
  /* Keys */
  const char* hash_algorithm; /* "xxh3_128" or "sha256_cbor" */
  const char* hash_seed;
  /* Engine */
  uint32_t block_size;
  /* Timing */
  uint32_t lookup_budget_ms;
  uint32_t io_timeout_ms;
  uint32_t reconnect_min_backoff_ms;
  uint32_t reconnect_max_backoff_ms;
  uint32_t lease_ms;
  /* Behaviour (0 or 1) */
  int32_t enable_load;
  int32_t enable_save;
  int32_t store_partial_chunks;
  int32_t verify_checksums;
  /* Hits below the daemon's host tier load between steps: strata_worker_get_finished reports
   * them (ConnectorOptions::async_loads). 0 by default. */
  int32_t async_loads;
  /* Worker */
  const char* device_backend; /* "auto", "host" / "cpu", "cuda" */
  int32_t device_ordinal;
} strata_connector_options;

/* Fills `options` with the C++ defaults (no socket path, no layout). */
void strata_options_init(strata_connector_options* options);

typedef struct strata_scheduler strata_scheduler;
typedef struct strata_worker strata_worker;
typedef struct strata_metadata strata_metadata;

/* ---- Scheduler ---------------------------------------------------------------------------- */

strata_status strata_scheduler_create(const strata_connector_options* options,
                                      strata_scheduler** out);
void strata_scheduler_destroy(strata_scheduler* scheduler);

/* SchedulerConnector::GetNumNewMatchedTokens. tenant_salt and lora_name may be NULL. */
strata_status strata_scheduler_get_num_new_matched_tokens(
    strata_scheduler* scheduler, const char* request_id, const uint32_t* prompt_tokens,
    size_t num_prompt_tokens, int64_t num_computed_tokens, const char* tenant_salt,
    const char* lora_name, int64_t* out_num_tokens, int32_t* out_load_async);

/* SchedulerConnector::Prefetch: a queued request's prompt chunks that the daemon holds only on
 * disk are promoted into its host tier in the background. tenant_salt and lora_name may be NULL.
 * *out_num_chunks is how many chunks the daemon queued (0 when nothing needed promotion or the
 * daemon could not take the hint). A prefetch is a hint: STRATA_OK whatever the daemon answers
 * (its failures are counted in the scheduler's stats); the request need not be known to the
 * scheduler and is not recorded. */
strata_status strata_scheduler_prefetch(strata_scheduler* scheduler, const char* request_id,
                                        const uint32_t* prompt_tokens, size_t num_prompt_tokens,
                                        const char* tenant_salt, const char* lora_name,
                                        uint32_t* out_num_chunks);

strata_status strata_scheduler_update_state_after_alloc(strata_scheduler* scheduler,
                                                        const char* request_id,
                                                        const int32_t* block_ids,
                                                        size_t num_block_ids,
                                                        int64_t num_external_tokens);

typedef enum strata_scheduled_kind {
  STRATA_SCHEDULED_NEW = 0,
  STRATA_SCHEDULED_RUNNING = 1,
  STRATA_SCHEDULED_RESUMED = 2
} strata_scheduled_kind;

typedef struct strata_scheduled_request {
  const char* request_id;
  uint32_t kind; /* strata_scheduled_kind */
  int64_t num_computed_tokens;
  int64_t num_scheduled_tokens;
  const int32_t* block_ids;
  size_t num_block_ids;
  const uint32_t* prompt_tokens; /* optional (NULL / 0) */
  size_t num_prompt_tokens;
  const char* tenant_salt; /* optional */
  const char* lora_name;   /* optional */
} strata_scheduled_request;

/* SchedulerConnector::BuildConnectorMeta; *out is released with strata_metadata_destroy. */
strata_status strata_scheduler_build_meta(strata_scheduler* scheduler,
                                          const strata_scheduled_request* requests,
                                          size_t num_requests,
                                          const char* const* finished_request_ids,
                                          size_t num_finished, strata_metadata** out);

/* *out_keep_blocks: 1 when the blocks must stay allocated until the saves finish (never). */
strata_status strata_scheduler_request_finished(strata_scheduler* scheduler, const char* request_id,
                                                const int32_t* block_ids, size_t num_block_ids,
                                                int32_t* out_keep_blocks);

/* ---- Metadata ----------------------------------------------------------------------------- */

/* Writes the serialized metadata to `buffer` (may be NULL when capacity is 0); *out_size is
 * its size. STRATA_OUT_OF_RANGE when capacity is smaller. */
strata_status strata_metadata_serialize(const strata_metadata* metadata, uint8_t* buffer,
                                        size_t capacity, size_t* out_size);
strata_status strata_metadata_deserialize(const uint8_t* bytes, size_t size, strata_metadata** out);
strata_status strata_metadata_counts(const strata_metadata* metadata, size_t* out_num_loads,
                                     size_t* out_num_saves);
void strata_metadata_destroy(strata_metadata* metadata);

/* ---- Worker ------------------------------------------------------------------------------- */

/* A strided tensor: address of element 0, `ndim` sizes and strides (in elements). */
typedef struct strata_tensor {
  void* data;
  uint32_t ndim;
  const int64_t* shape;
  const int64_t* strides;
} strata_tensor;

/* One layer's paged KV (see strata::connector::LayerKvCache): `kv` alone for the stacked
 * FlashAttention form or an MLA latent; `kv` = K and `v` = V for separate tensors. */
typedef struct strata_layer_kv {
  strata_tensor kv;
  const strata_tensor* v; /* NULL unless K and V are separate tensors */
} strata_layer_kv;

strata_status strata_worker_create(const strata_connector_options* options, strata_worker** out);
void strata_worker_destroy(strata_worker* worker);

strata_status strata_worker_register_kv_caches(strata_worker* worker, const strata_layer_kv* layers,
                                               size_t num_layers);
/* has_engine_stream 0: no engine stream; else engine_stream is the engine's cudaStream_t. */
strata_status strata_worker_start_load_kv(strata_worker* worker, const strata_metadata* metadata,
                                          int32_t has_engine_stream, uintptr_t engine_stream);
strata_status strata_worker_wait_for_layer_load(strata_worker* worker, uint32_t layer);
strata_status strata_worker_save_kv_layer(strata_worker* worker, uint32_t layer,
                                          int32_t has_engine_stream, uintptr_t engine_stream);
strata_status strata_worker_wait_for_save(strata_worker* worker);
/* WorkerConnector::GetFinished, for engines that handle asynchronous loads (options.async_loads
 * and a lookup that answered *out_load_async = 1). finished_request_ids (NULL when
 * num_finished is 0) are the engine's requests that finished since the last call. Writes the ids
 * of the requests whose asynchronous loads are over (loaded or failed; each reported once; their
 * failed blocks come from the strata_worker_get_block_ids_with_load_errors call that follows)
 * into `out`, each NUL-terminated, one after another: *out_bytes bytes, *out_count ids.
 * STRATA_OUT_OF_RANGE with *out_bytes = the bytes needed when capacity is smaller: the ids stay
 * pending for the next call. */
strata_status strata_worker_get_finished(strata_worker* worker,
                                         const char* const* finished_request_ids,
                                         size_t num_finished, char* out, size_t capacity,
                                         size_t* out_bytes, size_t* out_count);
/* Block ids whose load failed since the last successful call, sorted. STRATA_OUT_OF_RANGE with
 * *out_count = the number pending when capacity is smaller (they stay pending). */
strata_status strata_worker_get_block_ids_with_load_errors(strata_worker* worker, int32_t* out,
                                                           size_t capacity, size_t* out_count);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* STRATA_CONNECTOR_C_H_ */

#include "connector/src/c_abi.h"

#include <utility>

#include "core/kv_layout.h"
#include "core/status_util.h"

namespace strata::connector::c_abi {
namespace {

// The C enums are the core enums' values (connector_c.h says so): a cast converts them.
static_assert(STRATA_KV_MHA == static_cast<int>(strata::KvKind::kMha));
static_assert(STRATA_KV_MLA_LATENT == static_cast<int>(strata::KvKind::kMlaLatent));
static_assert(STRATA_DTYPE_FLOAT16 == static_cast<int>(strata::KvDtype::kFloat16));
static_assert(STRATA_DTYPE_BFLOAT16 == static_cast<int>(strata::KvDtype::kBfloat16));
static_assert(STRATA_DTYPE_FLOAT32 == static_cast<int>(strata::KvDtype::kFloat32));
static_assert(STRATA_DTYPE_FP8_E4M3 == static_cast<int>(strata::KvDtype::kFp8E4m3));
static_assert(STRATA_DTYPE_INT8 == static_cast<int>(strata::KvDtype::kInt8));
static_assert(STRATA_POSITIONAL_ROPE_APPLIED ==
              static_cast<int>(strata::PositionalFormat::kRopeApplied));
static_assert(STRATA_POSITIONAL_NOPE == static_cast<int>(strata::PositionalFormat::kNope));

thread_local std::string last_error;

}  // namespace

strata_status Fail(strata_status code, std::string message) {
  last_error = std::move(message);
  return code;
}

strata_status FromStatus(const absl::Status& status) {
  if (status.ok()) return STRATA_OK;
  return Fail(static_cast<strata_status>(status.code()),
              std::string(status.message().data(), status.message().size()));
}

const std::string& LastError() { return last_error; }

void ClearLastError() { last_error.clear(); }

absl::StatusOr<ConnectorOptions> ToOptions(const strata_connector_options* in) {
  if (in == nullptr) return absl::InvalidArgumentError("options is NULL");
  if (in->struct_size != sizeof(strata_connector_options)) {
    return absl::InvalidArgumentError(
        fmt::format("options.struct_size is {}, this library expects {} (call "
                    "strata_options_init)",
                    in->struct_size, sizeof(strata_connector_options)));
  }
  ConnectorOptions out;
  out.socket_path = OrEmpty(in->socket_path);
  if (in->engine_id != nullptr) out.engine_id = in->engine_id;
  strata::KvLayout& layout = out.layout;
  layout.model_id = OrEmpty(in->model_id);
  // The C enums are the core enums' values (the static_asserts above); core checks them.
  absl::StatusOr<strata::KvKind> kind = strata::KvKindFromValue(in->kv_kind);
  if (!kind.ok()) return strata::Annotate(kind.status(), "options.kv_kind");
  layout.kind = *kind;
  absl::StatusOr<strata::KvDtype> dtype = strata::KvDtypeFromValue(in->dtype);
  if (!dtype.ok()) return strata::Annotate(dtype.status(), "options.dtype");
  layout.dtype = *dtype;
  absl::StatusOr<strata::PositionalFormat> positional =
      strata::PositionalFormatFromValue(in->positional);
  if (!positional.ok()) return strata::Annotate(positional.status(), "options.positional");
  layout.positional = *positional;
  layout.num_layers = in->num_layers;
  layout.num_kv_heads = in->num_kv_heads;
  layout.head_dim = in->head_dim;
  layout.tp_rank = in->tp_rank;
  layout.tp_world_size = in->tp_world_size;
  layout.chunk_tokens = in->chunk_tokens;
  if (in->hash_algorithm != nullptr) {
    auto algorithm = strata::ParseHashAlgorithm(in->hash_algorithm);
    if (!algorithm.ok()) return algorithm.status();
    out.hashing.algorithm = *algorithm;
  }
  if (in->hash_seed != nullptr) out.hashing.seed = in->hash_seed;
  out.block_size = in->block_size;
  out.lookup_budget = std::chrono::milliseconds(in->lookup_budget_ms);
  out.io_timeout = std::chrono::milliseconds(in->io_timeout_ms);
  out.reconnect_min_backoff = std::chrono::milliseconds(in->reconnect_min_backoff_ms);
  out.reconnect_max_backoff = std::chrono::milliseconds(in->reconnect_max_backoff_ms);
  out.lease_ms = in->lease_ms;
  out.enable_load = in->enable_load != 0;
  out.enable_save = in->enable_save != 0;
  out.store_partial_chunks = in->store_partial_chunks != 0;
  out.verify_checksums = in->verify_checksums != 0;
  out.async_loads = in->async_loads != 0;
  if (in->device_backend != nullptr) {
    auto backend = strata::storage::ParseDeviceBackend(in->device_backend);
    if (!backend.ok()) return backend.status();
    out.device_backend = *backend;
  }
  out.device_ordinal = in->device_ordinal;
  if (absl::Status valid = out.Validate(); !valid.ok()) return valid;
  return out;
}

}  // namespace strata::connector::c_abi

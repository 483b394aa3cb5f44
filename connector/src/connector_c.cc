// The C ABI over the C++ connector. Every entry point catches everything: no exception crosses
// into C.
#include "strata/connector_c.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <iterator>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "connector/src/c_abi.h"
#include "core/chunk_key.h"
#include "core/kv_layout.h"
#include "core/status_util.h"
#include "fmt/format.h"
#include "strata/connector.h"

struct strata_scheduler {
  std::unique_ptr<strata::connector::SchedulerConnector> impl;
};
struct strata_worker {
  std::unique_ptr<strata::connector::WorkerConnector> impl;
  std::vector<int32_t> pending_errors;        // fetched from the worker, not yet handed out
  std::vector<std::string> pending_finished;  // likewise, for strata_worker_get_finished
};
struct strata_metadata {
  strata::connector::ConnectorMetadata impl;
};

namespace {

using strata::connector::ConnectorOptions;
using strata::connector::c_abi::Fail;
using strata::connector::c_abi::FromStatus;
using strata::connector::c_abi::Guard;
using strata::connector::c_abi::OrEmpty;
using strata::connector::c_abi::ToOptions;

// A scheduler call's request; the caller has checked request_id and prompt_tokens.
strata::connector::RequestInfo ToRequest(const char* request_id, const uint32_t* prompt_tokens,
                                         size_t num_prompt_tokens, const char* tenant_salt,
                                         const char* lora_name) {
  return {.request_id = request_id,
          .prompt_tokens = {prompt_tokens, num_prompt_tokens},
          .tenant_salt = OrEmpty(tenant_salt),
          .lora_name = OrEmpty(lora_name)};
}

absl::StatusOr<strata::connector::KvTensor> ToTensor(const strata_tensor& in, std::string_view name,
                                                     size_t layer) {
  if (in.ndim > 8 || (in.ndim > 0 && (in.shape == nullptr || in.strides == nullptr))) {
    return absl::InvalidArgumentError(
        fmt::format("layer {}: {} has ndim {} and shape/strides {}/{}", layer, name, in.ndim,
                    in.shape == nullptr ? "NULL" : "set", in.strides == nullptr ? "NULL" : "set"));
  }
  strata::connector::KvTensor out;
  out.data = in.data;
  out.shape.assign(in.shape, in.shape + in.ndim);
  out.strides.assign(in.strides, in.strides + in.ndim);
  return out;
}

}  // namespace

extern "C" {

const char* strata_last_error(void) { return strata::connector::c_abi::LastError().c_str(); }

void strata_options_init(strata_connector_options* options) {
  if (options == nullptr) return;
  const ConnectorOptions defaults;
  std::memset(options, 0, sizeof(*options));
  options->struct_size = sizeof(strata_connector_options);
  options->engine_id = nullptr;
  options->kv_kind = STRATA_KV_MHA;
  options->dtype = STRATA_DTYPE_BFLOAT16;
  options->tp_world_size = 1;
  options->positional = STRATA_POSITIONAL_ROPE_APPLIED;
  options->chunk_tokens = strata::KvLayout::kDefaultChunkTokens;
  options->hash_algorithm = "xxh3_128";
  options->hash_seed = "0";
  options->block_size = defaults.block_size;
  options->lookup_budget_ms = static_cast<uint32_t>(defaults.lookup_budget.count());
  options->io_timeout_ms = static_cast<uint32_t>(defaults.io_timeout.count());
  options->reconnect_min_backoff_ms = static_cast<uint32_t>(defaults.reconnect_min_backoff.count());
  options->reconnect_max_backoff_ms = static_cast<uint32_t>(defaults.reconnect_max_backoff.count());
  options->lease_ms = defaults.lease_ms;
  options->enable_load = defaults.enable_load ? 1 : 0;
  options->enable_save = defaults.enable_save ? 1 : 0;
  options->store_partial_chunks = defaults.store_partial_chunks ? 1 : 0;
  options->verify_checksums = defaults.verify_checksums ? 1 : 0;
  options->async_loads = defaults.async_loads ? 1 : 0;
  options->device_backend = "auto";
  options->device_ordinal = 0;
}

strata_status strata_scheduler_create(const strata_connector_options* options,
                                      strata_scheduler** out) {
  return Guard([&] {
    STRATA_C_REQUIRE(out != nullptr, "out is NULL");
    *out = nullptr;
    auto parsed = ToOptions(options);
    if (!parsed.ok()) return FromStatus(parsed.status());
    auto scheduler = strata::connector::SchedulerConnector::Create(*parsed);
    if (!scheduler.ok()) return FromStatus(scheduler.status());
    *out = new strata_scheduler{std::move(*scheduler)};
    return STRATA_OK;
  });
}

void strata_scheduler_destroy(strata_scheduler* scheduler) {
  try {
    delete scheduler;
  } catch (...) {
  }
}

strata_status strata_scheduler_get_num_new_matched_tokens(
    strata_scheduler* scheduler, const char* request_id, const uint32_t* prompt_tokens,
    size_t num_prompt_tokens, int64_t num_computed_tokens, const char* tenant_salt,
    const char* lora_name, int64_t* out_num_tokens, int32_t* out_load_async) {
  return Guard([&] {
    STRATA_C_REQUIRE(scheduler != nullptr, "scheduler is NULL");
    STRATA_C_REQUIRE(request_id != nullptr, "request_id is NULL");
    STRATA_C_REQUIRE(prompt_tokens != nullptr || num_prompt_tokens == 0, "prompt_tokens is NULL");
    STRATA_C_REQUIRE(out_num_tokens != nullptr, "out_num_tokens is NULL");
    const strata::connector::MatchResult result = scheduler->impl->GetNumNewMatchedTokens(
        ToRequest(request_id, prompt_tokens, num_prompt_tokens, tenant_salt, lora_name),
        num_computed_tokens);
    *out_num_tokens = result.num_tokens;
    if (out_load_async != nullptr) *out_load_async = result.load_async ? 1 : 0;
    return STRATA_OK;
  });
}

strata_status strata_scheduler_prefetch(strata_scheduler* scheduler, const char* request_id,
                                        const uint32_t* prompt_tokens, size_t num_prompt_tokens,
                                        const char* tenant_salt, const char* lora_name,
                                        uint32_t* out_num_chunks) {
  return Guard([&] {
    STRATA_C_REQUIRE(scheduler != nullptr, "scheduler is NULL");
    STRATA_C_REQUIRE(request_id != nullptr, "request_id is NULL");
    STRATA_C_REQUIRE(prompt_tokens != nullptr || num_prompt_tokens == 0, "prompt_tokens is NULL");
    STRATA_C_REQUIRE(out_num_chunks != nullptr, "out_num_chunks is NULL");
    *out_num_chunks = scheduler->impl->Prefetch(
        ToRequest(request_id, prompt_tokens, num_prompt_tokens, tenant_salt, lora_name));
    return STRATA_OK;
  });
}

strata_status strata_scheduler_update_state_after_alloc(strata_scheduler* scheduler,
                                                        const char* request_id,
                                                        const int32_t* block_ids,
                                                        size_t num_block_ids,
                                                        int64_t num_external_tokens) {
  return Guard([&] {
    STRATA_C_REQUIRE(scheduler != nullptr, "scheduler is NULL");
    STRATA_C_REQUIRE(request_id != nullptr, "request_id is NULL");
    STRATA_C_REQUIRE(block_ids != nullptr || num_block_ids == 0, "block_ids is NULL");
    return FromStatus(scheduler->impl->UpdateStateAfterAlloc(request_id, {block_ids, num_block_ids},
                                                             num_external_tokens));
  });
}

strata_status strata_scheduler_build_meta(strata_scheduler* scheduler,
                                          const strata_scheduled_request* requests,
                                          size_t num_requests,
                                          const char* const* finished_request_ids,
                                          size_t num_finished, strata_metadata** out) {
  return Guard([&] {
    STRATA_C_REQUIRE(out != nullptr, "out is NULL");
    *out = nullptr;
    STRATA_C_REQUIRE(scheduler != nullptr, "scheduler is NULL");
    STRATA_C_REQUIRE(requests != nullptr || num_requests == 0, "requests is NULL");
    STRATA_C_REQUIRE(finished_request_ids != nullptr || num_finished == 0,
                     "finished_request_ids is NULL");
    strata::connector::SchedulerStep step;
    step.requests.reserve(num_requests);
    for (size_t i = 0; i < num_requests; ++i) {
      const strata_scheduled_request& r = requests[i];
      if (r.request_id == nullptr) {
        return Fail(STRATA_INVALID_ARGUMENT, fmt::format("requests[{}].request_id is NULL", i));
      }
      if (r.kind > STRATA_SCHEDULED_RESUMED) {
        return Fail(STRATA_INVALID_ARGUMENT, fmt::format("requests[{}].kind is {}", i, r.kind));
      }
      if ((r.block_ids == nullptr && r.num_block_ids > 0) ||
          (r.prompt_tokens == nullptr && r.num_prompt_tokens > 0)) {
        return Fail(STRATA_INVALID_ARGUMENT, fmt::format("requests[{}] has a NULL array", i));
      }
      strata::connector::ScheduledRequest& out_request = step.requests.emplace_back();
      out_request.request_id = r.request_id;
      out_request.kind = static_cast<strata::connector::ScheduledKind>(r.kind);
      out_request.num_computed_tokens = r.num_computed_tokens;
      out_request.num_scheduled_tokens = r.num_scheduled_tokens;
      out_request.block_ids.assign(r.block_ids, r.block_ids + r.num_block_ids);
      out_request.prompt_tokens.assign(r.prompt_tokens, r.prompt_tokens + r.num_prompt_tokens);
      out_request.tenant_salt = OrEmpty(r.tenant_salt);
      out_request.lora_name = OrEmpty(r.lora_name);
    }
    for (size_t i = 0; i < num_finished; ++i) {
      if (finished_request_ids[i] == nullptr) {
        return Fail(STRATA_INVALID_ARGUMENT, fmt::format("finished_request_ids[{}] is NULL", i));
      }
      step.finished_request_ids.emplace_back(finished_request_ids[i]);
    }
    *out = new strata_metadata{scheduler->impl->BuildConnectorMeta(step)};
    return STRATA_OK;
  });
}

strata_status strata_scheduler_request_finished(strata_scheduler* scheduler, const char* request_id,
                                                const int32_t* block_ids, size_t num_block_ids,
                                                int32_t* out_keep_blocks) {
  return Guard([&] {
    STRATA_C_REQUIRE(scheduler != nullptr, "scheduler is NULL");
    STRATA_C_REQUIRE(request_id != nullptr, "request_id is NULL");
    STRATA_C_REQUIRE(block_ids != nullptr || num_block_ids == 0, "block_ids is NULL");
    const bool keep = scheduler->impl->RequestFinished(request_id, {block_ids, num_block_ids});
    if (out_keep_blocks != nullptr) *out_keep_blocks = keep ? 1 : 0;
    return STRATA_OK;
  });
}

strata_status strata_metadata_serialize(const strata_metadata* metadata, uint8_t* buffer,
                                        size_t capacity, size_t* out_size) {
  return Guard([&] {
    STRATA_C_REQUIRE(metadata != nullptr, "metadata is NULL");
    STRATA_C_REQUIRE(out_size != nullptr, "out_size is NULL");
    const std::string bytes = metadata->impl.Serialize();
    *out_size = bytes.size();
    if (capacity < bytes.size()) {
      return Fail(STRATA_OUT_OF_RANGE, fmt::format("metadata needs {} bytes; the buffer has {}",
                                                   bytes.size(), capacity));
    }
    STRATA_C_REQUIRE(buffer != nullptr, "buffer is NULL");
    std::memcpy(buffer, bytes.data(), bytes.size());
    return STRATA_OK;
  });
}

strata_status strata_metadata_deserialize(const uint8_t* bytes, size_t size,
                                          strata_metadata** out) {
  return Guard([&] {
    STRATA_C_REQUIRE(out != nullptr, "out is NULL");
    *out = nullptr;
    STRATA_C_REQUIRE(bytes != nullptr || size == 0, "bytes is NULL");
    auto meta = strata::connector::ConnectorMetadata::Deserialize(
        std::string_view(reinterpret_cast<const char*>(bytes), size));
    if (!meta.ok()) return FromStatus(meta.status());
    *out = new strata_metadata{std::move(*meta)};
    return STRATA_OK;
  });
}

strata_status strata_metadata_counts(const strata_metadata* metadata, size_t* out_num_loads,
                                     size_t* out_num_saves) {
  return Guard([&] {
    STRATA_C_REQUIRE(metadata != nullptr, "metadata is NULL");
    if (out_num_loads != nullptr) *out_num_loads = metadata->impl.loads.size();
    if (out_num_saves != nullptr) *out_num_saves = metadata->impl.saves.size();
    return STRATA_OK;
  });
}

void strata_metadata_destroy(strata_metadata* metadata) { delete metadata; }

strata_status strata_worker_create(const strata_connector_options* options, strata_worker** out) {
  return Guard([&] {
    STRATA_C_REQUIRE(out != nullptr, "out is NULL");
    *out = nullptr;
    auto parsed = ToOptions(options);
    if (!parsed.ok()) return FromStatus(parsed.status());
    auto worker = strata::connector::WorkerConnector::Create(*parsed);
    if (!worker.ok()) return FromStatus(worker.status());
    *out = new strata_worker{std::move(*worker), {}};
    return STRATA_OK;
  });
}

void strata_worker_destroy(strata_worker* worker) {
  try {
    delete worker;
  } catch (...) {
  }
}

strata_status strata_worker_register_kv_caches(strata_worker* worker, const strata_layer_kv* layers,
                                               size_t num_layers) {
  return Guard([&] {
    STRATA_C_REQUIRE(worker != nullptr, "worker is NULL");
    STRATA_C_REQUIRE(layers != nullptr || num_layers == 0, "layers is NULL");
    std::vector<strata::connector::LayerKvCache> caches;
    caches.reserve(num_layers);
    for (size_t l = 0; l < num_layers; ++l) {
      strata::connector::LayerKvCache& cache = caches.emplace_back();
      auto kv = ToTensor(layers[l].kv, "kv", l);
      if (!kv.ok()) return FromStatus(kv.status());
      cache.kv = std::move(*kv);
      if (layers[l].v != nullptr) {
        auto v = ToTensor(*layers[l].v, "v", l);
        if (!v.ok()) return FromStatus(v.status());
        cache.v = std::move(*v);
      }
    }
    return FromStatus(worker->impl->RegisterKvCaches(caches));
  });
}

strata_status strata_worker_start_load_kv(strata_worker* worker, const strata_metadata* metadata,
                                          int32_t has_engine_stream, uintptr_t engine_stream) {
  return Guard([&] {
    STRATA_C_REQUIRE(worker != nullptr, "worker is NULL");
    STRATA_C_REQUIRE(metadata != nullptr, "metadata is NULL");
    strata::connector::StepOptions step;
    if (has_engine_stream != 0) step.engine_stream = engine_stream;
    return FromStatus(worker->impl->StartLoadKv(metadata->impl, step));
  });
}

strata_status strata_worker_wait_for_layer_load(strata_worker* worker, uint32_t layer) {
  return Guard([&] {
    STRATA_C_REQUIRE(worker != nullptr, "worker is NULL");
    return FromStatus(worker->impl->WaitForLayerLoad(layer));
  });
}

strata_status strata_worker_save_kv_layer(strata_worker* worker, uint32_t layer,
                                          int32_t has_engine_stream, uintptr_t engine_stream) {
  return Guard([&] {
    STRATA_C_REQUIRE(worker != nullptr, "worker is NULL");
    strata::connector::StepOptions step;
    if (has_engine_stream != 0) step.engine_stream = engine_stream;
    return FromStatus(worker->impl->SaveKvLayer(layer, step));
  });
}

strata_status strata_worker_wait_for_save(strata_worker* worker) {
  return Guard([&] {
    STRATA_C_REQUIRE(worker != nullptr, "worker is NULL");
    return FromStatus(worker->impl->WaitForSave());
  });
}

strata_status strata_worker_get_finished(strata_worker* worker,
                                         const char* const* finished_request_ids,
                                         size_t num_finished, char* out, size_t capacity,
                                         size_t* out_bytes, size_t* out_count) {
  return Guard([&] {
    STRATA_C_REQUIRE(worker != nullptr, "worker is NULL");
    STRATA_C_REQUIRE(out_bytes != nullptr && out_count != nullptr,
                     "out_bytes or out_count is NULL");
    STRATA_C_REQUIRE(finished_request_ids != nullptr || num_finished == 0,
                     "finished_request_ids is NULL");
    std::vector<std::string> finished;
    finished.reserve(num_finished);
    for (size_t i = 0; i < num_finished; ++i) {
      STRATA_C_REQUIRE(finished_request_ids[i] != nullptr, "a finished request id is NULL");
      finished.emplace_back(finished_request_ids[i]);
    }
    std::vector<std::string> fresh = worker->impl->GetFinished(finished).finished_recving;
    std::vector<std::string>& pending = worker->pending_finished;
    pending.insert(pending.end(), std::make_move_iterator(fresh.begin()),
                   std::make_move_iterator(fresh.end()));
    size_t bytes = 0;
    for (const std::string& id : pending) bytes += id.size() + 1;
    *out_bytes = bytes;
    *out_count = pending.size();
    if (capacity < bytes) {
      return Fail(STRATA_OUT_OF_RANGE,
                  fmt::format("{} request ids pending take {} bytes; the buffer holds {}",
                              pending.size(), bytes, capacity));
    }
    STRATA_C_REQUIRE(out != nullptr || pending.empty(), "out is NULL");
    for (const std::string& id : pending) {
      std::memcpy(out, id.c_str(), id.size() + 1);
      out += id.size() + 1;
    }
    pending.clear();
    return STRATA_OK;
  });
}

strata_status strata_worker_get_block_ids_with_load_errors(strata_worker* worker, int32_t* out,
                                                           size_t capacity, size_t* out_count) {
  return Guard([&] {
    STRATA_C_REQUIRE(worker != nullptr, "worker is NULL");
    STRATA_C_REQUIRE(out_count != nullptr, "out_count is NULL");
    std::vector<int32_t> fresh = worker->impl->GetBlockIdsWithLoadErrors();
    std::vector<int32_t>& pending = worker->pending_errors;
    pending.insert(pending.end(), fresh.begin(), fresh.end());
    std::sort(pending.begin(), pending.end());
    pending.erase(std::unique(pending.begin(), pending.end()), pending.end());
    *out_count = pending.size();
    if (capacity < pending.size()) {
      return Fail(STRATA_OUT_OF_RANGE, fmt::format("{} block ids pending; the buffer holds {}",
                                                   pending.size(), capacity));
    }
    STRATA_C_REQUIRE(out != nullptr || pending.empty(), "out is NULL");
    std::copy(pending.begin(), pending.end(), out);
    pending.clear();
    return STRATA_OK;
  });
}

}  // extern "C"

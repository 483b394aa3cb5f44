// strata_connector: the Python binding of the C++ connector (strata/connector.h), for the vLLM
// adapter in connector/python/strata_vllm, and of the page store (strata/page_store.h), for the
// SGLang HiCache backend in connector/python/strata_sglang, and of position-independent reuse
// (strata/pic_connector.h), and (submodule `kernels`, python_kernels.cc) of the kernels a model
// runner executes such plans with. Thin: values are converted at the
// boundary, blocking calls release the GIL, and a non-OK status becomes an exception (ValueError
// for invalid arguments, strata_connector.StrataError otherwise). Tensors are passed as (data_ptr,
// shape, strides) tuples, so the binding needs no torch.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "connector/src/python_kernels.h"
#include "core/kv_layout.h"
#include "strata/connector.h"
#include "strata/page_store.h"
#include "strata/pic_connector.h"

namespace py = pybind11;

namespace strata::connector {
namespace {

PyObject* strata_error = nullptr;

void Check(const absl::Status& status) {
  if (status.ok()) return;
  const std::string message(status.message().data(), status.message().size());
  if (status.code() == absl::StatusCode::kInvalidArgument) throw py::value_error(message);
  PyErr_SetString(strata_error, message.c_str());
  throw py::error_already_set();
}

// A role's session counters, as stats() keys.
void AddSessionStats(py::dict& d, const SessionStats& session) {
  d["session_connects"] = session.connects;
  d["session_disconnects"] = session.disconnects;
  d["session_timeouts"] = session.timeouts;
  d["late_replies"] = session.late_replies;
}

template <class T>
T Take(absl::StatusOr<T> value) {
  Check(value.status());
  return std::move(*value);
}

// A layout flattened for Python, enums as names (parsed by core/kv_layout.h, so torch's dtype
// names such as "torch.bfloat16" work). Both option classes below carry one.
struct PyLayoutFields {
  std::string model_id;
  std::string kv_kind = KvKindName(KvLayout().kind);
  uint32_t num_layers = 0;
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  std::string dtype = DtypeName(KvLayout().dtype);
  uint32_t tp_rank = 0;
  uint32_t tp_world_size = 1;
  std::string positional = PositionalFormatName(KvLayout().positional);

  // ValueError naming an unknown enum name.
  KvLayout ToLayout(uint32_t chunk_tokens) const {
    KvLayout layout;
    layout.model_id = model_id;
    layout.kind = Take(ParseKvKind(kv_kind));
    layout.dtype = Take(ParseKvDtype(dtype));
    layout.positional = Take(ParsePositionalFormat(positional));
    layout.num_layers = num_layers;
    layout.num_kv_heads = num_kv_heads;
    layout.head_dim = head_dim;
    layout.tp_rank = tp_rank;
    layout.tp_world_size = tp_world_size;
    layout.chunk_tokens = chunk_tokens;
    return layout;
  }
};

// Python-facing connector options: the layout flattened, durations in milliseconds.
struct PyOptions : PyLayoutFields {
  std::string socket_path;
  std::string engine_id = "engine";
  uint32_t chunk_tokens = KvLayout::kDefaultChunkTokens;
  std::string hash_algorithm = "xxh3_128";
  std::string hash_seed = "0";
  uint32_t block_size = 16;
  uint32_t lookup_budget_ms = 20;
  uint32_t io_timeout_ms = 5000;
  uint32_t transfer_hold_ms = 30'000;
  uint32_t transfer_lookup_budget_ms = 1000;
  uint32_t reconnect_min_backoff_ms = 100;
  uint32_t reconnect_max_backoff_ms = 1000;
  uint32_t lease_ms = 0;
  bool enable_load = true;
  bool enable_save = true;
  bool store_partial_chunks = false;
  bool whole_blocks_only = false;
  bool verify_checksums = true;
  bool async_loads = false;
  int32_t null_block_id = -1;
  std::string device_backend = "auto";
  int device_ordinal = 0;

  ConnectorOptions ToOptions() const {
    ConnectorOptions o;
    o.socket_path = socket_path;
    o.engine_id = engine_id;
    o.layout = ToLayout(chunk_tokens);
    o.hashing.algorithm = Take(ParseHashAlgorithm(hash_algorithm));
    o.hashing.seed = hash_seed;
    o.block_size = block_size;
    o.lookup_budget = std::chrono::milliseconds(lookup_budget_ms);
    o.io_timeout = std::chrono::milliseconds(io_timeout_ms);
    o.reconnect_min_backoff = std::chrono::milliseconds(reconnect_min_backoff_ms);
    o.reconnect_max_backoff = std::chrono::milliseconds(reconnect_max_backoff_ms);
    o.lease_ms = lease_ms;
    o.enable_load = enable_load;
    o.enable_save = enable_save;
    o.store_partial_chunks = store_partial_chunks;
    o.whole_blocks_only = whole_blocks_only;
    o.verify_checksums = verify_checksums;
    o.async_loads = async_loads;
    o.null_block_id = null_block_id;
    o.transfer_hold = std::chrono::milliseconds(transfer_hold_ms);
    o.transfer_lookup_budget = std::chrono::milliseconds(transfer_lookup_budget_ms);
    o.device_backend = Take(storage::ParseDeviceBackend(device_backend));
    o.device_ordinal = device_ordinal;
    Check(o.Validate());
    return o;
  }
};

// Python-facing page-store options: one page's layout flattened (page_tokens is its
// chunk_tokens), durations in milliseconds.
struct PyPageStoreOptions : PyLayoutFields {
  std::string socket_path;
  std::string engine_id = "sglang";
  uint32_t page_tokens = 0;
  uint32_t lookup_budget_ms = 20;
  uint32_t io_timeout_ms = 5000;
  uint32_t reconnect_min_backoff_ms = 100;
  uint32_t reconnect_max_backoff_ms = 1000;
  uint32_t lease_ms = 0;

  PageStoreOptions ToOptions() const {
    PageStoreOptions o;
    o.socket_path = socket_path;
    o.engine_id = engine_id;
    o.layout = ToLayout(page_tokens);
    o.lookup_budget = std::chrono::milliseconds(lookup_budget_ms);
    o.io_timeout = std::chrono::milliseconds(io_timeout_ms);
    o.reconnect_min_backoff = std::chrono::milliseconds(reconnect_min_backoff_ms);
    o.reconnect_max_backoff = std::chrono::milliseconds(reconnect_max_backoff_ms);
    o.lease_ms = lease_ms;
    Check(o.Validate());
    return o;
  }
};

// Pages as Python gives them: per page a list of (address, size_bytes) segments.
using PySegments = std::vector<std::pair<uintptr_t, uint64_t>>;

std::vector<HostPage> ToPages(const std::vector<PySegments>& pages) {
  std::vector<HostPage> out(pages.size());
  for (size_t i = 0; i < pages.size(); ++i) {
    for (const auto& [address, size_bytes] : pages[i]) {
      out[i].segments.push_back({reinterpret_cast<std::byte*>(address), size_bytes});
    }
  }
  return out;
}

ScheduledKind ParseKind(const std::string& kind) {
  if (kind == "new") return ScheduledKind::kNew;
  if (kind == "running") return ScheduledKind::kRunning;
  if (kind == "resumed") return ScheduledKind::kResumed;
  throw py::value_error("kind must be 'new', 'running' or 'resumed', not '" + kind + "'");
}

KvTransfer ParseKvTransfer(const std::string& name) {
  if (name == "none") return KvTransfer::kNone;
  if (name == "send") return KvTransfer::kSend;
  if (name == "receive") return KvTransfer::kReceive;
  throw py::value_error("kv_transfer must be 'none', 'send' or 'receive', not '" + name + "'");
}

py::dict SpecToDict(const TransferSpec& spec) {
  py::dict d;
  d["request_id"] = spec.request_id;
  d["token_begin"] = spec.token_begin;
  d["token_end"] = spec.token_end;
  d["num_tokens"] = spec.tokens.size();
  d["block_ids"] = spec.block_ids;
  d["fail"] = spec.fail;
  d["async"] = spec.async;
  d["hold_ms"] = spec.hold_ms;
  return d;
}

// (data_ptr, shape, strides)
using PyTensor = std::tuple<uintptr_t, std::vector<int64_t>, std::vector<int64_t>>;

KvTensor ToTensor(const PyTensor& t) {
  return {reinterpret_cast<void*>(std::get<0>(t)), std::get<1>(t), std::get<2>(t)};
}

py::tuple SpanToTuple(const PicTokenSpan& span) { return py::make_tuple(span.begin, span.end); }

std::vector<PicTokenSpan> ToSpans(const std::vector<std::pair<uint32_t, uint32_t>>& pairs) {
  std::vector<PicTokenSpan> spans;
  spans.reserve(pairs.size());
  for (const auto& [begin, end] : pairs) spans.push_back({begin, end});
  return spans;
}

std::string_view ChunkStateName(PicChunkState state) {
  switch (state) {
    case PicChunkState::kShared:
      return "shared";
    case PicChunkState::kWrite:
      return "write";
    case PicChunkState::kPrivate:
      return "private";
    case PicChunkState::kPending:
      return "pending";
  }
  return "private";
}

// A plan as plain Python values: spans are (begin, end) tuples, states their names, the pool a
// dict (or None), the block table a list of {"pool", "index", "fill_from_page" (or None),
// "position"}.
py::dict PlanToDict(const PicPlan& plan) {
  py::dict d;
  d["padded_tokens"] = plan.padded_tokens;
  py::list chunks;
  for (const PicChunk& chunk : plan.chunks) {
    py::dict c;
    c["padded"] = SpanToTuple(chunk.padded);
    c["source"] = SpanToTuple(chunk.source);
    c["state"] = ChunkStateName(chunk.state);
    c["pool_pages"] = chunk.pool_pages;
    c["pool_page_positions"] = chunk.pool_page_positions;
    c["why_private"] = chunk.why_private;
    chunks.append(c);
  }
  d["chunks"] = chunks;
  py::list blocks;
  for (const PicBlock& block : plan.block_table.blocks) {
    py::dict b;
    b["pool"] = block.pool;
    b["index"] = block.index;
    b["fill_from_page"] =
        block.fill_from_page.has_value() ? py::object(py::int_(*block.fill_from_page)) : py::none();
    b["position"] = block.position;
    blocks.append(b);
  }
  d["block_table"] = blocks;
  d["own_blocks"] = plan.block_table.own_blocks;
  py::list recompute;
  for (const PicTokenSpan& span : plan.recompute_from_layer_zero) {
    recompute.append(SpanToTuple(span));
  }
  d["recompute_from_layer_zero"] = recompute;
  d["recomputed_tokens"] = plan.recomputed_tokens;
  d["compile_dummies"] = plan.compile_dummies;
  if (plan.pool.has_value()) {
    py::dict pool;
    pool["base"] = plan.pool->base;
    pool["num_layers"] = plan.pool->num_layers;
    pool["num_pages"] = plan.pool->num_pages;
    pool["page_bytes"] = plan.pool->page_bytes;
    pool["layer_stride_bytes"] = plan.pool->layer_stride_bytes;
    pool["block_tokens"] = plan.pool->block_tokens;
    pool["keys_rotated"] = plan.pool->keys_rotated;
    d["pool"] = pool;
  } else {
    d["pool"] = py::none();
  }
  return d;
}

// PicConnector::Publish or Refresh on the open request, the GIL released, its plan as a dict.
template <absl::StatusOr<PicPlan> (PicConnector::*Step)(std::string_view)>
py::dict PlanStep(PicConnector& connector, const std::string& request_id) {
  absl::StatusOr<PicPlan> plan;
  {
    py::gil_scoped_release release;
    plan = (connector.*Step)(request_id);
  }
  return PlanToDict(Take(std::move(plan)));
}

}  // namespace
}  // namespace strata::connector

PYBIND11_MODULE(strata_connector, m) {
  using namespace strata;             // NOLINT: the binding names many of its types
  using namespace strata::connector;  // NOLINT
  m.doc() = "Strata connector: the engine side of the Strata KV-cache daemon";
  strata_error = PyErr_NewException("strata_connector.StrataError", PyExc_RuntimeError, nullptr);
  m.attr("StrataError") = py::handle(strata_error);
  m.attr("PROTOCOL_VERSION") = 1;
  BindKernels(m);

  m.def(
      "canonical_dtype",
      [](const std::string& name) { return std::string(DtypeName(Take(ParseKvDtype(name)))); },
      py::arg("name"),
      "The canonical name of a KV dtype name or alias (\"torch.bfloat16\" -> \"bf16\"); "
      "ValueError naming the accepted names when unknown.");

  py::class_<PyOptions>(m, "ConnectorOptions")
      .def(py::init<>())
      .def_readwrite("socket_path", &PyOptions::socket_path)
      .def_readwrite("engine_id", &PyOptions::engine_id)
      .def_readwrite("model_id", &PyOptions::model_id)
      .def_readwrite("kv_kind", &PyOptions::kv_kind)
      .def_readwrite("num_layers", &PyOptions::num_layers)
      .def_readwrite("num_kv_heads", &PyOptions::num_kv_heads)
      .def_readwrite("head_dim", &PyOptions::head_dim)
      .def_readwrite("dtype", &PyOptions::dtype)
      .def_readwrite("tp_rank", &PyOptions::tp_rank)
      .def_readwrite("tp_world_size", &PyOptions::tp_world_size)
      .def_readwrite("positional", &PyOptions::positional)
      .def_readwrite("chunk_tokens", &PyOptions::chunk_tokens)
      .def_readwrite("hash_algorithm", &PyOptions::hash_algorithm)
      .def_readwrite("hash_seed", &PyOptions::hash_seed)
      .def_readwrite("block_size", &PyOptions::block_size)
      .def_readwrite("lookup_budget_ms", &PyOptions::lookup_budget_ms)
      .def_readwrite("io_timeout_ms", &PyOptions::io_timeout_ms)
      .def_readwrite("reconnect_min_backoff_ms", &PyOptions::reconnect_min_backoff_ms)
      .def_readwrite("reconnect_max_backoff_ms", &PyOptions::reconnect_max_backoff_ms)
      .def_readwrite("lease_ms", &PyOptions::lease_ms)
      .def_readwrite("enable_load", &PyOptions::enable_load)
      .def_readwrite("enable_save", &PyOptions::enable_save)
      .def_readwrite("store_partial_chunks", &PyOptions::store_partial_chunks)
      .def_readwrite("whole_blocks_only", &PyOptions::whole_blocks_only)
      .def_readwrite("verify_checksums", &PyOptions::verify_checksums)
      .def_readwrite("async_loads", &PyOptions::async_loads)
      .def_readwrite("null_block_id", &PyOptions::null_block_id)
      .def_readwrite("transfer_hold_ms", &PyOptions::transfer_hold_ms)
      .def_readwrite("transfer_lookup_budget_ms", &PyOptions::transfer_lookup_budget_ms)
      .def_readwrite("device_backend", &PyOptions::device_backend)
      .def_readwrite("device_ordinal", &PyOptions::device_ordinal)
      .def("validate", [](const PyOptions& o) { (void)o.ToOptions(); });

  py::class_<ScheduledRequest>(m, "ScheduledRequest")
      .def(py::init([](std::string request_id, const std::string& kind, int64_t num_computed_tokens,
                       int64_t num_scheduled_tokens, std::vector<int32_t> block_ids,
                       std::vector<uint32_t> prompt_tokens, std::string tenant_salt,
                       std::string lora_name, int64_t save_limit_tokens) {
             return ScheduledRequest{
                 std::move(request_id),  ParseKind(kind),      num_computed_tokens,
                 num_scheduled_tokens,   std::move(block_ids), std::move(prompt_tokens),
                 std::move(tenant_salt), std::move(lora_name), save_limit_tokens};
           }),
           py::arg("request_id"), py::arg("kind"), py::arg("num_computed_tokens"),
           py::arg("num_scheduled_tokens"), py::arg("block_ids") = std::vector<int32_t>{},
           py::arg("prompt_tokens") = std::vector<uint32_t>{}, py::arg("tenant_salt") = "",
           py::arg("lora_name") = "", py::arg("save_limit_tokens") = -1)
      .def_readonly("request_id", &ScheduledRequest::request_id)
      .def_readonly("num_computed_tokens", &ScheduledRequest::num_computed_tokens)
      .def_readonly("num_scheduled_tokens", &ScheduledRequest::num_scheduled_tokens)
      .def_readonly("block_ids", &ScheduledRequest::block_ids);

  py::class_<ConnectorMetadata>(m, "ConnectorMetadata")
      .def(py::init<>())
      .def_readonly("block_size", &ConnectorMetadata::block_size)
      .def_readonly("chunk_tokens", &ConnectorMetadata::chunk_tokens)
      .def_readonly("finished_request_ids", &ConnectorMetadata::finished_request_ids)
      .def_property_readonly("loads",
                             [](const ConnectorMetadata& m) {
                               py::list out;
                               for (const auto& spec : m.loads) out.append(SpecToDict(spec));
                               return out;
                             })
      .def_property_readonly("saves",
                             [](const ConnectorMetadata& m) {
                               py::list out;
                               for (const auto& spec : m.saves) out.append(SpecToDict(spec));
                               return out;
                             })
      .def("serialize", [](const ConnectorMetadata& m) { return py::bytes(m.Serialize()); })
      .def_static("deserialize",
                  [](const py::bytes& bytes) {
                    return Take(ConnectorMetadata::Deserialize(std::string(bytes)));
                  })
      .def(py::pickle([](const ConnectorMetadata& m) { return py::bytes(m.Serialize()); },
                      [](const py::bytes& bytes) {
                        return Take(ConnectorMetadata::Deserialize(std::string(bytes)));
                      }))
      .def("__eq__", [](const ConnectorMetadata& a, const ConnectorMetadata& b) { return a == b; });

  py::class_<SchedulerConnector>(m, "SchedulerConnector")
      .def(py::init([](const PyOptions& options) {
        return Take(SchedulerConnector::Create(options.ToOptions()));
      }))
      .def(
          "get_num_new_matched_tokens",
          [](SchedulerConnector& s, const std::string& request_id,
             const std::vector<uint32_t>& prompt_tokens, int64_t num_computed_tokens,
             const std::string& tenant_salt, const std::string& lora_name,
             const std::string& kv_transfer, const std::string& source_node,
             const std::string& decode_node) {
            const KvTransfer transfer = ParseKvTransfer(kv_transfer);
            MatchResult result;
            {
              py::gil_scoped_release release;
              result = s.GetNumNewMatchedTokens({.request_id = request_id,
                                                 .prompt_tokens = prompt_tokens,
                                                 .tenant_salt = tenant_salt,
                                                 .lora_name = lora_name,
                                                 .kv_transfer = transfer,
                                                 .source_node = source_node,
                                                 .decode_node = decode_node},
                                                num_computed_tokens);
            }
            return py::make_tuple(result.num_tokens, result.load_async);
          },
          py::arg("request_id"), py::arg("prompt_tokens"), py::arg("num_computed_tokens"),
          py::arg("tenant_salt") = "", py::arg("lora_name") = "", py::arg("kv_transfer") = "none",
          py::arg("source_node") = "", py::arg("decode_node") = "")
      .def(
          "daemon_node",
          [](SchedulerConnector& s) {
            NodeAddress node;
            {
              py::gil_scoped_release release;
              node = s.DaemonNode();
            }
            return py::make_tuple(node.node_id, node.remote_address);
          },
          "(node_id, remote_address) of the daemon among its peers; empty strings without a "
          "remote tier")
      .def(
          "prefetch",
          [](SchedulerConnector& s, const std::string& request_id,
             const std::vector<uint32_t>& prompt_tokens, const std::string& tenant_salt,
             const std::string& lora_name) {
            py::gil_scoped_release release;
            return s.Prefetch({request_id, prompt_tokens, tenant_salt, lora_name});
          },
          py::arg("request_id"), py::arg("prompt_tokens"), py::arg("tenant_salt") = "",
          py::arg("lora_name") = "")
      .def(
          "update_state_after_alloc",
          [](SchedulerConnector& s, const std::string& request_id,
             const std::vector<int32_t>& block_ids, int64_t num_external_tokens) {
            Check(s.UpdateStateAfterAlloc(request_id, block_ids, num_external_tokens));
          },
          py::arg("request_id"), py::arg("block_ids"), py::arg("num_external_tokens"))
      .def(
          "make_load_async",
          [](SchedulerConnector& s, const std::string& request_id) {
            Check(s.MakeLoadAsync(request_id));
          },
          py::arg("request_id"))
      .def(
          "build_connector_meta",
          [](SchedulerConnector& s, std::vector<ScheduledRequest> requests,
             std::vector<std::string> finished_request_ids) {
            SchedulerStep step{std::move(requests), std::move(finished_request_ids)};
            py::gil_scoped_release release;
            return s.BuildConnectorMeta(step);
          },
          py::arg("requests"), py::arg("finished_request_ids") = std::vector<std::string>{})
      .def(
          "request_finished",
          [](SchedulerConnector& s, const std::string& request_id,
             const std::vector<int32_t>& block_ids) {
            return s.RequestFinished(request_id, block_ids);
          },
          py::arg("request_id"), py::arg("block_ids") = std::vector<int32_t>{})
      .def("stats", [](const SchedulerConnector& s) {
        const SchedulerStats st = s.Stats();
        py::dict d;
        d["lookups"] = st.lookups;
        d["lookup_failures"] = st.lookup_failures;
        d["lookup_hit_tokens"] = st.lookup_hit_tokens;
        d["async_loads_offered"] = st.async_loads_offered;
        d["unknown_sources"] = st.unknown_sources;
        d["prefetches"] = st.prefetches;
        d["prefetch_failures"] = st.prefetch_failures;
        d["prefetch_chunks"] = st.prefetch_chunks;
        d["loads_planned"] = st.loads_planned;
        d["saves_planned"] = st.saves_planned;
        AddSessionStats(d, st.session);
        d["connected"] = st.connected;
        return d;
      });

  py::class_<WorkerConnector>(m, "WorkerConnector")
      .def(py::init([](const PyOptions& options) {
        return Take(WorkerConnector::Create(options.ToOptions()));
      }))
      .def_property_readonly(
          "backend", [](const WorkerConnector& w) { return w.runtime().Capabilities().backend; })
      .def(
          "register_kv_caches",
          [](WorkerConnector& w,
             const std::vector<std::pair<PyTensor, std::optional<PyTensor>>>& layers) {
            std::vector<LayerKvCache> caches;
            for (const auto& [kv, v] : layers) {
              LayerKvCache& cache = caches.emplace_back();
              cache.kv = ToTensor(kv);
              if (v.has_value()) cache.v = ToTensor(*v);
            }
            absl::Status status;
            {
              py::gil_scoped_release release;
              status = w.RegisterKvCaches(caches);
            }
            Check(status);
          },
          py::arg("layers"))
      .def(
          "start_load_kv",
          [](WorkerConnector& w, const ConnectorMetadata& meta,
             std::optional<uintptr_t> engine_stream) {
            absl::Status status;
            {
              py::gil_scoped_release release;
              status = w.StartLoadKv(meta, {engine_stream});
            }
            Check(status);
          },
          py::arg("metadata"), py::arg("engine_stream") = std::nullopt)
      .def(
          "wait_for_layer_load",
          [](WorkerConnector& w, uint32_t layer) {
            absl::Status status;
            {
              py::gil_scoped_release release;
              status = w.WaitForLayerLoad(layer);
            }
            Check(status);
          },
          py::arg("layer"))
      .def(
          "save_kv_layer",
          [](WorkerConnector& w, uint32_t layer, std::optional<uintptr_t> engine_stream) {
            absl::Status status;
            {
              py::gil_scoped_release release;
              status = w.SaveKvLayer(layer, {engine_stream});
            }
            Check(status);
          },
          py::arg("layer"), py::arg("engine_stream") = std::nullopt)
      .def("wait_for_save",
           [](WorkerConnector& w) {
             absl::Status status;
             {
               py::gil_scoped_release release;
               status = w.WaitForSave();
             }
             Check(status);
           })
      .def(
          "get_finished",
          [](WorkerConnector& w, const std::vector<std::string>& finished_request_ids) {
            const FinishedRequests done = w.GetFinished(finished_request_ids);
            return py::make_tuple(done.finished_sending, done.finished_recving,
                                  done.failed_recving);
          },
          py::arg("finished_request_ids") = std::vector<std::string>{})
      .def("get_block_ids_with_load_errors",
           [](WorkerConnector& w) { return w.GetBlockIdsWithLoadErrors(); })
      .def("stats", [](const WorkerConnector& w) {
        const WorkerStats st = w.Stats();
        py::dict d;
        d["chunks_loaded"] = st.chunks_loaded;
        d["chunks_failed"] = st.chunks_failed;
        d["bytes_loaded"] = st.bytes_loaded;
        d["chunks_saved"] = st.chunks_saved;
        d["chunks_already_present"] = st.chunks_already_present;
        d["chunks_save_failed"] = st.chunks_save_failed;
        d["chunks_corrupt"] = st.chunks_corrupt;
        d["chunks_decoded"] = st.chunks_decoded;
        d["encoded_bytes_loaded"] = st.encoded_bytes_loaded;
        d["bytes_saved"] = st.bytes_saved;
        d["async_requests_loaded"] = st.async_requests_loaded;
        d["async_requests_in_flight"] = st.async_requests_in_flight;
        d["arena_prefaulted_bytes"] = st.arena_prefaulted_bytes;
        AddSessionStats(d, st.session);
        d["connected"] = st.connected;
        return d;
      });

  py::class_<PyPageStoreOptions>(m, "PageStoreOptions")
      .def(py::init<>())
      .def_readwrite("socket_path", &PyPageStoreOptions::socket_path)
      .def_readwrite("engine_id", &PyPageStoreOptions::engine_id)
      .def_readwrite("model_id", &PyPageStoreOptions::model_id)
      .def_readwrite("kv_kind", &PyPageStoreOptions::kv_kind)
      .def_readwrite("num_layers", &PyPageStoreOptions::num_layers)
      .def_readwrite("num_kv_heads", &PyPageStoreOptions::num_kv_heads)
      .def_readwrite("head_dim", &PyPageStoreOptions::head_dim)
      .def_readwrite("dtype", &PyPageStoreOptions::dtype)
      .def_readwrite("tp_rank", &PyPageStoreOptions::tp_rank)
      .def_readwrite("tp_world_size", &PyPageStoreOptions::tp_world_size)
      .def_readwrite("positional", &PyPageStoreOptions::positional)
      .def_readwrite("page_tokens", &PyPageStoreOptions::page_tokens)
      .def_readwrite("lookup_budget_ms", &PyPageStoreOptions::lookup_budget_ms)
      .def_readwrite("io_timeout_ms", &PyPageStoreOptions::io_timeout_ms)
      .def_readwrite("reconnect_min_backoff_ms", &PyPageStoreOptions::reconnect_min_backoff_ms)
      .def_readwrite("reconnect_max_backoff_ms", &PyPageStoreOptions::reconnect_max_backoff_ms)
      .def_readwrite("lease_ms", &PyPageStoreOptions::lease_ms)
      .def("validate", [](const PyPageStoreOptions& o) { (void)o.ToOptions(); })
      .def("page_bytes", [](const PyPageStoreOptions& o) {
        const PageStoreOptions options = o.ToOptions();
        return options.layout.chunk_bytes(options.layout.chunk_tokens);
      });

  // Host memory goes in as integer addresses and byte lengths, so no torch is needed. Every
  // call releases the GIL while it talks to the daemon and copies.
  py::class_<PageStore>(m, "PageStore")
      .def(py::init([](const PyPageStoreOptions& options) {
             return Take(PageStore::Create(options.ToOptions()));
           }),
           py::arg("options"))
      .def_property_readonly("page_bytes", &PageStore::page_bytes)
      .def(
          "key_of",
          [](const PageStore& s, const std::string& key) { return s.KeyOf(key).ToString(); },
          py::arg("key"), "The daemon key (ChunkKey text form) of page key `key`.")
      .def(
          "exists",
          [](PageStore& s, const std::vector<std::string>& keys) {
            absl::StatusOr<size_t> n;
            {
              py::gil_scoped_release release;
              n = s.Exists(keys);
            }
            return Take(std::move(n));
          },
          py::arg("keys"),
          "How many leading keys the daemon has; StrataError when it cannot be asked.")
      .def(
          "put",
          [](PageStore& s, const std::vector<std::string>& keys,
             const std::vector<PySegments>& pages) {
            const std::vector<HostPage> host_pages = ToPages(pages);
            absl::StatusOr<std::vector<bool>> stored;
            {
              py::gil_scoped_release release;
              stored = s.Put(keys, host_pages);
            }
            return Take(std::move(stored));
          },
          py::arg("keys"), py::arg("pages"),
          "Stores each page (a list of (address, size_bytes) segments) under its key; one flag "
          "per page.")
      .def(
          "get",
          [](PageStore& s, const std::vector<std::string>& keys,
             const std::vector<PySegments>& pages) {
            const std::vector<HostPage> host_pages = ToPages(pages);
            absl::StatusOr<std::vector<bool>> found;
            {
              py::gil_scoped_release release;
              found = s.Get(keys, host_pages);
            }
            return Take(std::move(found));
          },
          py::arg("keys"), py::arg("pages"),
          "Copies the pages of `keys` into host memory; one flag per page (verified bytes). "
          "The first missing or failed page ends the run.")
      .def("stats", [](const PageStore& s) {
        const PageStoreStats st = s.Stats();
        py::dict d;
        d["lookups"] = st.lookups;
        d["lookup_failures"] = st.lookup_failures;
        d["pages_stored"] = st.pages_stored;
        d["pages_already_present"] = st.pages_already_present;
        d["pages_store_failed"] = st.pages_store_failed;
        d["pages_loaded"] = st.pages_loaded;
        d["pages_missing"] = st.pages_missing;
        d["pages_corrupt"] = st.pages_corrupt;
        d["bytes_stored"] = st.bytes_stored;
        d["bytes_loaded"] = st.bytes_loaded;
        d["connected"] = st.connected;
        return d;
      });

  // Position-independent chunks (strata/pic_connector.h). Plans are dicts (PlanToDict); chunk
  // spans go in as (begin, end) pairs. Round trips release the GIL.
  py::class_<PicConnector>(m, "PicConnector")
      .def(py::init([](const PyOptions& options, uint32_t pad_token) {
             return Take(PicConnector::Create(options.ToOptions(), pad_token));
           }),
           py::arg("options"), py::arg("pad_token") = 0)
      .def_static(
          "markers_from_separator",
          [](const std::vector<uint32_t>& prompt, const std::vector<uint32_t>& separator) {
            py::list out;
            for (const PicTokenSpan& span :
                 Take(PicConnector::MarkersFromSeparator(prompt, separator))) {
              out.append(SpanToTuple(span));
            }
            return out;
          },
          py::arg("prompt"), py::arg("separator"),
          "The chunk spans of a prompt whose chunks end at a separator token sequence.")
      .def(
          "begin",
          [](PicConnector& c, const std::string& request_id, const std::vector<uint32_t>& prompt,
             const std::vector<std::pair<uint32_t, uint32_t>>& chunks, const std::string& recompute,
             uint32_t legolink_tokens, uint32_t check_layer, double blend_ratio,
             std::string tenant) {
            const PicRequestOptions options{.recompute = Take(ParsePicRecomputePolicy(recompute)),
                                            .legolink_tokens = legolink_tokens,
                                            .check_layer = check_layer,
                                            .blend_ratio = blend_ratio,
                                            .tenant = std::move(tenant)};
            const std::vector<PicTokenSpan> spans = ToSpans(chunks);
            absl::StatusOr<PicPlan> plan;
            {
              py::gil_scoped_release release;
              plan = c.Begin(request_id, prompt, spans, options);
            }
            return PlanToDict(Take(std::move(plan)));
          },
          py::arg("request_id"), py::arg("prompt"), py::arg("chunks"),
          py::arg("recompute") = "mepic", py::arg("legolink_tokens") = 16,
          py::arg("check_layer") = 1, py::arg("blend_ratio") = 0.15, py::arg("tenant") = "",
          "Plans a request; ValueError for bad chunk spans or options (fall back to prefix "
          "caching).")
      .def("publish", PlanStep<&PicConnector::Publish>, py::arg("request_id"),
           "Commits the request's written chunks; returns its plan again.")
      .def("refresh", PlanStep<&PicConnector::Refresh>, py::arg("request_id"),
           "Places the request's pending chunks again; returns its plan again.")
      .def(
          "verify",
          [](const PicConnector& c, const std::string& request_id) {
            absl::Status status;
            {
              py::gil_scoped_release release;
              status = c.Verify(request_id);
            }
            if (status.code() == absl::StatusCode::kAborted) return false;
            Check(status);
            return true;
          },
          py::arg("request_id"),
          "False when the session holding the request's shared pages dropped (recompute).")
      .def(
          "report_importance",
          [](PicConnector& c, const std::string& request_id, size_t chunk,
             const std::vector<float>& importance) {
            absl::Status status;
            {
              py::gil_scoped_release release;
              status = c.ReportImportance(request_id, chunk, importance);
            }
            Check(status);
          },
          py::arg("request_id"), py::arg("chunk"), py::arg("importance"),
          "Reports the attention each token of the plan's chunk `chunk` received (H2O's "
          "importance, one value per padded token): Compress with drop_h2o keeps the heaviest "
          "blocks.")
      .def(
          "end",
          [](PicConnector& c, const std::string& request_id) {
            absl::Status status;
            {
              py::gil_scoped_release release;
              status = c.End(request_id);
            }
            Check(status);
          },
          py::arg("request_id"))
      .def_property_readonly("open_requests", &PicConnector::open_requests);
}

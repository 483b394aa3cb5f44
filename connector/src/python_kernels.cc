// strata_connector.kernels: the CPU kernels a Python model runner needs to execute a
// position-independent plan (strata/pic_connector.h) over the daemon's pool pages: the RoPE
// table, fused-RoPE paged attention over two caches with masked keys (kernels/paged_attention.h),
// and CacheBlend's token selection (kernels/blend.h). Tensors go in as (address, dtype name,
// shape, strides in elements) tuples, so no torch is needed; integer metadata as lists. Each call
// releases the GIL while the kernel runs; a bad argument is ValueError with the kernel's message.
#include "connector/src/python_kernels.h"

#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/kv_layout.h"
#include "kernels/blend.h"
#include "kernels/kv_transfer.h"
#include "kernels/paged_attention.h"
#include "kernels/rope.h"

namespace py = pybind11;

namespace strata::connector {
namespace {

using kernels::ConstHeadsView;
using kernels::ConstMatrixView;
using kernels::HeadsView;
using kernels::PagedKvLayer;
using kernels::PagedKvSpec;

// (address, dtype, shape, strides): strides in elements, one per dimension.
using PyKernelTensor =
    std::tuple<uintptr_t, std::string, std::vector<int64_t>, std::vector<int64_t>>;

void CheckKernel(const absl::Status& status) {
  if (!status.ok()) throw py::value_error(std::string(status.message()));
}

KvDtype DtypeOf(const PyKernelTensor& t) {
  absl::StatusOr<KvDtype> dtype = ParseKvDtype(std::get<1>(t));
  CheckKernel(dtype.status());
  return *dtype;
}

void CheckRank(const PyKernelTensor& t, size_t rank, const char* what) {
  if (std::get<2>(t).size() != rank || std::get<3>(t).size() != rank) {
    throw py::value_error(std::string(what) + " needs " + std::to_string(rank) +
                          " dimensions with a stride each");
  }
}

// The largest element offset a tensor reaches, plus one (0 for an empty one).
int64_t ExtentElems(const PyKernelTensor& t) {
  int64_t extent = 1;
  for (size_t i = 0; i < std::get<2>(t).size(); ++i) {
    const int64_t size = std::get<2>(t)[i];
    if (size <= 0) return 0;
    extent += (size - 1) * std::get<3>(t)[i];
  }
  return extent;
}

// [tokens, heads, head_dim] with a unit last stride.
HeadsView Heads(const PyKernelTensor& t, const char* what) {
  CheckRank(t, 3, what);
  const auto& shape = std::get<2>(t);
  const auto& strides = std::get<3>(t);
  if (strides[2] != 1) throw py::value_error(std::string(what) + ": head_dim must be contiguous");
  HeadsView view;
  view.data = reinterpret_cast<void*>(std::get<0>(t));
  view.dtype = DtypeOf(t);
  view.num_tokens = shape[0];
  view.num_heads = shape[1];
  view.head_dim = shape[2];
  view.token_stride = strides[0];
  view.head_stride = strides[1];
  view.extent_elems = ExtentElems(t);
  return view;
}

// One plane of a paged cache: [blocks, block_size, kv_heads, head_dim].
PagedKvSpec PlaneSpec(const PyKernelTensor& t, const char* what) {
  CheckRank(t, 4, what);
  const auto& shape = std::get<2>(t);
  const auto& strides = std::get<3>(t);
  PagedKvSpec spec;
  spec.dtype = DtypeOf(t);
  spec.num_planes = 2;
  spec.num_blocks = shape[0];
  spec.block_size = shape[1];
  spec.num_kv_heads = shape[2];
  spec.head_dim = shape[3];
  spec.block_stride = strides[0];
  spec.slot_stride = strides[1];
  spec.head_stride = strides[2];
  spec.dim_stride = strides[3];
  return spec;
}

// K and V planes of one cache: the same geometry and strides, any two addresses.
std::pair<PagedKvSpec, PagedKvLayer> Cache(const PyKernelTensor& k, const PyKernelTensor& v,
                                           const char* what) {
  const PagedKvSpec spec = PlaneSpec(k, what);
  const PagedKvSpec v_spec = PlaneSpec(v, what);
  if (std::get<2>(k) != std::get<2>(v) || std::get<3>(k) != std::get<3>(v) ||
      spec.dtype != v_spec.dtype) {
    throw py::value_error(std::string(what) + ": K and V differ in dtype, shape or strides");
  }
  return {spec, PagedKvLayer::FromSeparatePlanes(
                    reinterpret_cast<void*>(std::get<0>(k)), ExtentElems(k),
                    reinterpret_cast<void*>(std::get<0>(v)), ExtentElems(v))};
}

ConstMatrixView Matrix(const PyKernelTensor& t, const char* what) {
  CheckRank(t, 2, what);
  if (std::get<3>(t)[1] != 1) throw py::value_error(std::string(what) + ": rows not contiguous");
  ConstMatrixView view;
  view.data = reinterpret_cast<const void*>(std::get<0>(t));
  view.dtype = DtypeOf(t);
  view.rows = std::get<2>(t)[0];
  view.cols = std::get<2>(t)[1];
  view.row_stride = std::get<3>(t)[0];
  view.extent_elems = ExtentElems(t);
  return view;
}

kernels::RopeTable MakeRopeTable(int64_t rotary_dim, double theta, int64_t max_position,
                                 const std::string& style, std::optional<py::dict> llama3) {
  kernels::RopeConfig config;
  config.rotary_dim = rotary_dim;
  config.theta = theta;
  config.max_position = max_position;
  if (style == "neox") {
    config.style = kernels::RopeStyle::kNeox;
  } else if (style == "gptj") {
    config.style = kernels::RopeStyle::kGptj;
  } else {
    throw py::value_error("style must be 'neox' or 'gptj', not '" + style + "'");
  }
  if (llama3.has_value()) {
    config.scaling = kernels::RopeScaling::kLlama3;
    const py::dict& p = *llama3;
    config.llama3.factor = p["factor"].cast<double>();
    config.llama3.low_freq_factor = p["low_freq_factor"].cast<double>();
    config.llama3.high_freq_factor = p["high_freq_factor"].cast<double>();
    config.llama3.original_max_position = p["original_max_position_embeddings"].cast<double>();
  }
  absl::StatusOr<kernels::RopeTable> table = kernels::RopeTable::Create(config);
  CheckKernel(table.status());
  return *std::move(table);
}

}  // namespace

void BindKernels(py::module_& parent) {
  py::module_ m = parent.def_submodule(
      "kernels", "Strata's CPU kernels for a model runner: RoPE, paged attention, CacheBlend");

  py::class_<kernels::RopeTable>(m, "RopeTable")
      .def(py::init(&MakeRopeTable), py::arg("rotary_dim"), py::arg("theta"),
           py::arg("max_position"), py::arg("style") = "neox", py::arg("llama3") = std::nullopt,
           "RoPE's cos/sin table as vLLM builds it (fp32 angles); llama3: the model config's "
           "rope_scaling dict (factor, low_freq_factor, high_freq_factor, "
           "original_max_position_embeddings) for Llama-3.1 scaling.")
      .def_property_readonly("max_position", &kernels::RopeTable::max_position)
      .def_property_readonly("rotary_dim", &kernels::RopeTable::rotary_dim);

  m.def(
      "paged_attention",
      [](const PyKernelTensor& q, const PyKernelTensor& out, const PyKernelTensor& k,
         const PyKernelTensor& v, const std::vector<int32_t>& block_table,
         int64_t max_blocks_per_seq, const std::vector<int32_t>& seq_lens,
         const std::vector<int32_t>& query_start_loc, const std::vector<int64_t>& query_positions,
         const std::vector<int64_t>& block_positions, const std::vector<uint8_t>& masked_keys,
         const kernels::RopeTable* rope, std::optional<PyKernelTensor> shared_k,
         std::optional<PyKernelTensor> shared_v, float scale, bool causal) {
        kernels::PagedAttentionArgs a;
        a.q = Heads(q, "q");
        a.out = Heads(out, "out");
        std::tie(a.kv_spec, a.kv) = Cache(k, v, "kv");
        if (shared_k.has_value() != shared_v.has_value()) {
          throw py::value_error("shared_k and shared_v go together");
        }
        if (shared_k.has_value()) {
          std::tie(a.shared_spec, a.shared_kv) = Cache(*shared_k, *shared_v, "shared kv");
        }
        a.block_table = block_table;
        a.max_blocks_per_seq = max_blocks_per_seq;
        a.seq_lens = seq_lens;
        a.query_start_loc = query_start_loc;
        a.query_positions = query_positions;
        a.block_positions = block_positions;
        a.masked_keys = masked_keys;
        if (rope != nullptr) a.rope = rope->view();
        a.scale = scale;
        a.causal = causal;
        absl::Status status;
        {
          py::gil_scoped_release release;
          status = kernels::PagedAttention(a);
        }
        CheckKernel(status);
      },
      py::arg("q"), py::arg("out"), py::arg("k"), py::arg("v"), py::arg("block_table"),
      py::arg("max_blocks_per_seq"), py::arg("seq_lens"), py::arg("query_start_loc"),
      py::arg("query_positions"), py::arg("block_positions") = std::vector<int64_t>{},
      py::arg("masked_keys") = std::vector<uint8_t>{}, py::arg("rope") = nullptr,
      py::arg("shared_k") = std::nullopt, py::arg("shared_v") = std::nullopt,
      py::arg("scale") = 0.0f, py::arg("causal") = true,
      "kernels::PagedAttention: q and out [tokens, heads, head_dim]; k and v [blocks, "
      "block_size, kv_heads, head_dim] (and shared_k / shared_v, the second cache: block ids "
      "from k's block count on); tables flattened row-major; rope: a RopeTable (None: q and K "
      "are already rotated).");

  m.def(
      "select_blend_tokens",
      [](const PyKernelTensor& fresh, const PyKernelTensor& cached, int64_t suffix_tokens,
         double ratio) {
        const ConstMatrixView fresh_view = Matrix(fresh, "fresh");
        const ConstMatrixView cached_view = Matrix(cached, "cached");
        std::vector<float> deviation(static_cast<size_t>(std::max<int64_t>(fresh_view.rows, 0)));
        absl::StatusOr<std::vector<int32_t>> selected;
        {
          py::gil_scoped_release release;
          const absl::Status status = kernels::TokenDeviation(fresh_view, cached_view, deviation);
          selected = status.ok() ? kernels::SelectBlendTokens(deviation, suffix_tokens, ratio)
                                 : absl::StatusOr<std::vector<int32_t>>(status);
        }
        CheckKernel(selected.status());
        return *std::move(selected);
      },
      py::arg("fresh"), py::arg("cached"), py::arg("suffix_tokens"), py::arg("ratio"),
      "CacheBlend's selection (kernels/blend.h) from fresh and cached K (or V) of one layer, "
      "[tokens, channels] each: the recomputed token indices, ascending, the suffix last.");
}

}  // namespace strata::connector

#include "kernels/testing/test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <numeric>

namespace strata::kernels::testing {

HostTensor::HostTensor(KvDtype dtype, int64_t size)
    : dtype_(dtype), size_(size), bytes_(static_cast<size_t>(size) * DtypeSizeBytes(dtype)) {}

float HostTensor::Get(int64_t i) const {
  const std::byte* p = bytes_.data() + i * DtypeSizeBytes(dtype_);
  if (dtype_ == KvDtype::kFloat32) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return dtype_ == KvDtype::kBfloat16 ? Bf16BitsToFloat(bits) : Fp16BitsToFloat(bits);
}

void HostTensor::Set(int64_t i, float v) {
  std::byte* p = bytes_.data() + i * DtypeSizeBytes(dtype_);
  if (dtype_ == KvDtype::kFloat32) {
    std::memcpy(p, &v, 4);
    return;
  }
  const uint16_t bits = dtype_ == KvDtype::kBfloat16 ? FloatToBf16Bits(v) : FloatToFp16Bits(v);
  std::memcpy(p, &bits, 2);
}

void HostTensor::Fill(float v) {
  for (int64_t i = 0; i < size_; ++i) Set(i, v);
}

void HostTensor::FillNormal(std::mt19937_64& rng, float stddev, float mean) {
  std::normal_distribution<float> dist(mean, stddev);
  for (int64_t i = 0; i < size_; ++i) Set(i, dist(rng));
}

void HostTensor::FillNan() { Fill(std::numeric_limits<float>::quiet_NaN()); }

std::vector<float> HostTensor::ToFloats() const {
  std::vector<float> out(static_cast<size_t>(size_));
  for (int64_t i = 0; i < size_; ++i) out[static_cast<size_t>(i)] = Get(i);
  return out;
}

std::vector<double> InvFreqF64(const RopeConfig& c) {
  std::vector<double> out(static_cast<size_t>(c.rotary_dim / 2));
  for (size_t i = 0; i < out.size(); ++i) {
    double w = std::pow(c.theta, -2.0 * static_cast<double>(i) / static_cast<double>(c.rotary_dim));
    if (c.scaling == RopeScaling::kLlama3) {
      const auto& l3 = c.llama3;
      const double wavelen = 2 * std::numbers::pi / w;
      if (wavelen < l3.original_max_position / l3.high_freq_factor) {
      } else if (wavelen > l3.original_max_position / l3.low_freq_factor) {
        w = w / l3.factor;
      } else {
        const double m = (l3.original_max_position / wavelen - l3.low_freq_factor) /
                         (l3.high_freq_factor - l3.low_freq_factor);
        w = (1 - m) * w / l3.factor + m * w;
      }
    }
    out[i] = w;
  }
  return out;
}

void RopeF64(std::span<double> x, const RopeConfig& c, std::span<const double> inv_freq,
             double position) {
  const int64_t half = c.rotary_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const int64_t a = c.style == RopeStyle::kNeox ? i : 2 * i;
    const int64_t b = c.style == RopeStyle::kNeox ? i + half : 2 * i + 1;
    const double angle = position * inv_freq[static_cast<size_t>(i)];
    const double cs = std::cos(angle);
    const double sn = std::sin(angle);
    const double xa = x[static_cast<size_t>(a)];
    const double xb = x[static_cast<size_t>(b)];
    x[static_cast<size_t>(a)] = xa * cs - xb * sn;
    x[static_cast<size_t>(b)] = xb * cs + xa * sn;
  }
}

namespace {

double ReadElem(const void* base, KvDtype dtype, int64_t offset) {
  switch (dtype) {
    case KvDtype::kFloat32:
      return static_cast<const float*>(base)[offset];
    case KvDtype::kBfloat16:
      return Bf16BitsToFloat(static_cast<const uint16_t*>(base)[offset]);
    default:
      return Fp16BitsToFloat(static_cast<const uint16_t*>(base)[offset]);
  }
}

}  // namespace

std::vector<double> DenseAttentionF64(const PagedAttentionArgs& a, const RopeConfig& rope_config) {
  const int64_t dim = a.q.head_dim;
  const int64_t heads = a.q.num_heads;
  const int64_t kv_heads = a.kv_spec.num_kv_heads;
  const int64_t group = heads / kv_heads;
  const int64_t block_size = a.kv_spec.block_size;
  const double scale = a.scale > 0 ? a.scale : 1.0 / std::sqrt(static_cast<double>(dim));
  const bool rope = !a.rope.empty();
  const std::vector<double> inv_freq = InvFreqF64(rope_config);
  std::vector<double> out(static_cast<size_t>(a.q.num_tokens * heads * dim), 0.0);
  for (size_t s = 0; s < a.seq_lens.size(); ++s) {
    const int64_t seq_len = a.seq_lens[s];
    const int64_t q_begin = a.query_start_loc[s];
    const int64_t q_end = a.query_start_loc[s + 1];
    if (q_end == q_begin) continue;  // a sequence without queries is never read
    // Dense K (rotated) and V for the sequence: [seq_len][kv_heads][dim].
    std::vector<double> k(static_cast<size_t>(seq_len * kv_heads * dim));
    std::vector<double> v(k.size());
    for (int64_t i = 0; i < seq_len; ++i) {
      const int64_t j = i / block_size;
      const int64_t t = i % block_size;
      const int64_t entry = static_cast<int64_t>(s) * a.max_blocks_per_seq + j;
      const int64_t table_block = a.block_table[static_cast<size_t>(entry)];
      const bool shared = table_block >= a.kv_spec.num_blocks;
      const PagedKvSpec& spec = shared ? a.shared_spec : a.kv_spec;
      const PagedKvLayer& cache = shared ? a.shared_kv : a.kv;
      const int64_t block = shared ? table_block - a.kv_spec.num_blocks : table_block;
      const int64_t position =
          (a.block_positions.empty() ? j * block_size
                                     : a.block_positions[static_cast<size_t>(entry)]) +
          t;
      for (int64_t g = 0; g < kv_heads; ++g) {
        double* kr = k.data() + (i * kv_heads + g) * dim;
        double* vr = v.data() + (i * kv_heads + g) * dim;
        for (int64_t d = 0; d < dim; ++d) {
          const int64_t off =
              spec.SlotOffset(block, t) + g * spec.head_stride + d * spec.dim_stride;
          kr[d] = ReadElem(cache.planes[0], spec.dtype, off);
          vr[d] = ReadElem(cache.planes[1], spec.dtype, off);
        }
        if (rope) RopeF64({kr, static_cast<size_t>(dim)}, rope_config, inv_freq, position);
      }
    }
    for (int64_t qt = q_begin; qt < q_end; ++qt) {
      const int64_t query_index = seq_len - (q_end - q_begin) + (qt - q_begin);
      const int64_t visible = a.causal ? query_index + 1 : seq_len;
      for (int64_t h = 0; h < heads; ++h) {
        std::vector<double> q(static_cast<size_t>(dim));
        for (int64_t d = 0; d < dim; ++d) {
          q[static_cast<size_t>(d)] =
              ReadElem(a.q.data, a.q.dtype, qt * a.q.token_stride + h * a.q.head_stride + d);
        }
        if (rope) {
          RopeF64(q, rope_config, inv_freq,
                  static_cast<double>(a.query_positions[static_cast<size_t>(qt)]));
        }
        const int64_t g = h / group;
        std::vector<double> scores(static_cast<size_t>(visible));
        double max_score = -std::numeric_limits<double>::infinity();
        for (int64_t i = 0; i < visible; ++i) {
          double dot = 0;
          for (int64_t d = 0; d < dim; ++d) {
            dot += q[static_cast<size_t>(d)] * k[static_cast<size_t>((i * kv_heads + g) * dim + d)];
          }
          const bool masked =
              !a.masked_keys.empty() &&
              a.masked_keys[static_cast<size_t>(
                  static_cast<int64_t>(s) * a.max_blocks_per_seq * block_size + i)] != 0;
          scores[static_cast<size_t>(i)] =
              masked ? -std::numeric_limits<double>::infinity() : dot * scale;
          max_score = std::max(max_score, scores[static_cast<size_t>(i)]);
        }
        if (max_score == -std::numeric_limits<double>::infinity()) continue;  // all masked
        double denom = 0;
        for (double& sc : scores) {
          sc = std::exp(sc - max_score);
          denom += sc;
        }
        double* o = out.data() + (qt * heads + h) * dim;
        for (int64_t i = 0; i < visible; ++i) {
          const double p = scores[static_cast<size_t>(i)] / denom;
          for (int64_t d = 0; d < dim; ++d) {
            o[d] += p * v[static_cast<size_t>((i * kv_heads + g) * dim + d)];
          }
        }
      }
    }
  }
  return out;
}

PagedKvSpec AttentionProblem::Spec() const {
  return PagedKvSpec::Contiguous(kv_dtype, 2, num_blocks, block_size, kv_heads, dim);
}

PagedKvSpec AttentionProblem::SharedSpec() const {
  return PagedKvSpec::ContiguousHnd(kv_dtype, 2, shared_blocks, block_size, kv_heads, dim);
}

void AttentionProblem::MoveToSharedCache(const std::vector<std::pair<int64_t, int64_t>>& blocks) {
  shared_blocks = static_cast<int64_t>(blocks.size());
  const int64_t plane = shared_blocks * block_size * kv_heads * dim;
  shared_k = HostTensor(kv_dtype, plane);
  shared_v = HostTensor(kv_dtype, plane);
  const PagedKvSpec engine = Spec(), shared = SharedSpec();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t i = 0; i < shared_blocks; ++i) {
    const auto [seq, j] = blocks[static_cast<size_t>(i)];
    int32_t& entry = block_table[static_cast<size_t>(seq * max_blocks + j)];
    for (int64_t t = 0; t < block_size; ++t) {
      for (int64_t g = 0; g < kv_heads; ++g) {
        for (int64_t d = 0; d < dim; ++d) {
          const int64_t from = engine.SlotOffset(entry, t) + g * engine.head_stride + d;
          const int64_t to = shared.SlotOffset(i, t) + g * shared.head_stride + d;
          shared_k.Set(to, k.Get(from));
          shared_v.Set(to, v.Get(from));
          k.Set(from, nan);
          v.Set(from, nan);
        }
      }
    }
    entry = static_cast<int32_t>(num_blocks + i);
  }
}

PagedAttentionArgs AttentionProblem::Args(HostTensor& out) const {
  PagedAttentionArgs a;
  a.q = ConstHeadsView::Dense(q.data(), q.dtype(), num_tokens(), q_heads, dim);
  a.out = HeadsView::Dense(out.data(), out.dtype(), num_tokens(), q_heads, dim);
  a.kv_spec = Spec();
  a.kv = PagedKvLayer::FromSeparatePlanes(const_cast<void*>(k.data()), k.size(),
                                          const_cast<void*>(v.data()), v.size());
  if (shared_blocks > 0) {
    a.shared_spec = SharedSpec();
    a.shared_kv =
        PagedKvLayer::FromSeparatePlanes(const_cast<void*>(shared_k.data()), shared_k.size(),
                                         const_cast<void*>(shared_v.data()), shared_v.size());
  }
  a.block_table = block_table;
  a.max_blocks_per_seq = max_blocks;
  a.seq_lens = seq_lens;
  a.query_start_loc = query_start_loc;
  a.query_positions = query_positions;
  a.block_positions = block_positions;
  a.masked_keys = masked_keys;
  if (rope) a.rope = rope->view();
  a.causal = causal;
  a.num_kv_splits = splits;
  return a;
}

absl::Status AttentionProblem::Run(HostTensor& out) const {
  out = HostTensor(KvDtype::kFloat32, num_tokens() * q_heads * dim);
  out.Fill(0);
  return PagedAttention(Args(out));
}

std::vector<double> AttentionProblem::Reference() const {
  HostTensor dummy(KvDtype::kFloat32, num_tokens() * q_heads * dim);
  return DenseAttentionF64(Args(dummy), rope_config);
}

AttentionProblem MakeAttentionProblem(const AttentionShape& s,
                                      const std::vector<std::pair<int32_t, int32_t>>& seqs,
                                      uint64_t seed, KvDtype kv_dtype) {
  AttentionProblem p;
  p.kv_dtype = kv_dtype;
  p.block_size = s.block_size;
  p.kv_heads = s.kv_heads;
  p.q_heads = s.kv_heads * s.group;
  p.dim = s.dim;
  std::mt19937_64 rng(seed);
  int64_t total_blocks = 0;
  for (const auto& [len, ql] : seqs) {
    p.max_blocks = std::max<int64_t>(p.max_blocks, (len + s.block_size - 1) / s.block_size);
    total_blocks += (len + s.block_size - 1) / s.block_size;
  }
  p.max_blocks += 1;  // a spare entry per sequence, left at -1 (never read)
  p.num_blocks = total_blocks + 2;
  std::vector<int32_t> physical(static_cast<size_t>(p.num_blocks));
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), rng);
  const int64_t plane = p.num_blocks * s.block_size * s.kv_heads * s.dim;
  p.k = HostTensor(kv_dtype, plane);
  p.v = HostTensor(kv_dtype, plane);
  p.k.FillNan();
  p.v.FillNan();
  p.block_table.assign(seqs.size() * static_cast<size_t>(p.max_blocks), -1);
  p.query_start_loc = {0};
  size_t next = 0;
  std::normal_distribution<float> normal;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto [len, ql] = seqs[i];
    p.seq_lens.push_back(len);
    p.query_start_loc.push_back(p.query_start_loc.back() + ql);
    for (int64_t j = 0; j * s.block_size < len; ++j) {
      const int32_t block = physical[next++];
      p.block_table[i * static_cast<size_t>(p.max_blocks) + static_cast<size_t>(j)] = block;
      for (int64_t t = 0; t < s.block_size && j * s.block_size + t < len; ++t) {
        for (int64_t e = 0; e < s.kv_heads * s.dim; ++e) {
          const int64_t off = (block * s.block_size + t) * s.kv_heads * s.dim + e;
          p.k.Set(off, normal(rng));
          p.v.Set(off, normal(rng));
        }
      }
    }
    for (int32_t t = 0; t < ql; ++t) p.query_positions.push_back(len - ql + t);
  }
  p.q = HostTensor(KvDtype::kFloat32, p.num_tokens() * p.q_heads * s.dim);
  p.q.FillNormal(rng);
  p.rope_config.rotary_dim = s.dim;
  p.rope_config.style = s.style;
  p.rope_config.max_position = 4096;
  p.rope_config.precision = AnglePrecision::kFp64;
  p.rope = *RopeTable::Create(p.rope_config);
  return p;
}

ErrorStats Compare(std::span<const float> actual, std::span<const double> expected) {
  ErrorStats stats;
  for (size_t i = 0; i < actual.size() && i < expected.size(); ++i) {
    const double err = std::fabs(static_cast<double>(actual[i]) - expected[i]);
    stats.max_abs_error = std::isnan(err) ? INFINITY : std::max(stats.max_abs_error, err);
    stats.max_ref = std::max(stats.max_ref, std::fabs(expected[i]));
  }
  return stats;
}

}  // namespace strata::kernels::testing

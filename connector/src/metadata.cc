// ConnectorMetadata's wire form and ConnectorOptions::Validate.
//
// Encoding (little-endian): "STCM", u32 version (4), u32 block_size, u32 chunk_tokens, then the
// loads, the saves (each a u32 count of TransferSpecs) and the finished request ids (u32 count of
// strings). A string is a u32 length and its bytes; a TransferSpec is request_id, tokens (u32
// count of u32), tenant_salt, lora_name, i64 token_begin, i64 token_end, block_ids (u32 count of
// i32), u8 flags (bit 0: fail, bit 1: async), u32 hold_ms, stream_to. Nothing follows the last
// field.
#include <cstring>
#include <limits>
#include <string>

#include "core/byte_codec.h"
#include "fmt/format.h"
#include "strata/connector.h"

namespace strata::connector {
namespace {

constexpr char kMagic[4] = {'S', 'T', 'C', 'M'};
constexpr uint32_t kVersion = 4;
constexpr uint8_t kFail = 1;
constexpr uint8_t kAsync = 2;

void WriteSpec(ByteWriter& w, const TransferSpec& spec) {
  w.String(spec.request_id);
  w.Array(spec.tokens);
  w.String(spec.tenant_salt);
  w.String(spec.lora_name);
  w.I64(spec.token_begin);
  w.I64(spec.token_end);
  w.Array(spec.block_ids);
  w.U8((spec.fail ? kFail : 0) | (spec.async ? kAsync : 0));
  w.U32(spec.hold_ms);
  w.String(spec.stream_to);
}

bool ReadSpec(ByteReader& r, TransferSpec& spec) {
  uint8_t flags;
  if (!r.String(spec.request_id) || !r.Array(spec.tokens) || !r.String(spec.tenant_salt) ||
      !r.String(spec.lora_name) || !r.I64(spec.token_begin) || !r.I64(spec.token_end) ||
      !r.Array(spec.block_ids) || !r.U8(flags) || (flags & ~(kFail | kAsync)) != 0 ||
      !r.U32(spec.hold_ms) || !r.String(spec.stream_to)) {
    return false;
  }
  spec.fail = (flags & kFail) != 0;
  spec.async = (flags & kAsync) != 0;
  return true;
}

bool ReadSpecs(ByteReader& r, std::vector<TransferSpec>& specs) {
  uint32_t count;
  // Every spec takes at least 45 bytes (4 + 4 + 4 + 4 + 8 + 8 + 4 + 1 + 4 + 4, all empty): a
  // bound on the count before allocating.
  if (!r.U32(count) || count > r.left() / 45) return false;
  specs.resize(count);
  for (TransferSpec& spec : specs) {
    if (!ReadSpec(r, spec)) return false;
  }
  return true;
}

}  // namespace

std::string ConnectorMetadata::Serialize() const {
  ByteWriter w;
  w.Raw(kMagic, sizeof(kMagic));
  w.U32(kVersion);
  w.U32(block_size);
  w.U32(chunk_tokens);
  for (const auto* specs : {&loads, &saves}) {
    w.U32(static_cast<uint32_t>(specs->size()));
    for (const TransferSpec& spec : *specs) WriteSpec(w, spec);
  }
  w.U32(static_cast<uint32_t>(finished_request_ids.size()));
  for (const std::string& id : finished_request_ids) w.String(id);
  return w.Take();
}

absl::StatusOr<ConnectorMetadata> ConnectorMetadata::Deserialize(std::string_view bytes) {
  ByteReader r(bytes);
  char magic[4];
  uint32_t version = 0;
  if (!r.Raw(magic, sizeof(magic)) || std::memcmp(magic, kMagic, sizeof(magic)) != 0) {
    return absl::InvalidArgumentError("connector metadata: bad magic");
  }
  if (!r.U32(version)) return absl::InvalidArgumentError("connector metadata: truncated");
  if (version != kVersion) {
    return absl::InvalidArgumentError(
        fmt::format("connector metadata: version {} (this connector reads {})", version, kVersion));
  }
  ConnectorMetadata meta;
  uint32_t finished;
  bool ok = r.U32(meta.block_size) && r.U32(meta.chunk_tokens) && ReadSpecs(r, meta.loads) &&
            ReadSpecs(r, meta.saves) && r.U32(finished) && finished <= r.left() / 4;
  if (ok) {
    meta.finished_request_ids.resize(finished);
    for (std::string& id : meta.finished_request_ids) ok = ok && r.String(id);
  }
  if (!ok) return absl::InvalidArgumentError("connector metadata: truncated or corrupt");
  if (!r.empty()) {
    return absl::InvalidArgumentError(
        fmt::format("connector metadata: {} trailing bytes", r.left()));
  }
  return meta;
}

absl::Status ConnectorOptions::Validate() const {
  if (socket_path.empty()) return absl::InvalidArgumentError("connector: socket_path is empty");
  if (absl::Status s = layout.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(fmt::format(
        "connector: layout: {}", std::string_view(s.message().data(), s.message().size())));
  }
  if (block_size == 0) return absl::InvalidArgumentError("connector: block_size is 0");
  if (whole_blocks_only && layout.chunk_tokens % block_size != 0) {
    return absl::InvalidArgumentError(fmt::format(
        "connector: whole_blocks_only needs chunk_tokens ({}) to be a multiple of block_size ({})",
        layout.chunk_tokens, block_size));
  }
  if (lookup_budget.count() <= 0) {
    return absl::InvalidArgumentError("connector: lookup_budget must be positive");
  }
  if (io_timeout.count() <= 0) {
    return absl::InvalidArgumentError("connector: io_timeout must be positive");
  }
  if (transfer_lookup_budget.count() <= 0) {
    return absl::InvalidArgumentError("connector: transfer_lookup_budget must be positive");
  }
  if (transfer_hold.count() < 0 || transfer_hold.count() > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError("connector: transfer_hold must be 0 or more ms, in 32 bits");
  }
  if (reconnect_min_backoff.count() <= 0 || reconnect_max_backoff < reconnect_min_backoff) {
    return absl::InvalidArgumentError("connector: reconnect backoff must satisfy 0 < min <= max");
  }
  if (clock == nullptr) return absl::InvalidArgumentError("connector: clock is null");
  return absl::OkStatus();
}

}  // namespace strata::connector

#include "controller/ingest/vllm_events.h"

#include <msgpack.h>

#include <iterator>
#include <limits>
#include <string_view>

#include "absl/cleanup/cleanup.h"
#include "fmt/format.h"

namespace strata::controller {
namespace {

constexpr size_t kMaxHashBytes = 64;

absl::Status Bad(std::string_view what) {
  return absl::InvalidArgumentError(fmt::format("vLLM KV event batch: {}", what));
}

// How an object of a msgpack type 0xc4 .. 0xdf goes on after its type byte: `length_bytes`
// big-endian bytes of a length, then `fixed_bytes`, then what the length counts: payload bytes
// (objects_per_length 0) or nested objects (1 per array element, 2 per map entry).
struct MsgpackHead {
  uint8_t length_bytes = 0;
  uint8_t fixed_bytes = 0;
  uint8_t objects_per_length = 0;
};
constexpr MsgpackHead kHeads[] = {
    {1, 0, 0}, {2, 0, 0}, {4, 0, 0},                         // c4-c6: bin 8, 16, 32
    {1, 1, 0}, {2, 1, 0}, {4, 1, 0},                         // c7-c9: ext 8, 16, 32
    {0, 4, 0}, {0, 8, 0},                                    // ca-cb: float 32, 64
    {0, 1, 0}, {0, 2, 0}, {0, 4, 0}, {0, 8, 0},              // cc-cf: uint 8 .. 64
    {0, 1, 0}, {0, 2, 0}, {0, 4, 0}, {0, 8, 0},              // d0-d3: int 8 .. 64
    {0, 2, 0}, {0, 3, 0}, {0, 5, 0}, {0, 9, 0}, {0, 17, 0},  // d4-d8: fixext 1 .. 16
    {1, 0, 0}, {2, 0, 0}, {4, 0, 0},                         // d9-db: str 8, 16, 32
    {2, 0, 1}, {4, 0, 1}, {2, 0, 2}, {4, 0, 2},              // dc-df: array 16, 32, map 16, 32
};
static_assert(std::size(kHeads) == 0xdf - 0xc4 + 1);

// Whether no array or map header of the msgpack object at the start of `b` claims more elements
// than bytes remain (every element takes one at least), and no string more bytes. msgpack-c
// allocates a collection's elements before it reads them: five bytes could otherwise ask it for
// 96 GiB.
bool CollectionsFit(std::span<const uint8_t> b) {
  size_t pos = 0;
  uint64_t pending = 1;  // objects still to read
  while (pending > 0) {
    if (pos >= b.size()) return false;
    --pending;
    const uint8_t type = b[pos++];
    MsgpackHead head;
    uint64_t length = 0;
    if ((type & 0xf0) == 0x80 || (type & 0xf0) == 0x90) {  // fixmap, fixarray
      length = type & 0x0fu;
      head.objects_per_length = (type & 0xf0) == 0x80 ? 2 : 1;
    } else if ((type & 0xe0) == 0xa0) {  // fixstr
      length = type & 0x1fu;
    } else if (type >= 0xc4 && type <= 0xdf) {
      head = kHeads[type - 0xc4];
      if (b.size() - pos < head.length_bytes) return false;
      for (uint8_t i = 0; i < head.length_bytes; ++i) length = (length << 8) | b[pos++];
    } else if (type == 0xc1) {
      return false;  // never used
    }                // else a fixint, nil or boolean: the type byte alone
    const uint64_t bytes = head.fixed_bytes + (head.objects_per_length == 0 ? length : 0);
    if (bytes > b.size() - pos) return false;
    pos += bytes;
    const uint64_t objects = head.objects_per_length * length;
    if (objects > b.size() - pos) return false;
    pending += objects;
  }
  return true;
}

bool IsNil(const msgpack_object& o) { return o.type == MSGPACK_OBJECT_NIL; }

std::optional<std::string_view> AsString(const msgpack_object& o) {
  if (o.type != MSGPACK_OBJECT_STR) return std::nullopt;
  return std::string_view(o.via.str.ptr, o.via.str.size);
}

std::optional<uint64_t> AsUnsigned(const msgpack_object& o) {
  if (o.type != MSGPACK_OBJECT_POSITIVE_INTEGER) return std::nullopt;
  return o.via.u64;
}

// An integer hash (a negative one, from Python's builtin hash, as its 64-bit two's complement) or
// a byte digest.
absl::StatusOr<EngineBlockHash> ReadHash(const msgpack_object& o) {
  if (o.type == MSGPACK_OBJECT_POSITIVE_INTEGER || o.type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
    const uint64_t value =
        o.type == MSGPACK_OBJECT_POSITIVE_INTEGER ? o.via.u64 : static_cast<uint64_t>(o.via.i64);
    EngineBlockHash hash(9, 'i');
    for (int i = 0; i < 8; ++i) hash[1 + i] = static_cast<char>(value >> (56 - 8 * i));
    return hash;
  }
  if (o.type == MSGPACK_OBJECT_BIN || o.type == MSGPACK_OBJECT_STR) {
    const uint32_t size = o.type == MSGPACK_OBJECT_BIN ? o.via.bin.size : o.via.str.size;
    const char* data = o.type == MSGPACK_OBJECT_BIN ? o.via.bin.ptr : o.via.str.ptr;
    if (size == 0 || size > kMaxHashBytes) return Bad(fmt::format("a {}-byte block hash", size));
    EngineBlockHash hash(1, 'b');
    hash.append(data, size);
    return hash;
  }
  return Bad("a block hash that is neither an integer nor bytes");
}

absl::StatusOr<std::vector<EngineBlockHash>> ReadHashes(const msgpack_object& o) {
  if (o.type != MSGPACK_OBJECT_ARRAY) return Bad("block_hashes is not an array");
  std::vector<EngineBlockHash> hashes;
  hashes.reserve(o.via.array.size);
  for (uint32_t i = 0; i < o.via.array.size; ++i) {
    absl::StatusOr<EngineBlockHash> hash = ReadHash(o.via.array.ptr[i]);
    if (!hash.ok()) return hash.status();
    hashes.push_back(*std::move(hash));
  }
  return hashes;
}

// A medium: a string, or nil / absent ("").
absl::StatusOr<std::string> ReadMedium(const msgpack_object* o) {
  if (o == nullptr || IsNil(*o)) return std::string();
  std::optional<std::string_view> medium = AsString(*o);
  if (!medium) return Bad("medium is not a string");
  return std::string(*medium);
}

absl::StatusOr<VllmEvent> ReadStored(const msgpack_object_array& a) {
  if (a.size < 5) return Bad("BlockStored with fewer than its 4 fields");
  auto field = [&a](uint32_t i) -> const msgpack_object* {
    return i < a.size ? &a.ptr[i] : nullptr;
  };
  VllmBlockStored stored;
  absl::StatusOr<std::vector<EngineBlockHash>> hashes = ReadHashes(a.ptr[1]);
  if (!hashes.ok()) return hashes.status();
  stored.block_hashes = *std::move(hashes);
  if (!IsNil(a.ptr[2])) {
    absl::StatusOr<EngineBlockHash> parent = ReadHash(a.ptr[2]);
    if (!parent.ok()) return parent.status();
    stored.parent = *std::move(parent);
  }
  const msgpack_object& tokens = a.ptr[3];
  if (tokens.type != MSGPACK_OBJECT_ARRAY) return Bad("token_ids is not an array");
  stored.token_ids.reserve(tokens.via.array.size);
  for (uint32_t i = 0; i < tokens.via.array.size; ++i) {
    std::optional<uint64_t> token = AsUnsigned(tokens.via.array.ptr[i]);
    if (!token || *token > std::numeric_limits<uint32_t>::max()) {
      return Bad("a token id that is not a 32-bit unsigned integer");
    }
    stored.token_ids.push_back(static_cast<uint32_t>(*token));
  }
  std::optional<uint64_t> block_size = AsUnsigned(a.ptr[4]);
  if (!block_size || *block_size == 0 || *block_size > std::numeric_limits<uint32_t>::max()) {
    return Bad("block_size is not a positive 32-bit integer");
  }
  stored.block_size = static_cast<uint32_t>(*block_size);
  if (stored.token_ids.size() != stored.block_hashes.size() * *block_size) {
    return Bad(fmt::format("{} token ids for {} blocks of {}", stored.token_ids.size(),
                           stored.block_hashes.size(), *block_size));
  }
  stored.has_lora_id = field(5) != nullptr && !IsNil(*field(5));
  absl::StatusOr<std::string> medium = ReadMedium(field(6));
  if (!medium.ok()) return medium.status();
  stored.medium = *std::move(medium);
  if (const msgpack_object* lora = field(7); lora != nullptr && !IsNil(*lora)) {
    std::optional<std::string_view> name = AsString(*lora);
    if (!name) return Bad("lora_name is not a string");
    stored.lora_name = std::string(*name);
  }
  if (const msgpack_object* extra = field(8); extra != nullptr && !IsNil(*extra)) {
    if (extra->type != MSGPACK_OBJECT_ARRAY) return Bad("extra_keys is not an array");
    for (uint32_t i = 0; i < extra->via.array.size; ++i) {
      if (!IsNil(extra->via.array.ptr[i])) stored.has_extra_keys = true;
    }
  }
  if (const msgpack_object* group = field(9); group != nullptr && !IsNil(*group)) {
    std::optional<uint64_t> index = AsUnsigned(*group);
    if (!index) return Bad("group_idx is not an unsigned integer");
    stored.group_idx = *index;
  }
  return stored;
}

absl::StatusOr<VllmEvent> ReadRemoved(const msgpack_object_array& a) {
  if (a.size < 2) return Bad("BlockRemoved without its block hashes");
  VllmBlockRemoved removed;
  absl::StatusOr<std::vector<EngineBlockHash>> hashes = ReadHashes(a.ptr[1]);
  if (!hashes.ok()) return hashes.status();
  removed.block_hashes = *std::move(hashes);
  absl::StatusOr<std::string> medium = ReadMedium(a.size > 2 ? &a.ptr[2] : nullptr);
  if (!medium.ok()) return medium.status();
  removed.medium = *std::move(medium);
  return removed;
}

}  // namespace

absl::StatusOr<VllmEventBatch> DecodeVllmEventBatch(std::span<const std::byte> payload) {
  if (!CollectionsFit({reinterpret_cast<const uint8_t*>(payload.data()), payload.size()})) {
    return Bad("not msgpack (truncated, or a collection longer than the payload)");
  }
  msgpack_unpacked unpacked;
  msgpack_unpacked_init(&unpacked);
  absl::Cleanup destroy = [&unpacked] { msgpack_unpacked_destroy(&unpacked); };
  size_t offset = 0;
  if (msgpack_unpack_next(&unpacked, reinterpret_cast<const char*>(payload.data()), payload.size(),
                          &offset) != MSGPACK_UNPACK_SUCCESS) {
    return Bad("not msgpack");
  }
  if (offset != payload.size()) return Bad("bytes after the batch");
  const msgpack_object& root = unpacked.data;
  if (root.type != MSGPACK_OBJECT_ARRAY || root.via.array.size < 2) {
    return Bad("not an array of [ts, events, ...]");
  }
  VllmEventBatch batch;
  const msgpack_object& ts = root.via.array.ptr[0];
  if (ts.type == MSGPACK_OBJECT_FLOAT32 || ts.type == MSGPACK_OBJECT_FLOAT64) {
    batch.timestamp = ts.via.f64;
  } else if (ts.type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
    batch.timestamp = static_cast<double>(ts.via.u64);
  } else {
    return Bad("ts is not a number");
  }
  const msgpack_object& events = root.via.array.ptr[1];
  if (events.type != MSGPACK_OBJECT_ARRAY) return Bad("events is not an array");
  batch.events.reserve(events.via.array.size);
  for (uint32_t i = 0; i < events.via.array.size; ++i) {
    const msgpack_object& event = events.via.array.ptr[i];
    if (event.type != MSGPACK_OBJECT_ARRAY || event.via.array.size == 0) {
      return Bad("an event that is not a tagged array");
    }
    const msgpack_object_array& fields = event.via.array;
    std::optional<std::string_view> tag = AsString(fields.ptr[0]);
    if (!tag) return Bad("an event whose tag is not a string");
    absl::StatusOr<VllmEvent> decoded;
    if (*tag == "BlockStored") {
      decoded = ReadStored(fields);
    } else if (*tag == "BlockRemoved") {
      decoded = ReadRemoved(fields);
    } else if (*tag == "AllBlocksCleared") {
      decoded = VllmAllBlocksCleared{};
    } else {
      ++batch.unknown_events;
      continue;
    }
    if (!decoded.ok()) return decoded.status();
    batch.events.push_back(*std::move(decoded));
  }
  return batch;
}

}  // namespace strata::controller

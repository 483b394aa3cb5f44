// VllmBatchWriter: msgpack KVEventBatch payloads as a vLLM engine publishes them (vllm_events.h),
// for the ingest tests. Header-only; thread-compatible.
#pragma once

#include <msgpack.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::controller::testing {

class VllmBatchWriter {
 public:
  // A BlockStored event with integer hashes. `trailing` adds lora_name, extra_keys and group_idx.
  struct Stored {
    std::vector<uint64_t> hashes;
    std::optional<uint64_t> parent;
    std::vector<uint32_t> tokens;
    uint32_t block_size = 0;
    std::string medium = "GPU";
    bool lora_id = false;
    std::optional<std::string> lora_name;
    bool extra_keys = false;
    uint64_t group_idx = 0;
  };

  VllmBatchWriter& Add(Stored stored) {
    events_.push_back({.stored = std::move(stored)});
    return *this;
  }
  VllmBatchWriter& Removed(std::vector<uint64_t> hashes, std::string medium = "GPU") {
    events_.push_back({.kind = Kind::kRemoved,
                       .stored = {.hashes = std::move(hashes), .medium = std::move(medium)}});
    return *this;
  }
  VllmBatchWriter& Cleared() {
    events_.push_back({.kind = Kind::kCleared});
    return *this;
  }
  // An event of a type no decoder knows.
  VllmBatchWriter& Unknown() {
    events_.push_back({.kind = Kind::kUnknown});
    return *this;
  }

  std::string Payload() const {
    msgpack_sbuffer buffer;
    msgpack_sbuffer_init(&buffer);
    msgpack_packer p;
    msgpack_packer_init(&p, &buffer, msgpack_sbuffer_write);
    msgpack_pack_array(&p, 3);
    msgpack_pack_double(&p, 1.5e9);
    msgpack_pack_array(&p, events_.size());
    for (const Event& event : events_) Pack(p, event);
    msgpack_pack_nil(&p);  // dp_rank
    std::string payload(buffer.data, buffer.size);
    msgpack_sbuffer_destroy(&buffer);
    return payload;
  }

 private:
  enum class Kind { kStored, kRemoved, kCleared, kUnknown };
  struct Event {
    Kind kind = Kind::kStored;
    Stored stored;
  };

  static void Str(msgpack_packer& p, std::string_view text) {
    msgpack_pack_str(&p, text.size());
    msgpack_pack_str_body(&p, text.data(), text.size());
  }
  static void Hashes(msgpack_packer& p, const std::vector<uint64_t>& hashes) {
    msgpack_pack_array(&p, hashes.size());
    for (uint64_t hash : hashes) msgpack_pack_uint64(&p, hash);
  }

  static void Pack(msgpack_packer& p, const Event& event) {
    const Stored& s = event.stored;
    switch (event.kind) {
      case Kind::kStored: {
        const bool trailing = s.lora_name || s.extra_keys || s.group_idx != 0;
        msgpack_pack_array(&p, trailing ? 10 : 7);
        Str(p, "BlockStored");
        Hashes(p, s.hashes);
        if (s.parent) {
          msgpack_pack_uint64(&p, *s.parent);
        } else {
          msgpack_pack_nil(&p);
        }
        msgpack_pack_array(&p, s.tokens.size());
        for (uint32_t token : s.tokens) msgpack_pack_uint32(&p, token);
        msgpack_pack_uint32(&p, s.block_size);
        if (s.lora_id) {
          msgpack_pack_int(&p, 7);
        } else {
          msgpack_pack_nil(&p);
        }
        Str(p, s.medium);
        if (trailing) {
          if (s.lora_name) {
            Str(p, *s.lora_name);
          } else {
            msgpack_pack_nil(&p);
          }
          if (s.extra_keys) {
            msgpack_pack_array(&p, 1);
            msgpack_pack_array(&p, 1);
            Str(p, "salt");
          } else {
            msgpack_pack_nil(&p);
          }
          msgpack_pack_uint64(&p, s.group_idx);
        }
        break;
      }
      case Kind::kRemoved:
        msgpack_pack_array(&p, 3);
        Str(p, "BlockRemoved");
        Hashes(p, s.hashes);
        Str(p, s.medium);
        break;
      case Kind::kCleared:
        msgpack_pack_array(&p, 1);
        Str(p, "AllBlocksCleared");
        break;
      case Kind::kUnknown:
        msgpack_pack_array(&p, 2);
        Str(p, "BlockPromoted");
        msgpack_pack_uint32(&p, 1);
        break;
    }
  }

  std::vector<Event> events_;
};

}  // namespace strata::controller::testing

// CodecRegistry: every codec Strata ships, found by name (Compress's `codec` argument, the CLI) or
// by the id an encoded frame carries (encoded_chunk.h). Names match case-insensitively.
//
// Thread-safety: every function may be called from any thread. Ownership: the registry owns the
// codecs; the pointers it returns stay valid for the life of the process.
#pragma once

#include <span>
#include <string_view>

#include "absl/status/statusor.h"
#include "storage/codec/codec.h"

namespace strata::storage {

class CodecRegistry {
 public:
  // The codec named `name`; kInvalidArgument naming every known codec otherwise.
  static absl::StatusOr<const Codec*> Find(std::string_view name);
  // The codec with `id`; kInvalidArgument for an id no codec has.
  static absl::StatusOr<const Codec*> Find(CodecId id);
  // Every codec, in id order.
  static std::span<const Codec* const> All();
};

}  // namespace strata::storage

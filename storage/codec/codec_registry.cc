#include "storage/codec/codec_registry.h"

#include <array>
#include <string>

#include "absl/strings/ascii.h"
#include "fmt/format.h"
#include "storage/codec/cachegen_codec.h"
#include "storage/codec/quant_codec.h"
#include "storage/codec/token_drop_codec.h"
#include "storage/codec/xkv_codec.h"

namespace strata::storage {
namespace {

const std::array<const Codec*, 8>& Codecs() {
  static const QuantCodec int8(CodecId::kInt8);
  static const QuantCodec kivi4(CodecId::kKivi4);
  static const QuantCodec kivi2(CodecId::kKivi2);
  static const CacheGenCodec cachegen;
  static const XkvCodec xkv;
  static const QuantCodec kivi8(CodecId::kKivi8);
  static const TokenDropCodec drop_sink_recent(CodecId::kDropSinkRecent);
  static const TokenDropCodec drop_h2o(CodecId::kDropH2o);
  // Appended in CodecId order: the fuzzers' seeds name codecs by index.
  static const std::array<const Codec*, 8> codecs = {
      &int8, &kivi4, &kivi2, &cachegen, &xkv, &kivi8, &drop_sink_recent, &drop_h2o};
  return codecs;
}

std::string KnownNames() {
  std::string names;
  for (const Codec* codec : Codecs()) {
    if (!names.empty()) names += ", ";
    names += codec->name();
  }
  return names;
}

}  // namespace

absl::StatusOr<const Codec*> CodecRegistry::Find(std::string_view name) {
  std::string lower(name);
  absl::AsciiStrToLower(&lower);
  for (const Codec* codec : Codecs()) {
    if (codec->name() == lower) return codec;
  }
  return absl::InvalidArgumentError(
      fmt::format("unknown codec '{}' (known: {})", name, KnownNames()));
}

absl::StatusOr<const Codec*> CodecRegistry::Find(CodecId id) {
  for (const Codec* codec : Codecs()) {
    if (codec->id() == id) return codec;
  }
  return absl::InvalidArgumentError(
      fmt::format("unknown codec id {} (known: {})", static_cast<uint16_t>(id), KnownNames()));
}

std::span<const Codec* const> CodecRegistry::All() { return Codecs(); }

}  // namespace strata::storage

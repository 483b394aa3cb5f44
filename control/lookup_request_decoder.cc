#include "control/lookup_request_decoder.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "fmt/format.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/support/slice.h"
#include "proto/convert.h"

namespace strata::control {
namespace {

absl::Status BothTokenFields() {
  return absl::InvalidArgumentError(
      "a LookupRequest carries its tokens in tokens or in tokens_fixed32, not in both");
}

// in.ReadTag() that refuses (false) a tag longer than 5 bytes, as the generated parser does: a tag
// is a 32-bit varint, and ReadTag would keep the low bits of a longer encoding. `tag` is 0 at the
// end of the bytes or the limit, and for a tag that does not parse.
bool ReadShortTag(google::protobuf::io::CodedInputStream& in, uint32_t& tag) {
  const int before = in.CurrentPosition();
  tag = in.ReadTag();
  return in.CurrentPosition() - before <= 5;
}

// Reads the length of a length-delimited field, refusing (false) one longer than 5 bytes or over
// INT32_MAX as the generated parser does (ReadVarint32 would keep the low 32 bits of either).
bool ReadLength(google::protobuf::io::CodedInputStream& in, uint32_t& length) {
  const int before = in.CurrentPosition();
  uint64_t value = 0;
  if (!in.ReadVarint64(&value) || in.CurrentPosition() - before > 5 ||
      value > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
    return false;
  }
  length = static_cast<uint32_t>(value);
  return true;
}

// Reads a length-delimited field's bytes at the stream's position (its length first); false when
// they run past the end.
bool ReadDelimited(google::protobuf::io::CodedInputStream& in, std::string_view& bytes) {
  uint32_t length = 0;
  const void* data = nullptr;
  int available = 0;
  if (!ReadLength(in, length)) return false;
  if (length == 0) {  // possibly at the end, where there is no buffer to point into
    bytes = {};
    return true;
  }
  if (!in.GetDirectBufferPointer(&data, &available) || static_cast<uint32_t>(available) < length ||
      !in.Skip(static_cast<int>(length))) {
    return false;
  }
  bytes = {static_cast<const char*>(data), length};
  return true;
}

// Decodes one v1::ChunkKey message of `length` bytes at the stream's position, field by field
// (no message, no string). INVALID_ARGUMENT for bytes that do not parse or a malformed key.
absl::StatusOr<ChunkKey> ReadChunkKey(google::protobuf::io::CodedInputStream& in, uint32_t length) {
  using google::protobuf::internal::WireFormatLite;
  const absl::Status malformed = absl::InvalidArgumentError("malformed chunk key in LookupRequest");
  const auto limit = in.PushLimit(static_cast<int>(length));
  uint32_t algorithm = 0, key_namespace = 0;
  uint64_t fingerprint = 0;
  std::string_view digest;
  for (uint32_t tag = 0; ReadShortTag(in, tag) && tag != 0;) {
    const auto type = WireFormatLite::GetTagWireType(tag);
    switch (WireFormatLite::GetTagFieldNumber(tag)) {
      case v1::ChunkKey::kAlgorithmFieldNumber:
        if (type != WireFormatLite::WIRETYPE_VARINT || !in.ReadVarint32(&algorithm)) {
          return malformed;
        }
        continue;
      case v1::ChunkKey::kNamespaceFieldNumber:
        if (type != WireFormatLite::WIRETYPE_VARINT || !in.ReadVarint32(&key_namespace)) {
          return malformed;
        }
        continue;
      case v1::ChunkKey::kLayoutFingerprintFieldNumber:
        if (type != WireFormatLite::WIRETYPE_FIXED64 || !in.ReadLittleEndian64(&fingerprint)) {
          return malformed;
        }
        continue;
      case v1::ChunkKey::kDigestFieldNumber:
        if (type != WireFormatLite::WIRETYPE_LENGTH_DELIMITED || !ReadDelimited(in, digest)) {
          return malformed;
        }
        continue;
      default: {
        // Groups are skipped by reading their tags unchecked: refused, no client sends them. A
        // length is read as the generated parser reads it (SkipField would keep the low 32 bits
        // of a longer one and go on inside the field's bytes).
        std::string_view skipped;
        if (WireFormatLite::GetTagFieldNumber(tag) == 0) return malformed;  // no field 0
        const bool skipped_ok = type == WireFormatLite::WIRETYPE_LENGTH_DELIMITED
                                    ? ReadDelimited(in, skipped)
                                    : type != WireFormatLite::WIRETYPE_START_GROUP &&
                                          type != WireFormatLite::WIRETYPE_END_GROUP &&
                                          WireFormatLite::SkipField(&in, tag);
        if (!skipped_ok) return malformed;
      }
    }
  }
  if (!in.ConsumedEntireMessage()) return malformed;
  in.PopLimit(limit);
  return ChunkKeyFromFields(static_cast<int>(algorithm), static_cast<int>(key_namespace),
                            fingerprint, digest);
}

// Appends the varints of a packed field's bytes to `tokens`, each cut to 32 bits as the generated
// parser does; false for a varint longer than 10 bytes or one that runs past the end.
bool AppendPackedVarints(std::string_view bytes, std::vector<uint32_t>& tokens) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const auto* const end = p + bytes.size();
  tokens.reserve(tokens.size() + bytes.size() / 2);
  while (p != end) {
    uint32_t value = *p & 0x7f;
    if (*p++ & 0x80) {
      int length = 1;
      uint8_t byte = 0;
      do {
        if (p == end || length == 10) return false;
        byte = *p++;
        if (length < 5) value |= static_cast<uint32_t>(byte & 0x7f) << (7 * length);
        ++length;
      } while (byte & 0x80);
    }
    tokens.push_back(value);
  }
  return true;
}

// Appends a packed fixed32 field's little-endian words to `tokens` (one copy: this host is
// little-endian too); false when its length is not a whole number of words.
bool AppendPackedFixed32(std::string_view bytes, std::vector<uint32_t>& tokens) {
  static_assert(std::endian::native == std::endian::little, "little-endian hosts only");
  if (bytes.size() % sizeof(uint32_t) != 0) return false;
  if (bytes.empty()) return true;  // memcpy may not be handed an empty vector's null data()
  const size_t before = tokens.size();
  tokens.resize(before + bytes.size() / sizeof(uint32_t));
  std::memcpy(tokens.data() + before, bytes.data(), bytes.size());
  return true;
}

// Reads one element of LookupRequest.tokens or .tokens_fixed32 at the stream's position (`tag`
// read), packed or not, into `tokens`. Returns false for bytes that do not parse; nullopt when
// `tag` is neither field in a wire type the generated parser reads as that field (it then keeps
// the field as an unknown one).
std::optional<bool> ReadTokens(google::protobuf::io::CodedInputStream& in, uint32_t tag,
                               std::vector<uint32_t>& tokens) {
  using google::protobuf::internal::WireFormatLite;
  const int number = WireFormatLite::GetTagFieldNumber(tag);
  if (number != v1::LookupRequest::kTokensFieldNumber &&
      number != v1::LookupRequest::kTokensFixed32FieldNumber) {
    return std::nullopt;
  }
  const bool fixed = number == v1::LookupRequest::kTokensFixed32FieldNumber;
  switch (WireFormatLite::GetTagWireType(tag)) {
    case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
      std::string_view bytes;
      return ReadDelimited(in, bytes) &&
             (fixed ? AppendPackedFixed32(bytes, tokens) : AppendPackedVarints(bytes, tokens));
    }
    case WireFormatLite::WIRETYPE_VARINT: {
      if (fixed) return std::nullopt;
      uint32_t value = 0;
      if (!in.ReadVarint32(&value)) return false;
      tokens.push_back(value);
      return true;
    }
    case WireFormatLite::WIRETYPE_FIXED32: {
      if (!fixed) return std::nullopt;
      uint32_t value = 0;
      if (!in.ReadLittleEndian32(&value)) return false;
      tokens.push_back(value);
      return true;
    }
    default:
      return std::nullopt;
  }
}

}  // namespace

absl::Status DecodeLookupRequest(const grpc::ByteBuffer& buffer, const SelectionLimits& limits,
                                 v1::LookupRequest& fields, std::vector<ChunkKey>& keys,
                                 std::vector<uint32_t>& tokens) {
  using google::protobuf::internal::WireFormatLite;
  const absl::Status malformed = absl::InvalidArgumentError("malformed LookupRequest");
  grpc::Slice flat;
  if (!buffer.DumpToSingleSlice(&flat).ok()) return malformed;
  google::protobuf::io::CodedInputStream in(flat.begin(), static_cast<int>(flat.size()));
  constexpr uint32_t kKeysTag = WireFormatLite::MakeTag(v1::LookupRequest::kKeysFieldNumber,
                                                        WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
  // A key takes at least 20 bytes on the wire (16-byte digest).
  keys.reserve(std::min<size_t>(flat.size() / 20, limits.max_keys));
  size_t varint_tokens = 0, fixed32_tokens = 0;
  // Every other field is copied as it came and parsed by the generated parser, which checks it.
  std::string others;
  while (true) {
    const int before = in.CurrentPosition();
    uint32_t tag = 0;
    if (!ReadShortTag(in, tag)) return malformed;
    if (tag == 0) {
      // The end of the bytes, or a tag that does not parse (truncated, or field 0).
      if (before != static_cast<int>(flat.size())) return malformed;
      break;
    }
    const size_t tokens_before = tokens.size();
    if (const std::optional<bool> read = ReadTokens(in, tag, tokens); read.has_value()) {
      if (!*read) return malformed;
      const bool fixed =
          WireFormatLite::GetTagFieldNumber(tag) == v1::LookupRequest::kTokensFixed32FieldNumber;
      (fixed ? fixed32_tokens : varint_tokens) += tokens.size() - tokens_before;
      continue;
    }
    if (tag != kKeysTag) {
      if (!WireFormatLite::SkipField(&in, tag)) return malformed;
      others.append(reinterpret_cast<const char*>(flat.begin()) + before,
                    static_cast<size_t>(in.CurrentPosition() - before));
      continue;
    }
    if (keys.size() == limits.max_keys) {
      return absl::InvalidArgumentError(
          fmt::format("more than {} keys; the limit is {}", limits.max_keys, limits.max_keys));
    }
    uint32_t length = 0;
    // A key may not run past the bytes: ReadTag takes their end for the end of the key.
    if (!ReadLength(in, length) ||
        length > flat.size() - static_cast<size_t>(in.CurrentPosition())) {
      return malformed;
    }
    absl::StatusOr<ChunkKey> key = ReadChunkKey(in, length);
    if (!key.ok()) return key.status();
    keys.push_back(*key);
  }
  if (in.CurrentPosition() != static_cast<int>(flat.size()) || !fields.ParseFromString(others)) {
    return malformed;
  }
  if (varint_tokens != 0 && fixed32_tokens != 0) return BothTokenFields();
  return absl::OkStatus();
}

absl::StatusOr<std::span<const uint32_t>> PromptTokens(const v1::LookupRequest& request) {
  if (request.tokens_size() != 0 && request.tokens_fixed32_size() != 0) return BothTokenFields();
  const auto& field = request.tokens_size() != 0 ? request.tokens() : request.tokens_fixed32();
  return std::span<const uint32_t>(field.data(), field.size());
}

}  // namespace strata::control

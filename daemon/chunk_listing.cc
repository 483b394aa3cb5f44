#include "daemon/chunk_listing.h"

#include <algorithm>
#include <charconv>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "fmt/format.h"
#include "proto/convert.h"
#include "storage/codec/codec.h"

namespace strata::daemon {
namespace {

constexpr char kHostTokenPrefix = 'h';   // a host tier cursor
constexpr char kLowerTokenPrefix = 'k';  // the key a lower tier's listing resumes after

absl::Status NotOurs(const std::string& token, std::string_view kind) {
  return absl::InvalidArgumentError(
      fmt::format("page token '{}' was not produced by this daemon for the {}", token, kind));
}

}  // namespace

std::string HostPageToken(uint64_t cursor) {
  return cursor == 0 ? std::string() : fmt::format("{}{}", kHostTokenPrefix, cursor);
}

std::string LowerTierPageToken(const std::optional<ChunkKey>& resume_after) {
  if (!resume_after.has_value()) return {};
  v1::ChunkKey proto;
  ToProto(*resume_after, &proto);
  return kLowerTokenPrefix + absl::BytesToHexString(proto.SerializeAsString());
}

absl::StatusOr<uint64_t> ParseHostPageToken(const std::string& token) {
  if (token.empty()) return 0;
  uint64_t cursor = 0;
  const char* end = token.data() + token.size();
  if (token[0] == kHostTokenPrefix) {
    auto [ptr, ec] = std::from_chars(token.data() + 1, end, cursor);
    if (ec == std::errc() && ptr == end && cursor != 0) return cursor;
  }
  return NotOurs(token, "host tier");
}

absl::StatusOr<std::optional<ChunkKey>> ParseLowerTierPageToken(const std::string& token) {
  if (token.empty()) return std::nullopt;
  const std::string_view hex = std::string_view(token).substr(1);
  const bool is_hex = hex.size() % 2 == 0 && std::all_of(hex.begin(), hex.end(), [](char c) {
                        return absl::ascii_isxdigit(static_cast<unsigned char>(c));
                      });
  v1::ChunkKey proto;
  if (token[0] != kLowerTokenPrefix || !is_hex ||
      !proto.ParseFromString(absl::HexStringToBytes(absl::string_view(hex.data(), hex.size())))) {
    return NotOurs(token, "tiers below the host tier");
  }
  absl::StatusOr<ChunkKey> key = FromProto(proto);
  if (!key.ok()) return NotOurs(token, "tiers below the host tier");
  return *key;
}

void AppendRows(size_t count, absl::FunctionRef<ListedRow(size_t)> row, bool columnar,
                v1::ListChunksResponse& response) {
  const int size = static_cast<int>(count);
  if (!columnar) {
    response.mutable_chunks()->Reserve(size);
    for (size_t i = 0; i < count; ++i) {
      const ListedRow r = row(i);
      v1::ChunkEntry* entry = response.add_chunks();
      ToProto(*r.key, entry->mutable_key());
      entry->set_tier(r.tier);
      entry->set_size_bytes(r.size_bytes);
      entry->set_num_tokens(r.num_tokens);
      entry->set_hard_pinned(r.hard_pinned);
      entry->set_soft_pin_remaining_ms(r.soft_pin_remaining_ms);
      entry->set_leases(r.leases);
      entry->set_stored_bytes(r.stored_bytes);
      if (r.codec_id != 0) {
        entry->set_codec(std::string(storage::CodecIdName(storage::CodecId{r.codec_id})));
      }
      if (r.error.has_value()) {
        entry->set_relative_error(r.error->relative_frobenius);
        entry->set_max_abs_error(r.error->max_abs);
      }
    }
    return;
  }
  v1::ChunkColumns& columns = *response.mutable_columns();
  columns.mutable_algorithms()->Reserve(size);
  columns.mutable_namespaces()->Reserve(size);
  columns.mutable_layout_fingerprints()->Reserve(size);
  columns.mutable_tiers()->Reserve(size);
  columns.mutable_size_bytes()->Reserve(size);
  columns.mutable_num_tokens()->Reserve(size);
  columns.mutable_hard_pinned()->Reserve(size);
  columns.mutable_soft_pin_remaining_ms()->Reserve(size);
  columns.mutable_leases()->Reserve(size);
  columns.mutable_stored_bytes()->Reserve(size);
  columns.mutable_codec_ids()->Reserve(size);
  columns.mutable_relative_errors()->Reserve(size);
  std::string& digests = *columns.mutable_digests();
  digests.reserve(count * ChunkKey::kMaxDigestBytes);
  for (size_t i = 0; i < count; ++i) {
    const ListedRow r = row(i);
    columns.add_algorithms(ToProto(r.key->algorithm()));
    columns.add_namespaces(ToProto(r.key->key_namespace()));
    columns.add_layout_fingerprints(r.key->layout_fingerprint());
    digests.append(reinterpret_cast<const char*>(r.key->digest().data()), r.key->digest().size());
    columns.add_tiers(r.tier);
    columns.add_size_bytes(r.size_bytes);
    columns.add_num_tokens(r.num_tokens);
    columns.add_hard_pinned(r.hard_pinned);
    columns.add_soft_pin_remaining_ms(r.soft_pin_remaining_ms);
    columns.add_leases(r.leases);
    columns.add_stored_bytes(r.stored_bytes);
    columns.add_codec_ids(r.codec_id);
    columns.add_relative_errors(r.error.has_value() ? r.error->relative_frobenius : -1);
  }
}

}  // namespace strata::daemon

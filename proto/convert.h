// Conversions between generated protobuf types (strata.v1) and core types, and the one place
// where absl::Status codes map onto gRPC codes. Used only by the adapter layers (daemon/,
// connector/src/, cli/, controller/). Thread-safe (pure functions).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/chunk_key.h"
#include "core/kv_layout.h"
#include "grpcpp/support/status.h"
#include "strata/v1/common.pb.h"

namespace strata {

// kInvalidArgument naming the field for unknown enum values or a layout that does not validate.
absl::StatusOr<KvLayout> FromProto(const v1::KvLayout& proto);
v1::KvLayout ToProto(const KvLayout& layout);

// kInvalidArgument for an unknown algorithm or namespace, or a digest of the wrong size.
absl::StatusOr<ChunkKey> FromProto(const v1::ChunkKey& proto);
// The same from v1::ChunkKey's field values (for callers that decode the wire themselves).
absl::StatusOr<ChunkKey> ChunkKeyFromFields(int algorithm, int key_namespace,
                                            uint64_t layout_fingerprint, std::string_view digest);
v1::ChunkKey ToProto(const ChunkKey& key);
// The same, written into `out` in place (no temporary message: `out` may live on an arena).
void ToProto(const ChunkKey& key, v1::ChunkKey* out);

// The keys of a packed chain, in order (none for empty digests). kInvalidArgument for an unknown
// algorithm or namespace, digests that are not a whole number of the algorithm's digest size, or
// more than `max_keys` keys.
absl::StatusOr<std::vector<ChunkKey>> FromProto(const v1::KeyChain& proto, size_t max_keys);
// Packs `chain` into `proto` (cleared first). kInvalidArgument, leaving `proto` empty, when a key
// is empty or differs from the first in algorithm, namespace or layout fingerprint.
absl::Status ToProto(std::span<const ChunkKey> chain, v1::KeyChain& proto);

absl::StatusOr<HashAlgorithm> FromProto(v1::HashAlgorithm proto);
v1::HashAlgorithm ToProto(HashAlgorithm algorithm);
absl::StatusOr<KeyNamespace> FromProto(v1::KeyNamespace proto);
v1::KeyNamespace ToProto(KeyNamespace ns);

absl::Status FromProto(const v1::Status& proto);
v1::Status ToProto(const absl::Status& status);

// absl and gRPC share the canonical code numbering; this is the only place that crosses it.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace strata

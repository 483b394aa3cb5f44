// Decodes a LookupRequest straight from its gRPC wire bytes, for the daemon's Lookup and the
// controller's cluster Lookup alike: the keys field by field (a 128-key request would otherwise
// be 128 messages and digest strings to allocate) and the tokens, from `tokens` or
// `tokens_fixed32`, in one pass (the generated parser would copy a 32K-token prompt's bytes and
// decode them a second time). It accepts exactly what the generated parser accepts, with the
// same values (tests/fuzz/control_lookup_fuzz.cc checks this). Pure function; thread-safe.
#pragma once

#include <span>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "control/chunk_selector.h"
#include "core/chunk_key.h"
#include "grpcpp/support/byte_buffer.h"
#include "strata/v1/control.pb.h"

namespace strata::control {

// The tokens of a LookupRequest parsed by the generated parser (a prompt nested in another
// message, as RouteRequest's): from `tokens` or `tokens_fixed32`. INVALID_ARGUMENT for tokens in
// both fields, as DecodeLookupRequest.
absl::StatusOr<std::span<const uint32_t>> PromptTokens(const v1::LookupRequest& request);

// `fields` gets every field but keys and tokens, which go to `keys` and `tokens`.
// INVALID_ARGUMENT for bytes that do not parse, a malformed key, more keys than `limits` allow,
// or tokens in both token fields.
absl::Status DecodeLookupRequest(const grpc::ByteBuffer& buffer, const SelectionLimits& limits,
                                 v1::LookupRequest& fields, std::vector<ChunkKey>& keys,
                                 std::vector<uint32_t>& tokens);

}  // namespace strata::control

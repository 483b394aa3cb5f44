// Fuzzes the control API's raw Lookup decoder (control/lookup_request_decoder.h), which decodes
// a LookupRequest's keys and tokens straight from the gRPC wire bytes instead of going through the
// generated parser, for the daemon's Lookup and the controller's.
//
// Input: the bytes of a LookupRequest as a client sends them. Invariants: a malformed request is
// kInvalidArgument; a request the raw decoder accepts is one the generated parser accepts too,
// with the same keys (FromProto of each), the same tokens (from tokens or tokens_fixed32, never
// both) and the same other fields.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "control/lookup_request_decoder.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/convert.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace v1 = strata::v1;
  grpc::Slice slice(data, size);
  const grpc::ByteBuffer buffer(&slice, 1);
  const strata::control::SelectionLimits limits{.max_tokens = 1u << 16, .max_keys = 256};
  v1::LookupRequest fields;
  std::vector<strata::ChunkKey> keys;
  std::vector<uint32_t> tokens;
  const absl::Status status =
      strata::control::DecodeLookupRequest(buffer, limits, fields, keys, tokens);
  if (!status.ok()) {
    FUZZ_CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  FUZZ_CHECK(keys.size() <= limits.max_keys);
  FUZZ_CHECK(!fields.keys_size() && !fields.tokens_size() && !fields.tokens_fixed32_size());

  v1::LookupRequest generated;
  FUZZ_CHECK(generated.ParseFromArray(data, static_cast<int>(size)));
  FUZZ_CHECK(static_cast<size_t>(generated.keys_size()) == keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    absl::StatusOr<strata::ChunkKey> key = strata::FromProto(generated.keys(static_cast<int>(i)));
    FUZZ_CHECK(key.ok() && *key == keys[i]);
  }
  FUZZ_CHECK(generated.tokens_size() == 0 || generated.tokens_fixed32_size() == 0);
  const auto& expected =
      generated.tokens_size() != 0 ? generated.tokens() : generated.tokens_fixed32();
  FUZZ_CHECK(tokens.size() == static_cast<size_t>(expected.size()) &&
             std::equal(tokens.begin(), tokens.end(), expected.begin()));
  generated.clear_keys();
  generated.clear_tokens();
  generated.clear_tokens_fixed32();
  FUZZ_CHECK(google::protobuf::util::MessageDifferencer::Equals(generated, fields));
  return 0;
}

// Fuzzes ConnectorMetadata::Deserialize (connector/src/metadata.cc): the bytes the scheduler
// process hands its workers (vLLM pickles them), which a worker must not trust blindly.
// Invalid bytes must be rejected with a status; bytes that deserialize must serialize back to
// themselves (the encoding is canonical) and deserialize to an equal value.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "strata/connector.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using strata::connector::ConnectorMetadata;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto metadata = ConnectorMetadata::Deserialize(bytes);
  if (!metadata.ok()) return 0;
  const std::string serialized = metadata->Serialize();
  FUZZ_CHECK(serialized == bytes);
  auto again = ConnectorMetadata::Deserialize(serialized);
  FUZZ_CHECK(again.ok() && *again == *metadata);
  return 0;
}

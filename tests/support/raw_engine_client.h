// RawEngineClient speaks the engine protocol frame by frame, for tests that need to send what a
// real connector never would (garbage, truncation, requests out of order) or to drive the
// daemon without the connector. It maps the arena the handshake passes and keeps the device
// pool's descriptor when one follows it. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/chunk_key.h"
#include "core/kv_layout.h"
#include "core/scoped_fd.h"
#include "strata/v1/engine.pb.h"

namespace strata::test_support {

// Requests over a packed chain of `keys` (which must share algorithm, namespace and layout).
v1::EngineRequest LookupRequest(std::span<const ChunkKey> keys);
v1::EngineRequest PrepareLoadRequest(std::span<const ChunkKey> keys, uint32_t lease_ms = 0);
v1::EngineRequest PrefetchRequest(std::span<const ChunkKey> keys);

class RawEngineClient {
 public:
  // Connects to the engine socket at `path`; connected() says whether it worked.
  explicit RawEngineClient(const std::string& path);
  ~RawEngineClient();
  RawEngineClient(const RawEngineClient&) = delete;
  RawEngineClient& operator=(const RawEngineClient&) = delete;

  bool connected() const { return connected_; }
  int fd() const { return fd_.get(); }
  // The mapped arena after a successful handshake, else nullptr.
  std::byte* arena() const { return arena_; }
  // The device pool's descriptor the handshake passed after the arena's (a host backend's
  // pool), else -1.
  int device_pool_fd() const { return device_pool_fd_.get(); }

  // Sends `request` (with a fresh request_id) and waits for its response.
  absl::StatusOr<v1::EngineResponse> Call(v1::EngineRequest request);
  // Sends `request` with a fresh request_id, which it returns, without waiting for a response
  // (pipelining: Receive the responses in order).
  absl::StatusOr<uint64_t> Send(v1::EngineRequest request);
  // Waits for the next response frame (kUnavailable once the daemon closed the session).
  absl::StatusOr<v1::EngineResponse> Receive();
  absl::StatusOr<v1::EngineResponse> Handshake(const KvLayout& layout,
                                               std::string engine_id = "raw-test-engine");

  // Reserves `keys` (full chunks of `num_tokens`), fills chunk i with byte `fill + i`, and
  // commits unless `commit` is false. Returns the handles reserved, or the first error. With
  // `chain_tokens` (the tokens of the whole chain), item i also carries its parent keys[i - 1]
  // and its tokens [i * num_tokens, (i + 1) * num_tokens) as token_ids. `hold_ms`: each item's
  // StoreItem.hold_ms.
  absl::StatusOr<std::vector<uint64_t>> Store(const std::vector<ChunkKey>& keys,
                                              uint32_t num_tokens, uint8_t fill, bool commit = true,
                                              std::string_view tenant = "",
                                              std::span<const uint32_t> chain_tokens = {},
                                              uint32_t hold_ms = 0);

 private:
  ScopedFd fd_;
  bool connected_ = false;
  uint64_t next_id_ = 0;
  std::byte* arena_ = nullptr;
  uint64_t arena_size_ = 0;
  ScopedFd device_pool_fd_;
};

}  // namespace strata::test_support

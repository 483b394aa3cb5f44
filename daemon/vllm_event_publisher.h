// VllmEventPublisher republishes the host tier's KV events (from an EventLog, whose disk tier
// events it leaves out) over a ZMQ PUB socket in vLLM's KV-event wire format, so routers that
// consume vLLM's events (llm-d, Dynamo) can consume Strata's. Each message is three frames: the
// topic, an 8-byte big-endian batch sequence number (0, 1, 2, ...), and a msgpack KVEventBatch:
//   [ts, [event, ...]]              ts: float seconds since the Unix epoch
//   ["BlockStored", [hash], parent hash or nil, token_ids, block_size, lora_id (nil), medium]
//   ["BlockRemoved", [hash], medium]
//   ["AllBlocksCleared"]
// Hashes are ChunkKey::EventId() (the low 64 bits of the digest, as vLLM's int block hashes);
// block_size is the chunk's token count; medium is "CPU" (the host tier). token_ids are the
// chunk's tokens: with a publisher, the daemon asks connectors at handshake to send them with
// each store (HandshakeResponse.kv_event_token_ids); a writer that did not (an older
// connector) gives an empty list. The parent is the chunk before it in its chain when the
// writer named it (nil for a chain's first chunk).
//
// Threading: one owned thread ("strata-kvpub") owns the socket; it sleeps as the log's waiter.
// If it falls behind the log's ring it logs how many events were lost and goes on.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/event_log.h"

namespace strata::daemon {

class VllmEventPublisher final : public EventLog::Waiter {
 public:
  // Binds a PUB socket on `endpoint` (e.g. "tcp://127.0.0.1:5557"; "tcp://127.0.0.1:*" picks a
  // port) and starts publishing events from the log's next one. kUnavailable when it cannot
  // bind. `log` is not owned and must outlive the publisher.
  static absl::StatusOr<std::unique_ptr<VllmEventPublisher>> Create(const std::string& endpoint,
                                                                    std::string topic,
                                                                    EventLog* log);
  // Stops the thread and closes the socket.
  ~VllmEventPublisher() override;

  // The endpoint bound (with the port chosen).
  const std::string& endpoint() const { return endpoint_; }

  void Wake() override;

 private:
  VllmEventPublisher(void* context, void* socket, std::string endpoint, std::string topic,
                     EventLog* log);
  void Run(std::stop_token stop);

  void* const context_;  // zmq context
  void* const socket_;   // PUB; used only by thread_
  const std::string endpoint_;
  const std::string topic_;
  EventLog* const log_;
  absl::Mutex mu_;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::jthread thread_;  // last: started once everything it uses exists
};

// The msgpack KVEventBatch of `events` (exposed for tests).
std::string EncodeVllmEventBatch(std::span<const KvEvent> events, double timestamp_seconds);

}  // namespace strata::daemon

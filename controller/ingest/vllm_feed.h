// VllmFeed: keeps one plain vLLM engine's share of the cluster index (cluster_index.h) from the
// KV events it publishes over ZMQ (engines without a Strata daemon are indexed too). It registers
// the instance in the index, then on its own thread subscribes to the engine's PUB socket (vLLM's
// kv_events_config endpoint, topic prefix `topic`), and applies each message (frames: topic, an
// 8-byte big-endian sequence number, the msgpack batch: vllm_events.h), keyed by VllmKeyTranslator,
// in one Ingest per message.
//
// ZMQ's PUB/SUB drops messages a slow or disconnected subscriber misses, and vLLM numbers its
// messages, so the feed checks that they follow on: a gap (messages lost) or a number that goes
// back (the engine restarted with an empty cache) clears the instance in the index
// (ChunkEventKind::kCleared) and the translator's memory before the message is applied. So does
// an engine disconnected for `unreachable_timeout` (ZMQ's socket monitor tells when), once per
// spell. After a clear, blocks whose chains began before it are skipped (their parents are
// unknown) until the engine stores their prompts again: the index misses hits rather than
// claiming chunks the engine may have dropped. vLLM's replay socket is not used.
//
// What the feed applies it publishes to `events` (when given), as a daemon's feed does:
// EVENTS per message, CLEARED for a clear, LEFT from the destructor.
//
// Threading: Start spawns the feed's thread; stats() may be called from any thread; the
// destructor stops the thread (within about 100 ms) and drops the instance from the index. The
// index and the hub must outlive the feed.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "controller/index/cluster_index.h"
#include "controller/ingest/event_hub.h"
#include "controller/ingest/vllm_key_translator.h"
#include "core/key_hasher.h"
#include "core/kv_layout.h"

namespace strata::controller {

struct VllmFeedOptions {
  std::string instance_id;
  // The engine's ZMQ PUB endpoint to connect to, e.g. "tcp://10.0.0.5:5557".
  std::string endpoint;
  // The subscription: messages whose topic starts with it ("" : every message).
  std::string topic;
  // The engine's KV layout; chunk_tokens is its block size.
  KvLayout layout;
  // The controller's key protocol (what Lookup and Route hash prompts with).
  KeyHasherOptions key_options;
  ClusterIndex* index = nullptr;  // not owned
  EventHub* events = nullptr;     // not owned; null: publish nowhere
  std::chrono::milliseconds unreachable_timeout{5'000};
};

struct VllmFeedStats {
  bool connected = false;
  uint64_t messages = 0;   // applied
  uint64_t malformed = 0;  // messages skipped: frames or payload not as vLLM sends them
  uint64_t gaps = 0;       // sequence gaps, each a clear
  uint64_t restarts = 0;   // sequence numbers that went back, each a clear
  uint64_t unreachable_clears = 0;
  uint64_t unknown_events = 0;  // events of types the decoder does not know
  uint64_t next_sequence = 0;   // the number the next message should carry
  uint64_t known_blocks = 0;    // block hashes the translator holds
  VllmTranslateStats translate;
};

class VllmFeed {
 public:
  // kInvalidArgument for a missing index, an empty id or endpoint, or a layout that does not
  // validate; RegisterInstance's errors (kFailedPrecondition for an id already registered);
  // kUnavailable when ZMQ refuses the endpoint.
  static absl::StatusOr<std::unique_ptr<VllmFeed>> Start(VllmFeedOptions options);
  ~VllmFeed();

  VllmFeed(const VllmFeed&) = delete;
  VllmFeed& operator=(const VllmFeed&) = delete;

  const std::string& instance_id() const { return options_.instance_id; }
  VllmFeedStats stats() const;

 private:
  VllmFeed(VllmFeedOptions options, KeyHasher hasher, void* context, void* socket, void* monitor);

  void Run();
  // Reads the monitor's pending events (connects and disconnects).
  void DrainMonitor();
  // Receives one message and applies it (or counts it malformed).
  void ReceiveMessage();
  // Clears the instance in the index and the translator's memory, publishing CLEARED.
  void Clear();
  void Apply(const std::vector<ChunkEvent>& events);
  void Publish(v1::InstanceEvents::Kind kind, const std::vector<ChunkEvent>* events = nullptr);

  const VllmFeedOptions options_;
  VllmKeyTranslator translator_;  // the thread's
  void* const context_;
  void* const socket_;   // SUB; the thread's
  void* const monitor_;  // PAIR, the SUB socket's monitor; the thread's
  // The thread's view of the stream.
  bool have_sequence_ = false;
  std::chrono::steady_clock::time_point disconnected_since_;
  bool cleared_while_disconnected_ = false;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  VllmFeedStats stats_ ABSL_GUARDED_BY(mu_);

  std::thread thread_;
};

}  // namespace strata::controller

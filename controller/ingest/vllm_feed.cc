#include "controller/ingest/vllm_feed.h"

#include <pthread.h>
#include <zmq.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <span>

#include "controller/ingest/daemon_events.h"
#include "core/fmt_absl.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace strata::controller {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kPollMs = 100;
// Messages received per wake before the monitor and the stop flag are looked at again.
constexpr int kMessagesPerWake = 64;
// A message larger than this is dropped by ZMQ (and the connection with it).
constexpr int64_t kMaxMessageBytes = int64_t{64} << 20;
// Messages queued for the feed's thread before ZMQ drops them (a gap, then a clear).
constexpr int kReceiveHighWaterMark = 100'000;

// The parts of one multipart message, received in place (a payload is decoded where ZMQ put
// it) and kept until this goes. Parts past kMaxParts are received and counted, not kept.
class Frames {
 public:
  static constexpr size_t kMaxParts = 3;

  Frames() = default;
  Frames(const Frames&) = delete;
  Frames& operator=(const Frames&) = delete;
  ~Frames() {
    for (size_t i = 0; i < std::min(count_, kMaxParts); ++i) zmq_msg_close(&parts_[i]);
  }

  // Receives every part of the next queued message; none when none is queued.
  void Receive(void* socket) {
    int more = 1;
    while (more != 0) {
      zmq_msg_t scratch;
      zmq_msg_t& part = count_ < kMaxParts ? parts_[count_] : scratch;
      zmq_msg_init(&part);
      if (zmq_msg_recv(&part, socket, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&part);
        return;
      }
      more = zmq_msg_more(&part);
      if (count_ >= kMaxParts) zmq_msg_close(&part);
      ++count_;
    }
  }

  size_t count() const { return count_; }
  // Part i < min(count(), kMaxParts).
  std::span<const std::byte> part(size_t i) {
    return {static_cast<const std::byte*>(zmq_msg_data(&parts_[i])), zmq_msg_size(&parts_[i])};
  }

 private:
  std::array<zmq_msg_t, kMaxParts> parts_;
  size_t count_ = 0;
};

void CloseSocket(void* socket) {
  const int linger_ms = 0;
  zmq_setsockopt(socket, ZMQ_LINGER, &linger_ms, sizeof(linger_ms));
  zmq_close(socket);
}

}  // namespace

absl::StatusOr<std::unique_ptr<VllmFeed>> VllmFeed::Start(VllmFeedOptions options) {
  if (options.index == nullptr) return absl::InvalidArgumentError("vLLM feed: no index");
  if (options.instance_id.empty() || options.endpoint.empty()) {
    return absl::InvalidArgumentError("vLLM feed: an instance id and an endpoint are needed");
  }
  absl::StatusOr<KeyHasher> hasher = KeyHasher::Create(options.layout, options.key_options);
  if (!hasher.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("vLLM feed '{}': {}", options.instance_id, hasher.status().message()));
  }
  void* context = zmq_ctx_new();
  if (context == nullptr) return absl::InternalError("vLLM feed: zmq_ctx_new failed");
  void* socket = zmq_socket(context, ZMQ_SUB);
  void* monitor = zmq_socket(context, ZMQ_PAIR);
  static std::atomic<uint64_t> feeds{0};
  const std::string monitor_endpoint = fmt::format("inproc://strata-vllm-feed-{}", feeds++);
  const int high_water_mark = kReceiveHighWaterMark;
  bool ok =
      socket != nullptr && monitor != nullptr &&
      zmq_setsockopt(socket, ZMQ_SUBSCRIBE, options.topic.data(), options.topic.size()) == 0 &&
      zmq_setsockopt(socket, ZMQ_MAXMSGSIZE, &kMaxMessageBytes, sizeof(kMaxMessageBytes)) == 0 &&
      zmq_setsockopt(socket, ZMQ_RCVHWM, &high_water_mark, sizeof(high_water_mark)) == 0 &&
      zmq_socket_monitor(socket, monitor_endpoint.c_str(),
                         ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED) == 0 &&
      zmq_connect(monitor, monitor_endpoint.c_str()) == 0;
  ok = ok && zmq_connect(socket, options.endpoint.c_str()) == 0;
  if (!ok) {
    const std::string error = zmq_strerror(zmq_errno());
    if (monitor != nullptr) CloseSocket(monitor);
    if (socket != nullptr) CloseSocket(socket);
    zmq_ctx_term(context);
    return absl::UnavailableError(fmt::format("vLLM feed '{}': cannot subscribe to '{}': {}",
                                              options.instance_id, options.endpoint, error));
  }
  if (absl::Status registered = options.index->RegisterInstance(options.instance_id);
      !registered.ok()) {
    CloseSocket(monitor);
    CloseSocket(socket);
    zmq_ctx_term(context);
    return registered;
  }
  return std::unique_ptr<VllmFeed>(
      new VllmFeed(std::move(options), *std::move(hasher), context, socket, monitor));
}

VllmFeed::VllmFeed(VllmFeedOptions options, KeyHasher hasher, void* context, void* socket,
                   void* monitor)
    : options_(std::move(options)),
      translator_(std::move(hasher)),
      context_(context),
      socket_(socket),
      monitor_(monitor),
      disconnected_since_(Clock::now()),
      // Nothing is indexed yet: an engine never reached has nothing to clear.
      cleared_while_disconnected_(true) {
  thread_ = std::thread([this] { Run(); });
}

VllmFeed::~VllmFeed() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
  zmq_socket_monitor(socket_, nullptr, 0);
  CloseSocket(monitor_);
  CloseSocket(socket_);
  zmq_ctx_term(context_);
  if (absl::Status dropped = options_.index->DropInstance(options_.instance_id); !dropped.ok()) {
    spdlog::warn("vLLM feed '{}': {}", options_.instance_id, dropped);
  }
  Publish(v1::InstanceEvents::LEFT);
}

VllmFeedStats VllmFeed::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void VllmFeed::Run() {
  pthread_setname_np(pthread_self(), "strata-vllmfeed");
  spdlog::info("vLLM feed '{}': subscribing to {} (topic '{}')", options_.instance_id,
               options_.endpoint, options_.topic);
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    std::array<zmq_pollitem_t, 2> items{};
    items[0].socket = socket_;
    items[0].events = ZMQ_POLLIN;
    items[1].socket = monitor_;
    items[1].events = ZMQ_POLLIN;
    if (zmq_poll(items.data(), items.size(), kPollMs) < 0) continue;  // EINTR
    if ((items[1].revents & ZMQ_POLLIN) != 0) DrainMonitor();
    if ((items[0].revents & ZMQ_POLLIN) != 0) {
      for (int i = 0; i < kMessagesPerWake; ++i) {
        int events = 0;
        size_t size = sizeof(events);
        if (zmq_getsockopt(socket_, ZMQ_EVENTS, &events, &size) != 0 ||
            (events & ZMQ_POLLIN) == 0) {
          break;
        }
        ReceiveMessage();
      }
    }
    bool connected = false;
    {
      absl::MutexLock lock(&mu_);
      connected = stats_.connected;
    }
    if (!connected && !cleared_while_disconnected_ &&
        Clock::now() - disconnected_since_ >= options_.unreachable_timeout) {
      spdlog::warn("vLLM feed '{}': {} unreachable for {} ms; its chunks are cleared",
                   options_.instance_id, options_.endpoint, options_.unreachable_timeout.count());
      cleared_while_disconnected_ = true;
      Clear();
      absl::MutexLock lock(&mu_);
      ++stats_.unreachable_clears;
    }
  }
}

void VllmFeed::DrainMonitor() {
  while (true) {
    Frames frames;
    frames.Receive(monitor_);
    if (frames.count() == 0) return;
    uint16_t event = 0;
    if (frames.part(0).size() < sizeof(event)) continue;
    std::memcpy(&event, frames.part(0).data(), sizeof(event));
    absl::MutexLock lock(&mu_);
    if (event == ZMQ_EVENT_CONNECTED) {
      stats_.connected = true;
      cleared_while_disconnected_ = false;
    } else if (event == ZMQ_EVENT_DISCONNECTED && stats_.connected) {
      stats_.connected = false;
      disconnected_since_ = Clock::now();
    }
  }
}

void VllmFeed::ReceiveMessage() {
  Frames frames;
  frames.Receive(socket_);
  const bool framed = frames.count() == 3 && frames.part(1).size() == 8;
  absl::StatusOr<VllmEventBatch> batch =
      framed
          ? DecodeVllmEventBatch(frames.part(2))
          : absl::InvalidArgumentError(fmt::format(
                "{} frames, not a topic, an 8-byte sequence number and a payload", frames.count()));
  uint64_t sequence = 0;
  if (framed) {
    for (std::byte byte : frames.part(1)) sequence = (sequence << 8) | static_cast<uint8_t>(byte);
  }
  // The counters move once the index shows what the message did (a reader that sees a gap
  // counted sees the instance cleared).
  bool gap = false;
  bool restart = false;
  {
    absl::MutexLock lock(&mu_);
    if (batch.ok() && have_sequence_) {
      gap = sequence > stats_.next_sequence;
      restart = sequence < stats_.next_sequence;
    }
    if (batch.ok()) stats_.next_sequence = sequence + 1;
  }
  if (!batch.ok()) {
    // Its events are unknown, as in a gap: what it removed must not stay in the index.
    spdlog::warn("vLLM feed '{}': a message is skipped and the instance cleared: {}",
                 options_.instance_id, batch.status());
    Clear();
    absl::MutexLock lock(&mu_);
    ++stats_.malformed;
    return;
  }
  if (gap || restart) {
    spdlog::info("vLLM feed '{}': {} at message {}; the instance is cleared", options_.instance_id,
                 gap ? "messages were lost" : "the engine restarted", sequence);
    Clear();
  }
  have_sequence_ = true;
  std::vector<ChunkEvent> events;
  translator_.Translate(*batch, events);
  Apply(events);
  absl::MutexLock lock(&mu_);
  stats_.gaps += gap ? 1 : 0;
  stats_.restarts += restart ? 1 : 0;
  ++stats_.messages;
  stats_.unknown_events += batch->unknown_events;
  stats_.known_blocks = translator_.known_blocks();
  stats_.translate = translator_.stats();
}

void VllmFeed::Clear() {
  translator_.Reset();
  const std::vector<ChunkEvent> clear{{.kind = ChunkEventKind::kCleared}};
  if (absl::Status s = options_.index->Ingest(options_.instance_id, clear); !s.ok()) {
    spdlog::warn("vLLM feed '{}': {}", options_.instance_id, s);
  }
  Publish(v1::InstanceEvents::CLEARED);
  absl::MutexLock lock(&mu_);
  stats_.known_blocks = 0;
}

void VllmFeed::Apply(const std::vector<ChunkEvent>& events) {
  if (events.empty()) return;
  if (absl::Status s = options_.index->Ingest(options_.instance_id, events); !s.ok()) {
    spdlog::warn("vLLM feed '{}': {}", options_.instance_id, s);
    return;
  }
  Publish(v1::InstanceEvents::EVENTS, &events);
}

void VllmFeed::Publish(v1::InstanceEvents::Kind kind, const std::vector<ChunkEvent>* events) {
  if (options_.events == nullptr) return;
  v1::InstanceEvents batch;
  batch.set_instance_id(options_.instance_id);
  batch.set_kind(kind);
  if (events != nullptr) {
    for (const ChunkEvent& event : *events) *batch.add_events() = ToProto(event);
  }
  options_.events->Publish(batch);
}

}  // namespace strata::controller

#include "daemon/vllm_event_publisher.h"

#include <msgpack.h>
#include <pthread.h>
#include <zmq.h>

#include <array>
#include <chrono>

#include "core/fmt_absl.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace strata::daemon {
namespace {

constexpr size_t kMaxEventsPerBatch = 256;
constexpr char kMedium[] = "CPU";

void PackString(msgpack_packer& packer, std::string_view text) {
  msgpack_pack_str(&packer, text.size());
  msgpack_pack_str_body(&packer, text.data(), text.size());
}

void PackEvent(msgpack_packer& packer, const KvEvent& event) {
  switch (event.type) {
    case KvEvent::Type::kStored:
      msgpack_pack_array(&packer, 7);
      PackString(packer, "BlockStored");
      msgpack_pack_array(&packer, 1);
      msgpack_pack_uint64(&packer, event.key.EventId());
      if (event.parent.empty()) {
        msgpack_pack_nil(&packer);
      } else {
        msgpack_pack_uint64(&packer, event.parent.EventId());
      }
      msgpack_pack_array(&packer, event.token_ids.size());
      for (uint32_t token : event.token_ids) msgpack_pack_uint32(&packer, token);
      msgpack_pack_uint32(&packer, event.num_tokens);
      msgpack_pack_nil(&packer);  // lora_id
      PackString(packer, kMedium);
      break;
    case KvEvent::Type::kRemoved:
      msgpack_pack_array(&packer, 3);
      PackString(packer, "BlockRemoved");
      msgpack_pack_array(&packer, 1);
      msgpack_pack_uint64(&packer, event.key.EventId());
      PackString(packer, kMedium);
      break;
    case KvEvent::Type::kCleared:
      msgpack_pack_array(&packer, 1);
      PackString(packer, "AllBlocksCleared");
      break;
  }
}

}  // namespace

std::string EncodeVllmEventBatch(std::span<const KvEvent> events, double timestamp_seconds) {
  msgpack_sbuffer buffer;
  msgpack_sbuffer_init(&buffer);
  msgpack_packer packer;
  msgpack_packer_init(&packer, &buffer, msgpack_sbuffer_write);
  msgpack_pack_array(&packer, 2);
  msgpack_pack_double(&packer, timestamp_seconds);
  msgpack_pack_array(&packer, events.size());
  for (const KvEvent& event : events) PackEvent(packer, event);
  std::string encoded(buffer.data, buffer.size);
  msgpack_sbuffer_destroy(&buffer);
  return encoded;
}

absl::StatusOr<std::unique_ptr<VllmEventPublisher>> VllmEventPublisher::Create(
    const std::string& endpoint, std::string topic, EventLog* log) {
  void* context = zmq_ctx_new();
  if (context == nullptr) return absl::InternalError("kv events: zmq_ctx_new failed");
  void* socket = zmq_socket(context, ZMQ_PUB);
  if (socket == nullptr || zmq_bind(socket, endpoint.c_str()) != 0) {
    const std::string error = zmq_strerror(zmq_errno());
    if (socket != nullptr) zmq_close(socket);
    zmq_ctx_term(context);
    return absl::UnavailableError(
        fmt::format("kv events: cannot bind ZMQ PUB on '{}': {}", endpoint, error));
  }
  std::array<char, 256> bound{};
  size_t bound_size = bound.size();
  zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, bound.data(), &bound_size);
  return std::unique_ptr<VllmEventPublisher>(
      new VllmEventPublisher(context, socket, std::string(bound.data()), std::move(topic), log));
}

VllmEventPublisher::VllmEventPublisher(void* context, void* socket, std::string endpoint,
                                       std::string topic, EventLog* log)
    : context_(context),
      socket_(socket),
      endpoint_(std::move(endpoint)),
      topic_(std::move(topic)),
      log_(log),
      thread_([this](std::stop_token stop) { Run(stop); }) {}

VllmEventPublisher::~VllmEventPublisher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
  log_->Unregister(this);
  const int linger_ms = 0;
  zmq_setsockopt(socket_, ZMQ_LINGER, &linger_ms, sizeof(linger_ms));
  zmq_close(socket_);
  zmq_ctx_term(context_);
}

void VllmEventPublisher::Wake() {
  absl::MutexLock lock(&mu_);
  woken_ = true;
}

void VllmEventPublisher::Run(std::stop_token) {
  pthread_setname_np(pthread_self(), "strata-kvpub");
  uint64_t next = log_->next_sequence();
  uint64_t batch = 0;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    absl::StatusOr<EventLog::ReadResult> read = log_->Read(next, kMaxEventsPerBatch, this);
    if (!read.ok()) {
      // Fell behind the ring: skip to what it still holds.
      const uint64_t resume = log_->next_sequence();
      spdlog::warn("kv events: publisher fell behind ({}); events {}..{} were not published",
                   read.status(), next, resume - 1);
      next = resume;
      continue;
    }
    if (read->events.empty()) {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](VllmEventPublisher* p)
               ABSL_NO_THREAD_SAFETY_ANALYSIS { return p->woken_ || p->stopping_; },
          this));
      if (stopping_) return;
      woken_ = false;
      continue;
    }
    next = read->next_sequence;
    // The host tier's events only: a consumer that ignores `medium` would take a disk copy's
    // removal for the chunk's.
    std::erase_if(read->events,
                  [](const KvEvent& event) { return event.tier != storage::Tier::kHost; });
    if (read->events.empty()) continue;
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const std::string payload = EncodeVllmEventBatch(read->events, now);
    std::array<unsigned char, 8> sequence;
    for (int i = 0; i < 8; ++i) sequence[i] = static_cast<unsigned char>(batch >> (56 - 8 * i));
    ++batch;
    // PUB never blocks: a slow subscriber loses messages (ZMQ's high-water mark), as with vLLM.
    zmq_send(socket_, topic_.data(), topic_.size(), ZMQ_SNDMORE);
    zmq_send(socket_, sequence.data(), sequence.size(), ZMQ_SNDMORE);
    zmq_send(socket_, payload.data(), payload.size(), 0);
  }
}

}  // namespace strata::daemon

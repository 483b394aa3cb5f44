// ZmqEnginePublisher: a vLLM engine's side of its KV events, for the ingest tests and benchmarks:
// a PUB socket bound on loopback that sends each message as vLLM does (topic, 8-byte big-endian
// sequence number, msgpack payload) and never drops one at its own end (no send high-water
// mark). Header-only; thread-compatible.
#pragma once

#include <zmq.h>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::controller::testing {

class ZmqEnginePublisher {
 public:
  // Binds "tcp://127.0.0.1:*"; endpoint() is empty when that failed. Messages go on `topic`.
  explicit ZmqEnginePublisher(std::string topic = "")
      : topic_(std::move(topic)), context_(zmq_ctx_new()), socket_(zmq_socket(context_, ZMQ_PUB)) {
    const int linger_ms = 0;
    const int unlimited = 0;
    zmq_setsockopt(socket_, ZMQ_LINGER, &linger_ms, sizeof(linger_ms));
    zmq_setsockopt(socket_, ZMQ_SNDHWM, &unlimited, sizeof(unlimited));
    if (zmq_bind(socket_, "tcp://127.0.0.1:*") != 0) return;
    std::array<char, 256> endpoint{};
    size_t size = endpoint.size();
    zmq_getsockopt(socket_, ZMQ_LAST_ENDPOINT, endpoint.data(), &size);
    endpoint_ = endpoint.data();
  }
  ~ZmqEnginePublisher() { Close(); }
  ZmqEnginePublisher(const ZmqEnginePublisher&) = delete;
  ZmqEnginePublisher& operator=(const ZmqEnginePublisher&) = delete;

  // Closes the socket (subscribers see the engine disconnect); idempotent.
  void Close() {
    if (socket_ == nullptr) return;
    zmq_close(socket_);
    zmq_ctx_term(context_);
    socket_ = nullptr;
  }

  const std::string& endpoint() const { return endpoint_; }

  void Send(uint64_t sequence, std::string_view payload) { SendOnTopic(topic_, sequence, payload); }
  void SendOnTopic(std::string_view topic, uint64_t sequence, std::string_view payload) {
    std::array<char, 8> number;
    for (int i = 0; i < 8; ++i) number[i] = static_cast<char>(sequence >> (56 - 8 * i));
    zmq_send(socket_, topic.data(), topic.size(), ZMQ_SNDMORE);
    zmq_send(socket_, number.data(), number.size(), ZMQ_SNDMORE);
    zmq_send(socket_, payload.data(), payload.size(), 0);
  }

 private:
  const std::string topic_;
  void* context_;
  void* socket_;
  std::string endpoint_;
};

}  // namespace strata::controller::testing

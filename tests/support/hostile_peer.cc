// strata_hostile_peer: a peer that attacks a daemon's peer port, for the integration tests of
// peer authentication. It dials ADDRESS over UCX (tcp) as a Strata transport would, plays one
// scenario, stops progressing for --stall-ms (a slow peer: 0 by default), listens for what the
// daemon sends back for --listen-ms, and prints one JSON line
// counting the daemon's messages by kind (storage/remote/internal/ucx_wire.h):
//   {"scenario": ..., "auth": n, "refusals": n, "hello": n, "call_reply": n, "read_data": n,
//    "recorded": n}
// ("recorded": the genuine handshake messages the replay scenario recorded, 0 in the others).
// Anything but authentication messages ("auth", "refusals") means the daemon served a stranger.
//
// Scenarios:
//   no-auth       asks for a read, a call and sends a hello at once, never authenticating;
//   wrong-secret  authenticates with --secret (not the cluster's), then asks for a read and a call;
//   replay        records a real dialler's challenge and proof (made with --secret, the cluster's:
//                 what an eavesdropper sees on the wire), then opens a new link and replays them
//                 verbatim, then asks for a read and a call;
//   data-first    sends a well-formed challenge, then asks for a read and a call before any proof.
// --transports picks UCX's transports (UCX_TLS; tcp by default, "posix,cma,tcp" for shared memory).
// Exit status 0 once the scenario has run (whatever the daemon answered), 2 on usage or UCX
// errors. Single-threaded; every wait is bounded.
#include <ucp/api/ucp.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "storage/remote/internal/peer_auth.h"
#include "storage/remote/internal/socket_address.h"
#include "storage/remote/internal/ucx_wire.h"

namespace {

namespace wire = strata::storage::remote::internal;
using Clock = std::chrono::steady_clock;

struct Received {
  std::array<int, wire::kAmIdCount> by_id{};
  int refusals = 0;
  std::vector<wire::AuthMessage> auth;  // the daemon's authentication messages, in order
};

Received* g_received = nullptr;

ucs_status_t OnAm(void* arg, const void* header, size_t header_length, void* /*data*/,
                  size_t /*length*/, const ucp_am_recv_param_t* /*param*/) {
  const auto id = static_cast<unsigned>(reinterpret_cast<uintptr_t>(arg));
  ++g_received->by_id[id];
  if (id == wire::kAmAuth) {
    if (auto message = wire::ParseHeader<wire::AuthMessage>(header, header_length)) {
      if (message->step == static_cast<uint8_t>(wire::AuthStep::kRefusal)) ++g_received->refusals;
      g_received->auth.push_back(*message);
    }
  }
  return UCS_OK;
}

void OnError(void* /*arg*/, ucp_ep_h /*ep*/, ucs_status_t /*status*/) {}

class Link {
 public:
  Link(ucp_worker_h worker, const wire::SocketAddress& address) : worker_(worker) {
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    params.sockaddr.addr = address.address();
    params.sockaddr.addrlen = address.length;
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &OnError;
    ok_ = ucp_ep_create(worker_, &params, &ep_) == UCS_OK;
  }
  ~Link() {
    if (ep_ == nullptr) return;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    Wait(ucp_ep_close_nbx(ep_, &param));
  }
  bool ok() const { return ok_; }

  template <typename Header>
  void Send(unsigned id, const Header& header, std::string_view data = {}) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_AM_SEND_FLAG_REPLY;
    Wait(ucp_am_send_nbx(ep_, id, &header, sizeof(header), data.data(), data.size(), &param));
  }

  // Progresses until `done` or `limit` passes.
  template <typename Done>
  void ProgressUntil(Done done, std::chrono::milliseconds limit) {
    const auto end = Clock::now() + limit;
    while (!done() && Clock::now() < end) ucp_worker_progress(worker_);
  }

 private:
  void Wait(ucs_status_ptr_t request) {
    if (!UCS_PTR_IS_PTR(request)) return;
    const auto end = Clock::now() + std::chrono::seconds(2);
    while (ucp_request_check_status(request) == UCS_INPROGRESS && Clock::now() < end) {
      ucp_worker_progress(worker_);
    }
    if (ucp_request_check_status(request) == UCS_INPROGRESS) ucp_request_cancel(worker_, request);
    ucp_request_free(request);
  }

  ucp_worker_h worker_;
  ucp_ep_h ep_ = nullptr;
  bool ok_ = false;
};

// What a daemon would serve: a 4 KiB read at offset 0, and a call (a peer handshake's type byte).
void AskForService(Link& link) {
  link.Send(wire::kAmReadRequest, wire::SegmentHeader{.request_id = 1, .length = 4096});
  link.Send(wire::kAmCall, wire::CallHeader{.call_id = 2}, std::string_view("\x01", 1));
}

// Runs the handshake as a dialler with `secret`; returns the messages it sent (challenge, proof).
std::vector<wire::AuthMessage> Authenticate(Link& link, Received& received,
                                            std::string_view secret) {
  wire::PeerAuth auth(secret, wire::LinkRole::kDialler, {}, wire::NewAuthNonce());
  std::vector<wire::AuthMessage> sent = {auth.Challenge()};
  link.Send(wire::kAmAuth, sent[0]);
  link.ProgressUntil([&] { return !received.auth.empty(); }, std::chrono::seconds(5));
  if (received.auth.empty()) return sent;
  wire::PeerAuth::Outcome outcome = auth.Receive(&received.auth[0], sizeof(wire::AuthMessage),
                                                 [](const wire::AuthNonce&) { return false; });
  if (outcome.reply && outcome.reply->step == static_cast<uint8_t>(wire::AuthStep::kProof)) {
    sent.push_back(*outcome.reply);
    link.Send(wire::kAmAuth, *outcome.reply);
  }
  return sent;
}

int Usage() {
  std::fprintf(stderr,
               "usage: strata_hostile_peer ADDRESS no-auth|wrong-secret|replay|data-first "
               "[--secret S] [--stall-ms N] [--listen-ms N] [--transports T]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return Usage();
  const std::string address_text = argv[1];
  const std::string scenario = argv[2];
  std::string secret = "not the cluster's secret";
  int stall_ms = 0;
  int listen_ms = 1500;
  std::string transports = "tcp";
  for (int i = 3; i + 1 < argc; i += 2) {
    if (std::string_view(argv[i]) == "--secret") {
      secret = argv[i + 1];
    } else if (std::string_view(argv[i]) == "--stall-ms") {
      stall_ms = std::stoi(argv[i + 1]);
    } else if (std::string_view(argv[i]) == "--listen-ms") {
      listen_ms = std::stoi(argv[i + 1]);
    } else if (std::string_view(argv[i]) == "--transports") {
      transports = argv[i + 1];
    } else {
      return Usage();
    }
  }
  auto address = wire::ParseSocketAddress(address_text);
  if (!address.ok()) return Usage();

  ucp_config_t* config = nullptr;
  if (ucp_config_read(nullptr, nullptr, &config) != UCS_OK) return 2;
  ucp_config_modify(config, "TLS", transports.c_str());
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM;
  ucp_context_h context = nullptr;
  const ucs_status_t initialised = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (initialised != UCS_OK) return 2;
  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h worker = nullptr;
  if (ucp_worker_create(context, &worker_params, &worker) != UCS_OK) return 2;
  for (unsigned id = 1; id < wire::kAmIdCount; ++id) {
    ucp_am_handler_param_t handler{};
    handler.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                         UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    handler.id = id;
    handler.flags = UCP_AM_FLAG_WHOLE_MSG;
    handler.cb = &OnAm;
    handler.arg = reinterpret_cast<void*>(static_cast<uintptr_t>(id));
    if (ucp_worker_set_am_recv_handler(worker, &handler) != UCS_OK) return 2;
  }

  Received received;
  g_received = &received;
  bool ran = true;
  std::vector<wire::AuthMessage> recorded;
  {
    if (scenario == "replay") {
      // The recording: a genuine dialler's messages on a link of their own.
      Received recording;
      g_received = &recording;
      Link genuine(worker, *address);
      if (!genuine.ok()) return 2;
      recorded = Authenticate(genuine, recording, secret);
      genuine.ProgressUntil([&] { return recording.by_id[wire::kAmHello] > 0; },
                            std::chrono::seconds(5));
      g_received = &received;
    }
    Link link(worker, *address);
    if (!link.ok()) return 2;
    if (scenario == "no-auth") {
      AskForService(link);
      link.Send(wire::kAmHello, wire::HelloHeader{.region_bytes = 1 << 20},
                std::string_view("fake rkey"));
    } else if (scenario == "wrong-secret") {
      Authenticate(link, received, secret);
      AskForService(link);
    } else if (scenario == "replay") {
      for (const wire::AuthMessage& message : recorded) link.Send(wire::kAmAuth, message);
      AskForService(link);
    } else if (scenario == "data-first") {
      wire::PeerAuth auth(secret, wire::LinkRole::kDialler, {}, wire::NewAuthNonce());
      link.Send(wire::kAmAuth, auth.Challenge());
      AskForService(link);
    } else {
      ran = false;
    }
    if (ran) {
      std::this_thread::sleep_for(std::chrono::milliseconds(stall_ms));
      link.ProgressUntil([] { return false; }, std::chrono::milliseconds(listen_ms));
    }
  }
  if (!ran) return Usage();
  std::printf(
      "{\"scenario\": \"%s\", \"auth\": %d, \"refusals\": %d, \"hello\": %d, \"call_reply\": %d, "
      "\"read_data\": %d, \"recorded\": %zu}\n",
      scenario.c_str(), received.by_id[wire::kAmAuth], received.refusals,
      received.by_id[wire::kAmHello], received.by_id[wire::kAmCallReply],
      received.by_id[wire::kAmReadData], recorded.size());
  std::fflush(stdout);
  ucp_worker_destroy(worker);
  ucp_cleanup(context);
  return 0;
}

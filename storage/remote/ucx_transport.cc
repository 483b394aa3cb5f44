#include "storage/remote/ucx_transport.h"

#include <fcntl.h>
#include <netdb.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/node_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "core/fmt_absl.h"
#include "core/scoped_fd.h"
#include "core/status_util.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "storage/remote/data_path.h"
#include "storage/remote/internal/peer_auth.h"
#include "storage/remote/internal/socket_address.h"
#include "storage/remote/internal/ucx_wire.h"
#include "storage/remote/internal/wire_status.h"

namespace strata::storage::remote {
namespace {

using internal::AuthMessage;
using internal::CallHeader;
using internal::CallReplyHeader;
using internal::HelloHeader;
using internal::LinkRole;
using internal::ParseHeader;
using internal::SegmentHeader;

constexpr auto kShutdownBudget = std::chrono::seconds(2);
// A packed rkey is tens to hundreds of bytes; a hello claiming more is refused unread.
constexpr size_t kMaxRkeyBytes = 64 << 10;
// How long a refused link waits for its peer to close it (never longer than auth_timeout).
constexpr std::chrono::milliseconds kRefusalLinger{1000};

absl::Status UcsError(ucs_status_t status, std::string_view context) {
  const std::string message = fmt::format("{}: {}", context, ucs_status_string(status));
  switch (status) {
    case UCS_ERR_CANCELED:
      return absl::CancelledError(message);
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_ENDPOINT_TIMEOUT:
      return absl::DeadlineExceededError(message);
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
      return absl::ResourceExhaustedError(message);
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
    case UCS_ERR_MESSAGE_TRUNCATED:
      return absl::InvalidArgumentError(message);
    default:
      return absl::UnavailableError(message);
  }
}

// The boot id of this host: two transports with equal ids share a machine (and its memory).
std::array<uint8_t, 16> ReadHostId() {
  std::array<uint8_t, 16> id{};
  ScopedFd fd(::open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC));
  char text[64] = {};
  if (!fd.valid() || ::read(fd.get(), text, sizeof(text) - 1) <= 0) {
    ::gethostname(text, sizeof(text) - 1);
  }
  size_t out = 0;
  for (size_t i = 0; text[i] != '\0' && out < 2 * id.size(); ++i) {
    const char c = text[i];
    const int nibble = c >= '0' && c <= '9'   ? c - '0'
                       : c >= 'a' && c <= 'f' ? c - 'a' + 10
                       : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                              : -1;
    if (nibble < 0) continue;
    id[out / 2] = static_cast<uint8_t>(id[out / 2] << 4 | nibble);
    ++out;
  }
  return id;
}

// A fixed-size message header owned until UCX is done with it (UCX 1.13 reads it until the send
// completes).
struct HeaderBytes {
  std::array<std::byte, 96> bytes{};
  size_t size = 0;

  template <typename Header>
  static HeaderBytes Of(const Header& header) {
    static_assert(sizeof(Header) <= sizeof(bytes));
    HeaderBytes out;
    std::memcpy(out.bytes.data(), &header, sizeof(Header));
    out.size = sizeof(Header);
    return out;
  }
};

// The commands other threads hand the progress thread. Shared with Reply closures, which may
// outlive the transport. A command runs once: on the progress thread with `live` true, or, when
// posted after Close, at once on the posting thread with `live` false (to complete what it
// carries with kCancelled, touching no transport state).
class Mailbox {
 public:
  using Command = absl::AnyInvocable<void(bool live) &&>;

  explicit Mailbox(ScopedFd wake) : wake_(std::move(wake)) {}

  int wake_fd() const { return wake_.get(); }

  void Post(Command command) {
    {
      absl::MutexLock lock(&mu_);
      if (!closed_) {
        commands_.push_back(std::move(command));
        command = nullptr;
      }
    }
    if (command) {
      std::move(command)(false);
      return;
    }
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t written = ::write(wake_.get(), &one, sizeof(one));
  }

  std::vector<Command> Take() {
    uint64_t count = 0;
    [[maybe_unused]] ssize_t drained = ::read(wake_.get(), &count, sizeof(count));
    absl::MutexLock lock(&mu_);
    return std::exchange(commands_, {});
  }

  bool empty() const {
    absl::MutexLock lock(&mu_);
    return commands_.empty();
  }

  // Later posts run at once, not live; returns what was queued (to run live before the progress
  // thread exits).
  std::vector<Command> Close() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    return std::exchange(commands_, {});
  }

 private:
  ScopedFd wake_;  // eventfd, non-blocking
  mutable absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Command> commands_ ABSL_GUARDED_BY(mu_);
};

// A Connect waiting for its link to come up.
struct ConnectWait {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);

  void Finish(absl::Status result) {
    absl::MutexLock lock(&mu);
    if (done) return;
    done = true;
    status = std::move(result);
  }
};

}  // namespace

class UcxTransport::Impl {
 public:
  explicit Impl(UcxTransportOptions options)
      : options_(std::move(options)),
        allowed_(ParseAllowedTransports(
            options_.transports.empty()
                ? std::string_view(std::getenv("UCX_TLS") != nullptr ? std::getenv("UCX_TLS") : "")
                : std::string_view(options_.transports))),
        host_id_(ReadHostId()) {}

  ~Impl() { Stop(); }

  // Starts the progress thread, which sets UCX up; returns once it has (or failed to).
  absl::Status Start();
  void Stop();

  const std::string& listen_address() const { return listen_address_; }
  uint64_t region_bytes() const { return options_.region.size(); }

  absl::StatusOr<PeerId> Connect(std::string_view address, std::chrono::milliseconds timeout);
  void Disconnect(PeerId peer);
  RequestId Read(PeerId peer, std::span<const Segment> segments, Deadline deadline,
                 Completion done);
  RequestId Call(PeerId peer, std::string request, Deadline deadline, Reply done);
  void Cancel(RequestId request);
  std::vector<PeerStats> Peers() const;

 private:
  enum class OpKind : uint8_t { kRead, kCall };

  // A Read or Call in flight (progress thread only).
  struct Op {
    OpKind kind = OpKind::kRead;
    PeerId peer = 0;
    DataPath path = DataPath::kActiveMessages;
    std::vector<Segment> segments;
    std::vector<bool> segment_done;
    size_t segments_left = 0;
    // UCX requests that may still touch the op's memory; the op completes when none remain.
    absl::flat_hash_set<void*> requests;
    bool failed = false;
    absl::Status status;
    Completion done;
    Reply reply;
    std::string reply_bytes;
    std::multimap<Deadline, RequestId>::iterator deadline;
    bool has_deadline = false;
    // Active-message reads: bytes of its segments asked for and not yet received (in the link's
    // window).
    uint64_t window_bytes = 0;
  };

  // A link to one peer (progress thread only). It carries nothing but authentication messages
  // until `auth` says the peer proved it holds the cluster secret; it is up once the peer's hello
  // (its region) has arrived too.
  struct Link {
    PeerId id = 0;
    ucp_ep_h ep = nullptr;
    std::optional<internal::PeerAuth> auth;
    // Not OK once authentication failed: nothing more is read. The link stays open until the peer
    // closes it (or kRefusalLinger passes), so that the refusal reaches the peer before the close.
    absl::Status refusal;
    bool up = false;
    bool came_up = false;  // it was up once (an inbound link that never was is forgotten)
    uint64_t remote_base = 0;
    uint64_t remote_bytes = 0;
    ucp_rkey_h rkey = nullptr;
    std::shared_ptr<ConnectWait> waiter;  // outbound links until they are up or fail
    absl::flat_hash_set<RequestId> ops;
    PeerStats stats;
    // Active-message reads (UcxTransportOptions::read_window_bytes): bytes asked for and not yet
    // received, and the segments waiting to be asked for, in order.
    uint64_t read_window_used = 0;
    std::deque<std::pair<RequestId, uint32_t>> reads_waiting;
  };

  // One UCX request's context: what to do when it completes, and what it must keep alive.
  struct Pending {
    Impl* impl = nullptr;
    RequestId op = 0;  // 0: not part of an op
    void* request = nullptr;
    HeaderBytes header;
    std::string owned;  // bytes a send reads or a receive fills, when the op does not own them
    absl::AnyInvocable<void(ucs_status_t) &&> on_done;
  };

  struct AmHandlerArg {
    Impl* impl = nullptr;
    unsigned id = 0;
  };

  // Progress thread.
  absl::Status Setup();
  void Teardown();
  void Run();
  void RunCommands(std::vector<Mailbox::Command> commands);
  void ExpireDeadlines();
  int NextTimeoutMs() const;
  void Shutdown();

  static void OnSendDone(void* request, ucs_status_t status, void* user_data);
  static void OnRecvDone(void* request, ucs_status_t status, size_t length, void* user_data);
  static void OnEpError(void* arg, ucp_ep_h ep, ucs_status_t status);
  static void OnConnRequest(ucp_conn_request_h request, void* arg);
  static ucs_status_t OnAm(void* arg, const void* header, size_t header_length, void* data,
                           size_t length, const ucp_am_recv_param_t* param);

  // Settles a UCX call's result: in flight (tracked until its callback) or done now.
  void Settle(Pending* pending, ucs_status_ptr_t result);
  void Complete(Pending* pending, ucs_status_t status);

  absl::Status OpenLink(PeerId id, const internal::SocketAddress& address,
                        ucp_conn_request_h conn_request, std::shared_ptr<ConnectWait> waiter);
  // Fails the link's requests and closes its endpoint. A failed link stays listed (with its error)
  // until forgotten; one we close ourselves is forgotten at once.
  void LinkDown(PeerId id, const absl::Status& why, bool forget);
  Link* FindLink(PeerId id);
  Link* LinkOf(const ucp_am_recv_param_t* param);
  void SendHello(Link& link);
  void SendAuth(Link& link, const AuthMessage& message,
                absl::AnyInvocable<void(ucs_status_t) &&> on_done);
  bool IsOwnNonce(const internal::AuthNonce& nonce) const;
  size_t LinksAuthenticating() const;
  // Forgets the inbound links that failed before they came up (a stranger's attempts must not
  // pile up); only where no callback of theirs can be on the stack.
  void ForgetFailedInbound();
  void SendAm(Link& link, unsigned am_id, HeaderBytes header, const void* data, size_t length,
              std::string owned, RequestId op, absl::AnyInvocable<void(ucs_status_t) &&> on_done);
  void PublishStats(const Link& link);

  void StartOp(RequestId id, Op op, Deadline deadline);
  void StartRmaRead(RequestId id, Op& op, Link& link);
  // Asks the peer for the waiting read segments that fit in the link's window.
  void AskForReads(Link& link);
  // `bytes` of `op`'s segments asked of `peer` are received or given up: out of the window.
  void ReturnReadWindow(PeerId peer, Op& op, uint64_t bytes);
  void SegmentDone(RequestId id, uint32_t segment);
  void Fail(RequestId id, absl::Status status);
  void MaybeFinish(RequestId id);
  absl::Status CheckSegments(const Op& op, const Link& link) const;
  bool InRegion(uint64_t offset, uint64_t length) const {
    return length <= options_.region.size() && offset <= options_.region.size() - length;
  }

  void HandleAuth(Link& link, const void* header, size_t header_length);
  void HandleHello(Link& link, const void* header, size_t header_length, void* data, size_t length,
                   const ucp_am_recv_param_t* param);
  void FinishHello(PeerId id, const internal::HelloHeader& hello, const std::string& rkey);
  void HandleCall(Link& link, const void* header, size_t header_length, void* data, size_t length,
                  const ucp_am_recv_param_t* param);
  void HandleCallReply(Link& link, const void* header, size_t header_length, void* data,
                       size_t length, const ucp_am_recv_param_t* param);
  void HandleReadRequest(Link& link, const void* header, size_t header_length);
  void HandleReadData(Link& link, const void* header, size_t header_length, void* data,
                      size_t length, const ucp_am_recv_param_t* param);
  // Receives a message's data into `destination` (eager: copied; rendezvous: UCX places it);
  // `on_done` runs once it is there or failed.
  void ReceiveInto(void* data, size_t length, const ucp_am_recv_param_t* param,
                   std::byte* destination, bool in_region, RequestId op,
                   absl::AnyInvocable<void(ucs_status_t) &&> on_done);
  void DeliverCall(PeerId peer, uint64_t call_id, std::string request);
  void SendSegmentAnswer(PeerId peer, unsigned am_id, SegmentHeader answer, const void* data);
  void SendCallReply(PeerId peer, uint64_t call_id, absl::StatusOr<std::string> reply);

  const UcxTransportOptions options_;
  const AllowedTransports allowed_;
  const std::array<uint8_t, 16> host_id_;

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_mem_h memh_ = nullptr;
  ucp_listener_h listener_ = nullptr;
  std::string rkey_;  // packed
  std::string listen_address_;
  ScopedFd epoll_;
  std::shared_ptr<Mailbox> mailbox_;
  std::array<AmHandlerArg, internal::kAmIdCount> am_args_;
  std::atomic<uint64_t> next_peer_{1};
  std::atomic<uint64_t> next_request_{1};
  std::atomic<bool> stopping_{false};
  std::thread thread_;

  // Progress thread only.
  // Node maps: references to links and ops stay valid while UCX calls back into the transport.
  absl::node_hash_map<PeerId, Link> links_;
  absl::flat_hash_map<ucp_ep_h, PeerId> peer_of_ep_;
  absl::node_hash_map<RequestId, Op> ops_;
  std::multimap<Deadline, RequestId> deadlines_;
  // When each link that is not up yet must be up (authenticated and its hello received).
  std::multimap<Deadline, PeerId> link_deadlines_;
  size_t requests_in_flight_ = 0;

  mutable absl::Mutex stats_mu_;
  std::map<PeerId, PeerStats> stats_ ABSL_GUARDED_BY(stats_mu_);
};

// ---- Start and stop ----

absl::Status UcxTransport::Impl::Start() {
  // Every UCX call, set-up and teardown included, happens on the progress thread: a UCP worker
  // belongs to the thread that created it.
  std::promise<absl::Status> started;
  std::future<absl::Status> ready = started.get_future();
  // spdlog's registry is made on its first use; making it here, before the thread, keeps two
  // transports' progress threads from making it at once (ThreadSanitizer cannot see the guard of
  // a static in the uninstrumented library, and reported that as a race).
  spdlog::default_logger_raw();
  thread_ = std::thread([this, &started] {
    pthread_setname_np(pthread_self(), "strata-ucx");
    absl::Status setup = Setup();
    const bool ok = setup.ok();
    started.set_value(std::move(setup));
    if (ok) Run();
    Teardown();
  });
  absl::Status status = ready.get();
  if (!status.ok()) thread_.join();
  return status;
}

absl::Status UcxTransport::Impl::Setup() {
  if (options_.region.empty()) {
    return absl::InvalidArgumentError("ucx transport: the registered region is empty");
  }
  if (options_.cluster_secret.empty()) {
    return absl::InvalidArgumentError(
        "ucx transport: a cluster secret is required (links authenticate with it)");
  }
  // A restarted daemon binds its port again while the last run's connections sit in TIME_WAIT.
  // UCX reads its connection managers' settings from the environment only (ucp_config_modify
  // does not reach them), so the default is set there once, before the first context, unless
  // the operator set it.
  static std::once_flag reuse_address;
  std::call_once(reuse_address, [] { ::setenv("UCX_TCP_CM_REUSEADDR", "y", /*overwrite=*/0); });
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) return UcsError(status, "ucx transport: read UCX configuration");
  auto modify = [&](const char* name, const std::string& value) -> absl::Status {
    if (value.empty()) return absl::OkStatus();
    const ucs_status_t modified = ucp_config_modify(config, name, value.c_str());
    if (modified != UCS_OK) {
      return UcsError(modified, fmt::format("ucx transport: UCX_{}={}", name, value));
    }
    return absl::OkStatus();
  };
  absl::Status configured = modify("TLS", options_.transports);
  if (configured.ok()) configured = modify("NET_DEVICES", options_.net_devices);
  if (!configured.ok()) {
    ucp_config_release(config);
    return configured;
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
  params.name = options_.name.c_str();
  status = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (status != UCS_OK) return UcsError(status, "ucx transport: ucp_init");

  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_NAME;
  worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;
  worker_params.name = options_.name.c_str();
  status = ucp_worker_create(context_, &worker_params, &worker_);
  if (status != UCS_OK) return UcsError(status, "ucx transport: create worker");

  ucp_mem_map_params_t map_params{};
  map_params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  map_params.address = options_.region.data();
  map_params.length = options_.region.size();
  status = ucp_mem_map(context_, &map_params, &memh_);
  if (status != UCS_OK) return UcsError(status, "ucx transport: register the region");
  void* packed = nullptr;
  size_t packed_size = 0;
  status = ucp_rkey_pack(context_, memh_, &packed, &packed_size);
  if (status != UCS_OK) return UcsError(status, "ucx transport: pack the region's rkey");
  rkey_.assign(static_cast<const char*>(packed), packed_size);
  ucp_rkey_buffer_release(packed);

  for (unsigned id = 1; id < internal::kAmIdCount; ++id) {
    am_args_[id] = {this, id};
    ucp_am_handler_param_t handler{};
    handler.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                         UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    handler.id = id;
    handler.flags = UCP_AM_FLAG_WHOLE_MSG;
    handler.cb = &Impl::OnAm;
    handler.arg = &am_args_[id];
    status = ucp_worker_set_am_recv_handler(worker_, &handler);
    if (status != UCS_OK) return UcsError(status, "ucx transport: set active message handler");
  }

  if (!options_.listen_address.empty()) {
    auto address = internal::ParseSocketAddress(options_.listen_address);
    if (!address.ok()) return Annotate(address.status(), "ucx transport: listen address");
    ucp_listener_params_t listener_params{};
    listener_params.field_mask =
        UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    listener_params.sockaddr.addr = address->address();
    listener_params.sockaddr.addrlen = address->length;
    listener_params.conn_handler.cb = &Impl::OnConnRequest;
    listener_params.conn_handler.arg = this;
    status = ucp_listener_create(worker_, &listener_params, &listener_);
    if (status != UCS_OK) {
      return UcsError(status, fmt::format("ucx transport: listen on {}", options_.listen_address));
    }
    ucp_listener_attr_t attr{};
    attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    status = ucp_listener_query(listener_, &attr);
    if (status != UCS_OK) return UcsError(status, "ucx transport: query the listener");
    listen_address_ = internal::FormatSocketAddress(attr.sockaddr);
  }

  int worker_fd = -1;
  status = ucp_worker_get_efd(worker_, &worker_fd);
  if (status != UCS_OK) return UcsError(status, "ucx transport: worker event fd");
  ScopedFd wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake.valid()) return ErrnoToStatus(errno, "ucx transport: eventfd");
  mailbox_ = std::make_shared<Mailbox>(std::move(wake));
  epoll_ = ScopedFd(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_.valid()) return ErrnoToStatus(errno, "ucx transport: epoll_create1");
  for (int fd : {worker_fd, mailbox_->wake_fd()}) {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = fd;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &event) != 0) {
      return ErrnoToStatus(errno, "ucx transport: epoll_ctl");
    }
  }
  return absl::OkStatus();
}

void UcxTransport::Impl::Stop() {
  if (!thread_.joinable()) return;
  stopping_.store(true, std::memory_order_release);
  mailbox_->Post([](bool) {});
  thread_.join();
}

void UcxTransport::Impl::Teardown() {
  for (auto& [id, link] : links_) {
    if (link.rkey != nullptr) ucp_rkey_destroy(link.rkey);
  }
  links_.clear();
  if (listener_ != nullptr) ucp_listener_destroy(listener_);
  if (memh_ != nullptr) ucp_mem_unmap(context_, memh_);
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (context_ != nullptr) ucp_cleanup(context_);
  listener_ = nullptr;
  memh_ = nullptr;
  worker_ = nullptr;
  context_ = nullptr;
}

void UcxTransport::Impl::Run() {
  std::array<epoll_event, 4> events;
  while (!stopping_.load(std::memory_order_acquire)) {
    RunCommands(mailbox_->Take());
    while (ucp_worker_progress(worker_) != 0) {
    }
    ExpireDeadlines();
    if (!mailbox_->empty() || stopping_.load(std::memory_order_acquire)) continue;
    const ucs_status_t armed = ucp_worker_arm(worker_);
    if (armed == UCS_ERR_BUSY) continue;
    if (armed != UCS_OK) {
      spdlog::error("ucx transport: ucp_worker_arm: {}", ucs_status_string(armed));
    }
    ::epoll_wait(epoll_.get(), events.data(), events.size(), NextTimeoutMs());
  }
  Shutdown();
}

void UcxTransport::Impl::RunCommands(std::vector<Mailbox::Command> commands) {
  for (Mailbox::Command& command : commands) std::move(command)(true);
}

void UcxTransport::Impl::Shutdown() {
  RunCommands(mailbox_->Close());
  std::vector<RequestId> ops;
  for (const auto& [id, op] : ops_) ops.push_back(id);
  for (RequestId id : ops) Fail(id, absl::CancelledError("ucx transport: shutting down"));
  std::vector<PeerId> peers;
  for (const auto& [id, link] : links_) peers.push_back(id);
  for (PeerId id : peers) {
    LinkDown(id, absl::CancelledError("ucx transport: shutting down"), /*forget=*/true);
  }
  const auto give_up = std::chrono::steady_clock::now() + kShutdownBudget;
  while (requests_in_flight_ > 0 && std::chrono::steady_clock::now() < give_up) {
    ucp_worker_progress(worker_);
  }
  if (requests_in_flight_ > 0) {
    spdlog::warn("ucx transport: {} UCX requests still in flight at shutdown", requests_in_flight_);
  }
}

// ---- UCX request plumbing ----

void UcxTransport::Impl::Settle(Pending* pending, ucs_status_ptr_t result) {
  if (UCS_PTR_IS_PTR(result)) {
    pending->request = result;
    ++requests_in_flight_;
    if (pending->op != 0) {
      auto it = ops_.find(pending->op);
      if (it != ops_.end()) it->second.requests.insert(result);
    }
    return;
  }
  Complete(pending, UCS_PTR_STATUS(result));
}

void UcxTransport::Impl::Complete(Pending* pending, ucs_status_t status) {
  if (pending->request != nullptr) {
    --requests_in_flight_;
    if (pending->op != 0) {
      auto it = ops_.find(pending->op);
      if (it != ops_.end()) it->second.requests.erase(pending->request);
    }
  }
  if (pending->on_done) std::move(pending->on_done)(status);
  if (pending->request != nullptr) ucp_request_free(pending->request);
  const RequestId op = pending->op;
  delete pending;
  if (op != 0) MaybeFinish(op);
}

void UcxTransport::Impl::OnSendDone(void* /*request*/, ucs_status_t status, void* user_data) {
  auto* pending = static_cast<Pending*>(user_data);
  pending->impl->Complete(pending, status);
}

void UcxTransport::Impl::OnRecvDone(void* /*request*/, ucs_status_t status, size_t /*length*/,
                                    void* user_data) {
  auto* pending = static_cast<Pending*>(user_data);
  pending->impl->Complete(pending, status);
}

// ---- Links ----

absl::Status UcxTransport::Impl::OpenLink(PeerId id, const internal::SocketAddress& address,
                                          ucp_conn_request_h conn_request,
                                          std::shared_ptr<ConnectWait> waiter) {
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &Impl::OnEpError;
  params.err_handler.arg = this;
  if (conn_request != nullptr) {
    params.field_mask |= UCP_EP_PARAM_FIELD_CONN_REQUEST;
    params.conn_request = conn_request;
  } else {
    params.field_mask |= UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
    params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    params.sockaddr.addr = address.address();
    params.sockaddr.addrlen = address.length;
  }
  ucp_ep_h ep = nullptr;
  const ucs_status_t status = ucp_ep_create(worker_, &params, &ep);
  const std::string name = internal::FormatSocketAddress(address.storage);
  if (status != UCS_OK) {
    absl::Status error = UcsError(status, fmt::format("ucx transport: connect to {}", name));
    if (waiter) waiter->Finish(error);
    return error;
  }
  Link& link = links_[id];
  link.id = id;
  link.ep = ep;
  link.waiter = std::move(waiter);
  link.stats.id = id;
  link.stats.address = name;
  link.stats.outbound = conn_request == nullptr;
  const LinkRole role = conn_request == nullptr ? LinkRole::kDialler : LinkRole::kListener;
  link.auth.emplace(options_.cluster_secret, role, internal::WireVersions{},
                    internal::NewAuthNonce());
  peer_of_ep_[ep] = id;
  link_deadlines_.emplace(std::chrono::steady_clock::now() + options_.auth_timeout, id);
  PublishStats(link);
  SendAuth(link, link.auth->Challenge(), [this, id](ucs_status_t status) {
    if (status != UCS_OK && status != UCS_ERR_CANCELED) {
      LinkDown(id, UcsError(status, "ucx transport: send challenge"), /*forget=*/false);
    }
  });
  return absl::OkStatus();
}

void UcxTransport::Impl::SendAuth(Link& link, const AuthMessage& message,
                                  absl::AnyInvocable<void(ucs_status_t) &&> on_done) {
  SendAm(link, internal::kAmAuth, HeaderBytes::Of(message), nullptr, 0, {}, 0, std::move(on_done));
}

bool UcxTransport::Impl::IsOwnNonce(const internal::AuthNonce& nonce) const {
  return std::any_of(links_.begin(), links_.end(), [&](const auto& entry) {
    return entry.second.auth && entry.second.auth->nonce() == nonce;
  });
}

void UcxTransport::Impl::ForgetFailedInbound() {
  std::vector<PeerId> failed;
  for (const auto& [id, link] : links_) {
    if (link.ep == nullptr && !link.stats.outbound && !link.came_up) failed.push_back(id);
  }
  absl::MutexLock lock(&stats_mu_);
  for (PeerId id : failed) {
    links_.erase(id);
    stats_.erase(id);
  }
}

size_t UcxTransport::Impl::LinksAuthenticating() const {
  return static_cast<size_t>(std::count_if(links_.begin(), links_.end(), [](const auto& entry) {
    return entry.second.ep != nullptr && !entry.second.up;
  }));
}

void UcxTransport::Impl::SendHello(Link& link) {
  HelloHeader hello;
  hello.version = link.auth->version();
  hello.region_base = reinterpret_cast<uint64_t>(options_.region.data());
  hello.region_bytes = options_.region.size();
  std::memcpy(hello.host_id, host_id_.data(), sizeof(hello.host_id));
  SendAm(link, internal::kAmHello, HeaderBytes::Of(hello), nullptr, 0, rkey_, 0,
         [this, id = link.id](ucs_status_t status) {
           if (status != UCS_OK && status != UCS_ERR_CANCELED) {
             LinkDown(id, UcsError(status, "ucx transport: send hello"), /*forget=*/false);
           }
         });
}

void UcxTransport::Impl::LinkDown(PeerId id, const absl::Status& why, bool forget) {
  auto it = links_.find(id);
  if (it == links_.end()) return;
  Link& link = it->second;
  const bool was_up = link.up;
  if (link.ep != nullptr) {
    link.reads_waiting.clear();  // their ops fail below
    std::vector<RequestId> ops(link.ops.begin(), link.ops.end());
    for (RequestId op : ops) Fail(op, why);
    if (link.waiter) link.waiter->Finish(why);
    link.waiter.reset();
    if (link.rkey != nullptr) ucp_rkey_destroy(link.rkey);
    link.rkey = nullptr;
    peer_of_ep_.erase(link.ep);
    ucp_request_param_t param{};
    param.op_attr_mask =
        UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    param.cb.send = &Impl::OnSendDone;
    auto* pending = new Pending{.impl = this};
    param.user_data = pending;
    ucp_ep_h ep = std::exchange(link.ep, nullptr);
    link.up = false;
    link.stats.up = false;
    // A refused link says why it was refused, not how it closed afterwards.
    link.stats.last_error = (link.refusal.ok() ? why : link.refusal).ToString();
    Settle(pending, ucp_ep_close_nbx(ep, &param));
  }
  if (forget) {
    links_.erase(it);
    absl::MutexLock lock(&stats_mu_);
    stats_.erase(id);
  } else {
    PublishStats(link);
  }
  if (was_up && options_.handlers.on_peer_down && !stopping_.load(std::memory_order_acquire)) {
    options_.handlers.on_peer_down(id, why);
  }
}

UcxTransport::Impl::Link* UcxTransport::Impl::FindLink(PeerId id) {
  auto it = links_.find(id);
  return it == links_.end() || it->second.ep == nullptr ? nullptr : &it->second;
}

UcxTransport::Impl::Link* UcxTransport::Impl::LinkOf(const ucp_am_recv_param_t* param) {
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0) return nullptr;
  auto it = peer_of_ep_.find(param->reply_ep);
  return it == peer_of_ep_.end() ? nullptr : FindLink(it->second);
}

void UcxTransport::Impl::OnEpError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* self = static_cast<Impl*>(arg);
  auto it = self->peer_of_ep_.find(ep);
  if (it == self->peer_of_ep_.end()) return;
  // Whatever UCX's reason (reset, timeout, unreachable), the peer is gone: kUnavailable.
  self->LinkDown(it->second,
                 absl::UnavailableError(
                     fmt::format("ucx transport: link failed: {}", ucs_status_string(status))),
                 /*forget=*/false);
}

void UcxTransport::Impl::OnConnRequest(ucp_conn_request_h request, void* arg) {
  auto* self = static_cast<Impl*>(arg);
  ucp_conn_request_attr_t attr{};
  attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
  internal::SocketAddress client;
  if (ucp_conn_request_query(request, &attr) == UCS_OK) {
    std::memcpy(&client.storage, &attr.client_address, sizeof(attr.client_address));
  }
  if (self->stopping_.load(std::memory_order_acquire)) {
    ucp_listener_reject(self->listener_, request);
    return;
  }
  self->ForgetFailedInbound();
  if (self->LinksAuthenticating() >= self->options_.max_links_authenticating) {
    spdlog::warn("ucx transport: refused a link from {}: {} links are authenticating already",
                 internal::FormatSocketAddress(client.storage),
                 self->options_.max_links_authenticating);
    ucp_listener_reject(self->listener_, request);
    return;
  }
  const PeerId id = self->next_peer_.fetch_add(1);
  absl::Status opened = self->OpenLink(id, client, request, nullptr);
  if (!opened.ok()) spdlog::warn("{}", opened.ToString());
}

void UcxTransport::Impl::PublishStats(const Link& link) {
  absl::MutexLock lock(&stats_mu_);
  stats_[link.id] = link.stats;
}

void UcxTransport::Impl::SendAm(Link& link, unsigned am_id, HeaderBytes header, const void* data,
                                size_t length, std::string owned, RequestId op,
                                absl::AnyInvocable<void(ucs_status_t) &&> on_done) {
  auto* pending = new Pending{.impl = this,
                              .op = op,
                              .header = header,
                              .owned = std::move(owned),
                              .on_done = std::move(on_done)};
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_AM_SEND_FLAG_REPLY;
  param.cb.send = &Impl::OnSendDone;
  param.user_data = pending;
  if (data == nullptr) {
    data = pending->owned.data();
    length = pending->owned.size();
  } else {
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    param.memh = memh_;
  }
  Settle(pending, ucp_am_send_nbx(link.ep, am_id, pending->header.bytes.data(),
                                  pending->header.size, data, length, &param));
}

// ---- Requests ----

absl::StatusOr<PeerId> UcxTransport::Impl::Connect(std::string_view address,
                                                   std::chrono::milliseconds timeout) {
  auto parsed = internal::ParseSocketAddress(address);
  if (!parsed.ok()) return Annotate(parsed.status(), "ucx transport: connect");
  // UCX 1.13 asserts (aborting the process) when a client-server endpoint fails before it is
  // connected, as a dial to a port nobody listens on does. A plain TCP probe first turns the
  // common case, a peer that is down, into a clean kUnavailable without touching UCX.
  if (absl::Status probed = internal::ProbeTcp(*parsed, timeout); !probed.ok()) {
    return Annotate(probed, "ucx transport: connect");
  }
  const PeerId id = next_peer_.fetch_add(1);
  auto waiter = std::make_shared<ConnectWait>();
  mailbox_->Post([this, id, address = *parsed, waiter](bool live) {
    if (!live) {
      waiter->Finish(absl::CancelledError("ucx transport: shutting down"));
      return;
    }
    (void)OpenLink(id, address, nullptr, waiter);
  });
  absl::MutexLock lock(&waiter->mu);
  const bool finished =
      waiter->mu.AwaitWithTimeout(absl::Condition(&waiter->done), absl::FromChrono(timeout));
  if (finished && waiter->status.ok()) return id;
  mailbox_->Post([this, id](bool live) {
    if (live) LinkDown(id, absl::CancelledError("ucx transport: connect gave up"), true);
  });
  if (!finished) {
    return absl::DeadlineExceededError(fmt::format(
        "ucx transport: connect to {}: no answer within {} ms", address, timeout.count()));
  }
  return waiter->status;
}

void UcxTransport::Impl::Disconnect(PeerId peer) {
  mailbox_->Post([this, peer](bool live) {
    if (live) LinkDown(peer, absl::CancelledError("ucx transport: disconnected locally"), true);
  });
}

RequestId UcxTransport::Impl::Read(PeerId peer, std::span<const Segment> segments,
                                   Deadline deadline, Completion done) {
  const RequestId id = next_request_.fetch_add(1);
  Op op;
  op.kind = OpKind::kRead;
  op.peer = peer;
  op.segments.assign(segments.begin(), segments.end());
  op.done = std::move(done);
  mailbox_->Post([this, id, op = std::move(op), deadline](bool live) mutable {
    if (!live) {
      std::move(op.done)(absl::CancelledError("ucx transport: shutting down"));
      return;
    }
    StartOp(id, std::move(op), deadline);
  });
  return id;
}

RequestId UcxTransport::Impl::Call(PeerId peer, std::string request, Deadline deadline,
                                   Reply done) {
  const RequestId id = next_request_.fetch_add(1);
  Op op;
  op.kind = OpKind::kCall;
  op.peer = peer;
  op.reply_bytes = std::move(request);
  op.reply = std::move(done);
  mailbox_->Post([this, id, op = std::move(op), deadline](bool live) mutable {
    if (!live) {
      std::move(op.reply)(absl::CancelledError("ucx transport: shutting down"));
      return;
    }
    StartOp(id, std::move(op), deadline);
  });
  return id;
}

void UcxTransport::Impl::Cancel(RequestId request) {
  mailbox_->Post([this, request](bool live) {
    if (live) Fail(request, absl::CancelledError("ucx transport: cancelled"));
  });
}

absl::Status UcxTransport::Impl::CheckSegments(const Op& op, const Link& link) const {
  const std::byte* region = options_.region.data();
  for (size_t i = 0; i < op.segments.size(); ++i) {
    const Segment& segment = op.segments[i];
    const bool local_inside =
        segment.local.data() >= region &&
        InRegion(static_cast<uint64_t>(segment.local.data() - region), segment.local.size());
    const bool remote_inside = segment.local.size() <= link.remote_bytes &&
                               segment.remote_offset <= link.remote_bytes - segment.local.size();
    if (segment.local.empty() || !local_inside || !remote_inside) {
      return absl::InvalidArgumentError(fmt::format(
          "ucx transport: segment {} ({} bytes, remote offset {}) lies outside {} registered "
          "region",
          i, segment.local.size(), segment.remote_offset, local_inside ? "the peer's" : "our"));
    }
  }
  return absl::OkStatus();
}

void UcxTransport::Impl::StartOp(RequestId id, Op op, Deadline deadline) {
  op.segments_left = op.kind == OpKind::kCall ? 1 : op.segments.size();
  op.segment_done.assign(op.segments.size(), false);
  const PeerId peer = op.peer;
  auto [it, inserted] = ops_.emplace(id, std::move(op));
  Op& placed = it->second;
  Link* link = FindLink(peer);
  if (link == nullptr || !link->up) {
    Fail(id, absl::UnavailableError(fmt::format("ucx transport: peer {} is not connected", peer)));
    return;
  }
  if (placed.kind != OpKind::kCall) {
    if (absl::Status checked = CheckSegments(placed, *link); !checked.ok()) {
      Fail(id, std::move(checked));
      return;
    }
  }
  link->ops.insert(id);
  placed.deadline = deadlines_.emplace(deadline, id);
  placed.has_deadline = true;
  placed.path = link->stats.data_path;
  if (placed.kind == OpKind::kCall) {
    std::string request = std::move(placed.reply_bytes);
    SendAm(*link, internal::kAmCall, HeaderBytes::Of(CallHeader{.call_id = id}), nullptr, 0,
           std::move(request), id, [this, id](ucs_status_t status) {
             if (status != UCS_OK) Fail(id, UcsError(status, "ucx transport: send call"));
           });
  } else if (placed.path == DataPath::kRma) {
    StartRmaRead(id, placed, *link);
  } else {
    // Asked for through the link's window.
    for (uint32_t i = 0; i < placed.segments.size(); ++i) link->reads_waiting.emplace_back(id, i);
    AskForReads(*link);
  }
  MaybeFinish(id);
}

void UcxTransport::Impl::StartRmaRead(RequestId id, Op& op, Link& link) {
  for (uint32_t i = 0; i < op.segments.size(); ++i) {
    const Segment segment = op.segments[i];
    auto* pending = new Pending{.impl = this, .op = id};
    pending->on_done = [this, id, i](ucs_status_t status) {
      if (status != UCS_OK) {
        Fail(id, UcsError(status, "ucx transport: get"));
      } else {
        SegmentDone(id, i);
      }
    };
    ucp_request_param_t param{};
    param.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
    param.cb.send = &Impl::OnSendDone;
    param.user_data = pending;
    param.memh = memh_;
    Settle(pending, ucp_get_nbx(link.ep, segment.local.data(), segment.local.size(),
                                link.remote_base + segment.remote_offset, link.rkey, &param));
    if (ops_.find(id) == ops_.end() || ops_.at(id).failed) return;
  }
}

void UcxTransport::Impl::AskForReads(Link& link) {
  while (!link.reads_waiting.empty()) {
    // Not a structured binding: the lambda below captures the id (clang before 16 refuses that).
    const RequestId id = link.reads_waiting.front().first;
    const uint32_t i = link.reads_waiting.front().second;
    auto it = ops_.find(id);
    if (it == ops_.end() || it->second.failed) {  // ended while it waited
      link.reads_waiting.pop_front();
      continue;
    }
    const uint64_t bytes = it->second.segments[i].local.size();
    if (link.read_window_used > 0 && link.read_window_used + bytes > options_.read_window_bytes) {
      return;
    }
    link.reads_waiting.pop_front();
    link.read_window_used += bytes;
    it->second.window_bytes += bytes;
    const SegmentHeader header{.request_id = id,
                               .remote_offset = it->second.segments[i].remote_offset,
                               .length = bytes,
                               .segment = i};
    SendAm(link, internal::kAmReadRequest, HeaderBytes::Of(header), nullptr, 0, {}, id,
           [this, id](ucs_status_t status) {
             if (status != UCS_OK) Fail(id, UcsError(status, "ucx transport: send read request"));
           });
  }
}

void UcxTransport::Impl::ReturnReadWindow(PeerId peer, Op& op, uint64_t bytes) {
  op.window_bytes -= bytes;
  Link* link = FindLink(peer);
  if (link == nullptr) return;
  link->read_window_used -= bytes;
  AskForReads(*link);
}

void UcxTransport::Impl::SegmentDone(RequestId id, uint32_t segment) {
  auto it = ops_.find(id);
  if (it == ops_.end() || it->second.failed) return;
  Op& op = it->second;
  if (segment >= op.segment_done.size() || op.segment_done[segment]) return;
  op.segment_done[segment] = true;
  --op.segments_left;
  if (op.kind == OpKind::kRead && op.path == DataPath::kActiveMessages) {
    ReturnReadWindow(op.peer, op, op.segments[segment].local.size());
  }
  Link* link = FindLink(op.peer);
  if (link != nullptr) {
    link->stats.bytes_read += op.segments[segment].local.size();
    PublishStats(*link);
  }
}

void UcxTransport::Impl::Fail(RequestId id, absl::Status status) {
  auto it = ops_.find(id);
  if (it == ops_.end() || it->second.failed) return;
  Op& op = it->second;
  op.failed = true;
  op.status = std::move(status);
  std::vector<void*> requests(op.requests.begin(), op.requests.end());
  for (void* request : requests) ucp_request_cancel(worker_, request);
  MaybeFinish(id);
}

void UcxTransport::Impl::MaybeFinish(RequestId id) {
  auto it = ops_.find(id);
  if (it == ops_.end()) return;
  Op& op = it->second;
  if (!op.requests.empty() || (!op.failed && op.segments_left > 0)) return;
  if (op.has_deadline) deadlines_.erase(op.deadline);
  Op finished = std::move(op);
  ops_.erase(it);
  // A failed read's segments still asked for leave the window (a late answer is dropped).
  if (finished.window_bytes > 0) ReturnReadWindow(finished.peer, finished, finished.window_bytes);
  if (auto link = links_.find(finished.peer); link != links_.end()) {
    link->second.ops.erase(id);
    if (finished.failed) {
      ++link->second.stats.requests_failed;
      link->second.stats.last_error = finished.status.ToString();
      PublishStats(link->second);
    }
  }
  const absl::Status status = finished.failed ? finished.status : absl::OkStatus();
  if (finished.kind == OpKind::kCall) {
    if (finished.reply) {
      if (status.ok()) {
        std::move(finished.reply)(std::move(finished.reply_bytes));
      } else {
        std::move(finished.reply)(status);
      }
    }
  } else if (finished.done) {
    std::move(finished.done)(status);
  }
}

void UcxTransport::Impl::ExpireDeadlines() {
  const Deadline now = std::chrono::steady_clock::now();
  while (!link_deadlines_.empty() && link_deadlines_.begin()->first <= now) {
    const PeerId id = link_deadlines_.begin()->second;
    link_deadlines_.erase(link_deadlines_.begin());
    Link* link = FindLink(id);
    if (link == nullptr || link->up) continue;
    if (!link->refusal.ok()) {
      LinkDown(id, link->refusal, /*forget=*/false);
      continue;
    }
    LinkDown(id,
             absl::DeadlineExceededError(
                 fmt::format("ucx transport: {} did not authenticate within {} ms",
                             link->stats.address, options_.auth_timeout.count())),
             /*forget=*/false);
  }
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const RequestId id = deadlines_.begin()->second;
    if (auto op = ops_.find(id); op != ops_.end()) op->second.has_deadline = false;
    deadlines_.erase(deadlines_.begin());
    Fail(id, absl::DeadlineExceededError("ucx transport: request deadline passed"));
  }
}

int UcxTransport::Impl::NextTimeoutMs() const {
  if (deadlines_.empty() && link_deadlines_.empty()) return 1000;
  Deadline next = Deadline::max();
  if (!deadlines_.empty()) next = deadlines_.begin()->first;
  if (!link_deadlines_.empty()) next = std::min(next, link_deadlines_.begin()->first);
  const auto left = next - std::chrono::steady_clock::now();
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1000));
}

std::vector<PeerStats> UcxTransport::Impl::Peers() const {
  absl::MutexLock lock(&stats_mu_);
  std::vector<PeerStats> peers;
  for (const auto& [id, stats] : stats_) peers.push_back(stats);
  return peers;
}

// ---- Active messages received ----

ucs_status_t UcxTransport::Impl::OnAm(void* arg, const void* header, size_t header_length,
                                      void* data, size_t length, const ucp_am_recv_param_t* param) {
  auto* handler = static_cast<AmHandlerArg*>(arg);
  Impl* self = handler->impl;
  Link* link = self->LinkOf(param);
  if (link == nullptr || !link->refusal.ok()) return UCS_OK;  // from a link we refused: dropped
  if (handler->id == internal::kAmAuth) {
    self->HandleAuth(*link, header, header_length);
    return UCS_OK;
  }
  if (!link->auth->authenticated()) {
    // Nothing is read, answered or placed for a peer that has not proved itself.
    const absl::Status why = absl::PermissionDeniedError(
        fmt::format("ucx transport: {} sent message {} before authenticating", link->stats.address,
                    handler->id));
    spdlog::warn("{}", why.message());
    self->LinkDown(link->id, why, /*forget=*/false);
    return UCS_OK;
  }
  switch (handler->id) {
    case internal::kAmHello:
      self->HandleHello(*link, header, header_length, data, length, param);
      break;
    case internal::kAmCall:
      if (link->up) self->HandleCall(*link, header, header_length, data, length, param);
      break;
    case internal::kAmCallReply:
      self->HandleCallReply(*link, header, header_length, data, length, param);
      break;
    case internal::kAmReadRequest:
      if (link->up) self->HandleReadRequest(*link, header, header_length);
      break;
    case internal::kAmReadData:
      self->HandleReadData(*link, header, header_length, data, length, param);
      break;
    default:
      break;
  }
  return UCS_OK;
}

void UcxTransport::Impl::HandleAuth(Link& link, const void* header, size_t header_length) {
  internal::PeerAuth::Outcome outcome =
      link.auth->Receive(header, header_length,
                         [this](const internal::AuthNonce& nonce) { return IsOwnNonce(nonce); });
  const PeerId id = link.id;
  if (!outcome.refused.ok()) {
    const absl::Status why =
        absl::PermissionDeniedError(fmt::format("ucx transport: authentication with {} failed: {}",
                                                link.stats.address, outcome.refused.message()));
    spdlog::warn("{}", why.message());
    link.refusal = why;
    if (link.waiter) {
      link.waiter->Finish(why);
      link.waiter.reset();
    }
    if (!outcome.reply) {
      LinkDown(id, why, /*forget=*/false);
      return;
    }
    // The peer closes the link once it has read the refusal; closing it here when the send
    // completes locally would race the refusal (the peer can see the link reset first).
    link_deadlines_.emplace(
        std::chrono::steady_clock::now() + std::min(kRefusalLinger, options_.auth_timeout), id);
    SendAuth(link, *outcome.reply, [this, id, why](ucs_status_t status) {
      if (status != UCS_OK) LinkDown(id, why, /*forget=*/false);
    });
    return;
  }
  if (outcome.reply) {
    SendAuth(link, *outcome.reply, [this, id](ucs_status_t status) {
      if (status != UCS_OK && status != UCS_ERR_CANCELED) {
        LinkDown(id, UcsError(status, "ucx transport: send proof"), /*forget=*/false);
      }
    });
  }
  // A proof that failed to send at once has closed the link already.
  if (outcome.authenticated && link.ep != nullptr) SendHello(link);
}

void UcxTransport::Impl::HandleHello(Link& link, const void* header, size_t header_length,
                                     void* data, size_t length, const ucp_am_recv_param_t* param) {
  if (link.up) return;
  auto hello = ParseHeader<HelloHeader>(header, header_length);
  absl::Status refused;
  if (!hello || hello->magic != internal::kWireMagic) {
    refused = absl::FailedPreconditionError("ucx transport: the peer is not a Strata transport");
  } else if (hello->version != link.auth->version()) {
    refused = absl::FailedPreconditionError(
        fmt::format("ucx transport: the peer's hello is of wire version {}, the link's is {}",
                    hello->version, link.auth->version()));
  } else if (length > kMaxRkeyBytes) {
    refused = absl::FailedPreconditionError(
        fmt::format("ucx transport: the peer's rkey of {} bytes is too long", length));
  }
  if (!refused.ok()) {
    spdlog::warn("{} ({})", refused.message(), link.stats.address);
    LinkDown(link.id, refused, /*forget=*/false);
    return;
  }
  // The packed rkey comes as the data, eager or (on some transports) by rendezvous.
  auto rkey = std::make_shared<std::string>(length, '\0');
  ReceiveInto(data, length, param, reinterpret_cast<std::byte*>(rkey->data()), false, 0,
              [this, id = link.id, hello = *hello, rkey](ucs_status_t status) {
                if (status != UCS_OK) {
                  LinkDown(id, UcsError(status, "ucx transport: receive hello"), false);
                  return;
                }
                FinishHello(id, hello, *rkey);
              });
}

void UcxTransport::Impl::FinishHello(PeerId id, const HelloHeader& hello, const std::string& rkey) {
  Link* link = FindLink(id);
  if (link == nullptr || link->up) return;
  const ucs_status_t unpacked = ucp_ep_rkey_unpack(link->ep, rkey.data(), &link->rkey);
  if (unpacked != UCS_OK) {
    LinkDown(id, UcsError(unpacked, "ucx transport: unpack the peer's rkey"), false);
    return;
  }
  link->remote_base = hello.region_base;
  link->remote_bytes = hello.region_bytes;
  const bool same_host = std::memcmp(hello.host_id, host_id_.data(), host_id_.size()) == 0;
  link->stats.data_path = ChooseDataPath(options_.data_path, allowed_, same_host);
  link->up = true;
  link->came_up = true;
  link->stats.up = true;
  PublishStats(*link);
  if (link->waiter) {
    link->waiter->Finish(absl::OkStatus());
    link->waiter.reset();
  }
  if (options_.handlers.on_peer_up) options_.handlers.on_peer_up(id, link->stats.address);
}

void UcxTransport::Impl::ReceiveInto(void* data, size_t length, const ucp_am_recv_param_t* param,
                                     std::byte* destination, bool in_region, RequestId op,
                                     absl::AnyInvocable<void(ucs_status_t) &&> on_done) {
  auto* pending = new Pending{.impl = this, .op = op, .on_done = std::move(on_done)};
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0) {
    if (length > 0) std::memcpy(destination, data, length);
    Complete(pending, UCS_OK);
    return;
  }
  ucp_request_param_t recv{};
  recv.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  recv.cb.recv_am = &Impl::OnRecvDone;
  recv.user_data = pending;
  if (in_region) {
    recv.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    recv.memh = memh_;
  }
  Settle(pending, ucp_am_recv_data_nbx(worker_, data, destination, length, &recv));
}

void UcxTransport::Impl::HandleCall(Link& link, const void* header, size_t header_length,
                                    void* data, size_t length, const ucp_am_recv_param_t* param) {
  auto call = ParseHeader<CallHeader>(header, header_length);
  if (!call) return;
  auto request = std::make_shared<std::string>(length, '\0');
  ReceiveInto(data, length, param, reinterpret_cast<std::byte*>(request->data()), false, 0,
              [this, peer = link.id, call_id = call->call_id, request](ucs_status_t status) {
                // A request that did not arrive is never answered: the caller's deadline tells.
                if (status == UCS_OK) DeliverCall(peer, call_id, std::move(*request));
              });
}

void UcxTransport::Impl::DeliverCall(PeerId peer, uint64_t call_id, std::string request) {
  if (!options_.handlers.on_call) {
    SendCallReply(peer, call_id,
                  absl::FailedPreconditionError("ucx transport: the peer serves no calls"));
    return;
  }
  Reply reply = [mailbox = std::weak_ptr<Mailbox>(mailbox_), this, peer,
                 call_id](absl::StatusOr<std::string> answer) mutable {
    std::shared_ptr<Mailbox> live_mailbox = mailbox.lock();
    if (!live_mailbox) return;  // the transport is gone
    live_mailbox->Post([this, peer, call_id, answer = std::move(answer)](bool live) mutable {
      if (live) SendCallReply(peer, call_id, std::move(answer));
    });
  };
  options_.handlers.on_call(peer, std::move(request), std::move(reply));
}

void UcxTransport::Impl::SendCallReply(PeerId peer, uint64_t call_id,
                                       absl::StatusOr<std::string> reply) {
  Link* link = FindLink(peer);
  if (link == nullptr) return;
  CallReplyHeader header{.call_id = call_id, .code = static_cast<int32_t>(reply.status().code())};
  std::string bytes = reply.ok() ? std::move(*reply) : std::string(reply.status().message());
  SendAm(*link, internal::kAmCallReply, HeaderBytes::Of(header), nullptr, 0, std::move(bytes), 0,
         [](ucs_status_t) {});
}

void UcxTransport::Impl::HandleCallReply(Link& link, const void* header, size_t header_length,
                                         void* data, size_t length,
                                         const ucp_am_recv_param_t* param) {
  auto reply = ParseHeader<CallReplyHeader>(header, header_length);
  if (!reply) return;
  const RequestId id = reply->call_id;
  auto it = ops_.find(id);
  // Only the peer a call went to answers it.
  if (it == ops_.end() || it->second.failed || it->second.kind != OpKind::kCall ||
      it->second.peer != link.id) {
    return;
  }
  auto bytes = std::make_shared<std::string>(length, '\0');
  ReceiveInto(data, length, param, reinterpret_cast<std::byte*>(bytes->data()), false, id,
              [this, id, code = reply->code, bytes](ucs_status_t status) {
                if (status != UCS_OK) {
                  Fail(id, UcsError(status, "ucx transport: receive reply"));
                  return;
                }
                if (code != 0) {
                  Fail(id, internal::StatusFromWire(code, *bytes));
                  return;
                }
                auto op = ops_.find(id);
                if (op == ops_.end() || op->second.failed) return;
                op->second.reply_bytes = std::move(*bytes);
                op->second.segments_left = 0;
              });
}

void UcxTransport::Impl::SendSegmentAnswer(PeerId peer, unsigned am_id, SegmentHeader answer,
                                           const void* data) {
  Link* link = FindLink(peer);
  if (link == nullptr) return;
  const uint64_t length = data == nullptr ? 0 : answer.length;
  if (data != nullptr) {
    link->stats.bytes_served += length;
    PublishStats(*link);
  }
  SendAm(*link, am_id, HeaderBytes::Of(answer), data, length, {}, 0, [](ucs_status_t) {});
}

void UcxTransport::Impl::HandleReadRequest(Link& link, const void* header, size_t header_length) {
  auto request = ParseHeader<SegmentHeader>(header, header_length);
  if (!request) return;
  SegmentHeader answer = *request;
  if (!InRegion(request->remote_offset, request->length) || request->length == 0) {
    answer.code = static_cast<int32_t>(absl::StatusCode::kInvalidArgument);
    SendSegmentAnswer(link.id, internal::kAmReadData, answer, nullptr);
    return;
  }
  SendSegmentAnswer(link.id, internal::kAmReadData, answer,
                    options_.region.data() + request->remote_offset);
}

void UcxTransport::Impl::HandleReadData(Link& link, const void* header, size_t header_length,
                                        void* data, size_t length,
                                        const ucp_am_recv_param_t* param) {
  auto answer = ParseHeader<SegmentHeader>(header, header_length);
  if (!answer) return;
  const RequestId id = answer->request_id;
  auto it = ops_.find(id);
  // Only the peer a read went to places bytes in its memory.
  if (it == ops_.end() || it->second.failed || it->second.kind != OpKind::kRead ||
      it->second.peer != link.id) {
    return;
  }
  Op& op = it->second;
  if (answer->segment >= op.segments.size() || op.segment_done[answer->segment]) return;
  if (answer->code != 0) {
    Fail(id, internal::StatusFromWire(answer->code,
                                      fmt::format("{}{}",
                                                  "ucx transport: the peer refused to read "
                                                  "segment ",
                                                  answer->segment)));
    return;
  }
  const Segment& segment = op.segments[answer->segment];
  if (length != segment.local.size()) {
    Fail(id, absl::DataLossError(
                 fmt::format("ucx transport: the peer sent {} bytes for a segment of {}", length,
                             segment.local.size())));
    return;
  }
  const uint32_t index = answer->segment;
  ReceiveInto(data, length, param, segment.local.data(), true, id,
              [this, id, index](ucs_status_t status) {
                if (status != UCS_OK) {
                  Fail(id, UcsError(status, "ucx transport: receive segment"));
                } else {
                  SegmentDone(id, index);
                }
              });
}

// ---- Public surface ----

absl::StatusOr<std::unique_ptr<UcxTransport>> UcxTransport::Create(UcxTransportOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  if (absl::Status started = impl->Start(); !started.ok()) return started;
  return std::unique_ptr<UcxTransport>(new UcxTransport(std::move(impl)));
}

UcxTransport::UcxTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
UcxTransport::~UcxTransport() = default;

std::string UcxTransport::listen_address() const { return impl_->listen_address(); }
uint64_t UcxTransport::region_bytes() const { return impl_->region_bytes(); }
absl::StatusOr<PeerId> UcxTransport::Connect(std::string_view address,
                                             std::chrono::milliseconds timeout) {
  return impl_->Connect(address, timeout);
}
void UcxTransport::Disconnect(PeerId peer) { impl_->Disconnect(peer); }
RequestId UcxTransport::Read(PeerId peer, std::span<const Segment> segments, Deadline deadline,
                             Completion done) {
  return impl_->Read(peer, segments, deadline, std::move(done));
}
RequestId UcxTransport::Call(PeerId peer, std::string request, Deadline deadline, Reply done) {
  return impl_->Call(peer, std::move(request), deadline, std::move(done));
}
void UcxTransport::Cancel(RequestId request) { impl_->Cancel(request); }
std::vector<PeerStats> UcxTransport::Peers() const { return impl_->Peers(); }

}  // namespace strata::storage::remote

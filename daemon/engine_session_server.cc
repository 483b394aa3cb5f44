#include "daemon/engine_session_server.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <span>

#include "core/check.h"
#include "core/frame_io.h"
#include "core/status_util.h"
#include "daemon/engine_session.h"
#include "daemon/metrics.h"
#include "fmt/format.h"
#include "proto/convert.h"
#include "spdlog/spdlog.h"

namespace strata::daemon {
namespace {

constexpr uint64_t kListenTag = 0;
constexpr uint64_t kWakeTag = ~uint64_t{0};
constexpr uint64_t kCompletionTag = ~uint64_t{0} - 1;

absl::StatusOr<sockaddr_un> SocketAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        fmt::format("engine socket path '{}' is empty or longer than {} bytes", path,
                    sizeof(addr.sun_path) - 1));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

// True when something accepts connections on `addr`.
bool SomeoneListens(const sockaddr_un& addr) {
  ScopedFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  return probe.valid() &&
         ::connect(probe.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
}

void SendOrLog(int fd, const v1::EngineResponse& response, std::chrono::milliseconds timeout,
               std::span<const int> fds_to_pass, bool& ok) {
  std::string bytes;
  response.SerializeToString(&bytes);
  if (absl::Status s = SendFrame(fd, bytes, timeout, fds_to_pass); !s.ok()) {
    spdlog::debug("engine session fd {}: {}", fd, std::string(s.message()));
    ok = false;
  }
}

}  // namespace

struct EngineSessionServer::Session {
  Session(uint64_t id, ScopedFd fd, SessionResources resources, EngineSessionLimits limits)
      : fd(std::move(fd)), state(id, std::move(resources), limits) {}
  ScopedFd fd;
  FrameReader reader;
  EngineSession state;
  // When the deferred load's request arrived (its latency is observed at its answer).
  std::chrono::steady_clock::time_point deferred_since;
};

absl::StatusOr<std::unique_ptr<EngineSessionServer>> EngineSessionServer::Create(
    EngineSessionServerOptions options) {
  if (options.store == nullptr) {
    return absl::InvalidArgumentError("engine session server needs a tiered store");
  }
  absl::StatusOr<sockaddr_un> addr = SocketAddress(options.socket_path);
  if (!addr.ok()) return addr.status();
  const std::filesystem::path path(options.socket_path);
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) {
    return absl::FailedPreconditionError(fmt::format(
        "cannot create directory of engine socket '{}': {}", options.socket_path, ec.message()));
  }
  if (std::filesystem::is_socket(path, ec)) {
    if (SomeoneListens(*addr)) {
      return absl::FailedPreconditionError(
          fmt::format("another process serves engine socket '{}' (is stratad already running?)",
                      options.socket_path));
    }
    std::filesystem::remove(path, ec);  // stale socket of a daemon that died
  }

  ScopedFd listen_fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listen_fd.valid()) return ErrnoToStatus(errno, "engine socket: socket");
  if (::bind(listen_fd.get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr)) != 0) {
    return ErrnoToStatus(errno, fmt::format("engine socket: bind {}", options.socket_path));
  }
  if (::chmod(options.socket_path.c_str(), 0660) != 0) {
    return ErrnoToStatus(errno, fmt::format("engine socket: chmod {}", options.socket_path));
  }
  if (::listen(listen_fd.get(), 128) != 0) return ErrnoToStatus(errno, "engine socket: listen");

  ScopedFd epoll_fd(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_fd.valid()) return ErrnoToStatus(errno, "engine socket: epoll_create1");
  ScopedFd wake_fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_fd.valid()) return ErrnoToStatus(errno, "engine socket: eventfd");
  absl::StatusOr<std::shared_ptr<DeferredCompletions>> completions = DeferredCompletions::Create();
  if (!completions.ok()) return completions.status();
  epoll_event listen_event{.events = EPOLLIN, .data = {.u64 = kListenTag}};
  epoll_event wake_event{.events = EPOLLIN, .data = {.u64 = kWakeTag}};
  epoll_event completion_event{.events = EPOLLIN, .data = {.u64 = kCompletionTag}};
  if (::epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, listen_fd.get(), &listen_event) != 0 ||
      ::epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, wake_fd.get(), &wake_event) != 0 ||
      ::epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, (*completions)->fd(), &completion_event) != 0) {
    return ErrnoToStatus(errno, "engine socket: epoll_ctl");
  }
  return std::unique_ptr<EngineSessionServer>(
      new EngineSessionServer(std::move(options), std::move(listen_fd), std::move(epoll_fd),
                              std::move(wake_fd), *std::move(completions)));
}

EngineSessionServer::EngineSessionServer(EngineSessionServerOptions options, ScopedFd listen_fd,
                                         ScopedFd epoll_fd, ScopedFd wake_fd,
                                         std::shared_ptr<DeferredCompletions> completions)
    : options_(std::move(options)),
      listen_fd_(std::move(listen_fd)),
      epoll_fd_(std::move(epoll_fd)),
      wake_fd_(std::move(wake_fd)),
      completions_(std::move(completions)) {
  if (options_.registry == nullptr) return;
  auto& family = prometheus::BuildHistogram()
                     .Name("strata_engine_request_duration_seconds")
                     .Help(
                         "Time the daemon took to answer an engine request, by kind (load: "
                         "PrepareLoad, store: PrepareStore).")
                     .Register(*options_.registry);
  const std::pair<v1::EngineRequest::BodyCase, const char*> kOps[] = {
      {v1::EngineRequest::kHandshake, "handshake"},
      {v1::EngineRequest::kLookup, "lookup"},
      {v1::EngineRequest::kPrepareLoad, "load"},
      {v1::EngineRequest::kPrepareStore, "store"},
      {v1::EngineRequest::kCommit, "commit"},
      {v1::EngineRequest::kAbort, "abort"},
      {v1::EngineRequest::kRelease, "release"},
      {v1::EngineRequest::kPrefetch, "prefetch"},
      {v1::EngineRequest::kLayersSaved, "layers_saved"},
      {v1::EngineRequest::kPoolLookup, "pool_lookup"},
      {v1::EngineRequest::kPoolAcquire, "pool_acquire"},
      {v1::EngineRequest::kPoolReserve, "pool_reserve"}};
  for (const auto& [body, op] : kOps) {
    // Every kind timed has its slot: a kind a later protocol adds must widen the array.
    STRATA_CHECK_MSG(static_cast<size_t>(body) < request_latency_.size(), op);
    request_latency_[body] = &family.Add({{"op", op}}, LatencyBuckets());
  }
}

EngineSessionServer::~EngineSessionServer() { Stop(); }

void EngineSessionServer::Start() {
  thread_ = std::jthread([this](std::stop_token stop) {
    pthread_setname_np(pthread_self(), "strata-sessions");
    Run(stop);
  });
}

void EngineSessionServer::Stop() {
  if (stopped_.exchange(true)) return;
  if (thread_.joinable()) {
    thread_.request_stop();
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd_.get(), &one, sizeof(one));
    thread_.join();
  }
  // Loads the store completes from now on release their leases at once.
  completions_->Close();
  sessions_.clear();  // aborts reservations and releases leases of every session
  active_sessions_ = 0;
  std::error_code ec;
  std::filesystem::remove(options_.socket_path, ec);
}

EngineSessionStats EngineSessionServer::Stats() const {
  return {.active_sessions = active_sessions_.load(),
          .total_sessions = total_sessions_.load(),
          .rejected_sessions = rejected_sessions_.load(),
          .requests = requests_.load(),
          .protocol_errors = protocol_errors_.load()};
}

void EngineSessionServer::Run(std::stop_token stop) {
  epoll_event events[64];
  while (!stop.stop_requested()) {
    const int n = ::epoll_wait(epoll_fd_.get(), events, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      spdlog::error("engine sessions: epoll_wait: {}", std::strerror(errno));
      return;
    }
    for (int i = 0; i < n && !stop.stop_requested(); ++i) {
      const uint64_t tag = events[i].data.u64;
      if (tag == kWakeTag) continue;
      if (tag == kListenTag) {
        Accept();
        continue;
      }
      if (tag == kCompletionTag) {
        ServeCompletions();
        continue;
      }
      auto it = sessions_.find(tag);
      if (it == sessions_.end()) continue;
      Session& session = *it->second;
      if (session.state.deferred()) {
        // Not read until its load completes; only a hang-up ends it early (its load's leases are
        // released when the completion finds it gone).
        if ((events[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) CloseSession(tag);
        continue;
      }
      if (!ServeReadable(session)) CloseSession(tag);
    }
  }
}

void EngineSessionServer::Accept() {
  for (;;) {
    ScopedFd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd.valid()) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        spdlog::warn("engine sessions: accept: {}", std::strerror(errno));
      }
      return;
    }
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      ++rejected_sessions_;
      continue;
    }
    const bool allowed = cred.uid == 0 || cred.uid == ::geteuid() ||
                         std::find(options_.allowed_uids.begin(), options_.allowed_uids.end(),
                                   cred.uid) != options_.allowed_uids.end();
    if (!allowed || sessions_.size() >= options_.max_sessions) {
      ++rejected_sessions_;
      spdlog::warn("engine sessions: rejected pid {} uid {}: {}", cred.pid, cred.uid,
                   allowed ? "session limit reached" : "uid not allowed");
      v1::EngineResponse refusal;
      *refusal.mutable_status() =
          ToProto(allowed ? absl::ResourceExhaustedError("engine session limit reached")
                          : absl::PermissionDeniedError("uid not allowed by the daemon"));
      bool ok = true;
      SendOrLog(fd.get(), refusal, options_.send_timeout, {}, ok);
      continue;
    }
    const uint64_t id = next_session_id_++;
    epoll_event event{.events = EPOLLIN | EPOLLRDHUP, .data = {.u64 = id}};
    if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd.get(), &event) != 0) {
      spdlog::warn("engine sessions: epoll_ctl: {}", std::strerror(errno));
      continue;
    }
    EngineSessionLimits limits{.max_lease = options_.max_lease,
                               .max_items_per_request = options_.max_items_per_request,
                               .max_handles = options_.max_handles_per_session};
    spdlog::debug("engine session {} opened by pid {} uid {}", id, cred.pid, cred.uid);
    SessionResources resources{.store = options_.store,
                               .completions = completions_,
                               .lookups = options_.lookups,
                               .kv_event_token_ids = options_.kv_event_token_ids,
                               .node = &options_.node,
                               .device_pools = options_.device_pools,
                               .device_pool_tiering = options_.device_pool_tiering};
    sessions_.emplace(id,
                      std::make_unique<Session>(id, std::move(fd), std::move(resources), limits));
    ++total_sessions_;
    active_sessions_ = sessions_.size();
  }
}

bool EngineSessionServer::ServeReadable(Session& session) {
  const absl::Status read = session.reader.ReadAvailable(session.fd.get());
  bool ok = true;
  if (!ServeFrames(session, ok)) return false;
  if (!read.ok()) {
    if (session.reader.buffered_bytes() > 0 && !session.state.deferred()) {
      ++protocol_errors_;
      spdlog::warn("engine session {} ({}): closed with a truncated frame ({} bytes)",
                   session.state.id(), session.state.engine_id(), session.reader.buffered_bytes());
    }
    return false;
  }
  return true;
}

bool EngineSessionServer::ServeFrames(Session& session, bool& ok) {
  while (!session.state.deferred()) {
    absl::StatusOr<std::optional<std::string>> frame = session.reader.Next();
    if (!frame.ok() || !frame->has_value()) {
      if (!frame.ok()) {
        ++protocol_errors_;
        spdlog::warn("engine session {} ({}): {}; closing it", session.state.id(),
                     session.state.engine_id(), std::string(frame.status().message()));
        v1::EngineResponse error;
        *error.mutable_status() = ToProto(frame.status());
        SendOrLog(session.fd.get(), error, options_.send_timeout, {}, ok);
        return false;
      }
      return true;
    }
    v1::EngineRequest request;
    if (!request.ParseFromString(**frame)) {
      ++protocol_errors_;
      spdlog::warn("engine session {} ({}): malformed frame of {} bytes; closing it",
                   session.state.id(), session.state.engine_id(), (*frame)->size());
      v1::EngineResponse error;
      *error.mutable_status() =
          ToProto(absl::InvalidArgumentError("malformed frame: not an EngineRequest"));
      SendOrLog(session.fd.get(), error, options_.send_timeout, {}, ok);
      return false;
    }
    ++requests_;
    const auto started = std::chrono::steady_clock::now();
    EngineSession::Reply reply = session.state.Handle(request);
    if (reply.deferred) {
      session.deferred_since = started;
      WatchReadable(session, false);
      return true;
    }
    if (prometheus::Histogram* latency = Latency(request.body_case())) {
      latency->Observe(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    }
    // The handshake's descriptors: the arena's, then the device pool's when it has one.
    const int handshake_fds[] = {options_.store->host().arena_fd(), reply.device_pool_fd};
    const size_t num_fds = !reply.attach_arena_fd ? 0 : reply.device_pool_fd >= 0 ? 2 : 1;
    SendOrLog(session.fd.get(), reply.response, options_.send_timeout,
              std::span<const int>(handshake_fds, num_fds), ok);
    if (!ok || reply.close_after) return false;
  }
  return true;
}

void EngineSessionServer::ServeCompletions() {
  for (DeferredCompletion& completion : completions_->Take()) {
    const uint64_t session_id = completion.session_id;
    auto it = sessions_.find(session_id);
    if (it == sessions_.end()) continue;  // gone: the leases go with `completion`
    Session& session = *it->second;
    const auto kind = std::holds_alternative<storage::LoadLeases>(completion.result)
                          ? v1::EngineRequest::kPrepareLoad
                          : v1::EngineRequest::kLookup;
    EngineSession::Reply reply = session.state.Complete(std::move(completion));
    if (prometheus::Histogram* latency = Latency(kind)) {
      latency->Observe(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - session.deferred_since)
              .count());
    }
    bool ok = true;
    SendOrLog(session.fd.get(), reply.response, options_.send_timeout, {}, ok);
    // Requests the engine sent meanwhile wait in the reader's buffer or the socket.
    if (!ok || reply.close_after || !ServeFrames(session, ok)) {
      CloseSession(session_id);
      continue;
    }
    if (!session.state.deferred()) WatchReadable(session, true);
  }
}

void EngineSessionServer::WatchReadable(Session& session, bool readable) {
  epoll_event event{.events = EPOLLRDHUP | (readable ? EPOLLIN : 0u),
                    .data = {.u64 = session.state.id()}};
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, session.fd.get(), &event) != 0) {
    spdlog::warn("engine session {}: epoll_ctl: {}", session.state.id(), std::strerror(errno));
  }
}

void EngineSessionServer::CloseSession(uint64_t session_id) {
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return;
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, it->second->fd.get(), nullptr);
  spdlog::debug("engine session {} ({}) closed; released {} handles", session_id,
                it->second->state.engine_id(), it->second->state.open_handles());
  sessions_.erase(it);
  active_sessions_ = sessions_.size();
}

}  // namespace strata::daemon

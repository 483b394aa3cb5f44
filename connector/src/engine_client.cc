#include "connector/src/engine_client.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "connector/src/log.h"
#include "core/frame_io.h"
#include "core/page_prefault.h"
#include "core/status_macros.h"
#include "core/status_util.h"
#include "fmt/format.h"
#include "google/protobuf/arena.h"
#include "proto/convert.h"
#include "strata/v1/engine.pb.h"

namespace strata::connector::internal {
namespace {

using std::chrono::milliseconds;

std::string StatusText(const absl::Status& status) {
  return std::string(status.message().data(), status.message().size());
}

std::vector<ArenaExtent> ExtentsFromProto(
    const google::protobuf::RepeatedPtrField<v1::Extent>& extents) {
  std::vector<ArenaExtent> out;
  out.reserve(extents.size());
  for (const v1::Extent& e : extents) out.push_back({e.offset(), e.length()});
  return out;
}

// A placement's page positions (non-empty) are an acquire's, one per page, strictly ascending
// multiples of `block_tokens`.
bool PagePositionsFit(const PoolPlacement& placement, bool acquire, uint32_t block_tokens) {
  if (!acquire || placement.positions.size() != placement.pages.size()) return false;
  for (size_t i = 0; i < placement.positions.size(); ++i) {
    if (placement.positions[i] % block_tokens != 0 ||
        (i > 0 && placement.positions[i] <= placement.positions[i - 1])) {
      return false;
    }
  }
  return true;
}

}  // namespace

ArenaMapping::ArenaMapping(std::byte* base, uint64_t size_bytes, uint64_t generation,
                           ArenaHooks hooks, bool registered)
    : base_(base),
      size_bytes_(size_bytes),
      generation_(generation),
      hooks_(std::move(hooks)),
      registered_(registered),
      pages_(std::span<std::byte>(base, size_bytes)),
      background_(
          std::make_unique<BackgroundPrefault>(pages_, BackgroundPrefault::Mode::kResidentOnly)) {}

uint64_t ArenaMapping::prefaulted_bytes() const { return background_->done_bytes(); }

void ArenaMapping::Prefault(const ArenaExtent& extent, bool for_write) const {
  if (!Contains(extent.offset, extent.length)) return;
  const std::span<std::byte> bytes(base_ + extent.offset, extent.length);
  if (for_write) {
    pages_.ForWrite(bytes);
  } else {
    pages_.ForRead(bytes);
  }
}

ArenaMapping::~ArenaMapping() {
  background_.reset();  // its thread touches the mapping
  if (registered_ && hooks_.on_unmap) hooks_.on_unmap(base_);
  ::munmap(base_, size_bytes_);
}

absl::StatusOr<std::unique_ptr<EngineClient>> EngineClient::Create(EngineClientOptions options) {
  STRATA_RETURN_IF_ERROR(options.layout.Validate());
  if (options.socket_path.empty()) {
    return absl::InvalidArgumentError("engine client: empty socket path");
  }
  if (options.socket_path.size() >= sizeof(sockaddr_un::sun_path)) {
    return absl::InvalidArgumentError(
        fmt::format("engine client: socket path '{}' is longer than {} bytes", options.socket_path,
                    sizeof(sockaddr_un::sun_path) - 1));
  }
  if (options.reconnect_min_backoff.count() <= 0 ||
      options.reconnect_max_backoff < options.reconnect_min_backoff) {
    return absl::InvalidArgumentError(
        "engine client: reconnect backoff must satisfy 0 < min <= max");
  }
  if (options.clock == nullptr) return absl::InvalidArgumentError("engine client: null clock");
  return std::unique_ptr<EngineClient>(new EngineClient(std::move(options)));
}

EngineClient::EngineClient(EngineClientOptions options)
    : options_(std::move(options)),
      fingerprint_(options_.layout.Fingerprint()),
      backoff_(options_.reconnect_min_backoff) {}

EngineClient::~EngineClient() {
  absl::MutexLock lock(&mu_);
  socket_.Reset();
  arena_.reset();
  device_pool_.reset();
}

// I/O deadlines run on the system clock (frame_io waits on it); options_.clock drives only the
// reconnect backoff, so tests can step through backoff periods by hand.
MonoTime EngineClient::DeadlineIn(milliseconds timeout) const {
  return SystemClock::Get()->Now() + std::max(timeout, milliseconds(0));
}

namespace {
milliseconds Remaining(MonoTime deadline) {
  return std::max(std::chrono::ceil<milliseconds>(deadline - SystemClock::Get()->Now()),
                  milliseconds(0));
}
}  // namespace

bool EngineClient::connected() const {
  absl::MutexLock lock(&mu_);
  return socket_.valid();
}

uint64_t EngineClient::generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

DaemonNode EngineClient::daemon_node() const {
  absl::MutexLock lock(&mu_);
  return daemon_node_;
}

uint64_t EngineClient::session_id() const {
  absl::MutexLock lock(&mu_);
  return session_id_;
}

std::optional<DevicePoolGrant> EngineClient::device_pool() const {
  absl::MutexLock lock(&mu_);
  return device_pool_grant_;
}

EngineClientStats EngineClient::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

uint64_t EngineClient::arena_prefaulted_bytes() const {
  absl::MutexLock lock(&mu_);
  return arena_ == nullptr ? 0 : arena_->prefaulted_bytes();
}

absl::Status EngineClient::Connect(milliseconds timeout) {
  absl::MutexLock lock(&mu_);
  return EnsureConnectedLocked(DeadlineIn(timeout));
}

void EngineClient::Disconnect() {
  absl::MutexLock lock(&mu_);
  if (socket_.valid()) DropSessionLocked(absl::CancelledError("disconnected by the engine"));
  next_attempt_ = MonoTime(0);
}

absl::Status EngineClient::ProtocolErrorLocked(std::string_view what) {
  const absl::Status bad = absl::InternalError(fmt::format("protocol error: {}", what));
  DropSessionLocked(bad);
  return absl::UnavailableError(StatusText(bad));
}

void EngineClient::DropSessionLocked(const absl::Status& why) {
  if (!socket_.valid()) return;
  Log().warn(
      "strata connector: session {} with the daemon at {} dropped ({}); the engine recomputes "
      "until it reconnects",
      session_id_, options_.socket_path, StatusText(why));
  socket_.Reset();
  arena_.reset();
  device_pool_grant_.reset();
  device_pool_.reset();
  generation_ = 0;
  session_id_ = 0;
  owed_replies_.clear();  // the daemon frees a session's leases and reservations itself
  late_leases_.clear();
  late_reservations_.clear();
  last_error_ = why;
  warned_ = true;
  ++stats_.disconnects;
  // Reconnect no sooner than the minimum backoff: a daemon that just failed is likely still
  // failing, and the engine's hot path must not pay a connect per call.
  backoff_ = options_.reconnect_min_backoff;
  next_attempt_ = options_.clock->Now() + backoff_;
}

absl::Status EngineClient::EnsureConnectedLocked(MonoTime deadline) {
  if (socket_.valid()) return absl::OkStatus();
  const MonoTime now = options_.clock->Now();
  if (now < next_attempt_) {
    return absl::UnavailableError(fmt::format(
        "daemon at {} unavailable ({}); next attempt in {} ms", options_.socket_path,
        StatusText(last_error_), std::chrono::ceil<milliseconds>(next_attempt_ - now).count()));
  }
  absl::Status status = HandshakeLocked(deadline);
  if (status.ok()) {
    if (warned_) {
      Log().info("strata connector: connected to the daemon at {} (session {})",
                 options_.socket_path, session_id_);
    }
    warned_ = false;
    backoff_ = options_.reconnect_min_backoff;
    last_error_ = absl::OkStatus();
    ++stats_.connects;
    return absl::OkStatus();
  }
  ++stats_.connect_failures;
  socket_.Reset();
  if (!warned_) {
    Log().warn("strata connector: cannot reach the daemon at {}: {} (retrying with backoff)",
               options_.socket_path, StatusText(status));
    warned_ = true;
  }
  last_error_ = status;
  next_attempt_ = options_.clock->Now() + backoff_;
  backoff_ = std::min(backoff_ * 2, options_.reconnect_max_backoff);
  return absl::UnavailableError(
      fmt::format("daemon at {} unavailable: {}", options_.socket_path, StatusText(status)));
}

absl::Status EngineClient::HandshakeLocked(MonoTime deadline) {
  ScopedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return ErrnoToStatus(errno, "socket");
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, options_.socket_path.data(), options_.socket_path.size());
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return ErrnoToStatus(errno, fmt::format("connect {}", options_.socket_path));
  }

  v1::EngineRequest request;
  request.set_request_id(1);
  v1::HandshakeRequest* handshake = request.mutable_handshake();
  handshake->set_protocol_version(v1::ENGINE_PROTOCOL_VERSION);
  handshake->set_engine_id(options_.engine_id);
  *handshake->mutable_layout() = ToProto(options_.layout);
  STRATA_RETURN_IF_ERROR(SendFrame(fd.get(), request.SerializeAsString(), Remaining(deadline)));
  STRATA_ASSIGN_OR_RETURN(ReceivedFrame frame, RecvFrame(fd.get(), Remaining(deadline)));
  v1::EngineResponse response;
  if (!response.ParseFromString(frame.payload)) {
    return absl::InternalError("handshake: malformed response");
  }
  if (response.request_id() != 1) {
    return absl::InternalError(
        fmt::format("handshake: response to request {}", response.request_id()));
  }
  STRATA_RETURN_IF_ERROR(Annotate(FromProto(response.status()), "handshake refused"));
  if (response.body_case() != v1::EngineResponse::kHandshake) {
    return absl::InternalError("handshake: response without a handshake body");
  }
  const v1::HandshakeResponse& body = response.handshake();
  if (body.protocol_version() != v1::ENGINE_PROTOCOL_VERSION) {
    return absl::FailedPreconditionError(
        fmt::format("handshake: daemon speaks protocol {}, connector {}", body.protocol_version(),
                    v1::ENGINE_PROTOCOL_VERSION));
  }
  if (body.layout_fingerprint() != fingerprint_) {
    return absl::FailedPreconditionError(
        fmt::format("handshake: daemon answered for layout {:016x}, connector has {:016x} ({})",
                    body.layout_fingerprint(), fingerprint_, options_.layout.DebugString()));
  }

  std::shared_ptr<const ArenaMapping> arena;
  const uint64_t generation = last_generation_ + 1;
  if (options_.map_arena) {
    if (frame.passed_fds.empty()) {
      return absl::InternalError("handshake: no arena descriptor attached");
    }
    const int arena_fd = frame.passed_fds[0].get();
    const uint64_t size = body.arena_size_bytes();
    struct stat st {};
    if (size == 0 || ::fstat(arena_fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < size) {
      return absl::InternalError(
          fmt::format("handshake: arena of {} bytes does not match its descriptor ({} bytes)", size,
                      static_cast<int64_t>(st.st_size)));
    }
    void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, arena_fd, 0);
    if (base == MAP_FAILED) return ErrnoToStatus(errno, "mmap arena");
    bool registered = false;
    if (options_.hooks.on_map) {
      absl::Status hooked = options_.hooks.on_map(base, size);
      registered = hooked.ok();
      if (!hooked.ok()) {
        Log().warn("strata connector: arena registration failed ({}); copies stay unpinned",
                   StatusText(hooked));
      }
    }
    arena = std::make_shared<const ArenaMapping>(static_cast<std::byte*>(base), size, generation,
                                                 options_.hooks, registered);
  }
  STRATA_RETURN_IF_ERROR(AcceptDevicePoolLocked(body, frame.passed_fds, generation));
  socket_ = std::move(fd);
  arena_ = std::move(arena);
  last_generation_ = generation;
  generation_ = generation;
  session_id_ = body.session_id();
  send_token_ids_ = body.kv_event_token_ids();
  daemon_node_ = {.node_id = body.node_id(), .remote_address = body.remote_address()};
  next_request_id_ = 2;
  return absl::OkStatus();
}

absl::Status EngineClient::AcceptDevicePoolLocked(const v1::HandshakeResponse& body,
                                                  std::span<const ScopedFd> passed_fds,
                                                  uint64_t generation) {
  device_pool_grant_.reset();
  device_pool_.reset();
  if (!body.has_device_pool()) return absl::OkStatus();
  const v1::DevicePoolGrant& proto = body.device_pool();
  DevicePoolGrant grant{.backend = proto.backend(),
                        .geometry = {.num_layers = proto.num_layers(),
                                     .num_pages = proto.num_pages(),
                                     .page_bytes = proto.page_bytes()},
                        .block_tokens = proto.block_tokens()};
  if (absl::Status valid = grant.geometry.Validate(); !valid.ok()) {
    return Annotate(valid, "handshake: bad device pool grant");
  }
  if (grant.block_tokens == 0 || proto.size_bytes() < grant.geometry.total_bytes()) {
    return absl::InternalError(fmt::format(
        "handshake: device pool grant of {} bytes, {}-token pages, cannot hold {} pages of {} "
        "layers of {} bytes",
        proto.size_bytes(), grant.block_tokens, grant.geometry.num_pages, grant.geometry.num_layers,
        grant.geometry.page_bytes));
  }
  if (options_.device_runtime != nullptr) {
    storage::SharedMemoryHandle handle{.backend = grant.backend, .size_bytes = proto.size_bytes()};
    // The host pool's memfd follows the arena's descriptor; a CUDA pool travels as IPC bytes.
    if (passed_fds.size() >= 2) handle.fd = passed_fds[1].get();
    if (proto.ipc_handle().size() == handle.ipc.size()) {
      std::memcpy(handle.ipc.data(), proto.ipc_handle().data(), handle.ipc.size());
    }
    absl::StatusOr<std::unique_ptr<storage::DeviceAllocation>> memory =
        options_.device_runtime->OpenShared(handle);
    if (memory.ok()) {
      device_pool_ =
          std::make_shared<const DevicePoolMapping>(grant, std::move(*memory), generation);
    } else {
      Log().warn(
          "strata connector: cannot map the daemon's {} device pool ({}); position-independent "
          "chunks are computed privately",
          grant.backend, StatusText(memory.status()));
    }
  }
  device_pool_grant_ = std::move(grant);
  return absl::OkStatus();
}

absl::StatusOr<v1::EngineResponse> EngineClient::CallLocked(v1::EngineRequest& request,
                                                            int expected_body, MonoTime deadline) {
  // A deadline that passed while this call waited for the lock fails the call alone: nothing was
  // sent, so the session stays in step.
  if (SystemClock::Get()->Now() >= deadline) {
    ++stats_.timeouts;
    return absl::DeadlineExceededError(
        "engine client: deadline passed before the request was sent");
  }
  STRATA_RETURN_IF_ERROR(EnsureConnectedLocked(deadline));
  SettleLateGrantsLocked(deadline);
  if (!socket_.valid()) return absl::UnavailableError(StatusText(last_error_));
  const uint64_t request_id = next_request_id_++;
  request.set_request_id(request_id);
  ++stats_.requests;
  absl::Status sent = SendFrame(socket_.get(), request.SerializeAsString(), Remaining(deadline));
  if (!sent.ok()) {
    if (sent.code() == absl::StatusCode::kInvalidArgument) return sent;  // oversized request
    DropSessionLocked(sent);
    return absl::UnavailableError(StatusText(sent));
  }
  STRATA_ASSIGN_OR_RETURN(
      v1::EngineResponse response,
      ReceiveReplyLocked(request_id, static_cast<int>(request.body_case()), deadline));
  absl::Status status = FromProto(response.status());
  if (!status.ok()) return status;
  if (static_cast<int>(response.body_case()) != expected_body) {
    return ProtocolErrorLocked(fmt::format("response to request {} has body {}, expected {}",
                                           request_id, static_cast<int>(response.body_case()),
                                           expected_body));
  }
  return response;
}

absl::StatusOr<v1::EngineResponse> EngineClient::ReceiveReplyLocked(uint64_t request_id,
                                                                    int request_body,
                                                                    MonoTime deadline) {
  for (;;) {
    absl::StatusOr<ReceivedFrame> frame =
        RecvFrame(socket_.get(), Remaining(deadline), options_.reply_spin);
    if (!frame.ok() && frame.status().code() == absl::StatusCode::kDeadlineExceeded) {
      // Nothing of the reply was read (RecvFrame reports a timeout inside a frame otherwise):
      // the session stays in step, and the reply, when it comes, is discarded.
      ++stats_.timeouts;
      owed_replies_.emplace_back(request_id, request_body);
      if (owed_replies_.size() > kMaxOwedReplies) {
        DropSessionLocked(absl::DeadlineExceededError(
            fmt::format("the daemon owes {} replies past their deadlines", owed_replies_.size())));
      }
      return frame.status();
    }
    if (!frame.ok()) {
      DropSessionLocked(frame.status());
      return absl::UnavailableError(StatusText(frame.status()));
    }
    v1::EngineResponse response;
    if (!response.ParseFromString(frame->payload)) {
      return ProtocolErrorLocked(fmt::format("bad response to request {}", request_id));
    }
    if (response.request_id() == request_id) return response;
    const auto owed = std::find_if(owed_replies_.begin(), owed_replies_.end(),
                                   [&](const auto& o) { return o.first == response.request_id(); });
    if (owed == owed_replies_.end()) {
      return ProtocolErrorLocked(fmt::format("a response to request {} while waiting for {}",
                                             response.request_id(), request_id));
    }
    const int owed_body = owed->second;
    owed_replies_.erase(owed);
    ++stats_.late_replies;
    KeepLateGrantsLocked(owed_body, response);
  }
}

void EngineClient::KeepLateGrantsLocked(int request_body, const v1::EngineResponse& response) {
  auto keep = [](const auto& chunks, std::vector<uint64_t>& into) {
    for (const auto& chunk : chunks) {
      if (chunk.handle() != 0) into.push_back(chunk.handle());
    }
  };
  switch (request_body) {
    case v1::EngineRequest::kPrepareLoad:
      keep(response.prepare_load().chunks(), late_leases_);
      break;
    case v1::EngineRequest::kPoolAcquire:
      keep(response.pool_chunks().chunks(), late_leases_);
      break;
    case v1::EngineRequest::kPrepareStore:
      keep(response.prepare_store().chunks(), late_reservations_);
      break;
    case v1::EngineRequest::kPoolReserve:
      keep(response.pool_chunks().chunks(), late_reservations_);
      break;
    default:  // lookups, prefetches, handle calls: nothing granted
      break;
  }
}

void EngineClient::SettleLateGrantsLocked(MonoTime deadline) {
  if (late_leases_.empty() && late_reservations_.empty()) return;
  // Moved out first: the calls below go through CallLocked, which settles again.
  const std::vector<uint64_t> leases = std::exchange(late_leases_, {});
  const std::vector<uint64_t> reservations = std::exchange(late_reservations_, {});
  // Best effort: a failure here leaves the daemon to expire the leases, or to free the
  // reservations with the session.
  (void)HandlesCallLocked(v1::EngineRequest::kRelease, generation_, leases, deadline);
  (void)HandlesCallLocked(v1::EngineRequest::kAbort, generation_, reservations, deadline);
}

SessionStats ToSessionStats(const EngineClientStats& stats) {
  return {.connects = stats.connects,
          .disconnects = stats.disconnects,
          .timeouts = stats.timeouts,
          .late_replies = stats.late_replies};
}

absl::StatusOr<LookupHit> EngineClient::LookupChain(std::span<const ChunkKey> keys,
                                                    milliseconds timeout,
                                                    const LookupOrigin& origin) {
  const MonoTime deadline = DeadlineIn(timeout);
  google::protobuf::Arena arena;
  auto* request = google::protobuf::Arena::CreateMessage<v1::EngineRequest>(&arena);
  v1::LookupChainRequest& lookup = *request->mutable_lookup();
  STRATA_RETURN_IF_ERROR(ToProto(keys, *lookup.mutable_chain()));
  lookup.set_tenant(std::string(origin.tenant));
  lookup.set_tokens(origin.tokens);
  lookup.set_source_node(std::string(origin.source_node));
  absl::MutexLock lock(&mu_);
  STRATA_ASSIGN_OR_RETURN(v1::EngineResponse response,
                          CallLocked(*request, v1::EngineResponse::kLookup, deadline));
  const uint32_t chunks =
      std::min<uint32_t>(response.lookup().hit_chunks(), static_cast<uint32_t>(keys.size()));
  return LookupHit{.chunks = chunks,
                   .host_chunks = std::min(response.lookup().host_chunks(), chunks)};
}

absl::StatusOr<uint32_t> EngineClient::Prefetch(std::span<const ChunkKey> keys,
                                                milliseconds timeout) {
  const MonoTime deadline = DeadlineIn(timeout);
  google::protobuf::Arena arena;
  auto* request = google::protobuf::Arena::CreateMessage<v1::EngineRequest>(&arena);
  STRATA_RETURN_IF_ERROR(ToProto(keys, *request->mutable_prefetch()->mutable_chain()));
  absl::MutexLock lock(&mu_);
  STRATA_ASSIGN_OR_RETURN(v1::EngineResponse response,
                          CallLocked(*request, v1::EngineResponse::kPrefetch, deadline));
  return std::min<uint32_t>(response.prefetch().queued_chunks(),
                            static_cast<uint32_t>(keys.size()));
}

absl::StatusOr<SessionResult<std::vector<LoadPlacement>>> EngineClient::PrepareLoad(
    std::span<const ChunkKey> keys, uint32_t lease_ms, milliseconds timeout, bool verifies,
    CodecSet decoded_codecs) {
  const MonoTime deadline = DeadlineIn(timeout);
  google::protobuf::Arena arena;
  auto* request = google::protobuf::Arena::CreateMessage<v1::EngineRequest>(&arena);
  auto* body = request->mutable_prepare_load();
  body->set_lease_ms(lease_ms);
  body->set_connector_verifies(verifies);
  for (const uint32_t codec : decoded_codecs.Ids()) body->add_decoded_codecs(codec);
  STRATA_RETURN_IF_ERROR(ToProto(keys, *body->mutable_chain()));
  absl::MutexLock lock(&mu_);
  STRATA_ASSIGN_OR_RETURN(v1::EngineResponse response,
                          CallLocked(*request, v1::EngineResponse::kPrepareLoad, deadline));
  const auto& chunks = response.prepare_load().chunks();
  if (static_cast<size_t>(chunks.size()) != keys.size()) {
    return ProtocolErrorLocked(
        fmt::format("{} placements for {} keys", chunks.size(), keys.size()));
  }
  SessionResult<std::vector<LoadPlacement>> result{generation_, arena_, {}};
  result.value.reserve(keys.size());
  for (const v1::LoadPlacement& chunk : chunks) {
    LoadPlacement& placement = result.value.emplace_back();
    placement.status = FromProto(chunk.status());
    placement.handle = chunk.handle();
    placement.size_bytes = chunk.size_bytes();
    placement.extents = ExtentsFromProto(chunk.extents());
    placement.checksum = chunk.checksum();
    if (chunk.has_encoding()) {
      placement.encoding = {.codec = static_cast<uint16_t>(chunk.encoding().codec()),
                            .decoded_bytes = chunk.encoding().decoded_bytes(),
                            .decoded_checksum = chunk.encoding().decoded_checksum()};
      if (!decoded_codecs.Contains(chunk.encoding().codec()) && placement.status.ok()) {
        // Never read a form as KV that was not asked for: the chunk is recomputed.
        placement.status = absl::InternalError(fmt::format(
            "the daemon placed a chunk encoded by codec {}, which this load does not decode",
            chunk.encoding().codec()));
      }
    }
  }
  return result;
}

absl::StatusOr<SessionResult<std::vector<StorePlacement>>> EngineClient::PrepareStore(
    std::span<const StoreItem> items, milliseconds timeout) {
  const MonoTime deadline = DeadlineIn(timeout);
  google::protobuf::Arena arena;
  auto* request = google::protobuf::Arena::CreateMessage<v1::EngineRequest>(&arena);
  auto* body = request->mutable_prepare_store();
  body->mutable_items()->Reserve(static_cast<int>(items.size()));
  for (const StoreItem& item : items) {
    v1::StoreItem* out = body->add_items();
    ToProto(item.key, out->mutable_key());
    out->set_num_tokens(item.num_tokens);
    if (!item.parent.empty()) ToProto(item.parent, out->mutable_parent());
    if (!item.tenant.empty()) out->set_tenant(item.tenant);
    out->set_hold_ms(item.hold_ms);
    if (!item.stream_to.empty()) out->set_stream_to(std::string(item.stream_to));
  }
  absl::MutexLock lock(&mu_);
  // Connected first, so a store that opens a session already knows whether to send tokens (a
  // failure, or a deadline that passed, is CallLocked's to report).
  if (SystemClock::Get()->Now() < deadline && EnsureConnectedLocked(deadline).ok() &&
      send_token_ids_) {
    for (size_t i = 0; i < items.size(); ++i) {
      body->mutable_items(static_cast<int>(i))
          ->mutable_token_ids()
          ->Add(items[i].token_ids.begin(), items[i].token_ids.end());
    }
  }
  STRATA_ASSIGN_OR_RETURN(v1::EngineResponse response,
                          CallLocked(*request, v1::EngineResponse::kPrepareStore, deadline));
  const auto& chunks = response.prepare_store().chunks();
  if (static_cast<size_t>(chunks.size()) != items.size()) {
    return ProtocolErrorLocked(
        fmt::format("{} placements for {} items", chunks.size(), items.size()));
  }
  SessionResult<std::vector<StorePlacement>> result{generation_, arena_, {}};
  result.value.reserve(items.size());
  for (const v1::StorePlacement& chunk : chunks) {
    StorePlacement& placement = result.value.emplace_back();
    placement.status = FromProto(chunk.status());
    switch (chunk.disposition()) {
      case v1::STORE_DISPOSITION_RESERVED:
        placement.disposition = StoreDisposition::kReserved;
        break;
      case v1::STORE_DISPOSITION_ALREADY_PRESENT:
        placement.disposition = StoreDisposition::kAlreadyPresent;
        break;
      case v1::STORE_DISPOSITION_IN_PROGRESS:
        placement.disposition = StoreDisposition::kInProgress;
        break;
      default:
        if (placement.status.ok()) {
          placement.status = absl::InternalError(
              fmt::format("unknown store disposition {}", static_cast<int>(chunk.disposition())));
        }
        break;
    }
    placement.handle = chunk.handle();
    placement.size_bytes = chunk.size_bytes();
    placement.extents = ExtentsFromProto(chunk.extents());
    placement.streamed = chunk.streamed();
  }
  return result;
}

absl::Status EngineClient::LayersSaved(uint64_t generation, std::span<const uint64_t> handles,
                                       uint32_t layers, milliseconds timeout) {
  const MonoTime deadline = DeadlineIn(timeout);
  v1::EngineRequest request;
  v1::LayersSavedRequest* body = request.mutable_layers_saved();
  body->mutable_handles()->Add(handles.begin(), handles.end());
  body->set_layers(layers);
  absl::MutexLock lock(&mu_);
  if (generation == 0 || generation != generation_) {
    return absl::AbortedError(
        fmt::format("session {} is gone; its handles died with it", generation));
  }
  return CallLocked(request, v1::EngineResponse::BODY_NOT_SET, deadline).status();
}

absl::StatusOr<std::vector<absl::Status>> EngineClient::HandlesCallLocked(
    int which, uint64_t generation, std::span<const uint64_t> handles, MonoTime deadline,
    std::span<const uint64_t> checksums) {
  if (generation == 0 || generation != generation_) {
    return absl::AbortedError(
        fmt::format("session {} is gone; its handles died with it", generation));
  }
  if (handles.empty()) return std::vector<absl::Status>{};
  v1::EngineRequest request;
  v1::HandlesRequest* body = which == v1::EngineRequest::kCommit  ? request.mutable_commit()
                             : which == v1::EngineRequest::kAbort ? request.mutable_abort()
                                                                  : request.mutable_release();
  body->mutable_handles()->Reserve(static_cast<int>(handles.size()));
  for (uint64_t handle : handles) body->add_handles(handle);
  body->mutable_checksums()->Add(checksums.begin(), checksums.end());
  STRATA_ASSIGN_OR_RETURN(v1::EngineResponse response,
                          CallLocked(request, v1::EngineResponse::kHandles, deadline));
  const auto& statuses = response.handles().statuses();
  if (static_cast<size_t>(statuses.size()) != handles.size()) {
    return ProtocolErrorLocked(
        fmt::format("{} statuses for {} handles", statuses.size(), handles.size()));
  }
  std::vector<absl::Status> out;
  out.reserve(handles.size());
  for (const v1::Status& status : statuses) out.push_back(FromProto(status));
  return out;
}

absl::StatusOr<std::vector<absl::Status>> EngineClient::Commit(
    uint64_t generation, std::span<const uint64_t> handles, milliseconds timeout,
    std::span<const uint64_t> checksums) {
  const MonoTime deadline = DeadlineIn(timeout);
  absl::MutexLock lock(&mu_);
  return HandlesCallLocked(v1::EngineRequest::kCommit, generation, handles, deadline, checksums);
}

absl::StatusOr<std::vector<absl::Status>> EngineClient::Abort(uint64_t generation,
                                                              std::span<const uint64_t> handles,
                                                              milliseconds timeout) {
  const MonoTime deadline = DeadlineIn(timeout);
  absl::MutexLock lock(&mu_);
  return HandlesCallLocked(v1::EngineRequest::kAbort, generation, handles, deadline);
}

absl::StatusOr<std::vector<absl::Status>> EngineClient::Release(uint64_t generation,
                                                                std::span<const uint64_t> handles,
                                                                milliseconds timeout) {
  const MonoTime deadline = DeadlineIn(timeout);
  absl::MutexLock lock(&mu_);
  return HandlesCallLocked(v1::EngineRequest::kRelease, generation, handles, deadline);
}

absl::StatusOr<std::vector<bool>> EngineClient::PoolLookup(std::span<const ChunkKey> keys,
                                                           milliseconds timeout) {
  const MonoTime deadline = DeadlineIn(timeout);
  v1::EngineRequest request;
  STRATA_RETURN_IF_ERROR(ToProto(keys, *request.mutable_pool_lookup()->mutable_keys()));
  absl::MutexLock lock(&mu_);
  STRATA_ASSIGN_OR_RETURN(v1::EngineResponse response,
                          CallLocked(request, v1::EngineResponse::kPoolLookup, deadline));
  const auto& resident = response.pool_lookup().resident();
  if (static_cast<size_t>(resident.size()) != keys.size()) {
    return ProtocolErrorLocked(fmt::format("{} answers for {} keys", resident.size(), keys.size()));
  }
  return std::vector<bool>(resident.begin(), resident.end());
}

absl::Status EngineClient::PoolImportance(std::span<const ChunkKey> keys,
                                          std::span<const std::span<const float>> importance,
                                          milliseconds timeout) {
  const MonoTime deadline = DeadlineIn(timeout);
  if (importance.size() != keys.size()) {
    return absl::InvalidArgumentError(fmt::format(
        "{} importance reports for {} keys; give one each", importance.size(), keys.size()));
  }
  v1::EngineRequest request;
  v1::PoolImportanceRequest& body = *request.mutable_pool_importance();
  STRATA_RETURN_IF_ERROR(ToProto(keys, *body.mutable_keys()));
  for (const std::span<const float> report : importance) {
    body.add_num_tokens(static_cast<uint32_t>(report.size()));
    body.mutable_importance()->Add(report.begin(), report.end());
  }
  absl::MutexLock lock(&mu_);
  return CallLocked(request, v1::EngineResponse::BODY_NOT_SET, deadline).status();
}

absl::StatusOr<SessionResult<std::vector<PoolPlacement>>> EngineClient::PoolAcquire(
    std::span<const ChunkKey> keys, milliseconds timeout) {
  const MonoTime deadline = DeadlineIn(timeout);
  v1::EngineRequest request;
  STRATA_RETURN_IF_ERROR(ToProto(keys, *request.mutable_pool_acquire()->mutable_keys()));
  absl::MutexLock lock(&mu_);
  return PoolChunksCallLocked(request, keys.size(), {}, deadline);
}

absl::StatusOr<SessionResult<std::vector<PoolPlacement>>> EngineClient::PoolReserve(
    std::span<const ChunkKey> keys, std::span<const uint32_t> num_pages, milliseconds timeout) {
  const MonoTime deadline = DeadlineIn(timeout);
  if (num_pages.size() != keys.size()) {
    return absl::InvalidArgumentError(
        fmt::format("{} page counts for {} keys; give one each", num_pages.size(), keys.size()));
  }
  v1::EngineRequest request;
  v1::PoolReserveRequest& body = *request.mutable_pool_reserve();
  STRATA_RETURN_IF_ERROR(ToProto(keys, *body.mutable_keys()));
  body.mutable_num_pages()->Add(num_pages.begin(), num_pages.end());
  absl::MutexLock lock(&mu_);
  return PoolChunksCallLocked(request, keys.size(), num_pages, deadline);
}

absl::StatusOr<SessionResult<std::vector<PoolPlacement>>> EngineClient::PoolChunksCallLocked(
    v1::EngineRequest& request, size_t num_keys, std::span<const uint32_t> num_pages,
    MonoTime deadline) {
  // Connected first, so a session whose pool is not mapped here sends nothing (a failure, or a
  // deadline that passed, is CallLocked's to report).
  if (SystemClock::Get()->Now() < deadline && EnsureConnectedLocked(deadline).ok() &&
      device_pool_grant_.has_value() && device_pool_ == nullptr) {
    return absl::FailedPreconditionError(
        "the session's device pool is not mapped in this process (no device runtime, or "
        "mapping it failed)");
  }
  STRATA_ASSIGN_OR_RETURN(v1::EngineResponse response,
                          CallLocked(request, v1::EngineResponse::kPoolChunks, deadline));
  const auto& chunks = response.pool_chunks().chunks();
  if (static_cast<size_t>(chunks.size()) != num_keys) {
    return ProtocolErrorLocked(fmt::format("{} pool chunks for {} keys", chunks.size(), num_keys));
  }
  if (device_pool_ == nullptr)
    return ProtocolErrorLocked("pool chunks for a session without a pool");
  SessionResult<std::vector<PoolPlacement>> result{generation_, arena_, {}, device_pool_};
  result.value.reserve(num_keys);
  const uint32_t pool_pages = device_pool_ ? device_pool_->grant().geometry.num_pages : 0;
  for (int i = 0; i < chunks.size(); ++i) {
    const v1::PoolChunk& chunk = chunks[i];
    PoolPlacement& placement = result.value.emplace_back();
    placement.status = FromProto(chunk.status());
    if (!placement.status.ok()) continue;
    placement.handle = chunk.handle();
    placement.pages.assign(chunk.pages().begin(), chunk.pages().end());
    const bool in_pool = std::all_of(placement.pages.begin(), placement.pages.end(),
                                     [&](uint32_t page) { return page < pool_pages; });
    const bool sized =
        num_pages.empty() ? !placement.pages.empty() : placement.pages.size() == num_pages[i];
    if (!in_pool || !sized) {
      return ProtocolErrorLocked(fmt::format("pool chunk {} has {} pages, not all in a pool of {}",
                                             i, placement.pages.size(), pool_pages));
    }
    placement.positions.assign(chunk.positions().begin(), chunk.positions().end());
    if (!placement.positions.empty() &&
        !PagePositionsFit(placement, num_pages.empty(), device_pool_->grant().block_tokens)) {
      return ProtocolErrorLocked(fmt::format(
          "pool chunk {} has {} page positions for {} pages that are not ascending multiples of "
          "{} (or came with a reserve)",
          i, placement.positions.size(), placement.pages.size(),
          device_pool_->grant().block_tokens));
    }
  }
  return result;
}

}  // namespace strata::connector::internal

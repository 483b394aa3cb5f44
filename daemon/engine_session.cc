#include "daemon/engine_session.h"

#include <algorithm>
#include <numeric>

#include "core/fmt_absl.h"
#include "core/stored_encoding.h"
#include "fmt/format.h"
#include "proto/convert.h"
#include "spdlog/spdlog.h"
#include "storage/host/payload_view.h"
#include "storage/remote/remote_node.h"
#include "storage/tiered/importance_book.h"

namespace strata::daemon {
namespace {

using std::chrono::milliseconds;

void SetExtents(std::span<const storage::ArenaRange> ranges,
                google::protobuf::RepeatedPtrField<v1::Extent>* extents) {
  for (const storage::ArenaRange& range : ranges) {
    v1::Extent* extent = extents->Add();
    extent->set_offset(range.offset);
    extent->set_length(range.size_bytes);
  }
}

}  // namespace

EngineSession::EngineSession(uint64_t id, SessionResources resources, EngineSessionLimits limits)
    : id_(id),
      store_(resources.store),
      host_tier_(&resources.store->host()),
      completions_(std::move(resources.completions)),
      lookups_(resources.lookups),
      kv_event_token_ids_(resources.kv_event_token_ids),
      node_(resources.node),
      device_pools_(resources.device_pools),
      device_pool_tiering_(resources.device_pool_tiering),
      limits_(limits) {
  if (node_ != nullptr && node_->remote != nullptr) streams_.emplace(*node_->remote, *host_tier_);
}

EngineSession::Reply EngineSession::Handle(const v1::EngineRequest& request) {
  if (request.body_case() == v1::EngineRequest::kHandshake) {
    if (handshaken_) {
      Reply reply;
      reply.response.set_request_id(request.request_id());
      *reply.response.mutable_status() =
          ToProto(absl::FailedPreconditionError("session already handshaken"));
      return reply;
    }
    Reply reply = Handshake(request.handshake());
    reply.response.set_request_id(request.request_id());
    return reply;
  }
  Reply reply;
  v1::EngineResponse& response = reply.response;
  response.set_request_id(request.request_id());
  if (!handshaken_) {
    *response.mutable_status() = ToProto(
        absl::FailedPreconditionError("the first request of a session must be a handshake"));
    reply.close_after = true;
    return reply;
  }
  absl::Status status;
  switch (request.body_case()) {
    case v1::EngineRequest::kLookup: {
      absl::StatusOr<bool> answered =
          Lookup(request.request_id(), request.lookup(), *response.mutable_lookup());
      if (answered.ok() && !*answered) {
        reply.deferred = true;
        return reply;
      }
      status = answered.status();
      break;
    }
    case v1::EngineRequest::kPrepareLoad: {
      absl::StatusOr<bool> answered = PrepareLoad(request.request_id(), request.prepare_load(),
                                                  *response.mutable_prepare_load());
      if (answered.ok() && !*answered) {
        reply.deferred = true;
        return reply;
      }
      status = answered.status();
      break;
    }
    case v1::EngineRequest::kPrepareStore:
      status = PrepareStore(request.prepare_store(), *response.mutable_prepare_store());
      break;
    case v1::EngineRequest::kCommit:
      status = Commit(request.commit(), *response.mutable_handles());
      break;
    case v1::EngineRequest::kAbort:
      status = Abort(request.abort(), *response.mutable_handles());
      break;
    case v1::EngineRequest::kRelease:
      status = Release(request.release(), *response.mutable_handles());
      break;
    case v1::EngineRequest::kPrefetch:
      status = Prefetch(request.prefetch(), *response.mutable_prefetch());
      break;
    case v1::EngineRequest::kLayersSaved:
      status = LayersSaved(request.layers_saved());
      break;
    case v1::EngineRequest::kPoolLookup:
      status = PoolLookup(request.pool_lookup(), *response.mutable_pool_lookup());
      break;
    case v1::EngineRequest::kPoolAcquire:
      status = PoolAcquire(request.pool_acquire(), *response.mutable_pool_chunks());
      break;
    case v1::EngineRequest::kPoolReserve:
      status = PoolReserve(request.pool_reserve(), *response.mutable_pool_chunks());
      break;
    case v1::EngineRequest::kPoolImportance:
      status = PoolImportance(request.pool_importance());
      break;
    default:
      status = absl::InvalidArgumentError("request has no body");
      break;
  }
  if (!status.ok()) response.clear_body();
  *response.mutable_status() = ToProto(status);
  return reply;
}

EngineSession::Reply EngineSession::Handshake(const v1::HandshakeRequest& request) {
  Reply reply;
  auto fail = [&reply](absl::Status status) {
    *reply.response.mutable_status() = ToProto(status);
    reply.close_after = true;
    return reply;
  };
  if (request.protocol_version() != v1::ENGINE_PROTOCOL_VERSION) {
    return fail(absl::FailedPreconditionError(
        fmt::format("engine protocol version {} is not supported (daemon speaks {})",
                    request.protocol_version(), v1::ENGINE_PROTOCOL_VERSION)));
  }
  absl::StatusOr<KvLayout> layout = FromProto(request.layout());
  if (!layout.ok()) return fail(layout.status());
  // A tier that encodes chunks needs their layout.
  if (absl::Status noted = store_->NoteLayout(*layout); !noted.ok()) return fail(noted);
  handshaken_ = true;
  engine_id_ = request.engine_id();
  layout_ = std::make_shared<const KvLayout>(*layout);
  fingerprint_ = layout_->Fingerprint();

  v1::HandshakeResponse* out = reply.response.mutable_handshake();
  out->set_session_id(id_);
  out->set_protocol_version(v1::ENGINE_PROTOCOL_VERSION);
  out->set_arena_size_bytes(host_tier_->arena_size_bytes());
  out->set_page_bytes(host_tier_->page_bytes());
  out->set_layout_fingerprint(fingerprint_);
  out->set_daemon_version(STRATA_VERSION);
  out->set_kv_event_token_ids(kv_event_token_ids_);
  if (node_ != nullptr) {
    out->set_node_id(node_->node_id);
    out->set_remote_address(node_->remote_address);
  }
  *reply.response.mutable_status() = ToProto(absl::OkStatus());
  reply.attach_arena_fd = true;
  GrantDevicePool(reply);
  return reply;
}

void EngineSession::GrantDevicePool(Reply& reply) {
  if (device_pools_ == nullptr) return;
  absl::StatusOr<storage::DevicePool*> pool = device_pools_->ForLayout(*layout_);
  if (!pool.ok()) {
    spdlog::warn("engine session {} ({}): no device pool for its layout: {}", id_, engine_id_,
                 pool.status().ToString());
    return;
  }
  const storage::SharedMemoryHandle handle = (*pool)->shared_handle();
  const storage::DevicePoolGeometry& geometry = (*pool)->geometry();
  v1::DevicePoolGrant* grant = reply.response.mutable_handshake()->mutable_device_pool();
  grant->set_backend(handle.backend);
  grant->set_size_bytes(handle.size_bytes);
  grant->set_num_layers(geometry.num_layers);
  grant->set_num_pages(geometry.num_pages);
  grant->set_page_bytes(geometry.page_bytes);
  grant->set_block_tokens(device_pools_->block_tokens());
  if (handle.fd >= 0) {
    reply.device_pool_fd = handle.fd;
  } else {
    grant->set_ipc_handle(handle.ipc.data(), handle.ipc.size());
  }
  device_pool_ = std::make_unique<SessionDevicePool>(**pool, id_, *layout_, device_pool_tiering_);
}

absl::StatusOr<std::vector<ChunkKey>> EngineSession::PoolKeys(const v1::KeyChain& proto) const {
  if (device_pool_ == nullptr) {
    return absl::FailedPreconditionError(
        "this session has no device pool (the daemon has none for its layout)");
  }
  absl::StatusOr<std::vector<ChunkKey>> keys = SessionChain(proto);
  if (!keys.ok()) return keys.status();
  if (!keys->empty() && keys->front().key_namespace() != KeyNamespace::kPositionIndependent) {
    return absl::InvalidArgumentError(
        "device pool chunks are named by position-independent keys (KeyHasher::PicKey)");
  }
  return keys;
}

absl::Status EngineSession::PoolLookup(const v1::PoolLookupRequest& request,
                                       v1::PoolLookupResponse& response) {
  absl::StatusOr<std::vector<ChunkKey>> keys = PoolKeys(request.keys());
  if (!keys.ok()) return keys.status();
  device_pool_->Lookup(*keys, response);
  return absl::OkStatus();
}

absl::Status EngineSession::PoolAcquire(const v1::PoolAcquireRequest& request,
                                        v1::PoolChunksResponse& response) {
  absl::StatusOr<std::vector<ChunkKey>> keys = PoolKeys(request.keys());
  if (!keys.ok()) return keys.status();
  if (absl::Status s = CheckBatch(static_cast<int>(keys->size()), /*adds_handles=*/true); !s.ok()) {
    return s;
  }
  device_pool_->Acquire(
      *keys, [this] { return NextHandle(); }, response);
  return absl::OkStatus();
}

absl::Status EngineSession::PoolReserve(const v1::PoolReserveRequest& request,
                                        v1::PoolChunksResponse& response) {
  absl::StatusOr<std::vector<ChunkKey>> keys = PoolKeys(request.keys());
  if (!keys.ok()) return keys.status();
  if (static_cast<size_t>(request.num_pages_size()) != keys->size()) {
    return absl::InvalidArgumentError(fmt::format("{} page counts for {} keys; give one each",
                                                  request.num_pages_size(), keys->size()));
  }
  if (absl::Status s = CheckBatch(static_cast<int>(keys->size()), /*adds_handles=*/true); !s.ok()) {
    return s;
  }
  const std::vector<uint32_t> num_pages(request.num_pages().begin(), request.num_pages().end());
  device_pool_->Reserve(
      *keys, num_pages, [this] { return NextHandle(); }, response);
  return absl::OkStatus();
}

absl::Status EngineSession::PoolImportance(const v1::PoolImportanceRequest& request) {
  absl::StatusOr<std::vector<ChunkKey>> keys = PoolKeys(request.keys());
  if (!keys.ok()) return keys.status();
  if (absl::Status s = CheckBatch(static_cast<int>(keys->size()), /*adds_handles=*/false);
      !s.ok()) {
    return s;
  }
  if (static_cast<size_t>(request.num_tokens_size()) != keys->size()) {
    return absl::InvalidArgumentError(fmt::format("{} token counts for {} keys; give one each",
                                                  request.num_tokens_size(), keys->size()));
  }
  uint64_t total = 0;
  for (const uint32_t n : request.num_tokens()) total += n;
  if (total != static_cast<uint64_t>(request.importance_size())) {
    return absl::InvalidArgumentError(
        fmt::format("{} importance values for {} tokens", request.importance_size(), total));
  }
  // The book checks every report (its length, its values) before it keeps any.
  const std::span<const float> all(request.importance().data(), request.importance_size());
  std::vector<std::span<const float>> reports;
  reports.reserve(keys->size());
  uint64_t at = 0;
  for (const uint32_t n : request.num_tokens()) {
    reports.push_back(all.subspan(at, n));
    at += n;
  }
  return store_->importance().AddAll(*keys, reports);
}

absl::Status EngineSession::CheckBatch(int items, bool adds_handles) const {
  if (items < 0 || static_cast<uint32_t>(items) > limits_.max_items_per_request) {
    return absl::InvalidArgumentError(fmt::format("{} items in one request; the limit is {}", items,
                                                  limits_.max_items_per_request));
  }
  if (adds_handles && open_handles() + items > limits_.max_handles) {
    return absl::ResourceExhaustedError(fmt::format("session holds {} handles; the limit is {}",
                                                    open_handles(), limits_.max_handles));
  }
  return absl::OkStatus();
}

absl::StatusOr<ChunkKey> EngineSession::SessionKey(const v1::ChunkKey& proto) const {
  absl::StatusOr<ChunkKey> key = FromProto(proto);
  if (!key.ok()) return key.status();
  if (key->layout_fingerprint() != fingerprint_) {
    return absl::InvalidArgumentError(fmt::format(
        "key {} belongs to layout {:016x}, not this session's {:016x} ({})", key->ToString(),
        key->layout_fingerprint(), fingerprint_, layout_->DebugString()));
  }
  return key;
}

absl::StatusOr<std::vector<ChunkKey>> EngineSession::SessionChain(const v1::KeyChain& proto) const {
  absl::StatusOr<std::vector<ChunkKey>> keys = FromProto(proto, limits_.max_items_per_request);
  if (keys.ok() && !keys->empty() && proto.layout_fingerprint() != fingerprint_) {
    return absl::InvalidArgumentError(
        fmt::format("key chain belongs to layout {:016x}, not this session's {:016x} ({})",
                    proto.layout_fingerprint(), fingerprint_, layout_->DebugString()));
  }
  return keys;
}

absl::StatusOr<bool> EngineSession::Lookup(uint64_t request_id,
                                           const v1::LookupChainRequest& request,
                                           v1::LookupChainResponse& response) {
  absl::StatusOr<std::vector<ChunkKey>> keys = SessionChain(request.chain());
  if (!keys.ok()) return keys.status();
  if (absl::Status known = CheckSourceNode(request.source_node()); !known.ok()) return known;
  const std::chrono::microseconds budget = request.source_node().empty() || node_ == nullptr
                                               ? std::chrono::microseconds(0)
                                               : node_->source_lookup_budget;
  const PendingRequest pending{.request_id = request_id,
                               .num_keys = keys->size(),
                               .tenant = request.tenant(),
                               .tokens = request.tokens()};
  auto post = [completions = completions_, session_id = id_,
               request_id](std::vector<storage::Tier> found) {
    completions->Post(
        {.session_id = session_id, .request_id = request_id, .result = std::move(found)});
  };
  // A decoder's lookup while its prefiller still streams the chunks here: answered once they
  // have landed (or the budget is spent), from what this node then holds.
  if (budget.count() > 0 && node_->remote != nullptr) {
    auto chain = std::make_shared<const std::vector<ChunkKey>>(*keys);
    const bool awaited = node_->remote->AwaitIncoming(
        *keys, std::chrono::duration_cast<std::chrono::milliseconds>(budget),
        [store = store_, chain, post, budget]() mutable {
          std::optional<std::vector<storage::Tier>> found =
              store->LocatePrefixOrAsk(*chain, post, budget);
          if (found.has_value()) post(*std::move(found));
        });
    if (awaited) {
      pending_ = pending;
      return false;
    }
  }
  std::optional<std::vector<storage::Tier>> tiers = store_->LocatePrefixOrAsk(*keys, post, budget);
  if (!tiers.has_value()) {
    pending_ = pending;
    return false;
  }
  AnswerLookup(*tiers, keys->size(), request.tenant(), request.tokens(), response);
  return true;
}

absl::Status EngineSession::CheckSourceNode(std::string_view source) const {
  if (source.empty()) return absl::OkStatus();
  if (node_ == nullptr || node_->is_admitted_peer == nullptr) {
    return absl::NotFoundError(fmt::format(
        "the KV was produced on node '{}', but this daemon has no remote tier to fetch it with",
        source));
  }
  if (source == node_->node_id || node_->is_admitted_peer(source)) return absl::OkStatus();
  return absl::NotFoundError(fmt::format(
      "the KV was produced on node '{}', which is not an admitted peer of this node ('{}')", source,
      node_->node_id));
}

void EngineSession::AnswerLookup(const std::vector<storage::Tier>& tiers, size_t num_keys,
                                 const std::string& tenant, uint64_t tokens,
                                 v1::LookupChainResponse& response) {
  response.set_hit_chunks(static_cast<uint32_t>(tiers.size()));
  const auto below_host = std::find_if(tiers.begin(), tiers.end(),
                                       [](storage::Tier t) { return t != storage::Tier::kHost; });
  response.set_host_chunks(static_cast<uint32_t>(below_host - tiers.begin()));
  if (lookups_ == nullptr) return;
  // The tokens the chain covers, as the engine counted them (its last chunk may be partial);
  // full chunks when it did not say, and never more (a count past them is the engine's error,
  // not worth failing its lookup for).
  const uint64_t chunk_tokens = layout_->chunk_tokens;
  const uint64_t full = num_keys * chunk_tokens;
  const uint64_t total = tokens != 0 ? std::min<uint64_t>(tokens, full) : full;
  const auto hit = HitTokensByTier(tiers, [&](size_t i) {
    const uint64_t before = i * chunk_tokens;
    return before >= total ? 0 : std::min(chunk_tokens, total - before);
  });
  const uint64_t hit_total = std::accumulate(hit.begin(), hit.end(), uint64_t{0});
  lookups_->Record(LookupSource::kEngine, tenant, hit, total - hit_total);
}

absl::Status EngineSession::Prefetch(const v1::PrefetchRequest& request,
                                     v1::PrefetchResponse& response) {
  absl::StatusOr<std::vector<ChunkKey>> keys = SessionChain(request.chain());
  if (!keys.ok()) return keys.status();
  absl::StatusOr<uint32_t> queued = store_->Prefetch(*layout_, *keys);
  if (!queued.ok()) return queued.status();
  response.set_queued_chunks(*queued);
  // Chunks only peers hold: the remote tier asks them in the background and what they hold is
  // queued then (not counted in this answer). No peer to ask: nothing more to do.
  auto chain = std::make_shared<const std::vector<ChunkKey>>(*std::move(keys));
  (void)store_->LocatePrefixOrAsk(
      *chain, [store = store_, layout = layout_, chain](std::vector<storage::Tier>) {
        // Best effort: a full queue or a stopped store leaves the chunks to the load.
        (void)store->Prefetch(*layout, *chain);
      });
  return absl::OkStatus();
}

absl::StatusOr<bool> EngineSession::PrepareLoad(uint64_t request_id,
                                                const v1::PrepareLoadRequest& request,
                                                v1::PrepareLoadResponse& response) {
  absl::StatusOr<std::vector<ChunkKey>> keys = SessionChain(request.chain());
  if (!keys.ok()) return keys.status();
  if (absl::Status s = CheckBatch(static_cast<int>(keys->size()), /*adds_handles=*/true); !s.ok()) {
    return s;
  }
  storage::LoadOptions options{.owner = id_, .reader_verifies = request.connector_verifies()};
  // Ids that name no codec are never members of a CodecSet, so they are ignored.
  for (const uint32_t codec : request.decoded_codecs()) options.reader_decodes.Add(codec);
  if (request.lease_ms() != 0) {
    options.lease =
        std::min<std::chrono::nanoseconds>(milliseconds(request.lease_ms()), limits_.max_lease);
  }
  const size_t num_keys = keys->size();
  std::optional<storage::LoadLeases> leased = store_->AcquireForLoad(
      layout_, *std::move(keys), options,
      [completions = completions_, session_id = id_, request_id](storage::LoadLeases leased) {
        completions->Post(
            {.session_id = session_id, .request_id = request_id, .result = std::move(leased)});
      });
  if (!leased.has_value()) {
    pending_ = PendingRequest{.request_id = request_id, .num_keys = num_keys};
    return false;
  }
  PlaceLoad(*std::move(leased), num_keys, response);
  return true;
}

EngineSession::Reply EngineSession::Complete(DeferredCompletion completion) {
  Reply reply;
  reply.response.set_request_id(completion.request_id);
  if (!pending_.has_value() || pending_->request_id != completion.request_id) {
    // Not this session's deferred request: a bug, never the engine's doing.
    *reply.response.mutable_status() = ToProto(absl::InternalError(
        fmt::format("no request {} is waiting for the store", completion.request_id)));
    reply.close_after = true;
    return reply;
  }
  const PendingRequest pending = *std::move(pending_);
  pending_.reset();
  if (auto* leased = std::get_if<storage::LoadLeases>(&completion.result)) {
    PlaceLoad(std::move(*leased), pending.num_keys, *reply.response.mutable_prepare_load());
  } else {
    AnswerLookup(std::get<std::vector<storage::Tier>>(completion.result), pending.num_keys,
                 pending.tenant, pending.tokens, *reply.response.mutable_lookup());
  }
  *reply.response.mutable_status() = ToProto(absl::OkStatus());
  return reply;
}

void EngineSession::PlaceLoad(storage::LoadLeases leased, size_t num_keys,
                              v1::PrepareLoadResponse& response) {
  response.mutable_chunks()->Reserve(static_cast<int>(num_keys));
  for (storage::ChunkLease& held : leased.leases) {
    v1::LoadPlacement* placement = response.add_chunks();
    const uint64_t handle = NextHandle();
    placement->set_handle(handle);
    placement->set_size_bytes(held.size_bytes());
    placement->set_checksum(held.checksum());
    SetExtents(held.ranges(), placement->mutable_extents());
    if (const StoredEncoding& form = held.encoding(); form.encoded()) {
      v1::PayloadEncoding* encoding = placement->mutable_encoding();
      encoding->set_codec(form.codec);
      encoding->set_decoded_bytes(form.decoded_bytes);
      encoding->set_decoded_checksum(form.decoded_checksum);
    }
    *placement->mutable_status() = ToProto(absl::OkStatus());
    leases_.emplace(handle, std::move(held));
  }
  // A load is a prefix: once a chunk fails, later chunks are not leased (the engine recomputes
  // from the first failure on).
  for (size_t i = leased.leases.size(); i < num_keys; ++i) {
    *response.add_chunks()->mutable_status() =
        ToProto(i == leased.leases.size()
                    ? leased.failure
                    : absl::AbortedError("not leased: an earlier chunk of the prefix failed"));
  }
}

absl::Status EngineSession::PrepareStore(const v1::PrepareStoreRequest& request,
                                         v1::PrepareStoreResponse& response) {
  if (absl::Status s = CheckBatch(request.items_size(), /*adds_handles=*/true); !s.ok()) {
    return s;
  }
  absl::flat_hash_map<uint64_t, v1::StorePlacement*> streamed;  // by handle
  std::chrono::milliseconds stream_hold{0};
  for (const v1::StoreItem& item : request.items()) {
    v1::StorePlacement* placement = response.add_chunks();
    absl::StatusOr<ChunkKey> key = SessionKey(item.key());
    if (!key.ok()) {
      *placement->mutable_status() = ToProto(key.status());
      continue;
    }
    storage::ReserveOptions options;
    options.num_tokens = item.num_tokens();
    options.partial = item.num_tokens() < layout_->chunk_tokens;
    options.owner = id_;
    options.tenant_name = item.tenant();
    if (item.has_parent()) {
      absl::StatusOr<ChunkKey> parent = SessionKey(item.parent());
      if (!parent.ok()) {
        *placement->mutable_status() = ToProto(parent.status());
        continue;
      }
      options.parent = *parent;
    }
    if (kv_event_token_ids_ && item.token_ids_size() > 0) {
      if (static_cast<uint32_t>(item.token_ids_size()) != item.num_tokens()) {
        *placement->mutable_status() = ToProto(absl::InvalidArgumentError(fmt::format(
            "{} token ids for a chunk of {} tokens", item.token_ids_size(), item.num_tokens())));
        continue;
      }
      options.token_ids = {item.token_ids().data(), static_cast<size_t>(item.token_ids_size())};
    }
    absl::StatusOr<storage::ReserveResult> reserved = host_tier_->Reserve(*layout_, *key, options);
    if (!reserved.ok()) {
      *placement->mutable_status() = ToProto(reserved.status());
      continue;
    }
    *placement->mutable_status() = ToProto(absl::OkStatus());
    const std::chrono::milliseconds hold(item.hold_ms());
    const bool stream = streams_.has_value() && !item.stream_to().empty() &&
                        reserved->outcome == storage::ReserveOutcome::kReserved;
    switch (reserved->outcome) {
      case storage::ReserveOutcome::kAlreadyPresent:
        placement->set_disposition(v1::STORE_DISPOSITION_ALREADY_PRESENT);
        if (hold.count() > 0) Hold(*key, hold);
        break;
      case storage::ReserveOutcome::kInProgress:
        placement->set_disposition(v1::STORE_DISPOSITION_IN_PROGRESS);
        break;
      case storage::ReserveOutcome::kReserved: {
        storage::WriteReservation& reservation = reserved->reservation;
        const uint64_t handle = NextHandle();
        placement->set_disposition(v1::STORE_DISPOSITION_RESERVED);
        placement->set_handle(handle);
        placement->set_size_bytes(reservation.size_bytes());
        SetExtents(reservation.ranges(), placement->mutable_extents());
        if (stream) {
          streams_->Add(item.stream_to(), handle, reservation, item.num_tokens());
          streamed.emplace(handle, placement);
          stream_hold = std::max(stream_hold, hold);
        }
        reservations_.emplace(handle, std::move(reservation));
        if (hold.count() > 0) holds_.emplace(handle, hold);
        break;
      }
    }
  }
  if (!streamed.empty()) {
    for (uint64_t handle : streams_->Open(*layout_, stream_hold)) {
      streamed.at(handle)->set_streamed(true);
    }
  }
  return absl::OkStatus();
}

absl::Status EngineSession::LayersSaved(const v1::LayersSavedRequest& request) {
  if (absl::Status s = CheckBatch(request.handles_size()); !s.ok()) return s;
  if (request.layers() > layout_->num_layers) {
    return absl::InvalidArgumentError(
        fmt::format("{} layers saved of a {}-layer layout", request.layers(), layout_->num_layers));
  }
  if (streams_.has_value()) {
    streams_->LayersSaved({request.handles().data(), static_cast<size_t>(request.handles_size())},
                          request.layers());
  }
  return absl::OkStatus();
}

absl::StatusOr<storage::WriteReservation> EngineSession::TakeReservation(uint64_t handle) {
  auto it = reservations_.find(handle);
  if (it == reservations_.end()) {
    return absl::InvalidArgumentError(
        fmt::format("handle {} is not an open reservation of this session", handle));
  }
  storage::WriteReservation reservation = std::move(it->second);
  reservations_.erase(it);
  return reservation;
}

void EngineSession::Hold(const ChunkKey& key, std::chrono::milliseconds hold) {
  const auto ttl = std::min<std::chrono::nanoseconds>(hold, limits_.max_lease);
  absl::Status pinned = host_tier_->Pin(key, {.kind = storage::PinKind::kSoft, .ttl = ttl});
  if (!pinned.ok()) {
    spdlog::debug("engine session {}: holding chunk {}: {}", id_, key.ToString(), pinned.message());
  }
}

absl::Status EngineSession::Commit(const v1::HandlesRequest& request,
                                   v1::HandlesResponse& response) {
  if (absl::Status s = CheckBatch(request.handles_size()); !s.ok()) return s;
  const bool with_checksums = request.checksums_size() > 0;
  if (with_checksums && request.checksums_size() != request.handles_size()) {
    return absl::InvalidArgumentError(
        fmt::format("{} checksums for {} handles; give none or one each", request.checksums_size(),
                    request.handles_size()));
  }
  for (int i = 0; i < request.handles_size(); ++i) {
    const uint64_t handle = request.handles(i);
    if (device_pool_ != nullptr && device_pool_->Owns(handle)) {
      *response.add_statuses() = ToProto(device_pool_->Commit(handle));
      continue;
    }
    absl::StatusOr<storage::WriteReservation> reservation = TakeReservation(handle);
    std::optional<uint64_t> checksum =
        with_checksums ? std::optional<uint64_t>(request.checksums(i)) : std::nullopt;
    std::optional<ChunkKey> key;
    if (reservation.ok()) key = reservation->key();
    const bool streams = streams_.has_value() && streams_->Streams(handle);
    if (streams && reservation.ok() && !checksum.has_value()) {
      // The stream's receiver checks the chunk against it: computed here once, for both.
      checksum = storage::ChecksumRanges(host_tier_->arena_base(), reservation->ranges());
    }
    const absl::Status committed = reservation.ok()
                                       ? host_tier_->Commit(std::move(*reservation), checksum)
                                       : reservation.status();
    if (streams) streams_->Settled(handle, committed, checksum.value_or(0));
    if (auto hold = holds_.find(handle); hold != holds_.end()) {
      if (committed.ok() && key.has_value()) Hold(*key, hold->second);
      holds_.erase(hold);
    }
    *response.add_statuses() = ToProto(committed);
  }
  return absl::OkStatus();
}

absl::Status EngineSession::Abort(const v1::HandlesRequest& request,
                                  v1::HandlesResponse& response) {
  if (absl::Status s = CheckBatch(request.handles_size()); !s.ok()) return s;
  for (uint64_t handle : request.handles()) {
    if (device_pool_ != nullptr && device_pool_->Owns(handle)) {
      *response.add_statuses() = ToProto(device_pool_->Abort(handle));
      continue;
    }
    absl::StatusOr<storage::WriteReservation> reservation = TakeReservation(handle);
    holds_.erase(handle);
    if (streams_.has_value()) streams_->Settled(handle, absl::AbortedError("aborted"), 0);
    if (reservation.ok()) host_tier_->Abort(std::move(*reservation));
    *response.add_statuses() = ToProto(reservation.status());
  }
  return absl::OkStatus();
}

absl::Status EngineSession::Release(const v1::HandlesRequest& request,
                                    v1::HandlesResponse& response) {
  if (absl::Status s = CheckBatch(request.handles_size()); !s.ok()) return s;
  for (uint64_t handle : request.handles()) {
    if (device_pool_ != nullptr && device_pool_->Owns(handle)) {
      *response.add_statuses() = ToProto(device_pool_->Release(handle));
      continue;
    }
    auto it = leases_.find(handle);
    if (it == leases_.end()) {
      *response.add_statuses() = ToProto(absl::InvalidArgumentError(
          fmt::format("handle {} is not an open lease of this session", handle)));
      continue;
    }
    // An expired lease no longer protected the bytes: what the engine read may be wrong.
    const bool expired = it->second.expired();
    leases_.erase(it);
    *response.add_statuses() =
        ToProto(expired ? absl::AbortedError(fmt::format(
                              "lease {} expired before release; treat the load as failed", handle))
                        : absl::OkStatus());
  }
  return absl::OkStatus();
}

}  // namespace strata::daemon

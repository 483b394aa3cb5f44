#include "daemon/control_service.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "control/bearer_auth.h"
#include "control/lookup_request_decoder.h"
#include "control/unary_reactor.h"
#include "daemon/chunk_listing.h"
#include "daemon/metrics.h"
#include "daemon/tier_proto.h"
#include "daemon/watch_events_reactor.h"
#include "fmt/format.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "proto/convert.h"
#include "storage/codec/codec_registry.h"
#include "storage/tiered/chunk_codec.h"

namespace strata::daemon {
namespace {

// `tally`'s lookups and tokens into a StatsResponse or a LookupTotals.
template <typename Message>
void SetTotals(const LookupTally& tally, Message& out) {
  out.set_lookups(tally.lookups);
  out.set_hit_tokens(tally.hit_tokens_total());
  out.set_miss_tokens(tally.miss_tokens);
}

enum class Unspecified { kHost, kEvery, kInvalid };

// OK when `tier` is one `store` has (TIER_UNSPECIFIED as `unspecified` says); FAILED_PRECONDITION
// naming a tier that is not configured; INVALID_ARGUMENT for unknown values.
absl::Status CheckTier(v1::Tier tier, Unspecified unspecified, const storage::TieredStore& store) {
  if (tier == v1::TIER_UNSPECIFIED) {
    if (unspecified != Unspecified::kInvalid) return absl::OkStatus();
    return absl::InvalidArgumentError("a tier is required");
  }
  const std::optional<storage::Tier> known = StoreTier(tier);
  if (!known.has_value()) {
    return absl::InvalidArgumentError(fmt::format("unknown tier value {}", static_cast<int>(tier)));
  }
  if (!store.has(*known)) {
    return absl::FailedPreconditionError(
        fmt::format("{} tier not configured", storage::TierName(*known)));
  }
  return absl::OkStatus();
}

// Whether `selector` names chunks (tokens or keys), not at most a layout.
bool NamesChunks(const v1::ChunkSelector& selector) {
  return selector.tokens_size() > 0 || selector.keys_size() > 0;
}

// A tier below the host tier named for what only the host tier records (pins, tenants).
bool NamesLowerTier(v1::Tier tier) { return tier != v1::TIER_UNSPECIFIED && tier != v1::TIER_HOST; }

// Pins live in the host tier only.
absl::Status CheckPinTier(v1::Tier tier, const storage::TieredStore& store) {
  if (absl::Status s = CheckTier(tier, Unspecified::kHost, store); !s.ok()) return s;
  if (NamesLowerTier(tier)) {
    return absl::FailedPreconditionError("pins apply to the host tier only");
  }
  return absl::OkStatus();
}

absl::StatusOr<storage::PinKind> PinKindFromProto(v1::PinKind kind) {
  switch (kind) {
    case v1::PIN_KIND_HARD:
      return storage::PinKind::kHard;
    case v1::PIN_KIND_SOFT:
      return storage::PinKind::kSoft;
    default:
      return absl::InvalidArgumentError(fmt::format(
          "pin kind must be PIN_KIND_HARD or PIN_KIND_SOFT, not {}", static_cast<int>(kind)));
  }
}

}  // namespace

ControlService::ControlService(ControlServiceOptions options)
    : options_(std::move(options)), started_(SystemClock::Get()->Now()) {
  SetMessageAllocatorFor_ListChunks(&list_allocator_);
  if (options_.registry == nullptr) return;
  lookup_latency_ = &prometheus::BuildHistogram()
                         .Name("strata_lookup_duration_seconds")
                         .Help("Time to answer a control API Lookup call.")
                         .Register(*options_.registry)
                         .Add({}, LatencyBuckets());
}

absl::Status ControlService::Authorize(const grpc::CallbackServerContext& context) const {
  return control::CheckBearerToken(context, options_.bearer_token, "daemon");
}

absl::StatusOr<control::ResolvedChunks> ControlService::Resolve(
    const v1::ChunkSelector& selector) const {
  return control::ResolveSelector(selector, options_.key_options, options_.limits);
}

grpc::ServerUnaryReactor* ControlService::Lookup(grpc::CallbackServerContext* context,
                                                 const grpc::ByteBuffer* request,
                                                 grpc::ByteBuffer* response) {
  if (absl::Status s = Authorize(*context); !s.ok()) return control::FinishUnary(context, s);
  const auto started = std::chrono::steady_clock::now();
  absl::Status status;
  v1::LookupRequest fields;
  std::vector<ChunkKey> keys;
  std::vector<uint32_t> tokens;
  status = control::DecodeLookupRequest(*request, options_.limits, fields, keys, tokens);
  v1::LookupResponse answer;
  if (status.ok()) status = DoLookup(fields, std::move(keys), tokens, answer);
  if (status.ok()) {
    bool own_buffer = false;
    const grpc::Status serialized =
        grpc::SerializationTraits<v1::LookupResponse>::Serialize(answer, response, &own_buffer);
    if (!serialized.ok()) status = FromGrpcStatus(serialized);
  }
  if (lookup_latency_ != nullptr) {
    lookup_latency_->Observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }
  return control::FinishUnary(context, status);
}

absl::Status ControlService::DoLookup(const v1::LookupRequest& request, std::vector<ChunkKey> keys,
                                      std::span<const uint32_t> tokens,
                                      v1::LookupResponse& response) {
  absl::StatusOr<control::ResolvedChunks> chunks = control::ResolveChunks(
      request.has_layout() ? &request.layout() : nullptr, tokens,
      {.tenant_salt = request.tenant_salt(), .lora_name = request.lora_name()}, std::move(keys),
      options_.key_options, options_.limits);
  if (!chunks.ok()) return chunks.status();
  const std::vector<storage::Tier> tiers = options_.store->LocatePrefix(chunks->keys);
  const size_t hits = tiers.size();
  response.mutable_chunk_tiers()->Reserve(static_cast<int>(hits));
  uint64_t matched_tokens = 0;
  for (size_t i = 0; i < hits; ++i) {
    const v1::Tier tier = ToProto(tiers[i]);
    response.add_chunk_tiers(tier);
    if (request.with_keys()) {
      v1::ChunkHit* hit = response.add_hits();
      ToProto(chunks->keys[i], hit->mutable_key());
      hit->set_tier(tier);
    }
    if (chunks->by_tokens) matched_tokens += chunks->chunk_tokens[i];
  }
  response.set_matched_chunks(static_cast<uint32_t>(hits));
  response.set_total_chunks(static_cast<uint32_t>(chunks->keys.size()));
  response.set_matched_tokens(matched_tokens);
  if (options_.lookups != nullptr) {
    // A lookup by keys counts, with no tokens (it names none).
    const auto hit = HitTokensByTier(tiers, [&](size_t i) -> uint64_t {
      return chunks->by_tokens ? chunks->chunk_tokens[i] : 0;
    });
    const uint64_t miss =
        chunks->by_tokens ? static_cast<uint64_t>(tokens.size()) - matched_tokens : 0;
    options_.lookups->Record(LookupSource::kControl, request.tenant_salt(), hit, miss);
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ControlService::Pin(grpc::CallbackServerContext* context,
                                              const v1::PinRequest* request,
                                              v1::PinResponse* response) {
  if (absl::Status s = Authorize(*context); !s.ok()) return control::FinishUnary(context, s);
  return control::FinishUnary(context, DoPin(*request, *response));
}

absl::Status ControlService::DoPin(const v1::PinRequest& request, v1::PinResponse& response) {
  absl::StatusOr<control::ResolvedChunks> chunks = Resolve(request.selector());
  if (!chunks.ok()) return chunks.status();
  absl::StatusOr<storage::PinKind> kind = PinKindFromProto(request.kind());
  if (!kind.ok()) return kind.status();
  if (*kind == storage::PinKind::kSoft && request.ttl_ms() == 0) {
    return absl::InvalidArgumentError("a soft pin needs ttl_ms > 0");
  }
  if (absl::Status s = CheckPinTier(request.tier(), *options_.store); !s.ok()) return s;
  absl::StatusOr<storage::PinResult> pinned = options_.store->host().PinChunks(
      chunks->keys, {.kind = *kind, .ttl = std::chrono::milliseconds(request.ttl_ms())});
  if (!pinned.ok()) return pinned.status();
  response.set_pinned_chunks(pinned->chunks);
  response.set_pinned_bytes(pinned->bytes);
  response.set_missing_chunks(pinned->missing);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ControlService::Unpin(grpc::CallbackServerContext* context,
                                                const v1::UnpinRequest* request,
                                                v1::UnpinResponse* response) {
  if (absl::Status s = Authorize(*context); !s.ok()) return control::FinishUnary(context, s);
  return control::FinishUnary(context, DoUnpin(*request, *response));
}

absl::Status ControlService::DoUnpin(const v1::UnpinRequest& request, v1::UnpinResponse& response) {
  absl::StatusOr<control::ResolvedChunks> chunks = Resolve(request.selector());
  if (!chunks.ok()) return chunks.status();
  absl::StatusOr<storage::PinKind> kind = PinKindFromProto(request.kind());
  if (!kind.ok()) return kind.status();
  if (absl::Status s = CheckPinTier(request.tier(), *options_.store); !s.ok()) return s;
  absl::StatusOr<storage::PinResult> unpinned =
      options_.store->host().UnpinChunks(chunks->keys, *kind);
  if (!unpinned.ok()) return unpinned.status();
  response.set_unpinned_chunks(unpinned->chunks);
  response.set_missing_chunks(unpinned->missing);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ControlService::Move(grpc::CallbackServerContext* context,
                                               const v1::MoveRequest* request,
                                               v1::MoveResponse* response) {
  if (absl::Status s = Authorize(*context); !s.ok()) return control::FinishUnary(context, s);
  return FinishFromStore(context,
                         [this, request, response] { return DoMove(*request, *response); });
}

absl::Status ControlService::DoMove(const v1::MoveRequest& request, v1::MoveResponse& response) {
  absl::StatusOr<control::ResolvedChunks> chunks = Resolve(request.selector());
  if (!chunks.ok()) return chunks.status();
  if (!request.target_instance().empty()) return DoMoveToPeer(request, chunks->keys, response);
  if (absl::Status s = CheckTier(request.target(), Unspecified::kInvalid, *options_.store);
      !s.ok()) {
    return s;
  }
  std::optional<KvLayout> layout;
  if (request.selector().has_layout()) {
    absl::StatusOr<KvLayout> parsed = FromProto(request.selector().layout());
    if (!parsed.ok()) return parsed.status();
    layout = *parsed;
  }
  absl::StatusOr<storage::MoveResult> moved = options_.store->Move(
      chunks->keys, *StoreTier(request.target()), layout.has_value() ? &*layout : nullptr);
  if (!moved.ok()) return moved.status();
  response.set_moved_chunks(moved->moved_chunks);
  response.set_already_in_target(moved->already_in_target);
  response.set_missing_chunks(moved->missing_chunks);
  return absl::OkStatus();
}

absl::Status ControlService::DoMoveToPeer(const v1::MoveRequest& request,
                                          std::span<const ChunkKey> keys,
                                          v1::MoveResponse& response) {
  if (options_.remote == nullptr) {
    return absl::FailedPreconditionError(
        "Move to another instance needs the remote tier ([remote] listen_address)");
  }
  if (request.target() != v1::TIER_HOST && request.target() != v1::TIER_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        "Move to another instance lands in its host tier: target TIER_HOST or none");
  }
  if (!request.selector().has_layout()) {
    return absl::InvalidArgumentError("Move to another instance needs the selector's layout");
  }
  absl::StatusOr<KvLayout> layout = FromProto(request.selector().layout());
  if (!layout.ok()) return layout.status();
  absl::StatusOr<storage::MoveResult> pushed =
      options_.remote->Push(request.target_instance(), *layout, keys);
  if (!pushed.ok()) return pushed.status();
  response.set_moved_chunks(pushed->moved_chunks);
  response.set_already_in_target(pushed->already_in_target);
  response.set_missing_chunks(pushed->missing_chunks);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ControlService::Clear(grpc::CallbackServerContext* context,
                                                const v1::ClearRequest* request,
                                                v1::ClearResponse* response) {
  if (absl::Status s = Authorize(*context); !s.ok()) return control::FinishUnary(context, s);
  return FinishFromStore(context,
                         [this, request, response] { return DoClear(*request, *response); });
}

absl::Status ControlService::DoClear(const v1::ClearRequest& request, v1::ClearResponse& response) {
  const bool by_selector = NamesChunks(request.selector());
  const int forms =
      int{by_selector} + int{request.has_layout()} + int{request.all()} + int{request.has_tenant()};
  if (forms != 1) {
    return absl::InvalidArgumentError(
        "Clear needs exactly one of: a selector (tokens with a layout, or keys), a layout, a "
        "tenant, all");
  }
  if (absl::Status s = CheckTier(request.tier(), Unspecified::kEvery, *options_.store); !s.ok()) {
    return s;
  }
  // Which chunks go: the selector's keys, a tenant's, a layout's, or every chunk.
  storage::ClearSelection selection;
  if (by_selector) {
    absl::StatusOr<control::ResolvedChunks> chunks = Resolve(request.selector());
    if (!chunks.ok()) return chunks.status();
    selection.keys.emplace(chunks->keys.begin(), chunks->keys.end());
  } else if (request.has_tenant()) {
    absl::StatusOr<std::vector<ChunkKey>> keys =
        options_.store->TenantKeys(request.tenant(), StoreTier(request.tier()));
    if (!keys.ok()) return keys.status();
    selection.keys.emplace(keys->begin(), keys->end());
  } else if (request.has_layout()) {
    absl::StatusOr<KvLayout> layout = FromProto(request.layout());
    if (!layout.ok()) return layout.status();
    selection.layout_fingerprint = layout->Fingerprint();
  }
  absl::StatusOr<storage::RemoveResult> removed =
      options_.store->Clear(selection, StoreTier(request.tier()));
  if (!removed.ok()) return removed.status();
  response.set_removed_chunks(removed->chunks);
  response.set_removed_bytes(removed->bytes);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ControlService::Compress(grpc::CallbackServerContext* context,
                                                   const v1::CompressRequest* request,
                                                   v1::CompressResponse* response) {
  if (absl::Status s = Authorize(*context); !s.ok()) return control::FinishUnary(context, s);
  return FinishFromStore(context,
                         [this, request, response] { return DoCompress(*request, *response); });
}

absl::Status ControlService::DoCompress(const v1::CompressRequest& request,
                                        v1::CompressResponse& response) {
  absl::StatusOr<const storage::Codec*> codec = storage::CodecRegistry::Find(request.codec());
  if (!codec.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("Compress: {}", std::string(codec.status().message())));
  }
  if ((*codec)->drops_tokens() && request.tier() != v1::TIER_HOST) {
    return absl::FailedPreconditionError(fmt::format(
        "Compress: codec {} drops tokens, and only the host tier keeps thinned chunks (the device "
        "pool serves their kept blocks)",
        (*codec)->name()));
  }
  absl::StatusOr<storage::RecodeTotals> totals =
      Recode(request.selector(), request.has_tenant() ? &request.tenant() : nullptr, request.tier(),
             {.codec = *codec,
              .params = {.group_size = request.params().group_size(),
                         .bits = request.params().bits(),
                         .energy = request.params().energy(),
                         .sink_tokens = request.params().sink_tokens(),
                         .recent_tokens = request.params().recent_tokens(),
                         .heavy_tokens = request.params().heavy_tokens()}});
  if (!totals.ok()) return totals.status();
  response.set_compressed_chunks(totals->recoded);
  response.set_already_compressed(totals->already_in_form);
  response.set_missing_chunks(totals->missing);
  response.set_not_smaller_chunks(totals->not_smaller);
  response.set_unknown_layout_chunks(totals->no_layout);
  response.set_stored_bytes_before(totals->stored_bytes_before);
  response.set_stored_bytes_after(totals->stored_bytes_after);
  response.set_max_relative_error(totals->max_error.relative_frobenius);
  response.set_max_abs_error(totals->max_error.max_abs);
  response.set_error_bound(std::string((*codec)->error_bound()));
  response.set_busy_chunks(totals->busy);
  response.set_no_importance_chunks(totals->no_importance);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ControlService::Decompress(grpc::CallbackServerContext* context,
                                                     const v1::DecompressRequest* request,
                                                     v1::DecompressResponse* response) {
  if (absl::Status s = Authorize(*context); !s.ok()) return control::FinishUnary(context, s);
  return FinishFromStore(context,
                         [this, request, response] { return DoDecompress(*request, *response); });
}

absl::Status ControlService::DoDecompress(const v1::DecompressRequest& request,
                                          v1::DecompressResponse& response) {
  absl::StatusOr<storage::RecodeTotals> totals =
      Recode(request.selector(), request.has_tenant() ? &request.tenant() : nullptr, request.tier(),
             {.codec = nullptr});
  if (!totals.ok()) return totals.status();
  response.set_decompressed_chunks(totals->recoded);
  response.set_not_compressed(totals->already_in_form);
  response.set_missing_chunks(totals->missing);
  response.set_busy_chunks(totals->busy);
  response.set_stored_bytes_before(totals->stored_bytes_before);
  response.set_stored_bytes_after(totals->stored_bytes_after);
  return absl::OkStatus();
}

absl::StatusOr<storage::RecodeTotals> ControlService::Recode(
    const v1::ChunkSelector& selector, const std::string* tenant, v1::Tier tier,
    storage::LowerTier::Recoding recoding) {
  if (NamesChunks(selector) == (tenant != nullptr)) {
    return absl::InvalidArgumentError(
        "Compress and Decompress need exactly one of: a selector (tokens with a layout, or "
        "keys), a tenant");
  }
  if (tier == v1::TIER_UNSPECIFIED) tier = v1::TIER_DISK;
  if (absl::Status s = CheckTier(tier, Unspecified::kInvalid, *options_.store); !s.ok()) return s;
  std::vector<ChunkKey> keys;
  if (tenant != nullptr) {
    absl::StatusOr<std::vector<ChunkKey>> stored =
        options_.store->TenantKeys(*tenant, StoreTier(tier));
    if (!stored.ok()) return stored.status();
    keys = *std::move(stored);
  } else {
    absl::StatusOr<control::ResolvedChunks> chunks = Resolve(selector);
    if (!chunks.ok()) return chunks.status();
    keys = std::move(chunks->keys);
  }
  std::optional<KvLayout> layout;
  if (selector.has_layout()) {
    absl::StatusOr<KvLayout> parsed = FromProto(selector.layout());
    if (!parsed.ok()) return parsed.status();
    layout = *parsed;
    recoding.layout = &*layout;
  }
  return options_.store->Recode(keys, *StoreTier(tier), recoding);
}

grpc::ServerUnaryReactor* ControlService::Health(grpc::CallbackServerContext* context,
                                                 const v1::HealthRequest*,
                                                 v1::HealthResponse* response) {
  if (absl::Status s = Authorize(*context); !s.ok()) return control::FinishUnary(context, s);
  response->set_status(draining_ ? v1::HealthResponse::SERVING_STATUS_DRAINING
                                 : v1::HealthResponse::SERVING_STATUS_SERVING);
  response->set_version(STRATA_VERSION);
  response->set_uptime_seconds(static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::seconds>(SystemClock::Get()->Now() - started_)
          .count()));
  return control::FinishUnary(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* ControlService::ListPeers(grpc::CallbackServerContext* context,
                                                    const v1::ListPeersRequest*,
                                                    v1::ListPeersResponse* response) {
  if (absl::Status s = Authorize(*context); !s.ok()) return control::FinishUnary(context, s);
  if (options_.remote == nullptr) return control::FinishUnary(context, absl::OkStatus());
  response->set_remote_enabled(true);
  response->set_node_id(options_.remote->node_id());
  response->set_listen_address(options_.remote->listen_address());
  for (const storage::remote::PeerInfo& info : options_.remote->Peers()) {
    v1::Peer* peer = response->add_peers();
    peer->set_address(info.address);
    peer->set_node_id(info.node_id);
    peer->set_outbound(info.outbound);
    switch (info.state) {
      case storage::remote::PeerState::kDialling:
        peer->set_state(v1::Peer::STATE_DIALLING);
        break;
      case storage::remote::PeerState::kHandshaking:
        peer->set_state(v1::Peer::STATE_HANDSHAKING);
        break;
      case storage::remote::PeerState::kUp:
        peer->set_state(v1::Peer::STATE_UP);
        break;
      case storage::remote::PeerState::kDown:
        peer->set_state(v1::Peer::STATE_DOWN);
        break;
    }
    peer->set_bytes_read(info.bytes_read);
    peer->set_bytes_served(info.bytes_served);
    peer->set_last_error(info.last_error);
    peer->set_streams_in(info.streams_in);
    peer->set_streams_out(info.streams_out);
    for (uint64_t layout : info.layouts) peer->add_layouts(layout);
  }
  return control::FinishUnary(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* ControlService::Stats(grpc::CallbackServerContext* context,
                                                const v1::StatsRequest*,
                                                v1::StatsResponse* response) {
  if (absl::Status s = Authorize(*context); !s.ok()) return control::FinishUnary(context, s);
  const storage::TieredStoreStats stats = options_.store->Stats();
  const storage::HostTierStats& host = stats.host;
  v1::TierStats* tier = response->add_tiers();
  tier->set_tier(v1::TIER_HOST);
  tier->set_capacity_bytes(host.capacity_bytes);
  tier->set_used_bytes(host.used_bytes);
  // payload_bytes as the chunks decode; stored_bytes as the tier holds them.
  tier->set_payload_bytes(host.payload_bytes - host.encoded_bytes + host.encoded_decoded_bytes);
  tier->set_stored_bytes(host.payload_bytes);
  tier->set_encoded_chunks(host.encoded_chunks);
  tier->set_chunks(host.chunks);
  tier->set_pinned_bytes(host.hard_pinned_bytes + host.soft_pinned_bytes);
  tier->set_reserved_bytes(host.reserved_bytes);
  tier->set_leases(host.active_leases);
  tier->set_hits(host.hits);
  tier->set_misses(host.misses);
  tier->set_evictions(host.evictions);
  tier->set_checksum_failures(host.checksum_failures);
  tier->set_io_errors(0);
  for (const storage::LowerTierStats& lower : stats.lower) {
    v1::TierStats* below = response->add_tiers();
    below->set_tier(ToProto(lower.tier));
    below->set_capacity_bytes(lower.capacity_bytes);
    below->set_used_bytes(lower.used_bytes);
    below->set_payload_bytes(lower.payload_bytes);
    below->set_stored_bytes(lower.stored_bytes);
    below->set_encoded_chunks(lower.encoded_chunks);
    below->set_chunks(lower.chunks);
    below->set_hits(stats.movement.load_promoted_from[static_cast<size_t>(lower.tier)]);
    below->set_evictions(lower.evictions);
    below->set_checksum_failures(lower.checksum_failures);
    below->set_io_errors(lower.io_errors);
  }
  if (options_.sessions != nullptr) {
    response->set_sessions(options_.sessions->Stats().active_sessions);
  }
  if (options_.lookups != nullptr) {
    // The node's figures are the engines': what prefill they skipped.
    const LookupTally engines = options_.lookups->Total(LookupSource::kEngine);
    const uint64_t looked_up = engines.hit_tokens_total() + engines.miss_tokens;
    for (v1::TierStats& tier_stats : *response->mutable_tiers()) {
      const uint64_t hit = engines.hit_tokens[static_cast<size_t>(*StoreTier(tier_stats.tier()))];
      tier_stats.set_hit_tokens(hit);
      tier_stats.set_miss_tokens(looked_up - hit);
    }
    SetTotals(engines, *response);
    const LookupTally control = options_.lookups->Total(LookupSource::kControl);
    SetTotals(control, *response->mutable_control_lookups());
    for (const auto& [name, tally] : options_.lookups->ByTenant(LookupSource::kEngine)) {
      v1::TenantLookups* tenant = response->add_tenants();
      tenant->set_tenant(name);
      SetTotals(tally, *tenant->mutable_totals());
    }
  }
  return control::FinishUnary(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* ControlService::ListChunks(grpc::CallbackServerContext* context,
                                                     const v1::ListChunksRequest* request,
                                                     v1::ListChunksResponse* response) {
  if (absl::Status s = Authorize(*context); !s.ok()) return control::FinishUnary(context, s);
  if (NamesLowerTier(request->tier())) {  // the tier's index may be read from disk
    return FinishFromStore(context,
                           [this, request, response] { return DoListChunks(*request, *response); });
  }
  return control::FinishUnary(context, DoListChunks(*request, *response));
}

absl::Status ControlService::DoListChunks(const v1::ListChunksRequest& request,
                                          v1::ListChunksResponse& response) {
  if (request.page_size() > kMaxPageSize) {
    return absl::InvalidArgumentError(
        fmt::format("page_size {}; the limit is {}", request.page_size(), kMaxPageSize));
  }
  if (absl::Status s = CheckTier(request.tier(), Unspecified::kEvery, *options_.store); !s.ok()) {
    return s;
  }
  const uint32_t limit = request.page_size() == 0 ? kDefaultPageSize : request.page_size();
  if (NamesLowerTier(request.tier())) {
    const storage::Tier tier = *StoreTier(request.tier());
    absl::StatusOr<std::optional<ChunkKey>> after = ParseLowerTierPageToken(request.page_token());
    if (!after.ok()) return after.status();
    storage::LowerTier::ListOptions page_options{
        .after = *after, .limit = limit, .layout_fingerprint = request.layout_fingerprint()};
    if (request.has_tenant()) page_options.tenant = request.tenant();
    absl::StatusOr<storage::LowerTier::ListPage> page =
        options_.store->ListBelowHost(tier, page_options);
    if (!page.ok()) return page.status();
    AppendRows(
        page->chunks.size(),
        [&](size_t i) {
          const storage::LowerTier::ListedChunk& chunk = page->chunks[i];
          return ListedRow{
              .key = &chunk.key,
              .tier = request.tier(),
              .size_bytes = chunk.info.payload_bytes,
              .num_tokens = chunk.info.num_tokens,
              .stored_bytes = chunk.info.stored_bytes,
              .codec_id = static_cast<uint16_t>(chunk.info.codec.value_or(storage::CodecId{0})),
              .error = chunk.info.error};
        },
        request.columnar(), response);
    response.set_next_page_token(LowerTierPageToken(page->resume_after));
    return absl::OkStatus();
  }
  absl::StatusOr<uint64_t> cursor = ParseHostPageToken(request.page_token());
  if (!cursor.ok()) return cursor.status();
  storage::ListChunksOptions options{.cursor = *cursor, .limit = limit};
  if (request.layout_fingerprint() != 0) options.layout_fingerprint = request.layout_fingerprint();
  if (request.has_tenant()) options.tenant = request.tenant();
  const storage::ChunkPage page = options_.store->host().ListChunks(options);
  const MonoTime now = options_.store->host().options().clock->Now();
  AppendRows(
      page.chunks.size(),
      [&](size_t i) {
        const storage::ChunkInfo& info = page.chunks[i];
        const uint64_t soft_pin_remaining_ms =
            info.soft_pin_deadline <= now
                ? 0
                : static_cast<uint64_t>(
                      std::chrono::ceil<std::chrono::milliseconds>(info.soft_pin_deadline - now)
                          .count());
        const bool encoded = info.encoding.encoded();
        return ListedRow{.key = &info.key,
                         .tier = v1::TIER_HOST,
                         .size_bytes = encoded ? info.encoding.decoded_bytes : info.size_bytes,
                         .num_tokens = info.num_tokens,
                         .hard_pinned = info.hard_pinned,
                         .soft_pin_remaining_ms = soft_pin_remaining_ms,
                         .leases = info.leases,
                         .stored_bytes = info.size_bytes,
                         .codec_id = info.encoding.codec,
                         .error = storage::KeptError(info.encoding)};
      },
      request.columnar(), response);
  response.set_next_page_token(HostPageToken(page.next_cursor));
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ControlService::Drain(grpc::CallbackServerContext* context,
                                                const v1::DrainRequest*,
                                                v1::DrainResponse* response) {
  if (absl::Status s = Authorize(*context); !s.ok()) return control::FinishUnary(context, s);
  options_.store->host().StopAdmitting();
  SetDraining();
  const storage::HostTierStats host = options_.store->host().Stats();
  response->set_resident_chunks(host.chunks);
  response->set_resident_bytes(host.payload_bytes);
  response->set_open_reservations(host.reservations);
  response->set_flushed_chunks(0);
  // Flush: every host chunk gets a copy below, so a restart finds it.
  return FinishFromStore(context, [this, response]() -> absl::Status {
    absl::StatusOr<uint64_t> flushed = options_.store->FlushToLowerTiers();
    if (!flushed.ok()) return flushed.status();
    response->set_flushed_chunks(*flushed);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* ControlService::FinishFromStore(
    grpc::CallbackServerContext* context, absl::AnyInvocable<absl::Status() &&> work) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!options_.store->has_lower_tiers()) {  // in memory: answered inline
    reactor->Finish(ToGrpcStatus(std::move(work)()));
    return reactor;
  }
  const bool accepted = options_.store->Submit([reactor, work = std::move(work)]() mutable {
    reactor->Finish(ToGrpcStatus(std::move(work)()));
  });
  if (!accepted) reactor->Finish(ToGrpcStatus(absl::UnavailableError("the daemon is stopping")));
  return reactor;
}

grpc::ServerWriteReactor<v1::WatchEventsResponse>* ControlService::WatchEvents(
    grpc::CallbackServerContext* context, const v1::WatchEventsRequest* request) {
  if (absl::Status s = Authorize(*context); !s.ok()) {
    return new control::RefusedStream<v1::WatchEventsResponse>(s);
  }
  return new WatchEventsReactor(options_.events, request->from_sequence());
}

}  // namespace strata::daemon

#include "daemon/control_service.h"

#include <charconv>
#include <string>
#include <vector>

#include "daemon/metrics.h"
#include "daemon/watch_events_reactor.h"
#include "fmt/format.h"
#include "openssl/crypto.h"
#include "proto/convert.h"

namespace strata::daemon {
namespace {

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// A WatchEvents call refused before it started.
class RefusedStream final : public grpc::ServerWriteReactor<v1::WatchEventsResponse> {
 public:
  explicit RefusedStream(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

enum class Unspecified { kHost, kEvery, kInvalid };

// OK when `tier` is one this daemon has (the host tier; TIER_UNSPECIFIED as `unspecified`
// says); FAILED_PRECONDITION naming a tier that is not configured; INVALID_ARGUMENT for unknown
// values.
absl::Status CheckTier(v1::Tier tier, Unspecified unspecified) {
  switch (tier) {
    case v1::TIER_HOST:
      return absl::OkStatus();
    case v1::TIER_UNSPECIFIED:
      if (unspecified != Unspecified::kInvalid) return absl::OkStatus();
      return absl::InvalidArgumentError("a tier is required");
    case v1::TIER_DEVICE:
      return absl::FailedPreconditionError("device tier not configured");
    case v1::TIER_DISK:
      return absl::FailedPreconditionError("disk tier not configured");
    case v1::TIER_REMOTE:
      return absl::FailedPreconditionError("remote tier not configured");
    default:
      return absl::InvalidArgumentError(
          fmt::format("unknown tier value {}", static_cast<int>(tier)));
  }
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

constexpr char kPageTokenPrefix = 'h';  // a host tier cursor

std::string PageToken(uint64_t cursor) {
  return cursor == 0 ? std::string() : fmt::format("{}{}", kPageTokenPrefix, cursor);
}

absl::StatusOr<uint64_t> ParsePageToken(const std::string& token) {
  if (token.empty()) return 0;
  uint64_t cursor = 0;
  const char* end = token.data() + token.size();
  if (token[0] == kPageTokenPrefix) {
    auto [ptr, ec] = std::from_chars(token.data() + 1, end, cursor);
    if (ec == std::errc() && ptr == end && cursor != 0) return cursor;
  }
  return absl::InvalidArgumentError(
      fmt::format("page token '{}' was not produced by this daemon", token));
}

}  // namespace

ControlService::ControlService(ControlServiceOptions options)
    : options_(std::move(options)), started_(SystemClock::Get()->Now()) {
  if (options_.registry == nullptr) return;
  lookup_latency_ = &prometheus::BuildHistogram()
                         .Name("strata_lookup_duration_seconds")
                         .Help("Time to answer a control API Lookup call.")
                         .Register(*options_.registry)
                         .Add({}, LatencyBuckets());
}

absl::Status ControlService::Authorize(const grpc::CallbackServerContext& context) const {
  if (options_.bearer_token.empty() || context.peer().rfind("unix:", 0) == 0) {
    return absl::OkStatus();
  }
  const std::string expected = "Bearer " + options_.bearer_token;
  const auto& metadata = context.client_metadata();
  for (auto [it, end] = metadata.equal_range("authorization"); it != end; ++it) {
    const grpc::string_ref& value = it->second;
    // Compared in full whatever the content, so the time says nothing about the token.
    if (value.size() == expected.size() &&
        CRYPTO_memcmp(value.data(), expected.data(), expected.size()) == 0) {
      return absl::OkStatus();
    }
  }
  return absl::UnauthenticatedError(
      "this daemon requires a bearer token over TCP (authorization: Bearer <token>)");
}

absl::StatusOr<ResolvedChunks> ControlService::Resolve(const v1::ChunkSelector& selector) const {
  return ResolveSelector(selector, options_.key_options, options_.limits);
}

grpc::ServerUnaryReactor* ControlService::Lookup(grpc::CallbackServerContext* context,
                                                 const v1::LookupRequest* request,
                                                 v1::LookupResponse* response) {
  if (absl::Status s = Authorize(*context); !s.ok()) return Finish(context, s);
  const auto started = std::chrono::steady_clock::now();
  const absl::Status status = DoLookup(*request, *response);
  if (lookup_latency_ != nullptr) {
    lookup_latency_->Observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }
  return Finish(context, status);
}

absl::Status ControlService::DoLookup(const v1::LookupRequest& request,
                                      v1::LookupResponse& response) {
  absl::StatusOr<ResolvedChunks> chunks =
      ResolveChunks(request.has_layout() ? &request.layout() : nullptr,
                    {request.tokens().data(), static_cast<size_t>(request.tokens_size())},
                    {.tenant_salt = request.tenant_salt(), .lora_name = request.lora_name()},
                    request.keys(), options_.key_options, options_.limits);
  if (!chunks.ok()) return chunks.status();
  const size_t hits = options_.host_tier->Lookup(chunks->keys);
  uint64_t matched_tokens = 0;
  for (size_t i = 0; i < hits; ++i) {
    response.add_chunk_tiers(v1::TIER_HOST);
    if (request.with_keys()) {
      v1::ChunkHit* hit = response.add_hits();
      *hit->mutable_key() = ToProto(chunks->keys[i]);
      hit->set_tier(v1::TIER_HOST);
    }
    if (chunks->by_tokens) matched_tokens += chunks->chunk_tokens[i];
  }
  response.set_matched_chunks(static_cast<uint32_t>(hits));
  response.set_total_chunks(static_cast<uint32_t>(chunks->keys.size()));
  response.set_matched_tokens(matched_tokens);
  ++lookups_;
  if (chunks->by_tokens) {
    hit_tokens_ += matched_tokens;
    miss_tokens_ += static_cast<uint64_t>(request.tokens_size()) - matched_tokens;
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ControlService::Pin(grpc::CallbackServerContext* context,
                                              const v1::PinRequest* request,
                                              v1::PinResponse* response) {
  if (absl::Status s = Authorize(*context); !s.ok()) return Finish(context, s);
  return Finish(context, DoPin(*request, *response));
}

absl::Status ControlService::DoPin(const v1::PinRequest& request, v1::PinResponse& response) {
  absl::StatusOr<ResolvedChunks> chunks = Resolve(request.selector());
  if (!chunks.ok()) return chunks.status();
  absl::StatusOr<storage::PinKind> kind = PinKindFromProto(request.kind());
  if (!kind.ok()) return kind.status();
  if (*kind == storage::PinKind::kSoft && request.ttl_ms() == 0) {
    return absl::InvalidArgumentError("a soft pin needs ttl_ms > 0");
  }
  if (absl::Status s = CheckTier(request.tier(), Unspecified::kHost); !s.ok()) return s;
  absl::StatusOr<storage::PinResult> pinned = options_.host_tier->PinChunks(
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
  if (absl::Status s = Authorize(*context); !s.ok()) return Finish(context, s);
  return Finish(context, DoUnpin(*request, *response));
}

absl::Status ControlService::DoUnpin(const v1::UnpinRequest& request, v1::UnpinResponse& response) {
  absl::StatusOr<ResolvedChunks> chunks = Resolve(request.selector());
  if (!chunks.ok()) return chunks.status();
  absl::StatusOr<storage::PinKind> kind = PinKindFromProto(request.kind());
  if (!kind.ok()) return kind.status();
  if (absl::Status s = CheckTier(request.tier(), Unspecified::kHost); !s.ok()) return s;
  absl::StatusOr<storage::PinResult> unpinned =
      options_.host_tier->UnpinChunks(chunks->keys, *kind);
  if (!unpinned.ok()) return unpinned.status();
  response.set_unpinned_chunks(unpinned->chunks);
  response.set_missing_chunks(unpinned->missing);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ControlService::Move(grpc::CallbackServerContext* context,
                                               const v1::MoveRequest* request,
                                               v1::MoveResponse* response) {
  if (absl::Status s = Authorize(*context); !s.ok()) return Finish(context, s);
  return Finish(context, DoMove(*request, *response));
}

absl::Status ControlService::DoMove(const v1::MoveRequest& request, v1::MoveResponse& response) {
  absl::StatusOr<ResolvedChunks> chunks = Resolve(request.selector());
  if (!chunks.ok()) return chunks.status();
  if (absl::Status s = CheckTier(request.target(), Unspecified::kInvalid); !s.ok()) return s;
  // The host tier is the only one: every cached chunk is in the target already.
  for (const ChunkKey& key : chunks->keys) {
    if (options_.host_tier->Contains(key)) {
      response.set_already_in_target(response.already_in_target() + 1);
    } else {
      response.set_missing_chunks(response.missing_chunks() + 1);
    }
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ControlService::Clear(grpc::CallbackServerContext* context,
                                                const v1::ClearRequest* request,
                                                v1::ClearResponse* response) {
  if (absl::Status s = Authorize(*context); !s.ok()) return Finish(context, s);
  return Finish(context, DoClear(*request, *response));
}

absl::Status ControlService::DoClear(const v1::ClearRequest& request, v1::ClearResponse& response) {
  const bool by_selector = request.has_selector() && (request.selector().tokens_size() > 0 ||
                                                      request.selector().keys_size() > 0);
  const int forms = int{by_selector} + int{request.has_layout()} + int{request.all()};
  if (forms != 1) {
    return absl::InvalidArgumentError(
        "Clear needs exactly one of: a selector (tokens with a layout, or keys), a layout, all");
  }
  storage::RemoveResult removed;
  if (by_selector) {
    absl::StatusOr<ResolvedChunks> chunks = Resolve(request.selector());
    if (!chunks.ok()) return chunks.status();
    if (absl::Status s = CheckTier(request.tier(), Unspecified::kEvery); !s.ok()) return s;
    for (const ChunkKey& key : chunks->keys) {
      absl::StatusOr<storage::RemoveResult> one = options_.host_tier->Remove(key);
      if (!one.ok()) return one.status();
      removed.chunks += one->chunks;
      removed.bytes += one->bytes;
    }
  } else if (request.has_layout()) {
    absl::StatusOr<KvLayout> layout = FromProto(request.layout());
    if (!layout.ok()) return layout.status();
    if (absl::Status s = CheckTier(request.tier(), Unspecified::kEvery); !s.ok()) return s;
    const uint64_t fingerprint = layout->Fingerprint();
    removed = options_.host_tier->RemoveIf(
        [fingerprint](const ChunkKey& key) { return key.layout_fingerprint() == fingerprint; });
  } else {
    if (absl::Status s = CheckTier(request.tier(), Unspecified::kEvery); !s.ok()) return s;
    removed = options_.host_tier->RemoveAll();
  }
  response.set_removed_chunks(removed.chunks);
  response.set_removed_bytes(removed.bytes);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ControlService::Compress(grpc::CallbackServerContext* context,
                                                   const v1::CompressRequest*,
                                                   v1::CompressResponse*) {
  if (absl::Status s = Authorize(*context); !s.ok()) return Finish(context, s);
  return Finish(context, absl::UnimplementedError(
                             "Compress: no KV codec is available yet (it arrives with the codec "
                             "issue); nothing was compressed"));
}

grpc::ServerUnaryReactor* ControlService::Decompress(grpc::CallbackServerContext* context,
                                                     const v1::DecompressRequest*,
                                                     v1::DecompressResponse*) {
  if (absl::Status s = Authorize(*context); !s.ok()) return Finish(context, s);
  return Finish(context, absl::UnimplementedError(
                             "Decompress: no KV codec is available yet (it arrives with the codec "
                             "issue); no chunk is compressed"));
}

grpc::ServerUnaryReactor* ControlService::Health(grpc::CallbackServerContext* context,
                                                 const v1::HealthRequest*,
                                                 v1::HealthResponse* response) {
  if (absl::Status s = Authorize(*context); !s.ok()) return Finish(context, s);
  response->set_status(draining_ ? v1::HealthResponse::SERVING_STATUS_DRAINING
                                 : v1::HealthResponse::SERVING_STATUS_SERVING);
  response->set_version(STRATA_VERSION);
  response->set_uptime_seconds(static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::seconds>(SystemClock::Get()->Now() - started_)
          .count()));
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* ControlService::Stats(grpc::CallbackServerContext* context,
                                                const v1::StatsRequest*,
                                                v1::StatsResponse* response) {
  if (absl::Status s = Authorize(*context); !s.ok()) return Finish(context, s);
  const storage::HostTierStats host = options_.host_tier->Stats();
  v1::TierStats* tier = response->add_tiers();
  tier->set_tier(v1::TIER_HOST);
  tier->set_capacity_bytes(host.capacity_bytes);
  tier->set_used_bytes(host.used_bytes);
  tier->set_payload_bytes(host.payload_bytes);
  tier->set_chunks(host.chunks);
  tier->set_pinned_bytes(host.hard_pinned_bytes + host.soft_pinned_bytes);
  tier->set_reserved_bytes(host.reserved_bytes);
  tier->set_leases(host.active_leases);
  tier->set_hits(host.hits);
  tier->set_misses(host.misses);
  tier->set_evictions(host.evictions);
  tier->set_checksum_failures(host.checksum_failures);
  // The host tier is the only tier: every looked-up token was found there or nowhere.
  tier->set_hit_tokens(hit_tokens_);
  tier->set_miss_tokens(miss_tokens_);
  tier->set_io_errors(0);
  if (options_.sessions != nullptr) {
    response->set_sessions(options_.sessions->Stats().active_sessions);
  }
  response->set_lookups(lookups_);
  response->set_hit_tokens(hit_tokens_);
  response->set_miss_tokens(miss_tokens_);
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* ControlService::ListChunks(grpc::CallbackServerContext* context,
                                                     const v1::ListChunksRequest* request,
                                                     v1::ListChunksResponse* response) {
  if (absl::Status s = Authorize(*context); !s.ok()) return Finish(context, s);
  return Finish(context, DoListChunks(*request, *response));
}

absl::Status ControlService::DoListChunks(const v1::ListChunksRequest& request,
                                          v1::ListChunksResponse& response) {
  if (request.page_size() > kMaxPageSize) {
    return absl::InvalidArgumentError(
        fmt::format("page_size {}; the limit is {}", request.page_size(), kMaxPageSize));
  }
  absl::StatusOr<uint64_t> cursor = ParsePageToken(request.page_token());
  if (!cursor.ok()) return cursor.status();
  if (absl::Status s = CheckTier(request.tier(), Unspecified::kEvery); !s.ok()) return s;
  storage::ListChunksOptions options{
      .cursor = *cursor,
      .limit = request.page_size() == 0 ? kDefaultPageSize : request.page_size()};
  if (request.layout_fingerprint() != 0) options.layout_fingerprint = request.layout_fingerprint();
  const storage::ChunkPage page = options_.host_tier->ListChunks(options);
  const MonoTime now = options_.host_tier->options().clock->Now();
  response.mutable_chunks()->Reserve(static_cast<int>(page.chunks.size()));
  for (const storage::ChunkInfo& info : page.chunks) {
    v1::ChunkEntry* entry = response.add_chunks();
    *entry->mutable_key() = ToProto(info.key);
    entry->set_tier(v1::TIER_HOST);
    entry->set_size_bytes(info.size_bytes);
    entry->set_num_tokens(info.num_tokens);
    entry->set_hard_pinned(info.hard_pinned);
    if (info.soft_pin_deadline > now) {
      entry->set_soft_pin_remaining_ms(static_cast<uint64_t>(
          std::chrono::ceil<std::chrono::milliseconds>(info.soft_pin_deadline - now).count()));
    }
    entry->set_leases(info.leases);
  }
  response.set_next_page_token(PageToken(page.next_cursor));
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ControlService::Drain(grpc::CallbackServerContext* context,
                                                const v1::DrainRequest*,
                                                v1::DrainResponse* response) {
  if (absl::Status s = Authorize(*context); !s.ok()) return Finish(context, s);
  options_.host_tier->StopAdmitting();
  SetDraining();
  const storage::HostTierStats host = options_.host_tier->Stats();
  response->set_resident_chunks(host.chunks);
  response->set_resident_bytes(host.payload_bytes);
  response->set_open_reservations(host.reservations);
  response->set_flushed_chunks(0);
  return Finish(context, absl::OkStatus());
}

grpc::ServerWriteReactor<v1::WatchEventsResponse>* ControlService::WatchEvents(
    grpc::CallbackServerContext* context, const v1::WatchEventsRequest* request) {
  if (absl::Status s = Authorize(*context); !s.ok()) return new RefusedStream(ToGrpcStatus(s));
  return new WatchEventsReactor(options_.events, request->from_sequence());
}

}  // namespace strata::daemon

#include "daemon/control_service.h"

#include <vector>

#include "fmt/format.h"
#include "proto/convert.h"

namespace strata::daemon {
namespace {

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

ControlService::ControlService(ControlServiceOptions options)
    : options_(std::move(options)), started_(SystemClock::Get()->Now()) {}

grpc::ServerUnaryReactor* ControlService::Lookup(grpc::CallbackServerContext* context,
                                                 const v1::LookupRequest* request,
                                                 v1::LookupResponse* response) {
  return Finish(context, DoLookup(*request, *response));
}

absl::Status ControlService::DoLookup(const v1::LookupRequest& request,
                                      v1::LookupResponse& response) {
  const bool by_tokens = request.tokens_size() > 0;
  const bool by_keys = request.keys_size() > 0;
  if (by_tokens == by_keys) {
    return absl::InvalidArgumentError("Lookup needs either tokens (with a layout) or keys");
  }
  std::vector<ChunkKey> keys;
  std::vector<uint32_t> chunk_tokens;  // tokens each key covers (token lookups)
  if (by_tokens) {
    if (static_cast<uint32_t>(request.tokens_size()) > options_.max_lookup_tokens) {
      return absl::InvalidArgumentError(fmt::format(
          "{} tokens; the limit is {}", request.tokens_size(), options_.max_lookup_tokens));
    }
    if (!request.has_layout()) return absl::InvalidArgumentError("a token Lookup needs a layout");
    absl::StatusOr<KvLayout> layout = FromProto(request.layout());
    if (!layout.ok()) return layout.status();
    absl::StatusOr<KeyHasher> hasher = KeyHasher::Create(*layout, options_.key_options);
    if (!hasher.ok()) return hasher.status();
    const std::span<const uint32_t> tokens(request.tokens().data(), request.tokens_size());
    keys = hasher->PrefixKeys(
        tokens, {.tenant_salt = request.tenant_salt(), .lora_name = request.lora_name()},
        PartialChunk::kInclude);
    for (size_t i = 0; i < keys.size(); ++i) {
      chunk_tokens.push_back(static_cast<uint32_t>(
          std::min<size_t>(layout->chunk_tokens, tokens.size() - i * layout->chunk_tokens)));
    }
  } else {
    if (static_cast<uint32_t>(request.keys_size()) > options_.max_lookup_keys) {
      return absl::InvalidArgumentError(
          fmt::format("{} keys; the limit is {}", request.keys_size(), options_.max_lookup_keys));
    }
    for (const v1::ChunkKey& proto : request.keys()) {
      absl::StatusOr<ChunkKey> key = FromProto(proto);
      if (!key.ok()) return key.status();
      keys.push_back(*key);
    }
  }
  const size_t hits = options_.host_tier->Lookup(keys);
  uint64_t matched_tokens = 0;
  for (size_t i = 0; i < hits; ++i) {
    response.add_chunk_tiers(v1::TIER_HOST);
    if (request.with_keys()) {
      v1::ChunkHit* hit = response.add_hits();
      *hit->mutable_key() = ToProto(keys[i]);
      hit->set_tier(v1::TIER_HOST);
    }
    if (by_tokens) matched_tokens += chunk_tokens[i];
  }
  response.set_matched_chunks(static_cast<uint32_t>(hits));
  response.set_total_chunks(static_cast<uint32_t>(keys.size()));
  response.set_matched_tokens(matched_tokens);
  ++lookups_;
  if (by_tokens) {
    hit_tokens_ += matched_tokens;
    miss_tokens_ += static_cast<uint64_t>(request.tokens_size()) - matched_tokens;
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ControlService::Health(grpc::CallbackServerContext* context,
                                                 const v1::HealthRequest*,
                                                 v1::HealthResponse* response) {
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
  if (options_.sessions != nullptr) {
    response->set_sessions(options_.sessions->Stats().active_sessions);
  }
  response->set_lookups(lookups_);
  response->set_hit_tokens(hit_tokens_);
  response->set_miss_tokens(miss_tokens_);
  return Finish(context, absl::OkStatus());
}

}  // namespace strata::daemon

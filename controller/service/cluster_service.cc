#include "controller/service/cluster_service.h"

#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "control/bearer_auth.h"
#include "control/lookup_request_decoder.h"
#include "control/unary_reactor.h"
#include "controller/ingest/daemon_events.h"
#include "controller/service/cluster_stats.h"
#include "controller/service/cluster_watch_reactor.h"
#include "core/status_macros.h"
#include "fmt/format.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "proto/convert.h"

namespace strata::controller {
namespace {

void FillPrefix(const InstanceChainHit& hit, const control::ResolvedChunks& chunks,
                v1::InstancePrefix& prefix) {
  prefix.set_instance_id(hit.instance_id);
  prefix.set_matched_chunks(hit.prefix_chunks);
  uint64_t tokens = 0;
  if (chunks.by_tokens) {
    for (uint32_t i = 0; i < hit.prefix_chunks; ++i) tokens += chunks.chunk_tokens[i];
  }
  prefix.set_matched_tokens(tokens);
  for (size_t t = 0; t < kTierCount; ++t) {
    if (hit.chunks_per_tier[t] == 0) continue;
    v1::TierChunks* tier = prefix.add_tiers();
    tier->set_tier(TierToProto(static_cast<Tier>(t)));
    tier->set_chunks(hit.chunks_per_tier[t]);
  }
}

// The model's view of an instance's cached prefix: the index counts its chunks per tier, not
// which chunk lies where, so the chunks are taken in order and given the fastest tiers first
// (only the last chunk of a prompt may have fewer tokens, so the order hardly matters).
std::vector<CachedChunk> CachedPrefix(const InstanceChainHit& hit,
                                      const control::ResolvedChunks& chunks) {
  std::vector<CachedChunk> cached;
  cached.reserve(hit.prefix_chunks);
  for (size_t t = 0; t < kTierCount; ++t) {
    for (uint32_t n = 0; n < hit.chunks_per_tier[t] && cached.size() < hit.prefix_chunks; ++n) {
      cached.push_back(
          {.tokens = chunks.chunk_tokens[cached.size()], .tier = static_cast<Tier>(t)});
    }
  }
  return cached;
}

}  // namespace

v1::ClusterLookupResponse ClusterLookup(const ClusterIndex& index,
                                        const control::ResolvedChunks& chunks) {
  v1::ClusterLookupResponse response;
  for (const InstanceChainHit& hit : index.LookupChain(chunks.keys)) {
    FillPrefix(hit, chunks, *response.add_instances());
  }
  response.set_total_chunks(static_cast<uint32_t>(chunks.keys.size()));
  return response;
}

absl::Status CheckCandidates(
    const google::protobuf::RepeatedPtrField<v1::RouteCandidate>& candidates,
    uint32_t max_candidates) {
  if (candidates.empty()) return absl::InvalidArgumentError("Route needs candidate instances");
  if (static_cast<uint32_t>(candidates.size()) > max_candidates) {
    return absl::InvalidArgumentError(
        fmt::format("{} candidates; the limit is {}", candidates.size(), max_candidates));
  }
  absl::flat_hash_set<std::string_view> ids;
  for (const v1::RouteCandidate& candidate : candidates) {
    if (candidate.instance_id().empty()) {
      return absl::InvalidArgumentError("a candidate has no instance_id");
    }
    if (!ids.insert(candidate.instance_id()).second) {
      return absl::InvalidArgumentError(
          fmt::format("candidate '{}' is named twice", candidate.instance_id()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::RouteResponse> RankCandidates(
    const ClusterIndex& index, const control::ResolvedChunks& chunks, uint64_t prompt_tokens,
    uint64_t bytes_per_token,
    const google::protobuf::RepeatedPtrField<v1::RouteCandidate>& candidates,
    const TtftModelOptions& model, uint32_t max_candidates) {
  STRATA_RETURN_IF_ERROR(CheckCandidates(candidates, max_candidates));
  const std::vector<InstanceChainHit> hits = index.LookupChain(chunks.keys);
  absl::flat_hash_map<std::string_view, const InstanceChainHit*> hit_of;
  for (const InstanceChainHit& hit : hits) hit_of[hit.instance_id] = &hit;

  std::vector<RouteCandidate> modelled;
  modelled.reserve(candidates.size());
  for (const v1::RouteCandidate& candidate : candidates) {
    RouteCandidate& m = modelled.emplace_back();
    m.queued_prefill_tokens = candidate.queued_prefill_tokens();
    if (auto it = hit_of.find(candidate.instance_id()); it != hit_of.end()) {
      m.cached_prefix = CachedPrefix(*it->second, chunks);
    }
  }
  TtftModelOptions options = model;
  options.kv_bytes_per_token = bytes_per_token;
  v1::RouteResponse response;
  response.set_prompt_tokens(prompt_tokens);
  for (size_t i : RankByModelledTtft(options, prompt_tokens, modelled)) {
    const TtftEstimate estimate = ModelTtft(options, prompt_tokens, modelled[i]);
    v1::RouteScore* score = response.add_ranked();
    score->set_instance_id(candidates[static_cast<int>(i)].instance_id());
    score->set_modelled_ttft_s(estimate.ttft_s());
    score->set_queue_s(estimate.queue_s);
    score->set_load_s(estimate.load_s);
    score->set_prefill_s(estimate.prefill_s);
    score->set_saved_s(estimate.saved_s);
    score->set_cached_tokens(estimate.cached_tokens);
    score->set_loaded_tokens(estimate.loaded_tokens);
  }
  return response;
}

ClusterService::ClusterService(ClusterServiceOptions options) : options_(std::move(options)) {}

absl::Status ClusterService::Admit(const grpc::CallbackServerContext& context) const {
  STRATA_RETURN_IF_ERROR(control::CheckBearerToken(context, options_.bearer_token, "controller"));
  return options_.serving ? options_.serving() : absl::OkStatus();
}

IndexCompleteness ClusterService::Completeness() const {
  return options_.completeness ? options_.completeness() : IndexCompleteness{};
}

grpc::ServerUnaryReactor* ClusterService::Lookup(grpc::CallbackServerContext* context,
                                                 const grpc::ByteBuffer* request,
                                                 grpc::ByteBuffer* response) {
  if (absl::Status s = Admit(*context); !s.ok()) return control::FinishUnary(context, s);
  v1::LookupRequest fields;
  std::vector<ChunkKey> keys;
  std::vector<uint32_t> tokens;
  if (absl::Status s =
          control::DecodeLookupRequest(*request, options_.limits, fields, keys, tokens);
      !s.ok()) {
    return control::FinishUnary(context, s);
  }
  absl::StatusOr<control::ResolvedChunks> chunks =
      control::ResolveChunks(fields.has_layout() ? &fields.layout() : nullptr, tokens,
                             {.tenant_salt = fields.tenant_salt(), .lora_name = fields.lora_name()},
                             std::move(keys), options_.key_options, options_.limits);
  if (!chunks.ok()) return control::FinishUnary(context, chunks.status());
  v1::ClusterLookupResponse answer = ClusterLookup(*options_.index, *chunks);
  const IndexCompleteness completeness = Completeness();
  answer.set_complete(completeness.complete);
  answer.set_incomplete_reason(completeness.reason);
  bool own_buffer = false;
  const grpc::Status serialized = grpc::SerializationTraits<v1::ClusterLookupResponse>::Serialize(
      answer, response, &own_buffer);
  return control::FinishUnary(context, FromGrpcStatus(serialized));
}

grpc::ServerUnaryReactor* ClusterService::Route(grpc::CallbackServerContext* context,
                                                const v1::RouteRequest* request,
                                                v1::RouteResponse* response) {
  if (absl::Status s = Admit(*context); !s.ok()) return control::FinishUnary(context, s);
  // Before the prompt is hashed: a bad candidate list costs nothing.
  if (absl::Status s = CheckCandidates(request->candidates(), options_.max_candidates); !s.ok()) {
    return control::FinishUnary(context, s);
  }
  const v1::LookupRequest& prompt = request->prompt();
  absl::StatusOr<std::span<const uint32_t>> prompt_tokens = control::PromptTokens(prompt);
  if (!prompt_tokens.ok()) return control::FinishUnary(context, prompt_tokens.status());
  const std::span<const uint32_t> tokens = *prompt_tokens;
  if (tokens.empty()) {
    return control::FinishUnary(
        context, absl::InvalidArgumentError("Route needs the prompt's tokens, with their layout"));
  }
  absl::StatusOr<control::ResolvedChunks> chunks =
      control::ResolveChunks(prompt.has_layout() ? &prompt.layout() : nullptr, tokens,
                             {.tenant_salt = prompt.tenant_salt(), .lora_name = prompt.lora_name()},
                             prompt.keys(), options_.key_options, options_.limits);
  if (!chunks.ok()) return control::FinishUnary(context, chunks.status());
  // ResolveChunks validated the layout.
  const KvLayout layout = *strata::FromProto(prompt.layout());
  absl::StatusOr<v1::RouteResponse> ranked =
      RankCandidates(*options_.index, *chunks, tokens.size(), layout.bytes_per_token(),
                     request->candidates(), options_.model, options_.max_candidates);
  if (!ranked.ok()) return control::FinishUnary(context, ranked.status());
  *response = *std::move(ranked);
  const IndexCompleteness completeness = Completeness();
  response->set_complete(completeness.complete);
  response->set_incomplete_reason(completeness.reason);
  return control::FinishUnary(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* ClusterService::RegisterInstance(
    grpc::CallbackServerContext* context, const v1::RegisterInstanceRequest* request,
    v1::RegisterInstanceResponse* response) {
  if (absl::Status s = Admit(*context); !s.ok()) return control::FinishUnary(context, s);
  absl::StatusOr<v1::RegisterInstanceResponse> registered = options_.registry->Register(*request);
  if (registered.ok()) *response = *std::move(registered);
  return control::FinishUnary(context, registered.status());
}

grpc::ServerUnaryReactor* ClusterService::Heartbeat(grpc::CallbackServerContext* context,
                                                    const v1::HeartbeatRequest* request,
                                                    v1::HeartbeatResponse* response) {
  if (absl::Status s = Admit(*context); !s.ok()) return control::FinishUnary(context, s);
  absl::Status beat = options_.registry->Heartbeat(request->instance_id(), request->lease_id());
  if (beat.ok()) {
    // The membership goes along only when the daemon's is out of date.
    std::shared_ptr<const v1::Membership> membership = options_.registry->Membership();
    if (membership->digest() != request->membership_digest()) {
      *response->mutable_membership() = *membership;
    }
  }
  return control::FinishUnary(context, beat);
}

grpc::ServerUnaryReactor* ClusterService::DeregisterInstance(
    grpc::CallbackServerContext* context, const v1::DeregisterInstanceRequest* request,
    v1::DeregisterInstanceResponse* /*response*/) {
  if (absl::Status s = Admit(*context); !s.ok()) return control::FinishUnary(context, s);
  return control::FinishUnary(
      context, options_.registry->Deregister(request->instance_id(), request->lease_id()));
}

grpc::ServerUnaryReactor* ClusterService::QueryInstance(grpc::CallbackServerContext* context,
                                                        const v1::QueryInstanceRequest* request,
                                                        v1::InstanceInfo* response) {
  if (absl::Status s = Admit(*context); !s.ok()) return control::FinishUnary(context, s);
  absl::StatusOr<v1::InstanceInfo> info = options_.registry->Query(request->instance_id());
  if (info.ok()) *response = *std::move(info);
  return control::FinishUnary(context, info.status());
}

grpc::ServerUnaryReactor* ClusterService::ListInstances(grpc::CallbackServerContext* context,
                                                        const v1::ListInstancesRequest* /*request*/,
                                                        v1::ListInstancesResponse* response) {
  if (absl::Status s = Admit(*context); !s.ok()) return control::FinishUnary(context, s);
  for (v1::InstanceInfo& info : options_.registry->List()) {
    *response->add_instances() = std::move(info);
  }
  return control::FinishUnary(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* ClusterService::Forward(grpc::CallbackServerContext* context,
                                                  const v1::NodeCall* request,
                                                  v1::NodeCallResponse* response) {
  if (absl::Status s = Admit(*context); !s.ok()) return control::FinishUnary(context, s);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  options_.forwarder->Forward(*request, response, [reactor](const absl::Status& status) {
    reactor->Finish(ToGrpcStatus(status));
  });
  return reactor;
}

grpc::ServerUnaryReactor* ClusterService::Stats(grpc::CallbackServerContext* context,
                                                const v1::ClusterStatsRequest*,
                                                v1::ClusterStatsResponse* response) {
  if (absl::Status s = Admit(*context); !s.ok()) return control::FinishUnary(context, s);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::NodeCall call;
  call.mutable_stats();
  auto nodes = std::make_shared<v1::NodeCallResponse>();
  options_.forwarder->Forward(
      call, nodes.get(), [this, reactor, nodes, response](const absl::Status& status) {
        if (status.ok()) {
          *response =
              ClusterStats(std::move(*nodes), options_.index->stats(), options_.registry->List());
          const IndexCompleteness completeness = Completeness();
          response->set_complete(completeness.complete);
          response->set_incomplete_reason(completeness.reason);
        }
        reactor->Finish(ToGrpcStatus(status));
      });
  return reactor;
}

grpc::ServerWriteReactor<v1::ClusterWatchResponse>* ClusterService::WatchEvents(
    grpc::CallbackServerContext* context, const v1::ClusterWatchRequest*) {
  if (absl::Status s = Admit(*context); !s.ok()) {
    return new control::RefusedStream<v1::ClusterWatchResponse>(s);
  }
  if (options_.events == nullptr) {
    return new control::RefusedStream<v1::ClusterWatchResponse>(
        absl::FailedPreconditionError("this controller publishes no events"));
  }
  return new ClusterWatchReactor(options_.events);
}

}  // namespace strata::controller

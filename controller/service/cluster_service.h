// ClusterService: the controller's cluster-scope gRPC API (StrataCluster in control.proto):
// Lookup (a prompt's cached prefix on every instance, with the tiers it lies in) and Route
// (candidate instances ranked by modelled time-to-first-token), both answered from the
// ClusterIndex; and membership (RegisterInstance, Heartbeat, DeregisterInstance, QueryInstance,
// ListInstances), answered by the InstanceRegistry (a heartbeat's answer carries the peer
// membership when the daemon's copy is out of date); and Forward, node calls sent to the daemons
// by the NodeForwarder. Over TCP every call must carry the bearer token when one is configured
// (UNAUTHENTICATED otherwise), daemons' registrations included; a standby controller (one that
// does not lead) answers every call UNAVAILABLE, naming the leader. Lookup, Route and Stats say
// whether the index they answer from is complete (`completeness`): a leader answers with what its
// index holds from the start, flagged incomplete until every instance has been read. Token
// prompts are hashed here, with the cluster's key protocol, into the keys the daemons' events
// carry.
//
// The answers are built by ClusterLookup and RankCandidates, plain functions tested without gRPC;
// the service adds the wire: Lookup is served raw (control/lookup_request_decoder.h decodes it
// as the daemon's Lookup does), Route through the generated parser (its prompt is nested).
//
// Threading: the service is stateless beyond its options; gRPC calls it from any thread, and the
// index, the registry and the forwarder are thread-safe. They must outlive the service.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "control/chunk_selector.h"
#include "controller/index/cluster_index.h"
#include "controller/ingest/event_hub.h"
#include "controller/membership/instance_registry.h"
#include "controller/routing/ttft_model.h"
#include "controller/service/node_forwarder.h"
#include "core/key_hasher.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "grpcpp/support/byte_buffer.h"
#include "strata/v1/control.grpc.pb.h"

namespace strata::controller {

// Whether the index answers from every registered instance's chunks (ClusterLookupResponse's
// `complete`), and, when not, what it lacks.
struct IndexCompleteness {
  bool complete = true;
  std::string reason;
};

struct ClusterServiceOptions {
  const ClusterIndex* index = nullptr;   // not owned
  InstanceRegistry* registry = nullptr;  // not owned
  NodeForwarder* forwarder = nullptr;    // not owned
  EventHub* events = nullptr;            // not owned: WatchEvents' source
  // Callers over TCP must send "authorization: Bearer <token>" when not empty.
  std::string bearer_token;
  // Whether this controller answers now (it leads): OK, or the error every call gets (a standby's
  // UNAVAILABLE naming the leader). Null: it always answers.
  std::function<absl::Status()> serving;
  // Whether the index is complete now, for Lookup, Route and Stats to say. Null: always.
  std::function<IndexCompleteness()> completeness;
  // The cluster's key protocol: the daemons' [keys] configuration.
  KeyHasherOptions key_options;
  control::SelectionLimits limits;
  // The score's costs. kv_bytes_per_token is taken from each prompt's layout instead.
  TtftModelOptions model;
  uint32_t max_candidates = 1024;
};

// The answer to a cluster Lookup of `chunks` (resolved from a LookupRequest).
v1::ClusterLookupResponse ClusterLookup(const ClusterIndex& index,
                                        const control::ResolvedChunks& chunks);

// OK, or kInvalidArgument for no candidates, more than `max_candidates`, or an empty or repeated
// instance id.
absl::Status CheckCandidates(
    const google::protobuf::RepeatedPtrField<v1::RouteCandidate>& candidates,
    uint32_t max_candidates);

// The answer to Route for a prompt of `prompt_tokens` tokens resolved into `chunks` (by tokens)
// with `bytes_per_token` of KV. CheckCandidates's errors.
absl::StatusOr<v1::RouteResponse> RankCandidates(
    const ClusterIndex& index, const control::ResolvedChunks& chunks, uint64_t prompt_tokens,
    uint64_t bytes_per_token,
    const google::protobuf::RepeatedPtrField<v1::RouteCandidate>& candidates,
    const TtftModelOptions& model, uint32_t max_candidates);

class ClusterService final
    : public v1::StrataCluster::WithRawCallbackMethod_Lookup<v1::StrataCluster::CallbackService> {
 public:
  explicit ClusterService(ClusterServiceOptions options);

  grpc::ServerUnaryReactor* Lookup(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Route(grpc::CallbackServerContext* context,
                                  const v1::RouteRequest* request,
                                  v1::RouteResponse* response) override;
  grpc::ServerUnaryReactor* RegisterInstance(grpc::CallbackServerContext* context,
                                             const v1::RegisterInstanceRequest* request,
                                             v1::RegisterInstanceResponse* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* context,
                                      const v1::HeartbeatRequest* request,
                                      v1::HeartbeatResponse* response) override;
  grpc::ServerUnaryReactor* DeregisterInstance(grpc::CallbackServerContext* context,
                                               const v1::DeregisterInstanceRequest* request,
                                               v1::DeregisterInstanceResponse* response) override;
  grpc::ServerUnaryReactor* QueryInstance(grpc::CallbackServerContext* context,
                                          const v1::QueryInstanceRequest* request,
                                          v1::InstanceInfo* response) override;
  grpc::ServerUnaryReactor* ListInstances(grpc::CallbackServerContext* context,
                                          const v1::ListInstancesRequest* request,
                                          v1::ListInstancesResponse* response) override;
  grpc::ServerUnaryReactor* Forward(grpc::CallbackServerContext* context,
                                    const v1::NodeCall* request,
                                    v1::NodeCallResponse* response) override;
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* context,
                                  const v1::ClusterStatsRequest* request,
                                  v1::ClusterStatsResponse* response) override;
  grpc::ServerWriteReactor<v1::ClusterWatchResponse>* WatchEvents(
      grpc::CallbackServerContext* context, const v1::ClusterWatchRequest* request) override;

 private:
  // OK, or UNAUTHENTICATED for a TCP caller without the bearer token, or `serving`'s error.
  absl::Status Admit(const grpc::CallbackServerContext& context) const;
  IndexCompleteness Completeness() const;

  const ClusterServiceOptions options_;
};

}  // namespace strata::controller

// ClusterService: the controller's cluster-scope gRPC API (StrataCluster in control.proto):
// Lookup (a prompt's cached prefix on every instance, with the tiers it lies in) and Route
// (candidate instances ranked by modelled time-to-first-token), both answered from the
// ClusterIndex. Token prompts are hashed here, with the cluster's key protocol, into the keys
// the daemons' events carry.
//
// The answers are built by ClusterLookup and RankCandidates, plain functions tested without gRPC;
// the service adds the wire: Lookup is served raw (control/lookup_request_decoder.h decodes it
// as the daemon's Lookup does), Route through the generated parser (its prompt is nested).
//
// Threading: the service is stateless beyond its options; gRPC calls it from any thread, and the
// index is thread-safe. The index must outlive the service.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "control/chunk_selector.h"
#include "controller/index/cluster_index.h"
#include "controller/routing/ttft_model.h"
#include "core/key_hasher.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "grpcpp/support/byte_buffer.h"
#include "strata/v1/control.grpc.pb.h"

namespace strata::controller {

struct ClusterServiceOptions {
  const ClusterIndex* index = nullptr;  // not owned
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

// The answer to Route for a prompt of `prompt_tokens` tokens resolved into `chunks` (by tokens)
// with `bytes_per_token` of KV. kInvalidArgument for no candidates, more than `max_candidates`,
// or an empty or repeated instance id.
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

 private:
  const ClusterServiceOptions options_;
};

}  // namespace strata::controller

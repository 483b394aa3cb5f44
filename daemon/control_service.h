// ControlService implements strata.v1.StrataControl (node scope) with gRPC's callback API.
// Handlers answer from in-memory state and finish inline, except Move, Clear and Drain when the
// store has a tier below the host tier: they may wait for disk I/O, so they run on the store's
// thread (TieredStore::Submit) and finish from there; no gRPC thread waits for them.
// The status codes each RPC answers are documented in proto/strata/v1/control.proto.
// Thread-safe: gRPC calls handlers from its own threads concurrently.
#pragma once

#include <atomic>
#include <memory>
#include <span>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "control/chunk_selector.h"
#include "core/clock.h"
#include "core/key_hasher.h"
#include "daemon/engine_session_server.h"
#include "daemon/event_log.h"
#include "daemon/lookup_accounting.h"
#include "google/protobuf/arena.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/message_allocator.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "storage/remote/remote_node.h"
#include "storage/tiered/tiered_store.h"
#include "strata/v1/control.grpc.pb.h"

namespace strata::daemon {

struct ControlServiceOptions {
  // Not owned; must outlive the service; its thread finishes the Move, Clear and Drain calls it
  // accepted, so the gRPC server's Wait returns only once they ran (stop the server first).
  storage::TieredStore* store = nullptr;
  // Nullable; not owned; must outlive the service.
  const EngineSessionServer* sessions = nullptr;
  // The host tier's events, for WatchEvents. Not owned; must outlive the gRPC server.
  EventLog* events = nullptr;
  // How token selections are hashed (the daemon's key protocol configuration).
  KeyHasherOptions key_options;
  // Selections above these sizes are rejected with INVALID_ARGUMENT.
  control::SelectionLimits limits;
  // Callers over TCP must send "authorization: Bearer <token>" (UNAUTHENTICATED otherwise);
  // empty: no check. Unix-socket callers are never checked (file permissions guard them).
  std::string bearer_token;
  // Nullable; must outlive the service. strata_lookup_duration_seconds is registered on it.
  prometheus::Registry* registry = nullptr;
  // The node's lookup counts: Lookup records control-API calls in it, Stats reports it (the
  // engines' lookups, which the engine sessions record, first). Nullable (nothing counted); not
  // owned; must outlive the service.
  LookupAccounting* lookups = nullptr;
  // This node's side of the cluster, for ListPeers. Nullable (the remote tier is off); not
  // owned; must outlive the service.
  storage::remote::RemoteNode* remote = nullptr;
};

// Lookup is served raw (grpc::ByteBuffer in and out): its keys are decoded from the wire
// straight into ChunkKeys through one scratch message, where the generated parser would make a
// message and a digest string per key (most of a 128-key call's cost).
class ControlService final
    : public v1::StrataControl::WithRawCallbackMethod_Lookup<v1::StrataControl::CallbackService> {
 public:
  // ListChunks pages hold at most this many chunks.
  static constexpr uint32_t kMaxPageSize = 10000;
  static constexpr uint32_t kDefaultPageSize = 100;

  explicit ControlService(ControlServiceOptions options);

  // A LookupRequest in, a LookupResponse out (INVALID_ARGUMENT when the bytes do not parse).
  grpc::ServerUnaryReactor* Lookup(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Pin(grpc::CallbackServerContext* context, const v1::PinRequest* request,
                                v1::PinResponse* response) override;
  grpc::ServerUnaryReactor* Unpin(grpc::CallbackServerContext* context,
                                  const v1::UnpinRequest* request,
                                  v1::UnpinResponse* response) override;
  grpc::ServerUnaryReactor* Move(grpc::CallbackServerContext* context,
                                 const v1::MoveRequest* request,
                                 v1::MoveResponse* response) override;
  grpc::ServerUnaryReactor* Clear(grpc::CallbackServerContext* context,
                                  const v1::ClearRequest* request,
                                  v1::ClearResponse* response) override;
  grpc::ServerUnaryReactor* Compress(grpc::CallbackServerContext* context,
                                     const v1::CompressRequest* request,
                                     v1::CompressResponse* response) override;
  grpc::ServerUnaryReactor* Decompress(grpc::CallbackServerContext* context,
                                       const v1::DecompressRequest* request,
                                       v1::DecompressResponse* response) override;
  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* context,
                                   const v1::HealthRequest* request,
                                   v1::HealthResponse* response) override;
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* context,
                                  const v1::StatsRequest* request,
                                  v1::StatsResponse* response) override;
  grpc::ServerUnaryReactor* ListPeers(grpc::CallbackServerContext* context,
                                      const v1::ListPeersRequest* request,
                                      v1::ListPeersResponse* response) override;
  grpc::ServerUnaryReactor* ListChunks(grpc::CallbackServerContext* context,
                                       const v1::ListChunksRequest* request,
                                       v1::ListChunksResponse* response) override;
  grpc::ServerUnaryReactor* Drain(grpc::CallbackServerContext* context,
                                  const v1::DrainRequest* request,
                                  v1::DrainResponse* response) override;
  grpc::ServerWriteReactor<v1::WatchEventsResponse>* WatchEvents(
      grpc::CallbackServerContext* context, const v1::WatchEventsRequest* request) override;

  // Marks the daemon as draining: Health reports it.
  void SetDraining() { draining_ = true; }

 private:
  // `request` without its keys and tokens, which come decoded in `keys` and `tokens`.
  absl::Status DoLookup(const v1::LookupRequest& request, std::vector<ChunkKey> keys,
                        std::span<const uint32_t> tokens, v1::LookupResponse& response);
  absl::Status DoPin(const v1::PinRequest& request, v1::PinResponse& response);
  absl::Status DoUnpin(const v1::UnpinRequest& request, v1::UnpinResponse& response);
  absl::Status DoMove(const v1::MoveRequest& request, v1::MoveResponse& response);
  // Move with a target instance: the chunks are pushed to that peer's host tier.
  absl::Status DoMoveToPeer(const v1::MoveRequest& request, std::span<const ChunkKey> keys,
                            v1::MoveResponse& response);
  absl::Status DoClear(const v1::ClearRequest& request, v1::ClearResponse& response);
  absl::Status DoCompress(const v1::CompressRequest& request, v1::CompressResponse& response);
  absl::Status DoDecompress(const v1::DecompressRequest& request, v1::DecompressResponse& response);
  // Compress's and Decompress's common part: the selector's chunks of `tier` (TIER_UNSPECIFIED:
  // the disk tier), or those `tenant` (nullable: none) stored there, recoded
  // (TieredStore::Recode).
  absl::StatusOr<storage::RecodeTotals> Recode(const v1::ChunkSelector& selector,
                                               const std::string* tenant, v1::Tier tier,
                                               storage::LowerTier::Recoding recoding);
  absl::Status DoListChunks(const v1::ListChunksRequest& request, v1::ListChunksResponse& response);
  absl::StatusOr<control::ResolvedChunks> Resolve(const v1::ChunkSelector& selector) const;
  // Finishes the call with what `work` returns: run on the store's thread when a tier below the
  // host tier may make it wait for I/O, inline otherwise.
  grpc::ServerUnaryReactor* FinishFromStore(grpc::CallbackServerContext* context,
                                            absl::AnyInvocable<absl::Status() &&> work);
  // OK, or UNAUTHENTICATED for a TCP caller without the bearer token.
  absl::Status Authorize(const grpc::CallbackServerContext& context) const;

  // Puts the request and response of each call on one protobuf arena, freed at once when the
  // call ends: a 1000-entry ListChunks page is ~3000 messages and strings, which cost more
  // through malloc and free than everything else the call does. The arena starts in a block
  // allocated with it and grows by blocks of up to 64 KiB.
  template <typename Request, typename Response>
  class ArenaAllocator final : public grpc::MessageAllocator<Request, Response> {
   public:
    grpc::MessageHolder<Request, Response>* AllocateMessages() override { return new Holder(); }

   private:
    class Holder final : public grpc::MessageHolder<Request, Response> {
     public:
      Holder() : arena_(Options(first_block_)) {
        this->set_request(google::protobuf::Arena::CreateMessage<Request>(&arena_));
        this->set_response(google::protobuf::Arena::CreateMessage<Response>(&arena_));
      }
      void Release() override { delete this; }

     private:
      static google::protobuf::ArenaOptions Options(char* first_block) {
        google::protobuf::ArenaOptions options;
        options.initial_block = first_block;
        options.initial_block_size = sizeof(first_block_);
        options.max_block_size = 64 << 10;
        return options;
      }

      alignas(8) char first_block_[8192];
      google::protobuf::Arena arena_;  // after first_block_: destroyed before it
    };
  };

  const ControlServiceOptions options_;
  const MonoTime started_;
  std::atomic<bool> draining_{false};
  prometheus::Histogram* lookup_latency_ = nullptr;  // null without a registry
  ArenaAllocator<v1::ListChunksRequest, v1::ListChunksResponse> list_allocator_;
};

}  // namespace strata::daemon

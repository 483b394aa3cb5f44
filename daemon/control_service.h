// ControlService implements strata.v1.StrataControl (node scope) with gRPC's callback API.
// Handlers validate, answer from in-memory state and finish inline: nothing here blocks on I/O.
// Thread-safe: gRPC calls handlers from its own threads concurrently.
#pragma once

#include <atomic>
#include <memory>

#include "absl/status/statusor.h"
#include "core/clock.h"
#include "core/key_hasher.h"
#include "daemon/engine_session_server.h"
#include "storage/host/host_tier.h"
#include "strata/v1/control.grpc.pb.h"

namespace strata::daemon {

struct ControlServiceOptions {
  // Not owned; must outlive the service.
  storage::HostTier* host_tier = nullptr;
  // Nullable; not owned; must outlive the service.
  const EngineSessionServer* sessions = nullptr;
  // How token lookups are hashed (the daemon's key protocol configuration).
  KeyHasherOptions key_options;
  // Requests above these sizes are rejected with INVALID_ARGUMENT.
  uint32_t max_lookup_tokens = 4u << 20;
  uint32_t max_lookup_keys = 65536;
};

class ControlService final : public v1::StrataControl::CallbackService {
 public:
  explicit ControlService(ControlServiceOptions options);

  grpc::ServerUnaryReactor* Lookup(grpc::CallbackServerContext* context,
                                   const v1::LookupRequest* request,
                                   v1::LookupResponse* response) override;
  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* context,
                                   const v1::HealthRequest* request,
                                   v1::HealthResponse* response) override;
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* context,
                                  const v1::StatsRequest* request,
                                  v1::StatsResponse* response) override;

  // Marks the daemon as draining: Health reports it.
  void SetDraining() { draining_ = true; }

 private:
  absl::Status DoLookup(const v1::LookupRequest& request, v1::LookupResponse& response);

  const ControlServiceOptions options_;
  const MonoTime started_;
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> lookups_{0};
  std::atomic<uint64_t> hit_tokens_{0};
  std::atomic<uint64_t> miss_tokens_{0};
};

}  // namespace strata::daemon

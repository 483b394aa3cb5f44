// NodeForwarder: the controller's side of StrataCluster.Forward, node-scope control calls (Pin,
// Unpin, Clear, Move, Compress, Stats) sent to one registered daemon or fanned out to all of them
// at once, each daemon's answer or error kept apart.
//
// The calls go out asynchronously, all at once, each with its own deadline, over one channel per
// daemon control endpoint (kept for the next call), with the credentials the controller holds for
// the daemons. No thread waits on them: `done` runs on the gRPC thread that completes the last.
//
// Threading: Forward may be called from any thread. The forwarder must outlive every call it
// started: stop the gRPC server (which waits for the calls' completion) before destroying it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "controller/membership/instance_registry.h"
#include "grpcpp/security/credentials.h"
#include "strata/v1/control.grpc.pb.h"

namespace strata::controller {

struct NodeForwarderOptions {
  const InstanceRegistry* registry = nullptr;  // not owned
  // The daemons' TLS root (insecure credentials for plaintext) and bearer token ("" none).
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string bearer_token;
  std::chrono::milliseconds call_timeout{5'000};
};

class NodeForwarder {
 public:
  explicit NodeForwarder(NodeForwarderOptions options);

  // Sends `call` to its instance, or to every registered one when call.instance_id() is empty,
  // filling `response` (one result per instance, by instance id); then runs `done` with OK. Runs
  // `done` at once with kInvalidArgument for a call with no request, kNotFound for an instance
  // that is not registered. `response` must live until `done` runs.
  void Forward(const v1::NodeCall& call, v1::NodeCallResponse* response,
               std::function<void(absl::Status)> done);

 private:
  std::shared_ptr<v1::StrataControl::Stub> StubFor(const std::string& endpoint);

  const NodeForwarderOptions options_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<v1::StrataControl::Stub>> stubs_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace strata::controller

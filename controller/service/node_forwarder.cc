#include "controller/service/node_forwarder.h"

#include <atomic>
#include <utility>
#include <vector>

#include "control/bearer_auth.h"
#include "control/redialing_channel.h"
#include "fmt/format.h"

namespace strata::controller {
namespace {

// What one Forward keeps alive until its last call completes.
struct FanOut {
  v1::NodeCall call;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::shared_ptr<v1::StrataControl::Stub>> stubs;
  std::atomic<size_t> remaining{0};
  std::function<void(absl::Status)> done;
};

// Starts `call`'s request on `async`, answering into `result`.
void Issue(v1::StrataControl::Stub::async_interface& async, const v1::NodeCall& call,
           grpc::ClientContext* context, v1::NodeResult* result,
           std::function<void(grpc::Status)> finished) {
  switch (call.request_case()) {
    case v1::NodeCall::kPin:
      return async.Pin(context, &call.pin(), result->mutable_pin(), std::move(finished));
    case v1::NodeCall::kUnpin:
      return async.Unpin(context, &call.unpin(), result->mutable_unpin(), std::move(finished));
    case v1::NodeCall::kClear:
      return async.Clear(context, &call.clear(), result->mutable_clear(), std::move(finished));
    case v1::NodeCall::kMove:
      return async.Move(context, &call.move(), result->mutable_move(), std::move(finished));
    case v1::NodeCall::kCompress:
      return async.Compress(context, &call.compress(), result->mutable_compress(),
                            std::move(finished));
    case v1::NodeCall::kDecompress:
      return async.Decompress(context, &call.decompress(), result->mutable_decompress(),
                              std::move(finished));
    case v1::NodeCall::kStats:
      return async.Stats(context, &call.stats(), result->mutable_stats(), std::move(finished));
    case v1::NodeCall::REQUEST_NOT_SET:
      break;
  }
  finished(grpc::Status(grpc::StatusCode::INTERNAL, "no request"));  // refused before
}

}  // namespace

NodeForwarder::NodeForwarder(NodeForwarderOptions options) : options_(std::move(options)) {}

std::shared_ptr<v1::StrataControl::Stub> NodeForwarder::StubFor(const std::string& endpoint) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<v1::StrataControl::Stub>& stub = stubs_[endpoint];
  if (stub == nullptr) {
    stub =
        v1::StrataControl::NewStub(control::CreateRedialingChannel(endpoint, options_.credentials));
  }
  return stub;
}

void NodeForwarder::Forward(const v1::NodeCall& call, v1::NodeCallResponse* response,
                            std::function<void(absl::Status)> done) {
  if (call.request_case() == v1::NodeCall::REQUEST_NOT_SET) {
    return done(absl::InvalidArgumentError(
        "a NodeCall needs a request (pin, unpin, clear, move, compress or stats)"));
  }
  std::vector<v1::InstanceInfo> targets;
  if (call.instance_id().empty()) {
    targets = options_.registry->List();
  } else {
    absl::StatusOr<v1::InstanceInfo> target = options_.registry->Query(call.instance_id());
    if (!target.ok()) return done(target.status());
    targets.push_back(*std::move(target));
  }
  if (targets.empty()) return done(absl::OkStatus());

  auto fan_out = std::make_shared<FanOut>();
  fan_out->call = call;
  fan_out->done = std::move(done);
  fan_out->remaining = targets.size();
  // Every result exists before the first call starts: the calls' callbacks then touch only their
  // own result, never the repeated field.
  std::vector<v1::NodeResult*> results;
  for (const v1::InstanceInfo& target : targets) {
    v1::NodeResult* result = response->add_results();
    result->set_instance_id(target.instance_id());
    results.push_back(result);
    auto context = std::make_unique<grpc::ClientContext>();
    control::AttachBearerToken(*context, options_.bearer_token);
    context->set_deadline(std::chrono::system_clock::now() + options_.call_timeout);
    fan_out->contexts.push_back(std::move(context));
    fan_out->stubs.push_back(StubFor(target.control_endpoint()));
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    v1::NodeResult* result = results[i];
    Issue(*fan_out->stubs[i]->async(), fan_out->call, fan_out->contexts[i].get(), result,
          [fan_out, result](grpc::Status status) {
            result->set_code(status.error_code());
            result->set_message(status.error_message());
            if (!status.ok()) result->clear_response();
            if (fan_out->remaining.fetch_sub(1) == 1) fan_out->done(absl::OkStatus());
          });
  }
}

}  // namespace strata::controller

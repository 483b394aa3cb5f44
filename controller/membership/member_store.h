// MemberStore: where the leading controller keeps its members' registrations, so that the
// controller that takes over after it adopts them (InstanceRegistry::Adopt) instead of waiting
// for every daemon to notice and register again. The registry writes a record when a member
// registers and forgets it when the member leaves (deregistered or expired); a controller that
// steps down forgets nothing (its members are its successor's).
//
// Writes are hints for a successor: a failed one costs the successor that member until the
// daemon registers again, never a wrong answer; the registry logs it and goes on.
//
// Threading: implementations are thread-safe. The registry calls Record and Forget in the order
// of its changes, one at a time.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "strata/v1/control.pb.h"

namespace strata::controller {

class MemberStore {
 public:
  virtual ~MemberStore() = default;
  // Keeps `record` (replacing any of its instance id).
  virtual absl::Status Record(const v1::InstanceRecord& record) = 0;
  // Forgets the record of `instance_id` (none kept is not an error).
  virtual absl::Status Forget(const std::string& instance_id) = 0;
  // Every record kept.
  virtual absl::StatusOr<std::vector<v1::InstanceRecord>> Load() = 0;
};

}  // namespace strata::controller

#include "storage/device/copy_digests.h"

#include <vector>

#include "core/xxh3_dispatch.h"

namespace strata::storage {

struct CopyDigests::States {
  std::vector<XXH3_state_t> states;  // XXH3_state_t is 64-byte aligned; vector honours it
};

CopyDigests::CopyDigests(size_t count) : count_(count), states_(std::make_unique<States>()) {
  states_->states.resize(count);
  for (XXH3_state_t& state : states_->states) XXH3_64bits_reset(&state);
}

CopyDigests::~CopyDigests() = default;

void CopyDigests::Update(size_t index, const void* bytes, size_t size) {
  XXH3_64bits_update(&states_->states[index], bytes, size);
}

uint64_t CopyDigests::Digest(size_t index) const {
  return XXH3_64bits_digest(&states_->states[index]);
}

}  // namespace strata::storage

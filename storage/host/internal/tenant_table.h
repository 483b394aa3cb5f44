// The host tier's table of tenant names (TenantTable). Internal to storage/host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "core/check.h"

namespace strata::storage::internal_host {

// Names of the tenants that have chunks in the index, as small labels (1..kMaxTenants) so a
// record spends two bytes on its tenant. A label lives while a chunk carries it and is reused
// after its last chunk leaves. Guarded by the tier lock.
class TenantTable {
 public:
  static constexpr size_t kMaxTenants = UINT16_MAX;

  // The label of `name`, counting one more chunk under it; 0 when kMaxTenants other tenants
  // hold labels already.
  uint16_t Acquire(std::string_view name) {
    auto it = labels_.find(absl::string_view(name.data(), name.size()));
    if (it == labels_.end()) {
      if (free_.empty() && entries_.size() == kMaxTenants) return 0;
      uint16_t label = 0;
      if (free_.empty()) {
        entries_.push_back({});
        label = static_cast<uint16_t>(entries_.size());
      } else {
        label = free_.back();
        free_.pop_back();
      }
      entries_[label - 1].name = std::string(name);
      it = labels_.emplace(std::string(name), label).first;
    }
    ++entries_[it->second - 1].chunks;
    return it->second;
  }
  // One chunk under `label` left; the label is freed with its last chunk. 0: no-op.
  void Release(uint16_t label) {
    if (label == 0) return;
    Entry& entry = entries_[label - 1];
    STRATA_DCHECK(entry.chunks > 0);
    if (--entry.chunks > 0) return;
    labels_.erase(absl::string_view(entry.name.data(), entry.name.size()));
    entry.name.clear();
    free_.push_back(label);
  }
  // The label of `name`, 0 when no chunk carries it.
  uint16_t Find(std::string_view name) const {
    auto it = labels_.find(absl::string_view(name.data(), name.size()));
    return it == labels_.end() ? 0 : it->second;
  }
  // The name `label` stands for; "" for 0. Valid until the table changes.
  std::string_view Name(uint16_t label) const {
    return label == 0 ? std::string_view() : std::string_view(entries_[label - 1].name);
  }

 private:
  struct Entry {
    std::string name;
    uint64_t chunks = 0;  // reserved and committed chunks carrying the label
  };
  absl::flat_hash_map<std::string, uint16_t> labels_;
  std::vector<Entry> entries_;  // by label - 1
  std::vector<uint16_t> free_;
};

}  // namespace strata::storage::internal_host

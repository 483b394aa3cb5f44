#include "storage/tiered/importance_book.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "fmt/format.h"

namespace strata::storage {

namespace {

absl::Status CheckReport(const ChunkKey& key, std::span<const float> importance) {
  if (key.empty()) return absl::InvalidArgumentError("importance: a report for an empty key");
  if (importance.empty() || importance.size() > ImportanceBook::kMaxTokens) {
    return absl::InvalidArgumentError(fmt::format("importance: a report of {} tokens (1 to {})",
                                                  importance.size(), ImportanceBook::kMaxTokens));
  }
  const auto bad = std::find_if(importance.begin(), importance.end(),
                                [](float v) { return !std::isfinite(v) || v < 0; });
  if (bad != importance.end()) {
    return absl::InvalidArgumentError(
        fmt::format("importance: token {} has {}; each value must be finite and non-negative",
                    bad - importance.begin(), *bad));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ImportanceBook::Add(const ChunkKey& key, std::span<const float> importance) {
  const std::span<const float> reports[] = {importance};
  return AddAll(std::span<const ChunkKey>(&key, 1), reports);
}

absl::Status ImportanceBook::AddAll(std::span<const ChunkKey> keys,
                                    std::span<const std::span<const float>> reports) {
  if (keys.size() != reports.size()) {
    return absl::InvalidArgumentError(fmt::format(
        "importance: {} reports for {} keys; give one each", reports.size(), keys.size()));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (absl::Status s = CheckReport(keys[i], reports[i]); !s.ok()) {
      return absl::InvalidArgumentError(fmt::format("{} (report {} of {}: nothing was kept)",
                                                    std::string(s.message()), i, keys.size()));
    }
  }
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < keys.size(); ++i) AddLocked(keys[i], reports[i]);
  return absl::OkStatus();
}

void ImportanceBook::AddLocked(const ChunkKey& key, std::span<const float> importance) {
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    std::vector<float>& held = it->second.importance;
    if (held.size() == importance.size()) {
      // Sums saturate at the largest float: reports that would overflow it leave the chunk's
      // heaviest tokens tied at the top, never an infinity drop_h2o refuses.
      constexpr float kMax = std::numeric_limits<float>::max();
      for (size_t t = 0; t < held.size(); ++t) held[t] = std::min(held[t] + importance[t], kMax);
    } else {
      values_ = values_ - held.size() + importance.size();
      held.assign(importance.begin(), importance.end());
    }
    recency_.splice(recency_.end(), recency_, it->second.recency);
  } else {
    recency_.push_back(key);
    entries_.emplace(key,
                     Entry{.importance = std::vector<float>(importance.begin(), importance.end()),
                           .recency = std::prev(recency_.end())});
    values_ += importance.size();
  }
  // The least recently reported go first; the chunk just reported goes last, if at all.
  while (entries_.size() > max_chunks_ || values_ > max_values_) {
    auto oldest = entries_.find(recency_.front());
    values_ -= oldest->second.importance.size();
    entries_.erase(oldest);
    recency_.pop_front();
  }
}

std::optional<std::vector<float>> ImportanceBook::Find(const ChunkKey& key) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second.importance;
}

size_t ImportanceBook::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

size_t ImportanceBook::values() const {
  absl::MutexLock lock(&mu_);
  return values_;
}

}  // namespace strata::storage

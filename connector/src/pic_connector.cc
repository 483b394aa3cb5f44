#include "strata/pic_connector.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "connector/src/engine_client.h"
#include "connector/src/pic_plan.h"
#include "connector/src/pic_requests.h"
#include "core/status_macros.h"
#include "fmt/format.h"

namespace strata::connector {
namespace {

using internal::PicChunkPlacement;
using internal::PicChunkSource;
using internal::PicRecompute;
using internal::PicRequest;

constexpr std::array<std::pair<std::string_view, PicRecomputePolicy>, 4> kPolicyNames = {{
    {"mepic", PicRecomputePolicy::kMepic},
    {"legolink", PicRecomputePolicy::kLegoLink},
    {"legolink0", PicRecomputePolicy::kLegoLinkZero},
    {"cacheblend", PicRecomputePolicy::kCacheBlend},
}};

// The public policy is the internal one's values: a cast converts it.
static_assert(static_cast<int>(PicRecomputePolicy::kMepic) ==
              static_cast<int>(PicRecompute::kMepic));
static_assert(static_cast<int>(PicRecomputePolicy::kLegoLink) ==
              static_cast<int>(PicRecompute::kLegoLink));
static_assert(static_cast<int>(PicRecomputePolicy::kLegoLinkZero) ==
              static_cast<int>(PicRecompute::kLegoLinkZero));
static_assert(static_cast<int>(PicRecomputePolicy::kCacheBlend) ==
              static_cast<int>(PicRecompute::kCacheBlend));

absl::Status NotOpen(std::string_view request_id) {
  return absl::NotFoundError(fmt::format("no open position-independent request '{}'", request_id));
}

}  // namespace

absl::StatusOr<PicRecomputePolicy> ParsePicRecomputePolicy(std::string_view name) {
  for (const auto& [policy_name, policy] : kPolicyNames) {
    if (name == policy_name) return policy;
  }
  return absl::InvalidArgumentError(fmt::format(
      "recompute policy '{}' is not one of mepic, legolink, legolink0, cacheblend", name));
}

std::string_view PicRecomputePolicyName(PicRecomputePolicy policy) {
  for (const auto& [name, named] : kPolicyNames) {
    if (named == policy) return name;
  }
  return "unknown";
}

// One open request. Its mutex is held by the call using it (Begin until the plan is made), so
// that calls for the same request id run one at a time.
struct OpenPicRequest {
  absl::Mutex mu;
  std::optional<PicRequest> request ABSL_GUARDED_BY(mu);  // empty: Begin failed or End ran
};

struct PicConnector::Impl {
  Impl(const ConnectorOptions& o, std::unique_ptr<storage::DeviceRuntime> rt, KeyHasher h)
      : options(o), runtime(std::move(rt)), hasher(std::move(h)) {}

  // The open request `request_id` (kNotFound).
  absl::StatusOr<std::shared_ptr<OpenPicRequest>> Find(std::string_view request_id) const {
    absl::MutexLock lock(&mu);
    auto it = open.find(std::string(request_id));
    if (it == open.end()) return NotOpen(request_id);
    return it->second;
  }

  // Runs `step` (PicRequests::Publish or Refresh) on the open request `request_id`, under its
  // mutex, and returns its plan again.
  absl::StatusOr<PicPlan> Step(std::string_view request_id,
                               absl::Status (internal::PicRequests::*step)(internal::PicRequest&)) {
    STRATA_ASSIGN_OR_RETURN(std::shared_ptr<OpenPicRequest> entry, Find(request_id));
    absl::MutexLock lock(&entry->mu);
    if (!entry->request.has_value()) return NotOpen(request_id);
    STRATA_RETURN_IF_ERROR(((*requests).*step)(*entry->request));
    return internal::ToPicPlan(*entry->request, options.block_size, options.layout.positional);
  }

  const ConnectorOptions options;
  const std::unique_ptr<storage::DeviceRuntime> runtime;
  const KeyHasher hasher;
  std::unique_ptr<internal::EngineClient> client;
  std::optional<internal::PicRequests> requests;
  mutable absl::Mutex mu;
  absl::flat_hash_map<std::string, std::shared_ptr<OpenPicRequest>> open ABSL_GUARDED_BY(mu);
};

absl::StatusOr<std::unique_ptr<PicConnector>> PicConnector::Create(
    const ConnectorOptions& options, uint32_t pad_token,
    std::unique_ptr<storage::DeviceRuntime> runtime) {
  STRATA_RETURN_IF_ERROR(options.Validate());
  STRATA_ASSIGN_OR_RETURN(KeyHasher hasher, KeyHasher::Create(options.layout, options.hashing));
  STRATA_ASSIGN_OR_RETURN(runtime, internal::RuntimeOrDefault(options, std::move(runtime)));
  auto impl = std::make_unique<Impl>(options, std::move(runtime), std::move(hasher));
  internal::EngineClientOptions client_options =
      internal::SessionOptions(options, /*map_arena=*/false);
  client_options.device_runtime = impl->runtime.get();
  STRATA_ASSIGN_OR_RETURN(impl->client, internal::EngineClient::Create(client_options));
  impl->requests.emplace(
      *impl->client, impl->hasher,
      internal::PicRequestsOptions{
          .segments = {.block_tokens = options.block_size, .pad_token = pad_token},
          .timeout = options.io_timeout});
  return std::unique_ptr<PicConnector>(new PicConnector(std::move(impl)));
}

PicConnector::PicConnector(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

PicConnector::~PicConnector() {
  absl::flat_hash_map<std::string, std::shared_ptr<OpenPicRequest>> open;
  {
    absl::MutexLock lock(&impl_->mu);
    open.swap(impl_->open);
  }
  for (auto& [id, entry] : open) {
    absl::MutexLock lock(&entry->mu);
    if (entry->request.has_value()) (void)impl_->requests->End(*entry->request);
  }
}

absl::StatusOr<std::vector<PicTokenSpan>> PicConnector::MarkersFromSeparator(
    std::span<const uint32_t> prompt, std::span<const uint32_t> separator) {
  STRATA_ASSIGN_OR_RETURN(std::vector<internal::SegmentMarker> markers,
                          internal::MarkersFromSeparator(prompt, separator));
  std::vector<PicTokenSpan> spans;
  spans.reserve(markers.size());
  for (const internal::SegmentMarker& m : markers) spans.push_back({m.begin, m.end});
  return spans;
}

absl::StatusOr<PicPlan> PicConnector::Begin(std::string_view request_id,
                                            std::span<const uint32_t> prompt,
                                            std::span<const PicTokenSpan> chunks,
                                            const PicRequestOptions& options) {
  Impl& s = *impl_;
  auto entry = std::make_shared<OpenPicRequest>();
  absl::MutexLock entry_lock(&entry->mu);
  {
    absl::MutexLock lock(&s.mu);
    if (!s.open.try_emplace(std::string(request_id), entry).second) {
      return absl::AlreadyExistsError(
          fmt::format("position-independent request '{}' is open already", request_id));
    }
  }
  std::vector<internal::SegmentMarker> markers;
  markers.reserve(chunks.size());
  for (const PicTokenSpan& span : chunks) markers.push_back({span.begin, span.end});
  const internal::PicPolicy policy{.recompute = static_cast<PicRecompute>(options.recompute),
                                   .legolink_tokens = options.legolink_tokens,
                                   .check_layer = options.check_layer,
                                   .blend_ratio = options.blend_ratio};
  absl::StatusOr<PicRequest> request = s.requests->Begin(prompt, markers, options.tenant, policy);
  if (!request.ok()) {
    // Only this call's entry: an End that ran meanwhile took it out, and a later Begin of the same
    // id may have put its own in.
    absl::MutexLock lock(&s.mu);
    auto it = s.open.find(std::string(request_id));
    if (it != s.open.end() && it->second == entry) s.open.erase(it);
    return request.status();
  }
  entry->request = *std::move(request);
  return internal::ToPicPlan(*entry->request, s.options.block_size, s.options.layout.positional);
}

absl::StatusOr<PicPlan> PicConnector::Publish(std::string_view request_id) {
  return impl_->Step(request_id, &internal::PicRequests::Publish);
}

absl::StatusOr<PicPlan> PicConnector::Refresh(std::string_view request_id) {
  return impl_->Step(request_id, &internal::PicRequests::Refresh);
}

absl::Status PicConnector::Verify(std::string_view request_id) const {
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<OpenPicRequest> entry, impl_->Find(request_id));
  absl::MutexLock lock(&entry->mu);
  if (!entry->request.has_value()) return NotOpen(request_id);
  const PicRequest& request = *entry->request;
  std::vector<ChunkKey> held;
  for (const PicChunkPlacement& chunk : request.chunks) {
    if (chunk.source == PicChunkSource::kShared) {
      held.push_back(request.prompt.segments[chunk.segment].key);
    }
  }
  if (held.empty()) return absl::OkStatus();
  // A round trip on the session: the drop of a session is noticed by the next call on it, and a
  // generation that is still the request's after one means no drop in between.
  absl::StatusOr<std::vector<bool>> resident =
      impl_->client->PoolLookup(held, impl_->options.io_timeout);
  const bool all_resident =
      resident.ok() && std::find(resident->begin(), resident->end(), false) == resident->end();
  if (!all_resident || impl_->client->generation() != request.generation) {
    return absl::AbortedError(fmt::format(
        "request '{}': the daemon session that held its pool pages dropped{}; recompute what was "
        "read from them",
        request_id, resident.ok() ? "" : fmt::format(" ({})", resident.status().ToString())));
  }
  return absl::OkStatus();
}

absl::Status PicConnector::ReportImportance(std::string_view request_id, size_t chunk,
                                            std::span<const float> importance) {
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<OpenPicRequest> entry, impl_->Find(request_id));
  absl::MutexLock lock(&entry->mu);
  if (!entry->request.has_value()) return NotOpen(request_id);
  return impl_->requests->ReportImportance(*entry->request, chunk, importance);
}

absl::Status PicConnector::End(std::string_view request_id) {
  std::shared_ptr<OpenPicRequest> entry;
  {
    absl::MutexLock lock(&impl_->mu);
    auto it = impl_->open.find(std::string(request_id));
    if (it == impl_->open.end()) return NotOpen(request_id);
    entry = std::move(it->second);
    impl_->open.erase(it);
  }
  absl::MutexLock lock(&entry->mu);
  if (!entry->request.has_value()) return absl::OkStatus();
  absl::Status status = impl_->requests->End(*entry->request);
  entry->request.reset();
  return status;
}

size_t PicConnector::open_requests() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->open.size();
}

}  // namespace strata::connector

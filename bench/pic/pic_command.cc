#include "bench/pic/pic_command.h"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstring>
#include <deque>
#include <iostream>
#include <map>
#include <random>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "bench/support/model_layouts.h"
#include "bench/support/synthetic_text.h"
#include "bench/support/zipf_sampler.h"
#include "connector/src/engine_client.h"
#include "connector/src/pic_requests.h"
#include "core/fmt_absl.h"
#include "core/key_hasher.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "storage/device/host_runtime.h"
#include "tests/support/daemon_process.h"

namespace strata::bench {
namespace {

using connector::internal::DevicePoolMapping;
using connector::internal::EngineClient;
using connector::internal::EngineClientOptions;
using connector::internal::PicChunkSource;
using connector::internal::PicRequest;
using connector::internal::PicRequests;
using connector::internal::SegmentKind;
using connector::internal::SegmentMarker;
using Clock = std::chrono::steady_clock;

// Outside the synthetic text's vocabulary, so padding never looks like text.
constexpr uint32_t kPadToken = kSyntheticVocabulary;

// What a writer stores in block `block` of the chunk keyed `key`, and a reader checks: a fill
// byte over every layer of the page, and the key's id and the block number at the start of its
// first and last layers.
struct PageSignature {
  uint64_t key_id = 0;
  uint64_t block = 0;
  uint8_t fill() const {
    return static_cast<uint8_t>((key_id ^ (block * 0x9e3779b97f4a7c15ull)) | 1);
  }
};

void WriteSignature(const DevicePoolMapping& pool, uint32_t page, const PageSignature& sig) {
  const storage::DevicePoolGeometry& geometry = pool.grant().geometry;
  for (uint32_t layer = 0; layer < geometry.num_layers; ++layer) {
    std::byte* bytes = pool.base() + geometry.offset(layer, page);
    std::memset(bytes, sig.fill(), geometry.page_bytes);
    if (layer == 0 || layer + 1 == geometry.num_layers) {
      std::memcpy(bytes, &sig.key_id, 8);
      std::memcpy(bytes + 8, &sig.block, 8);
    }
  }
}

bool HoldsSignature(const DevicePoolMapping& pool, uint32_t page, const PageSignature& sig) {
  const storage::DevicePoolGeometry& geometry = pool.grant().geometry;
  for (uint32_t layer : {0u, geometry.num_layers / 2, geometry.num_layers - 1}) {
    const std::byte* bytes = pool.base() + geometry.offset(layer, page);
    uint64_t key_id = 0;
    uint64_t block = 0;
    std::memcpy(&key_id, bytes, 8);
    std::memcpy(&block, bytes + 8, 8);
    const bool headed = layer == 0 || layer + 1 == geometry.num_layers;
    if (headed && (key_id != sig.key_id || block != sig.block)) return false;
    if (bytes[geometry.page_bytes - 1] != std::byte{sig.fill()}) return false;
  }
  return true;
}

// Pages in use by the open requests: MEPIC's (the distinct T0 pages referenced, plus private
// pages) and the per-request-copy baseline's; their peaks over the whole run, and over the warm
// phase (each engine's second half, after every engine closed its first half's requests: the
// pool has seen the popular passages).
class PageAccounting {
 public:
  struct Request {
    std::vector<uint32_t> t0_pages;
    uint64_t private_pages = 0;
    uint64_t baseline_pages = 0;
  };

  struct Peaks {
    uint64_t mepic = 0;
    uint64_t baseline = 0;
    double ratio() const { return static_cast<double>(baseline) / std::max<uint64_t>(1, mepic); }
  };

  void Open(const Request& request, bool warm) {
    absl::MutexLock lock(&mu_);
    for (uint32_t page : request.t0_pages) {
      if (t0_refs_[page]++ == 0) ++t0_distinct_;
    }
    private_pages_ += request.private_pages;
    baseline_pages_ += request.baseline_pages;
    for (Peaks* peaks : {&all_, warm ? &warm_ : nullptr}) {
      if (peaks == nullptr) continue;
      peaks->mepic = std::max(peaks->mepic, t0_distinct_ + private_pages_);
      peaks->baseline = std::max(peaks->baseline, baseline_pages_);
    }
  }
  void Close(const Request& request) {
    absl::MutexLock lock(&mu_);
    for (uint32_t page : request.t0_pages) {
      auto it = t0_refs_.find(page);
      if (--it->second == 0) {
        t0_refs_.erase(it);
        --t0_distinct_;
      }
    }
    private_pages_ -= request.private_pages;
    baseline_pages_ -= request.baseline_pages;
  }
  Peaks all() const {
    absl::MutexLock lock(&mu_);
    return all_;
  }
  Peaks warm() const {
    absl::MutexLock lock(&mu_);
    return warm_;
  }

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint32_t, uint32_t> t0_refs_ ABSL_GUARDED_BY(mu_);
  uint64_t t0_distinct_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t private_pages_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t baseline_pages_ ABSL_GUARDED_BY(mu_) = 0;
  Peaks all_ ABSL_GUARDED_BY(mu_);
  Peaks warm_ ABSL_GUARDED_BY(mu_);
};

// One engine's tallies.
struct EngineTally {
  uint64_t requests = 0;
  uint64_t recomputed_tokens = 0;
  uint64_t bound_tokens = 0;            // one block per chunk plus the prompt segments
  uint64_t late_recomputed_tokens = 0;  // the engine's second half of requests
  uint64_t late_bound_tokens = 0;
  uint64_t late_requests = 0;
  uint64_t within_bound = 0;
  uint64_t prompt_tokens = 0;
  uint64_t shared = 0;
  uint64_t written = 0;
  uint64_t private_chunks = 0;
  std::map<std::string, uint64_t> private_reasons;  // by status code
  // Requests that found a chunk pending (another engine writing it) and waited for it.
  uint64_t waited_requests = 0;
  uint64_t wrong_pages = 0;
  uint64_t failures = 0;
  uint32_t pool_pages = 0;
  std::string error;

  // Adds `other`'s counts; pool_pages is the larger (the error is not summed: each engine
  // reports its own).
  EngineTally& operator+=(const EngineTally& other) {
    requests += other.requests;
    recomputed_tokens += other.recomputed_tokens;
    bound_tokens += other.bound_tokens;
    late_recomputed_tokens += other.late_recomputed_tokens;
    late_bound_tokens += other.late_bound_tokens;
    late_requests += other.late_requests;
    within_bound += other.within_bound;
    prompt_tokens += other.prompt_tokens;
    shared += other.shared;
    written += other.written;
    private_chunks += other.private_chunks;
    waited_requests += other.waited_requests;
    for (const auto& [reason, count] : other.private_reasons) private_reasons[reason] += count;
    wrong_pages += other.wrong_pages;
    failures += other.failures;
    pool_pages = std::max(pool_pages, other.pool_pages);
    return *this;
  }
};

struct Corpus {
  std::vector<std::vector<uint32_t>> passages;
};

Corpus MakeCorpus(const PicBenchOptions& o) {
  Corpus corpus;
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<uint32_t> length(o.passage_min_tokens, o.passage_max_tokens);
  for (uint32_t p = 0; p < o.corpus_passages; ++p) {
    AppendSyntheticText(corpus.passages.emplace_back(), 1000 + p, length(rng));
  }
  return corpus;
}

struct Prompt {
  std::vector<uint32_t> tokens;
  std::vector<SegmentMarker> markers;
};

Prompt MakePrompt(const PicBenchOptions& o, const Corpus& corpus, const ZipfSampler& popularity,
                  uint32_t chunks, uint64_t request_id, std::mt19937_64& rng) {
  Prompt prompt;
  AppendSyntheticText(prompt.tokens, 1, o.system_tokens);
  std::vector<uint32_t> chosen;
  const uint32_t wanted = std::min(chunks, o.corpus_passages);
  while (chosen.size() < wanted) {
    const uint32_t passage = popularity(rng);
    if (std::find(chosen.begin(), chosen.end(), passage) == chosen.end()) chosen.push_back(passage);
  }
  std::shuffle(chosen.begin(), chosen.end(), rng);
  for (uint32_t passage : chosen) {
    const auto begin = static_cast<uint32_t>(prompt.tokens.size());
    const std::vector<uint32_t>& text = corpus.passages[passage];
    prompt.tokens.insert(prompt.tokens.end(), text.begin(), text.end());
    prompt.markers.push_back({begin, static_cast<uint32_t>(prompt.tokens.size())});
  }
  AppendSyntheticText(prompt.tokens, 1'000'000'000 + request_id, o.question_tokens);
  return prompt;
}

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// The request's pages for the accounting, once its chunks are published.
PageAccounting::Request PagesOf(const PicRequest& request, uint32_t block_tokens,
                                size_t prompt_tokens) {
  PageAccounting::Request pages{.baseline_pages = CeilDiv(prompt_tokens, block_tokens)};
  for (const auto& segment : request.prompt.segments) {
    if (segment.kind == SegmentKind::kPrompt) {
      pages.private_pages += CeilDiv(segment.padded_tokens(), block_tokens);
    }
  }
  for (const auto& chunk : request.chunks) {
    if (chunk.source == PicChunkSource::kShared) {
      pages.t0_pages.insert(pages.t0_pages.end(), chunk.pages.begin(), chunk.pages.end());
      pages.private_pages += 1;  // block 1, recomputed for this request
    } else {
      pages.private_pages += request.prompt.segments[chunk.segment].padded_tokens() / block_tokens;
    }
  }
  return pages;
}

void RunEngine(const PicBenchOptions& o, const KvLayout& layout, const std::string& socket,
               const Corpus& corpus, uint32_t chunks, uint32_t engine, PageAccounting& pages,
               std::barrier<>& in_step, EngineTally& tally) {
  // An engine that cannot run leaves the barrier, so the others do not wait for it.
  auto give_up = [&](std::string error) {
    tally.error = std::move(error);
    in_step.arrive_and_drop();
  };
  storage::HostRuntime runtime;
  EngineClientOptions client_options;
  client_options.socket_path = socket;
  client_options.engine_id = fmt::format("pic-engine-{}", engine);
  client_options.layout = layout;
  client_options.device_runtime = &runtime;
  absl::StatusOr<std::unique_ptr<EngineClient>> client = EngineClient::Create(client_options);
  const absl::StatusOr<KeyHasher> hasher = KeyHasher::Create(layout, {});
  if (!client.ok() || !hasher.ok()) {
    return give_up(fmt::format("{} / {}", client.status(), hasher.status()));
  }
  if (absl::Status up = (*client)->Connect(std::chrono::seconds(30)); !up.ok()) {
    return give_up(fmt::format("connect: {}", up));
  }
  if (auto grant = (*client)->device_pool(); grant.has_value()) {
    tally.pool_pages = grant->geometry.num_pages;
  } else {
    return give_up("the daemon granted no device pool");
  }
  PicRequests requests(**client, *hasher,
                       {.segments = {.block_tokens = o.block_tokens, .pad_token = kPadToken},
                        .timeout = std::chrono::seconds(10)});
  const ZipfSampler popularity(o.corpus_passages, o.zipf_s);
  std::mt19937_64 rng(o.seed * 7919 + chunks * 131 + engine);
  struct Open {
    PicRequest request;
    PageAccounting::Request pages;
  };
  std::deque<Open> open;
  auto close_oldest = [&] {
    pages.Close(open.front().pages);
    if (!requests.End(open.front().request).ok()) ++tally.failures;
    open.pop_front();
  };
  auto signature = [&](const PicRequest& request, size_t chunk, uint64_t block) {
    const ChunkKey& key = request.prompt.segments[request.chunks[chunk].segment].key;
    return PageSignature{.key_id = key.EventId(), .block = block};
  };
  struct Begun {
    uint32_t r = 0;
    size_t prompt_tokens = 0;
    PicRequest request;
  };
  auto begin_request = [&](uint32_t r) -> std::optional<Begun> {
    const uint64_t request_id = (uint64_t{engine} << 32) | r;
    const Prompt prompt = MakePrompt(o, corpus, popularity, chunks, request_id, rng);
    absl::StatusOr<PicRequest> request = requests.Begin(prompt.tokens, prompt.markers);
    if (!request.ok()) {
      ++tally.failures;
      tally.error = fmt::format("{}", request.status());
      return std::nullopt;
    }
    return Begun{.r = r, .prompt_tokens = prompt.tokens.size(), .request = *std::move(request)};
  };
  auto pending = [](const PicRequest& request) {
    return std::any_of(request.chunks.begin(), request.chunks.end(),
                       [](const auto& chunk) { return chunk.source == PicChunkSource::kPending; });
  };
  // Computes the request: writes its kWrite chunks, publishes, checks what it shares, counts.
  auto finish_request = [&](Begun begun) {
    const uint32_t r = begun.r;
    PicRequest& request = begun.request;
    for (size_t c = 0; c < request.chunks.size(); ++c) {
      const auto& chunk = request.chunks[c];
      if (chunk.source == PicChunkSource::kWrite) {
        ++tally.written;
        for (size_t b = 0; b < chunk.pages.size(); ++b) {
          WriteSignature(*request.pool, chunk.pages[b], signature(request, c, b));
        }
      } else if (chunk.source == PicChunkSource::kShared) {
        ++tally.shared;
      } else {
        ++tally.private_chunks;
        ++tally.private_reasons[absl::StatusCodeToString(chunk.why_private.code())];
      }
    }
    if (!requests.Publish(request).ok()) ++tally.failures;
    for (size_t c = 0; c < request.chunks.size(); ++c) {
      const auto& chunk = request.chunks[c];
      if (chunk.source != PicChunkSource::kShared) continue;
      for (size_t b = 0; b < chunk.pages.size(); ++b) {
        if (!HoldsSignature(*request.pool, chunk.pages[b], signature(request, c, b))) {
          ++tally.wrong_pages;
        }
      }
    }
    const uint64_t recomputed = request.recomputed_tokens(o.block_tokens);
    uint64_t bound = uint64_t{o.block_tokens} * request.chunks.size();
    for (const auto& segment : request.prompt.segments) {
      if (segment.kind == SegmentKind::kPrompt) bound += segment.padded_tokens();
    }
    ++tally.requests;
    tally.recomputed_tokens += recomputed;
    tally.bound_tokens += bound;
    tally.prompt_tokens += begun.prompt_tokens;
    if (recomputed <= bound) ++tally.within_bound;
    const bool warm = r >= o.requests / 2;
    if (warm) {
      ++tally.late_requests;
      tally.late_recomputed_tokens += recomputed;
      tally.late_bound_tokens += bound;
    }
    PageAccounting::Request used = PagesOf(request, o.block_tokens, begun.prompt_tokens);
    pages.Open(used, warm);
    open.push_back({std::move(request), std::move(used)});
  };
  // Requests deferred because another engine is writing one of their chunks. Each step's end
  // refreshes them: a request whose chunks are all placed, or that has waited kMaxWaitSteps,
  // runs (a chunk still pending is then computed privately). A chain of waiters (one waits for
  // a chunk its writer, itself waiting, has not published yet) resolves a step per link.
  constexpr uint32_t kMaxWaitSteps = 4;
  struct Waiting {
    Begun begun;
    uint32_t steps = 0;
  };
  std::vector<Waiting> waiting;
  auto refresh_waiting = [&](bool last_chance) {
    std::vector<Waiting> still;
    for (Waiting& w : waiting) {
      ++w.steps;
      if (!requests.Refresh(w.begun.request).ok()) ++tally.failures;
      if (pending(w.begun.request) && w.steps < kMaxWaitSteps && !last_chance) {
        still.push_back(std::move(w));
      } else {
        finish_request(std::move(w.begun));
      }
    }
    waiting = std::move(still);
  };
  for (uint32_t r = 0; r < o.requests; ++r) {
    // The cold phase (each engine's first half) ends with every engine closing its requests:
    // the warm phase's peaks count warm requests alone.
    if (r == o.requests / 2) {
      refresh_waiting(/*last_chance=*/true);
      while (!open.empty()) close_oldest();
    }
    if (open.size() >= std::max(1u, o.in_flight)) close_oldest();
    // A request whose chunk another engine is writing waits (an engine defers such a request
    // to a later step); else it runs now.
    if (std::optional<Begun> begun = begin_request(r); begun.has_value()) {
      if (pending(begun->request)) {
        ++tally.waited_requests;
        waiting.push_back({.begun = *std::move(begun)});
      } else {
        finish_request(*std::move(begun));
      }
    }
    // Engines go in lockstep, a request each per step, so that `in_flight` requests of every
    // engine are open at once whatever the scheduler does.
    in_step.arrive_and_wait();
    refresh_waiting(/*last_chance=*/false);
  }
  refresh_waiting(/*last_chance=*/true);
  while (!open.empty()) close_oldest();
  in_step.arrive_and_drop();
}

// One chunk count on a fresh daemon; its JSON object, or "" (with `failed` set) when a step
// could not run.
std::string RunSetting(const PicBenchOptions& o, const KvLayout& layout, const Corpus& corpus,
                       uint32_t chunks, uint64_t& wrong_pages, bool& failed) {
  absl::StatusOr<std::unique_ptr<test_support::DaemonProcess>> daemon =
      test_support::DaemonProcess::Start(
          {.host_capacity = "64MiB",
           .extra_toml = fmt::format(
               "[device_pool]\nbytes_per_layout = \"{}\"\nblock_tokens = {}\nbackend = \"host\"\n",
               o.pool_bytes, o.block_tokens),
           .start_timeout = std::chrono::seconds(60)});
  if (!daemon.ok()) {
    std::cerr << fmt::format("strata-bench pic: {}\n", daemon.status());
    failed = true;
    return "";
  }
  PageAccounting pages;
  std::vector<EngineTally> tallies(o.engines);
  std::barrier<> in_step(o.engines);
  const auto start = Clock::now();
  {
    std::vector<std::jthread> engines;
    for (uint32_t e = 0; e < o.engines; ++e) {
      engines.emplace_back([&, e] {
        RunEngine(o, layout, (*daemon)->engine_socket(), corpus, chunks, e, pages, in_step,
                  tallies[e]);
      });
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EngineTally all;
  for (const EngineTally& t : tallies) {
    if (!t.error.empty()) {
      std::cerr << fmt::format("strata-bench pic: engine: {}\n", t.error);
      if (t.requests == 0) failed = true;
    }
    all += t;
  }
  (*daemon)->Stop();
  wrong_pages += all.wrong_pages;
  const double n = std::max<double>(1, all.requests);
  const double late = std::max<double>(1, all.late_requests);
  const PageAccounting::Peaks peak = pages.all();
  const PageAccounting::Peaks warm = pages.warm();
  std::cerr << fmt::format(
      "strata-bench pic: {:2} chunks/prompt: peak pages {} (MEPIC) vs {} (per-request copy): "
      "{:.2f}x fewer; warm {} vs {}: {:.2f}x; recomputed {:.0f} tokens/request (bound {:.0f}; "
      "second half {:.0f} vs "
      "{:.0f}) of {:.0f}; chunks shared {} written {} private {} ({}); requests that waited for a "
      "chunk being written {}; wrong pages {}\n",
      chunks, peak.mepic, peak.baseline, peak.ratio(), warm.mepic, warm.baseline, warm.ratio(),
      all.recomputed_tokens / n, all.bound_tokens / n, all.late_recomputed_tokens / late,
      all.late_bound_tokens / late, all.prompt_tokens / n, all.shared, all.written,
      all.private_chunks, fmt::join(all.private_reasons, ", "), all.waited_requests,
      all.wrong_pages);
  std::vector<std::string> reasons;
  for (const auto& [reason, count] : all.private_reasons) {
    reasons.push_back(fmt::format("\"{}\": {}", reason, count));
  }
  return fmt::format(
      "{{\"chunks_per_prompt\": {}, \"requests\": {}, \"failures\": {}, \"seconds\": {:.2f}, "
      "\"pool_pages\": {}, \"peak_pages_mepic\": {}, \"peak_pages_per_request_copy\": {}, "
      "\"pages_ratio\": {:.3f}, \"warm_peak_pages_mepic\": {}, "
      "\"warm_peak_pages_per_request_copy\": {}, \"warm_pages_ratio\": {:.3f}, "
      "\"mean_prompt_tokens\": {:.1f}, "
      "\"mean_recomputed_tokens\": {:.1f}, \"mean_bound_tokens\": {:.1f}, "
      "\"second_half_recomputed_tokens\": {:.1f}, \"second_half_bound_tokens\": {:.1f}, "
      "\"requests_within_bound\": {}, \"chunks_shared\": {}, \"chunks_written\": {}, "
      "\"chunks_private\": {}, \"private_reasons\": {{{}}}, \"requests_waited\": {}, "
      "\"wrong_pages\": {}}}",
      chunks, all.requests, all.failures, seconds, all.pool_pages, peak.mepic, peak.baseline,
      peak.ratio(), warm.mepic, warm.baseline, warm.ratio(), all.prompt_tokens / n,
      all.recomputed_tokens / n, all.bound_tokens / n, all.late_recomputed_tokens / late,
      all.late_bound_tokens / late, all.within_bound, all.shared, all.written, all.private_chunks,
      fmt::join(reasons, ", "), all.waited_requests, all.wrong_pages);
}

}  // namespace

int RunPicCommand(const PicBenchOptions& o) {
  absl::StatusOr<KvLayout> layout = SimLayout(o.geometry, o.chunk_tokens);
  if (!layout.ok()) {
    std::cerr << fmt::format("strata-bench pic: {}\n", layout.status());
    return 1;
  }
  if (o.block_tokens == 0 || o.corpus_passages == 0 || o.engines == 0 ||
      o.passage_min_tokens == 0 || o.passage_max_tokens < o.passage_min_tokens) {
    std::cerr << "strata-bench pic: block, corpus, engines and passage lengths must be positive "
                 "(min <= max)\n";
    return 1;
  }
  const Corpus corpus = MakeCorpus(o);
  uint64_t wrong_pages = 0;
  std::vector<std::string> settings;
  for (uint32_t chunks : o.chunks_per_prompt) {
    bool failed = false;
    std::string json = RunSetting(o, *layout, corpus, chunks, wrong_pages, failed);
    if (failed) return 1;
    settings.push_back(std::move(json));
  }
  std::cout << fmt::format(
      "{{\"workload\": {{\"name\": \"pic\", \"geometry\": \"{}\", \"block_tokens\": {}, "
      "\"corpus_passages\": {}, \"passage_tokens\": [{}, {}], \"zipf_s\": {}, \"engines\": {}, "
      "\"in_flight_per_engine\": {}, \"requests_per_engine\": {}, \"pool_bytes\": \"{}\", "
      "\"pool_backend\": \"host\"}},\n \"settings\": [\n  {}\n ],\n \"wrong_pages\": {}}}\n",
      o.geometry, o.block_tokens, o.corpus_passages, o.passage_min_tokens, o.passage_max_tokens,
      o.zipf_s, o.engines, o.in_flight, o.requests, o.pool_bytes, fmt::join(settings, ",\n  "),
      wrong_pages);
  return wrong_pages > 0 ? 3 : 0;
}

}  // namespace strata::bench

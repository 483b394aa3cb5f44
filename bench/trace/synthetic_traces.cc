#include "bench/trace/synthetic_traces.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "bench/support/synthetic_text.h"
#include "bench/support/zipf_sampler.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace strata::bench {
namespace {

// Cuts prompts into trace blocks with chained ids, remapped to small dense integers.
class BlockNamer {
 public:
  TraceRequest Request(const std::vector<uint32_t>& tokens, int64_t timestamp_ms) {
    TraceRequest request{.timestamp_ms = timestamp_ms,
                         .input_tokens = static_cast<uint32_t>(tokens.size())};
    uint64_t chain = 0;
    for (size_t begin = 0; begin < tokens.size(); begin += kTraceBlockTokens) {
      const size_t end = std::min<size_t>(tokens.size(), begin + kTraceBlockTokens);
      chain = XXH3_64bits_withSeed(tokens.data() + begin, (end - begin) * sizeof(uint32_t), chain);
      auto [it, inserted] = ids_.try_emplace(chain, ids_.size());
      request.blocks.push_back(it->second);
    }
    return request;
  }

 private:
  absl::flat_hash_map<uint64_t, uint64_t> ids_;
};

}  // namespace

Trace MakeMrqaTrace(const MrqaTraceOptions& o) {
  std::mt19937_64 rng(o.seed);
  const ZipfSampler documents(o.documents, o.zipf_s);
  BlockNamer namer;
  Trace trace{.name = "mrqa"};
  struct User {
    std::vector<uint32_t> prompt;
    uint32_t round = 0;
    uint64_t id = 0;
  };
  auto start = [&](uint64_t id) {
    User user{.id = id};
    AppendSyntheticText(user.prompt, 1, o.system_tokens);
    AppendSyntheticText(user.prompt, 1000 + documents(rng), o.document_tokens);
    return user;
  };
  std::vector<User> active;
  uint64_t started = 0;
  while (started < std::min(o.users, o.concurrent_users)) active.push_back(start(started++));
  int64_t now_ms = 0;
  while (!active.empty()) {
    const size_t pick = rng() % active.size();
    User& user = active[pick];
    AppendSyntheticText(user.prompt, (user.id << 20) + 2 * user.round, o.question_tokens);
    trace.requests.push_back(namer.Request(user.prompt, now_ms += 100));
    AppendSyntheticText(user.prompt, (user.id << 20) + 2 * user.round + 1, o.answer_tokens);
    if (++user.round == o.rounds) {
      if (started < o.users) {
        user = start(started++);
      } else {
        active.erase(active.begin() + static_cast<ptrdiff_t>(pick));
      }
    }
  }
  return trace;
}

Trace MakeRagTrace(const RagTraceOptions& o) {
  std::mt19937_64 rng(o.seed);
  const ZipfSampler passages(o.corpus_passages, o.zipf_s);
  BlockNamer namer;
  Trace trace{.name = "rag"};
  for (uint32_t r = 0; r < o.requests; ++r) {
    std::vector<uint32_t> prompt;
    AppendSyntheticText(prompt, 1, o.system_tokens);
    std::vector<uint32_t> chosen;
    while (chosen.size() < o.passages_per_request) {
      const uint32_t passage = passages(rng);
      if (std::find(chosen.begin(), chosen.end(), passage) == chosen.end()) {
        chosen.push_back(passage);
      }
    }
    std::shuffle(chosen.begin(), chosen.end(), rng);
    for (uint32_t passage : chosen) AppendSyntheticText(prompt, 1000 + passage, o.passage_tokens);
    AppendSyntheticText(prompt, (uint64_t{1} << 40) + r, o.question_tokens);
    trace.requests.push_back(namer.Request(prompt, int64_t{r} * 50));
  }
  return trace;
}

}  // namespace strata::bench

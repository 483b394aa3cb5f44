// Synthetic token text for the workload generators (trace/synthetic_traces.h, strata-bench pic):
// a text is named by a 64-bit id, and the same id always gives the same tokens, so two prompts
// that quote one document share its tokens (and so its cache keys) exactly. Stateless and
// thread-safe.
#pragma once

#include <cstdint>
#include <vector>

namespace strata::bench {

// Token ids are drawn from [0, kSyntheticVocabulary).
inline constexpr uint32_t kSyntheticVocabulary = 32000;

// Appends the first `count` tokens of the text named `text_id` to `tokens`.
void AppendSyntheticText(std::vector<uint32_t>& tokens, uint64_t text_id, uint32_t count);

}  // namespace strata::bench

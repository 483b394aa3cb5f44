#include "bench/support/synthetic_text.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace strata::bench {

void AppendSyntheticText(std::vector<uint32_t>& tokens, uint64_t text_id, uint32_t count) {
  for (uint32_t i = 0; i < count; ++i) {
    tokens.push_back(
        static_cast<uint32_t>(XXH3_64bits_withSeed(&i, sizeof(i), text_id) % kSyntheticVocabulary));
  }
}

}  // namespace strata::bench

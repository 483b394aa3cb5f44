// Synthetic traces in the trace format, so a policy is checked on more than the one production
// trace (BASELINES.md, workloads). Prompts are built as token sequences and cut into 512-token
// trace blocks whose ids chain like prefix hashes: equal ids mean equal prefixes, and a
// partial last block's id changes when the prompt grows.
#pragma once

#include <cstdint>

#include "bench/trace/trace.h"

namespace strata::bench {

// Multi-round QA (LMCache's shape): each user reads one of `documents` shared documents (Zipf
// popular) behind a common system prompt, then asks `rounds` questions; each round's prompt is
// the previous prompt plus its answer plus a new question. Users' rounds interleave: a pool
// of `concurrent_users` is active at a time, a finished user is replaced by a new one.
struct MrqaTraceOptions {
  uint32_t users = 600;
  uint32_t concurrent_users = 40;
  uint32_t rounds = 8;
  uint32_t documents = 40;
  uint32_t document_tokens = 4096;
  uint32_t system_tokens = 700;
  uint32_t question_tokens = 120;
  uint32_t answer_tokens = 300;
  double zipf_s = 1.0;
  uint64_t seed = 1;
};
Trace MakeMrqaTrace(const MrqaTraceOptions& options);

// RAG: each request is a system prompt, `passages_per_request` passages drawn Zipf-popular
// from a corpus in random order, and a question. Popular passages recur, but rarely in the same
// order at the same offset: the case prefix caching misses (MEPIC / EPIC).
struct RagTraceOptions {
  uint32_t requests = 8000;
  uint32_t corpus_passages = 4000;
  uint32_t passages_per_request = 4;
  uint32_t passage_tokens = 600;
  uint32_t system_tokens = 1100;
  uint32_t question_tokens = 80;
  double zipf_s = 1.1;
  uint64_t seed = 2;
};
Trace MakeRagTrace(const RagTraceOptions& options);

}  // namespace strata::bench

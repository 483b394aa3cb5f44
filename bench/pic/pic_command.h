// `strata-bench pic`: position-independent chunks in the daemon's device pool (T0), MEPIC's
// workload shape, through a real stratad (a host-backed pool: memfd "device" memory) and the
// connector (EngineClient + PicRequests, one session per engine).
//
// Each request is a system prompt, `chunks` passages drawn Zipf-popular from a corpus (paragraph
// lengths, random order, so the same passage lands at different offsets) and a question. Engines
// (threads, each its own daemon session) keep `in_flight` requests each open at once, as decoding
// requests hold their KV. For every request the engine writes the chunks the pool gave it to
// write (a signature per page), publishes them, checks the signature of every page it shares, and
// releases them when the request leaves.
//
// Reports, per chunk count, the peak pages in use with MEPIC (the distinct T0 pages the open
// requests reference, plus each request's private pages: its prompt segments, block 1 of every
// shared chunk, and the chunks the pool could not take) against a per-request-copy baseline in
// the same run (every open request holds its whole prompt's pages, as CacheBlend and EPIC do),
// and the tokens recomputed per request against MEPIC's bound (one block per chunk plus the
// prompt segments).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata::bench {

struct PicBenchOptions {
  std::string geometry = "llama8b";
  uint32_t chunk_tokens = 256;  // the layout's prefix chunks (a pool page must divide them)
  uint32_t block_tokens = 16;   // a pool page: the engines' KV block
  std::vector<uint32_t> chunks_per_prompt = {2, 4, 8, 16};
  uint32_t corpus_passages = 64;
  uint32_t passage_min_tokens = 128;
  uint32_t passage_max_tokens = 512;
  double zipf_s = 1.0;
  uint32_t system_tokens = 64;
  uint32_t question_tokens = 32;
  uint32_t engines = 4;
  uint32_t in_flight = 8;  // open requests per engine
  uint32_t requests = 64;  // per engine and chunk count
  std::string pool_bytes = "3GiB";
  uint64_t seed = 7;
};

// Prints one JSON document to stdout and a summary to stderr. Exit code: 0; 1 when a step could
// not run (the daemon, a session); 3 when a shared page did not hold what its writer wrote.
int RunPicCommand(const PicBenchOptions& options);

}  // namespace strata::bench

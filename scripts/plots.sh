#!/usr/bin/env bash
# plots.sh [BUILD]: runs the project's benchmarks from the Release tree BUILD (default: $BUILD,
# else build/release) with short settings, and draws the figures of docs/benchmarks.md from
# their own output with gnuplot (scripts/plots/NAME.gp) into docs/NAME.png:
#   eviction-conversation  strata-bench trace: every policy on the conversation trace     ~30 s
#   store-load-bandwidth   host_tier_bench BM_StoreLoadByChunkSize, 3 repetitions          ~25 s
#   lookup-latency         controller_bench --holders=1 --latencies (100 x 1M chunks)      ~45 s
#   ttft-prompt-length     bench/engines/ttft_bench.py --lengths: vLLM and SmolLM2 in the   ~4 min
#                          engines environment (scripts/engines-env.sh); without it, the
#                          PNG is left as it is and the script says so
# About 6 minutes on 2 cores. Needs BUILD's strata-bench, host_tier_bench, controller_bench,
# stratad, strata and the connector's Python module (`make plots` builds them), gnuplot and
# python3. Each benchmark's output and each table drawn stay in BUILD/plots/. A PNG is replaced
# only once its figure is drawn; a failing benchmark or gnuplot fails the run.
set -euo pipefail
build=${1:-${BUILD:-}}
if [ -n "$build" ]; then build=$(realpath "$build"); fi
cd "$(dirname "$0")/.."
build=${build:-$PWD/build/release}
for binary in bench/strata-bench bench/micro/host_tier_bench bench/micro/controller_bench; do
  if [ ! -x "$build/$binary" ]; then
    echo "plots: no $build/$binary (make plots builds what the plots need)" >&2
    exit 1
  fi
done
work=$build/plots
mkdir -p "$work"
term=png
if gnuplot -e 'set terminal' 2>&1 | grep -q pngcairo; then term=pngcairo; fi
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
note="measured $(date +%F) on $(nproc) cores (${cpu:-unknown CPU}), load average"
note+=" $(cut -d' ' -f1 /proc/loadavg) at the start, by scripts/plots.sh"

# draw NAME TABLE: BUILD/plots/NAME.out (a benchmark's output) -> tables.py TABLE ->
# BUILD/plots/NAME.dat -> scripts/plots/NAME.gp -> docs/NAME.png.
draw() {
  local name=$1 table=$2
  python3 scripts/plots/tables.py "$table" <"$work/$name.out" >"$work/$name.dat"
  gnuplot -e "data='$work/$name.dat'; out='$work/$name.png'; term='$term'; note='$note'" \
    "scripts/plots/$name.gp"
  mv "$work/$name.png" "docs/$name.png"
  echo "plots: docs/$name.png ($((SECONDS - started)) s)"
}

started=$SECONDS
"$build/bench/strata-bench" trace --capacity 1%,2%,5%,10%,25%,50% \
  >"$work/eviction-conversation.out"
draw eviction-conversation eviction

started=$SECONDS
"$build/bench/micro/host_tier_bench" --benchmark_filter=BM_StoreLoadByChunkSize \
  --benchmark_repetitions=3 --benchmark_report_aggregates_only=true --benchmark_format=csv \
  >"$work/store-load-bandwidth.out"
draw store-load-bandwidth store-load

started=$SECONDS
"$build/bench/micro/controller_bench" --holders=1 --lookups=100000 \
  --latencies="$work/lookup-latency.out" >"$work/lookup-latency.log"
draw lookup-latency lookup

started=$SECONDS
engines=$(bash scripts/engines-env.sh path vllm)
if [ -x "$engines/bin/python" ]; then
  # The daemon, CLI and connector module of BUILD (ahead of the environment's own path entry).
  STRATA_STRATAD=$build/daemon/stratad STRATA_CLI=$build/cli/strata \
    STRATA_ENGINES_BUILD=$build/engines \
    PYTHONPATH=$build/connector/python:$PWD/connector/python${PYTHONPATH:+:$PYTHONPATH} \
    "$engines/bin/python" bench/engines/ttft_bench.py --lengths 512,1024,2048,4096,7680 \
    >"$work/ttft-prompt-length.out"
  draw ttft-prompt-length ttft
else
  echo "plots: docs/ttft-prompt-length.png left as it is: no vLLM engines environment" \
    "($engines; make engines-env installs it)"
fi

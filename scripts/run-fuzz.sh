#!/usr/bin/env bash
# run-fuzz.sh BUILD SECONDS "TARGET..." [LIBFUZZER_FLAG...]: runs each libFuzzer target of the
# fuzz tree BUILD for SECONDS over a scratch copy of its corpus (tests/fuzz/corpus/<target>) and
# prints its executions, executions per second and peak memory. Any crash, sanitizer report,
# leak, timeout or out-of-memory fails the run, its input left in BUILD/findings/<target>/.
set -euo pipefail
build=$1 seconds=$2 targets=$3
shift 3
for t in $targets; do
  work=$build/fuzz-corpus/$t found=$build/findings/$t
  rm -rf "$work"
  mkdir -p "$work" "$found"
  cp tests/fuzz/corpus/"$t"/* "$work"/
  echo "== $t (${seconds}s)"
  if ! "$build"/tests/fuzz/"$t" -max_total_time="$seconds" "$@" -rss_limit_mb=2048 -timeout=10 \
      -print_final_stats=1 -artifact_prefix="$found"/ "$work" >"$found"/log.txt 2>&1; then
    tail -60 "$found"/log.txt
    echo "FAIL: $t (input in $found/)"
    exit 1
  fi
  grep -E "stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb" \
    "$found"/log.txt
done

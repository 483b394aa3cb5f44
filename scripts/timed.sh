#!/usr/bin/env bash
# timed.sh NAME COMMAND [ARG...]: runs COMMAND and, when STRATA_STAGE_LOG names a file, appends
# "NAME SECONDS STATUS" to it, so that .ci/run can print each stage's wall time at its end.
# Exits with COMMAND's status.
set -uo pipefail
name=$1
shift
start=$EPOCHREALTIME
"$@"
status=$?
if [ -n "${STRATA_STAGE_LOG:-}" ]; then
  awk -v n="$name" -v a="$start" -v b="$EPOCHREALTIME" -v s="$status" \
    'BEGIN { printf "%s %.1f %d\n", n, b - a, s }' >>"$STRATA_STAGE_LOG"
fi
exit $status

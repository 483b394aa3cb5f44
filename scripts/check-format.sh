#!/usr/bin/env bash
# Fails when a tracked C++/CUDA source differs from clang-format's output (.clang-format: Google
# base, 100 columns). With BASE set (a commit), checks only files changed since BASE.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
if [ -n "${BASE:-}" ]; then
  files=$(git diff --name-only --diff-filter=ACMR "$BASE" -- '*.h' '*.cc' '*.cu' '*.cuh')
else
  files=$(git ls-files '*.h' '*.cc' '*.cu' '*.cuh')
fi
[ -z "$files" ] && exit 0
bad=()
for f in $files; do
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check-format: these files need clang-format (run 'make format'):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "check-format: $(echo "$files" | wc -w) files clean"

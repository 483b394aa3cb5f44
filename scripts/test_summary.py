#!/usr/bin/env python3
"""Prints what the last ctest run in a build tree skipped, and why.

ctest counts a skipped test apart from the passed ones (each gtest case is its own ctest entry,
and a case that calls GTEST_SKIP is reported as skipped: cmake/StrataHelpers.cmake), but it lists
skips without their reasons. This reads the run's log (Testing/Temporary/LastTest.log) and prints
the number of skipped cases and, per test binary and reason, how many skipped for it.

Usage: test_summary.py BUILD_DIR
"""

import collections
import pathlib
import re
import sys

HEADER = re.compile(r"^\d+/\d+ Testing: (\S+)")
SKIP_MARK = "Skip regular expression found in output"
SKIPPED_AT = re.compile(r": Skipped$")


def skipped_tests(log_lines):
    """Yields (test name, reason) for each test of the log that ctest reported as skipped."""
    name, output, skipped = None, [], False
    for line in log_lines:
        header = HEADER.match(line)
        if header:
            name, output, skipped = header.group(1), [], False
            continue
        if name is None:
            continue
        if SKIP_MARK in line:
            skipped = True
        if line.startswith(f'"{name}" end time'):
            if skipped:
                yield name, reason_of(output)
            name = None
            continue
        output.append(line)


def reason_of(output):
    """The message GTEST_SKIP printed: the lines after "file:line: Skipped", up to gtest's tag."""
    for i, line in enumerate(output):
        if SKIPPED_AT.search(line):
            reason = []
            for follow in output[i + 1:]:
                if follow.startswith("[  SKIPPED ]"):
                    break
                reason.append(follow.strip())
            return " ".join(r for r in reason if r) or "(no reason given)"
    return "(no reason found in the output)"


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    log = pathlib.Path(argv[1]) / "Testing" / "Temporary" / "LastTest.log"
    if not log.exists():
        print(f"test summary: no ctest log at {log}", file=sys.stderr)
        return 1
    skips = list(skipped_tests(log.read_text(errors="replace").splitlines()))
    print(f"ctest: {len(skips)} test case(s) skipped (counted as skipped, not passed)")
    grouped = collections.Counter((name.split(".", 1)[0], reason) for name, reason in skips)
    for (binary, reason), count in sorted(grouped.items()):
        print(f"  {binary}: {count} skipped: {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

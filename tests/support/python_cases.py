"""The command line of a Python test script that ctest runs case by case (strata_python_tests
in cmake/StrataHelpers.cmake): `--list` prints its cases as Class.case; given case names (every
case by default), it runs them and reports each skipped one with its reason and the marker
ctest's SKIP_REGULAR_EXPRESSION matches, so that a skip is never counted as a pass.
"""

import pathlib
import sys
import unittest


def case_ids(cases):
    """Class.case of every test method of the TestCase classes `cases`."""
    loader = unittest.defaultTestLoader
    return [f"{case.__name__}.{name}" for case in cases for name in loader.getTestCaseNames(case)]


def report_skip(script, case_id, reason):
    print(f"{pathlib.Path(script).name}: Skipped\n{reason}\n[  SKIPPED ] {case_id}")


def run_cases(script, module, names):
    """Runs the cases `names` of `module`; the exit code (1 when one failed)."""
    suite = unittest.defaultTestLoader.loadTestsFromNames(names, module)
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(suite)
    if not result.wasSuccessful():
        return 1
    for case, reason in result.skipped:
        report_skip(script, case.id(), reason)
    return 0


def main(argv, script, module, cases):
    """The whole command line: --list, or run the cases named in argv[1:] (all by default)."""
    if argv[1:] == ["--list"]:
        print("\n".join(case_ids(cases)))
        return 0
    return run_cases(script, module, argv[1:] or case_ids(cases))

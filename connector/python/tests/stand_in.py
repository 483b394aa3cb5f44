"""Runs a script in a child interpreter that imports a stand-in package written under `root`
(an engine that cannot be installed here) before anything else, with the tests directory on its
path too, so the script can reuse the tests' fakes."""

import os
import subprocess
import sys


def run_with_stand_in(root, script):
    """The CompletedProcess (text output) of `python -c script` with `root` first on its path."""
    env = dict(os.environ)
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join([root, here, env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          timeout=60)

"""Regenerate the parity fixtures: ``python tests/parity/regen.py`` (main venv; ``make parity-fixtures``).

Launches ``tests/parity/make_fixtures.py`` (as a script) under the reference venv with the
reference checkout and this repository's ``src`` on PYTHONPATH, CPU JAX and the reference's
persistent compilation cache (locations from :mod:`dreamer_parity.reference.setup`:
``$DREAMER_PARITY_REF_ROOT`` or ``~/.cache/dreamer-parity``).  Writes
``tests/fixtures/parity/{regime_a.npz, regime_b.npz, meta.json}``.  Takes 2-10 minutes
(one XLA compile of the reference train step; programs with host callbacks are not cached).

Raises SystemExit with the set-up command when the reference set-up is missing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAKE_FIXTURES = Path(__file__).resolve().with_name("make_fixtures.py")


def main(argv=None) -> int:
    from dreamer_parity.reference import setup
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(REPO / "tests" / "fixtures" / "parity"))
    ap.add_argument("--regime", choices=("a", "b", "both"), default="both")
    args = ap.parse_args(argv)
    try:
        paths = setup.check_setup()
    except setup.SetupError as e:
        raise SystemExit(f"parity fixtures: {e}")
    env = dict(os.environ)
    env.update({
        "PYTHONPATH": os.pathsep.join([str(paths["checkout"]), str(REPO / "src")]),
        "JAX_PLATFORMS": "cpu",
        "JAX_COMPILATION_CACHE_DIR": str(paths["jaxcache"]),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    })
    cmd = [str(paths["python"]), str(MAKE_FIXTURES), "--out", args.out, "--regime", args.regime]
    return subprocess.call(cmd, env=env, cwd=str(REPO))


if __name__ == "__main__":
    sys.exit(main())

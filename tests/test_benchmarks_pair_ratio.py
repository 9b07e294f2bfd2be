"""The pairing script (benchmarks/pair_ratio.py) run as its users run it: bad arguments stop
it before any benchmark runs.  A whole pairing at the smallest size runs in
test_benchmarks_smallest.py (it needs the reference set-up)."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("args, name", [(["--pairs", "0"], "error: --pairs 0: must lie in 1..100"),
                                        (["--seeds", "0"], "error: --seeds 0: must lie in 1..1024"),
                                        (["--timed-chunks", "0"],
                                         "error: --timed-chunks 0: must lie in 1..1000"),
                                        (["--profile", "tiny"], "argument --profile")])
def test_bad_arguments_stop_before_any_benchmark_runs(args, name, tmp_path):
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "benchmarks/pair_ratio.py", *args, "--out", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and name in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert r.stdout == "" and not out.exists()

"""Every script in benchmarks/ runs, end to end, at its smallest size.

Each is run as its users run it (a fresh interpreter, ``python benchmarks/<script>``), so a
change of the params schema, the agent's config or the reference's launcher that breaks a
benchmark fails here.  No figure is judged: the speed figures come from the scripts run on
an idle machine (docs/PERFORMANCE.md).  ``accel_check.py`` runs end to end in
test_benchmarks_accel_check.py, ``dreamer_parity.device_reference`` in test_reference_jax010.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dreamer_parity import params as P
from dreamer_parity.reference import setup as rs

REPO = Path(__file__).resolve().parents[1]


def _run(args: list[str], timeout: int = 900, env: dict | None = None) -> str:
    r = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True,
                       timeout=timeout, env={**os.environ, **(env or {})})
    assert r.returncode == 0, (args, r.stdout[-2000:], r.stderr[-3000:])
    return r.stdout


def _result(stdout: str) -> dict:
    lines = [x for x in stdout.splitlines() if x.startswith("RESULT ")]
    assert lines, stdout[-2000:]
    return json.loads(lines[-1][len("RESULT "):])


def _reference_or_skip():
    try:
        rs.check_setup()
    except rs.SetupError as e:
        pytest.skip(f"reference not set up: run `make reference-setup` ({e})")


@pytest.fixture(scope="module")
def smoke_params(tmp_path_factory) -> Path:
    """The smoke round of params.yaml as a complete params file."""
    path = tmp_path_factory.mktemp("smoke") / "params.yaml"
    path.write_text(yaml.safe_dump(P.smoke_params(P.load(REPO / "params.yaml")),
                                   sort_keys=False))
    return path


def test_bench_analysis_times_the_kept_round():
    out = _run(["benchmarks/bench_analysis.py"])
    assert "analysis benchmark: round " in out and "whole CLI, fresh interpreter" in out
    assert "(exit 0;" in out or "(exit 1;" in out


def test_bench_candidate_at_its_smallest():
    res = _result(_run(["benchmarks/bench_candidate.py", "--profile", "smoke", "--seeds", "1",
                        "--rows", "1184", "--timed-chunks", "1", "--no-flops", "--reference",
                        "none", "--skip-cold"]))
    assert res["profile"] == "smoke" and res["throughput"]["1"]["seed_updates_per_s"] > 0


def test_profile_candidate_at_its_smallest():
    out = _run(["benchmarks/profile_candidate.py", "--profile", "smoke", "--seeds", "1",
                "--updates", "1", "--top", "3"],
               env={"XLA_FLAGS": "--xla_cpu_enable_xprof_traceme=true"})
    assert "per update" in out


def test_fingerprint_candidate_at_its_smallest(smoke_params):
    out = _run(["benchmarks/fingerprint_candidate.py", "--params", str(smoke_params),
                "--seeds", "0", "--points", "1"])
    lines = out.splitlines()
    assert lines[0].startswith("train_step ") and len(lines[0].split()[1]) == 64
    assert any(x.startswith("records s0 ") for x in lines)


def test_pair_ratio_and_bench_reference_at_their_smallest():
    # one pairing: bench_candidate.py and bench_reference.py, both at the smoke widths
    _reference_or_skip()
    res = _result(_run(["benchmarks/pair_ratio.py", "--pairs", "1", "--seeds", "1",
                        "--timed-chunks", "1", "--profile", "smoke"], timeout=1800))
    assert res["profile"] == "smoke" and len(res["pairs"]) == 1
    assert res["median_ratio"] == res["pairs"][0]["ratio"] > 0


def test_reference_mirror_probe_at_its_smallest(smoke_params, tmp_path):
    _reference_or_skip()
    out = tmp_path / "probe"
    _run(["benchmarks/reference_mirror_probe.py", "--params", str(smoke_params), "--seed", "0",
          "--out", str(out)], timeout=1800)
    assert (out / "probe.heads.npz").is_file()

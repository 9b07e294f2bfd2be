"""The reference's train step compiled for a TPU (compile only): what runs without libtpu.

The compiling itself needs the libtpu package (not in requirements.lock, absent in CI);
tested here: the refusals before anything runs, and the figures the docs quote from
benchmarks/results/2026-12-07-reference-tpu-opcodes.json."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dreamer_parity.reference import compile_runner

REPO = Path(__file__).resolve().parents[1]
PARAMS = "benchmarks/results/2026-12-06-reference-cpu-jax010-s5-2400/params.yaml"


def test_the_compile_runner_refuses_without_libtpu(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv(compile_runner.ENV_LIBTPU, str(tmp_path))      # holds no libtpu
    ran = []
    monkeypatch.setattr(compile_runner.runner, "main", lambda argv=None: ran.append(argv))
    with pytest.raises(SystemExit) as e:
        compile_runner.main(["--seed", "0"])
    assert e.value.code == 2 and not ran
    err = capsys.readouterr().err
    assert err.startswith("reference compile runner: error: the libtpu package is not "
                          "importable; set $DREAMER_PARITY_LIBTPU") and err.count("\n") == 1


@pytest.mark.parametrize("extra, message", [
    (["--seed", "5", "--libtpu", "nowhere"], "--libtpu nowhere: no libtpu/__init__.py there"),
    (["--seed", "x", "--libtpu", "nowhere"], "--seed must be a non-negative integer"),
    (["--seed", "5", "--libtpu", "nowhere", "--set", "rows=3"], "rows"),
])
def test_the_script_refuses_bad_input_before_anything(tmp_path, extra, message):
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "LIBTPU_INIT_ARGS"}
    r = subprocess.run([sys.executable, "benchmarks/reference_tpu_opcodes.py", "--params",
                        PARAMS, "--out", str(out), *extra], cwd=REPO, capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not out.exists()


def test_the_kept_figures_have_no_fused_multiply_add():
    # docs/DEVIATIONS.md T4 and REFERENCE_RUN.md quote this file
    doc = json.loads((REPO / "benchmarks/results/2026-12-07-reference-tpu-opcodes.json")
                     .read_text())
    assert doc["schema"] == "reference_tpu_opcodes/1" and doc["seed"] == 5
    assert doc["compile"]["device_kind"] == "TPU v5 lite"
    assert doc["compile"]["matmul_precision"] == "highest"
    assert doc["fused_multiply_adds"] == {}
    assert not [k for k in doc["opcodes"] if "fma" in k]
    assert doc["opcodes"]["vmul.f32"] > 100_000 and doc["opcodes"]["vsub.f32"] > 100_000
    assert doc["invocation"]["provenance"]["repo"]["dirty"] is False

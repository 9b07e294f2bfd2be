"""The mirror-column probe of the two-hot heads' output layer (dreamer_parity.reference.mirror_gemm)
on the CPU: its operands, its count, its command line, and the two runs of autotune_pair."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dreamer_parity import params
from dreamer_parity.reference import mirror_gemm as mg

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "dreamer_parity.reference.mirror_gemm"]
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}


def test_the_operands_are_mirror_equal_but_the_padding_column():
    ops = mg.mirror_operands((3, 5), units=7)
    assert {k: v.shape for k, v in ops.items()} == {
        "x": (3, 5, 7), "w": (7, 256), "b": (256,), "g": (3, 5, 256)}
    assert all(v.dtype == np.float32 for v in ops.values())
    j = np.arange(127)
    for k in ("w", "b", "g"):
        assert np.array_equal(ops[k][..., j], ops[k][..., 254 - j]), k
        assert not np.array_equal(ops[k][..., :127], ops[k][..., 128:255]), k   # not constant
    assert not np.array_equal(ops["w"][:, 255], ops["w"][:, 0])
    assert mg.UNITS == params.PROFILES["full"]["units"] == 64
    with pytest.raises(ValueError, match=r"dimensions must be positive, got lead \(0, 2\)"):
        mg.mirror_operands((0, 2))


def test_mirror_diff_counts_pairs_apart_in_any_bit_and_their_ulps():
    out = np.tile(mg.mirror_operands((4,))["g"], (2, 1, 1))      # [2, 4, 256], mirror-equal
    assert mg.mirror_diff(out) == {"pairs": 127, "differ": 0, "max_ulp": 0, "first": None}
    out[1, 2, 254 - 9] = np.nextafter(out[1, 2, 9], np.float32(np.inf))   # one ulp, pair 9
    out[0, 0, 254 - 40] = np.nextafter(np.nextafter(out[0, 0, 40], np.float32(0)),
                                       np.float32(0))                     # two ulps, pair 40
    out[0, 1, 255] += 1                                                   # padding: ignored
    assert mg.mirror_diff(out) == {"pairs": 127, "differ": 2, "max_ulp": 2, "first": 9}
    z = np.zeros((1, 255), np.float32)
    z[0, 254] = -0.0                                      # same value, other bits: differs
    assert mg.mirror_diff(z) == {"pairs": 127, "differ": 1, "max_ulp": 0, "first": 0}
    with pytest.raises(ValueError, match=r"expected float32 \[..., >=255\], got float64"):
        mg.mirror_diff(np.zeros((2, 256)))
    with pytest.raises(ValueError, match=r"got float32 \(2, 254\)"):
        mg.mirror_diff(np.zeros((2, 254), np.float32))


@pytest.mark.parametrize("precision", ["default", "highest"])
def test_on_the_cpu_no_mirror_pair_differs(precision):
    """XLA:CPU keeps every mirror pair bitwise equal in both products at both row counts."""
    got = mg.probe(precision)
    assert (got["backend"], got["precision"]) == ("cpu", precision)
    shapes = {"replay": {"forward": [16, 64, 256], "gradient": [64, 256]},
              "imagination": {"forward": [1024, 16, 256], "gradient": [64, 256]}}
    for name, products in got["results"].items():
        for what, r in products.items():
            assert r["shape"] == shapes[name][what], (name, what)
            assert (r["pairs"], r["differ"], r["max_ulp"], r["first"]) == (127, 0, 0, None), (
                name, what)
    assert sorted(got["results"]) == ["imagination", "replay"]
    with pytest.raises(ValueError, match="--precision: unknown value 'high'"):
        mg.probe("high")


def test_the_command_line_prints_one_json_line_and_refuses_in_one_line():
    r = subprocess.run([*CLI, "--platform", "cpu", "--precision", "highest"], capture_output=True,
                       text=True, env=ENV, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1
    got = json.loads(lines[0])
    assert (got["backend"], got["precision"]) == ("cpu", "highest")
    assert [got["results"][n][w]["differ"] for n in ("replay", "imagination")
            for w in ("forward", "gradient")] == [0, 0, 0, 0]
    for args, message in ((["--platform", "gpu"],
                           "mirror_gemm: error: --platform: unknown value 'gpu'; expected one "
                           "of cpu, cuda, tpu"),
                          (["--platform", "cpu", "--precision", "low"],
                           "mirror_gemm: error: --precision: unknown value 'low'; expected one "
                           "of default, highest")):
        r = subprocess.run([*CLI, *args], capture_output=True, text=True, env=ENV, timeout=300)
        assert (r.returncode, r.stdout, r.stderr.strip()) == (2, "", message)
    # a platform jax cannot reach here: one line, no traceback
    r = subprocess.run([*CLI, "--platform", "tpu"], capture_output=True, text=True, env=ENV,
                       timeout=300)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("mirror_gemm: error: --platform tpu: jax cannot run there (")
    assert len(r.stderr.strip().splitlines()) == 1


def test_the_command_line_runs_default_at_jax_s_own_precision_whatever_the_environment():
    # an inherited JAX_DEFAULT_MATMUL_PRECISION would make "default" another precision
    env = {**ENV, "JAX_DEFAULT_MATMUL_PRECISION": "highest"}
    r = subprocess.run([*CLI, "--platform", "cpu"], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout)
    assert (got["precision"], got["process_precision"]) == ("default", None)


def test_autotune_pair_on_the_cpu_runs_the_probe_twice_without_the_flag(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    got = mg.autotune_pair("cpu")
    assert (got["platform"], got["precision"], got["flag_passed"]) == ("cpu", "default", False)
    assert got["autotune_off"]["xla_flags"] == got["autotune_on"]["xla_flags"] == ""
    assert got["autotune_off"]["results"] == got["autotune_on"]["results"]
    assert got["autotune_on"]["results"]["imagination"]["gradient"]["differ"] == 0
    with pytest.raises(ValueError, match="--platform: unknown value 'rocm'"):
        mg.autotune_pair("rocm")


def test_autotune_pair_on_a_gpu_passes_the_flag_to_one_run_only(monkeypatch):
    """No GPU here: the two processes' environments and command lines, as subprocess gets
    them, and a failed process's last line."""
    calls = []

    def fake_run(cmd, env, **kw):
        calls.append((cmd, env.get("XLA_FLAGS")))
        return subprocess.CompletedProcess(cmd, 0, json.dumps({"xla_flags": env.get("XLA_FLAGS")})
                                           + "\n", "")

    monkeypatch.setattr(mg.subprocess, "run", fake_run)
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_enable_latency_hiding_scheduler=true")
    got = mg.autotune_pair("cuda", "highest", python="py")
    assert got["flag_passed"] is True
    assert [c[1] for c in calls] == [
        "--xla_gpu_enable_latency_hiding_scheduler=true --xla_gpu_autotune_level=0",
        "--xla_gpu_enable_latency_hiding_scheduler=true"]
    assert calls[0][0] == ["py", "-m", "dreamer_parity.reference.mirror_gemm", "--platform",
                           "cuda", "--precision", "highest"]
    assert got["autotune_off"] == {"xla_flags": calls[0][1]}
    monkeypatch.setattr(mg.subprocess, "run", lambda cmd, env, **kw: subprocess.CompletedProcess(
        cmd, 2, "", "x\nmirror_gemm: error: --platform cuda: jax cannot run there (x)\n"))
    with pytest.raises(RuntimeError, match=r"^mirror_gemm autotune_off: exit 2: mirror_gemm: "
                                           r"error: --platform cuda: jax cannot run there \(x\)$"):
        mg.autotune_pair("cuda")

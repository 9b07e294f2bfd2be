"""The mirror probe: its perturbation, its installation, its launch and its refusals."""

import subprocess
import sys
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dreamer_parity.reference import launch, probe_runner

REPO = Path(__file__).resolve().parents[1]


def test_mirror_ulp_moves_the_upper_half_by_one_ulp_and_keeps_the_gradient():
    x = np.random.default_rng(0).normal(size=(3, 255)).astype(np.float32) * 4
    x[0, 200] = 0.0
    y = np.asarray(jax.jit(probe_runner.mirror_ulp)(jnp.asarray(x)))
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y[:, :128], x[:, :128])       # lower half and middle
    up, got = x[:, 128:], y[:, 128:]
    bits = up.view(np.uint32) ^ np.uint32(1)
    want = bits.view(np.float32)
    nonzero = up != 0
    np.testing.assert_array_equal(got[nonzero], want[nonzero])
    # one unit in the last place, up or down, never leaving the binade
    np.testing.assert_array_equal(np.abs(got[nonzero] - up[nonzero]),
                                  np.spacing(np.abs(up[nonzero])))
    assert 0 < np.mean(np.abs(got[nonzero]) > np.abs(up[nonzero])) < 1     # both directions
    assert got[0, 200 - 128] in (0.0, np.float32(1e-45))         # zero: a subnormal or flushed
    # the gradient of any function of the output is that of the unperturbed input
    w = jnp.asarray(np.random.default_rng(1).normal(size=255).astype(np.float32))
    g = jax.grad(lambda l: (probe_runner.mirror_ulp(l) * w).sum())(jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(g), np.broadcast_to(np.asarray(w), x.shape))


def test_mirror_ulp_gradient_keeps_the_values_and_moves_the_upper_gradient_by_one_ulp():
    x = np.random.default_rng(2).normal(size=(3, 255)).astype(np.float32)
    y = np.asarray(jax.jit(probe_runner.mirror_ulp_gradient)(jnp.asarray(x)))
    np.testing.assert_array_equal(y, x)
    w = np.random.default_rng(3).normal(size=255).astype(np.float32)
    g = np.asarray(jax.jit(jax.grad(
        lambda l: (probe_runner.mirror_ulp_gradient(l) * jnp.asarray(w)).sum()))(jnp.asarray(x)))
    want = np.broadcast_to(w, x.shape)
    np.testing.assert_array_equal(g[:, :128], want[:, :128])
    np.testing.assert_array_equal(g[:, 128:], (want[:, 128:].view(np.uint32) ^ np.uint32(1)
                                               ).view(np.float32))


@pytest.mark.parametrize("fn", [probe_runner.mirror_ulp, probe_runner.mirror_ulp_gradient])
@pytest.mark.parametrize("logits, message", [
    (jnp.zeros((2, 256), jnp.float32), "odd number of bins, got 256"),
    (jnp.zeros((2, 255), jnp.bfloat16), "float32 logits, got bfloat16"),
])
def test_mirror_ulp_refuses(fn, logits, message):
    with pytest.raises(ValueError, match=message):
        fn(logits)


def test_probe_names_and_an_unknown_pass():
    assert probe_runner.probe_name("forward") == "dreamerv3.jaxutils.TwoHotDist.__init__"
    assert probe_runner.probe_name("gradient") == "dreamerv3.jaxutils.TwoHotDist.__init__ (gradient)"
    with pytest.raises(ValueError, match=r"\$DREAMER_PARITY_MIRROR_PROBE: unknown pass 'both'"):
        probe_runner.install("both")          # refused before anything is imported or replaced


def test_the_probe_runner_refuses_an_unknown_pass_before_running(monkeypatch, capsys):
    monkeypatch.setenv(probe_runner.ENV, "sideways")
    ran = []
    monkeypatch.setattr(probe_runner.runner, "main", lambda argv=None: ran.append(argv))
    with pytest.raises(SystemExit) as e:
        probe_runner.main(["--seed", "0"])
    assert e.value.code == 2 and not ran
    assert capsys.readouterr().err == ("reference probe runner: error: $DREAMER_PARITY_MIRROR_PROBE: "
                                       "unknown pass 'sideways'; expected one of ('forward', 'gradient')\n")


def test_install_perturbs_odd_logits_only_and_is_recorded(monkeypatch):
    """install() wraps TwoHotDist.__init__ (a stand-in module here; the reference venv has
    the real one): odd-sized logits reach the original perturbed, even ones untouched; the
    protocol patches' apply gains the probe's name, as run.json lists it."""
    seen = []

    class TwoHotDist:
        def __init__(self, logits, bins, dims=0):
            seen.append((np.asarray(logits), dims))

    jaxutils = types.ModuleType("dreamerv3.jaxutils")
    jaxutils.TwoHotDist = TwoHotDist
    pkg = types.ModuleType("dreamerv3")
    pkg.jaxutils = jaxutils
    monkeypatch.setitem(sys.modules, "dreamerv3", pkg)
    monkeypatch.setitem(sys.modules, "dreamerv3.jaxutils", jaxutils)
    plain = TwoHotDist.__init__
    apply = probe_runner._apply_with_probe(lambda *a, **k: ["dreamerv3.jaxutils.TwoHotDist.mean"])
    assert apply("exact", "stock", 0) == ["dreamerv3.jaxutils.TwoHotDist.mean", probe_runner.PROBE]
    odd = jnp.full((2, 255), 1.5, jnp.float32)
    even = jnp.full((2, 10), 1.5, jnp.float32)
    jaxutils.TwoHotDist(odd, None, dims=1)
    jaxutils.TwoHotDist(even, None)
    (a, dims_a), (b, _) = seen
    assert dims_a == 1
    assert np.all(a[:, :128] == 1.5) and np.all(a[:, 128:] == np.nextafter(np.float32(1.5),
                                                                        np.float32(2)))
    np.testing.assert_array_equal(b, np.asarray(even))
    # the gradient pass: values unchanged, its own name
    TwoHotDist.__init__ = plain
    seen.clear()
    assert probe_runner.install("gradient") == probe_runner.PROBE + " (gradient)"
    jaxutils.TwoHotDist(odd, None)
    np.testing.assert_array_equal(seen[0][0], np.asarray(odd))


def test_the_launcher_runs_the_module_it_is_given(tmp_path):
    p = {"profile": "smoke", "rows": 1200, "eval_every": 400, "eval_episodes": 2,
         "reference": {"decode": "exact", "sampler": "per_run", "jax": "0.10.2",
                       "platform": "cpu", "precision": "default", "source": "run"}}
    info = {"python": "py", "checkout": tmp_path, "jaxcache": tmp_path}
    stock, _ = launch.runner_command(info, 5, tmp_path / "o", p)
    probe, _ = launch.runner_command(info, 5, tmp_path / "o", p,
                                     module="dreamer_parity.reference.probe_runner")
    assert stock[1:3] == ["-m", launch.RUNNER]
    assert probe[1:3] == ["-m", "dreamer_parity.reference.probe_runner"]
    assert stock[3:] == probe[3:]


@pytest.mark.parametrize("args, message", [
    (["--params", "nowhere.yaml", "--seed", "5"], "--params nowhere.yaml: not found"),
    (["--params", "params.yaml", "--seed", "-5"], "--seed must be a non-negative integer"),
    (["--params", "params.yaml", "--seed", "5", "--set", "rows=7"], "rows"),
])
def test_the_probe_script_refuses_bad_input_before_anything(tmp_path, args, message):
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "benchmarks/reference_mirror_probe.py", *args,
                        "--out", str(out)], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not out.exists()

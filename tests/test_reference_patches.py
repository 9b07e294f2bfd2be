"""The protocol patches act on the real reference code (run in the reference venv)."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from dreamer_parity.reference import setup as rs

SRC = Path(__file__).resolve().parents[1] / "src"

PROBE = r'''
import json
import jax, jax.numpy as jnp, numpy as np
import embodied
from dreamerv3 import jaxutils
from embodied.replay import selectors
from dreamer_parity.reference import patches

f32 = jnp.float32
stock_mean = jaxutils.TwoHotDist.mean

def bins(n):  # as dreamerv3/nets.py:466-473 builds symexp_twohot bins for odd n
    half = jaxutils.symexp(jnp.linspace(-20, 0, (n - 1) // 2 + 1, dtype=f32))
    return jnp.concatenate([half, -half[:-1][::-1]], 0)

zero = jnp.zeros((3, 255), f32)
x = jnp.asarray(np.random.default_rng(0).normal(size=(4, 255)).astype(np.float32) * 3)
out = {}
# A fresh function per measurement: jit caches traces per function object.
out["stock_zero"] = [float(v) for v in jax.jit(
    lambda l: jaxutils.TwoHotDist(l, bins(255)).mean())(zero)]
out["replaced_decode"] = patches.apply("exact", "stock", 0)
out["exact_zero"] = [float(v) for v in jax.jit(
    lambda l: jaxutils.TwoHotDist(l, bins(255)).mean())(zero)]
out["exact_random"] = [float(v) for v in jax.jit(
    lambda l: jaxutils.TwoHotDist(l, bins(255)).mean())(x)]
p = np.asarray(jax.nn.softmax(x), np.float64)
out["float64_random"] = [float(v) for v in (p * np.asarray(bins(255), np.float64)).sum(-1)]
patches.restore()
out["restored"] = jaxutils.TwoHotDist.mean is stock_mean

def stream(sampler, seed):
    patches.apply("ref", sampler, seed)
    # The selector the stock Replay builds for dreamerv3.main.make_replay (no selector given).
    replay = embodied.replay.Replay(65, 1000, None, online=True)
    sel = replay.sampler
    for key in range(200):
        sel[key] = None
    draws = [int(sel()) for _ in range(32)]
    patches.restore()
    return draws

out["stock"] = [stream("stock", 0), stream("stock", 1)]
out["per_run"] = [stream("per_run", 0), stream("per_run", 1), stream("per_run", 0)]
out["replaced_sampler"] = patches.apply("ref", "per_run", 5)
patches.restore()
out["replaced_none"] = patches.apply("ref", "stock", 5)
expected = np.random.default_rng([1, 0x5EED]).integers(0, 200, 32).tolist()
out["per_run_expected_seed1"] = [int(v) for v in expected]
try:
    patches.apply("nope", "stock", 0)
except ValueError as e:
    out["bad"] = str(e)
print("PROBE" + json.dumps(out))
'''


@pytest.fixture(scope="module")
def probe():
    try:
        info = rs.check_setup(check_packages=False)
    except rs.SetupError as e:
        pytest.skip(f"reference not set up ({e})")
    env = {**os.environ, "PYTHONPATH": f"{SRC}:{info['checkout']}", "JAX_PLATFORMS": "cpu",
           "PYTHONDONTWRITEBYTECODE": "1"}
    r = subprocess.run([str(info["python"]), "-c", PROBE], capture_output=True, text=True,
                       env=env, cwd=str(info["checkout"]), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    line = [x for x in r.stdout.splitlines() if x.startswith("PROBE")][-1]
    return json.loads(line[len("PROBE"):])


def test_exact_decode_replaces_the_two_hot_mean(probe):
    assert probe["replaced_decode"] == ["dreamerv3.jaxutils.TwoHotDist.mean"]
    # Zero logits (a zero-initialised head): exactly 0.0 under jit.
    assert probe["exact_zero"] == [0.0, 0.0, 0.0]
    # Same expectation as the float64 sum(p * b) (values up to ~5e7: float32 rounding).
    for got, want in zip(probe["exact_random"], probe["float64_random"]):
        assert got == pytest.approx(want, rel=1e-6, abs=1.0)
    assert probe["restored"] is True


def test_stock_decode_gives_a_constant_offset_at_zero_logits(probe):
    # Program-dependent (XLA contracts the pair sum into fused multiply-adds): the same
    # value for every row, of the size the protocol reports (0.07-0.16 in magnitude); on
    # the CPU this program gives the value the candidate's `ref` decode gives
    # (test_candidate_agent_units: -0.1644754 for every program shape tried).
    stock = probe["stock_zero"]
    assert len(set(stock)) == 1
    assert stock[0] == pytest.approx(-0.1644754, rel=1e-6)


def test_per_run_sampler_differs_between_seeds_where_stock_does_not(probe):
    s0, s1 = probe["stock"]
    assert s0 == s1                                  # D2: one stream for every seed
    p0, p1, p0_again = probe["per_run"]
    assert p0 != p1 and p0 == p0_again               # seeded by the run seed, reproducibly
    assert p1 == probe["per_run_expected_seed1"]     # default_rng([seed, 0x5EED])
    assert p0 != s0
    assert probe["replaced_sampler"] == ["embodied.replay.selectors.Uniform.__init__"]
    assert probe["replaced_none"] == []
    assert "reference.decode: unknown value 'nope'" in probe["bad"]

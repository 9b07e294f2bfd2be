"""The seed vmap's execution choice (candidate/runtime/seedmap.py): one seed at a time or batched."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dreamer_parity.candidate import agent
from dreamer_parity.candidate.runtime import loop, seedmap
from dreamer_parity.candidate.synthetic import synthetic_batch
from dreamer_parity.candidate.config import AgentConfig


def _f(x, y):
    # a matmul chain whose batched form XLA executes as a batched dot
    return {"z": jnp.tanh(x @ y["w"]) @ y["w"].T, "n": jnp.sum(x)}


def _args(seeds=3):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(seeds, 5, 7)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(seeds, 7, 6)), jnp.float32)
    return x, {"w": w}


@pytest.mark.parametrize("seed_batch, loops", [(1, 3), (2, 1), (3, 1), (5, 1)])
def test_per_seed_under_vmap_equals_each_seed_alone(seed_batch, loops):
    x, y = _args()
    g = jax.jit(jax.vmap(seedmap.per_seed(_f, seed_batch)))
    got = g(x, y)
    for i in range(3):
        want = jax.jit(_f)(x[i], {"w": y["w"][i]})
        np.testing.assert_allclose(np.asarray(got["z"][i]), np.asarray(want["z"]), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(got["n"][i]), np.asarray(want["n"]), rtol=1e-6)
    # the rule really maps over the seeds: one scan of `loops` iterations (seeds one by one;
    # or groups of seed_batch, the remainder of 3 seeds in groups of 2 running after the scan)
    jaxpr = str(jax.make_jaxpr(jax.vmap(seedmap.per_seed(_f, seed_batch)))(x, y))
    assert [int(n) for n in re.findall(r"length=(\d+)", jaxpr)] == [loops], jaxpr
    assert "scan" not in str(jax.make_jaxpr(jax.vmap(_f))(x, y))


def test_per_seed_broadcasts_unbatched_inputs():
    x, y = _args()
    w0 = {"w": y["w"][0]}
    got = jax.vmap(seedmap.per_seed(_f, 1), in_axes=(0, None))(x, w0)
    for i in range(3):
        want = _f(x[i], w0)
        np.testing.assert_allclose(np.asarray(got["z"][i]), np.asarray(want["z"]), rtol=1e-6)
        np.testing.assert_allclose(float(got["n"][i]), float(want["n"]), rtol=1e-6)
    assert got["n"].shape == (3,)


def test_per_seed_none_is_plain_function_and_bad_values_are_refused():
    assert seedmap.per_seed(_f, None) is _f
    for bad in (0, -1, 1.5, True, "1"):
        with pytest.raises(ValueError, match="seed_batch must be a positive integer"):
            seedmap.per_seed(_f, bad)
    assert seedmap.default_seed_batch("cpu") == 1
    assert seedmap.default_seed_batch("gpu") is None
    assert seedmap.default_seed_batch("cuda") is None
    # the suite runs on CPU (conftest): "auto" is one seed at a time there
    assert jax.default_backend() == "cpu" and loop.resolve_seed_batch("auto") == 1
    assert loop.resolve_seed_batch(None) is None and loop.resolve_seed_batch(2) == 2
    with pytest.raises(ValueError, match="seed_batch"):
        loop.resolve_seed_batch(0)


def test_train_step_one_seed_at_a_time_equals_vmapped_smoke():
    """The real train step (smoke size, 2 seeds): a loop over seeds gives the vmapped
    program's new parameters, latents and metrics (measured bitwise equal on CPU; the test
    allows float32 rounding, since XLA may fuse the two programs differently)."""
    cfg = AgentConfig.for_profile("smoke")
    keys = jax.random.split(jax.random.PRNGKey(3), 2)
    states = jax.vmap(lambda k: agent.init(k, cfg))(keys)
    batches = jax.tree.map(lambda *a: np.stack(a), *[synthetic_batch(cfg, 4, 9, i) for i in (0, 1)])
    f = lambda s, b, k: agent.train_step(cfg, s, b, key=k)
    a = jax.jit(jax.vmap(f))(states, batches, keys)
    b = jax.jit(jax.vmap(seedmap.per_seed(f, 1)))(states, batches, keys)
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(leaves_a) == len(leaves_b) > 100
    for u, v in zip(leaves_a, leaves_b):
        u, v = np.asarray(u, np.float64), np.asarray(v, np.float64)
        assert u.shape == v.shape and np.all(np.isfinite(u)) and np.all(np.isfinite(v))
        np.testing.assert_allclose(v, u, rtol=1e-4, atol=1e-6)


def test_over_seeds_squeezes_a_single_seed_and_vmaps_several():
    x, y = _args(seeds=1)
    c = jnp.float32(2.0)
    f = lambda x, y, c: {"z": _f(x, y)["z"] * c, "n": _f(x, y)["n"]}
    g = seedmap.over_seeds(f, in_axes=(0, 0, None))
    got = jax.jit(g)(x, y, c)
    want = jax.jit(f)(x[0], {"w": y["w"][0]}, c)
    assert got["z"].shape == (1, 5, 7) and got["n"].shape == (1,)
    np.testing.assert_array_equal(np.asarray(got["z"][0]), np.asarray(want["z"]))
    np.testing.assert_array_equal(np.asarray(got["n"][0]), np.asarray(want["n"]))
    # one seed: no batched op in the program (the vmap is not traced at all)
    jaxpr = jax.make_jaxpr(g)(x, y, c)
    dots = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "dot_general"]
    assert dots and all(e.params["dimension_numbers"][1] == ((), ()) for e in dots)
    # several seeds: plain jax.vmap, batched dots
    x3, y3 = _args(seeds=3)
    got3 = jax.jit(g)(x3, y3, c)
    want3 = jax.jit(jax.vmap(f, in_axes=(0, 0, None)))(x3, y3, c)
    np.testing.assert_array_equal(np.asarray(got3["z"]), np.asarray(want3["z"]))
    dots3 = [e for e in jax.make_jaxpr(g)(x3, y3, c).jaxpr.eqns
             if e.primitive.name == "dot_general"]
    assert dots3 and all(e.params["dimension_numbers"][1] != ((), ()) for e in dots3)


def test_over_seeds_refuses_in_axes_of_the_wrong_length():
    x, y = _args(seeds=1)
    g = seedmap.over_seeds(_f, in_axes=(0, 0, None))
    with pytest.raises(ValueError, match="in_axes has 3 entries for 2 arguments"):
        g(x, y)

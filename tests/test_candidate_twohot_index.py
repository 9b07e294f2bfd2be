"""The two forms of the two-hot encoding's bin search (twohot.index_form): the same bits.

``window`` (an arithmetic guess and 4 table lookups) is what XLA:CPU runs; ``compare`` (the
n-wide comparison and masked sums) is what accelerators run, where a table lookup is a
gather.  Both are run here on CPU, under jit, on every bin, its float32 neighbours, the
midpoints, values of every magnitude, the range ends, infinities and NaN.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dreamer_parity.candidate import twohot
from dreamer_parity.candidate.config import AgentConfig


def _sweep(b, seed=3):
    rng = np.random.default_rng(seed)
    mid = (b[:-1].astype(np.float64) + b[1:]) / 2
    return np.concatenate([
        b, np.nextafter(b, np.float32(np.inf)), np.nextafter(b, np.float32(-np.inf)), mid,
        rng.normal(size=200) * 50,
        np.sign(rng.normal(size=400)) * np.exp(rng.uniform(-30, 50, size=400)),
        [0.0, -0.0, 1e-40, -1e-40, 1e30, -1e30, np.inf, -np.inf, np.nan]]).astype(np.float32)


def _bits(a):
    a = np.asarray(a)
    return a.view(np.uint32) if a.dtype == np.float32 else a


@pytest.mark.parametrize("n", [255, 41, 9])
@pytest.mark.parametrize("decode", ["exact", "ref"])
def test_encode_forms_give_the_same_bits(decode, n):
    b = jnp.asarray(jax.jit(lambda: twohot.bins(n, decode))())
    x = jnp.asarray(_sweep(np.asarray(b)))
    window = jax.jit(lambda x, b: twohot.encode(x, b, "window"))(x, b)
    compare = jax.jit(lambda x, b: twohot.encode(x, b, "compare"))(x, b)
    for name, w, c in zip(("below", "above", "w_below", "w_above"), window, compare):
        np.testing.assert_array_equal(_bits(w), _bits(c), err_msg=name)
    # the weights are not trivially equal: every value between two bins splits its weight
    wb = np.asarray(window[2])
    assert np.sum((wb > 0) & (wb < 1)) > 500
    # the counts agree wherever the value is a number (NaN: window keeps its guess, compare 0)
    nums = ~np.isnan(np.asarray(x))
    cw = np.asarray(jax.jit(lambda x, b: twohot.count_le(x, b, "window"))(x, b))
    cc = np.asarray(jax.jit(lambda x, b: twohot.count_le(x, b, "compare"))(x, b))
    np.testing.assert_array_equal(cw[nums], cc[nums])
    assert cc[~nums].tolist() == [0]


def test_likelihoods_and_their_gradients_give_the_same_bits():
    rng = np.random.default_rng(7)
    logits = jnp.asarray(rng.normal(size=(64, 255)).astype(np.float32) * 2)
    b = twohot.bins_exact(255)
    x1 = jnp.asarray(_sweep(np.asarray(b), seed=8)[:64] * 0.5)
    x2 = jnp.asarray((rng.normal(size=64) * 3).astype(np.float32))
    g = jnp.asarray(rng.normal(size=64).astype(np.float32))

    def run(form):
        single = lambda l: (g * twohot.log_prob(l, x1, b, form)).sum()
        pair = lambda l: (g * twohot.log_prob_pair(l, x1, x2, 0.7, b, form)).sum()
        return jax.jit(lambda l: (jax.value_and_grad(single)(l), jax.value_and_grad(pair)(l)))(logits)

    for w, c in zip(jax.tree.leaves(run("window")), jax.tree.leaves(run("compare"))):
        np.testing.assert_array_equal(_bits(w), _bits(c))
    assert np.isfinite(np.asarray(jax.tree.leaves(run("compare"))[0]))


def test_index_form_resolves_auto_by_backend_and_refuses_other_settings():
    assert twohot.index_form("auto", backend="cpu") == "window"
    for backend in ("tpu", "gpu", "cuda", "rocm"):
        assert twohot.index_form("auto", backend=backend) == "compare"
    assert twohot.index_form("compare", backend="cpu") == "compare"
    assert twohot.index_form("window", backend="tpu") == "window"
    assert twohot.index_form() == "window"            # this suite runs on XLA:CPU
    with pytest.raises(ValueError, match="twohot_index.*'gather'"):
        twohot.index_form("gather")
    with pytest.raises(ValueError, match="form must be"):
        twohot.count_le(jnp.zeros(3), twohot.bins_exact(9), "auto")
    with pytest.raises(ValueError, match="AgentConfig.twohot_index.*'gather'"):
        AgentConfig.for_profile("smoke", twohot_index="gather")
    assert AgentConfig.for_profile("smoke").twohot_index == "auto"

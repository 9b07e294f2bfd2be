"""The observe scan's three gradient forms (dreamer_parity.candidate.observe): the same
latents and the same gradients, to float32 rounding; and the pins the batched form uses."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dreamer_parity.candidate import agent, nets, observe, rssm
from dreamer_parity.candidate.config import AgentConfig


def test_pin_takes_the_stored_value_and_passes_the_gradient_to_x():
    x, stored = jnp.array([1.0, 2.0]), jnp.array([5.0, -3.0])
    assert observe.pin(x, stored).tolist() == [5.0, -3.0]
    gx, gs = jax.grad(lambda x, s: (observe.pin(x, s) ** 2).sum(), argnums=(0, 1))(x, stored)
    assert gx.tolist() == [10.0, -6.0]            # 2 * value, taken at the stored value
    assert gs.tolist() == [0.0, 0.0]


@pytest.mark.parametrize("shape,axis", [((3, 8), -1), ((2, 3, 4), (0, 2))])
def test_pinned_stat_has_the_gradient_of_the_norm_statistic(shape, axis):
    x = jax.random.normal(jax.random.PRNGKey(0), shape) * 3
    w = jax.random.normal(jax.random.PRNGKey(1), nets.rms_stat(x, axis).shape)
    want = jax.grad(lambda x: (w * nets.rms_stat(x, axis)).sum())(x)
    stat = nets.rms_stat(x, axis)
    got = jax.grad(lambda x: (w * observe.pinned_stat(x, stat, axis)).sum())(x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert float(jnp.abs(want).max()) > 1e-3
    # a stored statistic that is off shows in the value, and the gradient is taken at it
    off = jax.grad(lambda x: (w * observe.pinned_stat(x, 2 * stat, axis)).sum())(x)
    np.testing.assert_allclose(off, 8 * want, rtol=1e-5, atol=1e-7)


def _inputs(cfg, T=5, B=3):
    k = iter(jax.random.split(jax.random.PRNGKey(3), 8))
    p = agent.init_params(next(k), cfg)["dyn"]
    act = jax.nn.one_hot(jax.random.randint(next(k), (T, B), 0, cfg.num_actions),
                         cfg.num_actions)
    embed = jax.random.normal(next(k), (T, B, cfg.units))
    first = jnp.zeros((T, B), bool).at[2, 1].set(True).at[0, 0].set(True)
    noise = jax.random.uniform(next(k), (T, B, cfg.stoch))
    deter0 = jax.random.normal(next(k), (B, cfg.deter))
    stoch0 = jax.nn.one_hot(jax.random.randint(next(k), (B, cfg.stoch), 0, cfg.classes),
                            cfg.classes)
    return p, act, embed, first, noise, deter0, stoch0


def _run(form, p, act, embed, first, noise, deter0, stoch0):
    cfg = AgentConfig.for_profile("smoke", observe_grad=form)
    # a loss that reaches every output (the latents through two different heads' worth of
    # weights, the logits through the KL to the prior) and the inputs through xa and ea
    wd = jax.random.normal(jax.random.PRNGKey(7), (cfg.deter,))
    ws = jax.random.normal(jax.random.PRNGKey(8), (cfg.stoch, cfg.classes))

    def loss(p, embed):
        xa, ea = rssm.observe_inputs(p, cfg, act, embed, first)
        wt = rssm.observe_transposes(p, cfg)
        d, s, post = observe.observe(rssm.observe_slices(p, cfg), cfg, deter0, stoch0,
                                     xa, ea, first, noise, wt)
        dyn, rep = rssm.kl_losses(post, rssm.prior_logits(p, cfg, d), 0.0)
        return jnp.tanh(d @ wd).sum() + (s * ws).sum() + dyn.sum() + 0.5 * rep.sum(), (d, s, post)

    f = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)
    jaxpr = str(jax.make_jaxpr(f)(p, embed))
    assert ("checkpoint" in jaxpr or "remat" in jaxpr) == (form == "remat")
    (_, outs), grads = jax.jit(f)(p, embed)
    return outs, grads


def test_the_three_forms_give_the_same_latents_and_gradients():
    cfg = AgentConfig.for_profile("smoke")
    args = _inputs(cfg)
    got = {form: _run(form, *args) for form in ("scan", "remat", "batched")}
    outs, grads = got["scan"]
    for form in ("remat", "batched"):
        for a, b in zip(outs, got[form][0]):                 # the forward is the same
            np.testing.assert_array_equal(np.asarray(b), np.asarray(a), err_msg=form)
        flat = jax.tree_util.tree_leaves_with_path(grads)
        other = jax.tree_util.tree_leaves(got[form][1])
        assert len(flat) == len(other) > 20
        for (path, a), b in zip(flat, other):
            a, b = np.asarray(a), np.asarray(b)
            np.testing.assert_allclose(b, a, rtol=2e-4, atol=2e-5 * max(np.abs(a).max(), 1e-30),
                                       err_msg=f"{form}: {jax.tree_util.keystr(path)}")
    g = grads[0]
    # the observe step's own kernels get a gradient, the prior's too (through the KL)
    for k in ("dynin0", "dynin1", "dyn0", "dyncore", "obs0", "obslogit", "img0", "imglogit"):
        assert float(np.abs(np.asarray(g[k]["kernel"])).max()) > 1e-6, k
    assert float(np.abs(np.asarray(grads[1])).max()) > 1e-6       # and the embedding

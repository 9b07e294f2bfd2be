"""Unit tests of the candidate agent's pieces (fast; numpy references written by hand)."""

import os
import subprocess
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dreamer_parity.candidate import agent, dists, nets, optim, returns, rssm, twohot
from dreamer_parity.candidate.config import AgentConfig, resolve

REFPY = Path.home() / ".cache" / "dreamer-parity" / "refvenv" / "bin" / "python"


# ------------------------------------------------------------------ symlog / symexp

def test_symlog_symexp_values_and_inverse():
    x = jnp.array([-1e6, -3.0, -1.0, 0.0, 0.5, 1.0, 20.0], jnp.float32)
    np.testing.assert_allclose(nets.symlog(x), np.sign(x) * np.log(1 + np.abs(np.float64(x))),
                               rtol=1e-6)
    assert float(nets.symlog(jnp.float32(np.e - 1))) == pytest.approx(1.0, rel=1e-6)
    assert float(nets.symexp(jnp.float32(1.0))) == pytest.approx(np.e - 1, rel=1e-6)
    np.testing.assert_allclose(nets.symexp(nets.symlog(x)), x, rtol=1e-5)
    assert float(nets.symlog(jnp.float32(0.0))) == 0.0


# ------------------------------------------------------------------ two-hot

def _ref_logprob_dense(logits, x, b):
    """The reference formula (jaxutils.py:255-274) in float64 numpy with a dense target."""
    logits, x, b = np.float64(logits), np.float64(x), np.float64(b)
    n = len(b)
    below = np.clip((b <= x[..., None]).sum(-1) - 1, 0, n - 1)
    above = np.clip(n - (b > x[..., None]).sum(-1), 0, n - 1)
    equal = below == above
    db = np.where(equal, 1, np.abs(b[below] - x))
    da = np.where(equal, 1, np.abs(b[above] - x))
    tgt = np.eye(n)[below] * (da / (db + da))[..., None] + np.eye(n)[above] * (db / (db + da))[..., None]
    lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) + logits.max(-1, keepdims=True)
    return (tgt * (logits - lse)).sum(-1)


def test_bins_symmetric_grid():
    b = np.asarray(twohot.bins_exact(255))
    assert b.shape == (255,) and b.dtype == np.float32
    assert b[127] == 0.0 and np.all(b[128:] == -b[:127][::-1])
    np.testing.assert_allclose(b, np.sign(np.linspace(-20, 20, 255)) * np.expm1(np.abs(np.linspace(-20, 20, 255))),
                               rtol=1e-6)
    r = np.asarray(jax.jit(lambda: twohot.bins_ref(255))())
    assert r[127] == 0.0 and np.all(r[128:] == -r[:127][::-1])
    np.testing.assert_allclose(r, b, rtol=3e-6)


def test_twohot_encode_weights():
    b = twohot.bins_exact(5)                       # [-(e^20-1), -(e^10-1), 0, e^10-1, e^20-1]
    x = jnp.array([0.0, 1.0, -5.0, 1e12, -1e12, float(b[3])], jnp.float32)
    below, above, wb, wa = [np.asarray(v) for v in twohot.encode(x, b)]
    assert list(below) == [2, 2, 1, 4, 0, 3] and list(above) == [3, 3, 2, 4, 0, 4]
    assert wb[0] == 1.0 and wa[0] == 0.0                     # exactly on a bin: all weight there
    np.testing.assert_allclose(wa[1], 1.0 / float(b[3]), rtol=1e-6)
    np.testing.assert_allclose(wb[1] + wa[1], 1.0, rtol=1e-6)
    assert wb[3] == wa[3] == 0.5 and wb[4] == wa[4] == 0.5  # clipped outside the range
    assert wb[5] == 1.0 and wa[5] == 0.0


@pytest.mark.parametrize("n", [255, 41, 9])
@pytest.mark.parametrize("decode", ["exact", "ref"])
def test_twohot_encode_indices_equal_the_reference_comparison_counts(decode, n):
    """The windowed count (twohot.count_le) gives the reference's indices (#(b <= x) - 1,
    n - #(b > x), clipped) on every bin value, its float32 neighbours and the midpoints
    between bins, values of every magnitude, the range ends and NaN."""
    b = np.asarray(jax.jit(lambda: twohot.bins(n, decode))())
    assert len(b) == n
    rng = np.random.default_rng(3)
    mid = (b[:-1].astype(np.float64) + b[1:]) / 2
    x = np.concatenate([b, np.nextafter(b, np.float32(np.inf)), np.nextafter(b, np.float32(-np.inf)),
                        mid, rng.normal(size=200) * 50,
                        np.sign(rng.normal(size=400)) * np.exp(rng.uniform(-30, 50, size=400)),
                        [0.0, -0.0, 1e-40, -1e-40, 1e30, -1e30, np.inf, -np.inf, np.nan]]).astype(np.float32)
    below, above, wb, wa = [np.asarray(v) for v in jax.jit(twohot.encode)(x, jnp.asarray(b))]
    # the reference's n-wide comparison, under jit as well (XLA:CPU treats denormals as 0)
    want_below, want_above = [np.asarray(v) for v in jax.jit(lambda x, b: (
        jnp.clip((b[None] <= x[:, None]).sum(-1) - 1, 0, n - 1),
        jnp.clip(n - (b[None] > x[:, None]).sum(-1), 0, n - 1)))(x, jnp.asarray(b))]
    np.testing.assert_array_equal(below, want_below)
    np.testing.assert_array_equal(above, want_above)
    assert below[-1] == 0 and above[-1] == n - 1          # NaN: the reference's indices


def test_twohot_log_prob_pair_equals_two_likelihoods():
    rng = np.random.default_rng(4)
    logits = rng.normal(size=(40, 255)).astype(np.float32) * 2
    x1 = (rng.normal(size=40) * 30).astype(np.float32)
    x2 = (rng.normal(size=40) * 3).astype(np.float32)
    b = twohot.bins_exact(255)
    got = jax.jit(lambda l, a, c: twohot.log_prob_pair(l, a, c, 1.0, b))(logits, x1, x2)
    want = _ref_logprob_dense(logits, x1, np.asarray(b)) + _ref_logprob_dense(logits, x2, np.asarray(b))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert not np.allclose(got, _ref_logprob_dense(logits, x1, np.asarray(b)), rtol=1e-3)


def test_twohot_log_prob_gradient_is_target_minus_softmax():
    # the likelihood's gradient against float64 numpy:
    # d/dlogits sum(t * log_softmax(l)) = t - softmax(l) * sum(t), t the dense target
    rng = np.random.default_rng(6)
    logits = rng.normal(size=(30, 255)).astype(np.float32) * 2
    b = twohot.bins_exact(255)
    bn = np.asarray(b, np.float64)
    x1 = np.concatenate([rng.normal(size=27) * 30, [0.0, float(bn[200]), 1e12]]).astype(np.float32)
    x2 = (rng.normal(size=30) * 3).astype(np.float32)
    g = rng.normal(size=30).astype(np.float32)
    c = 0.7

    def dense(x):
        below, above, wb, wa = [np.asarray(v) for v in twohot.encode(jnp.asarray(x), b)]
        t = np.zeros((len(x), 255))
        np.add.at(t, (np.arange(len(x)), below), wb)
        np.add.at(t, (np.arange(len(x)), above), wa)
        return t

    t = dense(x1) + c * dense(x2)
    l64 = logits.astype(np.float64)
    p = np.exp(l64 - l64.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    want = g[:, None] * (t - p * t.sum(-1, keepdims=True))
    loss = lambda l: (jnp.asarray(g) * twohot.log_prob_pair(l, x1, x2, c, b)).sum()
    got = np.asarray(jax.jit(jax.grad(loss))(logits))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    assert np.abs(want).max() > 0.1
    # the single-target likelihood as well, and its value against the dense formula
    got1 = np.asarray(jax.jit(jax.grad(lambda l: twohot.log_prob(l, x1, b).sum()))(logits))
    t1 = dense(x1)
    np.testing.assert_allclose(got1, t1 - p * t1.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)


def test_heads_first_layers_equal_separate_layers():
    from dreamer_parity.candidate import heads
    cfg = AgentConfig.for_profile("smoke")
    p = heads.init_params(jax.random.PRNGKey(0), cfg)
    rng = np.random.default_rng(5)
    deter = rng.normal(size=(3, 7, cfg.deter)).astype(np.float32)
    stoch = rng.normal(size=(3, 7, cfg.stoch * cfg.classes)).astype(np.float32)
    layers = [p["rew"]["h0"], p["con"]["h0"], p["critic"]["h0"]]
    layers[1] = {**layers[1], "scale": layers[1]["scale"] * 1.5, "bias": layers[1]["bias"] + 0.3}
    got = heads.first_layers(layers, deter, stoch)
    for g, layer in zip(got, layers):
        np.testing.assert_allclose(g, nets.feat_dense(layer, deter, stoch), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("decode", ["exact", "ref"])
def test_twohot_log_prob_matches_reference_formula(decode):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(64, 255)).astype(np.float32) * 3
    x = np.concatenate([rng.normal(size=32) * 10, rng.normal(size=28) * 1e4, [0.0, 1.0, -1.0, 1e9]]).astype(np.float32)
    b = jax.jit(lambda: twohot.bins(255, decode))()
    got = jax.jit(twohot.log_prob)(logits, x, b)
    np.testing.assert_allclose(got, _ref_logprob_dense(logits, x, np.asarray(b)), rtol=2e-5, atol=2e-5)


def test_exact_decode_zero_for_zero_and_mirror_logits_under_jit():
    b = twohot.bins_exact(255)
    f = jax.jit(lambda l: twohot.mean_exact(l, b))
    assert np.all(np.asarray(f(jnp.zeros((7, 255), jnp.float32))) == 0.0)
    rng = np.random.default_rng(1)
    half = rng.normal(size=(5, 127)).astype(np.float32)
    mirror = np.concatenate([half, rng.normal(size=(5, 1)).astype(np.float32), half[:, ::-1]], -1)
    assert np.all(np.asarray(f(mirror)) == 0.0)
    g = jax.jit(lambda x, w: twohot.mean_exact(jax.nn.silu(x) @ w, b))   # in-graph logits
    wh = rng.normal(size=(8, 127)).astype(np.float32)
    w = np.concatenate([wh, rng.normal(size=(8, 1)).astype(np.float32), wh[:, ::-1]], -1)
    assert np.all(np.asarray(g(rng.normal(size=(256, 8)).astype(np.float32), w)) == 0.0)
    # a one-sided distribution gives its bin value
    peak = np.full((1, 255), -1e4, np.float32)
    peak[0, 140] = 0.0
    np.testing.assert_allclose(f(peak), [float(b[140])], rtol=1e-6)


def test_ref_decode_literal_form_is_the_pair_sum():
    rng = np.random.default_rng(2)
    logits = (rng.normal(size=(16, 255)) * 2).astype(np.float32)
    b = np.asarray(jax.jit(lambda: twohot.bins_ref(255))())
    p = np.asarray(jax.nn.softmax(jnp.asarray(logits), -1))
    m = 127
    want = (p[:, m:m + 1] * b[m:m + 1]).sum(-1) + ((p[:, :m] * b[:m])[:, ::-1] + p[:, m + 1:] * b[m + 1:]).sum(-1)
    got = np.asarray(twohot.mean_ref_literal(jnp.asarray(logits), jnp.asarray(b)))       # eager
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    exact64 = (np.float64(p) * np.float64(b)).sum(-1)
    np.testing.assert_allclose(np.asarray(twohot.mean_exact(jnp.asarray(logits), twohot.bins_exact(255))),
                               exact64, rtol=1e-3, atol=1e-2)


def _ref_fma_numpy(p, b):
    """Each mirror pair as one FMA: the negative-half product exact, the positive-half product
    rounded to float32, one rounding of their sum (float64 holds the exact product)."""
    m = (p.shape[-1] - 1) // 2
    lo = np.float64(p[:, :m][:, ::-1]) * np.float64(b[:m][::-1])            # exact
    hi = (p[:, m + 1:] * b[m + 1:]).astype(np.float32)                       # rounded
    pairs = (np.float64(hi) + lo).astype(np.float32)
    return np.float64(p[:, m] * b[m]) + pairs.astype(np.float64).sum(-1)


def test_ref_decode_emulates_the_contracted_pair_sum_in_every_program():
    b = twohot.bins_ref(255)
    rng = np.random.default_rng(3)
    logits = np.zeros((512, 255), np.float32)
    logits[:, 120:135] = rng.normal(0, 0.5, (512, 15))          # central bins moved, outer equal
    p = np.asarray(jax.nn.softmax(jnp.asarray(logits), -1))
    want = _ref_fma_numpy(p, np.asarray(b))
    np.testing.assert_allclose(np.asarray(twohot.mean_ref(jnp.asarray(logits), b)), want,
                               rtol=0, atol=1e-6)
    for f in (twohot.ref_pair_sum, jax.jit(twohot.ref_pair_sum),
              jax.jit(jax.vmap(twohot.ref_pair_sum, (0, None)))):
        np.testing.assert_allclose(np.asarray(f(jnp.asarray(p), b)), want, rtol=0, atol=1e-6)
    # The emulated contraction gives the reference's kind of noise: per-element error std
    # ~0.085 against the float64 expectation (reference 0.086, DIAGNOSIS.txt), not ~1e-9.
    truth = (np.float64(p) * np.float64(np.asarray(b))).sum(-1)
    err = np.asarray(jax.jit(twohot.mean_ref)(jnp.asarray(logits), b)) - truth
    assert 0.05 < err.std() < 0.15, err.std()
    # All-zero logits give one program-independent constant (the reference's in-step value
    # is -0.1645), eager, jitted, vmapped and behind a matmul.
    z = jnp.zeros((3, 255))
    consts = [np.asarray(twohot.mean_ref(z, b)), np.asarray(jax.jit(twohot.mean_ref)(z, b)),
              np.asarray(jax.jit(jax.vmap(lambda x: twohot.mean_ref(x, b)))(z)),
              np.asarray(jax.jit(lambda x, w: twohot.mean_ref(jax.nn.silu(x) @ w, b))(
                  jnp.ones((3, 8)), jnp.zeros((8, 255))))]
    for c in consts:
        np.testing.assert_allclose(c, -0.1644754, rtol=1e-6)


def test_ref_bins_equal_reference_jax_bins():
    """The ``ref`` bins built under jax 0.10 equal those the reference's jax 0.4.26 builds."""
    if not REFPY.exists():
        pytest.skip("reference venv absent; run `make reference-setup`")
    code = ("import jax, jax.numpy as jnp, numpy as np\n"
            "def f():\n h = jnp.linspace(-20, 0, 128, dtype=jnp.float32)\n"
            " h = jnp.sign(h) * jnp.expm1(jnp.abs(h))\n"
            " return jnp.concatenate([h, -h[:-1][::-1]], 0)\n"
            "print(np.asarray(jax.jit(f)()).view(np.uint32).tolist())\n")
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([str(REFPY), "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-500:]
    ref = np.array(eval(out.stdout.strip()), np.uint32)
    ours = np.asarray(jax.jit(lambda: twohot.bins_ref(255))()).view(np.uint32)
    assert np.array_equal(ours, ref)


# ------------------------------------------------------------------ categoricals

def test_kl_free_bits_and_gradient_routing():
    rng = np.random.default_rng(3)
    post = jnp.asarray(rng.normal(size=(2, 3, 4, 5)), jnp.float32)
    prior = jnp.asarray(rng.normal(size=(2, 3, 4, 5)), jnp.float32)
    pp = np.exp(post) / np.exp(post).sum(-1, keepdims=True)
    qq = np.exp(prior) / np.exp(prior).sum(-1, keepdims=True)
    kl = (pp * (np.log(pp) - np.log(qq))).sum(-1).sum(-1)            # summed over latents
    dyn, rep = rssm.kl_losses(post, prior, 1.0)
    np.testing.assert_allclose(dyn, np.maximum(kl, 1.0), rtol=1e-5)
    np.testing.assert_allclose(rep, np.maximum(kl, 1.0), rtol=1e-5)
    d0, _ = rssm.kl_losses(post, prior, 0.0)
    np.testing.assert_allclose(d0, kl, rtol=1e-5)
    big = jnp.float32(100.0)
    g_post, g_prior = jax.grad(lambda a, b: rssm.kl_losses(a, b, 0.0)[0].sum(), (0, 1))(post, prior)
    assert float(jnp.abs(g_post).max()) == 0.0 and float(jnp.abs(g_prior).max()) > 0
    g_post, g_prior = jax.grad(lambda a, b: rssm.kl_losses(a, b, 0.0)[1].sum(), (0, 1))(post, prior)
    assert float(jnp.abs(g_prior).max()) == 0.0 and float(jnp.abs(g_post).max()) > 0
    g = jax.grad(lambda a: rssm.kl_losses(a, prior, big)[1].sum())(post)   # all below free bits
    assert float(jnp.abs(g).max()) == 0.0


def test_unimix_and_straight_through():
    logits = jnp.array([[10.0, 0.0, -10.0, 0.0]], jnp.float32)
    mixed = dists.unimix_logits(logits, 0.01)
    p = np.exp(np.asarray(mixed))
    sm = np.exp([10, 0, -10, 0]) / np.exp([10, 0, -10, 0]).sum()
    np.testing.assert_allclose(p[0], 0.99 * sm + 0.0025, rtol=1e-5)
    onehot = jnp.array([[0.0, 0.0, 1.0, 0.0]])
    z = dists.categorical_from_noise(mixed, onehot)
    assert np.array_equal(np.asarray(z), np.asarray(onehot))       # value is exactly the draw
    g = jax.grad(lambda l: (dists.categorical_from_noise(l, onehot) * jnp.arange(4.0)).sum())(mixed)
    assert float(jnp.abs(g).max()) > 0                               # gradient through probs
    u = jnp.array([0.0, 0.3, 0.999999])
    s = dists.sample_onehot(jnp.log(jnp.array([[0.25, 0.25, 0.5]] * 3)), u)
    assert np.argmax(np.asarray(s), -1).tolist() == [0, 1, 2]


def _np_dense(p, x, act=True):
    y = x @ np.float64(p["kernel"]) + np.float64(p["bias"])
    if "scale" in p:
        y = y / np.sqrt((y * y).mean(-1, keepdims=True) + 1e-4) * np.float64(p["scale"])
    return y / (1 + np.exp(-y)) if act else y


def _np_observe_step(p, cfg, deter, stoch, action, embed, is_first):
    """The reference's posterior step (nets.py:53-76, 151-173) in float64 numpy, written
    literally: reset, the block input [deter block k, x] concatenated for every block, one
    matmul per block, RMSNorm over all D, the gates, then obs0 on concat(deter, embed)."""
    keep = 1 - np.float64(is_first)[:, None]
    deter, stoch, action = deter * keep, stoch.reshape(len(deter), -1) * keep, action * keep
    g, D = cfg.blocks, cfg.deter
    Dg = D // g
    x = np.concatenate([_np_dense(p["dynin0"], deter), _np_dense(p["dynin1"], stoch),
                        _np_dense(p["dynin2"], action)], -1)
    k0, kc = np.float64(p["dyn0"]["kernel"]), np.float64(p["dyncore"]["kernel"])
    y = np.concatenate([np.concatenate([deter[:, i * Dg:(i + 1) * Dg], x], -1) @ k0[i]
                        for i in range(g)], -1) + np.float64(p["dyn0"]["bias"])
    y = y / np.sqrt((y * y).mean(-1, keepdims=True) + 1e-4) * np.float64(p["dyn0"]["scale"])
    y = y / (1 + np.exp(-y))
    z = np.stack([y[:, i * Dg:(i + 1) * Dg] @ kc[i] for i in range(g)], 1)
    z = z + np.float64(p["dyncore"]["bias"]).reshape(g, 3 * Dg)
    sig = lambda v: 1 / (1 + np.exp(-v))
    r = sig(z[..., :Dg])
    c = np.tanh(r * z[..., Dg:2 * Dg])
    u = sig(z[..., 2 * Dg:] - 1)
    new = (u * c + (1 - u) * deter.reshape(-1, g, Dg)).reshape(-1, D)
    h = _np_dense(p["obs0"], np.concatenate([new, embed], -1))
    for i in range(1, cfg.obs_layers):
        h = _np_dense(p[f"obs{i}"], h)
    return new, _np_dense(p["obslogit"], h, act=False).reshape(-1, cfg.stoch, cfg.classes)


def test_observe_step_with_hoisted_inputs_equals_the_literal_block_gru():
    cfg = AgentConfig.for_profile("smoke")
    p = rssm.init_params(jax.random.PRNGKey(3), cfg)
    p = jax.tree_util.tree_map(                         # non-zero biases, non-unit scales
        lambda a: a + 0.3 * jax.random.normal(jax.random.PRNGKey(a.size), a.shape), p)
    B, D, S, K, A = 5, cfg.deter, cfg.stoch, cfg.classes, cfg.num_actions
    ks = jax.random.split(jax.random.PRNGKey(4), 4)
    deter = jax.random.normal(ks[0], (B, D))
    stoch = jax.nn.one_hot(jax.random.randint(ks[1], (B, S), 0, K), K)
    action = jax.nn.one_hot(jnp.array([0, 1, 1, 0, 1]), A)
    embed = jax.random.normal(ks[2], (B, cfg.units))
    is_first = jnp.array([False, True, False, False, True])
    want_deter, want_raw = _np_observe_step(p, cfg, np.float64(deter), np.float64(stoch),
                                            np.float64(action), np.float64(embed), is_first)
    xa, ea = rssm.observe_inputs(p, cfg, action, embed, is_first)
    assert xa.shape == (B, D) and ea.shape == (B, cfg.hidden)
    got_deter, got_stoch, got_logit = jax.jit(
        lambda *a: rssm.observe_step(p, cfg, *a))(deter, stoch, xa, ea, is_first,
                                                  jnp.full((B, S), 0.5))
    np.testing.assert_allclose(got_deter, want_deter, rtol=2e-5, atol=2e-5)
    want_logit = np.asarray(dists.unimix_logits(jnp.asarray(want_raw, jnp.float32), cfg.unimix))
    np.testing.assert_allclose(got_logit, want_logit, rtol=2e-5, atol=2e-5)
    # the reset rows start from zero deter, stoch and action: their new deter differs from a
    # step that was not reset
    assert np.abs(np.asarray(got_deter[1]) - np.asarray(
        jax.jit(lambda *a: rssm.observe_step(p, cfg, *a))(
            deter, stoch, *rssm.observe_inputs(p, cfg, action, embed, jnp.zeros(B, bool)),
            jnp.zeros(B, bool), jnp.full((B, S), 0.5))[0][1])).max() > 1e-3
    # the imagination's GRU (one x-part matmul on the concatenated inputs) is the same block GRU
    keep = jnp.zeros(B, bool)
    want_img, _ = _np_observe_step(p, cfg, np.float64(deter), np.float64(stoch),
                                   np.float64(action), np.float64(embed), keep)
    np.testing.assert_allclose(jax.jit(lambda *a: rssm.gru(p, cfg, *a))(deter, stoch, action),
                               want_img, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("stored,sliced", [(True, False), (False, True), (True, True)])
def test_observe_scan_gradients_with_stored_transposes_and_slices_equal_plain_autodiff(
        stored, sliced):
    # rssm.observe_transposes only changes how the backward pass multiplies, and
    # rssm.observe_slices only where the kernel slices' gradients are accumulated: the
    # gradients of a loss through a scan of posterior steps must be those of plain autodiff
    cfg = AgentConfig.for_profile("smoke", obs_layers=2)
    p = rssm.init_params(jax.random.PRNGKey(5), cfg)
    p = jax.tree_util.tree_map(
        lambda a: a + 0.3 * jax.random.normal(jax.random.PRNGKey(a.size + 1), a.shape), p)
    T, B, D, S, K, A = 6, 4, cfg.deter, cfg.stoch, cfg.classes, cfg.num_actions
    ks = jax.random.split(jax.random.PRNGKey(6), 4)
    action = jax.nn.one_hot(jax.random.randint(ks[0], (T, B), 0, A), A)
    embed = jax.random.normal(ks[1], (T, B, cfg.units))
    is_first = jnp.zeros((T, B), bool).at[3, 1].set(True)
    noise = jax.random.uniform(ks[2], (T, B, S))
    proj = jax.random.normal(ks[3], (T, B, S, K))

    def loss(p, stored, sliced):
        xa, ea = rssm.observe_inputs(p, cfg, action, embed, is_first)
        wt = rssm.observe_transposes(p, cfg) if stored else None
        ps = rssm.observe_slices(p, cfg) if sliced else p

        def step(c, xs):
            d, s = rssm.observe_step(ps, cfg, *c, *xs, wt)[:2]
            return (d, s), (d, rssm.observe_step(ps, cfg, d, s, xs[0], xs[1], xs[2], xs[3], wt)[2])

        c0 = (jnp.zeros((B, D)), jnp.zeros((B, S, K)))
        _, (ds, ls) = jax.lax.scan(step, c0, (xa, ea, is_first, noise))
        return (ds ** 2).mean() + (ls * proj).mean()

    g_plain = jax.jit(jax.grad(lambda p: loss(p, False, False)))(p)
    g_stored = jax.jit(jax.grad(lambda p: loss(p, stored, sliced)))(p)
    flat_plain = jax.tree_util.tree_leaves_with_path(g_plain)
    flat_stored = jax.tree_util.tree_leaves(g_stored)
    assert len(flat_plain) == len(flat_stored)
    for (path, a), b in zip(flat_plain, flat_stored):
        a, b = np.asarray(a), np.asarray(b)
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6 * np.abs(a).max(),
                                   err_msg=jax.tree_util.keystr(path))
    # every kernel the step multiplies by gets a real gradient
    for name in ("dynin0", "dynin1", "dyn0", "dyncore", "obs0", "obs1", "obslogit"):
        assert np.abs(np.asarray(g_stored[name]["kernel"])).max() > 1e-6, name


def test_dense_with_stored_transpose_has_the_plain_gradients():
    # nets.with_transposes + dense on leading dims (G, N, in), as the heads use it
    rng = np.random.default_rng(7)
    layers = {"h1": nets.linear_params(jax.random.PRNGKey(1), 24, 16),
              "out": nets.linear_params(jax.random.PRNGKey(2), 16, 9, norm=False)}
    layers["h1"]["bias"] = layers["h1"]["bias"] + 0.2
    x = jnp.asarray(rng.normal(size=(3, 5, 24)).astype(np.float32))
    proj = jnp.asarray(rng.normal(size=(3, 5, 9)).astype(np.float32))

    def loss(layers, x, stored):
        ps = nets.with_transposes(layers) if stored else layers
        return (nets.dense(ps["out"], nets.dense(ps["h1"], x), act=False) * proj).sum()

    assert "kernel_t" in nets.with_transposes(layers)["h1"] and "kernel_t" not in layers["h1"]
    g_plain = jax.jit(jax.grad(lambda l, x: loss(l, x, False), argnums=(0, 1)))(layers, x)
    g_stored = jax.jit(jax.grad(lambda l, x: loss(l, x, True), argnums=(0, 1)))(layers, x)
    assert jax.tree_util.tree_structure(g_plain) == jax.tree_util.tree_structure(g_stored)
    for a, b in zip(jax.tree_util.tree_leaves(g_plain), jax.tree_util.tree_leaves(g_stored)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-6)
        assert np.abs(np.asarray(a)).max() > 1e-3


def test_bernoulli_soft_label():
    l, y = jnp.float32(0.7), 1 - 1 / 333
    s = 1 / (1 + np.exp(-0.7))
    want = y * np.log(s) + (1 - y) * np.log(1 - s)
    assert float(dists.bernoulli_log_prob(l, y)) == pytest.approx(want, rel=1e-6)


# ------------------------------------------------------------------ returns

def test_lambda_return_hand_example():
    lam = 0.5
    rew = jnp.array([[9.0], [1.0], [2.0]])        # H = 2; rew[0] is the start reward (unused)
    con = jnp.array([[1.0], [0.5], [1.0]])
    val = jnp.array([[5.0], [4.0], [10.0]])
    # R2 = 10; R1 = 2 + 1*(0.5*10 + 0.5*10) = 12; R0 = 1 + 0.5*(0.5*4 + 0.5*12) = 5
    ret = returns.lambda_return(rew, con, val, lam)
    np.testing.assert_allclose(np.asarray(ret)[:, 0], [5.0, 12.0], rtol=1e-6)


def test_replay_return_hand_example():
    cfg = AgentConfig.for_profile("smoke", horizon=2.0, return_lambda_replay=0.5)
    reward = jnp.array([[0.0, 1.0, 2.0, 3.0]])
    boot = jnp.array([[10.0, 20.0, 30.0, 40.0]])
    term = jnp.array([[False, False, False, True]])
    last = jnp.array([[False, False, True, False]])
    # live = [0.5, 0.5, 0] ; c = [0.5, 0, 0.5] for rows 1..3 ; R3 = 40
    # R2 = 3 + 0*(...) = 3
    # R1 = 2 + 0.5*((1-0)*30 + 0*3) = 17
    # R0 = 1 + 0.5*(0.5*20 + 0.5*17) = 10.25
    r = returns.replay_return(reward, term, last, boot, cfg)
    np.testing.assert_allclose(np.asarray(r)[0], [10.25, 17.0, 3.0], rtol=1e-6)


def test_return_normaliser():
    cfg = AgentConfig.for_profile("smoke")
    ret = jnp.arange(101.0).reshape(1, 101) * 0.1       # percentiles 5 -> 0.5, 95 -> 9.5
    st, off, scale = returns.retnorm_update({"lo": jnp.float32(0), "hi": jnp.float32(0)}, ret, cfg)
    assert float(st["lo"]) == pytest.approx(0.005, rel=1e-5) and float(st["hi"]) == pytest.approx(0.095, rel=1e-5)
    assert float(off) == pytest.approx(0.005, rel=1e-5) and float(scale) == 1.0   # limit 1
    st = {"lo": jnp.float32(-1.0), "hi": jnp.float32(30.0)}
    st2, off, scale = returns.retnorm_update(st, ret, cfg)
    lo = 0.99 * -1 + 0.01 * 0.5
    hi = 0.99 * 30 + 0.01 * 9.5
    assert float(off) == pytest.approx(lo, rel=1e-5) and float(scale) == pytest.approx(hi - lo, rel=1e-5)


# ------------------------------------------------------------------ optimizer

def test_chunked_norms_against_numpy():
    rng = np.random.default_rng(0)
    arrays = [rng.normal(size=s).astype(np.float32) for s in [(3, 700), (5,), (2048,), (1, 1)]]
    want = [np.linalg.norm(a.astype(np.float64)) for a in arrays]
    got = optim.chunked_norms([jnp.asarray(a) for a in arrays])     # one norm per array
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
    got = optim.chunked_norms([jnp.asarray(a) for a in arrays], [1, 0, 1, 0], chunk=256)
    np.testing.assert_allclose(np.asarray(got), [np.hypot(want[1], want[3]),
                                                 np.hypot(want[0], want[2])], rtol=1e-6)
    with pytest.raises(ValueError, match="2 groups for 4 arrays"):
        optim.chunked_norms([jnp.asarray(a) for a in arrays], [0, 1])
    with pytest.raises(ValueError, match="no arrays"):
        optim.chunked_norms([])
    with pytest.raises(ValueError, match="AgentConfig.opt_norms: expected one of"):
        resolve("opt_norms", "flat")
    with pytest.raises(ValueError, match="optim.apply: norms must be one of"):
        optim.apply(None, None, None, None, "auto")        # resolved forms only, before work


@pytest.mark.parametrize("norms", ["tensor", "chunked"])
def test_optimizer_against_hand_computation(norms):
    cfg = AgentConfig.for_profile("smoke", warmup=2, lr=0.1, opt_norms=norms)
    params = {"a": jnp.array([[3.0, 4.0]], jnp.float32), "b": jnp.array([1e-5, 0.0], jnp.float32)}
    grads = [{"a": jnp.array([[1.0, -2.0]]), "b": jnp.array([3.0, 4.0])},
             {"a": jnp.array([[0.1, 0.0]]), "b": jnp.array([-1.0, 0.5])},
             {"a": jnp.array([[5.0, 5.0]]), "b": jnp.array([0.0, 1.0])}]
    tx = optim.make(cfg)
    state = tx.init(params)
    p_np = {k: np.float64(v) for k, v in params.items()}
    nu = {k: np.zeros_like(v) for k, v in p_np.items()}
    mu = {k: np.zeros_like(v) for k, v in p_np.items()}
    for t, g in enumerate(grads, start=1):
        new_params, state, m = optim.apply(tx, g, state, params, norms)
        for k in p_np:
            gk = np.float64(g[k])
            upper = 0.3 * max(1e-3, np.linalg.norm(p_np[k]))
            u = gk / max(1.0, np.linalg.norm(gk) / upper)                      # AGC
            nu[k] = 0.999 * nu[k] + 0.001 * u * u
            # bias corrections in float32 as jnp computes beta ** step (1 - 0.999 is inexact)
            u = u / (np.sqrt(nu[k] / np.float64(1 - np.float32(0.999) ** t)) + 1e-20)  # RMS
            mu[k] = 0.9 * mu[k] + 0.1 * u
            u = mu[k] / np.float64(1 - np.float32(0.9) ** t)                 # momentum
            u = -0.1 * u * min(max((t - 1) / 2, 0), 1)                       # lr, warm-up
            p_np[k] = p_np[k] + u
        for k in p_np:
            np.testing.assert_allclose(new_params[k], p_np[k], rtol=1e-5, atol=1e-9)
        assert float(m["opt_grad_steps"]) == t
        gn = np.sqrt(sum((np.float64(v) ** 2).sum() for v in g.values()))
        assert float(m["opt_grad_norm"]) == pytest.approx(gn, rel=1e-6)
        assert float(m["opt_param_norm"]) == pytest.approx(
            np.sqrt(sum((v ** 2).sum() for v in p_np.values())), rel=1e-5)
        params = new_params
        if t == 1:
            assert float(m["opt_update_norm"]) == 0.0          # first update multiplied by 0
    # "b" starts near 0: its AGC bound uses pmin 1e-3 -> the first grad is scaled to norm 3e-4


# ------------------------------------------------------------------ sizes

def test_param_count_full_profile():
    cfg = AgentConfig.for_profile("full")
    shapes = jax.eval_shape(lambda k: agent.init_params(k, cfg), jax.random.PRNGKey(0))
    counts = {m: agent.param_count(p) for m, p in shapes.items()}
    assert agent.param_count(shapes) == 637_381
    # the reference's 1m preset per module (ALGORITHM.md section 0), minus 65 padded
    # two-hot columns in rew and critic
    assert counts == {"dyn": 364_160, "critic": 66_176 - 65, "rew": 57_728 - 65, "dec": 49_796,
                      "actor": 49_666, "con": 41_153, "enc": 8_832}


def test_init_scales():
    cfg = AgentConfig.for_profile("full")
    p = agent.init_params(jax.random.PRNGKey(0), cfg)
    k = np.asarray(p["dyn"]["dyn0"]["kernel"])
    assert k.shape == (8, 64 + 3 * 64, 64)
    fan = 512 + 3 * 8 * 64                                  # full input width of the block layer
    assert np.std(k) == pytest.approx(1 / np.sqrt(fan), rel=0.03)
    assert np.abs(k).max() <= 2 * 1.1368 / np.sqrt(fan) + 1e-7
    assert np.std(np.asarray(p["enc"]["mlp1"]["kernel"])) == pytest.approx(1 / 8, rel=0.05)
    assert float(jnp.abs(p["rew"]["out"]["kernel"]).max()) == 0.0
    assert float(jnp.abs(p["critic"]["out"]["kernel"]).max()) == 0.0
    assert np.std(np.asarray(p["actor"]["out"]["kernel"])) == pytest.approx(0.01 / 8, rel=0.2)
    assert np.std(np.asarray(p["dec"]["out"]["kernel"])) == pytest.approx(0.1 / 8, rel=0.1)
    assert p["rew"]["out"]["kernel"].shape == (64, 255)


def test_config_errors():
    with pytest.raises(ValueError, match="decode"):
        AgentConfig(decode="pairs")
    with pytest.raises(ValueError, match="profile"):
        AgentConfig.for_profile("huge")
    with pytest.raises(ValueError, match="deter"):
        AgentConfig(deter=100, blocks=8)
    cfg = AgentConfig.from_params({"profile": "smoke", "decode": "ref"})
    assert (cfg.deter, cfg.hidden, cfg.units, cfg.decode) == (64, 16, 16, "ref")


def test_speed_forms_give_the_same_gradient_and_update():
    # The speed settings whose "auto" differs by backend (observe_grad, opt_norms): the
    # "batched" observe gradient with "chunked" norms is what a GPU traces
    # (config.resolve; "remat": tests/test_candidate_observe.py).  The
    # raw gradients (every leaf, the observe scan's RSSM kernels among them), the new state
    # and the metrics (the optimizer's norms among them) agree with the CPU's forms to
    # float32 rounding.
    from functools import partial

    from dreamer_parity.candidate.synthetic import synthetic_batch
    with pytest.raises(ValueError, match="observe_grad"):
        AgentConfig(observe_grad="fused")
    with pytest.raises(ValueError, match="opt_norms"):
        AgentConfig(opt_norms="flat")
    assert [resolve("observe_grad", "auto", b) for b in ("cpu", "tpu", "gpu")] == \
        ["scan", "scan", "batched"]
    assert [resolve("opt_norms", "auto", b) for b in ("cpu", "tpu", "gpu")] == \
        ["tensor", "tensor", "chunked"]
    assert resolve("observe_grad", "remat", "gpu") == "remat"
    gpu = AgentConfig.for_profile("smoke").resolved("gpu")
    assert (gpu.twohot_index, gpu.observe_grad, gpu.opt_norms) == ("compare", "batched",
                                                                     "chunked")
    out, jaxprs = {}, []
    for form, norms in (("scan", "tensor"), ("batched", "chunked")):
        cfg = AgentConfig.for_profile("smoke", observe_grad=form, opt_norms=norms)
        state = agent.init(jax.random.PRNGKey(0), cfg)
        batch = synthetic_batch(cfg, 3, 7, seed=1)
        step = partial(agent.train_step, cfg, internals=True)
        jaxpr = str(jax.make_jaxpr(step)(state, batch, jax.random.PRNGKey(2)))
        assert jaxpr not in jaxprs          # each form traces its own program
        jaxprs.append(jaxpr)
        out[form] = jax.jit(step)(state, batch, jax.random.PRNGKey(2))
    g = out["scan"][1]["grads"]["dyn"]
    assert min(float(np.abs(np.asarray(g[k]["kernel"])).max())
               for k in ("dynin0", "dynin1", "dyn0", "dyncore", "obs0", "obslogit")) > 1e-6
    assert float(out["scan"][2]["opt_grad_norm"]) > 1e-3
    ref = jax.tree_util.tree_leaves_with_path(out["scan"])
    for form in ("batched",):
        leaves = jax.tree_util.tree_leaves(out[form])
        assert len(leaves) == len(ref) > 10
        for (path, a), b in zip(ref, leaves):
            a, b = np.asarray(a), np.asarray(b)
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5 * max(np.abs(a).max(), 1e-30),
                                       err_msg=f"{form}: {jax.tree_util.keystr(path)}")

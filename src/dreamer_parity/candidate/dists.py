"""Categorical and Bernoulli pieces: unimix logits, straight-through one-hot samples,
KL and entropy of independent categoricals, soft-label Bernoulli log-likelihood.

Sampling is split into a noise source and a deterministic map so that a parity test can
supply the reference's draws: ``noise`` is either uniforms f32[..., 1] in [0, 1)
(inverse-CDF sampling from the key) or an explicit one-hot sample f32[..., K].
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["unimix_logits", "sample_onehot", "straight_through", "categorical_from_noise",
           "log_softmax", "entropy", "kl", "onehot_log_prob", "bernoulli_log_prob"]

sg = jax.lax.stop_gradient
f32 = jnp.float32


def unimix_logits(logits, unimix: float):
    """log(0.99 * softmax(l) + 0.01 / K) over the last axis (reference nets.py:207-217,
    527-531): float32 logits f32[..., K] of the mixed distribution, of the shape of
    ``logits`` f32[..., K].

    The result passes ``jax.lax.optimization_barrier`` (an identity: the values and the
    gradients are unchanged), so that XLA never fuses this softmax and its log with the
    softmax, log-softmax or cumulative sum of a consumer (sampling, straight-through, KL,
    entropy).  Fused, that chain of reductions over the minor axis of K classes crashed
    XLA:TPU (jax 0.10.2, libtpu 0.0.42, issue #55): it lowers each such reduction as a
    windowed one, nests the chain, and overflows its stack costing it (SIGSEGV in
    ``FusedSpatialMajorConvolution::MakeConvWindows``); ``softmax(unimix_logits(x))`` of an
    f32[1024, 32, 4] ``x`` alone was enough (tests/test_candidate_tpu_fusion.py).
    """
    probs = jax.nn.softmax(logits, -1)
    if unimix:
        probs = (1 - unimix) * probs + unimix * (jnp.ones_like(probs) / probs.shape[-1])
    return jax.lax.optimization_barrier(jnp.log(probs))


def sample_onehot(logits, u):
    """One-hot sample f32[..., K] of categorical(logits) by inverse CDF of uniforms
    u f32[...] in [0, 1).  No gradient."""
    probs = jax.nn.softmax(sg(logits), -1)
    cdf = jnp.cumsum(probs, -1)
    idx = (cdf < u[..., None]).astype(jnp.int32).sum(-1)
    idx = jnp.minimum(idx, logits.shape[-1] - 1)
    return jax.nn.one_hot(idx, logits.shape[-1], dtype=f32)


def straight_through(onehot, logits):
    """onehot + (probs - sg(probs)) with probs = softmax(logits) (reference
    jaxutils.py:103-121): the value is exactly the sample, the gradient flows to probs."""
    probs = jax.nn.softmax(logits, -1)
    return sg(onehot) + (probs - sg(probs))


def categorical_from_noise(logits, noise):
    """Straight-through one-hot sample f32[..., K] of logits f32[..., K].

    ``noise`` is uniforms f32[...] (shape = logits.shape[:-1]) for sampling, or an explicit
    one-hot f32[..., K] supplied from outside, which is then used as the sample.
    Raises ValueError on any other shape.
    """
    if noise.shape == logits.shape:
        onehot = noise.astype(f32)
    elif noise.shape == logits.shape[:-1]:
        onehot = sample_onehot(logits, noise)
    else:
        raise ValueError(f"dists.categorical_from_noise: noise shape {noise.shape} fits neither "
                         f"logits {logits.shape} nor their batch shape")
    return straight_through(onehot, logits)


def log_softmax(logits):
    """Normalised log-probabilities over the last axis (float32)."""
    return logits - jax.scipy.special.logsumexp(logits, -1, keepdims=True)


def entropy(logits):
    """Entropy f32[...] of categorical(logits) over the last axis (tfp OneHotCategorical)."""
    logp = log_softmax(logits)
    return -(jnp.exp(logp) * logp).sum(-1)


def kl(lhs, rhs):
    """KL(categorical(lhs) || categorical(rhs)) over the last axis, f32[...]."""
    lp = log_softmax(lhs)
    return (jnp.exp(lp) * (lp - log_softmax(rhs))).sum(-1)


def onehot_log_prob(logits, onehot):
    """log p(onehot) f32[...] under categorical(logits)."""
    return (onehot * log_softmax(logits)).sum(-1)


def bernoulli_log_prob(logit, y):
    """log-likelihood of a (soft) label y in [0, 1] under Bernoulli(logits=logit):
    -softplus(l) * (1 - y) - softplus(-l) * y  (tfp Bernoulli._log_prob with logits)."""
    return -jax.nn.softplus(logit) * (1 - y) + -jax.nn.softplus(-logit) * y

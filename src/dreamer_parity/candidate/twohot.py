"""The symexp two-hot distribution of the reward head and the critic.

Bins live in raw value space: ``symexp`` of a symmetric grid from -20 to 20 with ``n``
(odd, 255) points, so there is exactly one 0 in the middle and the range is +-(e^20 - 1)
(reference nets.py:467-476).  Two things can be chosen with ``decode``:

``exact`` (candidate default)
    Bins built once in float64 and rounded to float32 (exactly mirror-symmetric).  The
    expectation is ``sum((p[m+1:] - p[:m][::-1]) * b[m+1:])`` with m = (n-1)/2: the centre
    bin is 0 so p[m]*b[m] = 0, and the mirror pairs are differenced in probability space
    before multiplying.  It is exactly 0 whenever the probabilities are mirror-symmetric
    (for example all-zero logits) and XLA's contraction of multiply-add pairs into FMAs
    cannot change that, because no product of equal-and-opposite large terms is formed.

``ref`` (the reference's literal formula, jaxutils.py:226-250)
    Bins built as the reference builds them inside jit, in float32:
    ``half = symexp(linspace(-20, 0, 128)); bins = concat(half, -half[:-1][::-1])``, and the
    mean is the pair sum ``(p[m]*b[m]).sum() + ((p[:m]*b[:m])[::-1] + p[m+1:]*b[m+1:]).sum()``.
    Under jit XLA fuses each pair into an FMA, leaving one product unrounded, so with
    |b| up to 4.85e8 the sum of nominally cancelling pairs is not 0.  Measured (study
    DIAGNOSIS.txt): with all-zero logits a program-dependent constant (+0.0153 inside the
    reference train step, -0.169 standalone, +0.162 in another program); from about update
    2, once the central logits move while the outer bins stay mirror-equal, per-element noise
    of std ~0.08-0.09 (max ~0.3) against a true spread of ~1e-4 in rewards, values and
    slow-critic targets, lasting ~1500-2500 updates at the 1m size on CartPole (reference
    val/std 0.085 at 2000 rows, 0.052 at 4000, ~0.01 at 6000 vs ~0.003 with the exact form).
    Swapping only this formula into the other implementation reproduced the reference's
    window-1 ret/adv/val spread and ~92% of its higher early actor entropy.

``log_prob`` is the reference's two-hot likelihood (jaxutils.py:255-274) for both choices;
it is written as a gather of the two neighbouring log-probabilities, which equals the
reference's dense one-hot sum exactly (the other terms are exact zeros).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .nets import symexp

__all__ = ["bins", "bins_exact", "bins_ref", "mean", "mean_exact", "mean_ref", "log_prob",
           "encode"]

f32 = jnp.float32


def bins_exact(n: int = 255):
    """float32[n] bins: symexp(linspace(-20, 20, n)) in float64, rounded once, with the
    negative half set to exactly minus the positive half (odd ``n`` only)."""
    if n % 2 != 1:
        raise ValueError(f"twohot.bins_exact: n must be odd, got {n}")
    m = (n - 1) // 2
    pos = np.expm1(np.linspace(0.0, 20.0, m + 1))[1:].astype(np.float32)
    return jnp.asarray(np.concatenate([-pos[::-1], np.zeros(1, np.float32), pos]), f32)


def bins_ref(n: int = 255):
    """float32[n] bins built with jnp ops as the reference builds them (nets.py:467-471);
    call inside the traced function so they are built in the same way."""
    if n % 2 != 1:
        raise ValueError(f"twohot.bins_ref: n must be odd, got {n}")
    half = jnp.linspace(-20, 0, (n - 1) // 2 + 1, dtype=f32)
    half = symexp(half)
    return jnp.concatenate([half, -half[:-1][::-1]], 0)


def bins(n: int, decode: str):
    """The bins of ``decode`` ("exact" | "ref")."""
    if decode == "exact":
        return bins_exact(n)
    if decode == "ref":
        return bins_ref(n)
    raise ValueError(f"twohot.bins: decode must be 'exact' or 'ref', got {decode!r}")


def mean_exact(logits, b):
    """Expectation f32[...] of f32[..., n] logits: mirror-difference form (see module doc)."""
    p = jax.nn.softmax(logits, -1)
    m = (logits.shape[-1] - 1) // 2
    return ((p[..., m + 1:] - p[..., :m][..., ::-1]) * b[m + 1:]).sum(-1)


def mean_ref(logits, b):
    """Expectation f32[...] by the reference's pair sum (jaxutils.py:233-243, odd n)."""
    p = jax.nn.softmax(logits, -1)
    m = (logits.shape[-1] - 1) // 2
    p1, p2, p3 = p[..., :m], p[..., m:m + 1], p[..., m + 1:]
    b1, b2, b3 = b[:m], b[m:m + 1], b[m + 1:]
    return (p2 * b2).sum(-1) + ((p1 * b1)[..., ::-1] + (p3 * b3)).sum(-1)


def mean(logits, b, decode: str):
    """Expectation with the formula of ``decode`` ("exact" | "ref")."""
    if decode == "exact":
        return mean_exact(logits, b)
    if decode == "ref":
        return mean_ref(logits, b)
    raise ValueError(f"twohot.mean: decode must be 'exact' or 'ref', got {decode!r}")


def encode(x, b):
    """Two-hot target of raw values x f32[...] on bins b f32[n].

    Returns (below i32[...], above i32[...], w_below f32[...], w_above f32[...]) as in the
    reference (jaxutils.py:257-270): below = #(b <= x) - 1, above = n - #(b > x), both
    clipped to [0, n-1]; equal indices give weights 0.5/0.5 on the same bin.
    """
    n = b.shape[0]
    below = (b <= x[..., None]).astype(jnp.int32).sum(-1) - 1
    above = n - (b > x[..., None]).astype(jnp.int32).sum(-1)
    below = jnp.clip(below, 0, n - 1)
    above = jnp.clip(above, 0, n - 1)
    equal = below == above
    d_below = jnp.where(equal, 1, jnp.abs(b[below] - x))
    d_above = jnp.where(equal, 1, jnp.abs(b[above] - x))
    total = d_below + d_above
    return below, above, d_above / total, d_below / total


def log_prob(logits, x, b):
    """Two-hot log-likelihood f32[...] of raw targets x f32[...] under logits f32[..., n]."""
    below, above, wb, wa = encode(x, b)
    logp = logits - jax.scipy.special.logsumexp(logits, -1, keepdims=True)
    lb = jnp.take_along_axis(logp, below[..., None], -1)[..., 0]
    la = jnp.take_along_axis(logp, above[..., None], -1)[..., 0]
    return wb * lb + wa * la

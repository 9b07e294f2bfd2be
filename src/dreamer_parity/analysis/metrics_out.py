"""DVC metrics and plot data of a round (flat keys, no NaN or Infinity tokens).

``summary.json`` holds one flat dict (keys with dots print well in ``dvc metrics
show/diff``).  Per statistic ``X`` in ``S1``, ``S2`` (at the last row), ``LATE``:

``X.reference.s<seed>`` for each reference seed, ``X.candidate.s<seed>`` for each
candidate seed (each side's own seeds: the sides may differ in number), ``X.<side>.mean``
for every side that has the statistic (S2: a side with training episodes, also against a published side,
whose absence is ``S2.<side>.reason``); where both sides have it, the decision
``X.A, X.lo, X.hi, X.LEARNS, X.WITHIN_RANGE, X.diff`` (mean candidate - mean reference),
``X.welch_t, X.welch_p, X.welch_df, X.welch.reason``, ``X.reason`` (no decision), and
the additions (not pre-registered) ``X.addition.boot_lo``,
``X.addition.boot_hi``, ``X.addition.boot.reason``, ``X.addition.seeds_needed``,
``X.addition.effect``, ``X.addition.seeds_needed.reason``.

Also ``concordance.<side>.at_<row>``, ``concordance.<side>.rate``,
``concordance.H1/H3/candidate_better/reading`` (+ ``.reason``), ``entropy.overlap_windows``,
``entropy.windows``, ``entropy.w<row>.overlap``, ``entropy.w<row>.ratio`` (both sides),
``entropy.<side>.w<row>.mean|lo|hi`` and ``entropy.<side>.windows`` for each side that
has windows (:func:`windows.entropy_keys`; ``entropy.<side>.reason`` otherwise), ``checks.*``,
``failed_seeds.<side>``, ``failed_rule``, the pre-registered window tests where the
round names them (``signature.*``, ``persistence.*``: :func:`window_tests.summary_keys`),
the halves check of a side with two sources (``halves.*``: :func:`halves.summary_keys`),
and the labelled additions ``addition.*``
(:func:`additions.summary_keys`: ``addition.tost.*``, ``addition.rliable.*``,
``addition.collapse.<side>.s<seed>`` with ``.best``, ``.best_row``, ``.final``).  Every
null value has a ``*.reason`` key.

``headline.json`` (:func:`headline`) holds a round's headline numbers only, the file
``dvc.yaml`` declares as the round's DVC metrics (``dvc metrics show``, ``dvc exp show``);
``summary.json`` and ``windows.json`` are read with ``--targets``.

``plots/eval_curve.csv``: ``rows, side, seed, eval_mean, s2`` (one row per evaluation
point and seed; ``s2`` empty when undefined or not available).
``plots/entropy_windows.csv``: ``rows, side, mean, lo, hi, overlap``.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pandas as pd

from dreamer_parity import records
from dreamer_parity.analysis import stats

__all__ = ["summary", "write_summary", "headline", "headline_line", "HEADLINE_KEYS",
           "missing_reasons", "write_plot_data", "eval_curve_frame", "entropy_frame",
           "atomic_text", "source_rows", "source_keys", "platform_parts", "platform_text",
           "seed_ranges"]


#: The atomic text writer (:func:`dreamer_parity.records.write_text`).
atomic_text = records.write_text


def _num(x):
    """A finite float/int/bool, or None (never NaN/Infinity)."""
    if x is None:
        return None
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    x = float(x)
    return x if math.isfinite(x) else None


def _stat_keys(out: dict, name: str, block: dict | None, seeds: dict) -> None:
    """Keys of one statistic: per side and seed where the side has values (S2 of a side
    with training episodes against a published side), the decision where both have."""
    if block is None or block.get("reason") and "decision" not in block:
        out[f"{name}.reason"] = (block or {}).get("reason") or "not computed"
        for side, why in (block or {}).get("side_reason", {}).items():
            if why:
                out[f"{name}.{side}.reason"] = why
        _side_keys(out, name, (block or {}).get("values", {}), seeds)
        return
    d = block["decision"]
    _side_keys(out, name, block["values"], seeds)
    for key in ("A", "lo", "hi", "diff", "LEARNS", "WITHIN_RANGE"):
        out[f"{name}.{key}"] = _num(d[key])
    if d["reason"]:
        out[f"{name}.reason"] = d["reason"]
    w = d["welch"]
    out[f"{name}.welch_t"], out[f"{name}.welch_p"], out[f"{name}.welch_df"] = \
        _num(w["t"]), _num(w["p"]), _num(w["df"])
    if w["reason"]:
        out[f"{name}.welch.reason"] = w["reason"]
    b, p = d["bootstrap"], d["power"]
    out[f"{name}.addition.boot_lo"], out[f"{name}.addition.boot_hi"] = _num(b["lo"]), _num(b["hi"])
    if b["reason"]:
        out[f"{name}.addition.boot.reason"] = b["reason"]
    out[f"{name}.addition.seeds_needed"] = _num(p["n"])
    out[f"{name}.addition.effect"] = _num(p["effect"])
    if p["reason"]:
        out[f"{name}.addition.seeds_needed.reason"] = p["reason"]


def _side_keys(out: dict, name: str, values: dict, seeds: dict) -> None:
    """``<name>.<side>.s<seed>`` (the side's own ``seeds[side]``) and ``<name>.<side>.mean``
    of every side in ``values``."""
    for side in ("reference", "candidate"):
        if side not in values:
            continue
        vals = values[side]
        for s, v in zip(seeds[side], vals, strict=True):
            out[f"{name}.{side}.s{s}"] = _num(v)
            if _num(v) is None:
                out[f"{name}.{side}.s{s}.reason"] = "undefined (an env had no finished episode)" \
                    if name == "S2" else "undefined"
        m = _num(np.mean(vals)) if len(vals) and np.isfinite(vals).all() else None
        out[f"{name}.{side}.mean"] = m


def source_rows(result: dict) -> list[dict]:
    """Per side and seed where the run came from and where it ran: ``{"side", "seed",
    "source", "run_dir", "layout", "made_by", "platform", "precision"}`` (``source``:
    ``run`` or the directory, never absolute; ``platform`` and ``precision`` as the run
    records them, :func:`dreamer_parity.analysis.runs.execution`, ``unknown`` where it
    records none)."""
    from dreamer_parity.analysis.load import display_path
    from dreamer_parity.analysis.runs import UNKNOWN, execution

    out = []
    for side in ("reference", "candidate"):
        runs = {r.seed: r for r in result["sides"][side].get("runs", [])}
        for e in result["sides"][side].get("seeds", []):
            ex = (execution(runs[e.seed]) if e.seed in runs
                  else {"platform": UNKNOWN, "precision": UNKNOWN})
            out.append({"side": side, "seed": e.seed,
                        "source": e.source if e.source == "run" else display_path(e.source),
                        "run_dir": display_path(e.run_dir), "layout": e.layout,
                        "made_by": e.made_by, **ex})
    return out


def seed_ranges(seeds: list[int]) -> str:
    """``[0, 1, 2, 4]`` as ``0-2, 4``."""
    out, seeds = [], sorted(seeds)
    i = 0
    while i < len(seeds):
        j = i
        while j + 1 < len(seeds) and seeds[j + 1] == seeds[j] + 1:
            j += 1
        out.append(str(seeds[i]) if i == j else f"{seeds[i]}-{seeds[j]}")
        i = j + 1
    return ", ".join(out)


def platform_parts(result: dict) -> dict[str, list[dict]]:
    """Per side its parts by where the runs ran: ``[{"platform", "precision", "seeds"}]``
    in order of first seed (one part for a side that ran on one platform and precision;
    several for a side pooled from several)."""
    parts: dict[str, dict] = {"reference": {}, "candidate": {}}
    for r in source_rows(result):
        parts[r["side"]].setdefault((r["platform"], r["precision"]), []).append(r["seed"])
    return {side: [{"platform": k[0], "precision": k[1], "seeds": v} for k, v in d.items()]
            for side, d in parts.items()}


def platform_text(part: dict) -> str:
    """One part of :func:`platform_parts` as ``tpu/highest (s0-9)``."""
    return f"{part['platform']}/{part['precision']} (s{seed_ranges(part['seeds'])})"


def source_keys(result: dict) -> dict:
    """Per seed ``source.<side>.s<S>``, ``made_by.<side>.s<S>``, ``platform.<side>.s<S>``
    and ``precision.<side>.s<S>`` (:func:`source_rows`), and per side ``platform.<side>``:
    its parts joined by ``; `` (:func:`platform_parts`, e.g. ``cpu/default (s0-9);
    tpu/highest (s10-29)``)."""
    out = {}
    for r in source_rows(result):
        out[f"source.{r['side']}.s{r['seed']}"] = r["source"]
        out[f"made_by.{r['side']}.s{r['seed']}"] = r["made_by"]
        out[f"platform.{r['side']}.s{r['seed']}"] = r["platform"]
        out[f"precision.{r['side']}.s{r['seed']}"] = r["precision"]
    for side, parts in platform_parts(result).items():
        if parts:
            out[f"platform.{side}"] = "; ".join(platform_text(p) for p in parts)
    return out


def summary(result: dict) -> dict:
    """The flat metrics dict of a round (see the module docstring)."""
    round_ = result["round"]
    seeds = result["seeds"]
    out = {"round": round_.name, "rows": round_.protocol.rows,
           "failed_rule": round_.stats.failed_rule}
    out.update(source_keys(result))
    for side, runs in result["failed_seeds"].items():
        out[f"failed_seeds.{side}"] = len(runs)
    _stat_keys(out, "S1", result["s1"], seeds)
    s2 = result["s2"]
    out["S2.row"] = s2["row"]
    _stat_keys(out, "S2", s2, seeds)
    late = result["late"]
    if late["rows"]:
        out["LATE.first"], out["LATE.last"], out["LATE.points"] = late["rows"][0], late["rows"][1], \
            len(late["points"])
    _stat_keys(out, "LATE", late, seeds)

    if result.get("halves"):
        from dreamer_parity.analysis import halves
        out.update(halves.summary_keys(result["halves"]))
    c = result["concordance"]
    for row, counts in c["at"].items():
        for side, n in counts.items():
            out[f"concordance.{side}.at_{row}"] = n
    for side, rate in c["rate"].items():
        out[f"concordance.{side}.rate"] = _num(rate)
    if c["reason"]:
        out["concordance.rate.reason"] = c["reason"]
    if result.get("published_windows") is not None:
        from dreamer_parity.analysis import published_windows
        out.update(published_windows.summary_keys(result["published_windows"]))
    from dreamer_parity.analysis import reference_check
    out.update(reference_check.summary_keys(result.get("published_reference")))
    r = result["reading"]
    for key in ("H1", "H3", "candidate_better", "reading"):
        out[f"concordance.{key}"] = r[key]
    out["concordance.needed_reference"] = r["needed_reference"]
    if r["reason"]:
        out["concordance.reading.reason"] = r["reason"]

    e = result["entropy"]
    out["entropy.overlap_windows"], out["entropy.windows"] = e["overlap"], e["windows"]
    if e["reason"]:
        out["entropy.reason"] = f"no comparison: {e['reason']}"
    if result.get("side_windows") is not None:
        from dreamer_parity.analysis import windows
        out.update(windows.entropy_keys(result["side_windows"]))
    if result.get("window_tests") is not None:
        from dreamer_parity.analysis import window_tests
        out.update(window_tests.summary_keys(result["window_tests"]))
    t = result["windows"]["table"]
    if t is not None:
        for _, row in t[t["metric"] == stats.ENTROPY].iterrows():
            ov = row["overlap"]
            key = f"entropy.w{row['rows']}"
            out[f"{key}.overlap"] = None if ov is None or pd.isna(ov) else bool(ov)
            out[f"{key}.ratio"] = _num(row["ratio"])
            if out[f"{key}.overlap"] is None:
                out[f"{key}.reason"] = "a side has no finite value in this window"
            elif out[f"{key}.ratio"] is None:
                out[f"{key}.reason"] = "reference mean is 0: no ratio"
    counts = {}
    for ch in result["checks"]:
        counts[ch.status] = counts.get(ch.status, 0) + 1
    out["checks.passed"] = counts.get("PASS", 0)
    out["checks.failed"] = counts.get("FAIL", 0)
    out["checks.flagged"] = counts.get("FLAG", 0)
    out["checks.not_available"] = counts.get("N/A", 0)
    ctx = result.get("context")
    if ctx is not None and ctx.get("missing"):
        out["context.study_candidate.missing"] = ", ".join(f"s{s}" for s in ctx["missing"])
        out["context.study_candidate.reason"] = (
            f"{ctx['dir']} lacks seeds {ctx['missing']} of the round: the study's candidate "
            f"is not scored")
    elif ctx is not None:
        for name in ("s1", "late"):
            if ctx[name] is not None:
                key = f"context.study_candidate.{name.upper()}"
                for s, v in zip(result["seeds"]["reference"], ctx[name], strict=True):
                    out[f"{key}.s{s}"] = _num(v)
                out[f"{key}.mean"] = _num(np.mean(ctx[name]))
    if "gate" in result:
        from dreamer_parity.analysis import gate
        out.update(gate.flat_keys(result["gate"]))
        if out["gate.statistic"] is None:
            out["gate.statistic.reason"] = result["gate"]["reason"]
    if "versions" in result:
        v = result["versions"]
        out["versions.status"] = v["status"]
        out["versions.detail"] = v["detail"]
        out["versions.sides_differ"] = v["sides_differ"]
        for side, mixed in v["mixed"].items():
            out[f"versions.mixed.{side}"] = mixed
    if "additions" in result:
        from dreamer_parity.analysis import additions
        out.update(additions.summary_keys(result["additions"]))
    return {k: (_num(v) if isinstance(v, (float, int, np.floating, np.integer, np.bool_)) else v)
            for k, v in out.items()}


_ALIASES = {"welch_t": "welch", "welch_p": "welch", "welch_df": "welch", "boot_lo": "boot",
            "boot_hi": "boot", "effect": "seeds_needed", "H1": "reading", "H3": "reading",
            "candidate_better": "reading"}


def missing_reasons(s: dict) -> list[str]:
    """Keys of ``s`` whose value is null and that have no non-null ``*.reason`` key.

    The reason of ``a.b.c`` is ``a.b.c.reason`` or the reason of a prefix (``a.b.reason``,
    ``a.reason``), after mapping the members of a group onto it (``welch_t`` ->
    ``welch``, ``boot_lo`` -> ``boot``, ``H1`` -> ``reading``; ``<side>.rate`` ->
    ``rate``); a side's ``mean`` is also explained by one of its seeds' reasons.
    """
    bad = []
    for k, v in s.items():
        if v is not None or k.endswith(".reason"):
            continue
        raw = k.split(".")
        parts = [_ALIASES.get(p, p) for p in raw]
        if parts[0] == "concordance" and parts[-1] == "rate":
            parts = ["concordance", "rate"]
        # the key's own prefixes (gate.welch_p.reason), then its group's (LATE.welch.reason)
        ok = any(s.get(".".join(ps[:i]) + ".reason")
                 for ps in (raw, parts) for i in range(len(ps), 0, -1))
        if not ok and parts[-1] == "mean":
            stem = ".".join(parts[:-1]) + ".s"
            ok = any(r.startswith(stem) and r.endswith(".reason") and s[r] for r in s)
        if not ok:
            bad.append(k)
    return bad


def write_summary(result: dict, path) -> dict:
    """Write ``summary.json`` atomically (``allow_nan=False``); returns the dict.

    Raises:
      AssertionError: a null value without a reason (a bug in :func:`summary`).
    """
    s = summary(result)
    bad = missing_reasons(s)
    assert not bad, f"summary.json: null without a reason: {bad}"
    records.write_json(path, s)
    return s


#: The keys of ``headline.json``, in the order the rounds table prints them.
HEADLINE_KEYS = ("statistic", "candidate.n", "reference.n", "candidate.mean", "reference.mean",
                 "diff", "ci90.lo", "ci90.hi", "welch_p", "gate", "reading")


def headline(s: dict) -> dict:
    """A round's headline numbers from its ``summary.json`` dict (any kept round's).

    The statistic is the round's primary one (``addition.primary``: ``LATE``, or ``S1``
    where the round pre-registers no late stretch; ``LATE`` when the summary predates
    that key).  Keys (:data:`HEADLINE_KEYS`): ``statistic`` (str); ``candidate.n``,
    ``reference.n`` (int, the side's seeds that have a value of the statistic);
    ``candidate.mean``, ``reference.mean``, ``diff`` (candidate - reference), in
    evaluation-return units (float); ``ci90.lo``, ``ci90.hi`` (float, the 90% Welch
    interval of the difference: ``addition.tost.ci_lo/ci_hi``); ``welch_p`` (float);
    ``gate`` (str, ``gate.verdict``; ``no gate`` where the summary has none);
    ``reading`` (str, ``addition.tost.reading``: equivalent, deficit, candidate ahead or
    inconclusive).  A value the summary does not hold is None (its ``.reason`` is in the
    summary).  Pure: reads nothing else; never raises on a summary dict.
    """
    stat = s.get("addition.primary") or "LATE"

    def n(side):
        return sum(1 for k, v in s.items() if k.startswith(f"{stat}.{side}.s")
                   and k[len(f"{stat}.{side}.s"):].isdigit() and v is not None)
    return {"statistic": stat, "candidate.n": n("candidate"), "reference.n": n("reference"),
            "candidate.mean": s.get(f"{stat}.candidate.mean"),
            "reference.mean": s.get(f"{stat}.reference.mean"), "diff": s.get(f"{stat}.diff"),
            "ci90.lo": s.get("addition.tost.ci_lo"), "ci90.hi": s.get("addition.tost.ci_hi"),
            "welch_p": s.get(f"{stat}.welch_p"), "gate": s.get("gate.verdict") or "no gate",
            "reading": s.get("addition.tost.reading")}


def headline_line(h: dict) -> str:
    """:func:`headline`'s numbers in one line (``compare``'s line for a round without a
    gate).

    Args:
      h: :func:`headline`'s dict (means, difference and interval in evaluation-return
        units, float or None).

    Returns:
      e.g. ``LATE: candidate 262.3, reference 309.3, difference -46.9, 90% interval
      [-83.5, -10.3], deficit``, one decimal; a value the summary does not hold reads ``-``.

    Raises:
      KeyError: ``h`` has no ``statistic``.
    """
    def f(key, fmt=".1f"):
        return "-" if h.get(key) is None else format(h[key], fmt)
    return (f"{h['statistic']}: candidate {f('candidate.mean')}, reference "
            f"{f('reference.mean')}, difference {f('diff')}, 90% interval "
            f"[{f('ci90.lo')}, {f('ci90.hi')}], {h.get('reading') or '-'}")


def eval_curve_frame(result: dict) -> pd.DataFrame:
    """One row per (side, seed, evaluation point): ``rows, side, seed, eval_mean, s2``.

    Sides ``reference`` and ``candidate`` (each with its own seeds), plus
    ``study_candidate`` (the published study's own candidate of the reference's seeds,
    context only; S2 not published) when the result has one.
    """
    pts = result["points"]
    seeds = {**result["seeds"], "study_candidate": result["seeds"]["reference"]}
    mats = {side: (result["eval"][side], result["s2"].get("curve", {}).get(side))
            for side in ("reference", "candidate")}
    if result.get("context") is not None and result["context"].get("eval") is not None:
        mats["study_candidate"] = (result["context"]["eval"], None)
    frames = []
    for side, (mat, s2) in mats.items():
        for i, s in enumerate(seeds[side]):
            frames.append(pd.DataFrame({
                "rows": pts, "side": side, "seed": s, "eval_mean": mat[i],
                "s2": s2[i] if s2 is not None else np.full(len(pts), np.nan)}))
    return pd.concat(frames, ignore_index=True)


def entropy_frame(result: dict) -> pd.DataFrame:
    """The actor-entropy windows of each side that has them: ``rows, side, mean, lo, hi,
    overlap`` (``overlap`` empty unless both sides have the window; windows without a
    finite value skipped; empty frame when no side has windows)."""
    cols = ["rows", "side", "mean", "lo", "hi", "overlap"]
    win = result.get("side_windows")
    if win is None:
        return pd.DataFrame(columns=cols)
    ov = win["overlap"].get(stats.ENTROPY, {})
    rows = []
    for side in ("reference", "candidate"):
        sw = win["sides"][side]
        if sw["reason"] is not None or stats.ENTROPY not in sw["metrics"]:
            continue
        w = sw["metrics"][stats.ENTROPY]
        for j, r in enumerate(sw["rows"].tolist()):
            if w["n"][j]:
                rows.append({"rows": r, "side": side, "mean": w["mean"][j], "lo": w["lo"][j],
                             "hi": w["hi"][j], "overlap": ov.get(r)})
    return pd.DataFrame(rows, columns=cols)


def _csv(df: pd.DataFrame) -> str:
    buf = io.StringIO()
    df.to_csv(buf, index=False, na_rep="", float_format="%.10g")
    return buf.getvalue()


def write_plot_data(result: dict, plots_dir) -> None:
    """Write ``eval_curve.csv`` and ``entropy_windows.csv`` under ``plots_dir``."""
    plots_dir = Path(plots_dir)
    atomic_text(plots_dir / "eval_curve.csv", _csv(eval_curve_frame(result)))
    atomic_text(plots_dir / "entropy_windows.csv", _csv(entropy_frame(result)))

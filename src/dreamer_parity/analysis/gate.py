"""A round's gate: the pass/fail rule its pre-registration writes into ``params.yaml``.

``params.yaml`` ``gate`` names the statistic the gate reads (``s1`` or ``late``, PROTOCOL
5.2 / round 3) and its parts; every part that is set must hold:

``learns``                the candidate's mean of the statistic (A) >= the lowest
                          reference seed's value (LEARNS)
``mean_min``              A >= this bar (return units)
``welch_p_min``           Welch's two-sided p of the per-seed values >= this bar
``entropy_overlap_rows``  the seed ranges of the actor entropy (``ent/action/mean``) of the
                          training window ending at these rows overlap between the sides.
                          A reference that ran gives its range from its records; a
                          published reference from the study's report table
                          (``data/published/tables.csv``, :data:`PUBLISHED_REPORTS`).

:func:`evaluate` takes :func:`dreamer_parity.analysis.compare.analyse`'s result and
returns each part's value, bar and verdict; ``pass`` is False when a part fails, None when
a part cannot be decided (the reason says why) and True when all hold.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dreamer_parity.analysis import published_tables, stats
from dreamer_parity.analysis.load import Run
from dreamer_parity.round_spec import Gate

__all__ = ["PUBLISHED_REPORTS", "run_entropy", "seed_range", "ranges_overlap",
           "reference_entropy_range", "evaluate", "flat_keys", "report_lines", "console_line"]

#: Published round directory -> the report whose window tables describe its reference runs.
PUBLISHED_REPORTS = {"round1": "round1/compare.md", "round2": "round2/pairE/compare.md"}


def run_entropy(runs: list[Run], row: int) -> np.ndarray:
    """``ent/action/mean`` of each run's training window ending at ``row``.

    Returns float64 ``[len(runs)]`` (nats); NaN where a run has no record at ``row``, no
    such metric, or a null window.  The record at ``row`` holds the mean over the updates
    since the previous record (records.py ``train``).
    """
    out = np.full(len(runs), np.nan, dtype=np.float64)
    for i, run in enumerate(runs):
        t = run.train
        if t is not None and stats.ENTROPY in t.columns and row in t.index:
            out[i] = float(t.loc[row, stats.ENTROPY])
    return out


def seed_range(values) -> dict:
    """``{"lo", "hi", "mean", "n"}`` over the finite entries of ``values`` (None if none)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if not len(v):
        return {"lo": None, "hi": None, "mean": None, "n": 0}
    return {"lo": float(v.min()), "hi": float(v.max()), "mean": float(v.mean()), "n": int(len(v))}


def ranges_overlap(a_lo, a_hi, b_lo, b_hi) -> bool | None:
    """Whether [a_lo, a_hi] and [b_lo, b_hi] share a point (None when a bound is None)."""
    if None in (a_lo, a_hi, b_lo, b_hi):
        return None
    return bool(max(a_lo, b_lo) <= min(a_hi, b_hi))


def reference_entropy_range(side: dict, row: int) -> dict:
    """The reference side's actor-entropy seed range of the window ending at ``row``.

    Args:
      side: ``analyse(...)["sides"]["reference"]`` (``dir``, ``layout``, ``runs``).
      row: the window's last row.

    Returns:
      :func:`seed_range`'s dict plus ``source`` (where the range came from) and
      ``reason`` (None, or why there is no range).

    Raises:
      AnalysisError: the published table is malformed (names the file and line).
    """
    if side["layout"] != "published":
        r = seed_range(run_entropy(side["runs"], row))
        return {**r, "source": "the reference runs' records",
                "reason": None if r["n"] else f"no reference seed has {stats.ENTROPY} at {row}"}
    path = side.get("path", side["dir"])   # None: several source directories
    if path is None:
        return {"lo": None, "hi": None, "mean": None, "n": 0, "source": None,
                "reason": "the published reference side comes from several directories"}
    d = Path(path)
    report = PUBLISHED_REPORTS.get(d.name)
    if report is None:
        return {"lo": None, "hi": None, "mean": None, "n": 0, "source": None,
                "reason": f"the study published no training-metric windows for {d.name}"}
    cell = published_tables.window_range(d.parent / published_tables.TABLE_FILE, report, row,
                                         stats.ENTROPY)
    return {"lo": cell["lo"], "hi": cell["hi"], "mean": cell["mean"], "n": None,
            "source": f"{report} line {cell['line']} (tables.csv)", "reason": None}


def evaluate(g: Gate, result: dict) -> dict:
    """Evaluate the round's gate ``g`` (:attr:`dreamer_parity.round_spec.Round.gate`) on an
    ``analyse`` result.

    Returns:
      ``{"statistic": "s1" | "late" | None, "parts": {name: {"value", "bar", "ok",
      "reason"}}, "pass": bool | None, "reason": str | None, "verdict": "pass" | "fail" |
      "undecided" | "no gate" | "no verdict", "withheld": str | None}``; with no gate
      (``gate.statistic: none``) ``parts`` is empty and ``pass`` None with the reason.
      When any check of ``result["checks"]`` failed, the verdict is withheld: ``pass``
      None, ``verdict`` ``"no verdict"``, ``withheld`` naming the failed checks.
    """
    stat = g.statistic
    if stat == "none":
        return _withhold({"statistic": None, "parts": {}, "pass": None, "verdict": "no gate",
                          "withheld": None,
                          "reason": "this round pre-registers no gate (gate.statistic: none)"},
                         result)
    sec = result[stat]
    dec = sec.get("decision")
    if dec is None:
        return _withhold({"statistic": stat, "parts": {}, "pass": None, "verdict": "undecided",
                          "withheld": None,
                          "reason": sec.get("reason") or f"{stat} not computed"}, result)
    parts = {}
    if g.learns:
        parts["learns"] = {"value": dec["A"], "bar": dec["lo"], "ok": dec["LEARNS"],
                           "reason": None}
    if g.mean_min is not None:
        parts["mean_min"] = {"value": dec["A"], "bar": g.mean_min,
                             "ok": bool(dec["A"] >= g.mean_min), "reason": None}
    if g.welch_p_min is not None:
        p = dec["welch"]["p"]
        parts["welch_p"] = {"value": p, "bar": g.welch_p_min,
                            "ok": None if p is None else bool(p >= g.welch_p_min),
                            "reason": dec["welch"]["reason"]}
    rows = g.entropy_overlap_rows
    if rows is not None:
        cand = seed_range(run_entropy(result["sides"]["candidate"]["runs"], rows))
        ref = reference_entropy_range(result["sides"]["reference"], rows)
        ok = ranges_overlap(cand["lo"], cand["hi"], ref["lo"], ref["hi"])
        reason = ref["reason"] or (None if cand["n"] else
                                   f"no candidate seed has {stats.ENTROPY} at {rows}")
        parts["entropy_overlap"] = {"value": [cand["lo"], cand["hi"]],
                                    "bar": [ref["lo"], ref["hi"]], "ok": ok,
                                    "reason": reason if ok is None else None,
                                    "source": ref["source"], "rows": rows}
    oks = [p["ok"] for p in parts.values()]
    verdict = False if False in oks else (None if None in oks else True)
    undecided = [f"{k}: {p['reason']}" for k, p in parts.items() if p["ok"] is None]
    out = {"statistic": stat, "parts": parts, "pass": verdict,
           "reason": "; ".join(undecided) if verdict is None else None,
           "verdict": {True: "pass", False: "fail", None: "undecided"}[verdict],
           "withheld": None}
    return _withhold(out, result)


def _withhold(gate: dict, result: dict) -> dict:
    """Withhold the verdict of a gate when a check of the round failed.

    A failed check means the evidence is not the round's (another run, a broken file, an
    inconsistent episode log): the parts stay listed, ``pass`` becomes None, ``verdict``
    ``"no verdict"`` and ``withheld`` names the failed checks (at most three, then a count).
    """
    failed = [c for c in result.get("checks") or [] if c.status == "FAIL"]
    if not failed:
        return gate
    names = [f"{c.name}" + (f" ({c.side} s{c.seed})" if c.side else "") for c in failed]
    text = (f"{len(failed)} check(s) failed: " + "; ".join(names[:3])
            + (f"; +{len(names) - 3} more" if len(names) > 3 else ""))
    return {**gate, "pass": None, "verdict": "no verdict", "withheld": text,
            "reason": f"verdict withheld: {text}"}


def _num(v):
    if v is None:
        return None
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    v = float(v)
    return v if np.isfinite(v) else None


def flat_keys(gate: dict) -> dict:
    """The gate as flat metric keys ``gate.*`` (null plus ``gate.<part>.reason`` where a part
    is undecided, e.g. Welch's p with one seed on a side)."""
    out = {"gate.statistic": gate["statistic"], "gate.pass": gate["pass"],
           "gate.verdict": gate.get("verdict"), "gate.withheld": bool(gate.get("withheld"))}
    if gate["reason"]:
        out["gate.pass.reason"] = gate["reason"]
    for name, p in gate["parts"].items():
        if isinstance(p["value"], list):
            out[f"gate.{name}.lo"], out[f"gate.{name}.hi"] = map(_num, p["value"])
            out[f"gate.{name}.ref_lo"], out[f"gate.{name}.ref_hi"] = map(_num, p["bar"])
        else:
            out[f"gate.{name}.value"], out[f"gate.{name}.bar"] = _num(p["value"]), _num(p["bar"])
        out[f"gate.{name}.ok"] = p["ok"]
        if p["ok"] is None:   # explains the part's null value and ok alike
            out[f"gate.{name}.reason"] = p["reason"]
    return out


_WORDS = {"learns": "candidate mean >= lowest reference seed (LEARNS)",
          "mean_min": "candidate mean >= the bar",
          "welch_p": "Welch's two-sided p >= the bar",
          "entropy_overlap": "actor-entropy seed ranges overlap"}


def report_lines(gate: dict) -> list[str]:
    """Markdown lines of the gate section of ``results/report.md``."""
    if gate.get("withheld"):
        head = (f"The pre-registered gate on {gate['statistic'].upper()}: **no verdict**"
                if gate["statistic"] else "**No verdict**")
        lines = [f"{head}: {gate['withheld']}; the round's evidence is not read until every "
                 f"check passes."]
        if not gate["parts"]:
            return lines
        lines += ["", "| part | candidate | bar | holds (not read) |", "| --- | --- | --- | --- |"]
        return lines + _part_rows(gate)
    if gate["statistic"] is None:
        return [f"No gate: {gate['reason']}."]
    verdict = {True: "**passes**", False: "**fails**", None: "**cannot be decided**"}[gate["pass"]]
    lines = [f"The pre-registered gate on {gate['statistic'].upper()} {verdict}"
             + (f" ({gate['reason']})." if gate["reason"] else "."), "",
             "| part | candidate | bar | holds |", "| --- | --- | --- | --- |"]
    return lines + _part_rows(gate)


def _part_rows(gate: dict) -> list[str]:
    """One Markdown table row per gate part: its words, value, bar and whether it holds."""
    def fmt(v):
        if isinstance(v, list):
            return "[" + ", ".join("n/a" if x is None else f"{x:.4f}" for x in v) + "]"
        return "n/a" if v is None else f"{v:.4g}"
    lines = []
    for name, p in gate["parts"].items():
        holds = {True: "yes", False: "no", None: "n/a"}[p["ok"]]
        lines.append(f"| {_WORDS[name]} | {fmt(p['value'])} | {fmt(p['bar'])} | {holds} |")
    return lines


def console_line(gate: dict, decision: dict | None) -> str:
    """The console line of ``compare``: the gate's statistic and its verdict.

    Args:
      gate: :func:`evaluate`'s dict.
      decision: the decision on the gate's statistic (``result[stat]["decision"]``);
        None when not computed, and for a round without a gate (whose line ``compare``
        ends with the headline, :func:`dreamer_parity.analysis.metrics_out.headline_line`).
    """
    name = (gate["statistic"] or "s1").upper()
    text = f"gate {gate['statistic'].upper() if gate['statistic'] else 'none'}: " \
           f"{gate.get('verdict')}"
    if gate.get("withheld"):
        text += f" ({gate['withheld']})"
    if decision is not None and decision.get("A") is not None:
        text += (f"; {name}: A {decision['A']:.1f}, reference [{decision['lo']:.1f}, "
                 f"{decision['hi']:.1f}], LEARNS {decision['LEARNS']}")
    return text

"""The halves check: a side whose seeds come from two sources, one source against the other.

A side may take its seeds from several places (docs/SIDES.md, list form), for example
the study's published seeds 0-4 and seeds 5-9 run here. Before pooling them, the round
asks whether the two sources agree (docs/rounds/round3-10seeds.md, "Halves check"): per
side with exactly two sources, each source's seeds, their mean LATE and S1, and Welch's
two-sided test between the sources (second source minus first, in the order the side
lists them). The sources **agree** when Welch's p >= 0.05 on every statistic the round
has (LATE where ``stats.late_rows`` is set, and S1), and **differ** when any p < 0.05;
undefined (a source with one seed, no variance) otherwise.

A side with one source gets nothing (no keys); one with three or more sources gets each
source's means and a reason instead of a test.

Each side is checked on its own seeds (the sides may differ in number: a candidate side
of 110 seeds from two sources against 10 reference seeds), and the two sources of a side
may hold different numbers of seeds (Welch's test does not pair them).
"""

from __future__ import annotations

import numpy as np

from dreamer_parity.analysis import stats

__all__ = ["compute", "summary_keys", "report_lines", "ALPHA"]

#: The level below which the two sources differ.
ALPHA = 0.05


def _groups(seed_sources, seeds: list[int]) -> list[dict]:
    by_seed = {e.seed: e.source for e in seed_sources}
    out: list[dict] = []
    for i, s in enumerate(seeds):
        src = by_seed[s]
        g = next((g for g in out if g["source"] == src), None)
        if g is None:
            g = {"source": src, "seeds": [], "index": []}
            out.append(g)
        g["seeds"].append(s)
        g["index"].append(i)
    return out


def compute(result: dict) -> dict:
    """The halves check of each side with more than one source.

    Args:
      result: :func:`dreamer_parity.analysis.compare.analyse`'s dict so far (``seeds``:
        each side's seeds, ``sides`` with their ``seeds`` sources, ``s1`` and ``late``
        per-seed values, float64 ``[seeds of the side]`` in the order of
        ``result["seeds"][side]``).

    Returns:
      ``{side: {"groups": [{"source", "seeds", "means": {stat: float}}], "tests": {stat:
      welch dict}, "agree": bool | None, "reason": str | None}}`` for each side with two or
      more sources (``tests`` only with exactly two).
    """
    values = {"S1": result["s1"]["values"]}
    if result["late"].get("values") is not None:
        values["LATE"] = result["late"]["values"]
    out = {}
    for side, sd in result["sides"].items():
        groups = _groups(sd["seeds"], result["seeds"][side])
        if len(groups) < 2:
            continue
        for g in groups:
            g["means"] = {k: float(np.mean(np.asarray(v[side])[g["index"]])) for k, v in values.items()}
        entry = {"groups": groups, "tests": {}, "agree": None, "reason": None}
        if len(groups) > 2:
            entry["reason"] = f"{len(groups)} sources: the check compares two"
            out[side] = entry
            continue
        a, b = groups
        for k, v in values.items():
            vals = np.asarray(v[side], dtype=np.float64)
            entry["tests"][k] = stats.welch(vals[b["index"]], vals[a["index"]])
        ps = [t["p"] for t in entry["tests"].values()]
        if any(p is not None and p < ALPHA for p in ps):
            entry["agree"] = False
        elif all(p is not None for p in ps):
            entry["agree"] = True
        else:
            entry["reason"] = next(t["reason"] for t in entry["tests"].values() if t["p"] is None)
        out[side] = entry
    return out


def summary_keys(halves: dict) -> dict:
    """Flat keys: ``halves.<side>.sources`` (``"<source>: <seeds>; ..."``),
    ``halves.<side>.<STAT>.g<i>.mean`` (i = 1, 2, ... in the side's order),
    ``halves.<side>.<STAT>.welch_t|welch_p|welch_df``, ``halves.<side>.agree`` (null with
    ``.reason`` when undefined)."""
    out = {}
    for side, e in halves.items():
        out[f"halves.{side}.sources"] = "; ".join(
            f"{g['source']}: {','.join(str(s) for s in g['seeds'])}" for g in e["groups"])
        for i, g in enumerate(e["groups"], 1):
            for k, m in g["means"].items():
                out[f"halves.{side}.{k}.g{i}.mean"] = m
        for k, t in e["tests"].items():
            for name in ("t", "p", "df"):
                out[f"halves.{side}.{k}.welch_{name}"] = t[name]
            if t["p"] is None:
                out[f"halves.{side}.{k}.welch.reason"] = t["reason"]
        out[f"halves.{side}.agree"] = e["agree"]
        if e["agree"] is None:
            out[f"halves.{side}.agree.reason"] = e["reason"]
    return out


def report_lines(halves: dict) -> list[str]:
    """The report's "Halves check" section (empty when every side has one source)."""
    if not halves:
        return []
    L = ["", "## Halves check (a side's two sources against each other)", "",
         "| side | source | seeds | " + " | ".join(f"mean {k}" for k in ("S1", "LATE")) + " |",
         "|---|---|---|---|---|"]
    verdicts = []
    for side, e in halves.items():
        for g in e["groups"]:
            cells = [f"{g['means'][k]:.1f}" if k in g["means"] else "n/a" for k in ("S1", "LATE")]
            L.append(f"| {side} | {g['source']} | {','.join(str(s) for s in g['seeds'])} | "
                     + " | ".join(cells) + " |")
        tests = "; ".join(f"{k} Welch p {t['p']:.4g}" if t["p"] is not None else f"{k}: {t['reason']}"
                          for k, t in e["tests"].items())
        word = {True: "agree", False: "differ", None: "undecided"}[e["agree"]]
        verdicts.append(f"* {side}: **{word}** ({tests or e['reason']})")
    return L + [""] + verdicts

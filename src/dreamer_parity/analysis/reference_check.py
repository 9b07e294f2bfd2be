"""Our reference runs against the study's published reference runs of the same protocol.

A round that runs the reference (``reference.source: run``) executes the stock
``embodied.run.train`` through our runner (factories, numpy port, evaluation and records
from outside).  When the study published reference runs on the same evaluation grid
(rows, ``eval_every``, ``eval_episodes``), :func:`check` holds ours against them:

* S1 per seed, and the evaluation return at every point, against the published seeds'
  [min, max];
* the runs scoring >= ``stats.good_return`` at each ``stats.concordance_rows`` row;
* S2 at the last row against the study's per-seed S2 (its ``summary.json``);
* the update count at every evaluation point, the row of the first update and the
  episodes of the flush step against the published ``evals.jsonl`` / ``timing.json``
  (deterministic: they must be equal);
* wall seconds per update (ours: the loop without evaluations; theirs: the loop with
  them, on the study's machine), for the record;
* for a seed the study also ran, how far the two runs of that seed agree exactly: the
  evaluation points whose every episode return is equal (:func:`same_seed`).  Equal
  episodes mean equal policies; where they stop being equal is where thread timing first
  changed the training (or where our runner differs).

The published runs are not reproducible bit for bit (their prefetch threads and online
queue depend on thread timing), so returns are compared as distributions.  A published
round whose decode or sampler differs from the round's is still shown, labelled, never
as the match.  The training-metric windows are :mod:`.published_windows`'.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dreamer_parity import environment, records
from dreamer_parity.analysis import stats
from dreamer_parity.analysis.load import AnalysisError, display_path, load_side
from dreamer_parity.provenance import REPO_ROOT
from dreamer_parity.round_spec import Round

__all__ = ["PUBLISHED_DIR", "PUBLISHED_REFERENCE", "matching_rounds", "same_seed", "check",
           "summary_keys", "report_lines"]

PUBLISHED_DIR = REPO_ROOT / "data" / "published"

#: The protocol of each published round's reference runs (data/published/README.md) and
#: the file with the study's per-seed S2, when it published one.
PUBLISHED_REFERENCE = {
    "round1": {"decode": "ref", "sampler": "stock", "rows": 20000, "eval_every": 2000,
               "eval_episodes": 10, "seeds": [0, 1, 2], "summary": "round1/summary.json"},
    "round2": {"decode": "exact", "sampler": "stock", "rows": 20000, "eval_every": 2000,
               "eval_episodes": 10, "seeds": [0, 1, 2], "summary": "round2/pairE/summary.json"},
    "round3": {"decode": "exact", "sampler": "per_run", "rows": 24000, "eval_every": 400,
               "eval_episodes": 10, "seeds": [0, 1, 2, 3, 4], "summary": None},
}


def matching_rounds(round_: Round) -> list[tuple[str, bool]]:
    """Published rounds on the round's evaluation grid, as ``(name, same_protocol)``;
    ``same_protocol``: the reference decode and sampler match too.  Exact matches first."""
    pr = round_.protocol
    out = []
    for name, p in PUBLISHED_REFERENCE.items():
        if (p["rows"], p["eval_every"], p["eval_episodes"]) != \
                (pr.rows, pr.eval_every, pr.eval_episodes):
            continue
        out.append((name, p["decode"] == round_.reference.decode
                    and p["sampler"] == round_.reference_run.sampler))
    return sorted(out, key=lambda x: not x[1])


def _range(v) -> dict:
    v = np.asarray(v, dtype=np.float64)
    return {"lo": float(v.min()), "hi": float(v.max()), "mean": float(v.mean()),
            "values": [float(x) for x in v]}


def _inside(x, r) -> bool | None:
    return None if x is None or not np.isfinite(x) else bool(r["lo"] <= x <= r["hi"])


def _published_s2(name: str, published_dir: Path) -> list[float] | None:
    rel = PUBLISHED_REFERENCE[name]["summary"]
    if rel is None:
        return None
    path = published_dir / rel
    obj = records.read_json(path, display_path(path))   # the guarded reader: RecordError
    try:
        per = obj["per_seed"]["ref"]
        out = [per[str(s)]["S2"] for s in PUBLISHED_REFERENCE[name]["seeds"]]
    except (KeyError, TypeError) as e:
        raise AnalysisError(f"{display_path(path)}: per_seed.ref.<seed>.S2 not readable "
                            f"({type(e).__name__}: {str(e)[:80]})") from None
    for s, v in zip(PUBLISHED_REFERENCE[name]["seeds"], out):
        problem = environment.mean_problem("return", v)   # S2: a mean of episode returns
        if problem:
            raise AnalysisError(f"{display_path(path)}: field 'per_seed.ref.{s}.S2' {problem}")
    return [float(v) for v in out]


def _timing_value(t: dict | None, *keys):
    for k in keys:
        if t is not None and t.get(k) is not None:
            return t[k]
    return None


def _published_s_per_update(run) -> float | None:
    t = run.timing or {}
    if t.get("t_end") is None or t.get("t_loop_start") is None or not len(run.evals):
        return None
    return (t["t_end"] - t["t_loop_start"]) / float(run.evals["updates"].iloc[-1])


def same_seed(ours, published) -> dict:
    """Where two runs of the same seed give the same evaluation episodes.

    Args:
      ours, published: :class:`~dreamer_parity.analysis.load.Run` of one seed; their
        ``eval_returns`` (per evaluation record, the list of episode returns) are compared
        at the rows both logged.

    Returns:
      ``{"seed", "rows", "equal", "equal_through", "first_differ"}``: the common rows
      (ints, increasing), per row whether every episode return is equal (bool, None where
      either run logged no returns), the last row of the leading run of equal points
      (None when the first already differs) and the first row that differs (None when
      none does).
    """
    def by_row(run):
        return {int(r): v for r, v in zip(run.evals["rows"], run.eval_returns)}
    a, b = by_row(ours), by_row(published)
    rows = sorted(set(a) & set(b))
    equal = [None if a[r] is None or b[r] is None else
             (len(a[r]) == len(b[r]) and all(float(x) == float(y) for x, y in zip(a[r], b[r])))
             for r in rows]
    through = first = None
    for r, e in zip(rows, equal):
        if e is True and first is None:
            through = r
        elif e is False and first is None:
            first = r
    return {"seed": int(ours.seed), "rows": rows, "equal": equal, "equal_through": through,
            "first_differ": first}


def check(round_: Round, result: dict, published_dir=PUBLISHED_DIR) -> dict | None:
    """Compare the round's reference runs with each matching published round.

    Args:
      round_: the round (:class:`dreamer_parity.round_spec.Round`).
      result: :func:`dreamer_parity.analysis.compare.analyse`'s result so far (``sides``,
        ``points``, ``eval``, ``s1``, ``s2``).
      published_dir: ``data/published``.

    Returns:
      None when the reference side is published, else ``{"rounds": [{"name",
      "same_protocol", "seeds", "s1", "eval", "concordance", "s2", "updates",
      "first_update_row", "flush_episodes", "s_per_update", "same_seed"}], "reason"}``
      (``same_seed``: :func:`same_seed` per seed of ours that the round published; ``reason`` set
      and ``rounds`` empty when no published round has the round's grid).  Return-like
      entries hold ours per seed, the published ``{"lo", "hi", "mean", "values"}`` and
      ``inside`` per seed; count-like entries ours, theirs and ``equal``.

    Raises:
      AnalysisError: a published file is malformed (names it).
    """
    side = result["sides"]["reference"]
    if side["layout"] == "published":
        return None
    published_dir = Path(published_dir)
    points, st, pr = result["points"], round_.stats, round_.protocol
    runs = side["runs"]
    seeds = [r.seed for r in runs]
    ours_eval = result["eval"]["reference"]
    matches = matching_rounds(round_)
    if not matches:
        return {"rounds": [], "reason": "the study published no reference runs on this round's "
                f"grid (rows {pr.rows}, eval_every {pr.eval_every}, "
                f"eval_episodes {pr.eval_episodes})"}
    out = []
    for name, same in matches:
        pub = load_side(published_dir / name, "reference", PUBLISHED_REFERENCE[name]["seeds"])
        pub_eval = stats.eval_matrix(pub, points, st.failed_rule)
        entry = {"name": name, "same_protocol": same, "seeds": PUBLISHED_REFERENCE[name]["seeds"],
                 "decode": PUBLISHED_REFERENCE[name]["decode"],
                 "sampler": PUBLISHED_REFERENCE[name]["sampler"]}
        ours_s1 = result["s1"]["values"]["reference"]
        r = _range(stats.s1_values(pub, list(st.s1_rows), st.failed_rule))
        entry["s1"] = {"ours": [float(x) for x in ours_s1], "published": r,
                       "inside": [_inside(x, r) for x in ours_s1]}
        ev = []
        for j, row in enumerate(points):
            r = _range(pub_eval[:, j])
            ev.append({"rows": int(row), "ours": [float(x) for x in ours_eval[:, j]],
                       "published": r, "inside": [_inside(x, r) for x in ours_eval[:, j]]})
        entry["eval"] = ev
        good = st.good_return
        entry["concordance"] = [
            {"rows": int(row), "ours": int((ours_eval[:, points.index(row)] >= good).sum()),
             "ours_n": len(runs), "published": int((pub_eval[:, points.index(row)] >= good).sum()),
             "published_n": len(pub), "good_return": good}
            for row in st.concordance_rows if row in points]
        s2_pub = _published_s2(name, published_dir)
        s2_ours = result["s2"].get("values", {}).get("reference") if not result["s2"].get("reason") else None
        if s2_pub is None or s2_ours is None:
            entry["s2"] = {"row": result["s2"]["row"], "ours": None, "published": None,
                           "reason": "the study published no per-seed S2 for this round"
                           if s2_pub is None else result["s2"]["reason"]}
        else:
            r = _range(s2_pub)
            entry["s2"] = {"row": result["s2"]["row"], "ours": [float(x) for x in s2_ours],
                           "published": r, "inside": [_inside(x, r) for x in s2_ours],
                           "reason": None}
        pub_upd = {int(a): int(b) for a, b in zip(pub[0].evals["rows"], pub[0].evals["updates"])}
        mism = []
        for run in runs:
            for a, b in zip(run.evals["rows"], run.evals["updates"]):
                if pub_upd.get(int(a)) != int(b):
                    mism.append(f"seed {run.seed} rows {int(a)}: {int(b)} vs {pub_upd.get(int(a))}")
        entry["updates"] = {"ours_last": [int(r.evals["updates"].iloc[-1]) for r in runs],
                            "published_last": int(pub[0].evals["updates"].iloc[-1]),
                            "equal": not mism, "mismatches": mism[:5]}
        for key, ours_keys, pub_keys in (
                ("first_update_row", ("first_update_row",), ("first_update_step",)),
                ("flush_episodes", ("flush_episodes",), ("flush_episodes",))):
            o = [_timing_value(r.timing, *ours_keys) for r in runs]
            p = sorted({_timing_value(r.timing, *pub_keys) for r in pub}, key=str)
            entry[key] = {"ours": o, "published": p,
                          "equal": None if None in o or None in p else (set(o) == set(p))}
        entry["s_per_update"] = {
            "ours": [_timing_value(r.timing, "s_per_update_loop") for r in runs],
            "published": [_published_s_per_update(r) for r in pub],
            "note": "ours: the training loop without evaluations, this machine; published: "
                    "loop start to end including evaluations, on the study's machine"}
        pub_by_seed = {r.seed: r for r in pub}
        entry["same_seed"] = [same_seed(r, pub_by_seed[r.seed]) for r in runs
                              if r.seed in pub_by_seed]
        out.append(entry)
    return {"rounds": out, "reason": None, "seeds": seeds}


def summary_keys(rc: dict | None) -> dict:
    """Flat metrics (``published_reference.*``) of the first matching round: the one with
    the same protocol when there is one (``same_protocol`` says which)."""
    if rc is None:
        return {}
    if not rc["rounds"]:
        return {"published_reference.reason": rc["reason"]}
    e = rc["rounds"][0]
    k = "published_reference"
    out = {f"{k}.round": e["name"], f"{k}.same_protocol": e["same_protocol"],
           f"{k}.S1.inside": sum(bool(x) for x in e["s1"]["inside"]),
           f"{k}.S1.published_lo": e["s1"]["published"]["lo"],
           f"{k}.S1.published_hi": e["s1"]["published"]["hi"],
           f"{k}.eval.inside": sum(bool(x) for p in e["eval"] for x in p["inside"]),
           f"{k}.eval.cells": sum(len(p["inside"]) for p in e["eval"]),
           f"{k}.updates_equal": e["updates"]["equal"],
           f"{k}.first_update_row_equal": e["first_update_row"]["equal"],
           f"{k}.flush_episodes_equal": e["flush_episodes"]["equal"]}
    for name in ("first_update_row", "flush_episodes"):
        if e[name]["equal"] is None:
            out[f"{k}.{name}_equal.reason"] = "not recorded by every run (timing.json)"
    for i, s in enumerate(rc["seeds"]):
        out[f"{k}.S1.s{s}"] = e["s1"]["ours"][i]
    for m in e.get("same_seed", []):
        # rows of the leading equal points; 0 when the first point already differs
        out[f"{k}.same_seed.s{m['seed']}.equal_through_rows"] = m["equal_through"] or 0
        out[f"{k}.same_seed.s{m['seed']}.equal_points"] = sum(x is True for x in m["equal"])
    return out


def _f(x, d=1):
    return "n/a" if x is None or not np.isfinite(x) else f"{x:.{d}f}"


def report_lines(rc: dict | None) -> list[str]:
    """The report section "Our reference runs against the study's published ones"."""
    if rc is None:
        return []
    L = ["", "## Our reference runs against the study's published reference runs", "",
         "Returns are compared as distributions (the published runs are not reproducible bit "
         "for bit); counts that the schedule fixes must be equal."]
    if not rc["rounds"]:
        return L + ["", f"n/a: {rc['reason']}."]
    for e in rc["rounds"]:
        label = "same protocol" if e["same_protocol"] else \
            f"same grid, other protocol: decode {e['decode']}, sampler {e['sampler']}"
        seeds = rc["seeds"]
        L += ["", f"### `data/published/{e['name']}` ({label}; seeds {e['seeds']})", "",
              "| what | ours | published [min, max] (mean) | ours inside / equal |",
              "|---|---|---|---|"]
        s1 = e["s1"]
        L.append(f"| S1 | {', '.join(_f(x) for x in s1['ours'])} | [{_f(s1['published']['lo'])}, "
                 f"{_f(s1['published']['hi'])}] ({_f(s1['published']['mean'])}) | "
                 f"{sum(bool(x) for x in s1['inside'])} of {len(seeds)} |")
        for c in e["concordance"]:
            L.append(f"| runs >= {c['good_return']:g} at {c['rows']} rows | {c['ours']} of "
                     f"{c['ours_n']} | {c['published']} of {c['published_n']} | |")
        s2 = e["s2"]
        if s2["ours"] is not None:
            L.append(f"| S2 at {s2['row']} rows | {', '.join(_f(x) for x in s2['ours'])} | "
                     f"[{_f(s2['published']['lo'])}, {_f(s2['published']['hi'])}] "
                     f"({_f(s2['published']['mean'])}) | {sum(bool(x) for x in s2['inside'])} of "
                     f"{len(seeds)} |")
        else:
            L.append(f"| S2 at {s2['row']} rows | n/a | n/a | {s2['reason']} |")
        u = e["updates"]
        L.append(f"| updates at the last point | {', '.join(map(str, u['ours_last']))} | "
                 f"{u['published_last']} | {'equal at every point' if u['equal'] else 'DIFFER: ' + '; '.join(u['mismatches'])} |")
        for key, name in (("first_update_row", "row of the first update"),
                          ("flush_episodes", "episodes of the flush step")):
            v = e[key]
            L.append(f"| {name} | {', '.join('n/a' if x is None else str(x) for x in v['ours'])} | "
                     f"{', '.join('n/a' if x is None else str(x) for x in v['published'])} | "
                     f"{'n/a' if v['equal'] is None else ('equal' if v['equal'] else 'DIFFER')} |")
        sp = e["s_per_update"]
        L.append(f"| wall s per update | {', '.join(_f(x, 3) for x in sp['ours'])} | "
                 f"{', '.join(_f(x, 3) for x in sp['published'])} | {sp['note']} |")
        for m in e.get("same_seed", []):
            n_eq = sum(x is True for x in m["equal"])
            where = (("every point" if n_eq == len(m["rows"]) else "none differs where both "
                      "logged returns") if m["first_differ"] is None else
                     f"first differ at {m['first_differ']} rows" if m["equal_through"] is None else
                     f"equal through {m['equal_through']} rows, first differ at "
                     f"{m['first_differ']} rows")
            L.append(f"| seed {m['seed']}: every episode return equal to the published seed "
                     f"{m['seed']}'s | {n_eq} of {len(m['rows'])} points | | {where} |")
        inside = sum(bool(x) for p in e["eval"] for x in p["inside"])
        cells = sum(len(p["inside"]) for p in e["eval"])
        L += ["", f"Evaluation return per point ({inside} of {cells} of ours inside the published "
              "seeds' [min, max]):", "", "| rows | ours | published [min, max] (mean) |",
              "|---|---|---|"]
        for p in e["eval"]:
            L.append(f"| {p['rows']} | {', '.join(_f(x) for x in p['ours'])} | "
                     f"[{_f(p['published']['lo'])}, {_f(p['published']['hi'])}] "
                     f"({_f(p['published']['mean'])}) |")
    return L

"""The human-readable report of a round (``results/report.md``).

Sections: sides and pre-registration, parameters, the pre-registered decision (S1,
S2 at the last row, LATE), failed seeds and the rule used, per-seed values, the
additions (bootstrap interval, seeds needed; not pre-registered), the section "Additions
(not part of the pre-registered gate)" (TOST, rliable aggregates, collapse flags;
:mod:`additions`), concordance and the
round-3 reading, checks, known differences between the sides, evaluation and S2
curves, the actor-entropy windows, activation/embed relative to the first window, and
every training metric's window table.  No absolute path is written.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from dreamer_parity.analysis import stats
from dreamer_parity.analysis.metrics_out import (atomic_text, platform_parts, platform_text,
                                                 seed_ranges, source_rows)
from dreamer_parity.round_spec import Round

__all__ = ["render", "write_report", "known_differences", "plain_words"]


def _f(x, digits: int = 1) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, (bool, np.bool_)):
        return str(bool(x))
    x = float(x)
    if not np.isfinite(x):
        return "n/a"
    return f"{x:.{digits}f}"


def _p(x) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{x:.3g}"


def _g(x) -> str:
    return "n/a" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.4g}"


def known_differences(round_: Round, sides: dict) -> list[str]:
    """Bullets naming the known differences between the two sides of ``round_``
    (:class:`dreamer_parity.round_spec.Round`; ``sides``: ``analyse``'s)."""
    ref_dec, cand_dec = round_.reference.decode, round_.candidate.decode
    out = [
        "**D1, asynchrony (reference only).** The reference acts with policy parameters that lag "
        "the trained ones by one to two vector steps, prefetches its first training batch and "
        "reports its metrics one call late (its metric windows hold updates n0-1 .. n1-1). The "
        "candidate acts with the latest parameters. Evaluation uses the latest parameters on "
        "both sides. Not removable without changing the reference.",
    ]
    if round_.reference_run.sampler == "per_run":
        out.append("**D2, replay sampler stream: removed.** The reference's uniform replay selector "
                   "is seeded per run ([seed, 0x5EED]), as the candidate's sampler is seeded from the "
                   "run seed.")
    else:
        out.append("**D2, shared replay-sampler stream (reference only).** Stock `make_replay` gives "
                   "every reference run `Uniform(seed=0)`: the reference seeds share one replay index "
                   "stream, so the reference [min, max] range comes from runs that are not fully "
                   "independent. The candidate seeds its sampler from the run seed.")
    out.append("**D3, update placement.** The reference may run an update between two envs' adds of "
               "one vector step; the candidate runs a vector step's updates after its 16 rows are "
               "added. Same update counts at every record (checked).")
    if ref_dec == cand_dec:
        out.append(f"**D22, two-hot expectation: same on both sides** (`{cand_dec}`: "
                   + ("the exact mirror-difference form" if cand_dec == "exact" else
                      "the reference's literal mirror-pair sum") + ").")
    else:
        out.append(f"**D22, two-hot expectation differs.** Candidate `{cand_dec}`, reference "
                   f"`{ref_dec}`. Under jit the reference's literal mirror-pair sum is contracted "
                   "into fused multiply-adds and adds noise (std about 0.085) to reward and value "
                   "predictions early in training; actor and critic statistics are affected.")
    out.append("**Evaluation draws.** Both sides evaluate fresh environments with the same protocol "
               "but different random streams (numpy on the reference side, JAX on the candidate).")
    if any(s["layout"] == "published" for s in sides.values()):
        out.append("**Published side.** A published side is the study's own run (its candidate "
                   "was the Ajax implementation at 5cb0738): evaluations only, no episodes or "
                   "training-metric windows.")
    return out


def _decision_rows(result: dict) -> list[str]:
    lines = ["| statistic | A (candidate mean) | reference [lo, hi] | LEARNS | WITHIN_RANGE | "
             "Welch t | Welch p |", "|---|---|---|---|---|---|---|"]
    blocks = [("S1", result["s1"]), (f"S2({result['s2']['row']})", result["s2"]),
              ("LATE", result["late"])]
    for name, b in blocks:
        if "decision" not in b:
            lines.append(f"| {name} | n/a | n/a | n/a | n/a | n/a | n/a ({b['reason']}) |")
            continue
        d = b["decision"]
        w = d["welch"]
        p = _g(w["p"]) if w["p"] is not None else f"n/a ({w['reason']})"
        lines.append(f"| {name} | {_f(d['A'])} | [{_f(d['lo'])}, {_f(d['hi'])}] | {_f(d['LEARNS'])} | "
                     f"{_f(d['WITHIN_RANGE'])} | {_f(w['t'], 3)} | {p} |")
    return lines


def _unequal(result: dict) -> bool:
    """Whether the two sides have different seeds (in number or in which)."""
    return result["seeds"]["reference"] != result["seeds"]["candidate"]


def _per_seed(result: dict) -> list[str]:
    """One row per seed of either side, one column per side and statistic; a seed that
    is not one of a side's seeds leaves that side's cells empty."""
    sides = result["seeds"]
    seeds = sorted(set(sides["reference"]) | set(sides["candidate"]))
    cols = [("S1", result["s1"]), (f"S2({result['s2']['row']})", result["s2"]), ("LATE", result["late"])]
    # every side that has the statistic (S2 of a side with episodes against a published one)
    cols = [(f"{side} {n}", dict(zip(sides[side], b["values"][side], strict=True)),
             b["values"][side]) for n, b in cols
            for side in ("reference", "candidate") if side in b.get("values", {})]
    head = "| seed | " + " | ".join(n for n, _, _ in cols) + " |"
    lines = [head, "|---|" + "---|" * len(cols)]
    for s in seeds:
        lines.append(f"| {s} | " + " | ".join(_f(by[s]) if s in by else "" for _, by, _ in cols)
                     + " |")
    cells = []
    for _, _, v in cols:
        cells.append(_f(np.mean(v)) if np.isfinite(v).all() else "n/a")
    lines.append("| mean | " + " | ".join(cells) + " |")
    if _unequal(result):
        lines += ["", f"Each side's mean is over its own seeds ({len(sides['reference'])} reference, "
                      f"{len(sides['candidate'])} candidate); an empty cell: not a seed of that side."]
    return lines


def _additions(result: dict) -> list[str]:
    lines = ["| statistic | difference (candidate - reference) | bootstrap 95% interval | "
             "effect (d) | seeds per side for 80% power |", "|---|---|---|---|---|"]
    for name, b in (("S1", result["s1"]), ("S2", result["s2"]), ("LATE", result["late"])):
        if "decision" not in b:
            continue
        d = b["decision"]
        bo, pw = d["bootstrap"], d["power"]
        ci = f"[{_f(bo['lo'])}, {_f(bo['hi'])}]" if bo["lo"] is not None else f"n/a ({bo['reason']})"
        n = str(pw["n"]) if pw["n"] is not None else f"n/a ({pw['reason']})"
        lines.append(f"| {name} | {_f(d['diff'])} | {ci} | {_f(pw['effect'], 2)} | {n} |")
    return lines


def _curve_table(result: dict, key: str) -> list[str]:
    seeds = {**result["seeds"], "study_candidate": result["seeds"]["reference"]}
    pts = result["points"]
    mats = dict(result["eval"] if key == "eval" else result["s2"]["curve"])
    short = {"reference": "ref", "candidate": "cand", "study_candidate": "study cand"}
    ctx = result.get("context")
    if key == "eval" and ctx is not None and ctx.get("eval") is not None:
        mats["study_candidate"] = ctx["eval"]
    head = ["rows"]
    for side in mats:
        head += [f"{short[side]} s{s}" for s in seeds[side]] + [f"{short[side]} mean"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for j, r in enumerate(pts):
        cells = [str(r)]
        for side in mats:
            col = mats[side][:, j]
            cells += [_f(v) for v in col]
            cells.append(_f(col.mean()) if np.isfinite(col).all() else "n/a")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def plain_words(result: dict) -> list[str]:
    """The section "What this round shows, and what it cannot", written from the numbers.

    Reads the gate (``result["gate"]``), the decision on the gate's statistic (else the
    primary statistic of the additions), Welch's test, the TOST addition and the
    concordance reading; every number in the text comes from ``result``.
    """
    round_ = result["round"]
    n_c, n_r = len(result["sides"]["candidate"]["runs"]), len(result["sides"]["reference"]["runs"])
    g = result.get("gate") or {}
    add = result.get("additions")
    stat = g.get("statistic") or (add["primary"].lower() if add else "s1")
    sec = result.get(stat) or {}
    dec = sec.get("decision")
    L = ["## What this round shows, and what it cannot", ""]
    if dec is None or dec["A"] is None:
        return L + [f"No statistic could be decided: {(dec or {}).get('reason') or sec.get('reason')}."]
    name = stat.upper()
    what = (f"mean evaluation return over rows [{sec['rows'][0]}, {sec['rows'][1]}]"
            if stat == "late" else f"mean evaluation return at rows {list(round_.stats.s1_rows)}")
    ref_vals = np.asarray(sec["values"]["reference"], dtype=np.float64)
    cand_vals = np.asarray(sec["values"]["candidate"], dtype=np.float64)
    L.append(f"* **{name}** ({what}) per seed: candidate mean **{_f(dec['A'])}** (seeds "
             f"{_f(cand_vals.min())} to {_f(cand_vals.max())}), reference mean "
             f"**{_f(ref_vals.mean())}** (seeds {_f(dec['lo'])} to {_f(dec['hi'])}); "
             f"difference {_f(dec['diff'])}, Welch p {_p(dec['welch']['p'])}, with {n_c} "
             f"candidate and {n_r} reference seeds.")
    ctx = result.get("context")
    if ctx is not None and ctx.get(stat) is not None:
        L.append(f"* For context, the study's own candidate on the same protocol: mean "
                 f"{_f(np.mean(ctx[stat]))} (never gated).")
    if g.get("withheld"):
        L.append(f"* **No verdict**: {g['withheld']}. The gate on {name} is not read while a "
                 f"check fails (the Checks section lists them).")
    elif g.get("pass") is True:
        L.append("* **The pre-registered gate passed**: every part held: "
                 + "; ".join(_gate_part_words(k, v) for k, v in g["parts"].items()) + ".")
    elif g.get("pass") is False:
        failed = [k for k, v in g["parts"].items() if v["ok"] is False]
        L.append(f"* **The pre-registered gate failed** on: {', '.join(failed)}. "
                 + (f"The candidate's mean {_f(dec['A'])} is below every reference seed's "
                    f"value (lowest {_f(dec['lo'])}, short by {_f(dec['lo'] - dec['A'])}). "
                    if "learns" in failed else "")
                 + (f"Welch's test puts the difference below p = {g['parts']['welch_p']['bar']}. "
                    if "welch_p" in failed else ""))
    elif not g.get("statistic"):
        L.append("* This round pre-registers no gate (`gate.statistic: none`).")
    else:
        L.append(f"* The gate was not decided: {g.get('reason')}.")
    if add is not None and add["tost"]["ci_lo"] is not None:
        t = add["tost"]
        L.append(f"* **What {n_c} against {n_r} seeds cannot show**: a p-value above 0.05 is "
                 "not evidence that the two sides are the same. The 90% interval of the "
                 f"difference of {add['primary']} (candidate - reference) is [{_f(t['ci_lo'])}, "
                 f"{_f(t['ci_hi'])}] return: the data are compatible with true differences "
                 f"anywhere in it, the largest {_f(t['min_margin'])} return "
                 f"({_f(100 * t['min_margin_frac'] if t['min_margin_frac'] is not None else None, 0)}% "
                 f"of the reference mean). Equivalence within the round's margin "
                 f"(`stats.equivalence_margin`) of +-{_f(t['margin'])} ({_f(100 * t['margin_frac'], 0)}%) "
                 f"is **{t['verdict']}**"
                 + (f"; about {t['seeds_needed']} seeds per side would be needed to show it if "
                    "the true difference were 0." if t["seeds_needed"] is not None else "."))
    r = result.get("reading") or {}
    if r.get("reading"):
        if r["reading"] != "H2 or noise":
            words = "see the Concordance section for its parts."
        elif round_.reference_run.sampler == "per_run":
            words = ("with a replay sampler seeded per run, the reference shows no end-of-run "
                     "jump (H1) and no significant lead over the candidate (H3); the 20,000-row "
                     "concordance of stock reference runs is then put down to their shared "
                     "replay seed (H2) or to seed noise, which this design cannot tell apart.")
        else:
            words = ("neither an end-of-run jump of the reference (H1) nor a significant lead "
                     "(H3); these reference runs share one replay seed (stock sampler), so "
                     "what they have in common may come from that (H2) or from noise, which "
                     "this design cannot tell apart.")
        L.append(f"* The concordance reading (PREREG3) is **{r['reading']}**: {words}")
    return L


def _gate_part_words(name: str, part: dict) -> str:
    """One gate part that held, in words, with its value and bar."""
    if name == "learns":
        return (f"the candidate's mean {_f(part['value'])} is at least the lowest reference "
                f"seed's {_f(part['bar'])}")
    if name == "mean_min":
        return f"the candidate's mean {_f(part['value'])} is at least {_g(part['bar'])}"
    if name == "welch_p":
        return (f"Welch's p {_p(part['value'])} is at least {_g(part['bar'])}, so these seeds "
                f"show no difference between the sides at that level")
    if name == "entropy_overlap":
        return (f"the actor-entropy seed ranges at {part['rows']} rows overlap "
                f"({_f(part['value'][0], 3)}-{_f(part['value'][1], 3)} against "
                f"{_f(part['bar'][0], 3)}-{_f(part['bar'][1], 3)})")
    return f"{name} held"


def _window_table(t, metric: str, digits: int = 4) -> list[str]:
    sub = t[t["metric"] == metric]
    lines = ["| window end (rows) | reference mean [min, max] | candidate mean [min, max] | "
             "candidate / reference | ranges overlap |", "|---|---|---|---|---|"]
    for _, r in sub.iterrows():
        cells = [str(r["rows"])]
        for side in ("reference", "candidate"):
            cells.append(f"{_f(r[side + '_mean'], digits)} [{_f(r[side + '_lo'], digits)}, "
                         f"{_f(r[side + '_hi'], digits)}]")
        ov = r["overlap"]
        cells += [_f(r["ratio"], 3), "n/a" if ov is None or pd.isna(ov) else str(bool(ov))]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _side_windows_lines(win: dict, digits: int = 4) -> list[str]:
    """Each side's own windows of the pre-registered metrics (:mod:`windows`)."""
    L = ["", "## Training-metric windows of each side (seed mean [min, max])", "",
         "Files: `metrics/windows.json`, `metrics/plots/windows/`, `metrics/plots/windows.png`."]
    for side in ("reference", "candidate"):
        if win["sides"][side]["reason"] is not None:
            L.append(f"* {side}: none ({win['sides'][side]['reason']})")
    drawn = [s for s in ("reference", "candidate") if win["sides"][s]["reason"] is None]
    if not drawn:
        return L
    for m in win["metrics"]:
        sides = [s for s in drawn if m in win["sides"][s]["metrics"]]
        if not sides:
            continue
        ov = win["overlap"].get(m)
        head = "| window end (rows) | " + " | ".join(sides) + (" | ranges overlap |" if ov else " |")
        L += ["", f"<details><summary><code>{m}</code>"
              + (f": seed ranges overlap in {sum(ov.values())} of {len(ov)} windows" if ov else "")
              + "</summary>", "", head, "|---|" + "---|" * (len(sides) + (1 if ov else 0))]
        by_row: dict = {}
        for s in sides:
            sw = win["sides"][s]
            w = sw["metrics"][m]
            for j, r in enumerate(sw["rows"].tolist()):
                if w["n"][j]:
                    by_row.setdefault(r, {})[s] = (f"{_f(w['mean'][j], digits)} "
                                                   f"[{_f(w['lo'][j], digits)}, {_f(w['hi'][j], digits)}]")
        for r in sorted(by_row):
            cells = [by_row[r].get(s, "n/a") for s in sides]
            if ov:
                cells.append(str(ov[r]) if r in ov else "n/a")
            L.append(f"| {r} | " + " | ".join(cells) + " |")
        L += ["", "</details>"]
    return L


def _metrics_overview(t) -> list[str]:
    lines = ["| metric | windows with overlapping seed ranges | ratio first window | ratio last window |",
             "|---|---|---|---|"]
    for m, sub in t.groupby("metric", sort=True):
        ov = sub["overlap"].dropna()
        lines.append(f"| `{m}` | {int(ov.astype(bool).sum())} of {len(ov)} | "
                     f"{_f(sub['ratio'].iloc[0], 3)} | {_f(sub['ratio'].iloc[-1], 3)} |")
    return lines


def _head_lines(result: dict, prereg_link: str | None, notes) -> list[str]:
    """The title and the round's one-paragraph summary."""
    round_, pr = result["round"], result["round"].protocol
    L = [f"# Round `{round_.name}`: reference against candidate", ""]
    ref, cand = result["sides"]["reference"], result["sides"]["candidate"]
    L += [f"* Reference: `{ref['dir']}` ({ref['layout']} layout); candidate: `{cand['dir']}` "
          f"({cand['layout']} layout).",
          f"* Pre-registration: [{prereg_link}]({prereg_link})" if prereg_link else
          "* Pre-registration: none given for this round.",
          (f"* Seeds {result['seeds']['reference']}; " if not _unequal(result) else
           f"* Seeds of each side: reference {seed_ranges(result['seeds']['reference'])} "
           f"({len(result['seeds']['reference'])} seeds), candidate "
           f"{seed_ranges(result['seeds']['candidate'])} ({len(result['seeds']['candidate'])} "
           f"seeds); ")
          + f"{pr.rows} rows; evaluation every {pr.eval_every} rows with "
          f"{pr.eval_episodes} episodes; profile `{pr.profile}`; candidate decode "
          f"`{round_.candidate.decode}`; reference decode `{round_.reference.decode}`, sampler "
          f"`{round_.reference_run.sampler}`."]
    L += [f"* Note: {n}" for n in notes]
    return L


def _source_lines(result: dict) -> list[str]:
    """Where each seed's run comes from, and each side's platforms."""
    L = []
    L += ["", "## Sources", "",
          "Where each seed's run comes from (`candidate.source`, `reference.source`; "
          "docs/SIDES.md), which implementation made it, and where it ran: the jax "
          "platform and matmul precision its `run.json` records (`unknown`: it records "
          "none).", "",
          "| side | seed | source | run directory | layout | made by | platform | precision |",
          "|---|---|---|---|---|---|---|---|"]
    for r in source_rows(result):
        L.append(f"| {r['side']} | {r['seed']} | `{r['source']}` | `{r['run_dir']}` | "
                 f"{r['layout']} | {r['made_by']} | {r['platform']} | {r['precision']} |")
    L.append("")
    for side, parts in platform_parts(result).items():
        if parts:
            L.append(f"* {side.capitalize()} side: "
                     + "; ".join(platform_text(p) for p in parts)
                     + (f" (pooled from {len(parts)} platform/precision parts)"
                        if len(parts) > 1 else "") + ".")
    return L


def _parameter_lines(round_: Round) -> list[str]:
    """The table of the round's parameters, as params.yaml writes them
    (:meth:`dreamer_parity.round_spec.Round.to_params`)."""
    p = round_.to_params()
    st = p["stats"]
    L = []
    L += ["", "## Parameters", "", "| key | value |", "|---|---|"]
    for k, v in (("round", p["round"]), ("decode", p["decode"]), ("profile", p["profile"]),
                 ("seeds", p["seeds"]), ("rows", p["rows"]), ("eval_every", p["eval_every"]),
                 ("eval_episodes", p["eval_episodes"])):
        L.append(f"| {k} | {v} |")
    for k, v in p["reference"].items():
        L.append(f"| reference.{k} | {v} |")
    for k, v in p["candidate"].items():
        if k == "seeds" and v is None:
            continue   # null: the round's seeds, the row above
        L.append(f"| candidate.{k} | {v} |")
    for k, v in st.items():
        L.append(f"| stats.{k} | {v} |")
    return L


def _decision_lines(result: dict) -> list[str]:
    """The pre-registered decision: rule, rows, context, gate, versions, failed seeds."""
    st = result["round"].stats
    L = []
    L += [""] + plain_words(result)
    L += ["", "## Pre-registered decision", "",
          f"Rule (PROTOCOL.md 5.2): A = mean over candidate seeds, [lo, hi] = [min, max] over "
          f"reference seeds; LEARNS = A >= lo; WITHIN_RANGE = lo <= A <= hi; Welch's two-sided "
          f"t-test on the per-seed values. S1 rows {list(st.s1_rows)}; S2 at row {result['s2']['row']}; "
          + (f"LATE over [{st.late_rows[0]}, {st.late_rows[1]}] ({len(result['late']['points'])} "
             f"points)." if st.late_rows else f"LATE: {result['late']['reason']}."), ""]
    if _unequal(result):
        L += [f"The sides have {len(result['seeds']['candidate'])} candidate and "
              f"{len(result['seeds']['reference'])} reference seeds "
              f"(docs/SIDES.md, \"Sides of unequal size\"). Every statistic takes each side as an "
              "independent sample of its own size: nothing pairs a candidate seed with the "
              "reference seed of the same number. A is the mean over the candidate's seeds; "
              "[lo, hi] is the range of the reference's seeds, which widens as the reference "
              "has more seeds (LEARNS and WITHIN_RANGE are then easier to meet); Welch's test "
              "and its degrees of freedom use each side's own n and variance.", ""]
    L += _decision_rows(result)
    ctx = result.get("context")
    if ctx is not None and ctx.get("missing"):
        L += ["", "### The study's own candidate (context, never gated)", "",
              f"The published round's `{ctx['dir']}` lacks seeds "
              f"{', '.join(str(s) for s in ctx['missing'])} of this round: the study's own "
              f"candidate is not scored here."]
    elif ctx is not None:
        L += ["", "### The study's own candidate (context, never gated)", "",
              f"The published round also holds the study's own JAX candidate (`{ctx['dir']}`), "
              "scored here with the same rules:", "",
              "| seed | reference S1 | candidate S1 | study's candidate S1"
              + (" | reference LATE | candidate LATE | study's candidate LATE |"
                 if ctx["late"] is not None else " |"),
              "|---|---|---|---|" + ("---|---|---|" if ctx["late"] is not None else "")]
        # one row per reference seed (the study's candidate is read for those); the
        # candidate's cell by seed, empty where the candidate has no such seed; the mean
        # row is each side's mean over its own seeds
        ref_seeds = result["seeds"]["reference"]
        rows = list(ref_seeds) + ["mean"]
        for i, s in enumerate(rows):
            def cell(a, side="reference"):
                if s == "mean":
                    return _f(np.mean(a))
                own = result["seeds"][side]
                return _f(a[own.index(s)]) if s in own else ""
            line = (f"| {s} | {cell(result['s1']['values']['reference'])} | "
                    f"{cell(result['s1']['values']['candidate'], 'candidate')} | {cell(ctx['s1'])}")
            if ctx["late"] is not None:
                line += (f" | {cell(result['late']['values']['reference'])} | "
                         f"{cell(result['late']['values']['candidate'], 'candidate')} | "
                         f"{cell(ctx['late'])}")
            L.append(line + " |")
    if "gate" in result:
        from dreamer_parity.analysis import gate
        L += ["", "### The gate (pre-registered in params.yaml `gate.*`)", ""]
        L += gate.report_lines(result["gate"])
    if "versions" in result:
        v = result["versions"]
        L += ["", f"Versions (jax, jaxlib) the runs imported: **{v['status']}**: {v['detail']}"
              + (" The two sides imported different versions (each from its own lock)."
                 if v["sides_differ"] else "")]
    L += ["", "### Failed seeds", "",
          f"Rule used: `failed_rule = {st.failed_rule}`: a seed whose run failed scores return 0 "
          "at its failing evaluation point and every later one (S1, S2, LATE, concordance); it is "
          "never dropped and never scored 500."]
    any_failed = False
    for side, lst in result["failed_seeds"].items():
        for seed, row, reason in lst:
            any_failed = True
            L.append(f"* **{side} seed {seed} FAILED** from row {row}: {reason}")
    if not any_failed:
        L.append("* No seed failed.")
    L += ["", "### Per-seed values", ""] + _per_seed(result)
    if result["s2"].get("reason"):
        L += ["", f"S2 decision: {result['s2']['reason']}."]
    return L


def _additions_lines(result: dict) -> list[str]:
    """The exploratory additions: seed bootstrap and power."""
    L = []
    L += ["", "## Exploratory additions: seed bootstrap and power (not pre-registered)", "",
          "Percentile bootstrap 95% interval of the difference of means, resampling seeds within "
          f"each side (scipy.stats.bootstrap, 9999 resamples, generator seed {stats.BOOTSTRAP_SEED}); "
          "seeds per side a two-sided Welch test at alpha 0.05 needs for 80% power at the observed "
          "effect (difference over the pooled standard deviation; noncentral t). These do not "
          "change the pre-registered reading.", ""]
    L += _additions(result)
    if "additions" in result:
        from dreamer_parity.analysis import additions
        L += additions.report_lines(result["additions"])
    return L


def _concordance_lines(result: dict) -> list[str]:
    """Concordance and the round-3 reading."""
    st = result["round"].stats
    L = []
    c, r = result["concordance"], result["reading"]
    L += ["", "## Concordance", "",
          f"Runs per side with evaluation >= {st.good_return:g}:", "",
          "| row | reference | candidate |", "|---|---|---|"]
    for row, cnt in c["at"].items():
        L.append(f"| {row} | {cnt['reference']} of {c['n']['reference']} | "
                 f"{cnt['candidate']} of {c['n']['candidate']} |")
    if c["rate"]["reference"] is not None:
        L += ["", f"Rate of evaluations >= {st.good_return:g} over "
              f"{list(st.concordance_range)} "
              f"({c['rate_points']} points per seed): reference {_f(c['rate']['reference'], 3)}, "
              f"candidate {_f(c['rate']['candidate'], 3)}."]
    else:
        L += ["", f"Rate: n/a ({c['reason']})."]
    L += ["", "Round-3 reading (PREREG3.md with its amendment, made operational): H1 when at least "
          f"80% of the reference runs ({r['needed_reference']} of {c['n']['reference']}; the "
          "pre-registered '4 of 5' generalised) score >= the threshold at the last row and the "
          "reference's rate over the concordance range is at most 0.4; H3 when Welch p on LATE < 0.05 "
          "with the reference higher; 'candidate better' when p < 0.05 with the candidate higher; "
          "all that hold are named, otherwise 'H2 or noise'.", "",
          f"* H1: {r['H1']}; H3: {r['H3']}; candidate better: {r['candidate_better']}",
          f"* **Reading: {r['reading']}**" if r["reading"] else f"* Reading: n/a ({r['reason']})"]
    if r["reading"] and r["reason"]:
        L.append(f"* Note: {r['reason']}")
    return L


def _check_lines(result: dict) -> list[str]:
    """The checks, and the known differences between the sides."""
    L = []
    checks = result["checks"]
    counts = {s: sum(ch.status == s for ch in checks) for s in ("PASS", "FAIL", "FLAG", "N/A")}
    L += ["", "## Checks", "",
          f"{counts['PASS']} passed, **{counts['FAIL']} failed**, {counts['FLAG']} flagged, "
          f"{counts['N/A']} not available (N/A is not a pass: the data are not in this layout).", ""]
    if counts["FAIL"]:
        L += ["Failed:", ""] + [f"* {ch.line()}" for ch in checks if ch.status == "FAIL"] + [""]
    L += ["```"] + [ch.line() for ch in checks] + ["```"]

    L += ["", "## Known differences between the sides (read before interpreting)", ""]
    L += [f"* {b}" for b in known_differences(result["round"], result["sides"])]

    L += ["", "## Evaluation curve (mean return of the evaluation episodes)", ""]
    L += _curve_table(result, "eval")
    L += ["", "## S2 curve (training-episode rolling mean)", ""]
    absent = [f"* {side}: none ({why})" for side, why in result["s2"].get("side_reason", {}).items()
              if why]
    L += absent + ([""] if absent else [])
    L += (_curve_table(result, "s2") if result["s2"].get("curve") else [f"n/a: {result['s2']['reason']}"])
    return L


def _window_lines(result: dict) -> list[str]:
    """Curves, the window tables and the diagnoses on the study's published windows."""
    L = []
    t = result["windows"]["table"]
    e = result["entropy"]
    L += ["", f"## Actor entropy windows (`{stats.ENTROPY}`, the round-2 statistic)", ""]
    if t is not None and e["windows"]:
        L += [f"Seed ranges overlap in **{e['overlap']} of {e['windows']}** windows.", ""]
        L += _window_table(t, stats.ENTROPY)
    else:
        L.append(f"n/a: {e['reason']}")
    if result.get("side_windows") is not None:
        L += _side_windows_lines(result["side_windows"])
    from dreamer_parity.analysis import halves, window_tests
    L += window_tests.report_lines(result.get("window_tests"))
    L += halves.report_lines(result.get("halves") or {})
    L += ["", "## activation/embed relative to each seed's first window", "",
          "DIAGNOSIS: the raw embed level follows each seed's initial draw; compare it relative to "
          "the seed's own first window.", ""]
    if t is not None and (t["metric"] == stats.EMBED_REL).any():
        L += _window_table(t, stats.EMBED_REL)
    else:
        L.append("n/a: " + (result["windows"]["reason"] or f"{stats.EMBED} not reported by both sides"))
    L += ["", "## Training-metric windows (every metric both sides report)", ""]
    if t is not None:
        L += _metrics_overview(t)
        L += ["", "<details><summary>Per-window tables</summary>", ""]
        for m in sorted(t["metric"].unique()):
            L += [f"### `{m}`", ""] + _window_table(t, m) + [""]
        L += ["</details>"]
    else:
        L.append(f"n/a: {result['windows']['reason']}")
    from dreamer_parity.analysis import reference_check
    L += reference_check.report_lines(result.get("published_reference"))
    pw = result.get("published_windows")
    if pw is not None:
        from dreamer_parity.analysis import published_windows
        L += ["", "## Training metrics against the study's published windows (diagnosis)", "",
              "Each side that logs training metrics, put on the 2,000-row windows of the study's "
              "round-1 and round-2 reports (window mean = the records' means weighted by their "
              "updates) and held against the published reference seeds' [min, max]. Those runs "
              "followed their own round's protocol; not part of any decision."]
        L += (published_windows.report_lines(pw["tables"]) if pw["reason"] is None
              else ["", f"n/a: {pw['reason']}"])
    return L


def render(result: dict, prereg_link: str | None = None, notes: list[str] = (),
           figure_links: dict | None = None) -> str:
    """The report as Markdown text (see the module docstring)."""
    L = _head_lines(result, prereg_link, notes)
    L += _source_lines(result)
    L += _parameter_lines(result["round"])
    L += _decision_lines(result)
    L += _additions_lines(result)
    L += _concordance_lines(result)
    L += _check_lines(result)
    L += _window_lines(result)
    if figure_links:
        L += ["", "## Figures", ""]
        L += [f"![{name}]({link})" for name, link in figure_links.items()]
    return "\n".join(L) + "\n"


def write_report(result: dict, path, prereg=None, notes: list[str] = (), plots_dir=None) -> None:
    """Write the report atomically; links (pre-registration, figures) are relative to it."""
    path = Path(path)
    base = path.parent.resolve() if path.parent != Path("") else Path.cwd()

    def rel(x):
        return os.path.relpath(Path(x).resolve(), base)

    links = None
    if plots_dir is not None:
        links = {n: rel(Path(plots_dir) / n) for n in
                 ("eval_curves.png", "s2_curve.png", "entropy_windows.png", "windows.png")
                 if n != "windows.png" or "side_windows" in result}
        if "additions" in result:
            links.update({n: rel(Path(plots_dir) / n) for n in ("iqm.png", "performance_profile.png")})
    atomic_text(path, render(result, rel(prereg) if prereg else None, list(notes), links))

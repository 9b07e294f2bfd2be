"""Analyse a round: statistics, checks, DVC metrics, plot data, figures and report.

Command line (the DVC stage ``compare`` calls :func:`run_round` through
:mod:`dreamer_parity.pipeline`)::

    python -m dreamer_parity.analysis.compare --params params.yaml \\
        [--reference DIR] [--candidate DIR] --metrics-dir metrics \\
        --plots-dir metrics/plots --report results/report.md \\
        [--prereg docs/rounds/<round>.md]

The sides are those of params.yaml, resolved by :func:`dreamer_parity.sides.resolve`
(``candidate.source``, ``reference.source``; docs/SIDES.md).  ``--reference DIR`` or
``--candidate DIR`` reads that side from one directory instead (every seed located there
by :func:`dreamer_parity.sides.locate`), for an analysis outside the pipeline.

Outputs (fixed names): ``<metrics>/summary.json`` (flat keys, no NaN: null plus a
``.reason`` key), ``<metrics>/headline.json`` (its headline numbers,
:func:`metrics_out.headline`), ``<metrics>/windows.json``, ``<plots>/windows/*.csv`` and
``<plots>/windows.png`` (each side's own training-metric windows, :mod:`windows`),
``<plots>/eval_curve.csv``, ``<plots>/entropy_windows.csv``,
``<plots>/eval_curves.png``, ``<plots>/s2_curve.png``, ``<plots>/entropy_windows.png``,
the additions' ``<plots>/iqm.png`` and ``<plots>/performance_profile.png``, and the report.

Exit status:

* 0: every check passed (``N/A`` and ``FLAG`` do not fail; both are listed);
* 1: a check failed: every output is still written, with the failures listed in the
  report and ``checks.failed`` of the summary, and the failed checks are printed on
  stderr, so the DVC stage fails and the evidence stays inspectable;
* 2: bad input (missing or malformed file, missing completion marker, evaluation rows
  that differ from the round's or between sides, invalid params): one-line error on
  stderr naming the file and line or the rows, nothing written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dreamer_parity import params as params_mod
from dreamer_parity import records
from dreamer_parity import sides as sides_mod
from dreamer_parity.analysis import additions, gate as gate_mod, published_windows, reference_check
from dreamer_parity.analysis import checks as checks_mod
from dreamer_parity.analysis import stats
from dreamer_parity.analysis.last_window import last_window_metrics
from dreamer_parity.analysis.load import AnalysisError, check_eval_rows, display_path, load_side
from dreamer_parity.round_spec import Round

__all__ = ["analyse", "write_outputs", "main", "run_round", "side_table"]


def side_table(side: sides_mod.Side) -> dict:
    """How a resolved side is described in the result: ``dir`` (its sources for
    messages, ``; ``-joined), ``path`` (the one source directory, None for ``run`` or
    several), ``layout`` (``records``, ``published`` or ``mixed``) and ``seeds``
    (the :class:`~dreamer_parity.sides.SeedSource` list)."""
    srcs = side.sources
    shown = [f"{sides_mod.RESULTS}/{side.name}" if s == "run" else display_path(s) for s in srcs]
    layouts = sorted({e.layout for e in side.seeds})
    one_dir = len(srcs) == 1 and srcs[0] != "run"
    return {"dir": "; ".join(shown), "path": Path(srcs[0]) if one_dir else None,
            "layout": layouts[0] if len(layouts) == 1 else "mixed", "seeds": list(side.seeds)}


def analyse(round_: Round, reference, candidate) -> dict:
    """Load both sides and compute every statistic and check of the round.

    Args:
      round_: the round (:func:`dreamer_parity.params.load_round`).
      reference, candidate: a :class:`dreamer_parity.sides.Side` each (from
        :func:`dreamer_parity.sides.resolve`), or a directory
        (:func:`dreamer_parity.sides.side_from_dir`).

    Returns:
      A dict (the input of :mod:`metrics_out`, :mod:`plots`, :mod:`report`):
      ``round, seeds, points, sides, eval, s1, s2, late, concordance, reading, windows,
      halves, entropy, side_windows, window_tests, checks, failed_seeds, additions``.
      ``round`` is ``round_``; ``seeds`` is ``{side: [seed, ...]}``, each side's own seeds
      (:meth:`dreamer_parity.round_spec.Round.seeds`; the sides may differ in number).  ``s2``
      holds each side's curve and last-row values where that side has training episodes
      (``side_reason`` per side), the decision only when both have them; ``side_windows``
      is :func:`windows.compute` (each side's own windows) (:func:`additions.compute`).
      Per-seed arrays of a side are float64 in the order of that side's ``seeds``.

    Raises:
      AnalysisError / RecordError / sides.SideError: bad input, before any statistic is
        computed: besides the readers' refusals, a run of our schema whose files disagree
        with each other or with the round (:func:`dreamer_parity.records.check_run_agrees`,
        judged by the implementation that made the run).
    """
    # each side's own seeds, as the round decides them (the sides may differ in number)
    seeds = round_.seeds()
    st = round_.stats
    rule = st.failed_rule
    points = list(round_.protocol.points)
    sides = {}
    for side, src in (("reference", reference), ("candidate", candidate)):
        if not isinstance(src, sides_mod.Side):
            src = sides_mod.side_from_dir(src, side, seeds[side])
        runs = load_side(src, side, seeds[side], round_=round_)
        check_eval_rows(runs, points)
        # "dir" is for messages and reports; "path" (never written out) for reading files
        sides[side] = {**side_table(src), "runs": runs}
    ref, cand = sides["reference"]["runs"], sides["candidate"]["runs"]
    for key in ("s1_rows", "concordance_rows"):
        bad = [r for r in getattr(st, key) if r not in points]
        if bad:
            raise AnalysisError(f"stats.{key}: rows {bad} are not evaluation points of the runs")

    ev = {"reference": stats.eval_matrix(ref, points, rule), "candidate": stats.eval_matrix(cand, points, rule)}
    out = {"round": round_, "seeds": seeds, "points": points, "sides": sides, "eval": ev}

    s1_rows = list(st.s1_rows)
    s1 = {"reference": stats.s1_values(ref, s1_rows, rule),
          "candidate": stats.s1_values(cand, s1_rows, rule)}
    out["s1"] = {"rows": s1_rows, "values": s1,
                 "decision": stats.decide(s1["candidate"], s1["reference"], "S1", seeds)}

    # S2 of each side that has training episodes; the decision only when both have them
    from dreamer_parity.analysis import windows as windows_mod
    s2_sides = {"reference": windows_mod.s2_side(ref, points, rule),
                "candidate": windows_mod.s2_side(cand, points, rule)}
    out["s2"] = {"row": points[-1],
                 "curve": {k: v["curve"] for k, v in s2_sides.items() if v["reason"] is None},
                 "values": {k: v["values"] for k, v in s2_sides.items() if v["reason"] is None},
                 "side_reason": {k: v["reason"] for k, v in s2_sides.items()}}
    missing = [v["reason"] for v in s2_sides.values() if v["reason"] is not None]
    if missing:
        out["s2"]["reason"] = f"no comparison: {missing[0]}"
    else:
        last = out["s2"]["values"]
        out["s2"]["reason"] = None
        out["s2"]["decision"] = stats.decide(last["candidate"], last["reference"],
                                             f"S2({points[-1]})", seeds)

    if st.late_rows:
        late_rows = list(st.late_rows)
        lp = stats.late_points(points, late_rows)
        lv = {"reference": stats.late_values(ref, points, late_rows, rule),
              "candidate": stats.late_values(cand, points, late_rows, rule)}
        out["late"] = {"rows": late_rows, "points": lp, "values": lv, "reason": None,
                       "decision": stats.decide(lv["candidate"], lv["reference"], "LATE", seeds)}
    else:
        out["late"] = {"rows": [], "reason": "not pre-registered for this round (stats.late_rows empty)"}

    # a side whose seeds come from two sources: one source against the other
    from dreamer_parity.analysis import halves
    out["halves"] = halves.compute(out)

    conc = stats.concordance(ev["reference"], ev["candidate"], points, st.good_return,
                             list(st.concordance_rows), list(st.concordance_range))
    out["concordance"] = conc
    out["reading"] = stats.round3_reading(conc, out["late"].get("decision"), points[-1])

    table, reason = stats.windows_table(ref, cand)
    out["windows"] = {"table": table, "reason": reason}
    n_ov, n_win = stats.overlap_count(table, stats.ENTROPY)
    ent_reason = reason if table is None else (
        None if n_win else f"{stats.ENTROPY} not reported by both sides")
    out["entropy"] = {"overlap": n_ov, "windows": n_win, "reason": ent_reason}
    out["side_windows"] = windows_mod.compute({"reference": ref, "candidate": cand})
    # the round's pre-registered window tests (stats.signature_rows, stats.persistence_rows)
    from dreamer_parity.analysis import window_tests
    out["window_tests"] = window_tests.compute(out["side_windows"], st)

    out["checks"] = checks_mod.run_checks(round_, ref, cand)
    out["failed_seeds"] = {s: [(r.seed, r.failed_row, r.reason) for r in runs if r.status == "failed"]
                           for s, runs in (("reference", ref), ("candidate", cand))}
    out["context"] = study_candidate(round_, sides["reference"], points)
    # diagnosis: each side's training metrics against the study's published windows
    out["published_windows"] = published_windows.for_sides(sides, round_.protocol.rows)
    # a reference that ran, against the study's published reference runs on its grid
    out["published_reference"] = reference_check.check(round_, out)
    # the round's gate (params gate.*, its pre-registration) and the versions the runs imported
    out["gate"] = gate_mod.evaluate(round_.gate, out)
    out["versions"] = checks_mod.version_flags(ref, cand)
    # labelled additions (TOST, rliable aggregates, collapse flags): never the gate
    out["additions"] = additions.compute(out)
    return out


def study_candidate(round_: Round, reference_side: dict, points: list[int]) -> dict | None:
    """The published study's own candidate of the reference's round, for context only.

    When the reference side is a published round directory that also holds the study's
    candidate (``<dir>/ajax/s<S>/evals.jsonl`` for every seed of the reference side), its
    S1 and LATE per seed are computed with the same rules; never part of a decision or the
    gate.

    Returns:
      None when the reference is not a published directory; ``{"dir", "missing": [seed,
      ...], "s1": None, "late": None, "eval": None}`` when ``ajax/`` is absent or lacks
      some seeds of the round (the context is not computed, and the summary and report
      name the missing seeds: every published round holds its candidate); else
      ``{"dir", "missing": [], "s1": float64 [n_seeds], "late": float64 [n_seeds] | None,
      "eval": float64 [n_seeds, n_points]}`` (return units, in the order of the reference
      side's seeds; ``eval`` under the round's ``failed_rule``).

    Raises:
      AnalysisError: its files are malformed or its evaluation rows are not the round's.
    """
    if reference_side["layout"] != "published" or reference_side.get("path") is None:
        return None
    d = Path(reference_side["path"]) / "ajax"
    seeds, st = list(round_.reference.seeds), round_.stats
    missing = [s for s in seeds if not (d / f"s{s}" / "evals.jsonl").is_file()]
    if missing:
        return {"dir": display_path(d), "missing": missing, "s1": None, "late": None,
                "eval": None}
    runs = load_side(d, "candidate", seeds)
    check_eval_rows(runs, points)
    rule = st.failed_rule
    late = stats.late_values(runs, points, list(st.late_rows), rule) if st.late_rows else None
    return {"dir": display_path(d), "missing": [],
            "s1": stats.s1_values(runs, list(st.s1_rows), rule),
            "late": late, "eval": stats.eval_matrix(runs, points, rule)}


def write_outputs(result: dict, metrics_dir, plots_dir, report_path, prereg=None,
                  notes: list[str] | None = None, figures: bool = True) -> dict:
    """Write summary.json, headline.json, the plot CSVs, the PNG figures and the report
    (atomically); returns the headline (:func:`dreamer_parity.analysis.metrics_out.headline`)."""
    from dreamer_parity.analysis import metrics_out, report
    from dreamer_parity.analysis import windows
    s = metrics_out.write_summary(result, Path(metrics_dir) / "summary.json")
    records.write_json(Path(metrics_dir) / "headline.json", metrics_out.headline(s))
    metrics_out.write_plot_data(result, Path(plots_dir))
    if "side_windows" in result:
        from dreamer_parity.analysis.plots import caption
        windows.write(result["side_windows"], Path(metrics_dir) / "windows.json", plots_dir,
                      result["round"].name, caption=caption())
    if figures:
        from dreamer_parity.analysis import plots
        plots.write_figures(result, Path(plots_dir))
    report.write_report(result, Path(report_path), prereg=prereg, notes=notes or [],
                        plots_dir=Path(plots_dir))
    return metrics_out.headline(s)


def run_round(round_: Round, root: str | Path = ".", metrics_dir="metrics",
              plots_dir="metrics/plots", report="results/report.md", prereg=None,
              reference=None, candidate=None) -> int:
    """The compare stage's work: resolve the sides, analyse, write every output.

    Args:
      round_: the round (:func:`dreamer_parity.params.load_round`, once by the caller).
      root: the repository root (the sides' sources are relative to it).
      metrics_dir, plots_dir, report, prereg: output locations and the pre-registration.
      reference, candidate: a directory that replaces that side's ``*.source`` (None:
        :func:`dreamer_parity.sides.resolve`).

    Returns:
      0 every check passed, 1 a check failed (outputs written), 2 bad input (one line
      ``error: ...`` on stderr, nothing written).
    """
    try:
        if prereg is not None and not Path(prereg).exists():
            raise AnalysisError(f"--prereg {prereg}: not found")
        given = {"reference": reference, "candidate": candidate}
        resolved = sides_mod.resolve(round_, root, [k for k, v in given.items() if v is None])
        given.update(resolved)
        result = analyse(round_, given["reference"], given["candidate"])
    except (AnalysisError, records.RecordError, params_mod.ParamsError,
            sides_mod.SideError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    head = write_outputs(result, metrics_dir, plots_dir, report, prereg=prereg)
    # Replaced only after the analysis wrote its outputs: a refusal above (exit 2) leaves
    # every output as it was, this file included.
    records.write_json(Path(metrics_dir) / "train_last_window.json",
                       last_window_metrics(round_, result["sides"]))
    failed = [c for c in result["checks"] if c.status == "FAIL"]
    for c in result["checks"]:
        if c.status == "FLAG":
            print(f"flag: {c.line()}", file=sys.stderr)
    stat = result["gate"]["statistic"]
    if stat:          # the gate's statistic and its decision
        line = gate_mod.console_line(result["gate"], (result.get(stat) or {}).get("decision"))
    else:             # no gate: the round's headline numbers
        from dreamer_parity.analysis import metrics_out
        line = gate_mod.console_line(result["gate"], None) + "; " + metrics_out.headline_line(head)
    line += f"; report {display_path(report)}"
    if failed:
        print(f"{len(failed)} check(s) failed:", file=sys.stderr)
        for c in failed:
            print(f"  {c.line()}", file=sys.stderr)
        print(line, file=sys.stderr)
        return 1
    print(line)
    return 0


def main(argv=None) -> int:
    """CLI entry point; returns the exit status (0 ok, 1 a check failed, 2 bad input)."""
    ap = argparse.ArgumentParser(prog="python -m dreamer_parity.analysis.compare",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--reference", default=None,
                    help="read the reference side from this directory (default: reference.source)")
    ap.add_argument("--candidate", default=None,
                    help="read the candidate side from this directory (default: candidate.source)")
    ap.add_argument("--metrics-dir", default="metrics")
    ap.add_argument("--plots-dir", default="metrics/plots")
    ap.add_argument("--report", default="results/report.md")
    ap.add_argument("--prereg", default=None, help="the round's pre-registration file")
    args = ap.parse_args(argv)
    try:
        round_ = params_mod.load_round(args.params)
    except (params_mod.ParamsError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return run_round(round_, ".", args.metrics_dir, args.plots_dir, args.report,
                     prereg=args.prereg, reference=args.reference, candidate=args.candidate)


if __name__ == "__main__":
    sys.exit(main())

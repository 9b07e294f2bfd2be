"""The learning check: does the round-1 candidate, run once at full size, learn CartPole
like the published reference?

Command line (the DVC stage ``learning_check``)::

    python -m dreamer_parity.analysis.learning_check --params params.yaml \\
        --candidate results/candidate --published data/published \\
        --out metrics/learning_check.json \\
        --plot-data metrics/plots/learning_check_eval.csv

What it compares (the project's issue "learning check"):

* **The candidate**: the round-1 candidate side at full size, i.e. params ``profile
  full``, ``seeds [0, 1, 2]``, ``rows 20000``, ``eval_every 2000``, ``eval_episodes 10``,
  ``decode exact`` (:data:`ROUND`), read from ``--candidate`` (``s<seed>/`` run
  directories in the records schema, :mod:`dreamer_parity.records`).
* **Pair E's reference** (the gate): the study's round-2 reference with the exact two-hot
  expectation, the same expectation as the candidate (``<published>/round2/ref_s<S>``;
  entropy range from its ``compare.md``, kept as ``<published>/tables.csv``).
* **The stock reference of round 1** (reported, not gated): ``<published>/round1/ref_s<S>``
  and its ``compare.md`` (in ``<published>/tables.csv``).

Statistics (as :mod:`dreamer_parity.analysis.compare` computes them, same functions):

* S1 per seed: mean evaluation return at rows 16000, 18000, 20000 (:data:`S1_ROWS`;
  :func:`stats.s1_values`, failed seeds per params ``stats.failed_rule``); ``A`` = mean
  over candidate seeds; per reference ``lo``/``hi`` = min/max of its seeds' S1,
  ``LEARNS = A >= lo``, ``WITHIN_RANGE = lo <= A <= hi``, Welch's two-sided t-test
  (:func:`stats.decide`).  With 3 seeds per side LEARNS and WITHIN_RANGE are noisy.
* Actor entropy at 4000 rows: the candidate's ``ent/action/mean`` of its record at row
  4000, i.e. the mean over the updates in the window (2000, 4000] (records.py ``train``,
  the windows :func:`stats.windows_table` compares), per seed; its seed range [min, max]
  against the reference's range printed in the published ``compare.md``
  (:func:`published_tables.window_range`); the ranges overlap when
  ``max(lo) <= min(hi)``, as in :func:`stats.windows_table`.
* The gate (pair E only): ``A >= 156`` (:data:`MEAN_S1_BAR`) and Welch ``p >= 0.05``
  (:data:`WELCH_P_MIN`) and the entropy ranges overlap.

Outputs, written atomically:

``--out`` (a DVC metric, flat keys, no NaN/Infinity: a null value has a ``<key>.reason``
key explaining it)::

    applicable                         true (false: see below)
    candidate.S1.s<S>, candidate.S1.A  S1 per seed and A (return units)
    candidate.failed_seeds             seeds whose run failed (scored by the failed rule)
    candidate.entropy_w4000.s<S>, .lo, .hi, .mean
    <ref>.S1.s<S>, <ref>.S1.lo, <ref>.S1.hi, <ref>.S1.mean
    <ref>.diff                         A - <ref>.S1.mean
    <ref>.LEARNS, <ref>.WITHIN_RANGE
    <ref>.welch_t, <ref>.welch_p, <ref>.welch_df
    <ref>.entropy_w4000.mean, .lo, .hi (as published, 4 decimals)
    <ref>.entropy_overlap
    gate.mean_S1_bar, gate.welch_p_min (the constants)
    gate.mean_S1_ok, gate.welch_p_ok, gate.entropy_overlap_ok, gate_pass

with ``<ref>`` in ``pairE`` (the gate) and ``round1`` (the stock reference).

``--plot-data`` (long CSV): ``side, seed, rows, eval_mean`` for every evaluation point
of every run read: ``candidate`` (as recorded; the failed rule applies to the
statistics only), ``reference_pairE``, ``reference_round1``.

When the round in params is not the learning check's (the smoke round: 1200 rows, no
evaluation at 16000; other seeds; another profile or decode), the JSON has the same keys,
every value null, ``applicable: false`` and a ``reason``; the CSV still holds every
evaluation point read; exit status 0, so the stage never fails a smoke pipeline.

Exit status: 0 written (whether or not the gate passes: the gate is a result); 2 bad
input (missing or malformed file, evaluation rows unlike the round's, invalid params):
one line ``error: ...`` on stderr naming the file (and line), nothing written.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from dreamer_parity import params as params_mod
from dreamer_parity import records
from dreamer_parity.analysis import published_tables, stats
from dreamer_parity.analysis.load import (AnalysisError, Run, check_eval_rows, display_path,
                                          load_side)
from dreamer_parity.analysis.metrics_out import _num, atomic_text, missing_reasons

__all__ = ["analyse", "applicability", "candidate_entropy", "seed_range", "ranges_overlap",
           "reference_side", "flat_metrics", "metric_keys", "plot_frame", "write_outputs",
           "main", "MEAN_S1_BAR", "WELCH_P_MIN", "S1_ROWS", "ENTROPY_ROW", "SEEDS", "ROUND",
           "REFERENCES", "GATE_REFERENCE"]

#: The gate's bar on the candidate's mean S1, in return units: the study's own pass bar,
#: half the reference's round-3 LATE mean (312.7 over [12000, 24000] rows, the published
#: study's round-3 result), rounded as the project's issue states it: 156.
MEAN_S1_BAR = 156.0
#: Welch's two-sided p against pair E's reference S1 must be at least this (the issue).
WELCH_P_MIN = 0.05
#: Evaluation rows whose mean is S1 (PROTOCOL.md 5.2, round 1 ``stats.s1_rows``).
S1_ROWS = (16000, 18000, 20000)
#: The training-metric window whose actor entropy is compared: it ends at this row.
ENTROPY_ROW = 4000
#: Seeds of the learning check and of both published references.
SEEDS = (0, 1, 2)
#: The round the learning check is defined for (the round-1 candidate side at full size).
ROUND = {"profile": "full", "seeds": list(SEEDS), "rows": 20000, "eval_every": 2000,
         "eval_episodes": 10, "decode": "exact"}
#: name -> (published round directory of its runs, its compare.md), relative to --published.
REFERENCES = {
    "pairE": ("round2", "round2/pairE/compare.md"),
    "round1": ("round1", "round1/compare.md"),
}
#: The reference the gate compares against (same two-hot expectation as the candidate).
GATE_REFERENCE = "pairE"
_CSV_SIDE = {"candidate": "candidate", **{k: f"reference_{k}" for k in REFERENCES}}


# ----------------------------------------------------------------------------- inputs

def applicability(params: dict) -> str | None:
    """Whether the round in ``params`` is the learning check's (:data:`ROUND`).

    Args:
      params: validated params (:func:`dreamer_parity.params.load`).

    Returns:
      None when it is; otherwise the reason (one line naming every differing key, with
      the value the learning check needs).  Source: the issue's "round-1 candidate side
      (seeds 0 1 2, 20000 rows, evaluation every 2000 rows, 10 episodes)" at full size,
      compared with a reference using the same (exact) two-hot expectation.
    """
    diffs = []
    for key, want in ROUND.items():
        got = params[key]
        if got != want:
            extra = ""
            if key == "rows" and got < S1_ROWS[0]:
                extra = f"; no evaluation at {S1_ROWS[0]}"
            diffs.append(f"{key} {got} (needs {want}{extra})")
    if not diffs:
        return None
    return ("not applicable to this round: the learning check is defined for the round-1 "
            "candidate at full size; params have " + ", ".join(diffs))


def reference_side(published_dir, name: str, rule: str = "zero") -> dict:
    """Load one published reference and compute what the learning check compares.

    Args:
      published_dir: the published study's directory (``data/published``).
      name: a key of :data:`REFERENCES` (``"pairE"`` or ``"round1"``).
      rule: params ``stats.failed_rule`` (published runs all finished).

    Returns:
      ``{"name", "runs": [Run] (seeds :data:`SEEDS`), "s1": float64 [3] (return units,
      seed order 0 1 2), "entropy": {"mean", "lo", "hi", "line"} (the 4000-row window of
      ``ent/action/mean``, as printed), "compare_md": display path}``.

    Raises:
      AnalysisError: a run's ``evals.jsonl`` is missing or malformed, its evaluation
      rows are not 2000, 4000, ..., 20000, or the compare.md cell is missing from
      ``tables.csv`` (:mod:`.published_tables`; the message names the file and line).
    """
    rnd, md = REFERENCES[name]
    root = Path(published_dir)
    runs = load_side(root / rnd, "reference", list(SEEDS), "published")
    check_eval_rows(runs, params_mod.eval_points(ROUND))
    table = root / published_tables.TABLE_FILE
    ent = published_tables.window_range(table, md, ENTROPY_ROW, stats.ENTROPY)
    return {"name": name, "runs": runs, "s1": stats.s1_values(runs, list(S1_ROWS), rule),
            "entropy": ent, "compare_md": f"{display_path(table)} ({md})"}


def candidate_entropy(runs: list[Run], row: int = ENTROPY_ROW) -> np.ndarray:
    """Actor entropy ``ent/action/mean`` of each run's training window ending at ``row``.

    The record at ``row`` holds the mean over the updates since the previous record
    (records.py ``train``), the same windows :func:`stats.windows_table` compares.

    Returns:
      float64 ``[len(runs)]`` (nats); NaN where a run has no record at ``row``, no such
      metric, or a null window (no finite value).
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


# ----------------------------------------------------------------------------- analysis

def analyse(params: dict, candidate_dir, published_dir) -> dict:
    """Read both references and the candidate; compute the learning check.

    Every input is read and validated first, whether or not the round applies (so bad
    input is an error in the smoke round too).

    Args:
      params: validated params.
      candidate_dir: the candidate side directory (``s<seed>/`` run directories).
      published_dir: the published study's directory.

    Returns:
      ``{"applicable": bool, "reason": str | None, "candidate": {"runs", "s1", "entropy"},
      "references": {name: :func:`reference_side` + "decision": :func:`stats.decide`},
      "gate": {...}}``; with ``applicable`` False only ``reason``, the runs and the
      references' runs are set.

    Raises:
      AnalysisError / RecordError: bad input (names the file and line).
    """
    rule = params["stats"]["failed_rule"]
    refs = {name: reference_side(published_dir, name, rule) for name in REFERENCES}
    cand_runs = load_side(candidate_dir, "candidate", params["seeds"])
    out = {"params": params, "references": refs, "candidate": {"runs": cand_runs}}
    reason = applicability(params)
    out["applicable"], out["reason"] = reason is None, reason
    if reason is not None:
        return out
    check_eval_rows(cand_runs, params_mod.eval_points(params))
    s1 = stats.s1_values(cand_runs, list(S1_ROWS), rule)
    ent = candidate_entropy(cand_runs)
    cand = out["candidate"]
    cand.update({"s1": s1, "entropy": ent, "entropy_range": seed_range(ent),
                 "failed": [r.seed for r in cand_runs if r.status == "failed"]})
    er = cand["entropy_range"]
    for name, ref in refs.items():
        ref["decision"] = stats.decide(s1, ref["s1"], "S1", list(SEEDS))
        e = ref["entropy"]
        ref["entropy_overlap"] = ranges_overlap(er["lo"], er["hi"], e["lo"], e["hi"])
    g = refs[GATE_REFERENCE]
    A, p = g["decision"]["A"], g["decision"]["welch"]["p"]
    parts = {"mean_S1_ok": bool(A >= MEAN_S1_BAR),
             "welch_p_ok": None if p is None else bool(p >= WELCH_P_MIN),
             "entropy_overlap_ok": g["entropy_overlap"]}
    vals = list(parts.values())
    out["gate"] = {**parts, "pass": False if False in vals else (None if None in vals else True)}
    return out


# ----------------------------------------------------------------------------- outputs

def metric_keys() -> list[str]:
    """Every value key of the metrics JSON (without the ``*.reason`` keys), in order."""
    keys = ["applicable"] + [f"candidate.S1.s{s}" for s in SEEDS] + ["candidate.S1.A",
                                                                      "candidate.failed_seeds"]
    keys += [f"candidate.entropy_w{ENTROPY_ROW}.{k}" for k in
             [f"s{s}" for s in SEEDS] + ["lo", "hi", "mean"]]
    for name in REFERENCES:
        keys += [f"{name}.S1.s{s}" for s in SEEDS] + [f"{name}.S1.{k}" for k in ("lo", "hi", "mean")]
        keys += [f"{name}.{k}" for k in ("diff", "LEARNS", "WITHIN_RANGE", "welch_t", "welch_p",
                                         "welch_df")]
        keys += [f"{name}.entropy_w{ENTROPY_ROW}.{k}" for k in ("mean", "lo", "hi")]
        keys += [f"{name}.entropy_overlap"]
    keys += ["gate.mean_S1_bar", "gate.welch_p_min", "gate.mean_S1_ok", "gate.welch_p_ok",
             "gate.entropy_overlap_ok", "gate_pass"]
    return keys


def flat_metrics(result: dict) -> dict:
    """The flat metrics dict of :func:`analyse`'s result (see the module docstring).

    Not applicable: every key of :func:`metric_keys` null except ``applicable`` (false),
    plus ``reason``.  Applicable: values, and a ``<key>.reason`` for each null value.
    """
    if not result["applicable"]:
        out = {k: None for k in metric_keys()}
        out["applicable"] = False
        out["reason"] = result["reason"]
        return out
    out = {"applicable": True}
    c = result["candidate"]
    e = f"entropy_w{ENTROPY_ROW}"
    for s, v in zip(SEEDS, c["s1"]):
        out[f"candidate.S1.s{s}"] = _num(v)
    out["candidate.S1.A"] = _num(result["references"][GATE_REFERENCE]["decision"]["A"])
    out["candidate.failed_seeds"] = len(c["failed"])
    for s, v in zip(SEEDS, c["entropy"]):
        out[f"candidate.{e}.s{s}"] = _num(v)
        if out[f"candidate.{e}.s{s}"] is None:
            out[f"candidate.{e}.s{s}.reason"] = (f"no finite {stats.ENTROPY} in the candidate's "
                                                 f"record at row {ENTROPY_ROW} (null window, or "
                                                 f"no record)")
    er = c["entropy_range"]
    for k in ("lo", "hi", "mean"):
        out[f"candidate.{e}.{k}"] = _num(er[k])
    if er["n"] == 0:
        out[f"candidate.{e}.reason"] = "no candidate seed has a finite value in this window"
    for name, ref in result["references"].items():
        d = ref["decision"]
        for s, v in zip(SEEDS, ref["s1"]):
            out[f"{name}.S1.s{s}"] = _num(v)
        out[f"{name}.S1.lo"], out[f"{name}.S1.hi"] = _num(d["lo"]), _num(d["hi"])
        out[f"{name}.S1.mean"] = _num(np.mean(ref["s1"]))
        for k in ("diff", "LEARNS", "WITHIN_RANGE"):
            out[f"{name}.{k}"] = _num(d[k])
        w = d["welch"]
        out[f"{name}.welch_t"], out[f"{name}.welch_p"], out[f"{name}.welch_df"] = \
            _num(w["t"]), _num(w["p"]), _num(w["df"])
        if w["reason"]:
            out[f"{name}.welch.reason"] = w["reason"]
        for k in ("mean", "lo", "hi"):
            out[f"{name}.{e}.{k}"] = _num(ref["entropy"][k])
        out[f"{name}.entropy_overlap"] = ref["entropy_overlap"]
        if ref["entropy_overlap"] is None:
            out[f"{name}.entropy_overlap.reason"] = "the candidate has no entropy range"
    g = result["gate"]
    out["gate.mean_S1_bar"], out["gate.welch_p_min"] = MEAN_S1_BAR, WELCH_P_MIN
    for k in ("mean_S1_ok", "welch_p_ok", "entropy_overlap_ok"):
        out[f"gate.{k}"] = g[k]
        if g[k] is None:
            out[f"gate.{k}.reason"] = ("Welch's test undefined: " + str(
                result["references"][GATE_REFERENCE]["decision"]["welch"]["reason"])
                if k == "welch_p_ok" else "the candidate has no entropy range")
    out["gate_pass"] = g["pass"]
    if g["pass"] is None:
        out["gate_pass.reason"] = "a part of the gate is undefined and none failed"
    return out


def plot_frame(result: dict) -> pd.DataFrame:
    """Every evaluation point read: columns ``side`` (str: ``candidate``,
    ``reference_pairE``, ``reference_round1``), ``seed`` (int), ``rows`` (int64),
    ``eval_mean`` (float64, return units, as recorded)."""
    frames = []
    sides = [("candidate", result["candidate"]["runs"])] + \
            [(name, ref["runs"]) for name, ref in result["references"].items()]
    for side, runs in sides:
        for run in runs:
            frames.append(pd.DataFrame({"side": _CSV_SIDE[side], "seed": run.seed,
                                        "rows": run.evals["rows"].to_numpy(dtype=np.int64),
                                        "eval_mean": run.evals["eval_mean"].to_numpy(dtype=np.float64)}))
    cols = ["side", "seed", "rows", "eval_mean"]
    return pd.concat(frames, ignore_index=True)[cols] if frames else pd.DataFrame(columns=cols)


def write_outputs(result: dict, out, plot_data) -> dict:
    """Write the metrics JSON and the plot CSV atomically; return the metrics dict.

    Raises:
      AssertionError: a null value without a reason in an applicable result (a bug).
    """
    m = flat_metrics(result)
    if m["applicable"]:
        bad = missing_reasons(m)
        assert not bad, f"{out}: null without a reason: {bad}"
    buf = io.StringIO()
    plot_frame(result).to_csv(buf, index=False, float_format="%.10g")
    records.write_json(out, m)
    atomic_text(plot_data, buf.getvalue())
    return m


def _line(m: dict) -> str:
    if not m["applicable"]:
        return f"learning check: {m['reason']}"
    e = f"entropy_w{ENTROPY_ROW}"

    def f(x, fmt):
        return "n/a" if x is None else format(x, fmt)

    parts = [f"A {f(m['candidate.S1.A'], '.1f')}"]
    for name in REFERENCES:
        parts.append(f"{name} [{f(m[f'{name}.S1.lo'], '.1f')}, {f(m[f'{name}.S1.hi'], '.1f')}] "
                     f"LEARNS {m[f'{name}.LEARNS']} WITHIN_RANGE {m[f'{name}.WITHIN_RANGE']} "
                     f"Welch p {f(m[f'{name}.welch_p'], '.3f')} entropy overlap "
                     f"{m[f'{name}.entropy_overlap']}")
    parts.append(f"entropy@{ENTROPY_ROW} [{f(m[f'candidate.{e}.lo'], '.4f')}, "
                 f"{f(m[f'candidate.{e}.hi'], '.4f')}]")
    verdict = {True: "PASS", False: "FAIL", None: "undefined"}[m["gate_pass"]]
    return "learning check: " + "; ".join(parts) + f"; gate {verdict}"


def main(argv=None) -> int:
    """CLI entry point; returns the exit status (0 written, 2 bad input)."""
    ap = argparse.ArgumentParser(prog="python -m dreamer_parity.analysis.learning_check",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--candidate", default="results/candidate", help="candidate side directory")
    ap.add_argument("--published", default="data/published",
                    help="the published study's directory (round1/, round2/)")
    ap.add_argument("--out", default="metrics/learning_check.json")
    ap.add_argument("--plot-data", default="metrics/plots/learning_check_eval.csv")
    args = ap.parse_args(argv)
    try:
        params = params_mod.load(args.params)
        if not Path(args.published).is_dir():
            raise AnalysisError(f"published directory {display_path(args.published)}: not found")
        result = analyse(params, args.candidate, args.published)
    except (AnalysisError, records.RecordError, params_mod.ParamsError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    m = write_outputs(result, args.out, args.plot_data)
    print(_line(m))
    return 0


if __name__ == "__main__":
    sys.exit(main())

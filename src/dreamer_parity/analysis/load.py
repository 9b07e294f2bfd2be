"""Load one side of a round into tables the statistics read.

A side is a :class:`dreamer_parity.sides.Side` (one run directory per seed, each in the
:mod:`dreamer_parity.records` schema or the study's published layout,
:mod:`dreamer_parity.analysis.published`), or a directory that
:func:`dreamer_parity.sides.side_from_dir` resolves into one.

Every run becomes a :class:`Run`: its evaluation points as a pandas DataFrame, its
training-metric windows, its training episodes (None where the layout has none) and
its completion status.  Nothing is computed here beyond re-shaping; bad input raises
:class:`AnalysisError` (or :class:`dreamer_parity.records.RecordError`) naming the file
and line, before any statistic is computed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dreamer_parity import records
from dreamer_parity import sides as sides_mod
from dreamer_parity.analysis import published
from dreamer_parity.analysis.runs import AnalysisError, Run, display_path
from dreamer_parity.round_spec import Round

__all__ = ["AnalysisError", "Run", "load_side", "display_path", "check_eval_rows",
           "load_run"]


def _records_run(directory: Path, side: str, seed: int, made_by: str,
                 round_: Round | None = None) -> Run:
    label = display_path(directory)
    if not directory.is_dir():
        raise AnalysisError(f"{label}: run directory of {side} seed {seed} not found")
    data = records.read_run(directory)  # raises RecordError naming file and line
    recs = data["records"]
    path = records.jsonl_path(directory, "records.jsonl")
    legacy = records.check_run_agrees(directory, round_, side, seed, data=data,
                                      made_by=made_by)
    for i, r in enumerate(recs, 1):
        if r["side"] != made_by:
            raise AnalysisError(f"{display_path(path)}:{i}: side {r['side']!r}, but run.json "
                                f"says the run was made by {made_by!r}")
        if r["seed"] != seed:
            raise AnalysisError(f"{display_path(path)}:{i}: seed {r['seed']}, expected {seed}")
        if not np.isfinite(r["eval_mean"]):
            raise AnalysisError(f"{display_path(path)}:{i}: eval_mean is not finite")
    evals = pd.DataFrame({
        "rows": np.array([r["rows"] for r in recs], dtype=np.int64),
        "updates": np.array([r["updates"] for r in recs], dtype=np.int64),
        "eval_mean": np.array([r["eval_mean"] for r in recs], dtype=np.float64),
        "n_episodes": np.array([len(r["eval_returns"]) for r in recs], dtype=np.float64),
        "status": [r["status"] for r in recs],
    })
    train = pd.DataFrame([{k: (np.nan if v is None else float(v)) for k, v in r["train"].items()}
                          for r in recs], index=pd.Index(evals["rows"].to_numpy(), name="rows"),
                         dtype=np.float64)
    eps = data["episodes"]
    episodes = pd.DataFrame({
        "worker": np.array([e["worker"] for e in eps], dtype=np.int64),
        "row_last": np.array([e["row_last"] for e in eps], dtype=np.int64),
        "length": np.array([e["length"] for e in eps], dtype=np.int64),
        "score": np.array([e["score"] for e in eps], dtype=np.float64),
        "terminal": np.array([e["terminal"] for e in eps], dtype=bool),
    })
    done = data["done"]
    failed_recs = [r["rows"] for r in recs if r["status"] == "failed"]
    bad_status = [r["status"] for r in recs if r["status"] not in ("ok", "failed")]
    if bad_status:
        raise AnalysisError(f"{display_path(path)}: unknown record status {bad_status[0]!r}")
    status, reason, failed_row = "ok", None, None
    if done["status"] == "failed":
        status, reason = "failed", done.get("reason") or "no reason given"
        failed_row = failed_recs[0] if failed_recs else None
    elif failed_recs:
        raise AnalysisError(f"{display_path(path)}: a record has status 'failed' at row "
                            f"{failed_recs[0]} but {records.DONE} says ok")
    if failed_recs and recs[-1]["rows"] != failed_recs[0]:
        raise AnalysisError(f"{display_path(path)}: records continue after the failed point "
                            f"at row {failed_recs[0]}")
    return Run(side=side, seed=seed, source="records", label=label, status=status,
               reason=reason, failed_row=failed_row, evals=evals,
               eval_returns=[r["eval_returns"] for r in recs], train=train, episodes=episodes,
               run_info=data["run"], timing=data["timing"], made_by=made_by,
               done_legacy=legacy)


def load_run(src: sides_mod.SeedSource, side: str, round_: Round | None = None) -> Run:
    """Load one seed of ``side`` from its :class:`~dreamer_parity.sides.SeedSource`.

    Args:
      src: where the seed comes from; side: the side it stands on.
      round_: the round: a run of our schema must then agree with it as well as with
        itself (:func:`dreamer_parity.records.check_run_agrees`,
        judged by ``src.made_by``); None checks only that its files agree.

    Raises:
      AnalysisError / RecordError: the run directory is missing, has no completion
      marker, holds a truncated or malformed file (the message names file and line), or
      files that disagree with each other or the round.
    """
    if src.layout == "published":
        run = published.load_run_dir(Path(src.run_dir), side, src.seed, src.made_by)
    elif src.layout == "records":
        run = _records_run(Path(src.run_dir), side, src.seed, src.made_by, round_)
    else:
        raise ValueError(f"unknown layout {src.layout!r}")
    run.origin = src.source
    return run


def load_side(source, side: str, seeds: list[int] | None = None,
              round_: Round | None = None) -> list[Run]:
    """Load the runs of one side, one per seed, in the order of the side's seeds.

    Args:
      source: a :class:`dreamer_parity.sides.Side` (from :func:`dreamer_parity.sides.resolve`),
        or a directory, resolved by :func:`dreamer_parity.sides.side_from_dir`.
      side: ``"reference"`` or ``"candidate"``.
      seeds: the side's seeds; needed with a directory.
      round_: the round: each run of our schema must then agree with it as well as with
        itself (:func:`dreamer_parity.records.check_run_agrees`);
        None checks only that its files agree with each other.

    Returns:
      A list of :class:`Run`.

    Raises:
      AnalysisError / RecordError: a run directory is missing, has no completion marker,
      holds a truncated or malformed file (the message names file and line), or files
      that disagree;
      sides.SideError: a directory without a run of a seed.
    """
    if side not in records.SIDES:
        raise ValueError(f"side must be one of {records.SIDES}, got {side!r}")
    if not isinstance(source, sides_mod.Side):
        if seeds is None:
            raise ValueError("load_side: seeds are needed with a directory")
        source = sides_mod.side_from_dir(source, side, seeds)
    entries = source.seeds if seeds is None else [source.by_seed(int(s)) for s in seeds]
    return [load_run(e, side, round_) for e in entries]


def check_eval_rows(runs: list[Run], expected: list[int]) -> None:
    """Require every run's evaluation rows to be the round's evaluation points.

    A finished run must hold exactly ``expected``; a failed run a prefix of it ending at
    its failing point (its later points are absent by design).  Sets ``failed_row`` of
    a failed run that stopped before its first failing record to the first missing row.

    Raises:
      AnalysisError: naming the run and the missing or unexpected rows.
    """
    exp = list(expected)
    for run in runs:
        got = run.evals["rows"].tolist()
        extra = [r for r in got if r not in exp]
        if run.status == "ok":
            missing = [r for r in exp if r not in got]
        else:  # a failed run stops early: every expected row up to its last one
            last = got[-1] if got else -1
            missing = [r for r in exp if r <= last and r not in got]
        if extra or missing:
            parts = []
            if missing:
                parts.append(f"missing rows {missing}")
            if extra:
                parts.append(f"unexpected rows {extra}")
            raise AnalysisError(
                f"{run.side} seed {run.seed} ({run.label}): evaluation rows differ from the "
                f"round's evaluation points: {'; '.join(parts)}")
        if run.status == "failed" and run.failed_row is None:
            rest = exp[len(got):]
            run.failed_row = rest[0] if rest else None

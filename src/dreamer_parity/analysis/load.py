"""Load one side of a round into tables the statistics read.

A side is a directory holding one run directory per seed, ``<DIR>/s<seed>/`` in the
:mod:`dreamer_parity.records` schema, or a directory of the published study
(:mod:`dreamer_parity.analysis.published`; detected by :func:`detect_layout`).

Every run becomes a :class:`Run`: its evaluation points as a pandas DataFrame, its
training-metric windows, its training episodes (None where the layout has none) and
its completion status.  Nothing is computed here beyond re-shaping; bad input raises
:class:`AnalysisError` (or :class:`dreamer_parity.records.RecordError`) naming the file
and line, before any statistic is computed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from dreamer_parity import records

__all__ = ["AnalysisError", "Run", "load_side", "detect_layout", "display_path",
           "check_eval_rows"]


class AnalysisError(ValueError):
    """Input the analysis cannot use (missing rows, inconsistent files); one line."""


def display_path(path) -> str:
    """``path`` for messages and artifacts, never absolute.

    Relative to the working directory when at most two levels up (``../shared/...``);
    otherwise ``<outside>/`` plus its last two components.
    """
    p = Path(path)
    try:
        rel = os.path.relpath(p)
    except ValueError:  # another drive (not on POSIX)
        rel = None
    if rel is not None and Path(rel).parts[:3].count("..") <= 2:
        return rel
    return "<outside>/" + "/".join(p.resolve().parts[-2:])


@dataclass
class Run:
    """One seed of one side.

    Attributes:
      side: ``"reference"`` or ``"candidate"``.
      seed: the run seed.
      source: ``"records"`` (our schema) or ``"published"``.
      label: the run directory, relative to the working directory (for messages).
      status: ``"ok"`` or ``"failed"`` (completion marker).
      reason: the failure reason (None when ok).
      failed_row: row of the first evaluation point that does not count (the record
        with status ``failed``, or the first missing point); None when ok.
      evals: DataFrame, one row per evaluation record in increasing ``rows``; columns
        ``rows`` (int64, transitions over all envs), ``updates`` (int64),
        ``eval_mean`` (float64, return units), ``n_episodes`` (float64: number of
        evaluation returns, NaN when the layout does not log them), ``status`` (str).
      eval_returns: per record the list of evaluation returns (None when not logged).
      train: DataFrame indexed by ``rows`` with one float64 column per training metric
        (NaN for a null window), or None when the layout has no training metrics.
      episodes: DataFrame with columns ``worker, row_last, length, score, terminal`` in
        file order, or None when the layout has no episode log.
      run_info: the parsed ``run.json`` (records layout) or a normalised
        ``{"args": {...}, "provenance": {...}}`` (published), or None.
      timing: parsed ``timing.json`` or None.
      unavailable: ``{what: reason}`` for data this layout does not carry.
    """

    side: str
    seed: int
    source: str
    label: str
    status: str
    reason: str | None
    failed_row: int | None
    evals: pd.DataFrame
    eval_returns: list
    train: pd.DataFrame | None
    episodes: pd.DataFrame | None
    run_info: dict | None
    timing: dict | None
    unavailable: dict = field(default_factory=dict)


def detect_layout(directory, side: str) -> str:
    """Return ``"records"`` or ``"published"`` for a side directory.

    ``records``: ``<DIR>/s<seed>/`` (or ``<DIR>/<side>/s<seed>/``) holding
    ``records.jsonl`` or ``DONE.json``.
    ``published``: ``<DIR>/ref_s<seed>/evals.jsonl`` (reference), or
    ``<DIR>/ajax/s<seed>/evals.jsonl`` / ``<DIR>/s<seed>/evals.jsonl`` (candidate).

    Raises:
      AnalysisError: the directory is missing or matches neither layout.
    """
    d = Path(directory)
    if not d.is_dir():
        raise AnalysisError(f"{side} directory {display_path(d)}: not found")
    d = _records_root(d, side)
    kids = [p for p in d.iterdir() if p.is_dir()]
    if any(_is_run_dir(p) for p in kids):
        return "records"
    if any(p.name.startswith("ref_s") and (p / "evals.jsonl").exists() for p in kids):
        return "published"
    if (d / "ajax").is_dir() or any(p.name.startswith("s") and (p / "evals.jsonl").exists()
                                    for p in kids):
        return "published"
    raise AnalysisError(
        f"{side} directory {display_path(d)}: holds neither s<seed>/records.jsonl run "
        f"directories nor the published layout (ref_s<seed>/evals.jsonl, ajax/s<seed>/evals.jsonl)")


def _is_run_dir(p: Path) -> bool:
    return p.is_dir() and p.name.startswith("s") and (
        (p / "records.jsonl").exists() or (p / records.DONE).exists())


def _records_root(d: Path, side: str) -> Path:
    """``d``, or ``d/<side>`` when the run directories sit there instead
    (``records.run_dir(out, side, seed)`` under an output directory ``d``)."""
    if not any(_is_run_dir(p) for p in d.iterdir()) and (d / side).is_dir() and \
            any(_is_run_dir(p) for p in (d / side).iterdir()):
        return d / side
    return d


def _records_run(directory: Path, side: str, seed: int) -> Run:
    label = display_path(directory)
    if not directory.is_dir():
        raise AnalysisError(f"{label}: run directory of {side} seed {seed} not found")
    data = records.read_run(directory)  # raises RecordError naming file and line
    recs = data["records"]
    path = directory / "records.jsonl"
    for i, r in enumerate(recs, 1):
        if r["side"] != side:
            raise AnalysisError(f"{display_path(path)}:{i}: side {r['side']!r}, expected {side!r}")
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
               run_info=data["run"], timing=data["timing"])


def load_side(directory, side: str, seeds: list[int], layout: str | None = None) -> list[Run]:
    """Load the runs of one side, one per seed, in the order of ``seeds``.

    Args:
      directory: the side directory (see :func:`detect_layout`).
      side: ``"reference"`` or ``"candidate"``.
      seeds: the round's seeds (params ``seeds``).
      layout: ``"records"`` / ``"published"``, or None to detect it.

    Returns:
      A list of :class:`Run`.

    Raises:
      AnalysisError / RecordError: a run directory is missing, has no completion marker,
      or holds a truncated or malformed file (the message names file and line).
    """
    if side not in records.SIDES:
        raise ValueError(f"side must be one of {records.SIDES}, got {side!r}")
    layout = layout or detect_layout(directory, side)
    directory = _records_root(Path(directory), side) if layout == "records" else directory
    if layout == "published":
        from dreamer_parity.analysis import published
        return [published.load_run(directory, side, s) for s in seeds]
    if layout != "records":
        raise ValueError(f"unknown layout {layout!r}")
    return [_records_run(Path(directory) / f"s{int(s)}", side, int(s)) for s in seeds]


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

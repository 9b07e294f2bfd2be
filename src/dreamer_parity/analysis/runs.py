"""The table of one run the statistics read, and the names shared by the readers.

:class:`Run` is filled by :mod:`.load` (records schema) and :mod:`.published` (the
study's published layout); both import from here and neither imports the other.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

__all__ = ["AnalysisError", "Run", "display_path", "execution", "UNKNOWN"]

#: What :func:`execution` says of a run that records no jax backend (the published runs).
UNKNOWN = "unknown"


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
      made_by: ``"candidate"`` or ``"reference"``: the implementation that produced the
        run (:mod:`dreamer_parity.sides`); the checks judge the run by it.  Defaults to
        ``side``.
      done_legacy: True when ``DONE.json`` holds only its status (no ``side``, ``seed``,
        ``run_sha256``: it does not name the run it closes); the checks flag it.
      origin: the side's source of this seed (``"run"`` or a directory), or None.
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
    made_by: str | None = None
    origin: str | None = None
    done_legacy: bool = False

    def __post_init__(self):
        if self.made_by is None:
            self.made_by = self.side


def execution(run: Run) -> dict:
    """Where a run's jax programs ran, as its ``run.json`` records it.

    Read from ``provenance.backend`` (:func:`dreamer_parity.provenance.backend`, which both
    sides' runs record): ``platform`` (``jax.default_backend()``: ``cpu``, ``tpu``, ...)
    and ``precision`` (``jax_default_matmul_precision``; ``default`` when none was set).

    Returns:
      ``{"platform": str, "precision": str}``; :data:`UNKNOWN` for what the run does not
      record (a published run, a backend recorded with an error).
    """
    prov = (run.run_info or {}).get("provenance") or {}
    backend = prov.get("backend") if isinstance(prov, dict) else None
    if not isinstance(backend, dict) or not isinstance(backend.get("platform"), str):
        return {"platform": UNKNOWN, "precision": UNKNOWN}
    precision = backend.get("matmul_precision")
    return {"platform": backend["platform"],
            "precision": "default" if precision is None else str(precision)}

"""The published study's result files, mapped onto the analysis' run tables.

Layout of a published round directory (``data/published/round1`` for example)::

    ref_s<S>/evals.jsonl      reference: {"seed", "rows", "updates", "returns": [..],
                              "lengths": [..], "mean", "len_mean", "wall_s"} per line
    ref_s<S>/run_args.json    seed, rows, eval_every, eval_episodes, tiny, ...
    ref_s<S>/timing.json      t_end (written after the flush step), flush_episodes, ...
    ajax/s<S>/evals.jsonl     candidate side (the study's "ajax"): same fields,
                              "returns": null (only the mean was logged)
    ajax/config.json          run: {seeds, rows, log_every, eval_episodes, tiny, ...}
    launch_info.txt           "reference: <...> @ <commit>", "ajax: <...> @ <commit>; ..."

Published runs carry evaluations but no training episodes and no training-metric
windows: :class:`~dreamer_parity.analysis.load.Run` fields ``episodes`` and ``train``
are None and ``unavailable`` says why.

Every file here is read through the guarded reader (:mod:`dreamer_parity.records`:
regular files inside the repository, capped sizes, UTF-8, JSON errors naming
``file:line``, numbers bounded), after the round directory's ``MANIFEST.json`` was verified
(:func:`dreamer_parity.sides.locate`); evaluation returns, lengths and means are checked
against the environment's ranges (:mod:`dreamer_parity.environment`).

The numbers that the study published only in its Markdown reports (evaluation-curve and
training-metric window tables) are in ``tables.csv``: :mod:`.published_tables`.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from dreamer_parity import environment, records
from dreamer_parity.analysis.runs import AnalysisError, Run, display_path

__all__ = ["load_run", "load_run_dir", "read_evals", "read_launch_info", "EMPTY_SHA1"]

#: sha1 of the empty string: "uncommitted diff vs HEAD" of a clean tree.
EMPTY_SHA1 = "da39a3ee5e6b4b0d3255bfef95601890afd80709"

_NO_TRAIN = "published runs carry no training-metric windows"
_NO_EPISODES = "published runs carry no episodes.jsonl (training episodes)"


def read_evals(path) -> list[dict]:
    """Read a published ``evals.jsonl`` (:func:`dreamer_parity.records.read_lines`).

    Every line is an object with integer ``seed``, ``rows``, ``updates`` (0..2**53), a
    number ``mean`` and, when not null, ``returns`` (a non-empty list of numbers whose mean
    is ``mean``, :data:`dreamer_parity.records.MEAN_RTOL`) and ``lengths`` (integers, as
    many, their mean ``len_mean`` when present); every return and length a value the
    environment can produce, every mean within its list's [min, max] or, without a list,
    within the environment's range (:mod:`dreamer_parity.environment`); no NaN or
    Infinity anywhere; ``rows`` strictly increasing.

    Raises:
      records.RecordError: naming file and line (the one error type of the JSONL reader).
    """
    path = Path(path)
    name = display_path(path)
    out = []
    prev = None
    for i, obj in records.read_lines(path, name):
        where = f"{name}:{i}"
        for key, types in (("seed", int), ("rows", int), ("updates", int),
                           ("mean", (int, float))):
            v = obj.get(key)
            if isinstance(v, bool) or not isinstance(v, types):
                raise records.RecordError(f"{where}: field {key!r} missing or not a number")
        for key in ("seed", "rows", "updates"):
            if not 0 <= obj[key] <= records.MAX_INT:
                raise records.RecordError(
                    f"{where}: field {key!r} must lie in 0..2**53, got {obj[key]}")
        for mean_key, list_key, kind, env in (("mean", "returns", (int, float), "return"),
                                              ("len_mean", "lengths", int, "length")):
            values = obj.get(list_key)
            m = obj.get(mean_key)
            if values is None:
                if m is not None and mean_key == "len_mean" and (
                        isinstance(m, bool) or not isinstance(m, (int, float))):
                    raise records.RecordError(f"{where}: field {mean_key!r} not a number")
                problem = None if m is None else environment.mean_problem(env, m)
                if problem:
                    raise records.RecordError(f"{where}: field {mean_key!r} {problem}")
                continue
            if not isinstance(values, list) or not values:
                raise records.RecordError(
                    f"{where}: field {list_key!r} must be a non-empty list or null")
            bad = [v for v in values if isinstance(v, bool) or not isinstance(v, kind)]
            if bad:
                raise records.RecordError(
                    f"{where}: field {list_key!r} must hold numbers, got {bad[0]!r}")
            problem = environment.values_problem(env, values)   # before any sum of them
            if problem:
                raise records.RecordError(f"{where}: field {list_key!r} {problem}")
            if m is None and mean_key == "len_mean":
                continue
            if isinstance(m, bool) or not isinstance(m, (int, float)):
                raise records.RecordError(f"{where}: field {mean_key!r} missing or not a number")
            if not records.mean_matches(m, values):
                raise records.RecordError(
                    f"{where}: field {mean_key!r} {m!r} is not the mean of "
                    f"{list_key!r} ({sum(values) / len(values)!r})")
            problem = environment.mean_problem(env, m, values, records.MEAN_RTOL)
            if problem:
                raise records.RecordError(f"{where}: field {mean_key!r} {problem}")
        if obj.get("returns") is not None and obj.get("lengths") is not None and \
                len(obj["returns"]) != len(obj["lengths"]):
            raise records.RecordError(f"{where}: fields 'returns' and 'lengths' differ in length")
        if prev is not None and obj["rows"] <= prev:
            raise records.RecordError(
                f"{where}: field 'rows' out of order: {obj['rows']} after {prev}")
        prev = obj["rows"]
        out.append(obj)
    return out


def read_launch_info(path) -> dict:
    """Parse ``launch_info.txt``: ``{"reference": {commit, dirty}, "candidate": {...}}``.

    The candidate is clean when its "uncommitted diff vs HEAD sha1" is the empty-string
    sha1; the reference's dirty flag is not recorded there (None).  Missing file: {}.

    Raises:
      records.RecordError: the guarded reader's refusals (not a regular file, over the
        cap, not UTF-8 with its line and byte), naming the file.
    """
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return {}
    out = {}
    for line in _optional_text(path).splitlines():
        m = re.match(r"^(reference|ajax):\s.*@\s*([0-9a-f]{7,40})(.*)$", line.strip())
        if not m:
            continue
        dirty = None
        d = re.search(r"sha1:\s*([0-9a-f]{40})", m.group(3))
        if d:
            dirty = d.group(1) != EMPTY_SHA1
        out["reference" if m.group(1) == "reference" else "candidate"] = {
            "commit": m.group(2), "dirty": dirty}
    return out


def _present(path: Path) -> bool:
    """Whether a name is there at all (a dangling link or a directory included: the
    guarded reader then says what it is)."""
    return path.exists() or path.is_symlink()


def _optional_text(path: Path) -> str:
    """An auxiliary text file through the guarded reader (a dangling link is missing).

    Raises:
      records.RecordError: naming the file: missing, not a regular file, over the cap,
        not UTF-8 (with its line and byte).
    """
    try:
        return records.read_text(path, display_path(path))
    except FileNotFoundError:
        raise records.RecordError(f"{display_path(path)}: missing") from None


def _optional_json(path: Path) -> dict | None:
    """An auxiliary JSON object file through the guarded reader, None when absent.

    Raises:
      records.RecordError: naming the file (and line): not a regular file, over the cap,
        not UTF-8, invalid JSON, a number not finite or out of bounds, not an object.
    """
    if not _present(path):
        return None
    return records.read_json(path, display_path(path))


def load_run(directory, side: str, seed: int) -> Run:
    """Load seed ``seed`` of ``side`` from a published directory (``ref_s<S>/``,
    ``ajax/s<S>/``, or ``s<S>/`` of an ``ajax`` directory; :func:`dreamer_parity.sides.locate`).

    Raises:
      sides.SideError: the directory holds no published run of that seed;
      records.RecordError / AnalysisError: see :func:`load_run_dir`.
    """
    from dreamer_parity import sides

    run_dir, layout, made_by = sides.locate(Path(directory), side, seed, f"{side} directory")
    if layout != "published":
        raise AnalysisError(f"{display_path(run_dir)}: not the published layout")
    return load_run_dir(run_dir, side, seed, made_by)


def load_run_dir(run_dir, side: str, seed: int, made_by: str) -> Run:
    """Load one published run directory as a :class:`Run` (``source="published"``).

    Args:
      run_dir: ``<round>/ref_s<S>`` (made by the reference) or ``<round>/ajax/s<S>``
        (made by the study's candidate).
      side: the side the run stands on (``"reference"`` or ``"candidate"``).
      seed: the run seed.
      made_by: ``"reference"`` or ``"candidate"`` (:func:`dreamer_parity.sides.locate`).

    Raises:
      records.RecordError: the run's ``evals.jsonl`` is missing or malformed, or an
        auxiliary file (``timing.json``, ``run_args.json``, ``config.json``,
        ``launch_info.txt``, ``PATCH.txt``) is refused by the guarded reader or is not
        of its shape, naming the file (and line);
      AnalysisError: its seed field disagrees with the directory.
    """
    run_dir = Path(run_dir)
    round_dir = run_dir.parent if made_by == "reference" else run_dir.parent.parent
    evals_path = run_dir / "evals.jsonl"
    rows = read_evals(evals_path)
    for i, o in enumerate(rows, 1):
        if o["seed"] != seed:
            raise AnalysisError(f"{display_path(evals_path)}:{i}: seed {o['seed']}, expected {seed}")
    evals = pd.DataFrame({
        "rows": np.array([o["rows"] for o in rows], dtype=np.int64),
        "updates": np.array([o["updates"] for o in rows], dtype=np.int64),
        "eval_mean": np.array([float(o["mean"]) for o in rows], dtype=np.float64),
        "n_episodes": np.array([np.nan if o.get("returns") is None else len(o["returns"])
                                for o in rows], dtype=np.float64),
        "status": ["ok"] * len(rows),
    })
    timing = None
    args: dict = {}
    if made_by == "reference":
        timing = _optional_json(run_dir / "timing.json")
        a = _optional_json(run_dir / "run_args.json")
        if a is not None:
            args = {k: a[k] for k in ("seed", "rows", "eval_every", "eval_episodes") if k in a}
            if "tiny" in a:
                args["profile"] = "smoke" if a["tiny"] else "full"
    else:
        timing = _optional_json(run_dir.parent / "timing.json")
        cpath = run_dir.parent / "config.json"
        c = _optional_json(cpath)
        if c is not None:
            r = c.get("run", {})
            if not isinstance(r, dict) or not isinstance(r.get("seeds", []), list):
                raise records.RecordError(f"{display_path(cpath)}: field 'run' must be an "
                                          f"object whose 'seeds' is a list")
            if seed in r.get("seeds", []):
                args["seed"] = seed
            for ours, theirs in (("rows", "rows"), ("eval_every", "log_every"),
                                 ("eval_episodes", "eval_episodes")):
                if theirs in r:
                    args[ours] = r[theirs]
            if "tiny" in r:
                args["profile"] = "smoke" if r["tiny"] else "full"
    patch = run_dir / "PATCH.txt"
    if not _present(patch):
        patch = run_dir.parent / "PATCH.txt"
    launch = read_launch_info(round_dir / "launch_info.txt")
    prov = {}
    if made_by in launch:
        prov["reference" if made_by == "reference" else "repo"] = launch[made_by]
    run_info = {"args": args, "config": {}, "provenance": prov,
                "patch": _optional_text(patch).strip() if _present(patch) else None}
    return Run(side=side, seed=seed, source="published", label=display_path(run_dir),
               status="ok", reason=None, failed_row=None, evals=evals,
               eval_returns=[o.get("returns") for o in rows], train=None, episodes=None,
               run_info=run_info, timing=timing,
               unavailable={"train": _NO_TRAIN, "episodes": _NO_EPISODES}, made_by=made_by)

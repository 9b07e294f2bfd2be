"""The published study's result files, mapped onto the analysis' run tables.

Layout of a published round directory (``shared/published/round1`` for example)::

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

:func:`parse_curve_table` reads the "Evaluation curve" table of a published
``compare.md`` (used by the tests that reproduce the study's numbers).
:func:`parse_window_range` reads one cell ``mean [min, max]`` of its training-metric
window tables: the reference's seed range of a metric is published only there (the
learning check reads the actor entropy of the window ending at 4000 rows).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from dreamer_parity.analysis.load import AnalysisError, Run, display_path

__all__ = ["load_run", "read_evals", "read_launch_info", "parse_curve_table",
           "parse_window_range", "EMPTY_SHA1"]

#: sha1 of the empty string: "uncommitted diff vs HEAD" of a clean tree.
EMPTY_SHA1 = "da39a3ee5e6b4b0d3255bfef95601890afd80709"

_NO_TRAIN = "published runs carry no training-metric windows"
_NO_EPISODES = "published runs carry no episodes.jsonl (training episodes)"


def read_evals(path) -> list[dict]:
    """Read a published ``evals.jsonl``; AnalysisError names file and line when malformed.

    Every line is an object with integer ``seed``, ``rows``, ``updates`` (0..2**53), a
    number ``mean`` and, when not null, ``returns`` (a non-empty list of numbers whose mean
    is ``mean``, :data:`dreamer_parity.records.MEAN_RTOL`) and ``lengths`` (integers, as
    many, their mean ``len_mean`` when present); no NaN or Infinity anywhere; ``rows``
    strictly increasing.
    """
    from dreamer_parity import records

    path = Path(path)
    name = display_path(path)
    if not path.exists():
        raise AnalysisError(f"{name}: missing")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise AnalysisError(f"{name}:{line}: not UTF-8 text") from None
    if text and not text.endswith("\n"):
        raise AnalysisError(f"{name}:{text.count(chr(10)) + 1}: truncated line")
    out = []
    prev = None
    for i, line in enumerate(text.splitlines(), 1):
        where = f"{name}:{i}"
        try:
            obj = records.loads_finite(line)
        except ValueError as e:
            raise AnalysisError(f"{where}: invalid JSON or non-finite number ({e})") from None
        if not isinstance(obj, dict):
            raise AnalysisError(f"{where}: expected a JSON object")
        for key, types in (("seed", int), ("rows", int), ("updates", int),
                           ("mean", (int, float))):
            v = obj.get(key)
            if isinstance(v, bool) or not isinstance(v, types):
                raise AnalysisError(f"{where}: field {key!r} missing or not a number")
        for key in ("seed", "rows", "updates"):
            if not 0 <= obj[key] <= records.MAX_INT:
                raise AnalysisError(f"{where}: field {key!r} must lie in 0..2**53, got {obj[key]}")
        for mean_key, list_key, kind in (("mean", "returns", (int, float)),
                                         ("len_mean", "lengths", int)):
            values = obj.get(list_key)
            if values is None:
                continue
            if not isinstance(values, list) or not values:
                raise AnalysisError(f"{where}: field {list_key!r} must be a non-empty list or null")
            bad = [v for v in values if isinstance(v, bool) or not isinstance(v, kind)]
            if bad:
                raise AnalysisError(f"{where}: field {list_key!r} must hold numbers, got {bad[0]!r}")
            m = obj.get(mean_key)
            if m is None and mean_key == "len_mean":
                continue
            if isinstance(m, bool) or not isinstance(m, (int, float)):
                raise AnalysisError(f"{where}: field {mean_key!r} missing or not a number")
            if not records.mean_matches(m, values):
                raise AnalysisError(f"{where}: field {mean_key!r} {m!r} is not the mean of "
                                    f"{list_key!r} ({sum(values) / len(values)!r})")
        if obj.get("returns") is not None and obj.get("lengths") is not None and \
                len(obj["returns"]) != len(obj["lengths"]):
            raise AnalysisError(f"{where}: fields 'returns' and 'lengths' differ in length")
        if prev is not None and obj["rows"] <= prev:
            raise AnalysisError(f"{where}: field 'rows' out of order: {obj['rows']} after {prev}")
        prev = obj["rows"]
        out.append(obj)
    return out


def read_launch_info(path) -> dict:
    """Parse ``launch_info.txt``: ``{"reference": {commit, dirty}, "candidate": {...}}``.

    The candidate is clean when its "uncommitted diff vs HEAD sha1" is the empty-string
    sha1; the reference's dirty flag is not recorded there (None).  Missing file: {}.
    """
    path = Path(path)
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
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


def _layout_dirs(directory: Path, side: str, seed: int) -> tuple[Path, Path]:
    """(run directory, round directory) of one published run."""
    if side == "reference":
        return directory / f"ref_s{seed}", directory
    if (directory / "ajax").is_dir():
        return directory / "ajax" / f"s{seed}", directory
    return directory / f"s{seed}", directory.parent


def load_run(directory, side: str, seed: int) -> Run:
    """Load one published run as a :class:`Run` (``source="published"``).

    Args:
      directory: the published round directory (``ref_s<S>/``, ``ajax/``), or for the
        candidate the ``ajax`` directory itself.
      side: ``"reference"`` or ``"candidate"`` (``ajax`` maps to candidate).
      seed: the run seed.

    Raises:
      AnalysisError: the run's ``evals.jsonl`` is missing or malformed, or its seed
      field disagrees with the directory.
    """
    directory = Path(directory)
    run_dir, round_dir = _layout_dirs(directory, side, seed)
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
    if side == "reference":
        tpath = run_dir / "timing.json"
        timing = json.loads(tpath.read_text()) if tpath.exists() else None
        apath = run_dir / "run_args.json"
        if apath.exists():
            a = json.loads(apath.read_text())
            args = {k: a[k] for k in ("seed", "rows", "eval_every", "eval_episodes") if k in a}
            if "tiny" in a:
                args["profile"] = "smoke" if a["tiny"] else "full"
    else:
        cpath = (run_dir.parent / "config.json")
        tpath = run_dir.parent / "timing.json"
        timing = json.loads(tpath.read_text()) if tpath.exists() else None
        if cpath.exists():
            r = json.loads(cpath.read_text()).get("run", {})
            if seed in r.get("seeds", []):
                args["seed"] = seed
            for ours, theirs in (("rows", "rows"), ("eval_every", "log_every"),
                                 ("eval_episodes", "eval_episodes")):
                if theirs in r:
                    args[ours] = r[theirs]
            if "tiny" in r:
                args["profile"] = "smoke" if r["tiny"] else "full"
    patch = run_dir / "PATCH.txt"
    if not patch.exists():
        patch = run_dir.parent / "PATCH.txt"
    launch = read_launch_info(round_dir / "launch_info.txt")
    prov = {}
    if side in launch:
        prov["reference" if side == "reference" else "repo"] = launch[side]
    run_info = {"args": args, "config": {}, "provenance": prov,
                "patch": patch.read_text().strip() if patch.exists() else None}
    return Run(side=side, seed=seed, source="published", label=display_path(run_dir),
               status="ok", reason=None, failed_row=None, evals=evals,
               eval_returns=[o.get("returns") for o in rows], train=None, episodes=None,
               run_info=run_info, timing=timing,
               unavailable={"train": _NO_TRAIN, "episodes": _NO_EPISODES})


def parse_curve_table(compare_md, heading: str = "## Evaluation curve") -> pd.DataFrame:
    """Parse a published ``compare.md`` curve table into a DataFrame indexed by rows.

    Columns are the table's headers (``ref s0``, ..., ``ref mean``, ``ajax s0``, ...),
    values float64 as printed (one decimal).  Raises AnalysisError when absent.
    """
    lines = Path(compare_md).read_text().splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    except StopIteration:
        raise AnalysisError(f"{display_path(compare_md)}: no section {heading!r}") from None
    table = []
    for line in lines[start + 1:]:
        if line.startswith("#"):
            break
        if line.startswith("|"):
            table.append([c.strip() for c in line.strip().strip("|").split("|")])
    header, body = table[0], [r for r in table[2:]]
    df = pd.DataFrame([[float(c) for c in r[1:]] for r in body], columns=header[1:],
                      index=pd.Index([int(r[0]) for r in body], name=header[0]))
    return df


_RANGE_CELL = re.compile(r"^(?P<mean>\S+)\s*\[\s*(?P<lo>[^,\s]+)\s*,\s*(?P<hi>[^\]\s]+)\s*\]$")


def parse_window_range(compare_md, rows: int, metric: str,
                       column: str = "ref mean [min, max]") -> dict:
    """One cell ``mean [min, max]`` of a published ``compare.md`` window table.

    The table is the one under the heading ``### window ending at <rows> rows`` (section
    "Training metrics, window means"), the row is the one whose first cell is ``metric``
    (the study's metric name, e.g. ``ent/action/mean``), the column the one headed
    ``column``; for example ``| ent/action/mean | 0.4591 [0.4481, 0.4765] | ...``.

    Args:
      compare_md: path of the published ``compare.md``.
      rows: the row count the window ends at (int, rows over all 16 envs).
      metric: the metric's name in the table's first column.
      column: the header of the column to read (default: the reference side).

    Returns:
      ``{"mean", "lo", "hi"}`` (float, as printed: 4 decimals; the range is [min, max]
      over the study's seeds) and ``"line"`` (int, 1-based line of the cell).

    Raises:
      AnalysisError: the file, the section, the column or the row is missing, or the
      cell is not ``mean [min, max]`` with finite numbers and min <= max; the message
      names the file and, where there is one, the line.
    """
    path = Path(compare_md)
    name = display_path(path)
    if not path.exists():
        raise AnalysisError(f"{name}: missing")
    lines = path.read_text().splitlines()
    heading = f"### window ending at {int(rows)} rows"
    start = next((i for i, line in enumerate(lines) if line.strip() == heading), None)
    if start is None:
        raise AnalysisError(f"{name}: no section {heading!r}")
    header = None
    for i in range(start + 1, len(lines)):
        line = lines[i].strip()
        if line.startswith("#"):
            break
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if header is None:
            header = cells
            if column not in header:
                raise AnalysisError(f"{name}:{i + 1}: section {heading!r} has no column {column!r}")
            continue
        if cells[0] != metric:
            continue
        j = header.index(column)
        cell = cells[j] if j < len(cells) else ""
        m = _RANGE_CELL.match(cell)
        try:
            vals = {k: float(m.group(k)) for k in ("mean", "lo", "hi")} if m else None
        except ValueError:
            vals = None
        if vals is None or not all(np.isfinite(v) for v in vals.values()) or vals["lo"] > vals["hi"]:
            raise AnalysisError(f"{name}:{i + 1}: {metric} {column!r}: expected 'mean [min, max]' "
                                f"with finite numbers, got {cell!r}")
        return {**vals, "line": i + 1}
    where = f"{name}:{start + 1}"
    if header is None:
        raise AnalysisError(f"{where}: section {heading!r} holds no table")
    raise AnalysisError(f"{where}: section {heading!r} has no row {metric!r}")

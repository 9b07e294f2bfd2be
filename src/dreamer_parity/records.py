"""The files both sides write for one run of one seed, their writers and readers.

Standard library only: the reference's virtual environment imports this module.

Layout: ``results/<round>/<side>/s<seed>/`` holding

``records.jsonl``
    One JSON object per evaluation point, in increasing ``rows``:

    ========================  =============================================================
    ``side``                  ``"reference"`` or ``"candidate"``
    ``seed``                  run seed (int)
    ``rows``                  rows so far over all 16 envs (int; 16 per vector step)
    ``updates``               train updates so far (int; :mod:`dreamer_parity.schedule`)
    ``eval_returns``          list of floats: undiscounted return of each evaluation
                              episode (CartPole: steps survived, at most 500)
    ``eval_lengths``          list of ints: steps of each evaluation episode
    ``eval_mean``             mean of ``eval_returns`` (float)
    ``eval_len_mean``         mean of ``eval_lengths`` (float)
    ``train``                 ``{name: float | null}``: mean of each training metric over
                              the updates since the previous record, under the reference's
                              metric names (``vector_loss``, ``ent/action/mean`` ...);
                              NaN values are skipped as the reference's ``Agg`` does, and
                              a window without a finite value is ``null``
    ``train_counts``          ``{name: int}``: finite values averaged per metric
    ``retnorm``               ``{"lo", "hi", "scale"}`` of the return normaliser after the
                              last update (return units), or null before any update
    ``status``                ``"ok"``, or ``"failed"`` when the seed failed a finiteness
                              check at this point (its later points are absent)
    ========================  =============================================================

``episodes.jsonl``
    One object per finished training episode: ``seed``, ``worker`` (env index),
    ``row_last`` (0-based per-env row of the ``is_last`` row), ``length`` (steps),
    ``score`` (sum of rewards), ``terminal`` (bool: ended by termination).

``run.json``
    ``side``, ``seed``, ``config`` (the resolved configuration the run used), ``args``
    (the runner's arguments), ``provenance`` (:mod:`dreamer_parity.provenance`).

``timing.json``
    Wall-clock figures in seconds (build/compile, first update row, seconds per update,
    total).  Kept apart from the records so two runs' records compare for equality.

``DONE.json``
    The completion marker, written last: ``{"status": "ok"}`` or
    ``{"status": "failed", "reason": "..."}``.  A directory without it is an unfinished
    run and every reader refuses it.

All writers are atomic: they write ``<name>.tmp-<pid>`` and rename it.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

__all__ = [
    "RecordError", "RECORD_FIELDS", "EPISODE_FIELDS", "SIDES", "run_dir",
    "write_json", "write_jsonl", "read_json", "read_records", "read_episodes",
    "read_done", "write_done", "read_run", "clean_json", "DONE",
]

SIDES = ("reference", "candidate")
DONE = "DONE.json"

#: field -> accepted Python types (None means JSON null is accepted)
RECORD_FIELDS = {
    "side": (str,),
    "seed": (int,),
    "rows": (int,),
    "updates": (int,),
    "eval_returns": (list,),
    "eval_lengths": (list,),
    "eval_mean": (float, int),
    "eval_len_mean": (float, int),
    "train": (dict,),
    "train_counts": (dict,),
    "retnorm": (dict, type(None)),
    "status": (str,),
}

EPISODE_FIELDS = {
    "seed": (int,),
    "worker": (int,),
    "row_last": (int,),
    "length": (int,),
    "score": (float, int),
    "terminal": (bool,),
}


class RecordError(ValueError):
    """A run's file is missing, truncated or malformed; the message names file and line."""


def run_dir(root: str | os.PathLike, side: str, seed: int) -> Path:
    """``<root>/<side>/s<seed>`` (raises ValueError for an unknown side)."""
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}, got {side!r}")
    return Path(root) / side / f"s{int(seed)}"


def clean_json(x):
    """Replace non-finite floats by None recursively (JSON has no NaN/Infinity)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: clean_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean_json(v) for v in x]
    if hasattr(x, "item") and callable(x.item) and getattr(x, "shape", None) == ():
        return clean_json(x.item())
    return x


def _atomic_write(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json(path, obj) -> None:
    """Atomically write one JSON object (non-finite floats become null)."""
    _atomic_write(Path(path), json.dumps(clean_json(obj), indent=1, sort_keys=True,
                                         allow_nan=False) + "\n")


def write_jsonl(path, rows) -> None:
    """Atomically write a list of JSON objects, one per line."""
    lines = [json.dumps(clean_json(r), sort_keys=True, allow_nan=False) for r in rows]
    _atomic_write(Path(path), "".join(line + "\n" for line in lines))


def write_done(directory, status: str = "ok", reason: str | None = None) -> None:
    """Write the completion marker last (``status`` ``ok`` or ``failed``)."""
    if status not in ("ok", "failed"):
        raise ValueError(f"status must be 'ok' or 'failed', got {status!r}")
    obj = {"status": status}
    if reason is not None:
        obj["reason"] = str(reason)
    write_json(Path(directory) / DONE, obj)


def read_json(path) -> dict:
    """Read one JSON object; RecordError names the file on a parse error."""
    path = Path(path)
    if not path.exists():
        raise RecordError(f"{path}: missing")
    try:
        obj = json.loads(path.read_text())
    except ValueError as e:
        raise RecordError(f"{path}: invalid JSON ({e})") from None
    if not isinstance(obj, dict):
        raise RecordError(f"{path}: expected a JSON object")
    return obj


def read_done(directory) -> dict:
    """Return the completion marker of a run directory.

    Raises:
      RecordError: no marker (an unfinished or killed run), or a malformed one.
    """
    path = Path(directory) / DONE
    if not path.exists():
        raise RecordError(f"{path}: missing completion marker: the run did not finish")
    obj = read_json(path)
    if obj.get("status") not in ("ok", "failed"):
        raise RecordError(f"{path}: status must be 'ok' or 'failed', got {obj.get('status')!r}")
    return obj


def _check_types(path, lineno, obj, fields):
    for name, types in fields.items():
        if name not in obj:
            raise RecordError(f"{path}:{lineno}: missing field {name!r}")
        v = obj[name]
        if isinstance(v, bool) and bool not in types:
            raise RecordError(f"{path}:{lineno}: field {name!r} has type bool")
        if not isinstance(v, types):
            names = "/".join("null" if t is type(None) else t.__name__ for t in types)
            raise RecordError(
                f"{path}:{lineno}: field {name!r} should be {names}, got {type(v).__name__}")


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_record_values(path, lineno, obj):
    """Element types of the list and dict fields, and the status value."""
    if obj["status"] not in ("ok", "failed"):
        raise RecordError(f"{path}:{lineno}: field 'status' must be 'ok' or 'failed', "
                          f"got {obj['status']!r}")
    for name, ok, what in (("eval_returns", _is_number, "numbers"),
                           ("eval_lengths", lambda v: isinstance(v, int)
                            and not isinstance(v, bool), "integers")):
        bad = [v for v in obj[name] if not ok(v)]
        if bad:
            raise RecordError(f"{path}:{lineno}: field {name!r} must hold {what}, got {bad[0]!r}")
    for name, ok, what in (("train", lambda v: v is None or _is_number(v), "numbers or null"),
                           ("train_counts", lambda v: isinstance(v, int)
                            and not isinstance(v, bool), "integers")):
        bad = [k for k, v in obj[name].items() if not ok(v)]
        if bad:
            raise RecordError(f"{path}:{lineno}: field '{name}.{bad[0]}' must be {what}, "
                              f"got {obj[name][bad[0]]!r}")


def _read_lines(path):
    path = Path(path)
    if not path.exists():
        raise RecordError(f"{path}: missing")
    text = path.read_text()
    if text and not text.endswith("\n"):
        n = text.count("\n") + 1
        raise RecordError(f"{path}:{n}: truncated line (no final newline)")
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            raise RecordError(f"{path}:{i}: empty line")
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise RecordError(f"{path}:{i}: truncated or invalid JSON ({e})") from None
        if not isinstance(obj, dict):
            raise RecordError(f"{path}:{i}: expected a JSON object")
        out.append((i, obj))
    return out


def read_records(directory, require_done: bool = True) -> list[dict]:
    """Read and validate ``records.jsonl`` of a run directory.

    Checks every field's presence and type (list and dict elements included), the
    status value, rows strictly increasing, equal-length return and length lists, and
    (by default) the completion marker, which is read first.

    Raises:
      RecordError: naming the file, the line and the field.
    """
    directory = Path(directory)
    if require_done:
        read_done(directory)
    path = directory / "records.jsonl"
    recs = []
    prev = None
    for i, obj in _read_lines(path):
        _check_types(path, i, obj, RECORD_FIELDS)
        _check_record_values(path, i, obj)
        if obj["side"] not in SIDES:
            raise RecordError(f"{path}:{i}: field 'side' must be one of {SIDES}")
        if len(obj["eval_returns"]) != len(obj["eval_lengths"]):
            raise RecordError(f"{path}:{i}: eval_returns and eval_lengths differ in length")
        if prev is not None and obj["rows"] <= prev:
            raise RecordError(f"{path}:{i}: field 'rows' out of order: {obj['rows']} "
                                  f"after {prev}")
        prev = obj["rows"]
        recs.append(obj)
    return recs


def read_episodes(directory, require_done: bool = True) -> list[dict]:
    """Read and validate ``episodes.jsonl`` (RecordError naming file, line, field)."""
    directory = Path(directory)
    if require_done:
        read_done(directory)
    path = directory / "episodes.jsonl"
    eps = []
    for i, obj in _read_lines(path):
        _check_types(path, i, obj, EPISODE_FIELDS)
        eps.append(obj)
    return eps


def read_run(directory) -> dict:
    """Read a finished run: ``{"done", "run", "records", "episodes", "timing"}``.

    ``timing`` is None when absent.  Raises RecordError as the single readers.
    """
    directory = Path(directory)
    done = read_done(directory)
    timing_path = directory / "timing.json"
    return {
        "done": done,
        "run": read_json(directory / "run.json"),
        "records": read_records(directory, require_done=False),
        "episodes": read_episodes(directory, require_done=False),
        "timing": read_json(timing_path) if timing_path.exists() else None,
    }

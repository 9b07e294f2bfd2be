"""The update schedule shared by both sides' runners and checks.

Standard library only: the reference's virtual environment imports this module.

The reference trains from a per-transition callback (``embodied/run/train.py:81-92``
at 29eb964): nothing happens until the replay holds ``batch_size`` items, then
``embodied.when.Ratio(train_ratio / (batch_size * (batch_length - context)))``
(``embodied/core/when.py:26-42``) decides how many updates each transition triggers.
An item is a window start; a worker inserts its first item when it holds
``batch_length`` rows (``embodied/replay/replay.py:130-138``).  With 16 envs and windows
of 65 rows the gate opens at transition 1040 and, for ratio 1/2,

    updates(N) = 1 + floor((N - 1040) / 2)          (N >= 1040; 0 before)

:func:`updates_at` reproduces the reference's float arithmetic step by step, so it is
right for any ratio; :func:`updates_closed_form` is the closed form, valid when
``1 / ratio`` is exactly representable (tests check both agree there).
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Schedule", "updates_at", "updates_closed_form", "gate_row", "per_vector_step",
           "format_duration"]


@dataclass(frozen=True)
class Schedule:
    """Replay and ratio settings that determine the number of updates.

    Attributes:
      num_envs: environments stepped per vector step (16 in the protocol).
      batch_size: windows per batch (16).
      batch_length: rows per window including the context rows (65).
      context: replay context rows per window (1).
      train_ratio: replayed trained rows per environment row (512.0).
    """

    num_envs: int = 16
    batch_size: int = 16
    batch_length: int = 65
    context: int = 1
    train_ratio: float = 512.0

    @property
    def ratio(self) -> float:
        """Updates per transition: ``train_ratio / (batch_size * (batch_length - context))``."""
        return self.train_ratio / (self.batch_size * (self.batch_length - self.context))


@functools.lru_cache(maxsize=64)
def gate_row(s: Schedule = Schedule()) -> int:
    """Return the transition count (1-based) at which the first update runs.

    Items appear per worker once it holds ``batch_length`` rows; transitions are
    counted over all envs, worker ``w`` of vector step ``v`` (both 0-based) being
    transition ``v * num_envs + w + 1``.  The gate opens at the transition that makes
    the item count reach ``batch_size``.  Returns an int (1040 for the protocol).
    """
    items = 0
    v = 0
    while True:
        for w in range(s.num_envs):
            if v + 1 >= s.batch_length:
                items += 1
            if items >= s.batch_size:
                return v * s.num_envs + w + 1
        v += 1


def updates_at(rows, s: Schedule = Schedule()) -> list[int] | int:
    """Cumulative number of updates after ``rows`` transitions, as the reference counts.

    Args:
      rows: an integer (Python or numpy) or an iterable of them (transitions over all
        envs, e.g. 1200).
      s: the schedule settings.

    Returns:
      An int for an int argument, else a list of ints in the argument's order.

    Raises:
      ValueError: a negative or non-integer row count (bools and floats included).

    Source: ``embodied/core/when.py:26-42`` (``Ratio``), ``embodied/run/train.py:81-92``;
    the float steps ``repeats = int((step - prev) * ratio); prev += repeats / ratio``
    are repeated literally.
    """
    single = not isinstance(rows, Iterable)
    wanted = [rows] if single else list(rows)
    for r in wanted:
        if isinstance(r, bool) or not isinstance(r, numbers.Integral) or r < 0:
            raise ValueError(f"rows must be non-negative integers, got {r!r}")
    wanted = [int(r) for r in wanted]
    if not wanted:
        return []
    top = max(wanted)
    gate = gate_row(s)
    ratio = s.ratio
    counts = {}
    total = 0
    prev = None
    targets = set(wanted)
    for step in range(0, top + 1):
        if step >= gate and step > 0:
            if ratio == 0:
                rep = 0
            elif prev is None:
                prev = step
                rep = 1
            else:
                rep = int((step - prev) * ratio)
                prev += rep / ratio
            total += rep
        if step in targets:
            counts[step] = total
    out = [counts[r] for r in wanted]
    return out[0] if single else out


def updates_closed_form(rows: int, s: Schedule = Schedule()) -> int:
    """Closed form ``1 + floor((rows - gate) * ratio)`` (0 before the gate).

    Exact when ``1 / ratio`` is representable (protocol ratio 1/2): 81 at 1200,
    481 at 2000, 9481 at 20000, 11481 at 24000.  Otherwise it may run one update ahead
    of the reference at isolated rows: for ``train_ratio`` 500 (``1 / ratio`` = 2.048)
    at 42 of the rows up to 24000, the first 1296 (126 against 125); for ratio 1/3 it
    agrees everywhere up to 24000 (tests/test_schedule.py).  Use :func:`updates_at`.
    Raises ValueError for negative rows.
    """
    if rows < 0:
        raise ValueError(f"rows must be non-negative, got {rows}")
    gate = gate_row(s)
    if rows < gate:
        return 0
    return 1 + math.floor((rows - gate) * s.ratio)


def per_vector_step(num_vector_steps: int, s: Schedule = Schedule()) -> list[int]:
    """Updates that run after each vector step (list of ``num_vector_steps`` ints).

    Entry ``v`` is ``updates_at((v + 1) * num_envs) - updates_at(v * num_envs)``: the
    candidate runs them after the vector step's rows are added (deviation D3: the
    reference may interleave them between the envs of one vector step).
    """
    marks = updates_at([v * s.num_envs for v in range(num_vector_steps + 1)], s)
    return [b - a for a, b in zip(marks[:-1], marks[1:])]


def format_duration(seconds: float) -> str:
    """A duration for progress lines: ``1h02m03s`` from an hour up, else ``4m05s``;
    ``?`` when not finite (an ETA before the first measured rate).  The one time formatter
    of both runners."""
    if not math.isfinite(seconds):
        return "?"
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s" if s >= 3600 else \
        f"{s // 60}m{s % 60:02d}s"

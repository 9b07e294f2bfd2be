"""Update schedule: protocol values, and the float arithmetic of the reference's Ratio.

The independent simulation below is written from the semantics of the reference at
29eb964 (not copied): ``embodied/core/when.py`` ``Ratio.__call__`` (first call returns 1
and remembers the step; later calls return ``int((step - prev) * ratio)`` and advance
``prev`` by ``repeats / ratio``), called per transition from ``embodied/run/train.py``
``train_step`` once the replay holds ``batch_size`` items; the replay inserts one item
per row of a worker from that worker's ``batch_length``-th row on
(``embodied/replay/replay.py`` ``add``); the driver runs the callbacks worker by worker.
"""

import math

import pytest

from dreamer_parity.schedule import (
    Schedule, gate_row, per_vector_step, updates_at, updates_closed_form)


class LiteralRatio:
    """Updates per call, with the reference's float state (Python floats)."""

    def __init__(self, ratio):
        self.ratio = ratio
        self.prev = None

    def __call__(self, step):
        step = int(step)
        if self.ratio == 0:
            return 0
        if self.prev is None:
            self.prev = step
            return 1
        repeats = int((step - self.prev) * self.ratio)
        self.prev += repeats / self.ratio
        return repeats


def literal_counts(s: Schedule, rows: int) -> list[int]:
    """Cumulative updates after each transition 0..rows, driver order, per transition."""
    should_train = LiteralRatio(s.train_ratio / (s.batch_size * (s.batch_length - s.context)))
    stream = [0] * s.num_envs
    items = step = total = 0
    out = [0]
    while step < rows:
        for w in range(s.num_envs):
            step += 1                                  # step.increment() callback
            stream[w] += 1                             # replay.add callback
            if stream[w] >= s.batch_length:
                items += 1
            if items >= s.batch_size:                  # train_step callback (train_fill 0)
                total += should_train(step)
            out.append(total)
            if step == rows:
                break
    return out


PROTOCOL = Schedule()


def test_protocol_schedule():
    assert PROTOCOL.ratio == 0.5
    assert gate_row() == 1040
    assert updates_at(1200) == 81
    assert updates_at(2000) == 481
    assert updates_at(20000) == 9481
    assert updates_at(24000) == 11481


def test_gate():
    assert updates_at([0, 16, 1024, 1039, 1040, 1041, 1042, 1043, 1044]) == \
        [0, 0, 0, 0, 1, 1, 2, 2, 3]


def test_closed_form_equals_float_simulation_for_ratio_one_half():
    rows = list(range(0, 24001))
    sim = updates_at(rows)
    assert sim == [updates_closed_form(r) for r in rows]
    assert sim == literal_counts(PROTOCOL, 24000)


def test_per_vector_step():
    per = per_vector_step(1250)
    assert len(per) == 1250 and sum(per) == 9481
    assert per[:64] == [0] * 64
    assert per[64] == 1                      # rows 1025..1040: only the gate transition
    assert set(per[65:]) == {8}              # 16 transitions at ratio 1/2


@pytest.mark.parametrize("train_ratio", [500.0, 1024 / 3, 100.0, 19.2, 512.0, 0.0])
def test_updates_at_reproduces_the_literal_ratio(train_ratio):
    s = Schedule(train_ratio=train_ratio)
    assert updates_at(list(range(0, 24001)), s) == literal_counts(s, 24000)


def test_where_the_closed_form_differs_for_train_ratio_500():
    """ratio 500/1024: 1/ratio = 2.048 is not a float; the float ``prev`` lags the exact one.

    At row 1296 the exact count is 1 + floor(256 * 0.48828125) = 1 + 125 = 126, but the
    reference's accumulated ``prev`` sits just above the exact value, so it runs 125
    until the next transition: the closed form is one update ahead at isolated rows.
    """
    s = Schedule(train_ratio=500.0)
    assert s.ratio == 500 / 1024 and 1 / s.ratio == 2.048
    rows = list(range(0, 24001))
    sim = updates_at(rows, s)
    closed = [updates_closed_form(r, s) for r in rows]
    diff = [r for r in rows if sim[r] != closed[r]]
    assert diff[:4] == [1296, 1552, 1808, 10256]
    assert len(diff) == 42
    assert (sim[1296], closed[1296]) == (125, 126)
    assert all(closed[r] - sim[r] == 1 for r in diff)
    assert sim[1297] == closed[1297] == 126
    assert sim[20000] == closed[20000] == 9258


def test_closed_form_holds_for_ratio_one_third():
    """1/3 is not a float either, yet here the float steps never fall behind."""
    s = Schedule(train_ratio=1024 / 3)
    rows = list(range(0, 24001))
    assert updates_at(rows, s) == [updates_closed_form(r, s) for r in rows]
    assert updates_at(20000, s) == 1 + math.floor((20000 - 1040) / 3) == 6321


def test_zero_ratio_never_trains():
    assert updates_at(24000, Schedule(train_ratio=0.0)) == 0


def test_gate_follows_the_replay_settings():
    assert gate_row(Schedule(num_envs=4, batch_size=8, batch_length=12)) == 4 * 11 + 4 + 4
    assert gate_row(Schedule(num_envs=16, batch_size=32, batch_length=65)) == 64 * 16 + 16 + 16


def test_list_argument_keeps_order():
    assert updates_at([2000, 1200, 0]) == [481, 81, 0]
    assert updates_at([]) == []


@pytest.mark.parametrize("bad", [-1, 1.5, True, None, [1200, -16], [2000.0]])
def test_bad_rows(bad):
    with pytest.raises(ValueError, match="rows must be non-negative integers, got "):
        updates_at(bad)


def test_numpy_integers_are_rows():
    import numpy as np
    assert updates_at(np.int64(2000)) == 481
    assert updates_at(np.array([1200, 2000])) == [81, 481]


def test_closed_form_rejects_negative_rows():
    with pytest.raises(ValueError, match="rows must be non-negative"):
        updates_closed_form(-16)

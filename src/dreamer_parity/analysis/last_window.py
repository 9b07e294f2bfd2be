"""Last-window means of the training metrics that the two-hot decode moves.

Written by the compare stage as ``metrics/train_last_window.json`` so that
``dvc metrics diff`` shows a decode change even where the evaluation returns do not move
(smoke size).
"""

from __future__ import annotations

import math

from dreamer_parity.round_spec import Round

__all__ = ["DECODE_METRICS", "last_window_metrics"]

#: Training metrics (reference names, records.py ``train``) whose window means follow the
#: two-hot expectation: value and return spreads and the reward prediction (published
#: study, DIAGNOSIS: the reference formula adds noise to every reward and value prediction).
DECODE_METRICS = ("val/std", "val/mean", "ret/std", "ret/mean", "rew/std", "adv/std")

_NO_TRAIN = "published runs carry no training-metric windows"


def _value(run, row: int, name: str):
    if run.train is None or row not in run.train.index or name not in run.train.columns:
        return None
    v = float(run.train.at[row, name])
    return v if math.isfinite(v) else None


def last_window_metrics(round_: Round, sides: dict, names=DECODE_METRICS) -> dict:
    """Last-window means of training metrics, per side and seed, as flat metric keys.

    Args:
      round_: the round (each side's seeds,
        :attr:`dreamer_parity.round_spec.RoundSide.seeds`; ``protocol.rows``).
      sides: ``{"reference" | "candidate": {"runs": [Run, ...], ...}}`` (``analyse``'s
        ``sides``); a side none of whose runs has training metrics (published runs) gives
        a ``<side>.reason`` key instead.
      names: metric names of the runs' ``train`` tables.

    Returns:
      ``{"<name>.<side>.s<seed>": float | None, "<name>.<side>.mean": float | None,
      "rows": int}`` for each seed of the side: the window ending at the last evaluation
      point (``rows``); None where the seed has no record there (a failed seed), no
      training metrics, or no finite value; the mean is None unless every seed of the side
      has a value.
    """
    rows = round_.protocol.rows
    out: dict = {"rows": rows}
    for side, sd in sides.items():
        runs = {r.seed: r for r in sd["runs"]}
        if all(r.train is None for r in runs.values()):
            out[f"{side}.reason"] = _NO_TRAIN
            continue
        seeds = round_.side(side).seeds
        for name in names:
            vals = []
            for seed in seeds:
                v = _value(runs[seed], rows, name)
                out[f"{name}.{side}.s{seed}"] = v
                if v is not None:
                    vals.append(v)
            out[f"{name}.{side}.mean"] = (sum(vals) / len(vals)
                                          if len(vals) == len(seeds) else None)
    return out

"""Each side's own training-metric windows, and S2, whatever the other side holds.

A record of the records schema closes a window: the mean of each training metric over
the updates since the previous record (one window per evaluation point, 400 rows wide
in round 3).  The comparison tables of :func:`stats.windows_table` need both sides;
this module describes every side that has windows on its own, so a round against a
published side (which carries none) still shows the candidate's windows.

The metrics are the five the pre-registration ``docs/rounds/round3-candidate-ref.md``
names (:data:`WINDOW_METRICS`): the actor's entropy and the spreads that the two-hot
expectation moves.  Per side, metric and window: the mean over seeds and the seed
[min, max]; per seed: the window value.  Where both sides have a window: whether the
two seed ranges overlap.

Outputs (written by :func:`write`):

``metrics/windows.json``
    flat DVC metrics: ``<metric>.<side>.w<row>.mean|lo|hi`` (windows with at least one
    finite seed value; the 400-row window holds no update and is absent),
    ``<metric>.<side>.windows`` (count), ``<metric>.w<row>.overlap`` and
    ``<metric>.overlap_windows`` / ``<metric>.windows`` where both sides have windows,
    ``<side>.reason`` for a side without windows, ``round``.
``metrics/plots/windows/<side>_<slug>.csv``
    ``rows, mean, lo, hi, n`` plus one column ``s<seed>`` per seed; one file per side
    and metric (``slug``: the metric name with ``/`` as ``_``), the header only where
    that side has no such windows (DVC refuses an empty output directory).
``metrics/plots/windows.png``
    one panel per metric: each side's mean over seeds and seed [min, max] band; a side
    without windows is named in the title with its reason.
"""

from __future__ import annotations

import io
import math
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from dreamer_parity.analysis.load import Run

__all__ = ["WINDOW_METRICS", "SIDES", "side_windows", "compute", "flat_keys", "entropy_keys",
           "csv_frames", "write", "slug", "s2_side"]

#: The metrics whose windows every round reports per side (round3-candidate-ref.md, B).
WINDOW_METRICS = ("ent/action/mean", "val/std", "ret/std", "adv/std", "rew/min")
SIDES = ("reference", "candidate")


def slug(metric: str) -> str:
    """A file-name form of a metric name: ``ent/action/mean`` -> ``ent_action_mean``."""
    return metric.replace("/", "_")


def side_windows(runs: list[Run], metrics=WINDOW_METRICS) -> dict:
    """The windows of one side.

    Args:
      runs: the side's runs in seed order (:func:`load.load_side`).
      metrics: training-metric names of the records' ``train`` dicts.

    Returns:
      ``{"reason": str}`` when a run has no training metrics (published layout), else
      ``{"reason": None, "seeds": [int], "rows": int64 [n_rows], "metrics": {name:
      {"values": float64 [seeds, rows] (NaN: no finite value), "mean", "lo", "hi":
      float64 [rows] (NaN where no seed has a value), "n": int64 [rows]}}}``; a metric
      no run reports is left out.
    """
    missing = [r for r in runs if r.train is None]
    if missing or not runs:
        r = missing[0] if missing else None
        return {"reason": (r.unavailable.get("train", "no training metrics") if r is not None
                           else "no runs")}
    rows = sorted(set().union(*[set(r.train.index.tolist()) for r in runs]))
    out = {"reason": None, "seeds": [r.seed for r in runs],
           "rows": np.asarray(rows, dtype=np.int64), "metrics": {}}
    for m in metrics:
        if not any(m in r.train.columns for r in runs):
            continue
        vals = np.stack([r.train[m].reindex(rows).to_numpy(dtype=np.float64) if m in r.train.columns
                         else np.full(len(rows), np.nan) for r in runs])
        vals[~np.isfinite(vals)] = np.nan
        n = np.isfinite(vals).sum(axis=0)
        with warnings.catch_warnings():   # all-NaN windows (no update yet) stay NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            mean, lo, hi = np.nanmean(vals, 0), np.nanmin(vals, 0), np.nanmax(vals, 0)
        out["metrics"][m] = {"values": vals, "mean": mean, "lo": lo, "hi": hi,
                             "n": n.astype(np.int64)}
    return out


def compute(sides_runs: dict, metrics=WINDOW_METRICS) -> dict:
    """Windows of every side, and the overlap of the two sides' seed ranges.

    Args:
      sides_runs: ``{"reference": [Run], "candidate": [Run]}``.

    Returns:
      ``{"metrics": tuple, "sides": {side: side_windows(...)}, "overlap": {metric:
      {row: bool}}}``; ``overlap`` holds the windows where both sides have a finite
      value (empty when a side has no windows).
    """
    sides = {s: side_windows(sides_runs[s], metrics) for s in SIDES}
    overlap = {}
    a, b = sides["reference"], sides["candidate"]
    if a["reason"] is None and b["reason"] is None:
        for m in metrics:
            if m not in a["metrics"] or m not in b["metrics"]:
                continue
            ra = dict(zip(a["rows"].tolist(), range(len(a["rows"]))))
            ov = {}
            for j, row in enumerate(b["rows"].tolist()):
                i = ra.get(row)
                if i is None or not a["metrics"][m]["n"][i] or not b["metrics"][m]["n"][j]:
                    continue
                ov[int(row)] = bool(max(a["metrics"][m]["lo"][i], b["metrics"][m]["lo"][j])
                                    <= min(a["metrics"][m]["hi"][i], b["metrics"][m]["hi"][j]))
            overlap[m] = ov
    return {"metrics": tuple(metrics), "sides": sides, "overlap": overlap}


def _f(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _side_metric_keys(prefix: str, rows, w: dict) -> dict:
    out = {}
    count = 0
    for j, row in enumerate(rows.tolist()):
        if not w["n"][j]:
            continue
        count += 1
        for stat in ("mean", "lo", "hi"):
            out[f"{prefix}.w{row}.{stat}"] = _f(w[stat][j])
    out[f"{prefix}.windows"] = count
    return out


def flat_keys(win: dict, round_name: str) -> dict:
    """The flat ``metrics/windows.json`` dict (see the module docstring)."""
    out: dict = {"round": round_name}
    for side in SIDES:
        sw = win["sides"][side]
        if sw["reason"] is not None:
            out[f"{side}.reason"] = sw["reason"]
            continue
        for m in win["metrics"]:
            if m in sw["metrics"]:
                out.update(_side_metric_keys(f"{m}.{side}", sw["rows"], sw["metrics"][m]))
            else:
                out[f"{m}.{side}.reason"] = "not reported by this side's runs"
    for m, ov in win["overlap"].items():
        for row, flag in ov.items():
            out[f"{m}.w{row}.overlap"] = flag
        out[f"{m}.overlap_windows"] = int(sum(ov.values()))
        out[f"{m}.windows"] = len(ov)
    return out


def entropy_keys(win: dict, metric: str = WINDOW_METRICS[0]) -> dict:
    """``summary.json``'s per-side entropy keys: ``entropy.<side>.w<row>.mean|lo|hi``,
    ``entropy.<side>.windows``, or ``entropy.<side>.reason``."""
    out = {}
    for side in SIDES:
        sw = win["sides"][side]
        if sw["reason"] is not None or metric not in sw["metrics"]:
            out[f"entropy.{side}.reason"] = sw["reason"] or f"{metric} not reported"
            continue
        out.update(_side_metric_keys(f"entropy.{side}", sw["rows"], sw["metrics"][metric]))
    return out


def s2_side(runs: list[Run], points: list[int], rule: str) -> dict:
    """S2 of one side on its own: ``{"reason": None, "curve": float64 [seeds, points],
    "values": float64 [seeds] (the last point)}`` or ``{"reason": str}`` when a run has no
    episode log (:func:`stats.s2_matrix`, PROTOCOL.md 5.2)."""
    from dreamer_parity.analysis import stats
    no_eps = [r for r in runs if r.episodes is None]
    if no_eps:
        r = no_eps[0]
        return {"reason": f"{r.side} seed {r.seed}: {r.unavailable.get('episodes', 'no episode log')}"}
    curve = stats.s2_matrix(runs, points, rule)
    return {"reason": None, "curve": curve, "values": curve[:, -1]}


def csv_frames(win: dict) -> dict[str, pd.DataFrame]:
    """``{file name: frame}`` of the per-side window CSVs, one per side and metric (see
    the module docstring); a side or metric without windows gets the header only, so the
    directory (a DVC output) always holds the same files."""
    out = {}
    for side in SIDES:
        sw = win["sides"][side]
        for m in win["metrics"]:
            if sw["reason"] is not None or m not in sw["metrics"]:
                out[f"{side}_{slug(m)}.csv"] = pd.DataFrame(columns=["rows", "mean", "lo", "hi", "n"])
                continue
            w = sw["metrics"][m]
            keep = w["n"] > 0
            df = pd.DataFrame({"rows": sw["rows"][keep], "mean": w["mean"][keep],
                               "lo": w["lo"][keep], "hi": w["hi"][keep], "n": w["n"][keep]})
            for i, seed in enumerate(sw["seeds"]):
                df[f"s{seed}"] = w["values"][i][keep]
            out[f"{side}_{slug(m)}.csv"] = df
    return out


def _figure(win: dict, path: Path, title: str, caption: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dreamer_parity.analysis.plots import COLORS, save_figure
    ms = list(win["metrics"])
    fig, axes = plt.subplots(len(ms), 1, figsize=(8, 2.3 * len(ms) + 0.8), sharex=True,
                             squeeze=False)
    absent = [f"{s}: none ({win['sides'][s]['reason']})" for s in SIDES
              if win["sides"][s]["reason"] is not None]
    for ax, m in zip(axes[:, 0], ms):
        drawn = False
        for side in SIDES:
            sw = win["sides"][side]
            if sw["reason"] is not None or m not in sw["metrics"]:
                continue
            w = sw["metrics"][m]
            ok = w["n"] > 0
            x = sw["rows"][ok]
            ax.fill_between(x, w["lo"][ok], w["hi"][ok], color=COLORS[side], alpha=0.2,
                            label=f"{side} seed [min, max]")
            ax.plot(x, w["mean"][ok], color=COLORS[side], lw=1.5,
                    label=f"{side} mean over {len(sw['seeds'])} seeds")
            drawn = True
        ax.set_ylabel(m, fontsize=8)
        ax.grid(alpha=0.3)
        if m.endswith("/std") and drawn:
            ax.set_yscale("log")
        if drawn:
            ax.legend(loc="best", fontsize=7)
    axes[-1, 0].set_xlabel("rows at the window's end (environment transitions over all 16 envs)")
    head = title + ("\n" + "; ".join(absent) if absent else "")
    axes[0, 0].set_title(head, fontsize=9)
    fig.text(0.01, 0.0, caption, fontsize=6, va="top")
    save_figure(fig, path)


def write(win: dict, metrics_path, plots_dir, round_name: str, caption: str = "") -> dict:
    """Write ``windows.json``, the ``windows/`` CSVs (replacing the directory) and
    ``windows.png``; returns the flat dict.  Each file is written atomically."""
    from dreamer_parity import records
    atomic_text = records.write_text
    plots_dir = Path(plots_dir)
    flat = flat_keys(win, round_name)
    records.write_json(metrics_path, flat)
    tmp = plots_dir / f".windows.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    for name, df in csv_frames(win).items():
        buf = io.StringIO()
        df.to_csv(buf, index=False, na_rep="", float_format="%.10g")
        atomic_text(tmp / name, buf.getvalue())
    final = plots_dir / "windows"
    old = plots_dir / f".windows.old-{os.getpid()}"
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    if old.exists():
        shutil.rmtree(old)
    _figure(win, plots_dir / "windows.png",
            f"{round_name}: training-metric windows per side (seed [min, max])", caption)
    return flat

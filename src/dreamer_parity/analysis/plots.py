"""Figures of a round (matplotlib, Agg backend), written atomically as PNG.

* ``eval_curves.png``: evaluation mean return per seed (thin) and mean over seeds
  (thick) per side, against rows; the S1 rows and the LATE range marked; the published
  study's own candidate, when the reference side holds one, as a dashed mean (context).
* ``s2_curve.png``: S2 (training-episode rolling mean) per side, mean with the seed
  [min, max] band; a labelled placeholder when S2 is not available.
* ``entropy_windows.png``: actor entropy ``ent/action/mean`` window means with the seed
  [min, max] range per side; a labelled placeholder when not available.
* ``iqm.png``, ``performance_profile.png``: the rliable additions
  (:func:`additions.write_figures`).
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from dreamer_parity.analysis import stats  # noqa: E402

__all__ = ["write_figures", "COLORS"]

COLORS = {"reference": "tab:blue", "candidate": "tab:orange", "study_candidate": "tab:green"}


def _save(fig, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    os.replace(tmp, path)


def _placeholder(path: Path, title: str, reason: str) -> None:
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.set_axis_off()
    ax.set_title(title)
    ax.text(0.5, 0.5, f"not available:\n{reason}", ha="center", va="center", wrap=True)
    _save(fig, path)


def _eval_curves(result: dict, path: Path) -> None:
    p = result["params"]
    pts = np.asarray(result["points"])
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for side in ("reference", "candidate"):
        mat = result["eval"][side]
        for i, s in enumerate(p["seeds"]):
            ax.plot(pts, mat[i], color=COLORS[side], lw=0.8, alpha=0.35,
                    label=f"{side} seeds" if i == 0 else None)
        ax.plot(pts, mat.mean(axis=0), color=COLORS[side], lw=2.2, marker="o", ms=3,
                label=f"{side} mean over {mat.shape[0]} seeds")
    ctx = result.get("context")
    if ctx is not None and ctx.get("eval") is not None:   # context only: its mean, dashed
        mat = ctx["eval"]
        ax.plot(pts, mat.mean(axis=0), color=COLORS["study_candidate"], lw=1.6, ls="--",
                label=f"the study's candidate, mean over {mat.shape[0]} seeds (context)")
    for r in p["stats"]["s1_rows"]:
        ax.axvline(r, color="grey", lw=0.6, ls=":")
    if p["stats"]["late_rows"]:
        a, b = p["stats"]["late_rows"]
        ax.axvspan(a, b, color="grey", alpha=0.08, label="LATE range")
    ax.axhline(p["stats"]["good_return"], color="grey", lw=0.6, ls="--",
               label=f"good return {p['stats']['good_return']:g}")
    ax.set_xlabel("rows (environment transitions over all 16 envs)")
    ax.set_ylabel("evaluation mean return (steps, max 500)")
    ax.set_ylim(0, 520)
    ax.set_title(f"{p['round']}: evaluation return ({p['eval_episodes']} episodes per point; "
                 f"dotted: S1 rows)")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    _save(fig, path)


def _s2_curve(result: dict, path: Path) -> None:
    p = result["params"]
    s2 = result["s2"]
    title = f"{p['round']}: S2, training-episode rolling mean (last 10 per env, 16 envs)"
    if s2.get("reason"):
        _placeholder(path, title, s2["reason"])
        return
    pts = np.asarray(result["points"])
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for side in ("reference", "candidate"):
        mat = s2["curve"][side]
        with np.errstate(all="ignore"):
            ok = np.isfinite(mat).all(axis=0)
        if not ok.any():
            continue
        m = mat[:, ok]
        ax.fill_between(pts[ok], m.min(axis=0), m.max(axis=0), color=COLORS[side], alpha=0.2,
                        label=f"{side} seed [min, max]")
        ax.plot(pts[ok], m.mean(axis=0), color=COLORS[side], lw=2, marker="o", ms=3,
                label=f"{side} mean over {m.shape[0]} seeds")
    ax.set_xlabel("rows (environment transitions over all 16 envs)")
    ax.set_ylabel("S2: mean training-episode return (steps)")
    ax.set_title(title)
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    _save(fig, path)


def _entropy(result: dict, path: Path) -> None:
    p = result["params"]
    title = f"{p['round']}: actor entropy {stats.ENTROPY} per window (seed [min, max])"
    t = result["windows"]["table"]
    e = result["entropy"]
    if t is None or not e["windows"]:
        _placeholder(path, title, e["reason"] or "not reported")
        return
    t = t[t["metric"] == stats.ENTROPY]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.12 * float(np.min(np.diff(t["rows"]))) if len(t) > 1 else 100.0
    for k, side in enumerate(("reference", "candidate")):
        ok = t[f"{side}_n"] > 0
        x = t["rows"][ok].to_numpy(dtype=float) + (k - 0.5) * width
        mean = t[f"{side}_mean"][ok].to_numpy(dtype=float)
        lo = t[f"{side}_lo"][ok].to_numpy(dtype=float)
        hi = t[f"{side}_hi"][ok].to_numpy(dtype=float)
        ax.errorbar(x, mean, yerr=[mean - lo, hi - mean], fmt="o-", color=COLORS[side], capsize=3,
                    ms=4, lw=1.2, label=f"{side} mean, seed [min, max]")
    ax.set_xlabel("rows at the window's end (environment transitions over all 16 envs)")
    ax.set_ylabel("actor entropy (nats)")
    ax.set_title(f"{title}\nranges overlap in {e['overlap']} of {e['windows']} windows")
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    _save(fig, path)


def write_figures(result: dict, plots_dir) -> None:
    """Write the PNG figures of a round (and of its additions) under ``plots_dir``."""
    plots_dir = Path(plots_dir)
    _eval_curves(result, plots_dir / "eval_curves.png")
    _s2_curve(result, plots_dir / "s2_curve.png")
    _entropy(result, plots_dir / "entropy_windows.png")
    if "additions" in result:
        from dreamer_parity.analysis import additions
        additions.write_figures(result["additions"], plots_dir, result["params"]["round"])

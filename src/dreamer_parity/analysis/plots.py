"""Figures of a round (matplotlib, Agg backend), written atomically as PNG.

* ``eval_curves.png``: evaluation mean return per seed (thin) and mean over seeds
  (thick) per side, against rows; the S1 rows and the LATE range marked; the published
  study's own candidate, when the reference side holds one, as a dashed mean (context).
* ``s2_curve.png``: S2 (training-episode rolling mean) of each side that has training
  episodes, mean with the seed [min, max] band; a side without them is named in the
  title with its reason (a placeholder only when neither side has them).
* ``entropy_windows.png``: actor entropy ``ent/action/mean`` window means with the seed
  [min, max] band, each side that has windows (:mod:`windows`); likewise labelled.
* ``windows.png`` (:func:`windows.write`): the five pre-registered window metrics.
* ``iqm.png``, ``performance_profile.png``: the rliable additions
  (:func:`_addition_figures`).
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from dreamer_parity.analysis import additions, stats  # noqa: E402

__all__ = ["write_figures", "save_figure", "caption", "COLORS"]

COLORS = {"reference": "tab:blue", "candidate": "tab:orange", "study_candidate": "tab:green"}


def save_figure(fig, path: Path) -> None:
    """Save ``fig`` as PNG at ``path`` (110 dpi, reduced to a 256-colour palette and
    optimised: about 40% of matplotlib's RGBA size, the same to the eye for line plots)
    through a temporary file and a rename; closes it."""
    from PIL import Image

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", facecolor="white")
    plt.close(fig)
    buf.seek(0)
    with Image.open(buf) as im:
        im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(
            tmp, format="PNG", optimize=True)
    os.replace(tmp, path)


_save = save_figure   # the name additions.py calls


def caption(command: str = "dvc repro compare") -> str:
    """The line a figure carries: UTC date, machine (OS, architecture, CPU count) and the
    command that reproduces it."""
    import datetime
    import platform
    day = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    return (f"made {day} on {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs; "
            f"reproduce: {command}")


def _placeholder(path: Path, title: str, reason: str) -> None:
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.set_axis_off()
    ax.set_title(title)
    ax.text(0.5, 0.5, f"not available:\n{reason}", ha="center", va="center", wrap=True)
    save_figure(fig, path)


def _eval_curves(result: dict, path: Path) -> None:
    round_ = result["round"]
    pts = np.asarray(result["points"])
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for side in ("reference", "candidate"):
        mat = result["eval"][side]
        for i, s in enumerate(result["seeds"][side]):
            ax.plot(pts, mat[i], color=COLORS[side], lw=0.8, alpha=0.35,
                    label=f"{side} seeds" if i == 0 else None)
        ax.plot(pts, mat.mean(axis=0), color=COLORS[side], lw=2.2, marker="o", ms=3,
                label=f"{side} mean over {mat.shape[0]} seeds")
    ctx = result.get("context")
    if ctx is not None and ctx.get("eval") is not None:   # context only: its mean, dashed
        mat = ctx["eval"]
        ax.plot(pts, mat.mean(axis=0), color=COLORS["study_candidate"], lw=1.6, ls="--",
                label=f"the study's candidate, mean over {mat.shape[0]} seeds (context)")
    for r in round_.stats.s1_rows:
        ax.axvline(r, color="grey", lw=0.6, ls=":")
    if round_.stats.late_rows:
        a, b = round_.stats.late_rows
        ax.axvspan(a, b, color="grey", alpha=0.08, label="LATE range")
    ax.axhline(round_.stats.good_return, color="grey", lw=0.6, ls="--",
               label=f"good return {round_.stats.good_return:g}")
    ax.set_xlabel("rows (environment transitions over all 16 envs)")
    ax.set_ylabel("evaluation mean return (steps, max 500)")
    ax.set_ylim(0, 520)
    ax.set_title(f"{round_.name}: evaluation return ({round_.protocol.eval_episodes} episodes per point; "
                 f"dotted: S1 rows)")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    save_figure(fig, path)


def _s2_curve(result: dict, path: Path) -> None:
    """Each side's S2 curve on its own (mean, seed band); a side without episodes is
    named with its reason in the title, never drawn as "not available" for all."""
    round_ = result["round"]
    s2 = result["s2"]
    title = f"{round_.name}: S2, training-episode rolling mean (last 10 per env, 16 envs)"
    curves = s2.get("curve", {})
    if not curves:
        _placeholder(path, title, s2.get("reason") or "no side has training episodes")
        return
    pts = np.asarray(result["points"])
    ok = {side: np.isfinite(mat).all(axis=0) for side, mat in curves.items()}
    if not any(v.any() for v in ok.values()):
        _placeholder(path, title, "S2 undefined at every point (an env of some seed has no "
                                  "finished episode)")
        return
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for side in ("reference", "candidate"):
        mat = curves.get(side)
        if mat is None or not ok[side].any():
            continue
        m = mat[:, ok[side]]
        x = pts[ok[side]]
        ax.fill_between(x, m.min(axis=0), m.max(axis=0), color=COLORS[side], alpha=0.2,
                        label=f"{side} seed [min, max]")
        ax.plot(x, m.mean(axis=0), color=COLORS[side], lw=2, marker="o", ms=3,
                label=f"{side} mean over {m.shape[0]} seeds")
    absent = [f"{side}: none ({why})" for side, why in s2.get("side_reason", {}).items() if why]
    ax.set_xlabel("rows (environment transitions over all 16 envs)")
    ax.set_ylabel("S2: mean training-episode return (steps)")
    ax.set_title(title + ("\n" + "; ".join(absent) if absent else ""), fontsize=9)
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    fig.text(0.01, -0.02, caption(), fontsize=6, va="top")
    save_figure(fig, path)


def _entropy(result: dict, path: Path) -> None:
    """Actor entropy per window, each side that has windows (mean, seed [min, max])."""
    round_ = result["round"]
    title = f"{round_.name}: actor entropy {stats.ENTROPY} per window (seed [min, max])"
    win = result.get("side_windows")
    drawn = [s for s in ("reference", "candidate") if win is not None and
             win["sides"][s]["reason"] is None and stats.ENTROPY in win["sides"][s]["metrics"]]
    if not drawn:
        _placeholder(path, title, result["entropy"]["reason"] or "not reported")
        return
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for side in drawn:
        sw = win["sides"][side]
        w = sw["metrics"][stats.ENTROPY]
        ok = w["n"] > 0
        x, mean = sw["rows"][ok].astype(float), w["mean"][ok]
        ax.fill_between(x, w["lo"][ok], w["hi"][ok], color=COLORS[side], alpha=0.2,
                        label=f"{side} seed [min, max]")
        ax.plot(x, mean, "o-", color=COLORS[side], ms=3, lw=1.2,
                label=f"{side} mean over {len(sw['seeds'])} seeds")
    e = result["entropy"]
    sub = (f"ranges overlap in {e['overlap']} of {e['windows']} windows" if e["windows"] else
           "; ".join(f"{s}: none ({win['sides'][s]['reason']})" for s in ("reference", "candidate")
                     if s not in drawn))
    ax.set_xlabel("rows at the window's end (environment transitions over all 16 envs)")
    ax.set_ylabel("actor entropy (nats)")
    ax.set_title(f"{title}\n{sub}", fontsize=9)
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    fig.text(0.01, -0.02, caption(), fontsize=6, va="top")
    save_figure(fig, path)


def write_figures(result: dict, plots_dir) -> None:
    """Write the PNG figures of a round (and of its additions) under ``plots_dir``."""
    plots_dir = Path(plots_dir)
    _eval_curves(result, plots_dir / "eval_curves.png")
    _s2_curve(result, plots_dir / "s2_curve.png")
    _entropy(result, plots_dir / "entropy_windows.png")
    if "additions" in result:
        _addition_figures(result["additions"], plots_dir, result["round"].name)


def _addition_figures(add: dict, plots_dir, round_name: str = "") -> None:
    """``iqm.png`` (IQM and mean with intervals per side) and ``performance_profile.png``."""
    SIDES, TAUS = additions.SIDES, additions.TAUS
    plots_dir = Path(plots_dir)
    rl = add["rliable"]
    title = f"{round_name}: {add['primary']} / 500 (addition, not pre-registered)"
    if rl["reason"]:
        _placeholder(plots_dir / "iqm.png", title, rl["reason"])
        _placeholder(plots_dir / "performance_profile.png", title, rl["reason"])
        return
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.0), sharey=True)
    for ax, k in zip(axes, ("iqm", "mean")):
        for y, side in enumerate(SIDES):
            v = rl["sides"][side]
            ax.barh(y, v[f"{k}_hi"] - v[f"{k}_lo"], left=v[f"{k}_lo"], height=0.5,
                    color=COLORS[side], alpha=0.5)
            ax.plot([v[k], v[k]], [y - 0.25, y + 0.25], color="black", lw=2)
        ax.set_yticks(range(len(SIDES)), SIDES)
        ax.set_xlim(-0.02, 1.02)
        ax.set_xlabel("normalised score (return / 500)")
        ax.set_title(k.upper() if k == "iqm" else "Mean")
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(f"{title}\nstratified bootstrap 95% CI, {rl['reps']} reps", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.86))
    _save(fig, plots_dir / "iqm.png")

    fig, ax = plt.subplots(figsize=(7, 4))
    for side in SIDES:
        prof, ci = rl["profiles"][side], rl["profile_cis"][side]
        ax.plot(TAUS, prof, color=COLORS[side], lw=2, label=f"{side} ({len(rl['scores'][side])} runs)")
        ax.fill_between(TAUS, ci[0], ci[1], color=COLORS[side], alpha=0.2)
    ax.set_xlabel(r"normalised score $\tau$ (return / 500)")
    ax.set_ylabel(r"fraction of runs with score > $\tau$")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{title}\nperformance profile, 95% bands")
    ax.legend(loc="lower left", fontsize=8)
    ax.grid(alpha=0.3)
    _save(fig, plots_dir / "performance_profile.png")

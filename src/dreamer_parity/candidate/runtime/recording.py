"""Host-side record building for the candidate: records.jsonl lines, episodes, S2.

Numpy and the standard library only; the schema is :mod:`dreamer_parity.records`.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["s2", "episodes_from_chunk", "make_record", "health_reason"]


def s2(episodes: list[dict], num_envs: int, row_limit: int, window: int = 10):
    """Training-episode statistic S2 (PROTOCOL.md 5.2).

    For each env, the mean score of its last ``min(window, k)`` finished episodes with
    ``row_last <= row_limit``; S2 is the mean over envs, or None (NaN) while some env has
    no finished episode.

    Args:
      episodes: dicts with ``worker``, ``row_last``, ``score`` in completion order.
      num_envs: number of envs (16).
      row_limit: per-env row index bound (``rows / num_envs`` at evaluation point rows).
    """
    per = [[] for _ in range(num_envs)]
    for e in episodes:
        if e["row_last"] <= row_limit:
            per[e["worker"]].append(float(e["score"]))
    if any(not p for p in per):
        return None
    return float(np.mean([np.mean(p[-window:]) for p in per]))


def episodes_from_chunk(ep: dict, first_step: int, seed_index: int, seed: int) -> list[dict]:
    """Finished episodes of one seed in one chunk, in completion order.

    Args:
      ep: numpy arrays ``[seeds, steps, envs]``: ``ended``, ``length``, ``score``,
        ``terminal`` (:class:`dreamer_parity.candidate.runtime.loop.Programs`).
      first_step: global index of the chunk's first vector step; the env step of vector
        step ``v`` produces per-env row ``v + 1``.
    """
    ended = ep["ended"][seed_index]
    out = []
    steps, envs = np.nonzero(ended)
    for v, w in zip(steps.tolist(), envs.tolist()):
        out.append({
            "seed": int(seed), "worker": int(w), "row_last": int(first_step + v + 1),
            "length": int(ep["length"][seed_index, v, w]),
            "score": float(ep["score"][seed_index, v, w]),
            "terminal": bool(ep["terminal"][seed_index, v, w]),
        })
    return out


def health_reason(report: dict, i: int) -> str | None:
    """Why seed ``i`` fails the finiteness check at a point, or None when it passes.

    Checks (issue "Non-finite values"): every loss finite over the whole run so far,
    parameters finite, training and evaluation actions in range, policy latents finite.
    """
    h = report["health"]
    ev = report["eval"]
    reasons = []
    n_bad = int(h["loss_nonfinite"][i])
    if n_bad:
        reasons.append(f"{n_bad} updates with a non-finite loss")
    if not bool(report["params_finite"][i]):
        reasons.append("non-finite parameters")
    if not bool(h["actions_ok"][i]) or not bool(ev["actions_ok"][i]):
        reasons.append("action out of range")
    if not bool(h["latents_finite"][i]) or not bool(ev["latents_finite"][i]):
        reasons.append("non-finite policy latents")
    return "; ".join(reasons) or None


def make_record(report: dict, i: int, seed: int, num_envs: int, episodes: list[dict],
                retnorm_limit: float, failed: bool) -> dict:
    """The records.jsonl line of seed index ``i`` at an evaluation point.

    ``report`` holds numpy arrays with a leading seed axis (``loop._point``).  ``train``
    is the window mean of every metric over its finite values (None without any),
    ``retnorm`` is None before the first update, ``s2`` is added besides the schema.
    """
    step = int(report["step"][i])
    updates = int(report["updates"][i])
    returns = [float(x) for x in report["eval"]["returns"][i]]
    lengths = [int(x) for x in report["eval"]["lengths"][i]]
    train, counts = {}, {}
    for name in sorted(report["msum"]):
        c = int(report["mcount"][name][i])
        counts[name] = c
        train[name] = float(report["msum"][name][i]) / c if c else None
    if updates:
        lo = float(report["retnorm"]["lo"][i])
        hi = float(report["retnorm"]["hi"][i])
        retnorm = {"lo": lo, "hi": hi, "scale": max(retnorm_limit, hi - lo)}
    else:
        retnorm = None
    s2_value = s2(episodes, num_envs, step)
    return {
        "side": "candidate", "seed": int(seed), "rows": step * num_envs, "updates": updates,
        "eval_returns": returns, "eval_lengths": lengths,
        "eval_mean": float(np.mean(returns)), "eval_len_mean": float(np.mean(lengths)),
        "train": train, "train_counts": counts, "retnorm": retnorm,
        "s2": s2_value if s2_value is None or math.isfinite(s2_value) else None,
        "status": "failed" if failed else "ok",
    }

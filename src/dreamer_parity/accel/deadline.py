"""How many seeds one program finishes before a deadline, from a measured rate
(``benchmarks/gpu_call.py``'s batch).  Standard library and the package only."""

from __future__ import annotations

from dreamer_parity.params import NUM_ENVS
from dreamer_parity.schedule import per_vector_step

#: Seconds a run spends outside its compile and its loop (start, outputs; the TPU's 20-23 s,
#: docs/CANDIDATE.md "Runs in commands of at most 10 minutes").
RUN_OVERHEAD_S = 30.0


def updates_per_seed(rows: int) -> int:
    """Train updates of one seed over ``rows`` environment rows (:data:`NUM_ENVS`
    environments; :func:`dreamer_parity.schedule.per_vector_step`)."""
    return sum(per_vector_step(rows // NUM_ENVS))


def plan_batch(left_s: float, updates_per_seed: int, measured_seeds: int,
               seed_updates_per_s: float, compile_s: float | None, max_seeds: int,
               ready: dict | None = None) -> dict:
    """How many seeds one program can finish in ``left_s`` seconds.

    The time of one batched update at ``n`` seeds is taken as the measured one at
    ``measured_seeds`` seeds (``measured_seeds / seed_updates_per_s``) for ``n`` up to that
    count, and as growing in proportion to ``n`` above it (a bound: batching widens the
    kernels, it does not add them, so the true time grows more slowly).  A program of ``n``
    seeds takes ``start_s(n) + RUN_OVERHEAD_S + updates_per_seed * update_s(n)`` seconds,
    where ``start_s(n)`` is ``ready[n]`` (the seconds to load programs compiled beforehand)
    for a count in ``ready``, else ``compile_s``; with ``compile_s`` None (no compile was
    measured), only the counts of ``ready`` are candidates.

    Args:
      left_s: seconds until the deadline, less what the work after the batch needs.
      updates_per_seed: train updates of one seed over the round's rows
        (:func:`updates_per_seed`).
      measured_seeds, seed_updates_per_s, compile_s: the measurement (seeds, seed-updates
        per second, compile seconds or None; :mod:`dreamer_parity.accel.rate`).
      max_seeds: the largest batch wanted.
      ready: ``{seeds: load seconds}`` of the seed counts whose programs load, or None.

    Returns:
      ``{"seeds": int (0: none fits), "estimate_s": float | None (of that batch),
      "update_s_measured": float}``.

    Raises:
      ValueError: a non-positive measurement or count.
    """
    if measured_seeds < 1 or not seed_updates_per_s > 0 or updates_per_seed < 1 or max_seeds < 1:
        raise ValueError("plan_batch: the measurement and the counts must be positive")
    base = measured_seeds / seed_updates_per_s
    ready = ready or {}

    def est(n):
        start = ready.get(n, compile_s)
        if start is None:
            return float("inf")
        return start + RUN_OVERHEAD_S + updates_per_seed * base * max(1.0, n / measured_seeds)

    n = max([k for k in range(1, max_seeds + 1) if est(k) <= left_s], default=0)
    return {"seeds": n, "estimate_s": est(n) if n else None, "update_s_measured": base}

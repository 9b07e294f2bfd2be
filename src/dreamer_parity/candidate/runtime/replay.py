"""On-device replay with the reference's item, online-queue and write-back semantics.

Storage: one ring per env of ``capacity`` rows (``rows / num_envs`` for a run, so nothing
is ever overwritten, as the reference's 5e6-item capacity never binds).  All functions
are pure and jit/vmap-able; the replay is a dict of arrays.

Semantics (``embodied/replay/replay.py`` at 29eb964; ALGORITHM.md section 15):

* An **item** is a window start.  Worker ``w``'s start ``s`` becomes an item when the
  worker holds ``s + length`` rows (``replay.py:130-138``), so after ``n`` rows per env
  every env has the items ``0 .. n - length``.
* **Online queue** (``replay.py:140-144``): the start inserted when the worker's running
  count ``lengths[w]`` (rows before the add) is a multiple of ``length`` is also queued.
  With all envs advancing together, the row with 0-based index ``k = 65 m`` (``m >= 1``)
  queues start ``65 m - 64`` of every env, in worker order.  Entry ``j`` of the queue is
  therefore worker ``j % num_envs``, start ``65 (j // num_envs + 1) - 64``, and the queue
  holds ``num_envs * floor((n - 1) / 65)`` entries after ``n`` rows.  Only a pop
  counter is stored.
* **Sampling** (``replay.py:178-191``): each window pops the queue first; when the queue
  is empty it draws uniformly over all items of all envs.
* **Annotation** (``replay.py:302-317``): ``is_first[:, 0] = True`` and
  ``is_last |= roll(is_first, -1)`` with the last column untouched.
* **Write-back** (``replay.py:146-167``): the posterior latents of the ``length - 1``
  trained rows of batch row ``i`` overwrite rows ``start + 1 ..`` of its env, in batch
  order (a later batch row wins where windows overlap).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["init", "add", "queue_size", "sample_starts", "gather", "write_back", "LENGTH",
           "nbytes"]

LENGTH = 65


def init(num_envs: int, capacity: int, deter: int, stoch: int, obs_dim: int = 4) -> dict:
    """An empty replay: arrays ``[num_envs, capacity, ...]`` and a pop counter.

    Keys: ``vector`` f32[...,obs_dim], ``reward`` f32, ``is_first``/``is_last``/
    ``is_terminal`` bool, ``action`` i32, ``deter`` f32[...,deter], ``stoch`` i32[...,stoch];
    ``popped`` i32 scalar (online-queue entries consumed).
    """
    e, c = num_envs, capacity
    return {
        "vector": jnp.zeros((e, c, obs_dim), jnp.float32),
        "reward": jnp.zeros((e, c), jnp.float32),
        "is_first": jnp.zeros((e, c), bool),
        "is_last": jnp.zeros((e, c), bool),
        "is_terminal": jnp.zeros((e, c), bool),
        "action": jnp.zeros((e, c), jnp.int32),
        "deter": jnp.zeros((e, c, deter), jnp.float32),
        "stoch": jnp.zeros((e, c, stoch), jnp.int32),
        "popped": jnp.zeros((), jnp.int32),
    }


def nbytes(replay: dict) -> int:
    """Bytes held by the replay's arrays."""
    return int(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(replay)))


def add(replay: dict, index, row: dict) -> dict:
    """Write one row per env at per-env row ``index`` (int32 scalar).

    ``row`` holds the keys of :func:`init` except ``popped``, each with leading dim
    ``num_envs``.  ``action`` must already be zeroed on ``is_last`` rows (driver mask).
    """
    out = dict(replay)
    for k, v in row.items():
        buf = replay[k]
        v = jnp.asarray(v, buf.dtype)[:, None]
        start = (0, index) + (0,) * (buf.ndim - 2)
        out[k] = jax.lax.dynamic_update_slice(buf, v, start)
    return out


def queue_size(n):
    """Online-queue entries pushed once every env holds ``n`` rows (int32; n >= 0)."""
    n = jnp.asarray(n, jnp.int32)
    return jnp.where(n >= 1, (n - 1) // LENGTH, 0).astype(jnp.int32)


def sample_starts(replay: dict, n, key, batch: int):
    """Choose ``batch`` windows: online queue first, then uniform over all items.

    Args:
      replay: the replay (only ``popped`` and the env count are read).
      n: rows per env stored so far (int32 scalar, at least ``LENGTH``).
      key: PRNG key of the uniform draws (drawn every call; used where the queue is empty).
      batch: number of windows.

    Returns:
      ``(replay, worker i32[batch], start i32[batch], online bool[batch])`` with ``popped``
      advanced by the number of queue entries consumed.
    """
    num_envs = replay["action"].shape[0]
    n = jnp.asarray(n, jnp.int32)
    pushed = num_envs * queue_size(n)
    j = replay["popped"] + jnp.arange(batch, dtype=jnp.int32)
    online = j < pushed
    q_worker = j % num_envs
    q_start = LENGTH * (j // num_envs + 1) - (LENGTH - 1)
    per_env = jnp.maximum(n - (LENGTH - 1), 1)
    idx = jax.random.randint(key, (batch,), 0, num_envs * per_env, dtype=jnp.int32)
    u_worker, u_start = idx // per_env, idx % per_env
    worker = jnp.where(online, q_worker, u_worker)
    start = jnp.where(online, q_start, u_start)
    out = dict(replay)
    out["popped"] = jnp.minimum(pushed, replay["popped"] + batch)
    return out, worker.astype(jnp.int32), start.astype(jnp.int32), online


def gather(replay: dict, worker, start) -> dict:
    """The annotated batch of windows ``[start, start + LENGTH)`` of each ``worker``.

    Returns a dict with the keys of :func:`init` (without ``popped``), each
    ``[batch, LENGTH, ...]``, after the reference's annotation: ``is_first[:, 0] = True``
    and ``is_last |= roll(is_first, -1)`` (last column untouched).
    """
    t = start[:, None] + jnp.arange(LENGTH, dtype=jnp.int32)[None, :]
    w = worker[:, None]
    out = {k: v[w, t] for k, v in replay.items() if k != "popped"}
    is_first = out["is_first"].at[:, 0].set(True)
    nxt = jnp.roll(is_first, -1, axis=1).at[:, -1].set(False)
    out["is_first"] = is_first
    out["is_last"] = out["is_last"] | nxt
    return out


def write_back(replay: dict, worker, start, outs: dict) -> dict:
    """Overwrite the stored latents of the trained rows with ``outs``.

    Args:
      worker, start: the windows of the batch (i32[batch]).
      outs: ``{"deter": f32[batch, T, D], "stoch": i32[batch, T, S]}``, T = LENGTH - 1,
        the posteriors of rows ``start + 1 .. start + T``.

    Batch rows are applied in order, so a later row wins where windows overlap
    (``replay.py:159-167``).  Implemented as one scatter per key with unique indices: an
    entry that a later batch row overwrites is dropped (out-of-range index, ``mode="drop"``).
    """
    batch, t_len = outs["deter"].shape[:2]
    capacity = replay["deter"].shape[1]
    rows = start[:, None] + 1 + jnp.arange(t_len, dtype=jnp.int32)[None]          # [B, T]
    later = jnp.arange(batch)[None, :] > jnp.arange(batch)[:, None]                 # [B, B']
    same_env = worker[:, None] == worker[None, :]
    covered = ((rows[:, :, None] > start[None, None, :])
               & (rows[:, :, None] <= start[None, None, :] + t_len))               # [B, T, B']
    overwritten = jnp.any(covered & (later & same_env)[:, None, :], axis=-1)
    rows = jnp.where(overwritten, capacity, rows)        # dropped by the scatter
    w = jnp.broadcast_to(worker[:, None], rows.shape)
    out = dict(replay)
    for k in ("deter", "stoch"):
        buf = replay[k]
        out[k] = buf.at[w, rows].set(jnp.asarray(outs[k], buf.dtype), mode="drop",
                                     unique_indices=True)
    return out

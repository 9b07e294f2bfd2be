"""One host device per seed on CPU: the seeds of a run execute side by side.

On CPU the train step of one seed runs one XLA op at a time for most of its wall time
(the observe loop's small ops; the second core only helps inside large matmuls and
fusions), so a single device leaves much of the second core idle.  XLA:CPU can expose
the host as several devices (``--xla_force_host_platform_device_count``); each device
executes its own program on its own thread and all of them share the host's intra-op
thread pool.  With one device per seed, the seeds' programs run concurrently and the
operating system keeps the cores busy (docs/PERFORMANCE.md, "Levers measured").

:func:`seed_mesh` gives the mesh (axis :data:`AXIS`, one device per seed), or None where
it does not apply: another backend (a GPU batches the seeds instead, :mod:`.seedmap`), one
seed, or fewer host devices than seeds (XLA_FLAGS is read once, when jax starts its CPU
backend, so :func:`request_host_devices` must run before that).  :func:`shard_seeds` wraps
the run's functions mapped over seeds in ``jax.shard_map`` over that mesh: each device runs
the program of its own seed (the plain one-seed program, :func:`.seedmap.over_seeds`), and
no data moves between devices.  The numbers are those of a one-seed program, which XLA
compiles with other fusion and rounding choices than the one-device program of several
seeds, so the two differ by float32 rounding, amplified by training (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import os
import re
import sys

__all__ = ["AXIS", "FLAG", "request_host_devices", "host_device_count", "seed_mesh",
           "shard_seeds", "put_seeds", "put_replicated"]

#: Name of the mesh axis the seeds are laid along.
AXIS = "seed"
#: The XLA flag that sets the number of host (CPU) devices.
FLAG = "--xla_force_host_platform_device_count"
_FLAG_RE = re.compile(re.escape(FLAG) + r"=(\d+)")


def host_device_count(environ=None) -> int | None:
    """The host device count that ``XLA_FLAGS`` in ``environ`` (default ``os.environ``)
    asks for, or None when it does not set one."""
    environ = os.environ if environ is None else environ
    found = _FLAG_RE.findall(environ.get("XLA_FLAGS", ""))
    return int(found[-1]) if found else None


def request_host_devices(n: int, environ=None) -> bool:
    """Make XLA:CPU start with at least ``n`` host devices (appends :data:`FLAG` to
    ``XLA_FLAGS`` in ``environ``, default ``os.environ``; a larger count already there is
    kept).

    Returns True when the flag is in place for a CPU backend that has not started yet;
    False when jax is already imported (its backend may have read ``XLA_FLAGS``: the
    current devices are then what :func:`seed_mesh` sees) or ``n`` < 2 (nothing to do).
    Raises ValueError when ``n`` is not an int.
    """
    if isinstance(n, bool) or not isinstance(n, int):
        raise ValueError(f"request_host_devices: n must be an int, got {n!r}")
    environ = os.environ if environ is None else environ
    if n < 2 or (environ is os.environ and "jax" in sys.modules):
        return False
    have = host_device_count(environ)
    if have is None or have < n:
        flags = _FLAG_RE.sub("", environ.get("XLA_FLAGS", "")).strip()
        environ["XLA_FLAGS"] = f"{flags} {FLAG}={n}".strip()
    return True


def seed_mesh(n_seeds: int, backend: str | None = None):
    """A ``jax.sharding.Mesh`` of the first ``n_seeds`` CPU devices along :data:`AXIS`, or
    None when the backend (default ``jax.default_backend()``) is not ``"cpu"``,
    ``n_seeds`` < 2, or the process has fewer than ``n_seeds`` CPU devices."""
    import jax

    backend = backend or jax.default_backend()
    if backend != "cpu" or n_seeds < 2:
        return None
    devices = jax.devices("cpu")
    if len(devices) < n_seeds:
        return None
    return jax.sharding.Mesh(devices[:n_seeds], (AXIS,))


def shard_seeds(fns: dict, mesh) -> dict:
    """The run's functions ``{"init", "chunk", "point"}`` (seed axis 0 on every carry,
    key and result leaf; ``chunk``'s second argument, the update counts, shared by all
    seeds) wrapped in ``jax.shard_map`` over ``mesh``; ``fns`` itself when ``mesh`` is
    None.  Not jitted."""
    if mesh is None:
        return fns
    import jax
    from jax.sharding import PartitionSpec as P

    seed = P(AXIS)

    def wrap(fn, in_specs):
        return jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=seed,
                             check_vma=False)

    return {"init": wrap(fns["init"], (seed,)), "chunk": wrap(fns["chunk"], (seed, P())),
            "point": wrap(fns["point"], (seed,))}


def put_seeds(tree, mesh):
    """``tree``'s leaves as device arrays laid along the seed axis of ``mesh`` (leading
    axis = seeds); plain ``jnp.asarray`` leaves when ``mesh`` is None.  ShapeDtypeStruct
    leaves get the sharding attached instead."""
    import jax
    import jax.numpy as jnp

    if mesh is None:
        return jax.tree.map(lambda x: x if isinstance(x, jax.ShapeDtypeStruct)
                            else jnp.asarray(x), tree)
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(AXIS))
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)
                        if isinstance(x, jax.ShapeDtypeStruct)
                        else jax.device_put(x, sharding), tree)


def put_replicated(x, mesh):
    """``x`` (an array or ShapeDtypeStruct) replicated on every device of ``mesh``;
    ``jnp.asarray(x)`` (or ``x``) when ``mesh`` is None."""
    import jax
    import jax.numpy as jnp

    if mesh is None:
        return x if isinstance(x, jax.ShapeDtypeStruct) else jnp.asarray(x)
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    if isinstance(x, jax.ShapeDtypeStruct):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)
    return jax.device_put(x, sharding)

"""How the run's programs map over seeds: unbatched, batched, or one seed after another.

:func:`over_seeds` maps the one-seed functions of :mod:`.loop` over the leading seed axis:
with ``jax.vmap``, or, when the axis has size 1 (each device of the seed mesh,
:mod:`.seedmesh`, or a one-seed run), by calling the one-seed function itself.

Several seeds in one program are ``jax.vmap``ped.  By default ``vmap`` turns
every matmul of the train step into a batched matmul over the seed axis.  XLA:CPU runs those
less efficiently than the same matmuls one seed at a time (docs/PERFORMANCE.md, "Levers
measured").  On a GPU, batching is what makes many seeds cheap.

:func:`per_seed` wraps a function with a custom batching rule
(``jax.custom_batching.custom_vmap``).  Under the seed vmap it runs
``jax.lax.map(fn, ..., batch_size=seed_batch)``: a loop over groups of ``seed_batch``
seeds, vmapped inside each group.  ``seed_batch=None`` keeps plain ``vmap``.  Called
without vmap, the wrapped function is ``fn`` itself.  With ``seed_batch=1`` each seed runs
the unbatched program; the results agree with the vmapped program's to float32 rounding
(tests/test_candidate_seedmap.py; docs/PERFORMANCE.md).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["per_seed", "over_seeds", "default_seed_batch", "check_seed_batch"]


def default_seed_batch(backend: str | None = None) -> int | None:
    """Seeds batched together in the train step: 1 for ``"cpu"``, None (all seeds batched)
    for any other backend name (``"gpu"``, ``"cuda"``, ``"rocm"``, ``"tpu"``).

    ``backend`` defaults to ``jax.default_backend()``.
    """
    backend = backend or jax.default_backend()
    return 1 if backend == "cpu" else None


def check_seed_batch(seed_batch) -> int | None:
    """``seed_batch`` itself when it is None or a positive int; else ValueError naming it."""
    if seed_batch is None:
        return None
    if isinstance(seed_batch, bool) or not isinstance(seed_batch, int) or seed_batch < 1:
        raise ValueError(f"seed_batch must be a positive integer or None, got {seed_batch!r}")
    return seed_batch


def per_seed(fn, seed_batch: int | None):
    """``fn`` (positional arguments only) with a vmap rule that maps over the batch axis.

    Args:
      fn: a pure function of pytree arguments.
      seed_batch: seeds per group under vmap (:func:`jax.lax.map`'s ``batch_size``), or
        None for plain ``jax.vmap`` (then ``fn`` is returned unchanged).

    Returns:
      A function equal to ``fn`` when not vmapped.  Under ``jax.vmap`` (any ``in_axes``;
      the rule sees each batched input with its mapped axis moved to 0, of the vmap's size
      S) every output is batched along axis 0 with size S; unbatched inputs are broadcast to
      size S first.  The groups are ``min(seed_batch, S)`` seeds; when S is not a multiple
      of that, ``lax.map`` runs the remainder as one more, smaller group.

    Raises:
      ValueError: ``seed_batch`` is not None or a positive integer (when wrapping); and,
        raised by jax, on reverse-mode differentiation through the wrapper
        (``custom_vmap`` has no VJP rule; the loop never differentiates through a whole
        train step).
    """
    seed_batch = check_seed_batch(seed_batch)
    if seed_batch is None:
        return fn
    wrapped = jax.custom_batching.custom_vmap(fn)

    @wrapped.def_vmap
    def _rule(axis_size, in_batched, *args):
        args = tuple(
            jax.tree.map(lambda x, b: x if b else jnp.broadcast_to(x, (axis_size,) + x.shape),
                         a, ab)
            for a, ab in zip(args, in_batched))
        one = lambda xs: fn(*xs)
        if seed_batch == 1:
            out = jax.lax.map(one, args)              # a loop over seeds, each unbatched
        else:
            out = jax.lax.map(one, args, batch_size=min(seed_batch, axis_size))
        return out, jax.tree.map(lambda _: True, out)

    return wrapped


def over_seeds(fn, in_axes=0):
    """``jax.vmap(fn, in_axes)``, except that a seed axis of size 1 runs ``fn`` unbatched.

    Args:
      fn: a pure function of positional pytree arguments.
      in_axes: an int or None for every argument, or a tuple with one per argument
        (int: the seed axis of every leaf of that argument; None: not mapped).

    Returns:
      A function of the same arguments.  When every mapped leaf has size 1 along its
      seed axis (one seed per program: the per-device program of
      :mod:`.seedmesh`, or a one-seed run), the axis is squeezed, ``fn`` is called once
      and every output gets a leading axis of size 1; otherwise the outputs of
      ``jax.vmap``, batched along axis 0.  A size-1 ``vmap`` would make every op a batched
      op of batch 1 and, with :func:`per_seed`, wrap the train step in a one-trip loop; the
      unbatched program compiles faster (docs/PERFORMANCE.md, "Levers measured").

    Raises:
      ValueError: ``in_axes`` is a tuple whose length differs from the argument count
        (raised when called).
    """
    vmapped = jax.vmap(fn, in_axes=in_axes)

    def call(*args):
        axes = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
        if len(axes) != len(args):
            raise ValueError(f"over_seeds: in_axes has {len(axes)} entries for "
                             f"{len(args)} arguments")
        sizes = {leaf.shape[ax] for a, ax in zip(args, axes) if ax is not None
                 for leaf in jax.tree.leaves(a)}
        if sizes != {1}:
            return vmapped(*args)
        one = [a if ax is None else jax.tree.map(lambda x, ax=ax: jnp.squeeze(x, ax), a)
               for a, ax in zip(args, axes)]
        return jax.tree.map(lambda x: jnp.expand_dims(x, 0), fn(*one))

    return call

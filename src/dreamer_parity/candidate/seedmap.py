"""How the seed vmap executes the train step: batched, or one seed after another.

The run's programs are ``jax.vmap`` over seeds (:mod:`.loop`).  By default ``vmap`` turns
every matmul of the train step into a batched matmul over the seed axis.  XLA:CPU runs those
less efficiently than the same matmuls one seed at a time: on the 2-core machine the train
step of 3 seeds took 3.52 s batched against 2.98 s one seed after another (measured side by
side under load; 0.52 s for one seed alone on the idle machine; docs/PERFORMANCE.md).  On a
GPU, batching is what makes many seeds cheap.

:func:`per_seed` wraps a function with a custom batching rule
(``jax.custom_batching.custom_vmap``).  Under the seed vmap it runs
``jax.lax.map(fn, ..., batch_size=seed_batch)``: a loop over groups of ``seed_batch``
seeds, vmapped inside each group.  ``seed_batch=None`` keeps plain ``vmap``.  Called
without vmap, the wrapped function is ``fn`` itself.  With ``seed_batch=1`` each seed runs
the unbatched program; the results agree with the vmapped program's to float32 rounding
(tests/test_candidate_seedmap.py; the full-size parameters after one update were bitwise
equal when measured, docs/PERFORMANCE.md).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["per_seed", "default_seed_batch", "check_seed_batch"]


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

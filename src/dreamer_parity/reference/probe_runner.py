"""The reference runner with one diagnostic perturbation: mirror logits one ulp apart.

Never a protocol run.  It answers one question of the platform check's diagnosis
(docs/DEVIATIONS.md, T4): what do the reference's decoded rewards and values look like when
the two-hot heads' mirror logits are no longer bitwise equal, but differ at the last bit
of float32, as two matrix products that sum in different orders leave them?

Everything is :mod:`dreamer_parity.reference.runner`'s (same arguments, same outputs, the
protocol patches of ``decode`` and ``sampler``), plus one import-time replacement made
right after those patches: ``dreamerv3.jaxutils.TwoHotDist.__init__`` first passes its
logits through :func:`mirror_ulp` (odd numbers of bins only: the reward head, the critic
and the slow critic, 255 bins, ``dreamerv3/nets.py:434-443`` and ``jaxutils.py:212-224``
at 29eb964), in one of two places (:data:`PASSES`, from ``$DREAMER_PARITY_MIRROR_PROBE``,
default ``forward``):

``forward``
    the logits themselves (the values every use of the distribution sees; the gradient
    passes unchanged), as a forward product that sums mirror columns in different orders
    would leave them;
``gradient``
    the gradient reaching the logits (the forward values unchanged), as a weight gradient
    summed in different orders would; the heads' weights then drift apart update by update.

The replaced function's name is appended to ``patches.replaced`` in ``run.json``
(:func:`probe_name`: :data:`PROBE` for ``forward``, ``PROBE + " (gradient)"`` for
``gradient``), so a probe run always says what it is, and every round and ``python -m
dreamer_parity.keep`` refuse it (:func:`dreamer_parity.records.check_run_agrees`).

Command line: as the runner's (``--json`` or one option per argument); the normal entry
point is ``benchmarks/reference_mirror_probe.py``, which launches it through
:func:`dreamer_parity.reference.launch.launch` (``module``) with the environment variable
set.  An unknown value exits 2 before anything is written.
"""

from __future__ import annotations

import os
import sys

from dreamer_parity.reference import patches, runner

__all__ = ["PROBE", "PASSES", "ENV", "probe_name", "mirror_ulp", "mirror_ulp_gradient",
           "install", "main"]

#: The dotted name this module replaces.
PROBE = "dreamerv3.jaxutils.TwoHotDist.__init__"
#: Where the one-ulp difference goes: the logits' values or their gradient.
PASSES = ("forward", "gradient")
#: The environment variable that chooses the pass (unset: ``forward``).
ENV = "DREAMER_PARITY_MIRROR_PROBE"


def probe_name(where: str) -> str:
    """What ``run.json`` lists among ``patches.replaced`` for the pass ``where``.

    Raises:
      ValueError: ``where`` is not one of :data:`PASSES` (naming the variable).
    """
    if where not in PASSES:
        raise ValueError(f"${ENV}: unknown pass {where!r}; expected one of {PASSES}")
    return PROBE if where == "forward" else f"{PROBE} ({where})"


def _flip_upper(x):
    """float32[..., n], n odd: the upper half's lowest bit flipped (see :func:`mirror_ulp`)."""
    import jax
    import jax.numpy as jnp

    m = (x.shape[-1] - 1) // 2
    bits = jax.lax.bitcast_convert_type(x[..., m + 1:], jnp.uint32) ^ jnp.uint32(1)
    return jnp.concatenate([x[..., :m + 1], jax.lax.bitcast_convert_type(bits, jnp.float32)],
                           -1)


def _check(logits, name: str) -> None:
    import jax.numpy as jnp

    n = logits.shape[-1]
    if n % 2 != 1:
        raise ValueError(f"{name} needs an odd number of bins, got {n}")
    if logits.dtype != jnp.float32:
        raise ValueError(f"{name} needs float32 logits, got {logits.dtype}")


def mirror_ulp(logits):
    """The logits with the upper half of the bins moved by one unit in the last place.

    Args:
      logits: float32[..., n], n odd; bin ``m = (n - 1) // 2`` is the middle one.

    Returns:
      float32[..., n]: bins ``0 .. m`` as given; each bin ``j > m`` with the lowest bit of
      its float32 representation flipped (one ulp up or down, the direction set by that
      bit; a zero becomes the smallest subnormal, which XLA:CPU flushes to zero).  The
      gradient is the identity: the change goes through ``stop_gradient``, so only the
      forward values differ, as they would after a product summed in another order.

    Raises:
      ValueError: ``n`` is even or the dtype is not float32.
    """
    import jax
    import jax.numpy as jnp

    _check(logits, "mirror_ulp")
    m = (logits.shape[-1] - 1) // 2
    upper = logits[..., m + 1:]
    flipped = _flip_upper(logits)[..., m + 1:]
    upper = upper + jax.lax.stop_gradient(flipped - upper)
    return jnp.concatenate([logits[..., :m + 1], upper], -1)


def mirror_ulp_gradient(logits):
    """The logits unchanged, with the upper half of their gradient moved by one ulp.

    Args:
      logits: float32[..., n], n odd.

    Returns:
      float32[..., n], the same values; in the backward pass the cotangent's bins
      ``j > m`` have the lowest bit of their float32 representation flipped (as
      :func:`mirror_ulp` does to values), bins ``0 .. m`` pass unchanged.

    Raises:
      ValueError: ``n`` is even or the dtype is not float32.
    """
    import jax

    _check(logits, "mirror_ulp_gradient")

    @jax.custom_vjp
    def identity(x):
        return x

    identity.defvjp(lambda x: (x, None), lambda _, g: (_flip_upper(g),))
    return identity(logits)


def install(where: str = "forward") -> str:
    """Replace ``TwoHotDist.__init__`` by one that applies :func:`mirror_ulp`
    (``forward``) or :func:`mirror_ulp_gradient` (``gradient``) to odd-sized logits first
    (reference venv only; call after the protocol patches).

    Returns:
      :func:`probe_name` of ``where``.

    Raises:
      ValueError: an unknown ``where``, before anything is replaced.
    """
    name = probe_name(where)
    from dreamerv3 import jaxutils

    original = jaxutils.TwoHotDist.__init__
    perturb = mirror_ulp if where == "forward" else mirror_ulp_gradient

    def __init__(self, logits, bins, *args, **kwargs):
        if logits.shape[-1] % 2 == 1:
            logits = perturb(logits)
        original(self, logits, bins, *args, **kwargs)

    __init__.__qualname__ = "TwoHotDist.__init__"
    __init__.__doc__ = (f"TwoHotDist.__init__ after {perturb.__name__} "
                        "(dreamer_parity.reference.probe_runner).")
    jaxutils.TwoHotDist.__init__ = __init__
    return name


def _apply_with_probe(original, where: str = "forward"):
    def apply(*args, **kwargs):
        return [*original(*args, **kwargs), install(where)]
    return apply


def main(argv=None) -> None:
    """Run the runner (same arguments) with :func:`install` after the protocol patches;
    the pass from ``$DREAMER_PARITY_MIRROR_PROBE`` (exit 2, one line, when unknown)."""
    where = os.environ.get(ENV, "forward")
    try:
        probe_name(where)
    except ValueError as e:
        print(f"reference probe runner: error: {e}", file=sys.stderr)
        sys.exit(2)
    patches.apply = _apply_with_probe(patches.apply, where)
    runner.main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])

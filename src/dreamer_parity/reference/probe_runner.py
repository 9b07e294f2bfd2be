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
at 29eb964).  Its dotted name is appended to ``patches.replaced`` in ``run.json``, so a
probe run always says what it is; ``python -m dreamer_parity.keep`` takes only runs whose
replacements are the protocol's.

Command line: as the runner's (``--json`` or one option per argument); the normal entry
point is ``benchmarks/reference_mirror_probe.py``, which launches it through
:func:`dreamer_parity.reference.launch.launch` (``module``).
"""

from __future__ import annotations

import sys

from dreamer_parity.reference import patches, runner

__all__ = ["PROBE", "mirror_ulp", "install", "main"]

#: The dotted name this module replaces, as ``run.json`` lists it.
PROBE = "dreamerv3.jaxutils.TwoHotDist.__init__"


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

    n = logits.shape[-1]
    if n % 2 != 1:
        raise ValueError(f"mirror_ulp needs an odd number of bins, got {n}")
    if logits.dtype != jnp.float32:
        raise ValueError(f"mirror_ulp needs float32 logits, got {logits.dtype}")
    m = (n - 1) // 2
    upper = logits[..., m + 1:]
    bits = jax.lax.bitcast_convert_type(upper, jnp.uint32) ^ jnp.uint32(1)
    flipped = jax.lax.bitcast_convert_type(bits, jnp.float32)
    upper = upper + jax.lax.stop_gradient(flipped - upper)
    return jnp.concatenate([logits[..., :m + 1], upper], -1)


def install() -> str:
    """Replace ``TwoHotDist.__init__`` by one that applies :func:`mirror_ulp` to odd-sized
    logits first (reference venv only; call after the protocol patches).

    Returns:
      :data:`PROBE`.
    """
    from dreamerv3 import jaxutils

    original = jaxutils.TwoHotDist.__init__

    def __init__(self, logits, bins, *args, **kwargs):
        if logits.shape[-1] % 2 == 1:
            logits = mirror_ulp(logits)
        original(self, logits, bins, *args, **kwargs)

    __init__.__qualname__ = "TwoHotDist.__init__"
    __init__.__doc__ = "TwoHotDist.__init__ after mirror_ulp (dreamer_parity.reference.probe_runner)."
    jaxutils.TwoHotDist.__init__ = __init__
    return PROBE


def _apply_with_probe(original):
    def apply(*args, **kwargs):
        return [*original(*args, **kwargs), install()]
    return apply


def main(argv=None) -> None:
    """Run the runner (same arguments) with :func:`install` after the protocol patches."""
    patches.apply = _apply_with_probe(patches.apply)
    runner.main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])

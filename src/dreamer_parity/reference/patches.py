"""The protocol's optional patches of the reference, each an import-time replacement of one
function (reference venv only; nothing here is applied unless asked for).

``decode``
    ``ref``: nothing replaced (the stock pairwise sum of ``TwoHotDist.mean``,
    ``dreamerv3/jaxutils.py:226-250`` at 29eb964).
    ``exact``: ``dreamerv3.jaxutils.TwoHotDist.mean`` replaced by :func:`exact_mean`, the
    mirror-difference form (round 2, pair E)::

        m = (n - 1) // 2
        mean = sum((p[m+1:] - p[:m][::-1]) * b[m+1:]) + p[m] * b[m]

    For the reference's symmetric bins (``b[:m][::-1] == -b[m+1:]``,
    ``dreamerv3/nets.py:466-473``) this is the same expectation ``sum(p * b)``, computed so
    that equal mirror probabilities cancel exactly before any product: zero logits give
    exactly 0.0 under jit, whereas the stock pair sum gives a program-dependent constant
    (XLA may contract ``p1 * b1 + p3 * b3`` into a fused multiply-add).

``sampler``
    ``stock``: nothing replaced: every run's replay uses ``selectors.Uniform(seed=0)``
    (``embodied/replay/replay.py:20, 27``; ``dreamerv3/main.py:187``), deviation D2 / U2.
    ``per_run``: ``embodied.replay.selectors.Uniform.__init__`` replaced so that the
    selector's generator is ``numpy.random.default_rng([seed, 0x5EED])`` for the run seed
    (round 3).

:func:`apply` returns the dotted names it replaced, recorded in run.json.
"""

from __future__ import annotations

from dreamer_parity.params import DECODES, SAMPLERS  # the one definition of the values
from dreamer_parity.records import PATCH_TARGETS   # what each patch replaces, as run.json lists it

__all__ = ["DECODES", "SAMPLERS", "SAMPLER_SALT", "exact_mean", "apply", "restore"]

SAMPLER_SALT = 0x5EED

_ORIGINALS: dict = {}


def exact_mean(self):
    """Exact mirror-difference two-hot expectation (replacement of ``TwoHotDist.mean``).

    Args:
      self: a ``dreamerv3.jaxutils.TwoHotDist`` with ``probs`` f32[..., n] and ``bins``
        f32[n], n odd, bins symmetric about the middle bin.

    Returns:
      f32[...]: ``transbwd(sum((p[m+1:] - p[:m][::-1]) * b[m+1:]) + p[m] * b[m])`` with
      ``m = (n - 1) // 2``, summed over the last axis (and the event axes ``self.dims``
      are handled by the caller, as in the stock method).

    Raises:
      ValueError: an even number of bins (the protocol's 255 bins are odd).
    """
    n = self.logits.shape[-1]
    if n % 2 != 1:
        raise ValueError(f"exact two-hot mean needs an odd number of bins, got {n}")
    m = (n - 1) // 2
    p = self.probs
    b = self.bins
    lower = p[..., :m][..., ::-1]
    upper = p[..., m + 1:]
    wavg = ((upper - lower) * b[..., m + 1:]).sum(-1) + p[..., m] * b[..., m]
    return self.transbwd(wavg)


def _per_run_uniform_init(original, seed: int):
    """A ``Uniform.__init__`` that runs the stock one with ``[seed, 0x5EED]`` as its seed."""

    def __init__(self, seed_arg=0):
        original(self, [int(seed), SAMPLER_SALT])

    __init__.__qualname__ = "Uniform.__init__"
    __init__.__doc__ = (f"Uniform selector seeded with default_rng([{int(seed)}, 0x5EED]) "
                        "(dreamer_parity.reference.patches, sampler per_run).")
    return __init__


def apply(decode: str = "ref", sampler: str = "stock", seed: int = 0) -> list[str]:
    """Apply the chosen patches in this process (before the agent and replay are built).

    Args:
      decode: ``"ref"`` (nothing) or ``"exact"`` (replace ``TwoHotDist.mean``).
      sampler: ``"stock"`` (nothing) or ``"per_run"`` (replace ``Uniform.__init__``).
      seed: the run seed (non-negative int), used by ``per_run``.

    Returns:
      The dotted names of the replaced functions (empty for ``ref`` + ``stock``).

    Raises:
      ValueError: an unknown choice or a negative seed.
    """
    if decode not in DECODES:
        raise ValueError(f"reference.decode: unknown value {decode!r}; expected one of {DECODES}")
    if sampler not in SAMPLERS:
        raise ValueError(
            f"reference.sampler: unknown value {sampler!r}; expected one of {SAMPLERS}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    restore()
    replaced = []
    if decode == "exact":
        from dreamerv3 import jaxutils

        _ORIGINALS["decode"] = jaxutils.TwoHotDist.mean
        jaxutils.TwoHotDist.mean = exact_mean
        replaced.append(PATCH_TARGETS[("decode", "exact")])
    if sampler == "per_run":
        from embodied.replay import selectors

        _ORIGINALS["sampler"] = selectors.Uniform.__init__
        selectors.Uniform.__init__ = _per_run_uniform_init(_ORIGINALS["sampler"], seed)
        replaced.append(PATCH_TARGETS[("sampler", "per_run")])
    return replaced


def restore() -> None:
    """Undo :func:`apply` (put the stock functions back); a no-op when nothing is applied."""
    if "decode" in _ORIGINALS:
        from dreamerv3 import jaxutils

        jaxutils.TwoHotDist.mean = _ORIGINALS.pop("decode")
    if "sampler" in _ORIGINALS:
        from embodied.replay import selectors

        selectors.Uniform.__init__ = _ORIGINALS.pop("sampler")

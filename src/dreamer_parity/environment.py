"""What the protocol's environment can produce: the one place that knows its ranges.

The environment is gymnax CartPole-v1 with its 500-step episode limit
(``max_steps_in_episode = 500``, PROTOCOL.md section 1 row 53; the numpy port
:mod:`dreamer_parity.cartpole_port` has the same limit).  Every step while the pole is up
pays reward 1, so an episode's undiscounted **return** and its **length** (steps) are
whole numbers in ``[1, 500]``; the **mean** of a list of them lies within that list's
``[min, max]``, and a mean logged without its list (the study's candidate logged only the
mean) within ``[1, 500]``.

Every reader of evaluation and episode data (:func:`dreamer_parity.records.read_records`,
:func:`dreamer_parity.records.read_episodes`,
:func:`dreamer_parity.analysis.published.read_evals`, the study's per-seed S2 in
:mod:`dreamer_parity.analysis.reference_check`) asks this module before any statistic is
computed, and refuses a value outside in one line naming the file, the line and the field.

Standard library only: the reference's virtual environment imports
:mod:`dreamer_parity.records`, which imports this module.
"""

from __future__ import annotations

import math

__all__ = ["ENV_ID", "MAX_STEPS", "KINDS", "value_problem", "values_problem",
           "mean_problem", "describe"]

#: The environment of the protocol (gymnax ``CartPole-v1``).
ENV_ID = "CartPole-v1"
#: Its episode limit (steps): an episode ends at the latest at step 500.
MAX_STEPS = 500
#: Each kind of value the environment produces -> its closed range ``(lo, hi)``; every
#: kind is a whole number (steps, or the reward 1 summed over steps).
KINDS = {"return": (1, MAX_STEPS), "length": (1, MAX_STEPS)}


def describe(kind: str) -> str:
    """``"CartPole-v1's returns: whole numbers in [1, 500]"`` for ``kind``.

    Raises:
      KeyError: ``kind`` is not one of :data:`KINDS`.
    """
    lo, hi = KINDS[kind]
    return f"{ENV_ID}'s {kind}s: whole numbers in [{lo}, {hi}]"


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def value_problem(kind: str, v) -> str | None:
    """None when ``v`` is a value the environment can produce as a ``kind`` (``"return"``
    or ``"length"``: a whole number, int or integral float, in :data:`KINDS`); else the
    phrase to put after the field's name (``"holds 600, outside CartPole-v1's returns:
    whole numbers in [1, 500]"``).

    Raises:
      KeyError: ``kind`` is not one of :data:`KINDS`.
    """
    lo, hi = KINDS[kind]
    if (_number(v) and math.isfinite(v) and float(v).is_integer() and lo <= v <= hi):
        return None
    return f"holds {_short(v)}, outside {describe(kind)}"


def values_problem(kind: str, values) -> str | None:
    """:func:`value_problem` of the first value of the list ``values`` that is not one
    the environment produces, None when all are."""
    for v in values:
        p = value_problem(kind, v)
        if p is not None:
            return p
    return None


def mean_problem(kind: str, mean, values=None, rtol: float = 1e-9) -> str | None:
    """None when ``mean`` can be the mean of ``kind`` values: a finite number within
    ``[min(values), max(values)]`` (with ``rtol`` of ``max(1, |bound|)``, the writers'
    summation order) when the list is given and not empty, else within the kind's range;
    otherwise the phrase to put after the field's name.

    Raises:
      KeyError: ``kind`` is not one of :data:`KINDS`.
    """
    lo, hi = KINDS[kind]
    what = f"outside {ENV_ID}'s {kind}s [{lo}, {hi}]"
    if values:
        nums = [v for v in values if _number(v) and math.isfinite(v)]
        if len(nums) == len(values):
            lo, hi = min(nums), max(nums)
            what = f"outside its list's [min, max] [{_short(lo)}, {_short(hi)}]"
    if not (_number(mean) and math.isfinite(mean)):
        return f"holds {_short(mean)}, not a finite number"
    if not (lo - rtol * max(1.0, abs(lo)) <= mean <= hi + rtol * max(1.0, abs(hi))):
        return f"holds {_short(mean)}, {what}"
    return None


def _short(v) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:40] + "..."

"""A synthetic training batch in the layout of :func:`dreamer_parity.candidate.agent.train_step`.

For speed measurements and tests that need a batch but no environment: the step's cost
does not depend on the values.  NumPy only.
"""

from __future__ import annotations

import numpy as np

from .config import AgentConfig

__all__ = ["synthetic_batch"]


def synthetic_batch(cfg: AgentConfig, batch: int, length: int, seed: int = 0) -> dict:
    """A batch dict with the train step's layout: episodes of about 20 rows, reward 1.

    Args:
      cfg: the agent's config (``obs_dim``, ``num_actions``, ``deter``, ``stoch``,
        ``classes``).
      batch, length: the leading shape ``[batch, length]`` of every array.
      seed: NumPy generator seed; the same seed gives the same arrays.

    Returns:
      ``{"vector": f32[B, T, obs_dim], "reward": f32[B, T], "is_first", "is_last",
      "is_terminal": bool[B, T], "action": i32[B, T], "deter": f32[B, T, deter],
      "stoch": i32[B, T, stoch]}``.
    """
    rng = np.random.default_rng(seed)
    is_first = rng.random((batch, length)) < 0.05
    is_first[:, 0] = True
    is_last = np.roll(is_first, -1, 1)
    is_last[:, -1] = False
    return {"vector": rng.normal(size=(batch, length, cfg.obs_dim)).astype(np.float32),
            "reward": np.where(is_first, 0.0, 1.0).astype(np.float32),
            "is_first": is_first, "is_last": is_last, "is_terminal": is_last.copy(),
            "action": rng.integers(0, cfg.num_actions, (batch, length)).astype(np.int32),
            "deter": rng.normal(size=(batch, length, cfg.deter)).astype(np.float32) * 0.3,
            "stoch": rng.integers(0, cfg.classes, (batch, length, cfg.stoch)).astype(np.int32)}

"""A tiny stand-in agent with the signatures of docs/CANDIDATE_AGENT.md, for the loop's tests.

A linear policy; ``train_step`` nudges the parameters, counts updates, moves a fake
return normaliser, echoes the stored latents plus one as its posteriors and returns a few
metrics, one of which is NaN on every other update (to test the NaN-skipping window).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

@dataclass(frozen=True)
class StubConfig:
    deter: int = 8
    stoch: int = 4
    classes: int = 3
    obs_dim: int = 4
    num_actions: int = 2
    retnorm_limit: float = 1.0


def config_for_profile(profile: str) -> StubConfig:
    """The stub's one config, whatever the profile (``benchmarks/accel_check.py --agent``)."""
    return StubConfig()


def init(key, cfg):
    k1, k2 = jax.random.split(key)
    params = {
        "enc": {"w": jax.random.normal(k1, (cfg.obs_dim, cfg.deter)) * 0.5},
        "actor": {"w": jax.random.normal(k2, (cfg.deter, cfg.num_actions)) * 0.1,
                  "b": jnp.zeros((cfg.num_actions,))},
    }
    return {"params": params, "opt_state": {"t": jnp.zeros((), jnp.int32)},
            "slow_critic": {"w": jnp.zeros((2,))},
            "retnorm": {"lo": jnp.zeros(()), "hi": jnp.zeros(())},
            "updates": jnp.zeros((), jnp.int32)}


def initial_carry(cfg, n):
    return {"deter": jnp.zeros((n, cfg.deter)), "stoch": jnp.zeros((n, cfg.stoch, cfg.classes)),
            "prev_action": jnp.zeros((n,), jnp.int32)}


def policy_step(cfg, params, carry, obs, is_first, key=None, draws=None):
    prev = jnp.where(is_first[:, None], 0.0, carry["deter"])
    deter = jnp.tanh(obs @ params["enc"]["w"] + 0.5 * prev)
    logits = deter @ params["actor"]["w"] + params["actor"]["b"]
    action = jax.random.categorical(key, logits).astype(jnp.int32)
    stoch_idx = (jnp.abs(deter[:, :cfg.stoch]) * cfg.classes).astype(jnp.int32) % cfg.classes
    carry = {"deter": deter, "stoch": jax.nn.one_hot(stoch_idx, cfg.classes),
             "prev_action": action}
    return action, carry, {"deter": deter, "stoch": stoch_idx}


def train_step(cfg, state, batch, key=None, draws=None):
    p = state["params"]
    g = jnp.mean(batch["vector"]) * 1e-3
    params = jax.tree.map(lambda x: x - g, p)
    n = state["updates"] + 1
    metrics = {
        "vector_loss": jnp.mean(batch["vector"] ** 2),
        "reward_loss": jnp.mean(batch["reward"][:, 1:]),
        "ctx_action": jnp.mean(batch["action"][:, 0].astype(jnp.float32)),
        "maybe_nan": jnp.where(n % 2 == 0, jnp.nan, n.astype(jnp.float32)),
        "opt_loss": jnp.mean(jnp.abs(batch["vector"])),
    }
    outs = {"deter": batch["deter"][:, 1:] + 1.0, "stoch": batch["stoch"][:, 1:] + 1}
    retnorm = {"lo": state["retnorm"]["lo"] - 0.1, "hi": state["retnorm"]["hi"] + 0.5}
    new = dict(state, params=params, updates=n, retnorm=retnorm)
    return new, outs, metrics


def param_count(params):
    return sum(x.size for x in jax.tree.leaves(params))


"""Evaluation episodes (PROTOCOL.md section 4.1), pure and jit/vmap-able.

``episodes`` fresh gymnax CartPole-v1 envs, one episode each (only the first counts), at
most 500 steps, the policy's **sampled** actions, a zero policy carry with ``is_first``
on the first step only, the given (latest) parameters.  The randomness comes from one
fixed ``eval_key`` per seed, so every evaluation of a seed uses the same initial states
and the same noise; only the parameters change.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from . import env as envlib

__all__ = ["evaluate"]


def evaluate(agent, cfg, params, eval_key, episodes: int, max_steps: int = envlib.MAX_STEPS):
    """Run one evaluation episode in each of ``episodes`` envs.

    Args:
      agent: the agent module (``initial_carry``, ``policy_step``).
      cfg: its config (``num_actions`` is read).
      params: the agent's parameters (``state["params"]``).
      eval_key: the seed's fixed evaluation key.
      episodes: number of envs (static).
      max_steps: step limit (static; the env truncates at 500 anyway).

    Returns:
      dict: ``returns`` f32[episodes] (sum of the step rewards while not done),
      ``lengths`` i32[episodes], ``actions_ok`` bool (every action in ``[0, num_actions)``),
      ``latents_finite`` bool (every policy ``deter`` finite).

    A done env keeps being fed its last observation; its outputs are ignored.  The loop
    stops when every env is done or after ``max_steps`` policy steps.
    """
    k_reset, k_pol = jax.random.split(eval_key)
    state, row = envlib.reset_rows(jax.random.split(k_reset, episodes))
    carry = agent.initial_carry(cfg, episodes)
    n_act = int(cfg.num_actions)

    def cond(c):
        t, done = c[0], c[5]
        return (t < max_steps) & ~jnp.all(done)

    def body(c):
        t, state, obs, is_first, carry, done, ret, length, a_ok, l_ok = c
        action, carry, latent = agent.policy_step(
            cfg, params, carry, obs, is_first, key=jax.random.fold_in(k_pol, t))
        obs_s, state_s, reward, term, trunc = jax.vmap(envlib._step_one)(state, action)
        live = ~done
        a_ok = a_ok & jnp.all(~live | ((action >= 0) & (action < n_act)))
        l_ok = l_ok & jnp.all(~live[:, None] | jnp.isfinite(latent["deter"]))
        ret = ret + jnp.where(live, reward, 0.0)
        length = length + live.astype(jnp.int32)
        sel = lambda a, b: jnp.where(live.reshape(live.shape + (1,) * (a.ndim - 1)), a, b)
        state = jax.tree.map(sel, state_s, state)
        obs = sel(obs_s, obs)
        done = done | (live & (term | trunc))
        return (t + 1, state, obs, jnp.zeros_like(is_first), carry, done, ret, length,
                a_ok, l_ok)

    init = (jnp.zeros((), jnp.int32), state, row["vector"], row["is_first"], carry,
            jnp.zeros((episodes,), bool), jnp.zeros((episodes,), jnp.float32),
            jnp.zeros((episodes,), jnp.int32), jnp.ones((), bool), jnp.ones((), bool))
    out = jax.lax.while_loop(cond, body, init)
    return {"returns": out[6], "lengths": out[7], "actions_ok": out[8], "latents_finite": out[9]}

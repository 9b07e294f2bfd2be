"""gymnax CartPole-v1 with the protocol's row semantics, for a vector of envs inside jit.

Rows follow PROTOCOL.md section 2.1 (the same rows :class:`dreamer_parity.cartpole_port.
CartPolePort` emits):

* a reset row: the reset observation, reward 0, ``is_first``;
* one row per env step with that step's reward, ``is_last = terminated or truncated``
  (truncation when the post-step time reaches ``max_steps_in_episode`` = 500),
  ``is_terminal = terminated``;
* the env is *held* on the ``is_last`` row: the next row is the next episode's reset row
  (the action chosen on the ``is_last`` row is not applied).

gymnax 1.0's auto-reset ``env.step`` is not used; :func:`step_rows` calls
``CartPole.step_env`` / ``reset_env`` directly so that resets are under our control.
All functions are pure and jit/vmap-able.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from gymnax.environments.classic_control.cartpole import CartPole, EnvState

__all__ = ["ENV", "ENV_PARAMS", "MAX_STEPS", "reset_rows", "step_rows", "row_dict", "EnvState"]

ENV = CartPole()
ENV_PARAMS = ENV.default_params
MAX_STEPS = int(ENV_PARAMS.max_steps_in_episode)


def row_dict(vector, reward, is_first, is_last, is_terminal) -> dict:
    """A row: ``vector`` f32[..., 4], ``reward`` f32[...], three bool[...] flags."""
    return {
        "vector": jnp.asarray(vector, jnp.float32),
        "reward": jnp.asarray(reward, jnp.float32),
        "is_first": jnp.asarray(is_first, bool),
        "is_last": jnp.asarray(is_last, bool),
        "is_terminal": jnp.asarray(is_terminal, bool),
    }


def _reset_one(key):
    obs, state = ENV.reset_env(key, ENV_PARAMS)
    state = state.replace(time=jnp.asarray(state.time, jnp.int32))
    return obs, state


def reset_rows(keys):
    """Reset ``n`` envs.

    Args:
      keys: PRNG keys, shape ``[n, 2]`` (uint32) or typed keys ``[n]``.

    Returns:
      ``(state, row)``: a batched gymnax ``EnvState`` (leaves ``[n]``; ``time`` int32) and
      the reset row (:func:`row_dict`, reward 0, ``is_first`` True).

    Source: gymnax ``CartPole.reset_env`` (uniform(-0.05, 0.05) on the four state variables).
    """
    obs, state = jax.vmap(_reset_one)(keys)
    n = obs.shape[0]
    zeros = jnp.zeros((n,), bool)
    return state, row_dict(obs, jnp.zeros((n,), jnp.float32), jnp.ones((n,), bool), zeros, zeros)


def _step_one(state, action):
    obs, nstate, reward, terminated, _ = ENV.step_env(
        jax.random.PRNGKey(0), state, action, ENV_PARAMS)  # CartPole.step_env ignores the key
    nstate = nstate.replace(time=jnp.asarray(nstate.time, jnp.int32))
    truncated = ENV.is_truncated(nstate, ENV_PARAMS)
    return obs, nstate, jnp.asarray(reward, jnp.float32), terminated, truncated


def step_rows(state, row, action, reset_keys):
    """Advance ``n`` envs by one row each.

    An env whose current ``row`` is ``is_last`` is reset (its ``action`` is ignored); the
    others step with ``action``.

    Args:
      state: batched ``EnvState`` (leaves ``[n]``).
      row: the current rows (:func:`row_dict`, leading dim ``n``).
      action: int32 ``[n]`` action indices in {0, 1}.
      reset_keys: PRNG keys ``[n, 2]`` used by the envs that reset.

    Returns:
      ``(state, next_row, stepped)`` where ``stepped`` bool[n] marks the envs that took an
      env step (False for the ones that reset).

    Source: PROTOCOL.md 2.1; gymnax 1.0 ``CartPole.step_env`` and ``Environment.is_truncated``
    (``time >= max_steps_in_episode``).
    """
    obs_s, state_s, reward, term, trunc = jax.vmap(_step_one)(state, action)
    state_r, row_r = reset_rows(reset_keys)
    reset = row["is_last"]
    stepped_row = row_dict(obs_s, reward, jnp.zeros_like(reset), term | trunc, term)
    sel = lambda a, b: jnp.where(reset.reshape(reset.shape + (1,) * (a.ndim - 1)), a, b)
    new_state = jax.tree.map(sel, state_r, state_s)
    new_row = jax.tree.map(sel, row_r, stepped_row)
    return new_state, new_row, ~reset

"""The reference optimizer as an optax chain (reference jaxutils.py:398-550, 660-713).

Per parameter tensor: AGC (clip 0.3, pmin 1e-3) -> RMS scaling (beta2 0.999, eps 1e-20,
bias-corrected, own step counter) -> momentum (beta1 0.9, bias-corrected, own counter) ->
scale by -lr -> scale by the linear warm-up clip(count / warmup, 0, 1) where count is the
number of previous updates (so the first update is multiplied by 0).  Weight decay and
global clipping are off in the reference config and not implemented.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

__all__ = ["scale_by_agc", "scale_by_rms", "scale_by_momentum", "warmup_schedule", "make",
           "apply"]

f32 = jnp.float32
treemap = jax.tree_util.tree_map


def scale_by_agc(clip: float = 0.3, pmin: float = 1e-3) -> optax.GradientTransformation:
    """Adaptive gradient clipping per tensor (jaxutils.py:660-674):
    u = g / max(1, ||g||_2 / (clip * max(pmin, ||p||_2))).  Needs ``params``."""

    def init_fn(params):
        del params
        return optax.EmptyState()

    def update_fn(updates, state, params=None):
        if params is None:
            raise ValueError("scale_by_agc: params are required")

        def fn(param, update):
            unorm = jnp.linalg.norm(update.ravel(), 2)
            pnorm = jnp.linalg.norm(param.ravel(), 2)
            upper = clip * jnp.maximum(pmin, pnorm)
            return update * (1 / jnp.maximum(1.0, unorm / upper))

        return treemap(fn, params, updates), state

    return optax.GradientTransformation(init_fn, update_fn)


class RmsState(NamedTuple):
    step: jnp.ndarray  # i32 scalar, updates done by this transformation
    nu: optax.Updates  # EMA of squared updates


def scale_by_rms(beta: float = 0.999, eps: float = 1e-20) -> optax.GradientTransformation:
    """nu = beta*nu + (1-beta)*u^2;  u / (sqrt(nu / (1 - beta^t)) + eps)  (jaxutils.py:677-692)."""

    def init_fn(params):
        return RmsState(jnp.zeros((), jnp.int32), treemap(lambda t: jnp.zeros_like(t, f32), params))

    def update_fn(updates, state, params=None):
        del params
        step = optax.safe_int32_increment(state.step)
        nu = treemap(lambda v, u: beta * v + (1 - beta) * (u * u), state.nu, updates)
        nu_hat = optax.tree.bias_correction(nu, beta, step)
        updates = treemap(lambda u, v: u / (jnp.sqrt(v) + eps), updates, nu_hat)
        return updates, RmsState(step, nu)

    return optax.GradientTransformation(init_fn, update_fn)


class MomentumState(NamedTuple):
    step: jnp.ndarray  # i32 scalar
    mu: optax.Updates


def scale_by_momentum(beta: float = 0.9) -> optax.GradientTransformation:
    """mu = beta*mu + (1-beta)*u;  mu / (1 - beta^t)  (jaxutils.py:695-713, nesterov off)."""

    def init_fn(params):
        return MomentumState(jnp.zeros((), jnp.int32),
                             treemap(lambda t: jnp.zeros_like(t, f32), params))

    def update_fn(updates, state, params=None):
        del params
        step = optax.safe_int32_increment(state.step)
        mu = optax.tree.update_moment(updates, state.mu, beta, 1)
        return optax.tree.bias_correction(mu, beta, step), MomentumState(step, mu)

    return optax.GradientTransformation(init_fn, update_fn)


def warmup_schedule(warmup: int):
    """count -> clip(count / warmup, 0, 1) as float32 (jaxutils.py:510-513); 1 if warmup 0."""

    def schedule(count):
        if warmup <= 0:
            return jnp.ones((), f32)
        return jnp.clip(count.astype(f32) / warmup, 0, 1)

    return schedule


def make(cfg) -> optax.GradientTransformation:
    """The full chain for AgentConfig ``cfg`` (fields agc, pmin, beta1, beta2, eps, lr, warmup)."""
    return optax.chain(
        scale_by_agc(cfg.agc, cfg.pmin),
        scale_by_rms(cfg.beta2, cfg.eps),
        scale_by_momentum(cfg.beta1),
        optax.scale(-cfg.lr),
        optax.scale_by_schedule(warmup_schedule(cfg.warmup)),
    )


def apply(tx, grads, opt_state, params):
    """One update.  Returns (new_params, new_opt_state, metrics) with metrics
    opt_grad_norm (global norm of the raw grads), opt_update_norm, opt_param_norm (of the
    new params) and opt_grad_steps (updates done including this one, from the schedule's
    counter), all float32 scalars (jaxutils.py:483-540)."""
    updates, opt_state = tx.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    steps = opt_state[-1].count
    metrics = {
        "opt_grad_norm": optax.tree.norm(grads),
        "opt_update_norm": optax.tree.norm(updates),
        "opt_param_norm": optax.tree.norm(params),
        "opt_grad_steps": steps.astype(f32),
    }
    return params, opt_state, metrics

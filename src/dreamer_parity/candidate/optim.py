"""The reference optimizer as an optax chain (reference jaxutils.py:398-550, 660-713).

Per parameter tensor: AGC (clip 0.3, pmin 1e-3) -> RMS scaling (beta2 0.999, eps 1e-20,
bias-corrected, own step counter) -> momentum (beta1 0.9, bias-corrected, own counter) ->
scale by -lr -> scale by the linear warm-up clip(count / warmup, 0, 1) where count is the
number of previous updates (so the first update is multiplied by 0).  Weight decay and
global clipping are off in the reference config and not implemented.

The norms (AGC's per tensor, the metrics' global ones) are taken in one of two forms,
``AgentConfig.opt_norms`` (:func:`.config.resolve`): ``"tensor"``, one reduction per tensor, as
the reference; or ``"chunked"``, every tensor in one pass (:func:`chunked_norms`), which
on a GPU is a handful of kernels instead of about 250 (docs/PERFORMANCE.md, "GPU kernels
per update").  The two differ only in the order of float32 summation.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .config import resolve

__all__ = ["scale_by_agc", "scale_by_rms", "scale_by_momentum", "warmup_schedule", "make",
           "apply", "chunked_norms", "CHUNK"]

f32 = jnp.float32
treemap = jax.tree_util.tree_map


#: Elements per chunk of :func:`chunked_norms`.
CHUNK = 1024
#: The resolved forms of the norms (``AgentConfig.opt_norms`` without ``auto``).
_NORMS = ("tensor", "chunked")


def _check_norms(norms: str, where: str) -> None:
    if norms not in _NORMS:
        raise ValueError(f"{where}: norms must be one of {_NORMS}, got {norms!r}")


def chunked_norms(leaves, groups=None, chunk: int = CHUNK):
    """L2 norms of groups of arrays in one pass: every array flattened, zero-padded to a
    multiple of ``chunk`` elements and concatenated; the chunks' sums of squares (one
    reduction); each group's chunks added (one segment sum); the square root.

    Args:
      leaves: a list of float arrays of any shapes.
      groups: the group of each array (ints 0..G-1), or None for one group per array.
      chunk: elements per chunk.

    Returns:
      f32[G], the L2 norm of each group's elements together (of each array when
      ``groups`` is None).  The same value as a reduction per group up to the order of
      float32 summation.

    Raises:
      ValueError: ``groups`` not one int per array, or no arrays.
    """
    if not leaves:
        raise ValueError("optim.chunked_norms: no arrays")
    groups = list(range(len(leaves))) if groups is None else list(groups)
    if len(groups) != len(leaves):
        raise ValueError(f"optim.chunked_norms: {len(groups)} groups for {len(leaves)} arrays")
    pieces, ids = [], []
    for x, g in zip(leaves, groups):
        v = jnp.ravel(x).astype(f32)
        pad = (-v.size) % chunk
        pieces += [v, jnp.zeros((pad,), f32)] if pad else [v]   # one concatenation, no pads
        ids += [g] * ((v.size + pad) // chunk)
    flat = jnp.concatenate(pieces).reshape(-1, chunk)
    sums = (flat * flat).sum(1)
    return jnp.sqrt(jax.ops.segment_sum(sums, np.asarray(ids, np.int32),
                                        num_segments=max(groups) + 1, indices_are_sorted=True))


def scale_by_agc(clip: float = 0.3, pmin: float = 1e-3,
                 norms: str = "tensor") -> optax.GradientTransformation:
    """Adaptive gradient clipping per tensor (jaxutils.py:660-674):
    u = g / max(1, ||g||_2 / (clip * max(pmin, ||p||_2))).  Needs ``params``.
    ``norms``: ``"tensor"`` (a reduction per tensor) or ``"chunked"``
    (:func:`chunked_norms`)."""
    _check_norms(norms, "scale_by_agc")

    def init_fn(params):
        del params
        return optax.EmptyState()

    def update_fn(updates, state, params=None):
        if params is None:
            raise ValueError("scale_by_agc: params are required")
        if norms == "chunked":
            u_leaves, tree = jax.tree_util.tree_flatten(updates)
            p_leaves = tree.flatten_up_to(params)
            n = len(u_leaves)
            both = chunked_norms(u_leaves + p_leaves)
            upper = clip * jnp.maximum(pmin, both[n:])
            mult = 1 / jnp.maximum(1.0, both[:n] / upper)
            return tree.unflatten([u * mult[i] for i, u in enumerate(u_leaves)]), state

        def fn(param, update):
            unorm = jnp.linalg.norm(update.ravel(), 2)
            pnorm = jnp.linalg.norm(param.ravel(), 2)
            upper = clip * jnp.maximum(pmin, pnorm)
            return update * (1 / jnp.maximum(1.0, unorm / upper))

        return treemap(fn, params, updates), state

    return optax.GradientTransformation(init_fn, update_fn)


class RmsState(NamedTuple):
    """State of `scale_by_rms`: the update count and the EMA of squared updates (jaxutils.py:677-692)."""

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
    """State of `scale_by_momentum`: the update count and the EMA of updates (jaxutils.py:695-713)."""

    step: jnp.ndarray  # i32 scalar, updates done by this transformation
    mu: optax.Updates  # EMA of updates


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


def make(cfg, norms: str | None = None) -> optax.GradientTransformation:
    """The full chain for AgentConfig ``cfg`` (fields agc, pmin, beta1, beta2, eps, lr, warmup).
    ``norms``: the form of AGC's norms as the caller resolved it (``"tensor"`` or
    ``"chunked"``), or None to resolve ``cfg.opt_norms`` here (:func:`.config.resolve`)."""
    return optax.chain(
        scale_by_agc(cfg.agc, cfg.pmin, norms or resolve("opt_norms", cfg.opt_norms)),
        scale_by_rms(cfg.beta2, cfg.eps),
        scale_by_momentum(cfg.beta1),
        optax.scale(-cfg.lr),
        optax.scale_by_schedule(warmup_schedule(cfg.warmup)),
    )


def apply(tx, grads, opt_state, params, norms: str = "tensor"):
    """One update.  Returns (new_params, new_opt_state, metrics) with metrics
    opt_grad_norm (global norm of the raw grads), opt_update_norm, opt_param_norm (of the
    new params) and opt_grad_steps (updates done including this one, from the schedule's
    counter), all float32 scalars (jaxutils.py:483-540).  ``norms``: the form of the three
    global norms, ``"tensor"`` (``optax.tree.norm``) or ``"chunked"`` (one
    :func:`chunked_norms` pass over the three trees)."""
    _check_norms(norms, "optim.apply")
    updates, opt_state = tx.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    steps = opt_state[-1].count
    if norms == "chunked":
        trees = [jax.tree_util.tree_leaves(t) for t in (grads, updates, params)]
        g, u, p = chunked_norms(sum(trees, []), [i for i, t in enumerate(trees) for _ in t])
    else:
        g, u, p = (optax.tree.norm(t) for t in (grads, updates, params))
    metrics = {"opt_grad_norm": g, "opt_update_norm": u, "opt_param_norm": p,
               "opt_grad_steps": steps.astype(f32)}
    return params, opt_state, metrics

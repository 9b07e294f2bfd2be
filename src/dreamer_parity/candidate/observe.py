"""The observe scan of the train step: posterior steps over the replay rows (reference
agent.py:225-249, nets.py:53-76), and the three ways its gradient is taken
(``AgentConfig.observe_grad``, resolved by :func:`.config.resolve`).

- ``"scan"`` (``auto`` on the CPU and the TPU): JAX differentiates the scan.  Its backward
  loop reads what the forward loop stored, and adds each kernel's gradient into an
  accumulator at every step.
- ``"remat"``: the same, with each step recomputed in the backward loop
  (``jax.checkpoint``) instead of stored.
- ``"batched"`` (``auto`` on a GPU): a custom VJP.  The forward loop stores only the
  latents and logits (one row block per step).  For the backward pass, every step's
  pre-activations and norm statistics are recomputed at once, over all T x B rows
  (:func:`rssm.observe_step` with a recording ``at``).  The backward loop then carries only
  the latents' cotangents: each step is the VJP of one posterior step with respect to its
  input latents, its pre-activations and norm statistics pinned to the recorded ones
  (:func:`pin`, :func:`pinned_stat`), so no matmul or norm statistic is recomputed and no
  weight gradient is formed inside the loop.  The gradients of the parameters and of the
  step's inputs ``xa``/``ea`` are one VJP over all rows after the loop, from the total
  cotangent of each step's outputs (the adjoint method).

All three compute the same function and its gradient; the forward values are the same
bits.  The gradients differ in the order of float32 summation (and ``"batched"`` evaluates
the step's derivatives at pre-activations computed with T x B rows per matmul instead of
B), so they agree to float32 rounding, not bit for bit (tests/test_candidate_observe.py).
``"batched"`` halves XLA:GPU's kernels per update (docs/PERFORMANCE.md, "GPU kernels per
update").
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from . import nets, rssm
from .config import resolve

__all__ = ["observe", "pin", "pinned_stat"]


@jax.custom_vjp
def pin(x, stored):
    """The value of ``stored`` with the gradient of ``x``: the cotangent passes to ``x``
    unchanged, ``stored`` gets none.  Same shape and dtype for both."""
    return stored


def _pin_fwd(x, stored):
    return stored, None


def _pin_bwd(_, g):
    return g, None


pin.defvjp(_pin_fwd, _pin_bwd)


@partial(jax.custom_vjp, nondiff_argnums=(2,))
def pinned_stat(x, stat, axis):
    """The value of ``stat``, a stored :func:`.nets.rms_stat` of ``x`` over ``axis`` (its
    shape: ``x``'s with ``axis`` kept as 1), with the gradient of that statistic at it:
    d stat / d x = -stat^3 * x / n (n: the elements reduced), read from ``stat`` instead of
    reducing ``x`` again.  ``stat`` gets no gradient."""
    return stat


def _pinned_stat_fwd(x, stat, axis):
    return stat, (x, stat)


def _pinned_stat_bwd(axis, res, g):
    x, stat = res
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    n = 1
    for a in axes:
        n *= x.shape[a]
    return -(stat * stat * stat) * (g / n) * x, None


pinned_stat.defvjp(_pinned_stat_fwd, _pinned_stat_bwd)


class _Record:
    """An ``at`` for :func:`rssm.observe_step` that keeps each pre-activation and norm
    statistic in ``values`` (rows on axis 0), leaving the step unchanged."""

    def __init__(self):
        self.values = {}

    def pre(self, name, y, rows):
        self.values[name] = jnp.moveaxis(y, rows, 0)
        return y

    def stat(self, name, x, rows, axis):
        r = nets.rms_stat(x, axis)
        self.values[name + "/rms"] = jnp.moveaxis(r, rows, 0)
        return r


class _Pin:
    """An ``at`` for :func:`rssm.observe_step` that pins each pre-activation and norm
    statistic to ``stored`` (a :class:`_Record`'s values, one step's rows or all)."""

    def __init__(self, stored: dict):
        self.stored = stored

    def pre(self, name, y, rows):
        return pin(y, jnp.moveaxis(self.stored[name], 0, rows))

    def stat(self, name, x, rows, axis):
        return pinned_stat(x, jnp.moveaxis(self.stored[name + "/rms"], 0, rows), axis)


def _previous(first, seq):
    """The step inputs of the latents: ``first`` f32[B, ...] then ``seq`` f32[T, B, ...]
    without its last step."""
    return jnp.concatenate([first[None], seq[:-1]], 0)


def _rows(x):
    """f32[T, B, ...] -> f32[T*B, ...]."""
    return x.reshape((-1,) + x.shape[2:])


def _scan(cfg, p, deter0, stoch0, xa, ea, is_first, noise, wt=None, remat=False,
          packed=False):
    """The forward scan.  ``packed``: each step's three outputs leave the loop as one
    f32[B, D + 2*S*K] row block (one store per step instead of three), split after it."""
    D, SK = cfg.deter, cfg.stoch * cfg.classes

    def obs_step(carry, xs):
        deter, stoch = carry
        xa_t, ea_t, first, nz = xs
        deter, stoch, logit = rssm.observe_step(p, cfg, deter, stoch, xa_t, ea_t, first, nz, wt)
        if packed:
            B = deter.shape[0]
            return (deter, stoch), jnp.concatenate(
                [deter, stoch.reshape(B, SK), logit.reshape(B, SK)], -1)
        return (deter, stoch), (deter, stoch, logit)

    step = jax.checkpoint(obs_step) if remat else obs_step
    _, outs = jax.lax.scan(step, (deter0, stoch0), (xa, ea, is_first, noise))
    if not packed:
        return outs
    lat = stoch0.shape[1:]
    T, B = outs.shape[:2]
    return (outs[..., :D], outs[..., D:D + SK].reshape((T, B) + lat),
            outs[..., D + SK:].reshape((T, B) + lat))


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def _batched(cfg, p, deter0, stoch0, xa, ea, is_first, noise):
    return _scan(cfg, p, deter0, stoch0, xa, ea, is_first, noise, packed=True)


def _batched_fwd(cfg, p, deter0, stoch0, xa, ea, is_first, noise):
    deter, stoch, logit = _scan(cfg, p, deter0, stoch0, xa, ea, is_first, noise, packed=True)
    return (deter, stoch, logit), (p, deter0, stoch0, xa, ea, is_first, noise, deter, stoch)


def _batched_bwd(cfg, res, cts):
    p, deter0, stoch0, xa, ea, is_first, noise, deter, stoch = res
    g_deter, g_stoch, g_logit = cts
    T, B = xa.shape[:2]
    D = cfg.deter
    d_in, s_in = _previous(deter0, deter), _previous(stoch0, stoch)
    rows = [_rows(x) for x in (d_in, s_in, xa, ea, is_first, noise)]

    # Every step's pre-activations at once, over all T*B rows.
    rec = _Record()
    rssm.observe_step(p, cfg, *rows, at=rec)
    record = rec.values
    stored = {k: v.reshape((T, B) + v.shape[1:]) for k, v in record.items()}

    def back(tot, xs):
        # ``tot``: the total cotangents of this step's output latents (their loss terms plus
        # what the later steps sent back); ``gd``/``gs``: the previous step's loss terms
        td, ts = tot
        gd, gs, gl, d, s, xa_t, ea_t, first, nz, st = xs
        _, pull = jax.vjp(lambda d, s: rssm.observe_step(
            p, cfg, d, s, xa_t, ea_t, first, nz, at=_Pin(st)), d, s)
        cd, cs = pull((td, ts, gl))
        # the totals leave the loop as one row block (one store per step)
        return (cd + gd, cs + gs), jnp.concatenate([td, ts.reshape(B, -1)], -1)

    shift = lambda g: jnp.concatenate([jnp.zeros_like(g[:1]), g[:-1]], 0)   # step t gets t-1
    (c_deter0, c_stoch0), tot = jax.lax.scan(
        back, (g_deter[-1], g_stoch[-1]),
        (shift(g_deter), shift(g_stoch), g_logit, d_in, s_in, xa, ea, is_first, noise, stored),
        reverse=True)

    # The parameters' and the inputs' gradients: one VJP over all rows.
    d_r, s_r, xa_r, ea_r, first_r, nz_r = rows
    _, pull = jax.vjp(lambda p, xa, ea: rssm.observe_step(
        p, cfg, d_r, s_r, xa, ea, first_r, nz_r, at=_Pin(record)), p, xa_r, ea_r)
    tot = _rows(tot)
    g_p, g_xa, g_ea = pull((tot[:, :D], tot[:, D:].reshape(s_r.shape), _rows(g_logit)))
    return (g_p, c_deter0, c_stoch0, g_xa.reshape(xa.shape), g_ea.reshape(ea.shape),
            None, None)


_batched.defvjp(_batched_fwd, _batched_bwd)


def observe(p, cfg, deter0, stoch0, xa, ea, is_first, noise, wt=None):
    """The posterior steps of the replay rows, time-major, with the gradient form of
    ``cfg.observe_grad`` (:func:`.config.resolve`; module docstring).

    Args:
      p: RSSM parameters, as :func:`rssm.observe_slices` returns them.
      cfg: the AgentConfig.
      deter0 f32[B, D], stoch0 f32[B, S, K]: the latents before the first row.
      xa f32[T, B, D], ea f32[T, B, H]: :func:`rssm.observe_inputs` of each row.
      is_first bool[T, B]; noise: uniforms f32[T, B, S] or one-hot samples f32[T, B, S, K].
      wt: :func:`rssm.observe_transposes` of ``p`` (the CPU's faster data gradients; used
        by ``"scan"`` and ``"remat"``), or None.

    Returns:
      (deter f32[T, B, D], stoch f32[T, B, S, K] straight-through, post logits
      f32[T, B, S, K]), as :func:`rssm.observe_step` gives them step by step.
    """
    form = resolve("observe_grad", cfg.observe_grad)
    if form == "batched":
        return _batched(cfg, p, deter0, stoch0, xa, ea, is_first, noise)
    return _scan(cfg, p, deter0, stoch0, xa, ea, is_first, noise, wt, remat=form == "remat")

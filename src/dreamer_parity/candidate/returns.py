"""Returns of the actor-critic: the lambda return of imagined trajectories, the lambda
return of replayed sequences, and the return normaliser (reference agent.py:302-345 and
jaxutils.py:301-395; ALGORITHM.md sections 10-11).

All pure and jit/vmap-able, float32.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["lambda_return", "replay_return", "retnorm_update"]

f32 = jnp.float32
sg = jax.lax.stop_gradient


def lambda_return(rew, con, val, lam):
    """Time-major lambda return (agent.py:302-310): rew, con, val f32[H+1, N] -> f32[H, N].
    R_H = val_H;  R_t = rew_{t+1} + con_{t+1}*((1-lam)*val_{t+1} + lam*R_{t+1})."""
    disc = con[1:]
    interm = rew[1:] + (1 - lam) * disc * val[1:]
    rets = [val[-1]]
    for t in reversed(range(disc.shape[0])):
        rets.append(interm[t] + disc[t] * lam * rets[-1])
    return jnp.stack(list(reversed(rets))[:-1], 0)


def replay_return(reward, is_terminal, is_last, boot, cfg):
    """Replay lambda return (agent.py:336-345), batch-major f32[B, T] -> f32[B, T-1]:
    live = (1-is_terminal)*(1-1/horizon), c = (1-is_last)*lambda_replay (both of row t+1),
    R_{T-1} = boot_{T-1};  R_t = reward_{t+1} + live_{t+1}*((1-c_{t+1})*boot_{t+1} + c_{t+1}*R_{t+1}).
    """
    live = (1 - is_terminal.astype(f32))[:, 1:] * (1 - 1 / cfg.horizon)
    cont = (1 - is_last.astype(f32))[:, 1:] * cfg.return_lambda_replay
    interm = reward[:, 1:] + (1 - cont) * live * boot[:, 1:]

    def step(r, xs):
        i, l, c = xs
        r = i + l * c * r
        return r, r

    _, rets = jax.lax.scan(step, boot[:, -1], (interm.T, live.T, cont.T), reverse=True)
    return rets.T


def retnorm_update(retnorm, ret, cfg):
    """Return normaliser (jaxutils.py:301-395, impl perc): EMA (rate) of the lo/hi
    percentiles of ``ret`` (linear interpolation over all entries), from 0 without bias
    correction.  Returns (new {"lo","hi"}, offset = lo, scale = max(limit, hi - lo))."""
    x = sg(ret.astype(f32)).ravel()
    rate = cfg.retnorm_rate
    lo = (1 - rate) * retnorm["lo"] + rate * jnp.percentile(x, cfg.retnorm_lo)
    hi = (1 - rate) * retnorm["hi"] + rate * jnp.percentile(x, cfg.retnorm_hi)
    return {"lo": lo, "hi": hi}, lo, jnp.maximum(cfg.retnorm_limit, hi - lo)

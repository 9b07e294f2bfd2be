"""Block-GRU RSSM (reference nets.py:16-220, ALGORITHM.md section 5).

Parameter names follow the reference's ``/agent/dyn/<layer>``: dynin0-2 (Linear + RMSNorm
+ SiLU on deter, flat stoch and action), dyn0 (BlockLinear with RMSNorm over all D + SiLU,
kernel (g, D/g + 3*hidden, D/g)), dyncore (BlockLinear, kernel (g, D/g, 3D/g)), obs0 and
obslogit (posterior), img0..img{n-1} and imglogit (prior).

The block matmuls run in group-major layout ('gbi,gio->gbo'), which XLA:CPU executes 3-5x
faster than the reference's 'bgi' layout (PERF_REFERENCE.md section 2); the arithmetic is the
same block-diagonal product.  The block input [deter block k, x] of dyn0 is split into its
two row blocks instead of concatenating x to every block: the deter part is a group-major
block matmul, the x part (shared by all blocks) one dense (B, 3H) x (3H, D) matmul; the two
are summed (float32 rounding order differs from the reference's single dot).

In the posterior step the x-part is split once more: the action's rows (with dyn0's bias)
and obs0's embedding rows do not depend on the recurrent state, so :func:`observe_inputs`
computes them for every row of a batch before the observe scan, and :func:`observe_step`
adds them (again only the float32 summation order changes).

Carry: deter f32[B, D], stoch f32[B, S, K] (one-hot, or zeros at the start).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from . import dists
from .nets import block_params, dense, linear_params, matmul, rms_norm

__all__ = ["init_params", "gru", "prior_logits", "post_logits", "observe_inputs", "observe_step",
           "observe_transposes", "observe_slices", "img_step", "reset", "kl_losses"]

sg = jax.lax.stop_gradient


def init_params(key, cfg):
    """RSSM parameters (dict layer -> arrays) for ``cfg`` (AgentConfig); embed width = units."""
    D, H, S, K, g, A = cfg.deter, cfg.hidden, cfg.stoch, cfg.classes, cfg.blocks, cfg.num_actions
    keys = iter(jax.random.split(key, 8 + cfg.img_layers + cfg.obs_layers))
    p = {
        "dynin0": linear_params(next(keys), D, H),
        "dynin1": linear_params(next(keys), S * K, H),
        "dynin2": linear_params(next(keys), A, H),
        "dyn0": block_params(next(keys), g, D + 3 * g * H, D, norm=True),
        "dyncore": block_params(next(keys), g, D, 3 * D, norm=False),
    }
    width = D + cfg.units
    for i in range(cfg.obs_layers):
        p[f"obs{i}"] = linear_params(next(keys), width, H)
        width = H
    p["obslogit"] = linear_params(next(keys), width, S * K, norm=False)
    width = D
    for i in range(cfg.img_layers):
        p[f"img{i}"] = linear_params(next(keys), width, H)
        width = H
    p["imglogit"] = linear_params(next(keys), width, S * K, norm=False)
    return p


def reset(x, is_first):
    """x * (1 - is_first) broadcast over trailing axes (reference jaxutils.py:94-100)."""
    mask = is_first.astype(x.dtype).reshape(is_first.shape + (1,) * (x.ndim - is_first.ndim))
    return x * (1 - mask)


def _x_kernel(p, cfg, lo, hi):
    """Rows ``lo:hi`` of every block's x-part of the dyn0 kernel, side by side:
    f32[hi - lo, D] with block-major columns (column k * D/g + o is block k's output o)."""
    Dg = cfg.deter // cfg.blocks
    return p["dyn0"]["kernel"][:, Dg + lo:Dg + hi].transpose(1, 0, 2).reshape(hi - lo, cfg.deter)


def _hook(at, name, y, rows=0):
    """``at.pre(name, y, rows)``, or ``y`` when ``at`` is None (:func:`observe_step`)."""
    return y if at is None else at.pre(name, y, rows)


def _pre(at, name):
    """The pre-activation hook of layer ``name`` for :func:`.nets.dense`, or None."""
    return None if at is None else (lambda y: at.pre(name, y, 0))


def _stat(at, name, rows=0):
    """The norm-statistic hook of layer ``name`` for :func:`.nets.rms_norm`, or None."""
    return None if at is None else (lambda x, axis: at.stat(name, x, rows, axis))


def _gru_core(p, cfg, deter, yx, wt=None, at=None):
    """The block part of the GRU step: deter f32[B,D] and yx f32[B,D] (the x-part of dyn0
    plus its bias, block-major columns) -> new deter f32[B,D].  ``wt``: None or
    :func:`observe_transposes`; ``at``: as :func:`observe_step`."""
    wt = wt or {}
    B = deter.shape[0]
    D, g = cfg.deter, cfg.blocks
    Dg = D // g
    sliced = p.get("sliced", {})
    kd = sliced["dyn0"] if "dyn0" in sliced else p["dyn0"]["kernel"][:, :Dg]   # (g, Dg, Dg)
    hg = deter.reshape(B, g, Dg).transpose(1, 0, 2)                # (g, B, Dg)
    y = matmul(hg, kd, wt.get("dyn0")) + yx.reshape(B, g, Dg).transpose(1, 0, 2)
    y = _hook(at, "dyn0", y, 1)
    y = rms_norm(y, p["dyn0"]["scale"].reshape(g, 1, Dg), axis=(0, 2), stat=_stat(at, "dyn0", 1))
    y = jax.nn.silu(y)
    z = (matmul(y, p["dyncore"]["kernel"], wt.get("dyncore"))
         + p["dyncore"]["bias"].reshape(g, 1, 3 * Dg))
    z = _hook(at, "dyncore", z, 1)
    r = jax.nn.sigmoid(z[..., :Dg])
    c = jnp.tanh(r * z[..., Dg:2 * Dg])
    u = jax.nn.sigmoid(z[..., 2 * Dg:] - 1)
    hg = u * c + (1 - u) * hg
    return hg.transpose(1, 0, 2).reshape(B, D)


def gru(p, cfg, deter, stoch, action):
    """One block-GRU step (nets.py:151-173): deter f32[B,D], stoch f32[B,S,K], action f32[B,A]
    -> new deter f32[B,D].  Gates are split inside each block as [reset | cand | update]."""
    B, H = deter.shape[0], cfg.hidden
    x0 = dense(p["dynin0"], deter)
    x1 = dense(p["dynin1"], stoch.reshape(B, -1))
    x2 = dense(p["dynin2"], action)
    x = jnp.concatenate([x0, x1, x2], -1)                          # (B, 3H)
    yx = x @ _x_kernel(p, cfg, 0, 3 * H) + p["dyn0"]["bias"]       # (B, D), block-major
    return _gru_core(p, cfg, deter, yx)


def prior_logits(p, cfg, deter):
    """Unimixed prior logits f32[..., S, K] from deter f32[..., D] (img layers, nets.py:112-117)."""
    x = deter
    for i in range(cfg.img_layers):
        x = dense(p[f"img{i}"], x)
    x = dense(p["imglogit"], x, act=False)
    return dists.unimix_logits(x.reshape(x.shape[:-1] + (cfg.stoch, cfg.classes)), cfg.unimix)


def observe_inputs(p, cfg, action, embed, is_first):
    """The terms of the posterior step that do not depend on the recurrent state, for any
    leading shape ``...``: action f32[..., A] (one-hot of the previous action; zeroed where
    ``is_first``, as the step's reset does), embed f32[..., E], is_first bool[...].

    Returns (xa f32[..., D], ea f32[..., H]): xa = dynin2(action) times its rows of the dyn0
    kernel plus dyn0's bias, ea = embed times its rows of the obs0 kernel plus obs0's bias.
    The train step computes them for all rows before the observe scan, as two large matmuls
    instead of 64 small ones inside it (and their weight gradients outside the backward loop);
    only the float32 summation order differs from the reference's single dots
    (nets.py:151-173, 53-76)."""
    D, H = cfg.deter, cfg.hidden
    x2 = dense(p["dynin2"], reset(action, is_first))
    xa = x2 @ _x_kernel(p, cfg, 2 * H, 3 * H) + p["dyn0"]["bias"]
    ea = embed @ p["obs0"]["kernel"][D:] + p["obs0"]["bias"]
    return xa, ea


def post_logits(p, cfg, deter, ea, wt=None, at=None):
    """Unimixed posterior logits f32[B, S, K] from deter f32[B,D] and ea f32[B,H] (the embed
    term of obs0 from :func:`observe_inputs`); ``wt``: None or :func:`observe_transposes`;
    ``at``: as :func:`observe_step`."""
    D = cfg.deter
    wt = wt or {}
    sliced = p.get("sliced", {})
    kd = sliced["obs0"] if "obs0" in sliced else p["obs0"]["kernel"][:D]
    x = _hook(at, "obs0", matmul(deter, kd, wt.get("obs0")) + ea)
    x = jax.nn.silu(rms_norm(x, p["obs0"]["scale"], stat=_stat(at, "obs0")))
    for i in range(1, cfg.obs_layers):
        x = dense(p[f"obs{i}"], x, kernel_t=wt.get(f"obs{i}"), pre=_pre(at, f"obs{i}"),
                  stat=_stat(at, f"obs{i}"))
    x = dense(p["obslogit"], x, act=False, kernel_t=wt.get("obslogit"), pre=_pre(at, "obslogit"))
    return dists.unimix_logits(x.reshape(x.shape[:-1] + (cfg.stoch, cfg.classes)), cfg.unimix)


def observe_transposes(p, cfg):
    """The transposes of every kernel the posterior step multiplies by, for its backward
    pass (:func:`.nets.matmul`): dict name -> f32 array (dynin0, dynin1, obs0 (deter rows),
    obs1.., obslogit: (out, in); x (the x-part rows of dynin0/1 outputs): (D, 2H);
    dyn0 (deter rows) and dyncore: (g, out/g, in/g)).  Made once, outside the observe scan,
    behind an optimisation barrier, meant to keep XLA's transpose folding from turning the
    products back into the slow form (not tried without it)."""
    D, H, Dg = cfg.deter, cfg.hidden, cfg.deter // cfg.blocks
    wt = {"dynin0": p["dynin0"]["kernel"].T, "dynin1": p["dynin1"]["kernel"].T,
          "x": _x_kernel(p, cfg, 0, 2 * H).T,
          "dyn0": p["dyn0"]["kernel"][:, :Dg].transpose(0, 2, 1),
          "dyncore": p["dyncore"]["kernel"].transpose(0, 2, 1),
          "obs0": p["obs0"]["kernel"][:D].T, "obslogit": p["obslogit"]["kernel"].T}
    for i in range(1, cfg.obs_layers):
        wt[f"obs{i}"] = p[f"obs{i}"]["kernel"].T
    return jax.lax.optimization_barrier(wt)


def observe_slices(p, cfg):
    """A copy of the RSSM parameters ``p`` that also holds, under ``"sliced"``, the kernel
    slices the posterior step multiplies by: ``x`` (the x-part rows of the dynin0/1
    outputs, f32[2H, D] block-major), ``dyn0`` (the deter rows, f32[g, D/g, D/g]) and
    ``obs0`` (the deter rows, f32[D, H]).  Made once before the observe scan, inside the
    differentiated loss: the scan's backward pass then accumulates the gradients of the
    slices, and each slice's gradient is padded into its kernel once after the loop,
    instead of at each of the 64 steps.  The values and gradients are the same."""
    D, H, Dg = cfg.deter, cfg.hidden, cfg.deter // cfg.blocks
    return {**p, "sliced": {"x": _x_kernel(p, cfg, 0, 2 * H),
                            "dyn0": p["dyn0"]["kernel"][:, :Dg],
                            "obs0": p["obs0"]["kernel"][:D]}}


def observe_step(p, cfg, deter, stoch, xa, ea, is_first, noise, wt=None, at=None):
    """Posterior step (nets.py:53-76): reset deter/stoch where ``is_first`` (the action's
    reset is in ``xa``), GRU, then the posterior sample.  xa f32[B,D] and ea f32[B,H] from
    :func:`observe_inputs`, is_first bool[B], noise: uniforms f32[B,S] or a one-hot sample
    f32[B,S,K].  ``wt``: None, or :func:`observe_transposes` of ``p`` (the same values and
    gradients; a faster backward pass inside the train step's observe scan).
    ``at``: None, or an object whose ``at.pre(layer, y, rows) -> y`` is applied to the
    pre-activation of each layer whose output is normalised or is the posterior logits
    (dynin0, dynin1, dyn0 and dyncore (group-major, rows on axis 1), obs0.., obslogit;
    rows on axis ``rows``), and whose ``at.stat(layer, x, rows, axis)`` gives each norm's
    statistic (:func:`.nets.rms_stat` of ``x`` over ``axis``): :mod:`.observe` records
    them, and pins them to recorded values.
    Returns (deter f32[B,D], stoch f32[B,S,K] straight-through, logit f32[B,S,K])."""
    B, H = deter.shape[0], cfg.hidden
    w = wt or {}
    deter, stoch = reset(deter, is_first), reset(stoch, is_first)
    x0 = dense(p["dynin0"], deter, kernel_t=w.get("dynin0"), pre=_pre(at, "dynin0"),
               stat=_stat(at, "dynin0"))
    x1 = dense(p["dynin1"], stoch.reshape(B, -1), kernel_t=w.get("dynin1"),
               pre=_pre(at, "dynin1"), stat=_stat(at, "dynin1"))
    sliced = p.get("sliced", {})
    kx = sliced["x"] if "x" in sliced else _x_kernel(p, cfg, 0, 2 * H)
    yx = matmul(jnp.concatenate([x0, x1], -1), kx, w.get("x")) + xa
    deter = _gru_core(p, cfg, deter, yx, wt, at)
    logit = post_logits(p, cfg, deter, ea, wt, at)
    stoch = dists.categorical_from_noise(logit, noise)
    return deter, stoch, logit


def img_step(p, cfg, deter, stoch, action, noise):
    """Prior step (nets.py:78-95): GRU without reset, then a prior sample.
    Returns (deter f32[B,D], stoch f32[B,S,K], logit f32[B,S,K])."""
    deter = gru(p, cfg, deter, stoch, action)
    logit = prior_logits(p, cfg, deter)
    stoch = dists.categorical_from_noise(logit, noise)
    return deter, stoch, logit


def kl_losses(post, prior, free):
    """dyn = KL(sg(post) || prior), rep = KL(post || sg(prior)), summed over the S latents,
    then max(., free) (free bits after the sum; nets.py:97-110).  Logits f32[..., S, K]
    -> (dyn f32[...], rep f32[...])."""
    dyn = dists.kl(sg(post), prior).sum(-1)
    rep = dists.kl(post, sg(prior)).sum(-1)
    if free:
        dyn, rep = jnp.maximum(dyn, free), jnp.maximum(rep, free)
    return dyn, rep

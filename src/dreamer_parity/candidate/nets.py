"""Layers of the candidate: truncated-normal fan-in init, Linear + RMSNorm + SiLU, MLPs.

Parameters are plain nested dicts of float32 arrays.  A layer is a dict with ``kernel``
(in, out) (or (g, in/g, out/g) for block layers), ``bias`` (out,) and, when normalised,
``scale`` (out,) (the reference's ``<layer>/norm/scale``).  Layer order inside a layer:
matmul + bias, RMSNorm, SiLU (reference nets.py:618-623).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["symlog", "symexp", "trunc_normal", "linear_params", "block_params", "rms_stat",
           "rms_norm", "dense", "matmul", "with_transposes", "mlp_params", "mlp_hidden", "feat_dense", "RMS_EPS"]

f32 = jnp.float32

#: RMSNorm epsilon (reference nets.py:733, Norm.__init__ default).
RMS_EPS = 1e-4

#: 1 / std of a standard normal truncated to [-2, 2] (reference nets.py:848).
_TRUNC_SCALE = 1.1368


def symlog(x):
    """sign(x) * log(1 + |x|), elementwise (reference jaxutils.py:76-77)."""
    return jnp.sign(x) * jnp.log1p(jnp.abs(x))


def symexp(x):
    """sign(x) * (exp(|x|) - 1), elementwise (reference jaxutils.py:80-81)."""
    return jnp.sign(x) * jnp.expm1(jnp.abs(x))


def trunc_normal(key, shape, fan_in: int, outscale: float = 1.0):
    """The reference's ``normal`` winit (nets.py:846-849): truncated normal on [-2, 2] times
    ``1.1368 * sqrt(1 / fan_in) * outscale``; float32 of ``shape``.  outscale 0 gives zeros."""
    value = jax.random.truncated_normal(key, -2.0, 2.0, shape, f32)
    value = value * (_TRUNC_SCALE * np.sqrt(1.0 / fan_in))
    return (value * outscale).astype(f32)


def linear_params(key, fan_in: int, units: int, norm: bool = True, outscale: float = 1.0):
    """A Linear layer (in=fan_in, out=units): zeros bias, optional ones RMSNorm scale."""
    p = {"kernel": trunc_normal(key, (fan_in, units), fan_in, outscale),
         "bias": jnp.zeros((units,), f32)}
    if norm:
        p["scale"] = jnp.ones((units,), f32)
    return p


def block_params(key, groups: int, fan_in: int, units: int, norm: bool):
    """A BlockLinear layer: kernel (g, fan_in/g, units/g) initialised with the FULL input
    width ``fan_in`` as fan-in (block_fans False, reference nets.py:874-885)."""
    p = {"kernel": trunc_normal(key, (groups, fan_in // groups, units // groups), fan_in),
         "bias": jnp.zeros((units,), f32)}
    if norm:
        p["scale"] = jnp.ones((units,), f32)
    return p


def rms_stat(x, axis=-1):
    """rsqrt(mean(x^2 over axis) + 1e-4), keeping the reduced axes: the row statistic of
    :func:`rms_norm` (reference nets.py:758-763)."""
    return jax.lax.rsqrt((x * x).mean(axis, keepdims=True) + RMS_EPS)


def rms_norm(x, scale, axis=-1, stat=None):
    """x * rsqrt(mean(x^2 over axis) + 1e-4) * scale (reference nets.py:758-763).
    ``stat``: None, or a function (x, axis) -> the statistic in place of :func:`rms_stat`
    (``observe``'s batched backward gives a stored one)."""
    mult = (rms_stat(x, axis) if stat is None else stat(x, axis)) * scale
    return x * mult


@jax.custom_vjp
def _matmul_pre_t(x, w, wt):
    return _mm(x, w)


def _mm(x, w):
    return jnp.einsum("gbi,gio->gbo", x, w) if w.ndim == 3 else x @ w


def _matmul_pre_t_fwd(x, w, wt):
    return _mm(x, w), (x, wt)


def _matmul_pre_t_bwd(res, dy):
    x, wt = res
    if wt.ndim == 3:
        return (jnp.einsum("gbo,goi->gbi", dy, wt), jnp.einsum("gbi,gbo->gio", x, dy), None)
    dw = x.reshape(-1, x.shape[-1]).T @ dy.reshape(-1, dy.shape[-1])
    return dy @ wt, dw, None


_matmul_pre_t.defvjp(_matmul_pre_t_fwd, _matmul_pre_t_bwd)


def matmul(x, w, wt=None):
    """x @ w for x f32[..., i], w f32[i, o], or the block product 'gbi,gio->gbo' for
    x f32[g, B, i], w f32[g, i, o].

    ``wt`` (optional) is w's transpose, f32[o, i] or f32[g, o, i], stored in that layout
    (made once outside a loop, see ``rssm.observe_transposes``).  The data gradient is then
    ``dy @ wt``, a plain row-major product, instead of a product that contracts w's minor
    axis, which XLA:CPU runs slower at the observe loop's 16-row shapes (a 64-step scan's
    gradient took 1.8-2.1x as long; docs/PERFORMANCE.md).  The values and both gradients are the same products;
    ``wt`` itself gets no gradient (w's gradient is x^T dy, as without it)."""
    if wt is None:
        return _mm(x, w)
    return _matmul_pre_t(x, w, wt)


def with_transposes(layers: dict) -> dict:
    """A copy of ``layers`` (dict name -> layer dict) in which every layer with a 2-D
    kernel also holds ``kernel_t``, the kernel's transpose behind an optimisation barrier,
    which :func:`dense` then uses for its data gradient (:func:`matmul`).  Made inside the
    differentiated loss, it adds no gradient path: the kernels' gradients are unchanged."""
    out = {}
    for name, layer in layers.items():
        if isinstance(layer, dict) and getattr(layer.get("kernel"), "ndim", 0) == 2:
            layer = {**layer, "kernel_t": jax.lax.optimization_barrier(layer["kernel"].T)}
        out[name] = layer
    return out


def dense(p, x, act: bool = True, kernel_t=None, pre=None, stat=None):
    """x @ kernel + bias, then RMSNorm (when ``p`` has ``scale``) and SiLU (when ``act``).
    ``kernel_t``: the kernel's stored transpose for the backward pass (:func:`matmul`);
    by default ``p["kernel_t"]`` when present (:func:`with_transposes`).  ``pre``: None, or
    a function applied to the pre-activation (x @ kernel + bias, rows on axis 0) before the
    norm, and ``stat`` the norm's (:func:`rms_norm`): ``observe``'s batched backward
    records and pins them there."""
    if kernel_t is None:
        kernel_t = p.get("kernel_t")
    y = matmul(x, p["kernel"], kernel_t) + p["bias"]
    if pre is not None:
        y = pre(y)
    if "scale" in p:
        y = rms_norm(y, p["scale"], stat=stat)
    return jax.nn.silu(y) if act else y


def feat_dense(p, deter, stoch_flat, act: bool = True):
    """First layer of a head on feat = concat(deter, flatten(stoch)) (nets.py:791-818),
    computed as two matmuls on the kernel's row blocks (no concatenated copy)."""
    d = deter.shape[-1]
    y = deter @ p["kernel"][:d] + stoch_flat @ p["kernel"][d:] + p["bias"]
    if "scale" in p:
        y = rms_norm(y, p["scale"])
    return jax.nn.silu(y) if act else y


def mlp_params(key, fan_in: int, units: int, layers: int, out: int, outscale: float,
               out_name: str = "out"):
    """An MLP of ``layers`` x Linear(units, rms, silu) named h0.., and an output Linear
    ``out_name`` with ``out`` columns, no norm, given outscale (nets.py:372-443)."""
    keys = jax.random.split(key, layers + 1)
    p = {}
    width = fan_in
    for i in range(layers):
        p[f"h{i}"] = linear_params(keys[i], width, units)
        width = units
    p[out_name] = linear_params(keys[-1], width, out, norm=False, outscale=outscale)
    return p


def mlp_hidden(p, deter, stoch_flat, layers: int, prefix: str = "h"):
    """Hidden stack of an MLP head on feat = (deter, flat stoch); returns the last hidden."""
    x = feat_dense(p[f"{prefix}0"], deter, stoch_flat)
    for i in range(1, layers):
        x = dense(p[f"{prefix}{i}"], x)
    return x

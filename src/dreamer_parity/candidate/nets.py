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

__all__ = ["symlog", "symexp", "trunc_normal", "linear_params", "block_params", "rms_norm",
           "dense", "mlp_params", "mlp_hidden", "feat_dense", "RMS_EPS"]

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


def rms_norm(x, scale, axis=-1):
    """x * rsqrt(mean(x^2 over axis) + 1e-4) * scale (reference nets.py:758-763)."""
    mult = jax.lax.rsqrt((x * x).mean(axis, keepdims=True) + RMS_EPS) * scale
    return x * mult


def dense(p, x, act: bool = True):
    """x @ kernel + bias, then RMSNorm (when ``p`` has ``scale``) and SiLU (when ``act``)."""
    y = x @ p["kernel"] + p["bias"]
    if "scale" in p:
        y = rms_norm(y, p["scale"])
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

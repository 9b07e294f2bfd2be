"""Encoder, decoder and the MLP heads (reward, continue, actor, critic).

Shapes: any leading batch dims ``...``; feat inputs are deter f32[..., D] and the flat
stochastic state f32[..., S*K] (the reference's Input concatenates deter then stoch,
nets.py:791-818).  Parameter names follow the reference modules (enc/mlp{i}, dec/mlp{i} +
``out`` = dec/out_vector/out, rew|con|actor|critic/h{i} + ``out`` = <module>/<dist>/out).
"""

from __future__ import annotations

import jax

from . import dists
import jax.numpy as jnp

from .nets import dense, linear_params, mlp_hidden, mlp_params, rms_norm, symlog

__all__ = ["init_params", "encode", "decode", "rew_logits", "con_logit", "actor_logits",
           "critic_logits", "first_layers", "hidden_rest", "out_logits"]


def init_params(key, cfg):
    """Parameters of enc, dec, rew, con, actor, critic (dict module -> layer -> arrays).

    Output layers: decoder 0.1 (Dist default), reward 0 with ``bins`` columns (the reference
    has bins + 1 and drops the last, nets.py:437-443), continue 1.0, actor 0.01, critic 0.
    """
    feat = cfg.deter + cfg.stoch * cfg.classes
    k = jax.random.split(key, 6 + cfg.enc_layers)
    enc = {}
    width = cfg.obs_dim
    for i in range(cfg.enc_layers):
        enc[f"mlp{i}"] = linear_params(k[6 + i], width, cfg.units)
        width = cfg.units
    dec = mlp_params(k[0], feat, cfg.units, cfg.dec_layers, cfg.obs_dim, cfg.dec_outscale)
    dec = {(f"mlp{n[1:]}" if n.startswith("h") else n): v for n, v in dec.items()}
    return {
        "enc": enc,
        "dec": dec,
        "rew": mlp_params(k[1], feat, cfg.units, cfg.rew_layers, cfg.bins, 0.0),
        "con": mlp_params(k[2], feat, cfg.units, cfg.con_layers, 1, 1.0),
        "actor": mlp_params(k[3], feat, cfg.units, cfg.actor_layers, cfg.num_actions,
                            cfg.actor_outscale),
        "critic": mlp_params(k[4], feat, cfg.units, cfg.critic_layers, cfg.bins, 0.0),
    }


def encode(p, cfg, obs):
    """Embedding f32[..., units] of observations f32[..., obs_dim]: symlog, then
    enc_layers x (Linear, RMSNorm, SiLU) (nets.py:254-262)."""
    x = symlog(obs)
    for i in range(cfg.enc_layers):
        x = dense(p[f"mlp{i}"], x)
    return x


def decode(p, cfg, deter, stoch_flat):
    """Symlog-space vector prediction f32[..., obs_dim] (nets.py:297-305)."""
    x = mlp_hidden(p, deter, stoch_flat, cfg.dec_layers, prefix="mlp")
    return dense(p["out"], x, act=False)


def rew_logits(p, cfg, deter, stoch_flat):
    """Reward two-hot logits f32[..., bins]."""
    return dense(p["out"], mlp_hidden(p, deter, stoch_flat, cfg.rew_layers), act=False)


def con_logit(p, cfg, deter, stoch_flat):
    """Continue Bernoulli logit f32[...]."""
    return dense(p["out"], mlp_hidden(p, deter, stoch_flat, cfg.con_layers), act=False)[..., 0]


def actor_logits(p, cfg, deter, stoch_flat):
    """Unimixed actor logits f32[..., A] (nets.py:523-534)."""
    x = dense(p["out"], mlp_hidden(p, deter, stoch_flat, cfg.actor_layers), act=False)
    return dists.unimix_logits(x, cfg.unimix)


def critic_logits(p, cfg, deter, stoch_flat):
    """Critic two-hot logits f32[..., bins]."""
    return dense(p["out"], mlp_hidden(p, deter, stoch_flat, cfg.critic_layers), act=False)


def first_layers(ps, deter, stoch_flat):
    """The first (Linear, RMSNorm, SiLU) layers of several heads on the same feat, as one
    matmul with the heads' kernels side by side.

    ps: list of k layer dicts (kernel f32[D + S*K, u], bias f32[u], scale f32[u]), all with
    the same width u; deter f32[..., D], stoch_flat f32[..., S*K].
    Returns a list of k arrays f32[..., u], equal to ``feat_dense(p, deter, stoch_flat)``
    for each p up to float32 rounding (one wider product; each column's dot product is
    the same sum).  The gradient flows into every kernel, bias and scale of ``ps``.
    """
    d = deter.shape[-1]
    u = ps[0]["kernel"].shape[1]
    kernel = jnp.concatenate([p["kernel"] for p in ps], 1)
    bias = jnp.concatenate([p["bias"] for p in ps], 0)
    scale = jnp.stack([p["scale"] for p in ps], 0)                      # (k, u)
    y = deter @ kernel[:d] + stoch_flat @ kernel[d:] + bias
    y = y.reshape(y.shape[:-1] + (len(ps), u))
    y = jax.nn.silu(rms_norm(y, scale))
    return [y[..., i, :] for i in range(len(ps))]


def hidden_rest(p, x, layers: int):
    """Hidden layers h1..h{layers-1} of an MLP head applied to the first layer's output x."""
    for i in range(1, layers):
        x = dense(p[f"h{i}"], x)
    return x


def out_logits(p, x):
    """The output layer ``out`` (Linear, no norm, no activation) of a head on its last
    hidden x f32[..., u]."""
    return dense(p["out"], x, act=False)

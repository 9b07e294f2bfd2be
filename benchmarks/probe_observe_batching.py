"""Probe: the observe loop (encoder + 64 posterior steps, forward and backward) alone, at the
full profile, for 1 seed, for 3 seeds batched by plain ``vmap``, and for 3 seeds one after
another (``seedmap.per_seed(..., 1)``, what the run's train step does on CPU).

    .venv/bin/python benchmarks/probe_observe_batching.py [--updates 8] [--seeds 3]

Question it answers: is the observe loop, whose per-step ops are small (16 rows) and whose
time is mostly op dispatch, cheaper batched over seeds than one seed after another?  If so a
train step that batches only the observe loop and runs the rest seed by seed could beat
both layouts.  Prints compile seconds and the median wall seconds per call of each layout;
the loss is a fixed random linear function of the loop's outputs (deter, posterior logits),
so its gradient runs the loop's whole backward pass.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from dreamer_parity.candidate import heads, rssm, seedmap
from dreamer_parity.candidate.agent import XLA_CPU_OPTIONS, init_params
from dreamer_parity.candidate.bench import synthetic_batch
from dreamer_parity.candidate.config import AgentConfig


def observe_loss(cfg, params, batch, noise, cot_deter, cot_post):
    """Encoder + observe scan; loss = <deter, cot_deter> + <post logits, cot_post>."""
    B, L = batch["reward"].shape
    T, K, A = L - 1, cfg.classes, cfg.num_actions
    deter0 = batch["deter"][:, 0]
    stoch0 = jax.nn.one_hot(batch["stoch"][:, 0], K)
    prevacts = jax.nn.one_hot(batch["action"][:, :T], A)
    embed = heads.encode(params["enc"], cfg, batch["vector"][:, 1:])

    def step(carry, xs):
        deter, stoch = carry
        act, emb, first, nz = xs
        deter, stoch, logit = rssm.observe_step(params["dyn"], cfg, deter, stoch, act, emb,
                                                first, nz)
        return (deter, stoch), (deter, logit)

    tm = lambda x: jnp.swapaxes(x, 0, 1)
    _, (deter, post) = jax.lax.scan(
        step, (deter0, stoch0), (tm(prevacts), tm(embed), tm(batch["is_first"][:, 1:]), noise))
    return (deter * cot_deter).sum() + (post * cot_post).sum()


def grads(cfg, params, batch, noise, cot_deter, cot_post):
    """Gradient of :func:`observe_loss` w.r.t. the encoder and RSSM parameters."""
    sub = {"enc": params["enc"], "dyn": params["dyn"]}
    return jax.grad(lambda p: observe_loss(cfg, p, batch, noise, cot_deter, cot_post))(sub)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--updates", type=int, default=8)
    ap.add_argument("--seeds", type=int, default=3)
    a = ap.parse_args(argv)
    cfg = AgentConfig.for_profile("full")
    S = a.seeds
    keys = jax.random.split(jax.random.PRNGKey(0), S)
    params = jax.vmap(lambda k: init_params(k, cfg))(keys)
    batch = jax.tree_util.tree_map(
        lambda *x: np.stack(x), *[synthetic_batch(cfg, 16, 65, i) for i in range(S)])
    rng = np.random.default_rng(0)
    noise = rng.random((S, 64, 16, cfg.stoch)).astype(np.float32)
    cot_deter = rng.normal(size=(S, 64, 16, cfg.deter)).astype(np.float32)
    cot_post = rng.normal(size=(S, 64, 16, cfg.stoch, cfg.classes)).astype(np.float32)
    args = (params, batch, noise, cot_deter, cot_post)
    one = lambda *x: grads(cfg, *x)
    layouts = {
        "1 seed": (jax.jit(one, compiler_options=XLA_CPU_OPTIONS),
                   jax.tree_util.tree_map(lambda x: x[0], args)),
        f"{S} seeds vmapped": (jax.jit(jax.vmap(one), compiler_options=XLA_CPU_OPTIONS), args),
        f"{S} seeds one after another": (
            jax.jit(jax.vmap(seedmap.per_seed(one, 1)), compiler_options=XLA_CPU_OPTIONS), args),
    }
    compiled = {}
    for name, (fn, x) in layouts.items():
        t0 = time.perf_counter()
        compiled[name] = (fn.lower(*x).compile(), x)
        print(f"{name}: compile {time.perf_counter() - t0:.1f} s", flush=True)
    times = {name: [] for name in compiled}
    for _ in range(a.updates + 1):          # alternate the layouts; the first round warms up
        for name, (fn, x) in compiled.items():
            t0 = time.perf_counter()
            jax.block_until_ready(fn(*x))
            times[name].append(time.perf_counter() - t0)
    for name, t in times.items():
        print(f"{name}: {statistics.median(t[1:]):.4f} s per call "
              f"(min {min(t[1:]):.4f}, max {max(t[1:]):.4f})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

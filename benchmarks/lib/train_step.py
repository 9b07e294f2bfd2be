"""Time one candidate train step (compile and per-update wall time, block_until_ready).

    python benchmarks/lib/train_step.py [--profile full] [--seeds 1 3] [--updates 5]
                                        [--batch 16] [--length 65]

Prints one line per seed count: compile seconds, median wall seconds per update and per
seed-update, and the median process CPU seconds per update (all threads; a figure less
sensitive to other processes sharing the cores).  The batch is synthetic (random observations, CartPole-like flags); the step's
cost does not depend on the values.  Uses the persistent compilation cache only when
JAX_COMPILATION_CACHE_DIR is set (a cache hit makes the compile figure meaningless).
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial

import jax
import numpy as np

from dreamer_parity.candidate.agent import XLA_CPU_OPTIONS, init, train_step
from dreamer_parity.candidate.config import AgentConfig


def synthetic_batch(cfg: AgentConfig, batch: int, length: int, seed: int = 0) -> dict:
    """A batch dict with the train_step layout: episodes of ~20 rows, reward 1."""
    rng = np.random.default_rng(seed)
    is_first = rng.random((batch, length)) < 0.05
    is_first[:, 0] = True
    is_last = np.roll(is_first, -1, 1)
    is_last[:, -1] = False
    return {"vector": rng.normal(size=(batch, length, cfg.obs_dim)).astype(np.float32),
            "reward": np.where(is_first, 0.0, 1.0).astype(np.float32),
            "is_first": is_first, "is_last": is_last, "is_terminal": is_last.copy(),
            "action": rng.integers(0, cfg.num_actions, (batch, length)).astype(np.int32),
            "deter": rng.normal(size=(batch, length, cfg.deter)).astype(np.float32) * 0.3,
            "stoch": rng.integers(0, cfg.classes, (batch, length, cfg.stoch)).astype(np.int32)}


def bench(cfg: AgentConfig, seeds: int, updates: int, batch: int, length: int,
          compiler_options: dict | None = None) -> dict:
    """Compile time and per-update times of jit(vmap(train_step)) over ``seeds`` seeds."""
    keys = jax.random.split(jax.random.PRNGKey(0), seeds)
    states = jax.vmap(lambda k: init(k, cfg))(keys)
    batches = jax.tree_util.tree_map(
        lambda *x: np.stack(x), *[synthetic_batch(cfg, batch, length, i) for i in range(seeds)])
    step = jax.jit(jax.vmap(partial(train_step, cfg)), compiler_options=compiler_options)
    t0 = time.perf_counter()
    compiled = step.lower(states, batches, keys).compile()
    compile_s = time.perf_counter() - t0
    times, cpu = [], []
    for i in range(updates + 1):
        c0 = time.process_time()
        keys = jax.random.split(jax.random.PRNGKey(i + 1), seeds)
        t0 = time.perf_counter()
        states, outs, metrics = compiled(states, batches, keys)
        jax.block_until_ready((states, outs, metrics))
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    per = statistics.median(times[1:])
    return {"seeds": seeds, "compile_s": compile_s, "update_s": per, "seed_update_s": per / seeds,
            "cpu_update_s": statistics.median(cpu[1:]), "times": times}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="full", choices=("full", "smoke"))
    ap.add_argument("--decode", default="exact", choices=("exact", "ref"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 3])
    ap.add_argument("--updates", type=int, default=5)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--length", type=int, default=65)
    ap.add_argument("--xla", default="noynn", choices=("noynn", "default"),
                    help="noynn: agent.XLA_CPU_OPTIONS (CPU only); default: no options")
    a = ap.parse_args(argv)
    cfg = AgentConfig.for_profile(a.profile, decode=a.decode)
    for s in a.seeds:
        r = bench(cfg, s, a.updates, a.batch, a.length,
                  XLA_CPU_OPTIONS if a.xla == "noynn" else None)
        print(f"profile={a.profile} xla={a.xla} seeds={s} compile={r['compile_s']:.1f}s "
              f"update={r['update_s']:.3f}s seed_update={r['seed_update_s']:.3f}s "
              f"cpu_per_update={r['cpu_update_s']:.3f}s "
              f"all={[round(t, 3) for t in r['times']]}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

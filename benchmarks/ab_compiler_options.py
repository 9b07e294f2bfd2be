"""A/B of XLA:CPU compiler options on the run's own chunk program, in one process.

Usage (main venv)::

    python benchmarks/ab_compiler_options.py --b xla_cpu_multi_thread_eigen=false \
        [--a KEY=VALUE ...] [--seeds 3] [--chunk-steps 3] [--rounds 4] [--profile full] \
        [--mesh]

Separate benchmark processes on the shared 2-core machine differ by 10-20% from one run to
the next (docs/PERFORMANCE.md), more than most options change.  This script compiles the
chunk program of ``loop.build`` twice, with option set A (``agent.XLA_CPU_OPTIONS`` plus
``--a``) and option set B (``agent.XLA_CPU_OPTIONS`` plus ``--b``), gives each its own loop
state from the same seeds, runs both past the 1 040-row gate, and then times ``--rounds``
chunks of each, alternating A, B, A, B, ...  The two sides therefore share the machine's
slow and fast minutes.  After the last round it checks whether the two sides' agent
parameters are bitwise equal (an option that only schedules work differently keeps them
equal; one that changes arithmetic does not).

``--mesh`` runs each seed on its own host device, as the run does on CPU
(``candidate/seedmesh.py``); without it all seeds share one device.

Prints per chunk: side, seconds, seconds per seed-update; then the medians, the ratio B/A,
the compile seconds of each side and the parameter check.  Writes nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
NUM_ENVS = 16


def _parse_option(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` -> (key, bool/int/float/str value); ValueError naming the text."""
    if "=" not in text:
        raise ValueError(f"compiler option {text!r} is not KEY=VALUE")
    key, value = text.split("=", 1)
    low = value.lower()
    if low in ("true", "false"):
        return key, low == "true"
    for kind in (int, float):
        try:
            return key, kind(value)
        except ValueError:
            pass
    return key, value


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", nargs="*", default=[], help="extra options of side A (KEY=VALUE)")
    ap.add_argument("--b", nargs="+", required=True, help="extra options of side B (KEY=VALUE)")
    ap.add_argument("--profile", default="full", choices=("full", "smoke"))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--chunk-steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--rows", type=int, default=24000)
    ap.add_argument("--mesh", action="store_true",
                    help="one host device per seed, as the run on CPU (candidate/seedmesh.py)")
    a = ap.parse_args(argv)
    try:
        extra = {"A": dict(map(_parse_option, a.a)), "B": dict(map(_parse_option, a.b))}
    except ValueError as e:
        ap.error(str(e))
    if a.seeds < 1 or a.rounds < 1 or a.chunk_steps < 1:
        ap.error("--seeds, --rounds and --chunk-steps must be positive")

    from dreamer_parity.candidate import seedmesh
    if a.mesh:
        seedmesh.request_host_devices(a.seeds)      # before jax starts its CPU backend

    import jax
    import jax.numpy as jnp
    import numpy as np

    from dreamer_parity.candidate import agent, loop
    from dreamer_parity.candidate.config import AgentConfig
    from dreamer_parity.schedule import per_vector_step

    cfg = AgentConfig.for_profile(a.profile)
    mesh = seedmesh.seed_mesh(a.seeds) if a.mesh else None
    if a.mesh and mesh is None:
        ap.error(f"--mesh: no mesh of {a.seeds} host devices (needs --seeds >= 2 on CPU)")
    fns, _ = loop.seed_programs(agent, cfg, a.rows // NUM_ENVS, a.chunk_steps, 10)
    fns = seedmesh.shard_seeds(fns, mesh)
    keys = [loop.seed_keys(s) for s in range(a.seeds)]
    stacked = seedmesh.put_seeds({k: jnp.stack([kk[k] for kk in keys]) for k in keys[0]}, mesh)
    init = jax.jit(fns["init"], compiler_options=loop.init_compiler_options())
    shape = jax.eval_shape(init, stacked)
    base = loop.compiler_options(agent) or {}
    zeros = seedmesh.put_replicated(jnp.zeros((a.chunk_steps,), jnp.int32), mesh)
    chunk, compile_s, carry = {}, {}, {}
    for side in ("A", "B"):
        opts = {**base, **extra[side]}
        print(f"side {side}: {opts}", flush=True)
        t0 = time.perf_counter()
        chunk[side] = jax.jit(fns["chunk"], donate_argnums=0, compiler_options=opts).lower(
            shape, zeros).compile()
        compile_s[side] = time.perf_counter() - t0
        carry[side] = init(stacked)

    n_steps = 65 + a.chunk_steps * (2 * a.rounds + 2)
    counts = per_vector_step(n_steps)
    for side in ("A", "B"):            # up to and including the gate, then one warm-up chunk
        step = 0
        while step < 65 + a.chunk_steps:
            carry[side], _ = chunk[side](carry[side], seedmesh.put_replicated(
                jnp.asarray(counts[step:step + a.chunk_steps], jnp.int32), mesh))
            step += a.chunk_steps
        jax.block_until_ready(carry[side])
    times = {"A": [], "B": []}
    for r in range(a.rounds):
        c = seedmesh.put_replicated(jnp.asarray(counts[step:step + a.chunk_steps], jnp.int32),
                                    mesh)
        n_up = int(sum(counts[step:step + a.chunk_steps])) * a.seeds
        for side in (("A", "B") if r % 2 == 0 else ("B", "A")):
            t0 = time.perf_counter()
            carry[side], _ = chunk[side](carry[side], c)
            jax.block_until_ready(carry[side])
            dt = time.perf_counter() - t0
            times[side].append(dt / n_up)
            print(f"round {r} side {side}: {dt:.2f} s, {dt / n_up:.4f} s per seed-update",
                  flush=True)
        step += a.chunk_steps
    med = {s: statistics.median(v) for s, v in times.items()}
    pa = jax.tree.leaves(carry["A"]["agent"]["params"])
    pb = jax.tree.leaves(carry["B"]["agent"]["params"])
    equal = all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(pa, pb))
    maxdiff = max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(pa, pb))
    print(f"median s per seed-update: A {med['A']:.4f}, B {med['B']:.4f}, "
          f"B/A {med['B'] / med['A']:.3f}")
    print(f"compile s: A {compile_s['A']:.1f}, B {compile_s['B']:.1f}")
    print(f"parameters after {step} vector steps: bitwise equal {equal} (max |A-B| {maxdiff:.3g})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

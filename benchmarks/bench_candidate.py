"""Benchmark the candidate's training loop on this machine; prints figures.

Usage (main venv)::

    python benchmarks/bench_candidate.py [--profile full] [--seeds 1 3] [--chunk-steps 3]
        [--timed-chunks 1] [--rows 24000] [--reference auto|none] [--reference-s-per-update S]
        [--skip-cold] [--one-device]

Measures in one run:

1. compile seconds of the run's three programs (init, chunk, evaluation point) for the
   largest seed count, obtained as the run obtains them (the exported-program store of
   ``candidate/runtime/program_store.py``, then lower + XLA compile), in a fresh process with an
   empty (**cold**) JAX persistent compilation cache and program store, then in a second
   fresh process with both **warm**; importing jax and the package is reported apart;
2. seed-updates per second of the real loop program (``loop.build``; replay sized for
   ``--rows`` rows) with 1 and 3 vmapped seeds, laid out as the run lays them out (one
   host device per seed on CPU, :mod:`dreamer_parity.candidate.runtime.seedmesh`; ``--one-device``
   puts all seeds on one device as before): the 65 vector steps up to the gate row
   1040 are run first, then one warm-up chunk of ``--chunk-steps`` vector steps (8 updates
   each), then ``--timed-chunks`` timed chunks;
3. peak resident memory of that process (``ru_maxrss``: on CPU the device memory is the
   process memory) and the exact bytes of the loop state (replay + agent state + envs)
   for 3 seeds at ``--rows`` rows;
4. matmul FLOPs per update counted from the optimized HLO of one update with loop trip
   counts (:mod:`dreamer_parity.hlo_cost`), XLA's own ``cost_analysis`` for
   comparison, and the achieved GFLOP/s;
5. the reference's seconds per update: ``--reference-s-per-update``, else (``--reference
   auto``, when ``make reference-setup`` was run) the isolated figure of
   ``benchmarks/bench_reference.py``'s ``_bench_agent`` with the set-up's warm cache; and
   the ratios.

Prints a Markdown table and one ``RESULT {json}`` line; writes nothing into the repository.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Benchmark the checkout this script lies in, not whatever package the interpreter's
# environment installed (the main venv's editable install points at the main checkout, so
# a worktree's benchmark would otherwise time the main checkout's code).
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))   # benchmarks.lib
NUM_ENVS = 16


def _setup_env(cache: str | None, seed_devices: int = 1):
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    # the run's layout: one host device per seed (candidate/runtime/seedmesh.py), asked for before
    # jax starts; --one-device leaves XLA_FLAGS alone
    from dreamer_parity.candidate.runtime import seedmesh
    seedmesh.request_host_devices(seed_devices)
    if cache:
        os.environ["JAX_COMPILATION_CACHE_DIR"] = cache
        os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
        # the run's exported-program store lives with this cache: cold means both are empty
        os.environ["DREAMER_PARITY_PROGRAMS"] = str(Path(cache) / "programs")


def _seed_batch(text: str):
    """--seed-batch: "auto" (the loop's default), "all" (plain vmap) or a positive int."""
    if text == "auto":
        return "auto"
    if text == "all":
        return None
    return int(text)


def _head_rows(head_rows):
    """AgentConfig overrides for ``--head-rows`` (none when it was not given)."""
    return {} if head_rows is None else {"head_rows": head_rows}


def _mesh(n_seeds, one_device: bool):
    from dreamer_parity.candidate.runtime import seedmesh
    return None if one_device else seedmesh.seed_mesh(n_seeds)


def _programs(profile, n_seeds, rows, chunk_steps, eval_episodes=10, seed_batch="auto",
              head_rows=None, one_device=False):
    import jax
    import jax.numpy as jnp

    from dreamer_parity.candidate import agent
    from dreamer_parity.candidate.runtime import loop, seedmesh
    from dreamer_parity.candidate.config import AgentConfig

    cfg = AgentConfig.for_profile(profile, **_head_rows(head_rows))
    mesh = _mesh(n_seeds, one_device)
    progs = loop.build(agent, cfg, capacity=rows // NUM_ENVS, chunk_steps=chunk_steps,
                       eval_episodes=eval_episodes, seed_batch=seed_batch, mesh=mesh)
    keys = [loop.seed_keys(s) for s in range(n_seeds)]
    stacked = seedmesh.put_seeds({k: jnp.stack([kk[k] for kk in keys]) for k in keys[0]}, mesh)
    return jax, jnp, agent, loop, cfg, progs, stacked


def phase_compile(a) -> dict:
    """Get the three programs of a run with ``max(seeds)`` seeds ready as the run does
    (:func:`program_store.load_or_build`, then lower + compile each); seconds."""
    t0 = time.perf_counter()
    import jax
    import jax.numpy as jnp

    from dreamer_parity.candidate import agent
    from dreamer_parity.candidate.runtime import loop, program_store, seedmesh
    from dreamer_parity.candidate.config import AgentConfig
    from dreamer_parity.candidate.runtime.run import config_dict

    cfg = AgentConfig.for_profile(a.profile, **_head_rows(a.head_rows))
    mesh = _mesh(max(a.seeds), a.one_device)
    keys = [loop.seed_keys(s) for s in range(max(a.seeds))]
    stacked = seedmesh.put_seeds({k: jnp.stack([kk[k] for kk in keys]) for k in keys[0]}, mesh)
    jax.block_until_ready(stacked)
    t_import = time.perf_counter() - t0
    t1 = time.perf_counter()
    progs, shape, info = program_store.load_or_build(
        agent, cfg, config_dict(cfg), capacity=a.rows // NUM_ENVS, chunk_steps=a.chunk_steps,
        eval_episodes=10, example_keys=stacked, seed_batch=_seed_batch(a.seed_batch),
        mesh=mesh)
    t2 = time.perf_counter()
    program_store.compile_all(progs, stacked, shape)
    t3 = time.perf_counter()
    return {"compile_s": t3 - t1, "programs_s": t2 - t1, "programs_source": info["source"],
            "xla_s": t3 - t2, "import_s": t_import}


def _cpu_s() -> float:
    """User + system CPU seconds of this process (all threads)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _tree_bytes(tree) -> int:
    import jax
    return int(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree)))


def phase_throughput(a) -> dict:
    """Seed-updates per second for each seed count, memory, FLOPs per update."""
    from dreamer_parity.hlo_cost import matmul_flops
    from dreamer_parity.schedule import Schedule

    out = {"throughput": {}}
    for n_seeds in a.seeds:
        jax, jnp, agent, loop, cfg, progs, stacked = _programs(
            a.profile, n_seeds, a.rows, a.chunk_steps, seed_batch=_seed_batch(a.seed_batch),
            head_rows=a.head_rows, one_device=a.one_device)
        from dreamer_parity.candidate.runtime import seedmesh
        put = lambda c: seedmesh.put_replicated(jnp.asarray(c, jnp.int32), progs.mesh)
        shape = seedmesh.put_seeds(jax.eval_shape(progs.init, stacked), progs.mesh)
        chunk = progs.chunk.lower(shape, put(jnp.zeros((a.chunk_steps,)))).compile()
        carry = progs.init(stacked)
        if n_seeds == 3:
            out["state_bytes_3_seeds"] = {
                "total": _tree_bytes(carry), "replay": _tree_bytes(carry["replay"]),
                "agent_state": _tree_bytes(carry["agent"]), "rows": a.rows}
        from dreamer_parity.schedule import per_vector_step
        counts = per_vector_step(65 + a.chunk_steps * (1 + a.timed_chunks) + a.chunk_steps)
        step = 0
        while step < 65:   # up to and including the gate's vector step
            c = counts[step:step + a.chunk_steps]
            carry, _ = chunk(carry, put(c))
            step += a.chunk_steps
        times, cpu, updates = [], [], []
        for i in range(1 + a.timed_chunks):
            c = counts[step:step + a.chunk_steps]
            t0, c0 = time.perf_counter(), _cpu_s()
            carry, ep = chunk(carry, put(c))
            jax.block_until_ready(carry)
            times.append(time.perf_counter() - t0)
            cpu.append(_cpu_s() - c0)
            updates.append(sum(c))
            step += a.chunk_steps
        t, u = sum(times[1:]), sum(updates[1:])
        out["throughput"][n_seeds] = {
            "seed_updates_per_s": n_seeds * u / t, "s_per_update_per_seed": t / (u * n_seeds),
            "cpu_s_per_seed_update": sum(cpu[1:]) / (u * n_seeds),
            "timed_updates": u, "timed_s": t, "warmup_chunk_s": times[0]}
        print(f"  {n_seeds} seed(s): {n_seeds * u / t:.2f} seed-updates/s "
              f"({t / u:.3f} s per vmapped update)", file=sys.stderr, flush=True)
        del carry
    out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    st = jax.eval_shape(lambda k: agent.init(k, cfg), jax.random.PRNGKey(0))
    out["param_count"] = agent.param_count(st["params"])

    if a.no_flops:
        return out
    # FLOPs of one update of one seed (sample, train, write back)
    s = Schedule()
    from dreamer_parity.candidate.runtime import replay as replaylib
    rp = jax.eval_shape(lambda: replaylib.init(NUM_ENVS, a.rows // NUM_ENVS, cfg.deter,
                                               cfg.stoch, cfg.obs_dim))
    f = jax.jit(lambda st, rp, n, k: loop.update_step(agent, cfg, s, st, rp, n, k),
                compiler_options=loop.compiler_options(agent))
    comp = f.lower(st, rp, jnp.int32(500), jax.random.PRNGKey(0)).compile()
    hlo = comp.as_text()
    out["flops_per_update"] = matmul_flops(hlo)
    ca = comp.cost_analysis()
    ca = ca[0] if isinstance(ca, (list, tuple)) else ca
    out["xla_cost_analysis_flops"] = float(ca.get("flops", float("nan"))) if ca else None
    return out


def _child(phase, a, cache) -> dict:
    cmd = [sys.executable, __file__, "--phase", phase, "--profile", a.profile,
           "--rows", str(a.rows), "--chunk-steps", str(a.chunk_steps),
           "--timed-chunks", str(a.timed_chunks), "--seeds", *map(str, a.seeds),
           "--cache", str(cache), "--seed-batch", a.seed_batch,
           ] + (["--one-device"] if a.one_device else []) + (
               ["--head-rows", str(a.head_rows)] if a.head_rows is not None else []) + (
               ["--no-flops"] if a.no_flops else [])
    r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, cwd=str(REPO))
    lines = [x for x in r.stdout.splitlines() if x.startswith("PHASE ")]
    if r.returncode != 0 or not lines:
        raise SystemExit(f"bench_candidate: phase {phase} failed (exit {r.returncode})")
    return json.loads(lines[-1][len("PHASE "):])


def _reference_s_per_update(a) -> tuple[float | None, str]:
    if a.reference_s_per_update:
        return a.reference_s_per_update, "given on the command line"
    if a.reference == "none":
        return None, "not measured (--reference none)"
    path = REPO / "benchmarks" / "bench_reference.py"
    if not path.exists():
        return None, "benchmarks/bench_reference.py absent"
    try:
        from dreamer_parity.reference import setup as rs
        info = rs.check_setup(None)
    except Exception as e:   # noqa: BLE001 - any set-up problem means "not available"
        return None, f"reference not set up ({str(e).splitlines()[0][:120]}; make reference-setup)"
    spec = importlib.util.spec_from_file_location("bench_reference", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if not hasattr(mod, "_bench_agent"):
        return None, "bench_reference.py has no _bench_agent"
    print("reference: isolated update (warm set-up cache) ...", file=sys.stderr, flush=True)
    res = mod._bench_agent(info, info["jaxcache"], a.profile, a.reference_updates)
    return float(res["s_per_update"]), "reference isolated update (bench_reference._bench_agent)"


def main(argv=None) -> int:
    from dreamer_parity import records as records_cli

    ap = records_cli.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="full", choices=("full", "smoke"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 3])
    ap.add_argument("--rows", type=int, default=24000, help="replay sized for these rows")
    ap.add_argument("--chunk-steps", type=int, default=3)
    ap.add_argument("--timed-chunks", type=int, default=1)
    ap.add_argument("--reference", default="auto", choices=("auto", "none"))
    ap.add_argument("--reference-updates", type=int, default=5)
    ap.add_argument("--reference-s-per-update", type=float, default=None)
    ap.add_argument("--skip-cold", action="store_true",
                    help="skip the cold-cache compile; use the test suite's persistent cache")
    ap.add_argument("--one-device", action="store_true",
                    help="all seeds on one device (the layout before candidate/runtime/seedmesh.py)")
    ap.add_argument("--seed-batch", default="auto",
                    help="how the seed vmap runs the train step: auto (loop default: one seed "
                         "at a time on CPU), all (batched), or seeds per group")
    ap.add_argument("--head-rows", type=int, default=None,
                    help="AgentConfig.head_rows: imagined rows per pass of the heads "
                         "(default: the config's default)")
    ap.add_argument("--no-flops", action="store_true", help="skip the FLOP count (one compile)")
    ap.add_argument("--phase", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--cache", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    from dreamer_parity import records as _records
    try:      # every argument before anything is computed (one line, exit 2)
        for s in a.seeds:
            _records.check_range(s, "--seeds", 1, 1024)
        _records.check_range(a.rows, "--rows", NUM_ENVS, 24_000)
        _records.check_range(a.chunk_steps, "--chunk-steps", 1, 1000)
        _records.check_range(a.timed_chunks, "--timed-chunks", 1, 1000)
        _records.check_range(a.reference_updates, "--reference-updates", 1, 10_000)
        if a.reference_s_per_update is not None:
            _records.check_range(a.reference_s_per_update, "--reference-s-per-update",
                                 1e-6, 3600.0)
        if a.head_rows is not None:
            _records.check_range(a.head_rows, "--head-rows", 1, 1_000_000)
    except _records.RecordError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.rows % NUM_ENVS or a.rows < NUM_ENVS * (65 + a.chunk_steps * (2 + a.timed_chunks)):
        ap.error("--rows must be a multiple of 16 covering the gate and the timed chunks")

    if a.phase:
        _setup_env(a.cache, 1 if a.one_device else max(a.seeds))
        res = phase_compile(a) if a.phase == "compile" else phase_throughput(a)
        print("PHASE " + json.dumps(res))
        return 0

    from dreamer_parity import provenance
    res = {"profile": a.profile, "cpu": provenance.cpu_model(), "cpu_count": os.cpu_count(),
           "load_avg_start": os.getloadavg()[0], "rows": a.rows, "seeds": a.seeds,
           "code": provenance.git_state(REPO, ["src"])}
    with tempfile.TemporaryDirectory(prefix="candbench-") as tmp:
        # --skip-cold: the suite's persistent cache (warm after `make test`), else a fresh one
        cache = (Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                 / "dreamer-parity" / "jaxcache-main") if a.skip_cold else Path(tmp) / "jaxcache"
        if not a.skip_cold:
            print("[1/3] compile, cold cache ...", file=sys.stderr, flush=True)
            res["compile_cold"] = _child("compile", a, cache)
        print("[2/3] compile, warm cache ...", file=sys.stderr, flush=True)
        res["compile_warm"] = _child("compile", a, cache)
        print("[3/3] throughput ...", file=sys.stderr, flush=True)
        res.update(_child("throughput", a, cache))
    ref, ref_src = _reference_s_per_update(a)
    res["reference_s_per_update"], res["reference_source"] = ref, ref_src
    res["load_avg_end"] = os.getloadavg()[0]

    thr = res["throughput"]
    flops = res.get("flops_per_update", float("nan"))
    print(f"\n| candidate, profile {a.profile} ({res.get('param_count', 0):,} parameters) | value |")
    print("|---|---|")
    for name, label in (("compile_cold", "cold caches"), ("compile_warm", "warm caches")):
        if name in res:
            c = res[name]
            print(f"| compile (init + chunk + point, {max(a.seeds)} seeds), {label} | "
                  f"{c['compile_s']:.1f} s (programs {c['programs_source']} "
                  f"{c['programs_s']:.1f} s + XLA {c['xla_s']:.1f} s; import {c['import_s']:.1f} s "
                  f"before) |")
    for n, t in sorted(thr.items(), key=lambda kv: int(kv[0])):
        print(f"| {n} vmapped seed(s): seed-updates/s | {t['seed_updates_per_s']:.3f} "
              f"({t['s_per_update_per_seed']:.3f} s per seed-update, "
              f"{t.get('cpu_s_per_seed_update', float('nan')):.3f} CPU s per seed-update; "
              f"{t['timed_updates']} updates timed) |")
    print(f"| matmul FLOPs per update (HLO, loop trip counts) | {flops / 1e9:.2f} GFLOP |")
    print(f"| XLA cost_analysis flops (loop bodies once) | "
          f"{(res.get('xla_cost_analysis_flops') or float('nan')) / 1e9:.2f} GFLOP |")
    for n, t in sorted(thr.items(), key=lambda kv: int(kv[0])):
        print(f"| achieved matmul GFLOP/s, {n} seed(s) | "
              f"{flops * t['seed_updates_per_s'] / 1e9:.1f} |")
    if "state_bytes_3_seeds" in res:
        b = res["state_bytes_3_seeds"]
        print(f"| loop state, 3 seeds, {b['rows']} rows: total / replay / agent | "
              f"{b['total'] / 2**20:.1f} / {b['replay'] / 2**20:.1f} / "
              f"{b['agent_state'] / 2**20:.1f} MiB |")
    print(f"| peak resident memory (throughput process) | {res['peak_rss_bytes'] / 2**30:.2f} GiB |")
    if ref:
        print(f"| reference s per update ({ref_src}) | {ref:.3f} s |")
        for n, t in sorted(thr.items(), key=lambda kv: int(kv[0])):
            ratio = t["seed_updates_per_s"] * ref
            res.setdefault("ratio_vs_reference", {})[n] = ratio
            print(f"| {n} seed(s): candidate seed-updates/s / reference updates/s | "
                  f"{ratio:.2f}x |")
    else:
        print(f"| reference | {ref_src} |")
    print(f"| machine | {res['cpu']}, {res['cpu_count']} cores; load average "
          f"{res['load_avg_start']:.1f} -> {res['load_avg_end']:.1f} |")
    code = res["code"]
    print(f"| code benchmarked | commit {str(code['commit'])[:7]}"
          f"{' + uncommitted changes in src/' if code['dirty'] else ''} |")
    print("RESULT " + json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())

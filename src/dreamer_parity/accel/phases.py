"""What one phase of the accelerator check measures, in a child process of its own (its own
device, its own peak memory, an out-of-memory failure that ends that child only).

Run by :class:`dreamer_parity.accel.check.Check` as ``python -m dreamer_parity.accel.phases
SPEC`` (``SPEC``: the JSON object of :func:`dreamer_parity.accel.check.phase_spec`); prints
one line ``PHASE {json}``, the phase's figures.  Three kinds: ``probe`` (the backend, its
devices, their memory and the provenance), ``step`` (the train step ``jit(vmap(train_step))``
over the seeds, timed, and for a comparison its metrics per update) and ``loop`` (the run's
own chunk program: envs, policy, replay, updates).  jax is imported inside each.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import resource
import sys
import time

from dreamer_parity import provenance, records
from dreamer_parity.params import NUM_ENVS

#: Vector steps (of :data:`NUM_ENVS` environments) up to and including the gate's row 1,040.
GATE_STEPS = 65


def jax_memory(jax) -> dict:
    """``{"peak_bytes", "source", "limit_bytes", "peak_rss_bytes"}`` (bytes): the peak and
    limit of device 0's memory (``source`` ``memory_stats``), or the process's peak resident
    memory where the backend keeps no statistics (the CPU backend: ``ru_maxrss``, no limit)."""
    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:   # noqa: BLE001 - a backend without statistics
        stats = None
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if stats and "peak_bytes_in_use" in stats:
        return {"peak_bytes": int(stats["peak_bytes_in_use"]), "source": "memory_stats",
                "limit_bytes": int(stats.get("bytes_limit", 0)) or None, "peak_rss_bytes": rss}
    return {"peak_bytes": rss, "source": "ru_maxrss", "limit_bytes": None, "peak_rss_bytes": rss}


def _tree_bytes(jax, tree) -> int:
    return int(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree)))


def agent_and_config(spec: dict):
    """``(agent module, its config)``: the module ``spec["agent"]`` (the candidate's agent,
    or another of its API: the tests' stand-in), configured by its
    ``config_for_profile(spec["profile"])`` where it has one, else
    ``AgentConfig.for_profile``; ``spec["twohot_index"]`` (unless ``auto``) and
    ``spec["head_rows"]`` (unless None or absent) replace the config's.

    Raises:
      ImportError: no such module.
    """
    from dreamer_parity.candidate.config import AgentConfig

    agent = importlib.import_module(spec["agent"])
    make = getattr(agent, "config_for_profile", AgentConfig.for_profile)
    cfg = make(spec["profile"])
    if spec.get("twohot_index", "auto") != "auto":
        cfg = dataclasses.replace(cfg, twohot_index=spec["twohot_index"])
    if spec.get("head_rows") is not None:
        cfg = dataclasses.replace(cfg, head_rows=spec["head_rows"])
    return agent, cfg


def _forms(cfg) -> dict:
    """The forms the phase's program uses: each speed setting of
    ``config.AUTO_SETTINGS`` resolved on this backend (``config.resolve``), None for a
    setting the agent's config lacks (the tests' stand-in)."""
    from dreamer_parity.candidate.config import AUTO_SETTINGS, resolve
    return {f: None if getattr(cfg, f, None) is None else resolve(f, getattr(cfg, f))
            for f in AUTO_SETTINGS}


def _set_precision(jax, spec) -> None:
    p = spec.get("precision", "default")
    jax.config.update("jax_default_matmul_precision", None if p == "default" else p)


def step_seed_batch(spec: dict) -> int | None:
    """The seed batch of a step phase: None (plain ``vmap``) for ``spec["seed_batch"]``
    ``"auto"`` or None and for a comparison (``spec["compare_updates"] > 0``), else that int
    (:func:`dreamer_parity.candidate.runtime.seedmap.per_seed`)."""
    sb = spec.get("seed_batch", "auto")
    return None if sb == "auto" or spec.get("compare_updates", 0) > 0 else sb


def _step_program(spec):
    """``(jax, cfg, compiled jit(vmap(train_step)), states, batches, compile_s)`` for
    ``spec["seeds"]`` seeds, compiled with the run's options for this backend."""
    import jax
    import numpy as np
    from functools import partial

    from dreamer_parity.candidate.runtime import loop, seedmap
    from dreamer_parity.candidate.synthetic import synthetic_batch

    _set_precision(jax, spec)
    agent, cfg = agent_and_config(spec)
    n = spec["seeds"]
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    states = jax.vmap(lambda k: agent.init(k, cfg))(keys)
    # on the device once: a host batch would be copied to the device at every call
    batches = jax.device_put(jax.tree_util.tree_map(
        lambda *x: np.stack(x),
        *[synthetic_batch(cfg, spec["batch"], spec["length"], i) for i in range(n)]))
    step = jax.jit(jax.vmap(seedmap.per_seed(partial(agent.train_step, cfg),
                                             step_seed_batch(spec))),
                   compiler_options=loop.compiler_options(agent))
    t0 = time.perf_counter()
    compiled = step.lower(states, batches, keys).compile()
    return jax, cfg, compiled, states, batches, time.perf_counter() - t0


def _update_keys(jax, i: int, n: int):
    return jax.random.split(jax.random.fold_in(jax.random.PRNGKey(1), i), n)


def probe(spec: dict) -> dict:
    """The ``probe`` phase: ``{"backend", "provenance", "devices": [{"platform", "kind"}],
    "memory"}`` (:func:`jax_memory`).  A bad ``spec["agent"]`` stops the check here."""
    import jax
    devs = jax.devices()
    agent_and_config(spec)
    try:   # as a run starts: its provenance then names the version set that passed
        provenance.check_pins(provenance.REPO_ROOT / "requirements.lock")
    except provenance.PinError:
        pass   # the parent has recorded the failed check
    return {"backend": provenance.backend(), "provenance": provenance.collect(),
            "devices": [{"platform": d.platform, "kind": d.device_kind} for d in devs],
            "memory": jax_memory(jax)}


def step(spec: dict) -> dict:
    """The ``step`` phase: the train step over ``spec["seeds"]`` seeds on fixed synthetic
    batches; ``spec["updates"]`` timed updates after one untimed one (``times_s``,
    ``update_s``: seconds; ``seed_updates_per_s``), and with ``spec["compare_updates"]`` the
    training metrics of that many updates from the start (``metrics``: ``{name: [float per
    update]}`` of seed 0, plus ``params_abs_sum``).  Also ``compile_s``, ``memory``,
    ``state_bytes_per_seed``, the seed batch, the forms (:func:`_forms`) and head rows it
    ran."""
    jax, cfg, compiled, states, batches, compile_s = _step_program(spec)
    n = spec["seeds"]
    out = {"seeds": n, "compile_s": compile_s, "backend": provenance.backend(),
           "seed_batch": step_seed_batch(spec), **_forms(cfg),
           "head_rows": getattr(cfg, "head_rows", None)}
    start = states
    if spec["updates"] > 0:
        times = []
        for i in range(spec["updates"] + 1):
            t0 = time.perf_counter()
            states, outs, metrics = compiled(states, batches, _update_keys(jax, i, n))
            jax.block_until_ready((states, outs, metrics))
            times.append(time.perf_counter() - t0)
        timed = sum(times[1:])
        out.update({"updates": spec["updates"], "times_s": times, "timed_s": timed,
                    "update_s": timed / spec["updates"],
                    "seed_updates_per_s": n * spec["updates"] / timed})
    if spec.get("compare_updates", 0) > 0:
        # the same program from the same start: fixed keys and batch, per-update metrics
        states, series = start, {}
        for i in range(spec["compare_updates"]):
            states, _, metrics = compiled(states, batches, _update_keys(jax, 10_000 + i, n))
            for k, v in jax.device_get(metrics).items():
                series.setdefault(k, []).append(float(v[0]))
        leaves = jax.tree.leaves(jax.device_get(states["params"]
                                                if isinstance(states, dict) else states.params))
        series["params_abs_sum"] = [float(sum(abs(x[0].astype("float64")).sum() for x in leaves))]
        out["metrics"] = series
    out["memory"] = jax_memory(jax)
    out["state_bytes_per_seed"] = _tree_bytes(jax, states) // n
    return out


def loop(spec: dict) -> dict:
    """The ``loop`` phase: the run's chunk program (``loop.build``) for ``spec["seeds"]``
    seeds with replay for ``spec["rows"]`` rows; the vector steps up to the gate, one untimed
    chunk, then ``spec["loop_chunks"]`` timed chunks of ``spec["loop_steps"]`` vector steps.
    Returns the compile seconds (init and chunk), the chunk times (s), ``timed_updates``,
    ``update_s``, ``seed_updates_per_s``, ``updates_done``, ``memory`` and the settings run."""
    import jax
    import jax.numpy as jnp

    from dreamer_parity.candidate.runtime import loop as looplib
    from dreamer_parity.schedule import per_vector_step

    _set_precision(jax, spec)
    agent, cfg = agent_and_config(spec)
    n, cs, timed = spec["seeds"], spec["loop_steps"], spec["loop_chunks"]
    seed_batch = looplib.resolve_seed_batch(spec.get("seed_batch", "auto"))
    progs = looplib.build(agent, cfg, capacity=spec["rows"] // NUM_ENVS, chunk_steps=cs,
                          eval_episodes=10, seed_batch=seed_batch, mesh=None)
    keys = [looplib.seed_keys(s) for s in range(n)]
    stacked = {k: jnp.stack([kk[k] for kk in keys]) for k in keys[0]}
    t0 = time.perf_counter()
    init = progs.init.lower(stacked).compile()
    t1 = time.perf_counter()
    shape = jax.eval_shape(progs.init, stacked)
    chunk = progs.chunk.lower(shape, jnp.zeros((cs,), jnp.int32)).compile()
    t2 = time.perf_counter()
    carry = init(stacked)
    state_bytes = _tree_bytes(jax, carry)
    gate_chunks = -(-GATE_STEPS // cs)
    counts = per_vector_step((gate_chunks + 1 + timed) * cs)
    t3 = time.perf_counter()
    for c in range(gate_chunks):
        carry, _ = chunk(carry, jnp.asarray(counts[c * cs:(c + 1) * cs], jnp.int32))
    jax.block_until_ready(carry)
    gate_s = time.perf_counter() - t3
    times, ups = [], []
    for c in range(gate_chunks, gate_chunks + 1 + timed):
        cnt = counts[c * cs:(c + 1) * cs]
        t0c = time.perf_counter()
        carry, ep = chunk(carry, jnp.asarray(cnt, jnp.int32))
        jax.block_until_ready((carry, ep))
        times.append(time.perf_counter() - t0c)
        ups.append(int(sum(cnt)))
    t, u = sum(times[1:]), sum(ups[1:])
    done = int(jax.device_get(carry["updates"])[0])
    return {"seeds": n, "compile_s": (t1 - t0) + (t2 - t1), "compile_init_s": t1 - t0,
            "compile_chunk_s": t2 - t1, "gate_s": gate_s, "warmup_chunk_s": times[0],
            "chunk_times_s": times[1:], "timed_updates": u, "timed_s": t,
            "update_s": t / u, "seed_updates_per_s": n * u / t, "updates_done": done,
            "state_bytes_per_seed": state_bytes // n, "memory": jax_memory(jax),
            "backend": provenance.backend(), "precision": spec.get("precision", "default"),
            "seed_batch": seed_batch, **_forms(cfg),
            "head_rows": getattr(cfg, "head_rows", None)}


KINDS = {"probe": probe, "step": step, "loop": loop}


def main(argv=None) -> int:
    """``python -m dreamer_parity.accel.phases SPEC``: run the phase ``SPEC`` names (on the
    CPUs ``SPEC["cpus"]`` where given) and print ``PHASE {json}``; exit 0.  A ``SPEC`` that
    is not a JSON object naming one of :data:`KINDS` is refused in one line, exit 2."""
    t_start = time.perf_counter()
    argv = sys.argv[1:] if argv is None else argv
    try:
        spec = json.loads(argv[0]) if len(argv) == 1 else None
    except ValueError:
        spec = None
    if not isinstance(spec, dict) or spec.get("kind") not in KINDS:
        print(f"error: expected one argument, a JSON object whose kind is one of "
              f"{', '.join(KINDS)}", file=sys.stderr)
        return 2
    if spec.get("cpus"):
        os.sched_setaffinity(0, set(spec["cpus"]))
    res = KINDS[spec["kind"]](spec)
    res["child_wall_s"] = time.perf_counter() - t_start
    print("PHASE " + json.dumps(records.clean_json(res), allow_nan=False), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

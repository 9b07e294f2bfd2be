"""Run the candidate for every seed of a params file; write the per-seed result files.

Command line (the DVC stage)::

    python -m dreamer_parity.candidate.runtime.run --params params.yaml --out results \\
        [--work-dir DIR] [--deadline-s S] [--checkpoint point|deadline] [--set KEY=VALUE ...] \\
        [--seed-batch auto|all|N] [--executables DIR]

``--executables DIR`` loads the run's programs compiled in advance where ``DIR`` holds them
for this run and this device (:mod:`.executables`; a GPU machine spends its minutes on seeds,
not on XLA:GPU's compile), and compiles them otherwise; ``run.json`` says which.

``--set`` changes a parameter of the file first, as ``dvc exp run -S`` would (a batch of
seeds on a device: ``--set 'seeds=[10, 11, 12]'``); the run records the parameters it ran.

The round is read and validated (:func:`dreamer_parity.params.load_round`) before anything heavy
is imported or compiled.  All seeds run in one jitted program
(:mod:`dreamer_parity.candidate.runtime.loop`).  On CPU the command asks XLA for one host
device per seed and the program runs each seed's one-seed program, without ``vmap``, on its
own device (:mod:`.seedmesh`); where the seeds share one device (one host device, or a GPU)
the program is ``vmap``ped over them (:mod:`.seedmap`).  ``--seed-batch`` says how that
``vmap`` runs the train step: ``auto`` (the default: one seed at a time on CPU, all seeds
batched elsewhere, :func:`.seedmap.default_seed_batch`), ``all`` (all seeds batched) or
``N`` (groups of N seeds batched, one group after another: fewer temporaries on a device
than all at once; :func:`.seedmap.per_seed`).  The resolved value changes float32
rounding, so it is part of the checkpoint key, and ``run.json`` (``config.seed_layout``)
and ``timing.json`` record it.  At every evaluation point the records are built
on the host and a checkpoint is written to ``<work-dir>/<key>/`` (default: the per-user
cache ``${XDG_CACHE_HOME:-~/.cache}/dreamer-parity/candidate-runs``, or
``$DREAMER_PARITY_WORK_DIR``; :mod:`dreamer_parity.candidate.runtime.checkpoint`); a killed run started again with the same
parameters and code resumes from it and writes the same records.  Only when the run
completes are ``<out>/candidate/s<seed>/{records.jsonl, episodes.jsonl, run.json, timing.json,
params.npz, DONE.json}`` written (``DONE.json`` last).

With ``--deadline-s S`` (a command of bounded length) the run stops at the first chunk
boundary after which the next chunk would end later than ``S`` seconds after the command
started: it writes a checkpoint there and exits with status 3, writing no result files;
the same command started again (same parameters, code, backend and precision) resumes
from that checkpoint.  ``--checkpoint deadline`` writes checkpoints only then (and not at
every evaluation point, the default ``point``): a 100-seed loop state is several GiB.

A seed that fails the finiteness check at an evaluation point (non-finite loss,
parameters or policy latents, or an action out of range) gets a ``status: "failed"``
record at that point, no later records, and ``DONE.json`` ``{"status": "failed",
"reason": ...}``; the other seeds run on and the command exits 0.

Exit codes: 0 done (including failed seeds), 2 bad parameters or arguments, 3 stopped at
the deadline (checkpoint written, nothing finished).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

from ... import params as paramslib
from ... import records
from ... import sides
from ...schedule import format_duration

__all__ = ["main", "run", "RunParamsError", "chunk_steps_for", "parse_seed_batch",
           "ProgramSettings", "program_settings", "seed_layout", "compile_programs",
           "PROGRAM_PARAMS",
           "CHECKPOINT_POLICIES", "EXIT_DEADLINE", "SEED_BATCH_ALL"]

NUM_ENVS = paramslib.NUM_ENVS
CHUNK_MAX = 25          # vector steps per jitted chunk call (progress granularity)
RUN_KEYS = ("profile", "decode", "seeds", "rows", "eval_every", "eval_episodes")
#: The parameters a run's programs are built from (:func:`program_settings`); programs
#: compiled beforehand record them (:mod:`.executables`).
PROGRAM_PARAMS = ("profile", "decode", "rows", "eval_every", "eval_episodes")
#: When checkpoints are written: at every evaluation point, or only at the deadline.
CHECKPOINT_POLICIES = ("point", "deadline")
#: Exit status of a run stopped at its deadline (checkpoint written, no result files).
EXIT_DEADLINE = 3
#: The ``--seed-batch`` word for all seeds batched in one ``vmap`` (``seed_batch=None``).
SEED_BATCH_ALL = "all"
#: Largest ``--seed-batch N`` taken (far above any seed count a machine holds).
SEED_BATCH_MAX = 1_000_000


class RunParamsError(ValueError):
    """Arguments of the runner itself are unusable (one-line message)."""


def chunk_steps_for(steps_per_point: int, limit: int = CHUNK_MAX) -> int:
    """The largest divisor of ``steps_per_point`` not above ``limit``."""
    for d in range(min(limit, steps_per_point), 0, -1):
        if steps_per_point % d == 0:
            return d
    return 1


def parse_seed_batch(text: str):
    """The ``--seed-batch`` value ``text`` as :func:`run` and :func:`.loop.build` take it.

    Imports no jax, so the command line refuses a bad value before jax starts.

    Args:
      text: ``"auto"``, ``"all"`` or a positive decimal integer of at most
        :data:`SEED_BATCH_MAX` (surrounding blanks ignored).

    Returns:
      ``"auto"`` (resolved later, on the backend: :func:`.loop.resolve_seed_batch`), None
      for ``"all"`` (plain ``vmap``: all seeds batched) or the int N (groups of N seeds).

    Raises:
      RunParamsError: any other text; the one-line message names ``--seed-batch``.
    """
    word = str(text).strip()
    if word == "auto":
        return "auto"
    if word == SEED_BATCH_ALL:
        return None
    if word.isdecimal() and word.isascii() and len(word) <= 7 and \
            1 <= int(word) <= SEED_BATCH_MAX:
        return int(word)
    raise RunParamsError(f"--seed-batch {str(text)[:40]!r}: must be auto, {SEED_BATCH_ALL} or "
                         f"a whole number of seeds from 1 to {SEED_BATCH_MAX}")


def config_dict(cfg) -> dict:
    """A dataclass config as a JSON-able dict (mappings become plain dicts)."""
    from collections.abc import Mapping
    out = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        out[f.name] = dict(v) if isinstance(v, Mapping) else v
    return out


def _log(msg: str) -> None:
    print(f"[candidate] {msg}", file=sys.stderr, flush=True)


def _default_agent(params: dict, backend: str | None = None):
    """The candidate agent and its config, with its ``auto`` speed settings resolved for
    ``backend`` (default: this process's; ``AgentConfig.resolved``), so that ``run.json``
    names the forms the run used."""
    from .. import agent as agentlib
    from ..config import AgentConfig
    return agentlib, AgentConfig.from_params(params).resolved(backend)


@dataclasses.dataclass(frozen=True)
class ProgramSettings:
    """What a run's programs are built from, decided once from its parameters
    (:func:`program_settings`): the agent module and config (``cfg_dict`` as run.json
    writes it), replay ``capacity`` (rows per environment), vector steps per chunk, evaluation
    episodes per point, and the replay/ratio ``schedule``."""
    agent: object
    cfg: object
    cfg_dict: dict
    capacity: int
    chunk_steps: int
    eval_episodes: int
    schedule: object


def program_settings(params: dict, agent=None, cfg=None,
                     backend: str | None = None) -> ProgramSettings:
    """The run's :class:`ProgramSettings` for validated ``params`` (its
    :data:`PROGRAM_PARAMS`); ``agent``/``cfg`` default to the candidate's,
    resolved for ``backend`` (default: this process's backend).  :func:`run` and the
    programs compiled in advance for another machine
    (:mod:`dreamer_parity.accel.precompile`) both take them from here, so their program keys
    agree."""
    from ...schedule import Schedule
    if agent is None:
        agent, cfg = _default_agent(params, backend)
    return ProgramSettings(agent=agent, cfg=cfg, cfg_dict=config_dict(cfg),
                           capacity=params["rows"] // NUM_ENVS,
                           chunk_steps=chunk_steps_for(params["eval_every"] // NUM_ENVS),
                           eval_episodes=params["eval_episodes"], schedule=Schedule())


def _flatten_params(tree, prefix=""):
    out = {}
    if isinstance(tree, dict):
        for k, v in tree.items():
            out.update(_flatten_params(v, f"{prefix}{k}/"))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            out.update(_flatten_params(v, f"{prefix}{i}/"))
    else:
        out[prefix.rstrip("/")] = tree
    return out


def _write_outputs(out: Path, run_params: dict, cfg_dict: dict, host: dict, final_params,
                   seeds, timing: dict, argv: dict, schedule: dict,
                   layout: dict, programs: dict) -> None:
    import numpy as np

    from ...provenance import collect

    prov = collect()
    for i, seed in enumerate(seeds):
        d = records.run_dir(out, "candidate", seed)
        d.mkdir(parents=True, exist_ok=True)
        done = d / records.DONE
        if done.exists():
            done.unlink()   # an unfinished rewrite must never look finished
        key = str(seed)
        records.write_jsonl(d / "records.jsonl", host["records"][key])
        records.write_jsonl(d / "episodes.jsonl", host["episodes"][key])
        records.write_json(d / "run.json", {
            "side": "candidate", "seed": int(seed),
            "config": {"agent": cfg_dict, "params": run_params, "schedule": schedule,
                       "seed_layout": layout, "programs": programs},
            "args": argv, "provenance": prov})
        records.write_json(d / "timing.json", timing)
        flat = {k: np.asarray(v)[i] for k, v in _flatten_params(final_params).items()}
        tmp = d / f"params.npz.tmp-{os.getpid()}"
        with open(tmp, "wb") as f:
            np.savez_compressed(f, **flat)
        os.replace(tmp, d / "params.npz")
        reason = host["failed"].get(key)
        records.write_done(d, "failed" if reason else "ok", reason)


def run(params: dict, out, work_dir=None, agent=None, cfg=None,
        hooks: dict | None = None, argv: dict | None = None, deadline: float | None = None,
        checkpoint: str = "point", seed_batch="auto", executables=None) -> dict:
    """Run all seeds of validated ``params``; write the outputs under ``out``.

    Args:
      params: a validated params dict (:func:`dreamer_parity.params.validate`).
      out: the output root (``<out>/candidate/s<seed>/`` per seed; the stage passes ``results``).
      work_dir: checkpoint root (None: :func:`.checkpoint.default_root`); the run's
        checkpoint is ``<work_dir>/<key>/``.
      agent, cfg: the agent module and its config (default: ``candidate.agent`` with
        ``AgentConfig.from_params(params)``).
      hooks: optional test hooks: ``after_point(carry, point_index) -> carry`` applied
        after each evaluation point's checkpoint; ``stop_after_points`` (int) returns
        early (simulates a killed run: no outputs written).
      argv: the command-line arguments to record in run.json.
      deadline: a ``time.perf_counter()`` value, or None: the run stops at the first chunk
        boundary after which the next chunk (as long as the longest so far) would end
        later, writes a checkpoint there and returns without result files.
      checkpoint: ``"point"`` (a checkpoint at every evaluation point) or ``"deadline"``
        (only when stopped at the deadline).
      seed_batch: how the seed ``vmap`` runs the train step where several seeds share a
        device: ``"auto"`` (:func:`.loop.resolve_seed_batch`: 1 on CPU, None elsewhere),
        None (all seeds batched) or a positive int (groups of that many seeds;
        :func:`.seedmap.per_seed`).  Resolved before anything is built; the resolved value
        enters the checkpoint key and is recorded in ``timing.json`` and ``run.json``.
        With one seed per program (one seed, or the CPU's seed mesh) the train step runs
        unbatched whatever the value.
      executables: None, or a directory of programs compiled in advance
        (:mod:`.executables`, :mod:`dreamer_parity.accel.precompile`): its entry for this
        run's program key is loaded instead of compiling when it fits this device; otherwise
        the run compiles and says why.  ``run.json`` records which (``config.programs``), and
        loaded programs give another checkpoint key than compiled ones.

    Returns:
      dict with ``key``, ``resumed_from_rows``, ``records`` (per seed), ``failed``,
      ``timing``, ``completed`` (False when stopped by a hook or the deadline) and
      ``stopped`` (None, ``"hook"`` or ``"deadline"``).

    Raises:
      ValueError: ``checkpoint`` is not one of :data:`CHECKPOINT_POLICIES`, or
        ``seed_batch`` is neither ``"auto"``, None nor a positive int (before anything
        is built).
    """
    if checkpoint not in CHECKPOINT_POLICIES:
        raise ValueError(f"checkpoint must be one of {CHECKPOINT_POLICIES}, got {checkpoint!r}")
    t_start = time.perf_counter()
    hooks = hooks or {}
    ps = program_settings(params, agent, cfg)
    agent, cfg, cfg_dict, sched = ps.agent, ps.cfg, ps.cfg_dict, ps.schedule
    import jax
    import jax.numpy as jnp
    import numpy as np

    from ...schedule import per_vector_step
    from . import loop as looplib
    from . import seedmesh

    seeds = list(params["seeds"])
    rows = params["rows"]
    total_steps = ps.capacity
    chunk_steps = ps.chunk_steps
    chunks_per_point = params["eval_every"] // NUM_ENVS // chunk_steps
    n_chunks = total_steps // chunk_steps
    counts_all = np.asarray(per_vector_step(total_steps, sched), np.int32)
    run_params = {k: params[k] for k in RUN_KEYS}
    schedule = dict(dataclasses.asdict(sched), ratio=sched.ratio,
                    updates_at_points=[int(counts_all[:p // NUM_ENVS].sum())
                                       for p in paramslib.eval_points(params)],
                    chunk_steps=chunk_steps)
    seed_batch, mesh, layout = seed_layout(seed_batch, len(seeds))
    for s in seeds:   # stale completion markers must not make this run look finished
        records.run_dir(out, "candidate", s).joinpath(records.DONE).unlink(missing_ok=True)

    keys = [looplib.seed_keys(s) for s in seeds]
    stacked = seedmesh.put_seeds({k: jnp.stack([kk[k] for kk in keys]) for k in keys[0]}, mesh)

    compiled, carry_shape, compile_s, programs = compile_programs(
        ps, stacked, seed_batch=seed_batch, mesh=mesh, n_seeds=len(seeds),
        executables=executables)
    key, ckdir = _checkpoint_key(run_params, cfg_dict, agent, layout, programs, work_dir)
    init_c, chunk_c, point_c = compiled.init, compiled.chunk, compiled.point

    carry, host, resumed = _resume_or_start(ckdir, carry_shape, init_c, stacked, mesh, seeds,
                                            chunk_steps, key)
    t_loop = time.perf_counter()
    updates_before = int(counts_all[:host["chunk"] * chunk_steps].sum())
    total_updates = int(counts_all.sum())
    carry, stopped = _chunk_loop(
        carry, host, seeds=seeds, cfg=cfg, mesh=mesh, chunk_c=chunk_c, point_c=point_c,
        counts_all=counts_all, chunk_steps=chunk_steps, n_chunks=n_chunks,
        chunks_per_point=chunks_per_point, updates_before=updates_before,
        total_updates=total_updates, t_loop=t_loop, checkpoint=checkpoint, ckdir=ckdir,
        hooks=hooks, deadline=deadline, key=key)

    wall = time.perf_counter() - t_start
    loop_s = time.perf_counter() - t_loop
    ran_updates = int(counts_all[:host["chunk"] * chunk_steps].sum()) - updates_before
    timing = {
        "compile_s": compile_s, "wall_s": wall, "loop_s": loop_s,
        "updates_this_session": ran_updates,
        "seed_updates_per_s": ran_updates * len(seeds) / loop_s if loop_s > 0 else None,
        "resumed_from_rows": resumed, "seeds": len(seeds),
        "backend": jax.default_backend(), **layout, "programs": programs["source"],
    }
    result = {"key": key, "resumed_from_rows": resumed, "records": host["records"],
              "episodes": host["episodes"], "failed": dict(host["failed"]), "timing": timing,
              "completed": stopped is None, "stopped": stopped}
    if stopped:
        return result
    agent_state = carry["agent"]
    final_params = jax.device_get(looplib.field(agent_state, "params"))
    _write_outputs(Path(out), run_params, cfg_dict, host, final_params, seeds, timing,
                   argv or {}, schedule, layout, programs)
    _log(f"done: {rows} rows, {total_updates} updates per seed, wall {format_duration(wall)}; "
         f"outputs in {out}")
    return result


def seed_layout(seed_batch, n_seeds: int):
    """``(seed batch, mesh, seed layout)``: the seed layout changes float32 rounding
    (candidate/runtime/seedmesh.py, seedmap.py), so the seed devices and the resolved seed
    batch are part of the checkpoint key."""
    from . import loop as looplib
    from . import seedmesh

    seed_batch = looplib.resolve_seed_batch(seed_batch)
    mesh = seedmesh.seed_mesh(n_seeds)
    return seed_batch, mesh, {"seed_batch": seed_batch,
                              "seed_devices": 1 if mesh is None else n_seeds}


def _checkpoint_key(run_params: dict, cfg_dict: dict, agent, layout: dict,
                    programs: dict, work_dir) -> tuple[str, Path]:
    """``(checkpoint key, checkpoint directory)``.  Programs compiled elsewhere for this
    device may round otherwise than the ones this process compiles (autotuning,
    :mod:`.executables`), so their target enters the key; compiled ones add nothing (the
    keys of earlier runs stay valid)."""
    from . import checkpoint as ckptlib

    extra = dict(layout)
    if programs["source"] == "precompiled":
        extra["programs"] = programs["target"]
    key = ckptlib.run_key(run_params, cfg_dict, getattr(agent, "__name__", str(agent)),
                          extra=extra, agent_file=getattr(agent, "__file__", None))
    return key, Path(work_dir if work_dir is not None else ckptlib.default_root()) / key


def compile_programs(ps: ProgramSettings, stacked, *, seed_batch, mesh, n_seeds: int,
                     executables=None):
    """The run's three programs compiled for ``stacked`` seed keys: loaded from
    ``executables`` (:mod:`.executables`) when it holds them for this run and device, else
    loaded or built (:func:`.program_store.load_or_build`) and compiled here.

    Args:
      ps: the run's :class:`ProgramSettings`.
      stacked: the seed keys ``{name: uint32[seeds, 2]}`` (laid along ``mesh``).
      seed_batch, mesh: resolved (:func:`.loop.resolve_seed_batch`, :func:`.seedmesh.seed_mesh`).
      n_seeds: the seed count.
      executables: None or the directory of programs compiled in advance.

    Returns ``(compiled, carry shape, seconds, programs)``; ``programs`` is what
    ``run.json`` records as ``config.programs``: ``{"source": "precompiled", "key",
    "target"}`` or ``{"source": "compiled", "key"}`` (with ``"why"`` when ``executables``
    was given but not used).

    Raises:
      Whatever tracing or compiling raises; an unusable entry of ``executables`` is not
      raised (the programs are compiled, ``why`` says why).
    """
    from . import executables as exelib
    from . import program_store

    t0 = time.perf_counter()
    agent, cfg, cfg_dict, sched = ps.agent, ps.cfg, ps.cfg_dict, ps.schedule
    capacity, chunk_steps, eval_episodes = ps.capacity, ps.chunk_steps, ps.eval_episodes
    key, _, _ = program_store.key_for(agent, cfg_dict, capacity, chunk_steps, eval_episodes,
                                      n_seeds, sched, seed_batch, mesh)
    programs = {"source": "compiled", "key": key}
    if executables is not None:
        try:
            if mesh is not None:
                raise exelib.ExecutableStoreError(
                    f"{key}: compiled programs are for one device; this run lays its "
                    f"{n_seeds} seeds over {n_seeds} host devices")
            compiled, carry_shape, info = exelib.load(executables, key)
            compile_s = time.perf_counter() - t0
            _log(f"programs loaded in {compile_s:.1f} s from {executables} (compiled for "
                 f"{info['target'].get('device_kind')}, key {key})")
            return compiled, carry_shape, compile_s, {
                "source": "precompiled", "key": key, "target": info["target"]}
        except exelib.ExecutableStoreError as e:
            programs["why"] = str(e)
            _log(f"compiling here: {e}")
    program_store.use_compilation_cache()
    progs, carry_shape, _ = program_store.load_or_build(
        agent, cfg, cfg_dict, capacity=capacity, chunk_steps=chunk_steps,
        eval_episodes=eval_episodes, example_keys=stacked, s=sched, log=_log,
        seed_batch=seed_batch, mesh=mesh)
    compiled = program_store.compile_all(progs, stacked, carry_shape)
    compile_s = time.perf_counter() - t0
    _log(f"compiled in {compile_s:.1f} s ({n_seeds} seeds, "
         f"{'one device per seed' if mesh is not None else 'one device'}, "
         f"{'batched' if seed_batch is None else f'train step {seed_batch} seed(s) at a time'}, "
         f"{chunk_steps} vector steps per chunk, program key {key})")
    return compiled, carry_shape, compile_s, programs


def _resume_or_start(ckdir: Path, carry_shape, init_c, stacked, mesh, seeds: list[int],
                     chunk_steps: int, key: str):
    """``(carry, host, resumed rows)``: the checkpoint under ``ckdir`` when there is one,
    else the initial carry and empty host records."""
    from . import checkpoint as ckptlib
    from . import seedmesh

    loaded = ckptlib.load(ckdir, carry_shape) if ckdir.exists() else None
    if loaded is not None:
        carry_np, host = loaded
        carry = seedmesh.put_seeds(carry_np, mesh)
        resumed = host["chunk"] * chunk_steps * NUM_ENVS
        _log(f"resuming from the checkpoint at rows {resumed} (key {key})")
        return carry, host, resumed
    host = {"chunk": 0, "records": {str(s): [] for s in seeds},
            "episodes": {str(s): [] for s in seeds}, "failed": {}}
    _log(f"starting clean (no checkpoint under key {key})")
    return init_c(stacked), host, 0


def _record_point(report, host: dict, seeds: list[int], cfg) -> None:
    """Append each live seed's record of one evaluation point (``report``, on the host)
    to ``host["records"]``; a seed whose health check fails is marked failed."""
    from . import recording

    for i, s in enumerate(seeds):
        k = str(s)
        if k in host["failed"]:
            continue
        reason = recording.health_reason(report, i)
        rec = recording.make_record(report, i, s, NUM_ENVS, host["episodes"][k],
                                    getattr(cfg, "retnorm_limit", 1.0), reason is not None)
        host["records"][k].append(rec)
        if reason:
            host["failed"][k] = f"rows {rec['rows']}: {reason}"
            _log(f"seed {s} FAILED at rows {rec['rows']}: {reason}")


def _chunk_loop(carry, host: dict, *, seeds, cfg, mesh, chunk_c, point_c, counts_all,
                chunk_steps, n_chunks, chunks_per_point, updates_before, total_updates, t_loop,
                checkpoint, ckdir, hooks, deadline, key):
    """Run the chunks from ``host["chunk"]`` to the end (or a stop), updating ``host`` in
    place: episodes every chunk, records and a checkpoint (policy ``checkpoint``) at
    every evaluation point.  Returns ``(carry, stopped)``: None, ``"hook"`` or
    ``"deadline"`` (then the checkpoint is written here)."""
    import jax

    from . import checkpoint as ckptlib
    from . import recording, seedmesh

    points_done = 0
    stopped = None
    longest_chunk = 0.0
    for c in range(host["chunk"], n_chunks):
        t_chunk = time.perf_counter()
        first = c * chunk_steps
        counts = seedmesh.put_replicated(counts_all[first:first + chunk_steps], mesh)
        carry, ep = chunk_c(carry, counts)
        ep = jax.device_get(ep)
        for i, s in enumerate(seeds):
            host["episodes"][str(s)] += recording.episodes_from_chunk(ep, first, i, s)
        if (c + 1) % chunks_per_point:
            host["chunk"] = c + 1
            _progress(c, chunk_steps, counts_all, updates_before, total_updates, len(seeds),
                      t_loop)
            longest_chunk = max(longest_chunk, time.perf_counter() - t_chunk)
            if _past(deadline, longest_chunk) and c + 1 < n_chunks:
                stopped = "deadline"
                break
            continue
        carry, report = point_c(carry)
        _record_point(jax.device_get(report), host, seeds, cfg)
        host["chunk"] = c + 1
        if checkpoint == "point":
            ckptlib.save(ckdir, carry, host)
        _progress(c, chunk_steps, counts_all, updates_before, total_updates, len(seeds), t_loop,
                  evals={s: host["records"][str(s)][-1]["eval_mean"] for s in seeds
                         if host["records"][str(s)]})
        points_done += 1
        if "after_point" in hooks:
            carry = seedmesh.put_seeds(hooks["after_point"](carry, c // chunks_per_point), mesh)
        if hooks.get("stop_after_points") and points_done >= hooks["stop_after_points"]:
            stopped = "hook"
            break
        longest_chunk = max(longest_chunk, time.perf_counter() - t_chunk)
        if _past(deadline, longest_chunk) and c + 1 < n_chunks:
            stopped = "deadline"
            break
    if stopped == "deadline":
        t_save = time.perf_counter()
        ckptlib.save(ckdir, carry, host)
        _log(f"deadline: stopped at rows {host['chunk'] * chunk_steps * NUM_ENVS}, checkpoint "
             f"written in {time.perf_counter() - t_save:.1f} s (key {key}); the same command "
             f"resumes")
    return carry, stopped


def _past(deadline: float | None, chunk_s: float) -> bool:
    """Whether one more chunk of ``chunk_s`` seconds would end after ``deadline``."""
    return deadline is not None and time.perf_counter() + chunk_s >= deadline


def _progress(c, chunk_steps, counts_all, updates_before, total_updates, n_seeds, t_loop,
              evals=None):
    done_steps = (c + 1) * chunk_steps
    upd = int(counts_all[:done_steps].sum())
    el = time.perf_counter() - t_loop
    ran = upd - updates_before
    rate = ran * n_seeds / el if el > 0 else 0.0
    eta = (total_updates - upd) * n_seeds / rate if rate > 0 else float("nan")
    msg = (f"rows {done_steps * NUM_ENVS}/{len(counts_all) * NUM_ENVS}  updates {upd}/"
           f"{total_updates}  {rate:.2f} seed-updates/s  ETA {format_duration(eta)}")
    if evals:
        msg += "  eval " + " ".join(f"s{s}={v:.1f}" for s, v in evals.items())
    _log(msg)


def main(argv=None) -> int:
    """Command-line entry point; returns the exit code (2 on bad input)."""
    ap = argparse.ArgumentParser(prog="python -m dreamer_parity.candidate.runtime.run",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", default="params.yaml", help="the params file")
    ap.add_argument("--out", required=True, help="output root; seed S goes to <out>/candidate/sS (the stage passes results)")
    ap.add_argument("--work-dir", default=None,
                    help="checkpoint root (default: $DREAMER_PARITY_WORK_DIR, else "
                         "${XDG_CACHE_HOME:-~/.cache}/dreamer-parity/candidate-runs)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="change a parameter of --params first (as dvc exp run -S)")
    ap.add_argument("--deadline-s", type=float, default=None, metavar="S",
                    help="stop at a chunk boundary before S seconds from the start, write a "
                         "checkpoint and exit 3; the same command resumes")
    ap.add_argument("--checkpoint", choices=CHECKPOINT_POLICIES, default="point",
                    help="write checkpoints at every evaluation point (point, default) or "
                         "only at the deadline (deadline)")
    ap.add_argument("--executables", default=None, metavar="DIR",
                    help="programs compiled in advance (python -m dreamer_parity.accel."
                         "precompile): loaded when DIR holds this run's, else compiled here")
    ap.add_argument("--seed-batch", default="auto", metavar="auto|all|N",
                    help="seeds whose train steps run batched together where seeds share a "
                         "device: auto (default: 1 on CPU, all elsewhere), all, or N "
                         "(groups of N, one after another: less device memory)")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    from ...provenance import REPO_ROOT, PinError, check_pins
    try:
        round_ = paramslib.load_round(args.params, args.set)
        # what this process imports must be what requirements.lock pins (before any compile;
        # $DREAMER_PARITY_ALLOW_VERSIONS=1 runs anyway and run.json records the override)
        check_pins(REPO_ROOT / "requirements.lock")
        seed_batch = parse_seed_batch(args.seed_batch)
        if args.deadline_s is not None and not (0 < args.deadline_s < 1e7):
            raise RunParamsError(f"--deadline-s {args.deadline_s}: must be a positive number "
                                 f"of seconds below 1e7")
        if args.checkpoint == "deadline" and args.deadline_s is None:
            raise RunParamsError("--checkpoint deadline needs --deadline-s (otherwise no "
                                 "checkpoint is ever written)")
        if args.executables is not None and not Path(args.executables).is_dir():
            raise RunParamsError(f"--executables {args.executables}: not a directory")
        if args.work_dir is None:
            from .checkpoint import default_root
            args.work_dir = str(default_root())
        out, work = Path(args.out).resolve(), Path(args.work_dir).resolve()
        if out == work or out in work.parents:
            raise RunParamsError(f"--work-dir {args.work_dir} must not lie inside --out "
                                 f"{args.out} (DVC deletes stage outputs before a run)")
        # seeds whose candidate source is not `run` come from elsewhere: a stand-in marker
        # each (docs/SIDES.md), naming the runs sides.resolve reads for it (the one decision)
        elsewhere = sides.stand_ins(round_, "candidate")
    except FileNotFoundError as e:
        print(f"error: params file not found: {e.filename}", file=sys.stderr)
        return 2
    except (paramslib.ParamsError, RunParamsError, PinError, sides.SideError,
            records.RecordError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    named = round_.candidate.origins()
    for seed, entry in elsewhere.items():
        sides.write_stand_in(records.run_dir(args.out, "candidate", seed), "candidate",
                             seed, entry.source, named[seed])
        _log(sides.stand_in_line("candidate", entry, named[seed]))
    here = round_.candidate.runs_here()
    if not here:
        return 0
    params = {**round_.to_params(), "seeds": list(here)}
    # one host device per seed (candidate/runtime/seedmesh.py), before jax starts its CPU backend
    from . import seedmesh
    seedmesh.request_host_devices(len(params["seeds"]))
    from ...provenance import relative_to_roots
    from .checkpoint import user_cache_root
    roots = {"repo": REPO_ROOT, "cwd": Path.cwd(), "user-cache": user_cache_root()}
    result = run(params, args.out, args.work_dir,
                 argv={"params": relative_to_roots(args.params, roots),
                       **({"set": list(args.set)} if args.set else {}),
                       **({"seed_batch": args.seed_batch.strip()}
                          if args.seed_batch.strip() != "auto" else {}),
                       "out": relative_to_roots(args.out, roots),
                       "work_dir": relative_to_roots(args.work_dir, roots),
                       **({"executables": relative_to_roots(args.executables, roots)}
                          if args.executables else {})},
                 deadline=None if args.deadline_s is None else started + args.deadline_s,
                 checkpoint=args.checkpoint, seed_batch=seed_batch,
                 executables=args.executables)
    return EXIT_DEADLINE if result["stopped"] == "deadline" else 0


if __name__ == "__main__":
    sys.exit(main())

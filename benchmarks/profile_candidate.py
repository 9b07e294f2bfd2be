"""Per-op profile of the candidate's vmapped train step, on CPU or on an accelerator (where
the update time goes).

    XLA_FLAGS=--xla_cpu_enable_xprof_traceme=true \
        .venv/bin/python benchmarks/profile_candidate.py [--profile full] [--seeds 3] [--updates 3]
                                                         [--loop] [--chunk-steps 3]
                                                         [--dump-hlo PATH] [--by-source N]

Without ``--loop`` it compiles ``jit(vmap(agent.train_step))`` (plain vmap: with
``--seeds`` above 1 this is the batched program, not the run's one-seed-at-a-time loop of
``candidate/runtime/seedmap.py``; its per-seed program is what ``--seeds 1`` profiles) on a
synthetic batch (:mod:`dreamer_parity.candidate.synthetic`), runs ``--updates`` blocking updates under
``jax.profiler.trace`` and sums the XLA:CPU op events of the trace per op name.

With ``--loop`` it profiles the run's own chunk program instead (``loop.build`` with the
run's seed loop, replay for 24 000 rows, run past the 1 040-row gate, then one chunk of
``--chunk-steps`` vector steps traced; 8 updates per vector step).  There the train step's
temporary buffers live inside one executable call, so their pages are touched once per
chunk rather than once per update as in the isolated step; the isolated step's large
copies (the stacked imagination trajectory) look several times dearer than they are in
the run.

``--dump-hlo PATH`` writes the profiled program's optimised HLO text, where the op names
of the profile (``dot_general.3008``, ...) can be looked up with their shapes and the jax
source line in their ``metadata``.  ``--by-source N`` does that lookup itself: it sums the op
seconds per update by the innermost line of this package's code that each op came from (the
HLO's stack-frame table), split into forward and backward (``transpose(jvp)`` in the op's
name) and into ops run once per update and ops of the 64-step observe loops, and prints the
N largest groups.  Ops that an XLA pass made (the first stage of a large reduction,
``wrapped_reduce-window``, has no ``op_name``) are grouped under their op kind.  With either
option the persistent compilation cache is off for the run, so the line numbers are those of
the code on disk.

**On an accelerator** (jax's default backend is not ``cpu``; the XLA flag is then not
needed) the op events are the device's own: those of the trace's ``/device:...`` processes,
on their ``XLA Ops`` line where the trace has one (:func:`op_events`), so the seconds are the
chip's busy time per op rather than host threads'. On a TPU machine
(``. benchmarks/device_env.sh`` first; ``JAX_DEFAULT_MATMUL_PRECISION=highest`` as the
runs use)::

    python3 benchmarks/profile_candidate.py --loop --seeds 1 --chunk-steps 2 \
        --by-source 40 --out <dir>/profile-1seed

``--twohot-index`` sets ``AgentConfig.twohot_index`` (how two-hot targets find their bins;
``auto``, the default, is what a run on this backend uses; both forms are exact),
and ``profile.json`` names the form profiled; ``--head-rows`` sets ``AgentConfig.head_rows``
(imagined rows per pass of the heads; the same update up to float32 rounding), also
recorded.

``--out DIR`` writes ``profile.json`` (the figures printed below, per update) and the
trace itself, as ``trace.json.gz`` (the trace viewer's JSON) and ``trace.xplane.pb`` (the
profiler's record), into ``DIR``; the files name no host.

Prints, per update: wall seconds, total op seconds (summed over
threads), the top ops, and the op seconds grouped by kind (dot/matmul custom calls, fusions,
copies, while loops' own bodies, others).  Without the XLA flag above the trace holds no
per-op events and the script says so (exit 2).
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import shutil
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks.lib

import jax  # noqa: E402
import numpy as np  # noqa: E402

from dreamer_parity.candidate.agent import XLA_CPU_OPTIONS, init, train_step  # noqa: E402
from benchmarks.lib.cli import positive_int  # noqa: E402
from dreamer_parity.candidate.synthetic import synthetic_batch  # noqa: E402
from dreamer_parity.candidate import twohot  # noqa: E402
from dreamer_parity.candidate.config import TWOHOT_INDEX, AgentConfig  # noqa: E402
from dreamer_parity.xla_profile import op_events, source_of_ops, trace_file  # noqa: E402


def _kind(name: str) -> str:
    n = name.lower()
    if "dot" in n or "matmul" in n or "onednn" in n or "convolution" in n:
        return "matmul"
    if "copy" in n or "transpose" in n:
        return "copy/transpose"
    if "fusion" in n or "loop_" in n or "input_" in n:
        return "fusion"
    if "while" in n or "conditional" in n or "call" in n:
        return "control"
    if "reduce" in n or "sort" in n or "scatter" in n or "gather" in n:
        return "reduce/sort/scatter/gather"
    return "other"


def _busy(events, skip):
    """Seconds during which at least one / at least two op events were running."""
    edges = []
    for name, dur, _, ts in events:
        if skip.search(name) or name.startswith("jit_"):
            continue
        edges += [(ts, 1), (ts + dur, -1)]
    edges.sort()
    one = two = 0.0
    level, last = 0, None
    for t, d in edges:
        if last is not None:
            one += (t - last) if level >= 1 else 0.0
            two += (t - last) if level >= 2 else 0.0
        level += d
        last = t
    return one, two


def _gaps(events, skip):
    """Idle seconds (no op event running) summed by the op that ended just before."""
    ops = sorted((ts, ts + dur, name) for name, dur, _, ts in events
                 if not (skip.search(name) or name.startswith("jit_")))
    gaps = collections.Counter()
    end, last = None, None
    for ts, te, name in ops:
        if end is not None and ts > end:
            gaps[last] += ts - end
        if end is None or te > end:
            end, last = te, name
    return gaps


def _print_by_source(hlo_text, by_name, count, n, top) -> list[dict]:
    """Print the ``top`` largest groups of op seconds per update by source line; return
    them as ``[{"ms", "ops", "repeat", "pass", "source"}]`` (ms per update)."""
    src = source_of_ops(hlo_text)
    groups, ops = collections.Counter(), collections.Counter()
    for name, sec in by_name.items():
        if name.startswith("end:"):
            continue
        where, bwd = src.get(name, (re.sub(r"\.\d+$", "", name) + " (no metadata)", False))
        reps = count[name] / n
        rep = "64x" if reps == 64 else ("1x" if reps == 1 else f"{reps:g}x")
        key = (rep, "bwd" if bwd else "fwd", where)
        groups[key] += sec
        ops[key] += 1
    print(f"op seconds per update by source ({len(groups)} groups, the {top} largest):")
    out = []
    for (rep, way, where), sec in groups.most_common(top):
        print(f"  {sec * 1e3:8.3f} ms  {ops[(rep, way, where)]:4d} ops  {rep:>4} {way}  {where}")
        out.append({"ms": sec * 1e3, "ops": ops[(rep, way, where)], "repeat": rep,
                    "pass": way, "source": where})
    return out


def _config(a):
    """The profiled agent's config: ``--profile`` with ``--twohot-index`` and, where given,
    ``--head-rows``."""
    over = {} if a.head_rows is None else {"head_rows": a.head_rows}
    return AgentConfig.for_profile(a.profile, twohot_index=a.twohot_index, **over)


def _trace_step(a):
    """Trace ``a.updates`` calls of the isolated jit(vmap(train_step)); (events, walls, n)."""
    cfg = _config(a)
    keys = jax.random.split(jax.random.PRNGKey(0), a.seeds)
    states = jax.vmap(lambda k: init(k, cfg))(keys)
    batches = jax.tree_util.tree_map(
        lambda *x: np.stack(x), *[synthetic_batch(cfg, 16, 65, i) for i in range(a.seeds)])
    step = jax.jit(jax.vmap(partial(train_step, cfg)),
                   compiler_options=None if a.device else XLA_CPU_OPTIONS)
    t0 = time.perf_counter()
    compiled = step.lower(states, batches, keys).compile()
    print(f"compile {time.perf_counter() - t0:.1f} s", flush=True)
    _dump_hlo(compiled, a.dump_hlo)
    a.hlo_text = compiled.as_text() if a.by_source else None
    for _ in range(2):
        states, outs, m = compiled(states, batches, keys)
        jax.block_until_ready(states)
    with tempfile.TemporaryDirectory() as tmp:
        walls = []
        with jax.profiler.trace(tmp, create_perfetto_trace=True):
            for _ in range(a.updates):
                t0 = time.perf_counter()
                states, outs, m = compiled(states, batches, keys)
                jax.block_until_ready(states)
                walls.append(time.perf_counter() - t0)
        events = _collect(tmp, a)
    return events, walls, a.updates


def _collect(tmp: str, a):
    """The op events of the trace in ``tmp`` (the device's own off the CPU); with ``--out``,
    first a copy of the trace as ``<out>/trace.json.gz`` and of the profiler's own record
    as ``<out>/trace.xplane.pb`` (for tools that read it), kept even when reading fails."""
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(trace_file(tmp), Path(a.out) / "trace.json.gz")
        for x in glob.glob(os.path.join(tmp, "**", "*.xplane.pb"), recursive=True)[:1]:
            shutil.copyfile(x, Path(a.out) / "trace.xplane.pb")
    return op_events(tmp, device=a.device)


def _dump_hlo(compiled, path):
    """Write the optimised HLO text of ``compiled`` to ``path`` (None: nothing), so that
    the op names of the profile can be looked up."""
    if path:
        Path(path).write_text(compiled.as_text())
        print(f"optimised HLO written to {path}", flush=True)


def _trace_loop(a):
    """Trace one chunk of the run's loop program past the update gate; (events, walls, n)
    with n = the seed-updates the chunk ran (updates per seed x seeds)."""
    import jax.numpy as jnp

    from dreamer_parity.candidate import agent
    from dreamer_parity.candidate.runtime import loop
    from dreamer_parity.schedule import per_vector_step

    cfg = _config(a)
    progs = loop.build(agent, cfg, capacity=24000 // 16, chunk_steps=a.chunk_steps,
                       eval_episodes=10)
    keys = [loop.seed_keys(s) for s in range(a.seeds)]
    stacked = {k: jnp.stack([kk[k] for kk in keys]) for k in keys[0]}
    shape = jax.eval_shape(progs.init, stacked)
    t0 = time.perf_counter()
    chunk = progs.chunk.lower(shape, jnp.zeros((a.chunk_steps,), jnp.int32)).compile()
    print(f"compile {time.perf_counter() - t0:.1f} s", flush=True)
    _dump_hlo(chunk, a.dump_hlo)
    a.hlo_text = chunk.as_text() if a.by_source else None
    carry = progs.init(stacked)
    counts = per_vector_step(65 + 3 * a.chunk_steps)
    step = 0
    while step < 65 + a.chunk_steps:   # past the gate, and one chunk with updates to warm up
        carry, _ = chunk(carry, jnp.asarray(counts[step:step + a.chunk_steps], jnp.int32))
        step += a.chunk_steps
    jax.block_until_ready(carry)
    c = counts[step:step + a.chunk_steps]
    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp, create_perfetto_trace=True):
            t0 = time.perf_counter()
            carry, _ = chunk(carry, jnp.asarray(c, jnp.int32))
            jax.block_until_ready(carry)
            walls = [time.perf_counter() - t0]
        events = _collect(tmp, a)
    return events, walls, int(sum(c)) * a.seeds


def main(argv=None) -> int:
    from dreamer_parity import records as records_cli

    ap = records_cli.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="full", choices=("full", "smoke"))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--updates", type=int, default=3)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--loop", action="store_true",
                    help="profile the run's chunk program (loop.build) instead of the step")
    ap.add_argument("--dump-hlo", default=None, metavar="PATH",
                    help="write the profiled program's optimised HLO text to PATH")
    ap.add_argument("--by-source", type=int, default=0, metavar="N",
                    help="also print the N largest groups of op time by source line")
    ap.add_argument("--chunk-steps", type=int, default=3,
                    help="vector steps per chunk with --loop (8 vector steps give 64 updates)")
    ap.add_argument("--twohot-index", default="auto", choices=TWOHOT_INDEX,
                    help="AgentConfig.twohot_index: how two-hot targets find their bins "
                         "(auto: table lookups on the CPU, the comparison elsewhere)")
    ap.add_argument("--head-rows", type=positive_int, default=None,
                    help="AgentConfig.head_rows: imagined rows per pass of the heads "
                         "(default: the profile's)")
    ap.add_argument("--out", default=None, metavar="DIR",
                    help="write profile.json and the trace (trace.json.gz) into DIR")
    a = ap.parse_args(argv)
    from dreamer_parity import records as _records
    try:      # every argument before anything is computed (one line, exit 2)
        _records.check_range(a.seeds, "--seeds", 1, 1024)
        _records.check_range(a.updates, "--updates", 1, 10_000)
        _records.check_range(a.top, "--top", 1, 10_000)
        _records.check_range(a.by_source, "--by-source", 0, 10_000)
        _records.check_range(a.chunk_steps, "--chunk-steps", 1, 1000)
        if a.out is not None:
            _records.check_target(a.out, "--out", "dir", inside=False)
        if a.dump_hlo is not None:
            _records.check_target(a.dump_hlo, "--dump-hlo", "file", inside=False)
    except _records.RecordError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    a.device = jax.default_backend() != "cpu"
    if not a.device and "xla_cpu_enable_xprof_traceme" not in os.environ.get("XLA_FLAGS", ""):
        print("profile_candidate: set XLA_FLAGS=--xla_cpu_enable_xprof_traceme=true "
              "(otherwise the trace has no per-op events)", file=sys.stderr)
        return 2
    if a.by_source or a.dump_hlo:
        # the persistent cache keys on the program without its source locations: an entry
        # compiled from older code would report that code's line numbers
        jax.config.update("jax_enable_compilation_cache", False)
    if a.loop:
        events, walls, n = _trace_loop(a)
    else:
        events, walls, n = _trace_step(a)
    by_name = collections.Counter()
    by_kind = collections.Counter()
    count = collections.Counter()
    skip = re.compile(r"^(PjitFunction|ThunkExecutor|Execute|TfrtCpu|PjRt|XlaModule|"
                      r"ExecuteHelper|cpu_executable|\$)", re.I)
    for name, dur, _, _ in events:
        if skip.search(name) or name.startswith("jit_"):
            continue
        by_name[name] += dur / n
        count[name] += 1
        by_kind[_kind(name)] += dur / n
    loop = [k for k in count if count[k] % (64 * n) == 0]   # the observe loops' ops
    busy = _busy(events, skip)
    gaps = _gaps(events, skip)
    res = {
        "backend": jax.default_backend(),
        "device_kind": jax.devices()[0].device_kind,
        "matmul_precision": jax.config.jax_default_matmul_precision or "default",
        "twohot_index": twohot.index_form(a.twohot_index),
        "head_rows": _config(a).head_rows,
        "program": "loop" if a.loop else "isolated step", "profile": a.profile,
        "seeds": a.seeds, "updates": n,
        "wall_ms_per_update": sum(walls) / n * 1e3, "calls_s": walls,
        "op_events_per_update": sum(count.values()) / n,
        "op_ms_per_update": sum(by_name.values()) * 1e3,
        "by_kind_ms": {k: v * 1e3 for k, v in by_kind.most_common()},
        "observe_loop_ops": {"ops": len(loop), "events_per_update": sum(count[k] for k in loop) / n,
                             "ms_per_update": sum(by_name[k] for k in loop) * 1e3},
        "idle_ms_per_update": sum(gaps.values()) / n * 1e3,
        "covered_ms_per_update": {"one_op": busy[0] / n * 1e3, "two_ops": busy[1] / n * 1e3},
        "top_ops": [{"name": k, "ms": v * 1e3, "per_update": count[k] / n}
                    for k, v in by_name.most_common(a.top)],
    }
    print(f"seeds={a.seeds} {res['program']} on {res['backend']} ({res['device_kind']}): wall "
          f"per update {res['wall_ms_per_update']:.2f} ms (calls: "
          f"{[round(w, 3) for w in walls]} s, {n} updates)")
    print(f"op events per update: {res['op_events_per_update']:.0f}, op ms per update "
          f"{res['op_ms_per_update']:.2f} (nested events count twice)")
    for k, v in res["by_kind_ms"].items():
        print(f"  kind {k:28s} {v:9.3f} ms")
    print(f"ops repeated 64x per update (observe loops): {len(loop)} ops, "
          f"{res['observe_loop_ops']['events_per_update']:.0f} events, "
          f"{res['observe_loop_ops']['ms_per_update']:.3f} ms")
    print(f"idle gaps (no op running) per update: {res['idle_ms_per_update']:.3f} ms; "
          f"largest, by the op that ended before the gap:")
    for name, v in gaps.most_common(12):
        print(f"  {v / n * 1e3:8.3f} ms  after {name[:80]}")
    print(f"wall covered by >=1 op: {busy[0] / n * 1e3:.3f} ms, by >=2 ops: "
          f"{busy[1] / n * 1e3:.3f} ms")
    for o in res["top_ops"]:
        print(f"  {o['ms']:8.3f} ms  x{o['per_update']:6.0f}  {o['name'][:90]}")
    if a.by_source:
        res["by_source"] = _print_by_source(a.hlo_text, by_name, count, n, a.by_source)
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / "profile.json").write_text(json.dumps(res, indent=1) + "\n")
        print(f"profile written to {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

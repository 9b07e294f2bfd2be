"""The candidate's run programs compiled here for a GPU this machine only describes, stored for
the GPU machine (``--executables`` of the run, ``benchmarks/gpu_call.py``'s ``programs``).

In the GPU machine's environment (Python 3.12, jax 0.11.2 with ``jax-cuda13-plugin`` and
``jax-cuda13-pjrt``; no GPU needed), from the repository root (``make gpu-programs``)::

    JAX_PLATFORMS=cpu python -m dreamer_parity.accel.precompile --out .gpu-programs \\
        [--params params.yaml] [--set KEY=VALUE ...] [--seeds 8 16 24 32] [--smoke] \\
        [--target h200|cpu] [--precision highest]

For each seed count, the three programs a run of that many seeds builds on the target
(:func:`dreamer_parity.candidate.runtime.run.program_settings` with the target's backend: the
GPU's forms, all seeds batched, no XLA:CPU options), exported for it, compiled for its device
and saved as one entry of :mod:`dreamer_parity.candidate.runtime.executables` under the
program key the run computes there.  ``h200``: the NVIDIA H200 of
:data:`dreamer_parity.gpu_kernels.H200`, described to XLA:GPU
(``jax.experimental.topologies``); the executables carry no autotuning.  ``cpu``: this
machine's first CPU device (one seed: the CPU runs several seeds one device each), to check
the store here.  ``--smoke``: the GPU call's smoke run instead (one seed of the smoke
round after ``--set``: :func:`dreamer_parity.params.one_seed_smoke_sets`).  The precision is
the run's (``--precision``: the GPU call's default
``highest``); the run's ``JAX_DEFAULT_MATMUL_PRECISION`` must be the same for the entry to
be used.

Prints one line per entry (seeds, key, compile seconds, MiB) and ``RESULT <json>`` last.
Exit status 2 (one line, nothing written) on a bad argument, bad parameters or a missing
CUDA plugin.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from dreamer_parity import params as paramslib
from dreamer_parity import records

__all__ = ["TARGETS", "target_device", "build", "main"]

#: What an entry can be compiled for.
TARGETS = ("h200", "cpu")
PRECISIONS = ("default", "high", "highest")


def target_device(target: str):
    """``(device, backend, description)`` of ``target``: the device to compile for, the
    backend name the run will see there, and the ``target`` dict
    :func:`dreamer_parity.candidate.runtime.executables.save` records.

    Raises:
      ValueError: an unknown target.
      RuntimeError: ``h200`` without the CUDA plugin (no XLA:GPU compiler).
    """
    import jax

    if target == "cpu":
        dev = jax.devices("cpu")[0]
        return dev, "cpu", {"platform": "cpu", "device_kind": dev.device_kind,
                            "compute_capability": None, "described": False}
    if target != "h200":
        raise ValueError(f"--target {target!r}: not one of {TARGETS}")
    from dreamer_parity.gpu_kernels import H200, h200_device
    major, minor = H200["compute_capability"]
    return h200_device(), "gpu", {"platform": "gpu", "device_kind": H200["name"],
                                  "compute_capability": f"{major}.{minor}", "described": True}


def build(params: dict, counts: list[int], out: Path, target: str = "h200", log=print,
          agent=None, cfg=None) -> list:
    """Compile and store the run programs of ``params`` for each seed count of ``counts``.

    Args:
      params: validated round parameters (:func:`dreamer_parity.params.load`).
      counts: seed counts, each 1 to :data:`dreamer_parity.params.MAX_SEEDS` (``cpu``: 1).
      out: the store directory (:mod:`~dreamer_parity.candidate.runtime.executables`).
      target: one of :data:`TARGETS`.
      log: ``callable(str)`` for one line per entry.
      agent, cfg: the agent module and its config (default: the candidate's, resolved for
        the target's backend; the tests' stand-in otherwise).

    Returns:
      ``[{"seeds", "key", "compile_s", "bytes"}]``, one per count, in order.

    Raises:
      ValueError, RuntimeError: as :func:`target_device`.
      Whatever tracing or compiling raises.
    """
    import jax

    from dreamer_parity.candidate.runtime import executables, program_store
    from dreamer_parity.candidate.runtime import loop as looplib
    from dreamer_parity.candidate.runtime.run import PROGRAM_PARAMS, program_settings

    device, backend, described = target_device(target)
    ps = program_settings(params, agent, cfg, backend=backend)
    key_shapes = jax.eval_shape(looplib.seed_keys, 0)
    precision = jax.config.jax_default_matmul_precision
    settings = {**{k: params[k] for k in PROGRAM_PARAMS},
                "precision": "default" if precision is None else str(precision)}
    done = []
    with tempfile.TemporaryDirectory(prefix="precompile-") as tmp:
        for n in counts:
            keys = {k: jax.ShapeDtypeStruct((n,) + v.shape, v.dtype)
                    for k, v in key_shapes.items()}
            progs, carry_shape, info = program_store.load_or_build(
                ps.agent, ps.cfg, ps.cfg_dict, capacity=ps.capacity, chunk_steps=ps.chunk_steps,
                eval_episodes=ps.eval_episodes, example_keys=keys, s=ps.schedule,
                root=Path(tmp), seed_batch="auto", mesh=None, backend=backend)
            t0 = time.perf_counter()
            with executables.fresh_compiles():
                compiled = program_store.compile_all(progs, keys, carry_shape, device=device)
            compile_s = time.perf_counter() - t0
            entry = executables.save(out, info["key"], compiled, carry_shape, described, n,
                                     round(compile_s, 1), settings)
            size = sum(p.stat().st_size for p in entry.iterdir())
            done.append({"seeds": n, "key": info["key"], "compile_s": round(compile_s, 1),
                         "bytes": size})
            log(f"precompile: {n} seeds, key {info['key']}, compiled in {compile_s:.0f} s, "
                f"{size / 2**20:.2f} MiB")
    return done


def main(argv=None) -> int:
    """Command line (module docstring); returns the exit status."""
    ap = records.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="store directory (created)")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="change a parameter of --params first (as the run's --set)")
    ap.add_argument("--seeds", type=int, nargs="+", default=None,
                    help="seed counts, one entry each (default 8 16 24 32; --smoke: 1)")
    ap.add_argument("--smoke", action="store_true",
                    help="the GPU call's smoke run (one seed of the smoke round)")
    ap.add_argument("--target", choices=TARGETS, default="h200")
    ap.add_argument("--precision", choices=PRECISIONS, default="highest",
                    help="jax_default_matmul_precision (the run's must be the same)")
    a = ap.parse_args(argv)
    if a.seeds is None:
        a.seeds = [1] if a.smoke or a.target == "cpu" else [8, 16, 24, 32]
    if a.smoke and a.seeds != [1]:
        ap.error("--smoke: the smoke run has one seed (--seeds 1)")
    bad = [n for n in a.seeds if not 1 <= n <= paramslib.MAX_SEEDS]
    if bad:
        ap.error(f"--seeds {bad[0]}: must be 1..{paramslib.MAX_SEEDS}")
    if a.target == "cpu" and a.seeds != [1]:
        ap.error("--target cpu: --seeds must be 1 (the CPU runs several seeds one host "
                 "device each, which these programs do not)")
    if len(set(a.seeds)) != len(a.seeds):
        ap.error("--seeds: a count is named twice")
    try:
        params = paramslib.load(a.params, [*a.set, *(paramslib.one_seed_smoke_sets()
                                                     if a.smoke else ())])
    except FileNotFoundError as e:
        ap.error(f"--params: file not found: {e.filename}")
    except paramslib.ParamsError as e:
        ap.error(str(e))
    import jax
    jax.config.update("jax_default_matmul_precision",
                      None if a.precision == "default" else a.precision)
    try:
        target_device(a.target)
    except (ValueError, RuntimeError) as e:
        ap.error(str(e))
    done = build(params, a.seeds, Path(a.out), a.target)
    print("RESULT " + json.dumps({"target": a.target, "precision": a.precision,
                                  "smoke": a.smoke, "entries": done}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

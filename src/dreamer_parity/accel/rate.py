"""A run's own programs timed at a seed count: what ``benchmarks/gpu_call.py`` sizes its batch
from.

Command line (a child process of its own, on the device)::

    python -m dreamer_parity.accel.rate --seeds N [--params params.yaml] [--set KEY=VALUE ...]
        [--executables DIR] [--timed-chunks 2]

The programs are the run's (:func:`dreamer_parity.candidate.runtime.run.program_settings`,
:func:`~dreamer_parity.candidate.runtime.run.compile_programs`: loaded from ``--executables``
where it holds them, else compiled here) for seeds ``0..N-1``: ``init``, then, untimed,
the chunks up to the first whose every vector step updates (past the gate's row 1,040),
then ``--timed-chunks`` chunks timed.  Prints ``RATE {json}``: ``seeds``, ``compile_s``
(seconds to load or to compile), ``programs`` (the run's ``config.programs``),
``timed_updates``, ``timed_s``, ``update_s`` (seconds per update of all seeds together),
``seed_updates_per_s``, ``chunk_times_s``, ``backend``.  Exit status 2 (one line) on bad
arguments or parameters, before anything is compiled.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from dreamer_parity import params as paramslib
from dreamer_parity import records

__all__ = ["measure", "main"]


def measure(params: dict, seeds: int, executables=None, timed_chunks: int = 2) -> dict:
    """Time the run programs of ``params`` at ``seeds`` seeds (module docstring).

    Args:
      params: validated round parameters (``rows`` must reach ``timed_chunks`` chunks past
        the first chunk that updates at every vector step).
      seeds: seed count (seeds 0..seeds-1).
      executables: None or a directory of programs compiled in advance.
      timed_chunks: chunks timed after the untimed one.

    Returns:
      The ``RATE`` dict of the module docstring.

    Raises:
      ValueError: ``params["rows"]`` ends before the timed chunks do.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np

    from dreamer_parity.candidate.runtime import loop as looplib
    from dreamer_parity.candidate.runtime import seedmesh
    from dreamer_parity.candidate.runtime.run import (compile_programs, program_settings,
                                                      seed_layout)
    from dreamer_parity.schedule import per_vector_step

    ps = program_settings(params)
    cs = ps.chunk_steps
    counts = np.asarray(per_vector_step(ps.capacity, ps.schedule), np.int32)
    n_chunks = len(counts) // cs
    full = next((c for c in range(n_chunks) if (counts[c * cs:(c + 1) * cs] > 0).all()), None)
    if full is None or full + 1 + timed_chunks > n_chunks:
        raise ValueError(f"rate: {params['rows']} rows end before {timed_chunks} timed chunks "
                         f"after the gate")
    seed_batch, mesh, _ = seed_layout("auto", seeds)
    keys = [looplib.seed_keys(s) for s in range(seeds)]
    stacked = seedmesh.put_seeds({k: jnp.stack([kk[k] for kk in keys]) for k in keys[0]}, mesh)
    compiled, _, compile_s, programs = compile_programs(
        ps, stacked, seed_batch=seed_batch, mesh=mesh, n_seeds=seeds, executables=executables)
    carry = compiled.init(stacked)
    times, ups = [], []
    for c in range(full + 1 + timed_chunks):
        cnt = counts[c * cs:(c + 1) * cs]
        t0 = time.perf_counter()
        carry, ep = compiled.chunk(carry, seedmesh.put_replicated(cnt, mesh))
        jax.block_until_ready((carry, ep))
        if c > full:
            times.append(time.perf_counter() - t0)
            ups.append(int(cnt.sum()))
    t, u = sum(times), sum(ups)
    return {"seeds": seeds, "compile_s": compile_s, "programs": programs,
            "timed_updates": u, "timed_s": t, "update_s": t / u,
            "seed_updates_per_s": seeds * u / t, "chunk_times_s": times,
            "backend": jax.default_backend()}


def main(argv=None) -> int:
    """Command line (module docstring); returns the exit status."""
    ap = records.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, required=True)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--executables", default=None, metavar="DIR")
    ap.add_argument("--timed-chunks", type=int, default=2)
    a = ap.parse_args(argv)
    if not 1 <= a.seeds <= paramslib.MAX_SEEDS:
        ap.error(f"--seeds {a.seeds}: must be 1..{paramslib.MAX_SEEDS}")
    if a.timed_chunks < 1:
        ap.error(f"--timed-chunks {a.timed_chunks}: must be positive")
    if a.executables is not None and not Path(a.executables).is_dir():
        ap.error(f"--executables {a.executables}: not a directory")
    try:
        params = paramslib.load(a.params, a.set)
    except FileNotFoundError as e:
        ap.error(f"--params: file not found: {e.filename}")
    except paramslib.ParamsError as e:
        ap.error(str(e))
    try:
        res = measure(params, a.seeds, a.executables, a.timed_chunks)
    except ValueError as e:
        ap.error(str(e))
    print("RATE " + json.dumps(records.clean_json(res), allow_nan=False), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

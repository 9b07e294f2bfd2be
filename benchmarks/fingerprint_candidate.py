"""Fingerprint the candidate's numbers: one train step and the first evaluation points of a round.

    python benchmarks/fingerprint_candidate.py [--params params.yaml] [--set KEY=VALUE ...]
                                               [--seeds 0] [--points 3] [--records results]

Prints sha256 digests of

1. ``train_step``: the train state, outputs and metrics after one train step of seed 0's
   initial state on a fixed synthetic batch (:func:`dreamer_parity.candidate.synthetic.synthetic_batch`), at the round's
   profile and decode, jitted with the loop's XLA:CPU options;
2. ``carry``: every leaf of the loop carry (agent state, replay, envs, keys, metric windows)
   after the run's first ``--points`` evaluation points, computed by the run's own code
   (:func:`run.run`: program store, seed devices, chunks, points) for all seeds of the round;
3. ``records``: each seed's ``records.jsonl`` lines at those points (evaluation returns,
   train-metric window means, return normaliser).

``--set`` changes a parameter of ``--params`` first, as the runner's ``--set`` does (a kept
batch's ``--set candidate.source=run --set 'seeds=[...]'``).  With ``--records DIR`` it also
compares (3) with the first lines of ``DIR/s<seed>/records.jsonl`` (a kept directory,
``data/runs/<name>``) or ``DIR/candidate/s<seed>/records.jsonl`` (a results root) of a
finished run of the same params, and names the first value that differs.  The digests depend on the machine's XLA backend and the
jax/jaxlib versions, so compare them only between runs on one machine.

Which digests are reproducible: one seed (one host device) gives the same digests run
after run, so ``--seeds 0`` compares two commits' code bit for bit.  With several seeds
on CPU each seed runs on its own host device and the devices share XLA's intra-op thread
pool; some reductions are then split according to timing, and two runs of the same code
differ by float32 rounding (at the round-3 parameters after 81 updates: 3 and 4 of 5
seeds, in the return normaliser and in 18-33 of the training-metric means).  Several-seed
digests are therefore only compared for the round's own records, with that caveat.

The run's checkpoints and outputs go to a temporary directory; exported programs go to
the usual program store (keyed, so runs of different code do not share them).  At the
round-3 parameters with 3 points (81 updates per seed) this takes about 3 minutes with 5
seeds and about 1.5 minutes with ``--seeds 0`` on 2 idle cores, most of it compiling.

Exit status: 0, or 1 when ``--records`` was given and a record differs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from functools import partial
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))   # benchmarks.lib

from dreamer_parity import params as paramslib  # noqa: E402
from dreamer_parity import records as recordslib  # noqa: E402


def digest_arrays(leaves) -> str:
    """sha256 over dtype, shape and bytes of each array, in order."""
    h = hashlib.sha256()
    for a in leaves:
        a = np.ascontiguousarray(np.asarray(a))
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def digest_lines(lines) -> str:
    """sha256 over JSON lines (keys sorted)."""
    return hashlib.sha256("".join(json.dumps(x, sort_keys=True) + "\n"
                                  for x in lines).encode()).hexdigest()


def first_difference(a, b, path=""):
    """The first place where two JSON-like values differ: ``(path, a, b)``, or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return (f"{path}.{k}", a.get(k, "<absent>"), b.get(k, "<absent>"))
            d = first_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else (path or ".", a, b)


def train_step_digest(params: dict) -> str:
    """Digest of one train step at the round's agent config (see the module docstring)."""
    import jax

    from dreamer_parity.candidate import agent
    from dreamer_parity.candidate.synthetic import synthetic_batch
    from dreamer_parity.candidate.config import AgentConfig
    from dreamer_parity.candidate.runtime.loop import compiler_options

    cfg = AgentConfig.from_params(params)
    state = agent.init(jax.random.PRNGKey(0), cfg)
    batch = synthetic_batch(cfg, 16, 65, seed=0)
    step = jax.jit(partial(agent.train_step, cfg), compiler_options=compiler_options(agent))
    out = jax.device_get(step(state, batch, key=jax.random.PRNGKey(1)))
    return digest_arrays(jax.tree_util.tree_leaves(out))


def committed_run(root, seed: int) -> Path:
    """Where ``--records root`` holds seed ``seed``: ``root/s<seed>`` when that is a
    directory (a kept directory), else ``root/candidate/s<seed>`` (a results root)."""
    kept = Path(root) / f"s{int(seed)}"
    return kept if kept.is_dir() else recordslib.run_dir(root, "candidate", seed)


def run_digests(params: dict, points: int, tmp: Path) -> tuple[str, dict]:
    """(carry digest, {seed: record lines}) after the first ``points`` evaluation points."""
    from dreamer_parity.candidate.runtime import run as runlib

    captured = {}

    def after_point(carry, index):
        if index == points - 1:
            import jax
            captured["carry"] = digest_arrays(jax.tree_util.tree_leaves(jax.device_get(carry)))
        return carry

    result = runlib.run(params, tmp / "out", tmp / "work",
                        hooks={"after_point": after_point, "stop_after_points": points})
    return captured["carry"], {int(s): lines for s, lines in result["records"].items()}


def main(argv=None) -> int:
    from dreamer_parity import records as records_cli

    ap = records_cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", default=str(REPO / "params.yaml"))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="change a parameter of --params first (as the runner's --set)")
    ap.add_argument("--seeds", type=int, nargs="+", default=None,
                    help="run these seeds instead of the params' (one seed: reproducible digests)")
    ap.add_argument("--points", type=int, default=3, help="evaluation points to run (>= 1)")
    ap.add_argument("--records", default=None,
                    help="results root of a finished run to compare the records with")
    a = ap.parse_args(argv)
    from dreamer_parity import records as _records
    try:      # every argument before anything is computed (one line, exit 2)
        _records.check_source(a.params, "--params", "file")
        _records.check_range(a.points, "--points", 1, 1500)
        for s in a.seeds or []:
            _records.check_range(s, "--seeds", 0, 2 ** 31 - 1)
        if a.records is not None:
            _records.check_source(a.records, "--records", "dir")
    except _records.RecordError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.points < 1:
        ap.error("--points must be >= 1")
    try:
        params = paramslib.load(a.params, a.set)
        if a.seeds is not None:
            params = paramslib.validate({**params, "seeds": a.seeds})
    except paramslib.ParamsError as e:
        ap.error(str(e))
    n_points = len(paramslib.eval_points(params))
    if a.points > n_points:
        ap.error(f"--points {a.points}: the round has {n_points} evaluation points")
    committed = {}
    if a.records:   # read before any compute, so a missing file fails at once
        try:
            for s in params["seeds"]:
                run = committed_run(a.records, s)
                committed[s] = recordslib.read_records(run, require_done=False)[:a.points]
        except recordslib.RecordError as e:
            print(f"error: --records: {e}", file=sys.stderr)
            return 2
    from dreamer_parity.candidate.runtime import seedmesh
    seedmesh.request_host_devices(len(params["seeds"]))   # as the stage does
    print(f"train_step {train_step_digest(params)}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        carry, recs = run_digests(params, a.points, Path(tmp))
    print(f"carry      {carry}  (after {a.points} points)")
    status = 0
    for s in params["seeds"]:
        mine = json.loads(json.dumps(recordslib.clean_json(recs[s][:a.points])))
        line = f"records s{s} {digest_lines(mine)}  eval_mean {[r['eval_mean'] for r in mine]}"
        if a.records:
            same = mine == committed[s]
            line += "  identical to the committed records" if same else "  DIFFERENT from the committed records"
            if not same:
                where, x, y = first_difference(mine, committed[s], "records")
                n = sum(1 for i in range(len(mine)) for k in set(mine[i]["train"]) |
                        set(committed[s][i]["train"])
                        if mine[i]["train"].get(k) != committed[s][i]["train"].get(k))
                line += f" (first at {where}: {x!r} here, {y!r} there; {n} train values differ)"
            status |= not same
        print(line)
    return status


if __name__ == "__main__":
    raise SystemExit(main())

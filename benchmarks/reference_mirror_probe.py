#!/usr/bin/env python3
"""One reference seed with its two-hot heads' mirror logits one ulp apart (a diagnosis).

    python benchmarks/reference_mirror_probe.py --params P --seed S --out DIR \
        [--pass forward|gradient] [--set KEY=VALUE ...]

Runs seed ``S`` of the params in ``P`` (changed by ``--set`` as ``dvc exp run -S`` would)
as the pipeline's reference stage does (:func:`dreamer_parity.reference.launch.launch`:
the same set-up checks, venv, shims, compilation cache and runner arguments), but through
:mod:`dreamer_parity.reference.probe_runner`: the reward head's, the critic's and the slow
critic's logits of the upper half of the bins are each moved by one unit in the last place
of float32 before the reference builds its ``TwoHotDist``: in the forward pass (``--pass
forward``, the default; gradients unchanged) or in the gradient reaching them (``--pass
gradient``; values unchanged, so the heads' weights drift apart update by update).
Everything else is the reference's, unmodified, with the protocol patches of
``reference.decode`` and ``reference.sampler``.

It asks whether last-bit differences between mirror logits, which two matrix products
summed in different orders leave, are enough to make the ``exact`` expectation as noisy as
the TPU runs' (docs/DEVIATIONS.md, T4): read the run beside the CPU and TPU runs with
``python -m dreamer_parity.analysis.window_table``.

Writes the run into ``DIR`` (as the runner: ``records.jsonl``, ``episodes.jsonl``,
``run.json`` whose ``patches.replaced`` names the probe, ``timing.json``, ``DONE.json``,
``params.npz``), then ``DIR/probe.heads.npz``, the heads' output layers of the final
parameters (:func:`dreamer_parity.device_reference.save_heads`), for
``measurements/2026-12-07-reference-cpu-mirror/twohot_mirror.py``.  A probe run is never a protocol run: every round and
``python -m dreamer_parity.keep`` refuse it (:func:`dreamer_parity.records.check_run_agrees`).

Exit status: the runner's (0 ok, 1 the run failed); 2 bad input or a set-up failure (one
line), nothing run.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))   # benchmarks.lib

from benchmarks.lib.cli import add_reference_seed_arguments  # noqa: E402
from dreamer_parity import keep, records  # noqa: E402  (standard library only)
from dreamer_parity.reference import launch, probe_runner  # noqa: E402  (imports no jax)

#: The runner module the probe runs in the reference venv.
MODULE = "dreamer_parity.reference.probe_runner"


def main(argv=None) -> int:
    from dreamer_parity import records as records_cli

    ap = records_cli.ArgumentParser(prog="benchmarks/reference_mirror_probe.py",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_reference_seed_arguments(ap, "a new directory for the run")
    ap.add_argument("--pass", dest="where", choices=probe_runner.PASSES, default="forward",
                    help="where the one-ulp difference goes (default forward)")
    a = ap.parse_args(argv)
    try:
        p = keep.load_params(a.params, a.set)
        seed = launch.parse_seed(a.seed)
    except (keep.KeepError, launch.LaunchError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    os.environ[probe_runner.ENV] = a.where    # the launcher passes the environment on
    code = launch.launch(p, seed, a.out, a.root, module=MODULE)
    if code != 0:
        return code
    from dreamer_parity.device_reference import save_heads
    out = Path(a.out)
    heads = save_heads(out, out, "probe")
    status = records.read_done(out)["status"]
    print(f"reference mirror probe ({a.where}): seed {seed} {status}; heads in {heads}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

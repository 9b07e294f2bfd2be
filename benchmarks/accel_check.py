"""The candidate on an accelerator (TPU or GPU): one check of its speed, memory and numerics.

On the accelerator's machine, from the repository root (docs/CANDIDATE.md#accelerators;
a TPU machine with its own package index: ``. benchmarks/device_env.sh`` first)::

    PYTHONUNBUFFERED=1 python3 benchmarks/accel_check.py --out <dir> --budget-s 420

Before that, here: ``make accel-wheels`` (``python benchmarks/accel_check.py
--download-wheels``), which puts into the git-ignored ``.accel-wheels/`` the wheels that
machine lacks and its package index does not hold (``ACCEL_WHEELS`` of
:mod:`dreamer_parity.accel.wheelsets` at the versions of ``requirements.lock``, about
2 MiB); they go there with the checkout.  This script installs those the interpreter lacks
into a temporary directory (nothing is installed into the interpreter's own environment).
The work is the package's (:mod:`dreamer_parity.accel`); this script is its command line.

What it measures, each part in a fresh child process (its own device, its own peak memory,
and an out-of-memory failure that ends that child only):

1. ``probe``: the jax backend (``--platform``, default ``tpu``), its devices, the device
   memory limit, the versions and the provenance (:func:`dreamer_parity.provenance.collect`).
2. For each seed count of ``--seeds`` (default 1, 10, 100), then counts growing by
   ``--grow`` until the device memory runs out, ``--max-seeds`` is reached or the budget
   ends: ``step``, the full-profile train step ``jit(vmap(train_step))`` over the seeds
   (``--step-updates`` timed updates after one untimed one), and ``loop``, the run's own
   chunk program (``loop.build``: envs, policy, replay for ``--rows`` rows, updates; the
   vector steps up to the gate at row 1,040, one untimed chunk, ``--loop-chunks`` timed
   chunks of ``--loop-steps`` vector steps, 8 updates each); ``--parts`` keeps one of the
   two.  Each prints seed-updates per
   second after compilation, compile seconds and peak device memory (``memory_stats`` of
   the device; on the CPU backend, which has none, the process's peak resident memory).
   The step and loop phases run at ``--precision`` (``jax_default_matmul_precision``,
   default: jax's own) and ``--seed-batch``: how the seed ``vmap`` runs the train step
   (:func:`dreamer_parity.candidate.runtime.seedmap.per_seed`).  ``N`` runs it in groups of
   N seeds, one group after another (the device holds one group's temporaries, not all
   seeds'), in both parts; ``all`` batches all seeds in both; ``auto`` (the default) is
   the run's own choice for the loop (``loop.resolve_seed_batch``: all seeds on a device,
   one at a time on the CPU) and plain ``vmap`` for the step.  Each phase records the
   seed batch it ran (``seed_batch``: null for all seeds batched).  ``--twohot-index``
   sets ``AgentConfig.twohot_index`` of the device phases (``auto``: the comparison form
   off the CPU, ``twohot.index_form``); each phase records the form it ran
   (``twohot_index``).  Both forms are exact (bitwise the same on XLA:CPU), so it is a
   speed A/B.  ``--head-rows`` sets ``AgentConfig.head_rows`` of the device phases (the
   imagined rows per pass of the heads: the same update up to float32 rounding, tests),
   each phase recording the value it ran (``head_rows``).
3. ``compare``: ``--compare-updates`` updates of one seed (fixed keys and batch) with the
   1-seed train step on the device and on the CPU backend of the same machine (the CPU
   side runs alongside the device phases on the upper half of the cores, unless
   ``--cpu-compare after``), and the largest difference of each training metric; on the
   device also at the other ``jax_default_matmul_precision`` values of
   ``--compare-precisions`` (at the default, XLA:TPU multiplies float32 in one bfloat16 pass
   and XLA:GPU in TF32); each of these also times ``--step-updates`` 1-seed updates, so
   every precision has its rate.

Every phase gets what is left of ``--budget-s``; one that is still running when the budget
ends is stopped, and one that does not fit is skipped; either is recorded with its reason.
``<out>/accel_check.json`` is rewritten (atomically) after every phase; the end prints a
Markdown table.  Exit status: 0 when every phase ran or was skipped or stopped for the budget
(a growing count that ran out of memory included), 1 when a phase failed otherwise, 2 on bad
arguments or a missing package.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# the checkout this script lies in, not an installed copy (the device machine has none)
sys.path.insert(0, str(REPO / "src"))

from dreamer_parity import provenance  # noqa: E402  (standard library only)
from dreamer_parity.accel import check, options, outcome, wheelsets  # noqa: E402  (no jax)


def _download(wset: dict, wheel_dir: Path, shown: str) -> int:
    try:
        got = wheelsets.download_wheels(wheel_dir, wset)
    except RuntimeError as e:
        print(f"accel_check: error: {e}", file=sys.stderr)
        return 2
    size = sum(p.stat().st_size for p in got)
    print(f"accel_check: {len(got)} wheels for CPython {wset['python']}, "
          f"{size / 2**20:.2f} MiB in {shown}/ "
          f"(copy it with the working tree): " + ", ".join(p.name for p in got))
    tree = wheelsets.travelling_bytes()
    if tree is not None:
        print(f"accel_check: the working tree that travels with them: "
              f"{(tree + size) / 2**20:.1f} MiB")
    return 0


def main(argv=None) -> int:
    """Command line; returns the exit status (module docstring)."""
    t_start = time.perf_counter()
    argv = sys.argv[1:] if argv is None else argv
    ap = options.parser(__doc__.split("\n\n")[0])
    a = ap.parse_args(argv)
    try:
        wset = wheelsets.wheel_set(a.versions)
    except ValueError as e:
        ap.error(str(e))
    a.wheels = a.wheels or wset["dir"]
    wheel_dir = REPO / a.wheels
    if a.download_wheels:
        return _download(wset, wheel_dir, a.wheels)
    options.validate(ap, a)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    run = check.Check(a, t_start, argv)
    res = run.res
    with tempfile.TemporaryDirectory(prefix="accel-check-") as tmp:
        tmp = Path(tmp)
        res["wheels"], why = wheelsets.prepare(wheel_dir, tmp / "site", a.versions)
        if why:
            res["error"] = why
            run.write()
            print(f"accel_check: error: {why}", file=sys.stderr)
            return 2
        if a.versions != "none":
            os.environ.setdefault(provenance.ALLOW_VERSIONS_ENV, a.versions)
        try:
            res["versions"] = provenance.check_pins(REPO / "requirements.lock")
        except provenance.PinError as e:
            # a benchmark, not a round: it measures anyway and records why the check failed
            res["versions"] = {"checked": False, "error": str(e),
                               "versions": provenance.package_versions(provenance.PINNED_PACKAGES)}
            print(f"accel_check: warning: {e}; measuring anyway (recorded)", file=sys.stderr)
        res["code"] = {"git": provenance.git_state(REPO, ["src", "benchmarks"]),
                       "sha256_src_and_check": check.tree_digest(["src/dreamer_parity",
                                                                  "benchmarks/accel_check.py"])}
        run.write()
        code = run.run(tmp)
    outcome.print_table(res)
    print(f"accel_check: wrote {Path(a.out) / check.JSON_NAME}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())

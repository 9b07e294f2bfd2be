"""The accelerator check's command line (``benchmarks/accel_check.py``): its options and
their checks, made before anything is written or run.  Standard library and the package
only (no jax)."""

from __future__ import annotations

import argparse
from pathlib import Path

from dreamer_parity import provenance
from dreamer_parity.accel.phases import GATE_STEPS, NUM_ENVS
from dreamer_parity.candidate.config import TWOHOT_INDEX
from dreamer_parity.candidate.runtime.run import RunParamsError, parse_seed_batch

PRECISIONS = ("default", "high", "highest")


def _positive(kind):
    def f(text):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind.__name__}") from None
        if v <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be positive")
        return v
    return f


def parser(description: str) -> argparse.ArgumentParser:
    """The check's argument parser (``description``: the script's first paragraph); the
    help of each option says its meaning, unit and default."""
    ap = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="See the script's docstring (docs/CANDIDATE.md#accelerators).")
    add = ap.add_argument
    add("--out", help="directory for accel_check.json (created)")
    add("--budget-s", type=_positive(float), default=420.0,
        help="wall seconds for the whole check (default 420: inside 8 minutes)")
    add("--platform", default="tpu", help="JAX_PLATFORMS of the device phases (tpu, cuda)")
    add("--profile", default="full", choices=("full", "smoke"))
    add("--agent", default="dreamer_parity.candidate.agent",
        help="agent module of the candidate's API (the tests use a stand-in)")
    add("--seeds", type=_positive(int), nargs="+", default=[1, 10, 100])
    add("--parts", nargs="+", default=["step", "loop"], choices=("step", "loop"),
        help="what is timed per seed count: the train step, the loop, or both")
    add("--grow", type=_positive(float), default=2.0,
        help="factor of the growing counts after the last --seeds count")
    add("--max-seeds", type=int, default=0, help="largest growing count (0: none)")
    add("--step-updates", type=_positive(int), default=10)
    add("--loop-steps", type=_positive(int), default=4,
        help="vector steps per chunk (8 updates each after the gate)")
    add("--loop-chunks", type=_positive(int), default=2, help="timed chunks")
    add("--rows", type=_positive(int), default=24000, help="replay sized for these rows")
    add("--compare-updates", type=int, default=3,
        help="updates of the device-CPU comparison (0: none)")
    add("--seed-batch", default="auto", metavar="auto|all|N",
        help="how the seed vmap runs the train step in the step and loop phases: auto (the "
             "loop: the run's choice; the step: all), all, or N (groups of N seeds, one "
             "after another: less device memory)")
    add("--precision", default="default", choices=PRECISIONS,
        help="jax_default_matmul_precision of the timed step and loop phases on the device "
             "(the compare phases set their own)")
    add("--twohot-index", default="auto", choices=TWOHOT_INDEX,
        help="AgentConfig.twohot_index of the device phases: how two-hot targets find "
             "their bins (auto: compare off the CPU; both exact, so a speed A/B)")
    add("--head-rows", type=_positive(int), default=None,
        help="AgentConfig.head_rows of the device phases: imagined rows per pass of the "
             "heads (default: the profile's; the same update up to float32 rounding, so a "
             "speed A/B)")
    add("--compare-precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    add("--cpu-compare", default="alongside", choices=("alongside", "after"),
        help="run the CPU side of the comparison alongside the device phases (upper half "
             "of the cores) or after the first count")
    add("--versions", default="none",
        help=f"the version set allowed besides requirements.lock (provenance.VERSION_SETS; "
             f"'none': the lock only); ${provenance.ALLOW_VERSIONS_ENV}, when set, wins")
    add("--mem-fraction", default="0.9",
        help="XLA_PYTHON_CLIENT_MEM_FRACTION of the device phases unless set")
    add("--wheels", default=None,
        help="wheel directory (relative to the repository; default: .accel-wheels, or "
             ".gpu-wheels with --versions gpu-h200: accel.wheelsets.WHEEL_SETS)")
    add("--download-wheels", action="store_true",
        help="download the wheels of --versions' WHEEL_SETS entry into --wheels and exit "
             "(make accel-wheels; make gpu-wheels: --versions gpu-h200)")
    return ap


def validate(ap: argparse.ArgumentParser, a) -> None:
    """Check the parsed options ``a`` of a measuring run (not ``--download-wheels``) and set
    ``a.seed_batch_value`` (None, or the group size); a bad one ends the command through
    ``ap.error`` (one line, exit 2): no ``--out`` or one that is a file, a bad
    ``--seed-batch``, a negative count, ``--grow`` at most 1, comparisons without the
    default precision, ``--rows`` that is not a multiple of 16 covering the gate and the
    timed chunks."""
    if a.out is None:
        ap.error("--out is required")
    try:
        a.seed_batch_value = parse_seed_batch(a.seed_batch)
    except RunParamsError as e:
        ap.error(str(e))
    if a.max_seeds < 0:
        ap.error("--max-seeds must be >= 0")
    if a.compare_updates < 0:
        ap.error("--compare-updates must be >= 0")
    if a.compare_updates and "default" not in a.compare_precisions:
        ap.error("--compare-precisions must include default (the CPU side runs at default)")
    if a.grow <= 1.0:
        ap.error("--grow must be > 1")
    if a.rows % NUM_ENVS or a.rows < NUM_ENVS * (
            -(-GATE_STEPS // a.loop_steps) + 1 + a.loop_chunks) * a.loop_steps:
        ap.error(f"--rows must be a multiple of {NUM_ENVS} covering the gate and the timed chunks")
    out = Path(a.out)
    if out.exists() and not out.is_dir():
        ap.error(f"--out {a.out}: not a directory")

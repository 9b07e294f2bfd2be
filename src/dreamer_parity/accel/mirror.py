"""The mirror-column probe in the GPU call's smoke (``benchmarks/gpu_call.py``): do the
reference's two-hot heads' products keep mirror columns bitwise equal on this machine, with
the GPU's GEMM autotuning off and on?

:func:`run` runs :func:`dreamer_parity.reference.mirror_gemm.autotune_pair` (two fresh
processes: ``--xla_gpu_autotune_level=0`` and without; on the CPU and the TPU neither gets the
flag) at each precision of :data:`PRECISIONS`, inside a time budget; :func:`differ_table`
reduces the four results to the counts of differing pairs.  Standard library and the package
only (the probe's processes import jax).

Command line (what the call's ``mirror`` phase runs; one JSON line on stdout, exit 0 even
when a precision failed: the failure is in its entry; exit 2 with one line on bad input,
before anything runs)::

    python -m dreamer_parity.accel.mirror --platform cuda --budget-s 180
"""

from __future__ import annotations

import json
import subprocess
import sys

from dreamer_parity import records
from dreamer_parity.reference import mirror_gemm

__all__ = ["PRECISIONS", "BUDGET_S", "MIN_BUDGET_S", "probe_platform", "differ_table", "run",
           "main"]

#: The precisions probed: jax's default (TF32 for float32 products on recent NVIDIA GPUs)
#: and ``highest`` (true float32), the reference's two candidates.
PRECISIONS = mirror_gemm.PRECISIONS
#: The probe's most seconds in all (four processes; about 25 s on two CPU cores).
BUDGET_S = 180.0
#: Below this many seconds the probe is not started (the call records it as skipped).
MIN_BUDGET_S = 20.0


def probe_platform(jax_platforms: str) -> str:
    """The probe's ``--platform`` for a ``JAX_PLATFORMS`` value: its first entry
    (``cuda,cpu`` -> ``cuda``).

    Raises:
      ValueError: one line, when that entry is not in ``mirror_gemm.PLATFORMS``.
    """
    first = jax_platforms.split(",")[0].strip()
    if first not in mirror_gemm.PLATFORMS:
        raise ValueError(f"--platform {jax_platforms!r}: the mirror probe runs on "
                         f"{', '.join(mirror_gemm.PLATFORMS)} only")
    return first


def differ_table(pairs: dict) -> dict:
    """``{precision: {"autotune_off" | "autotune_on": {"<rows>/<product>": pairs that
    differ (int)}} | {"error": str}}`` from :func:`run`'s ``pairs``: how many of the 127
    mirror pairs differ in any bit, per row count (``replay``, ``imagination``) and product
    (``forward``, ``gradient``)."""
    out = {}
    for precision, pair in pairs.items():
        if "error" in pair:
            out[precision] = {"error": pair["error"]}
            continue
        out[precision] = {key: {f"{rows}/{what}": r["differ"]
                                for rows, products in sorted(pair[key]["results"].items())
                                for what, r in sorted(products.items())}
                          for key in ("autotune_off", "autotune_on")}
    return out


def run(platform: str, budget_s: float = BUDGET_S, python: str | None = None) -> dict:
    """Run the probe pair at each precision of :data:`PRECISIONS`, each process allowed an
    equal share of ``budget_s`` seconds (a process past it is killed).

    Args:
      platform: one of ``mirror_gemm.PLATFORMS``; budget_s: seconds in all (positive);
        python: the interpreter of the probe's processes (default this one).

    Returns:
      ``{"platform", "budget_s", "pairs": {precision: autotune_pair's dict, or {"error":
      one line} when its processes failed or ran out of time}, "differ": differ_table(...),
      "mirror_pairs": 127}``.

    Raises:
      ValueError: an unknown platform or a non-positive budget (before anything runs).
    """
    if platform not in mirror_gemm.PLATFORMS:
        raise ValueError(f"--platform: unknown value {platform!r}; expected one of "
                         f"{', '.join(mirror_gemm.PLATFORMS)}")
    if not budget_s > 0:
        raise ValueError(f"--budget-s {budget_s}: must be a positive number of seconds")
    per_process = budget_s / (2 * len(PRECISIONS))
    pairs = {}
    for precision in PRECISIONS:
        try:
            pairs[precision] = mirror_gemm.autotune_pair(platform, precision, python=python,
                                                         timeout=per_process)
        except subprocess.TimeoutExpired:
            pairs[precision] = {"error": f"a probe process ran past {per_process:.1f} s"}
        except RuntimeError as e:
            pairs[precision] = {"error": str(e)}
    return {"platform": platform, "budget_s": budget_s, "pairs": pairs,
            "differ": differ_table(pairs), "mirror_pairs": (mirror_gemm.BINS - 1) // 2}


def main(argv=None) -> int:
    """Command line (module doc); returns the exit status."""
    ap = records.ArgumentParser(prog="python -m dreamer_parity.accel.mirror",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--platform", required=True,
                    help="JAX_PLATFORMS of the call (its first entry is probed)")
    ap.add_argument("--budget-s", type=float, default=BUDGET_S,
                    help=f"seconds for all probe processes (default {BUDGET_S:.0f})")
    a = ap.parse_args(argv)
    if not a.budget_s > 0:
        ap.error(f"--budget-s {a.budget_s}: must be a positive number of seconds")
    try:
        platform = probe_platform(a.platform)
    except ValueError as e:
        ap.error(str(e))
    print(json.dumps(run(platform, a.budget_s), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())

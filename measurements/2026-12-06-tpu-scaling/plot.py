"""The candidate's loop on an accelerator: seed-updates per second against seeds, log-log.

Reads one or more ``accel_check.json`` files (``benchmarks/accel_check.py``; the one the
figure shows lies beside this script) and draws each ``loop-<n>`` phase's seed-updates per
second against ``n``, with the counts that ran out of device memory marked at the bottom,
the matmul FLOP floor of the precision the loop ran at, and the reference on the same
kind of device (one seed per program: its updates per second whatever the count)::

    python measurements/2026-12-06-tpu-scaling/plot.py measurements/2026-12-06-tpu-scaling/accel_check-loop.json \\
        --out docs/figures/tpu-scaling.svg

The figure carries the device, the date of the check and this command.  Exit status 2 on
a file that is not an accel_check result.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

#: matmul FLOPs of one full-profile update (docs/PERFORMANCE.md, from the optimised HLO).
GFLOP_PER_UPDATE = 28.85
#: bfloat16 passes per float32 product at each jax_default_matmul_precision on a TPU.
PASSES = {"default": 1, "high": 3, "highest": 6}
#: bfloat16 matrix throughput measured on one TPU v5e chip, TFLOP/s.
TPU_V5E_TFLOPS = 167.0
#: The reference at 29eb964 on the same TPU v5e, seconds per update in its own loop
#: (jax 0.10.2, precision highest; docs/REFERENCE_RUN.md,
#: the raw result benchmarks/results/2026-12-06-tpu-reference-4800-s0.json at commit 4becd9f).
REFERENCE_TPU_S_PER_UPDATE = 0.0170


def loop_points(res: dict) -> tuple[list[tuple[int, float]], list[int], str]:
    """``([(seeds, seed-updates/s)], [seeds out of memory], precision)`` of one check."""
    ok, oom, precision = [], [], "default"
    for ph in res.get("phases", []):
        if ph.get("kind") != "loop":
            continue
        if ph.get("status") == "ok":
            r = ph["result"]
            ok.append((int(r["seeds"]), float(r["seed_updates_per_s"])))
            precision = r.get("precision", precision)
        elif ph.get("status") == "oom":
            oom.append(int(ph["seeds"]))
    return sorted(ok), sorted(oom), precision


def floor_rate(precision: str, tflops: float = TPU_V5E_TFLOPS) -> float:
    """Seed-updates per second at which the matmuls alone fill the chip."""
    return tflops * 1e12 / (GFLOP_PER_UPDATE * 1e9 * PASSES[precision])


def main(argv=None) -> int:
    from dreamer_parity import records as records_cli

    ap = records_cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="accel_check.json files")
    ap.add_argument("--out", required=True, help="the figure (.svg or .png)")
    a = ap.parse_args(argv)
    from dreamer_parity import records as _records
    try:      # every argument before anything is computed (one line, exit 2)
        _records.check_target(a.out, "--out", "file", inside=False, suffixes=(".svg", ".png"))
        for f in a.results:
            _records.check_source(f, "results", "file")
    except _records.RecordError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok, oom, precision, device, dates = [], [], "default", None, []
    for f in a.results:
        try:
            res = _records.read_json(f)       # the guarded reader
            p_ok, p_oom, precision = loop_points(res)
        except _records.RecordError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        except (OSError, ValueError, KeyError) as e:
            print(f"error: {f}: not an accel_check result ({e})", file=sys.stderr)
            return 2
        ok += p_ok
        oom += p_oom
        device = device or res.get("device", {}).get("backend", {}).get("device_kind")
        dates.append(res.get("date_utc", "")[:10])
    if not ok:
        print("error: no loop phase ran in the given files", file=sys.stderr)
        return 2
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    xs, ys = zip(*ok)
    ax.plot(xs, ys, "o-", color="tab:orange", label=f"candidate loop ({precision})")
    for n, r in ok:
        ax.annotate(f"{r:.0f}", (n, r), textcoords="offset points", xytext=(4, 6), fontsize=8)
    floor = floor_rate(precision)
    ax.axhline(floor, color="0.4", ls="--", lw=1,
               label=f"matmul floor at {precision} ({floor:.0f}/s)")
    ax.axhline(floor / 2, color="0.6", ls=":", lw=1, label=f"half the floor ({floor / 2:.0f}/s)")
    ref = 1 / REFERENCE_TPU_S_PER_UPDATE
    ax.axhline(ref, color="tab:blue", lw=1, label=f"reference, one seed per program ({ref:.0f}/s)")
    for n in oom:   # at the bottom edge of the axes (its limits are set below)
        ax.plot([n], [12], "x", color="red")
        ax.annotate(f"{n} seeds: out of memory", (n, 12), fontsize=8, color="red", ha="right",
                    textcoords="offset points", xytext=(-6, -3))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(0.7, max([*xs, *oom]) * 1.6)
    ax.set_ylim(10, floor * 2)
    ax.set_xlabel("seeds in one program")
    ax.set_ylabel("seed-updates per second")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    cmd = "python measurements/2026-12-06-tpu-scaling/plot.py " + " ".join(
        os.path.relpath(f) for f in a.results)
    ax.set_title(f"{device}, {', '.join(sorted(set(dates)))}\n{cmd}", fontsize=7)
    fig.tight_layout()
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    fig.savefig(tmp, format=out.suffix.lstrip(".") or "svg", metadata={"Date": None}
                if out.suffix == ".svg" else None)
    os.replace(tmp, out)
    print(f"wrote {out}: {len(ok)} point(s), {len(oom)} out of memory")
    return 0


if __name__ == "__main__":
    sys.exit(main())

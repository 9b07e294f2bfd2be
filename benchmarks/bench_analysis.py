"""Time the analysis of a kept round: the round of ``--params`` (default: params.yaml).

Reads the round's sides where its ``*.source`` says (a kept round comes with the
repository: ``data/published/...``, ``data/runs/...``), then times, in this process:
loading + statistics + checks (``compare.analyse``), the metrics, plot data and report,
and the figures, all written into a temporary directory; and, separately, the whole
compare CLI in a fresh interpreter (imports included).  Target: analysis under 5 s.
Prints the figures; writes nothing into the repository.

    python benchmarks/bench_analysis.py [--params params.yaml]

Exit status 2 (one line) on a params file or a side that cannot be read.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", default=str(REPO / "params.yaml"))
    a = ap.parse_args(argv)
    a.params = str(Path(a.params).resolve())
    os.chdir(REPO)   # the sides' run directories are relative to the repository root
    t0 = time.perf_counter()
    from dreamer_parity import params as P
    from dreamer_parity import sides
    from dreamer_parity.analysis import compare, plots
    t_import = time.perf_counter() - t0
    try:
        round_ = P.load_round(a.params)
        dirs = sides.resolve(round_, REPO, ["reference", "candidate"])
    except (P.ParamsError, sides.SideError, FileNotFoundError) as e:
        print(f"bench_analysis: error: {e}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t = time.perf_counter()
        res = compare.analyse(round_, dirs["reference"], dirs["candidate"])
        t_analyse = time.perf_counter() - t
        t = time.perf_counter()
        compare.write_outputs(res, tmp / "metrics", tmp / "metrics" / "plots", tmp / "report.md",
                              figures=False)
        t_outputs = time.perf_counter() - t
        t = time.perf_counter()
        plots.write_figures(res, tmp / "metrics" / "plots")
        t_figures = time.perf_counter() - t
        t = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "dreamer_parity.analysis.compare", "--params",
             a.params, "--metrics-dir", str(tmp / "cli"), "--plots-dir",
             str(tmp / "cli" / "plots"), "--report", str(tmp / "cli" / "report.md")],
            cwd=REPO, capture_output=True, text=True, env=dict(os.environ))
        t_cli = time.perf_counter() - t
    n = {side: len(res["seeds"][side]) for side in ("reference", "candidate")}
    total = t_analyse + t_outputs + t_figures
    print(f"analysis benchmark: round {round_.name}, {n['reference']} reference and "
          f"{n['candidate']} candidate seeds, {len(round_.protocol.points)} evaluation points")
    print(f"  imports (pandas, scipy, matplotlib)  {t_import:7.2f} s")
    print(f"  load + statistics + checks          {t_analyse:7.2f} s")
    print(f"  summary.json + CSVs + report        {t_outputs:7.2f} s")
    print(f"  figures                             {t_figures:7.2f} s")
    print(f"  analysis total (in process)         {total:7.2f} s   target < 5 s: "
          f"{'met' if total < 5 else 'NOT met'}")
    print(f"  whole CLI, fresh interpreter        {t_cli:7.2f} s   (exit {proc.returncode}; "
          "includes interpreter start and imports)")
    print(f"  machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    return 0 if proc.returncode in (0, 1) else 1


if __name__ == "__main__":
    sys.exit(main())

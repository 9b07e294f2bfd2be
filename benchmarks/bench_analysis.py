"""Time the analysis of a 5-seed, 60-evaluation round on synthetic records.

Writes a synthetic round (5 seeds per side, 24000 rows, evaluation every 400 rows,
10 episodes, one failed candidate seed) into a temporary directory, then times, in this
process: loading + statistics + checks (``compare.analyse``), the metrics, plot data and
report, and the three figures; and, separately, the whole CLI in a fresh interpreter
(imports included).  Target: analysis under 5 s.  Prints the figures; asserts nothing.

    python benchmarks/bench_analysis.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


# the synthetic round writer the tests use (tests/synthetic.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def main() -> int:
    t0 = time.perf_counter()
    from dreamer_parity import records
    from dreamer_parity.analysis import compare, plots
    import synthetic
    from dreamer_parity.params import validate
    t_import = time.perf_counter() - t0
    raw = {"round": "bench", "seeds": [0, 1, 2, 3, 4], "rows": 24000, "eval_every": 400,
           "eval_episodes": 10,
           "stats": {"s1_rows": [16000, 18000, 20000], "late_rows": [12000, 24000],
                     "concordance_rows": [20000, 24000], "concordance_range": [16000, 24000]}}
    params = validate(raw)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t = time.perf_counter()
        sides = synthetic.write_round(tmp / "runs", params, fail={("candidate", 3): 16000})
        t_write = time.perf_counter() - t
        n_eps = sum(len(records.read_episodes(d / f"s{s}"))
                    for d in sides.values() for s in params["seeds"])

        t = time.perf_counter()
        res = compare.analyse(params, sides["reference"], sides["candidate"])
        t_analyse = time.perf_counter() - t
        t = time.perf_counter()
        compare.write_outputs(res, tmp / "metrics", tmp / "metrics" / "plots", tmp / "report.md",
                              figures=False)
        t_outputs = time.perf_counter() - t
        t = time.perf_counter()
        plots.write_figures(res, tmp / "metrics" / "plots")
        t_figures = time.perf_counter() - t

        synthetic.write_params(tmp / "params.yaml", raw)   # a complete file (params.load)
        t = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "dreamer_parity.analysis.compare", "--params", "params.yaml",
             "--reference", "runs/reference", "--candidate", "runs/candidate", "--metrics-dir",
             "metrics", "--plots-dir", "metrics/plots", "--report", "report.md"],
            cwd=tmp, capture_output=True, text=True, env=dict(os.environ))
        t_cli = time.perf_counter() - t

    total = t_analyse + t_outputs + t_figures
    print("analysis benchmark: 5 seeds x 2 sides, 60 evaluation points, "
          f"{n_eps} training episodes, 1 failed seed")
    print(f"  imports (pandas, scipy, matplotlib)  {t_import:7.2f} s")
    print(f"  write synthetic records             {t_write:7.2f} s  (not part of the analysis)")
    print(f"  load + statistics + checks          {t_analyse:7.2f} s")
    print(f"  summary.json + CSVs + report        {t_outputs:7.2f} s")
    print(f"  three PNG figures                   {t_figures:7.2f} s")
    print(f"  analysis total (in process)         {total:7.2f} s   target < 5 s: "
          f"{'met' if total < 5 else 'NOT met'}")
    print(f"  whole CLI, fresh interpreter        {t_cli:7.2f} s   (exit {proc.returncode}; "
          "includes interpreter start and imports)")
    print(f"  machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

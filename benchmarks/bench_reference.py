"""Benchmark the reference (danijar/dreamerv3 at 29eb964) on this machine; prints figures.

Usage (main venv, after ``make reference-setup``)::

    python benchmarks/bench_reference.py [--profile full] [--updates 10] [--loop-rows 1360]
                                         [--skip-cold] [--root DIR]

Measures, each in a fresh reference process:

1. build + compile seconds of the agent with a **cold** JAX persistent compilation cache
   (an empty temporary cache directory), and the isolated seconds per update (the stock
   ``JAXAgent.train`` on one fixed batch, blocking after each call; median of
   ``--updates`` after 2 warm-up calls): ``benchmarks/lib/bench_agent.py``;
2. the same with the cache now **warm**;
3. seconds per update **inside the reference's own loop**: the real runner
   (:mod:`dreamer_parity.reference.runner`) for ``--loop-rows`` rows (1360 rows = 161
   updates; the first 20 are warm-up, so at least 100 are timed), one evaluation of one
   episode at the end (excluded from the figure), with the warm cache.

The full profile costs about 10 minutes of both cores.  Prints a Markdown table and one
``RESULT {json}`` line; writes nothing into the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))   # benchmarks.lib

from benchmarks.lib.cli import bench_params  # noqa: E402
from dreamer_parity import provenance, records  # noqa: E402
from dreamer_parity.reference import setup as rs  # noqa: E402
from dreamer_parity.reference.launch import runner_command  # noqa: E402


def _bench_agent(info, cache: Path, profile: str, updates: int) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{Path(__file__).resolve().parents[1] / 'src'}"
                                       f":{info['checkout']}",
           "JAX_PLATFORMS": "cpu", "PYTHONDONTWRITEBYTECODE": "1",
           "JAX_COMPILATION_CACHE_DIR": str(cache),
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    script = Path(__file__).resolve().parent / "lib" / "bench_agent.py"
    r = subprocess.run([str(info["python"]), str(script),
                        "--profile", profile, "--updates", str(updates)],
                       capture_output=True, text=True, env=env, cwd=str(info["checkout"]))
    lines = [x for x in r.stdout.splitlines() if x.startswith("BENCH ")]
    if r.returncode != 0 or not lines:
        raise SystemExit(f"bench_agent failed (exit {r.returncode}): {r.stderr[-2000:]}")
    return json.loads(lines[-1][len("BENCH "):])


def main(argv=None) -> int:
    from dreamer_parity import records as records_cli

    ap = records_cli.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="full", choices=("full", "smoke"))
    ap.add_argument("--updates", type=int, default=10)
    ap.add_argument("--loop-rows", type=int, default=1360)
    ap.add_argument("--skip-cold", action="store_true",
                    help="use the set-up's cache for the first measurement too")
    ap.add_argument("--root", default=None)
    a = ap.parse_args(argv)
    from dreamer_parity import records as _records
    try:      # every argument before anything is computed (one line, exit 2)
        _records.check_range(a.updates, "--updates", 1, 10_000)
        _records.check_range(a.loop_rows, "--loop-rows", 1056, 24_000)
        if a.root is not None:
            _records.check_source(a.root, "--root", "dir")
    except _records.RecordError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.loop_rows % 16 or a.loop_rows <= 1040:
        ap.error("--loop-rows must be a multiple of 16 above the gate row 1040")
    try:
        # the reference loop's parameters: the schema's defaults, the stock sampler
        p = bench_params({"profile": a.profile, "rows": a.loop_rows, "eval_every": a.loop_rows,
                          "eval_episodes": 1, "seeds": [0],
                          "reference": {"decode": "ref", "sampler": "stock"}})
        info = rs.check_setup(a.root, jax=p["reference"]["jax"])
    except (rs.SetupError, ValueError) as e:
        print(f"bench_reference: error: {e}", file=sys.stderr)
        return 2
    res = {"profile": a.profile, "cpu": provenance.cpu_model(), "cpu_count": os.cpu_count(),
           "load_avg_start": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="refbench-") as tmp:
        tmp = Path(tmp)
        cache = info["jaxcache"] if a.skip_cold else tmp / "jaxcache"
        print(f"[1/3] agent build, {'set-up' if a.skip_cold else 'cold'} cache ...",
              file=sys.stderr, flush=True)
        cold = _bench_agent(info, cache, a.profile, a.updates)
        print(f"[2/3] agent build, warm cache ...", file=sys.stderr, flush=True)
        warm = _bench_agent(info, cache, a.profile, a.updates)
        print(f"[3/3] reference loop, {a.loop_rows} rows ...", file=sys.stderr, flush=True)
        out = tmp / "loop"
        cmd, env = runner_command({**info, "jaxcache": cache}, 0, out, p)
        out.mkdir()
        t0 = time.time()
        with open(out / "stdout.log", "w") as log:
            code = subprocess.call(cmd, env=env, cwd=str(out), stdout=log)
        if code != 0:
            print(f"bench_reference: loop run failed (exit {code})", file=sys.stderr)
            return 1
        timing = records.read_json(out / "timing.json")
        res.update({
            "build_compile_s_cold": cold["build_compile_s"],
            "build_compile_s_warm": warm["build_compile_s"],
            "s_per_update_isolated": [cold["s_per_update"], warm["s_per_update"]],
            "param_count": cold["param_count"],
            "loop_updates": timing["updates"],
            "loop_updates_timed": timing["updates"] - 1 - min(20, timing["updates"] // 5),
            "s_per_update_loop": timing["s_per_update_loop_after_warmup"],
            "loop_build_compile_s": timing["build_compile_s"],
            "loop_wall_s": time.time() - t0,
            "load_avg_end": os.getloadavg()[0],
        })
    print(f"\n| reference, profile {a.profile} ({res['param_count']:,} parameters) | value |")
    print("|---|---|")
    print(f"| build + compile, {'set-up' if a.skip_cold else 'cold'} cache | "
          f"{res['build_compile_s_cold']:.1f} s |")
    print(f"| build + compile, warm cache | {res['build_compile_s_warm']:.1f} s |")
    iso = res["s_per_update_isolated"]
    print(f"| s/update isolated (train on one batch, blocking; median of {a.updates}, two "
          f"processes) | {iso[0]:.3f}, {iso[1]:.3f} s |")
    print(f"| s/update inside its own loop ({res['loop_updates_timed']} updates after "
          f"warm-up) | {res['s_per_update_loop']:.3f} s |")
    print(f"| machine | {res['cpu']}, {res['cpu_count']} cores; load average "
          f"{res['load_avg_start']:.1f} -> {res['load_avg_end']:.1f} |")
    print("RESULT " + json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The speed ratio as the median of several candidate/reference pairings on this machine.

Usage (main venv, after ``make reference-setup``)::

    python benchmarks/pair_ratio.py [--pairs 3] [--seeds 3] [--timed-chunks 2]
                                    [--out FILE.json]

One pairing is one ``bench_candidate.py --skip-cold --no-flops --reference none --seeds N``
process and one ``bench_reference.py --profile full --skip-cold`` process (``--profile
smoke``: both at their smallest, the suite's check that they run), run one after
the other with nothing else.  The order alternates (candidate first in pairings 1, 3, ...,
reference first in 2, 4, ...), so a machine that drifts slower or faster over the hour
does not favour one side.  The ratio of a pairing is the reference's seconds per update in
its own loop divided by the candidate's seconds per seed-update with N seeds (the issue's
target: at least 3 with 3 seeds).

On one machine, single pairings of the same code have spread over 2.47-3.25x
(docs/PERFORMANCE.md), so this script reports every pairing and their median, and judges
the target by the median.  One pairing took about 5 minutes of both cores once both
programs were in the caches, and about 11 minutes the first time.  Each finished pairing
is printed to stderr at once (a later failure does not lose it); at the end the script
prints a Markdown table and one ``RESULT {json}`` line, and ``--out`` also writes that
JSON (atomically).  Writes nothing into the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET = 3.0


def parse_result(stdout: str, what: str) -> dict:
    """The JSON of the last ``RESULT {...}`` line of a benchmark script's stdout.

    Raises ValueError naming ``what`` when there is none or it is not valid JSON."""
    lines = [x for x in stdout.splitlines() if x.startswith("RESULT ")]
    if not lines:
        raise ValueError(f"{what}: no RESULT line in its output")
    try:
        return json.loads(lines[-1][len("RESULT "):])
    except json.JSONDecodeError as e:
        raise ValueError(f"{what}: RESULT line is not valid JSON ({e})") from None


def candidate_s_per_seed_update(res: dict, seeds: int) -> float:
    """Seconds per seed-update with ``seeds`` seeds from ``bench_candidate.py``'s RESULT.

    Raises ValueError when that seed count was not measured."""
    t = res.get("throughput", {}).get(str(seeds))
    if not t:
        raise ValueError(f"bench_candidate: no throughput figure for {seeds} seed(s)")
    return float(t["s_per_update_per_seed"])


def reference_s_per_update(res: dict) -> float:
    """Seconds per update in the reference's own loop from ``bench_reference.py``'s RESULT.

    Raises ValueError when the figure is absent."""
    if "s_per_update_loop" not in res:
        raise ValueError("bench_reference: no s_per_update_loop in its RESULT")
    return float(res["s_per_update_loop"])


def summarise(pairs: list[dict], target: float = TARGET) -> dict:
    """Median, min and max of the pairings' ratios and whether the median meets ``target``.

    ``pairs``: dicts with ``candidate_s`` (s per seed-update) and ``reference_s`` (s per
    update in its own loop), both positive.  Each gets ``ratio`` = reference_s /
    candidate_s.  Raises ValueError on an empty list or a non-positive figure."""
    if not pairs:
        raise ValueError("no pairings to summarise")
    for i, p in enumerate(pairs, 1):
        if not (p["candidate_s"] > 0 and p["reference_s"] > 0):
            raise ValueError(f"pairing {i}: figures must be positive, got {p}")
        p["ratio"] = p["reference_s"] / p["candidate_s"]
    ratios = [p["ratio"] for p in pairs]
    med = statistics.median(ratios)
    return {"pairs": pairs, "median_ratio": med, "min_ratio": min(ratios),
            "max_ratio": max(ratios), "target": target, "median_meets_target": med >= target,
            "median_candidate_s": statistics.median(p["candidate_s"] for p in pairs),
            "median_reference_s": statistics.median(p["reference_s"] for p in pairs)}


def _run(cmd: list[str], what: str) -> dict:
    print(f"  {what}: {Path(cmd[1]).name} {' '.join(cmd[2:])}", file=sys.stderr, flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{what} failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
    return parse_result(r.stdout, what)


def main(argv=None) -> int:
    from dreamer_parity import records as records_cli

    ap = records_cli.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=3, help="the candidate's vmapped seed count")
    ap.add_argument("--timed-chunks", type=int, default=2,
                    help="passed to bench_candidate.py (8 updates per vector step, 3 steps a chunk)")
    ap.add_argument("--profile", default="full", choices=("full", "smoke"),
                    help="the agent's widths on both sides (smoke: the suite's smallest run)")
    ap.add_argument("--out", default=None, help="also write the RESULT JSON here")
    a = ap.parse_args(argv)
    from dreamer_parity import records as _records
    try:      # every argument before anything is computed (one line, exit 2)
        _records.check_range(a.pairs, "--pairs", 1, 100)
        _records.check_range(a.seeds, "--seeds", 1, 1024)
        _records.check_range(a.timed_chunks, "--timed-chunks", 1, 1000)
        if a.out is not None:
            _records.check_target(a.out, "--out", "file", inside=False)
    except _records.RecordError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.pairs < 1:
        ap.error("--pairs must be at least 1")
    if a.seeds < 1:
        ap.error("--seeds must be at least 1")
    if a.timed_chunks < 1:
        ap.error("--timed-chunks must be at least 1")
    from dreamer_parity.reference import setup as rs
    try:
        rs.check_setup(None)
    except rs.SetupError as e:
        print(f"pair_ratio: error: the reference is not set up: {e}", file=sys.stderr)
        return 2

    py = sys.executable
    cand = [py, str(HERE / "bench_candidate.py"), "--profile", a.profile, "--skip-cold",
            "--no-flops", "--reference", "none", "--seeds", str(a.seeds), "--timed-chunks",
            str(a.timed_chunks)]
    ref = [py, str(HERE / "bench_reference.py"), "--profile", a.profile, "--skip-cold"]
    if a.profile == "smoke":    # the smallest sizes: one timed chunk, the first updates
        cand += ["--rows", str(16 * (65 + 3 * (2 + a.timed_chunks)))]   # its smallest
        ref += ["--updates", "1", "--loop-rows", "1056"]
    pairs, code = [], None
    for i in range(a.pairs):
        order = ("candidate", "reference") if i % 2 == 0 else ("reference", "candidate")
        print(f"pairing {i + 1}/{a.pairs} ({' then '.join(order)}) ...", file=sys.stderr, flush=True)
        t0, got = time.time(), {}
        for side in order:
            got[side] = _run(cand if side == "candidate" else ref, f"bench_{side}")
        code = got["candidate"].get("code", code)
        pairs.append({"order": list(order),
                      "candidate_s": candidate_s_per_seed_update(got["candidate"], a.seeds),
                      "candidate_cpu_s": got["candidate"]["throughput"][str(a.seeds)].get(
                          "cpu_s_per_seed_update"),
                      "reference_s": reference_s_per_update(got["reference"]),
                      "wall_s": time.time() - t0})
        p = pairs[-1]
        print(f"  pairing {i + 1}: candidate {p['candidate_s']:.3f} s, reference "
              f"{p['reference_s']:.3f} s, ratio {p['reference_s'] / p['candidate_s']:.2f}x",
              file=sys.stderr, flush=True)
    res = {"seeds": a.seeds, "profile": a.profile, "code": code, **summarise(pairs)}

    print(f"\n| pairing (order) | candidate s per seed-update, {a.seeds} seeds (CPU s) | "
          f"reference s per update, own loop | ratio |")
    print("|---|---|---|---|")
    for i, p in enumerate(res["pairs"], 1):
        print(f"| {i} ({p['order'][0]} first) | {p['candidate_s']:.3f} "
              f"({p['candidate_cpu_s'] or float('nan'):.3f}) | {p['reference_s']:.3f} | "
              f"{p['ratio']:.2f}x |")
    print(f"| median | {res['median_candidate_s']:.3f} | {res['median_reference_s']:.3f} | "
          f"**{res['median_ratio']:.2f}x** (range {res['min_ratio']:.2f}-{res['max_ratio']:.2f}x;"
          f" target >= {TARGET:g}x: {'met' if res['median_meets_target'] else 'missed'}) |")
    if code:
        print(f"\ncode benchmarked: commit {str(code['commit'])[:7]}"
              f"{' + uncommitted changes in src/' if code['dirty'] else ''}")
    line = json.dumps(res)
    print("RESULT " + line)
    if a.out:
        out = Path(a.out)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(line + "\n")
        os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

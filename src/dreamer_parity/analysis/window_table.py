"""Training-metric windows of a few runs side by side, for reading a mechanism by eye.

A round's ``compare`` tests the windows of two sides (:mod:`.window_tests`); this prints
the raw window values of individual runs, whichever round or length they belong to (a
short diagnostic run included), one row per record and one column per run and metric::

    python -m dreamer_parity.analysis.window_table \\
        cpu-0.4.26=data/runs/round3-10seeds-reference/s5 \\
        tpu=data/runs/round3-ref-tpu/s5 \\
        --rows 1200 2000 --metrics val/std rew/min

A window value is the mean of the metric over the updates since the previous record
(records schema, docs/SIDES.md); records before the first update carry none (``-``).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from dreamer_parity.records import RecordError, read_records
from dreamer_parity import params as P
from dreamer_parity import records

__all__ = ["DEFAULT_METRICS", "table", "main"]

#: The spreads and the entropy the two-hot expectation moves (round3-candidate-ref.md).
DEFAULT_METRICS = ("val/std", "ret/std", "adv/std", "rew/min", "rew/max", "ent/action/mean")


def _parse_run(text: str) -> tuple[str, Path]:
    label, sep, path = text.partition("=")
    if not sep or not label or not path:
        raise argparse.ArgumentTypeError(f"{text!r}: expected LABEL=RUN_DIRECTORY")
    return label, Path(path)


def table(runs: list[tuple[str, list[dict]]], metrics, rows=None) -> str:
    """A markdown table of training-metric windows.

    Args:
      runs: ``(label, records)`` per run, records as :func:`records.read_records` returns
        them (``rows`` int, ``updates`` int, ``train`` dict of metric -> float).
      metrics: metric names (``val/std``, ...), one column per run and metric.
      rows: the record rows to show (None: every row any run has).

    Returns:
      The table: columns ``rows``, then ``updates <label>`` and ``<metric> <label>`` per run
      (5 significant digits; ``-`` where a run has no such record or value).

    Raises:
      ValueError: no run, no metric, or a requested row that no run recorded.
    """
    if not runs or not metrics:
        raise ValueError("table: give at least one run and one metric")
    by_run = [(label, {r["rows"]: r for r in recs}) for label, recs in runs]
    have = sorted(set().union(*(set(m) for _, m in by_run)))
    if rows is None:
        rows = have
    missing = [r for r in rows if r not in have]
    if missing:
        raise ValueError(f"--rows: no run has a record at rows {missing}")

    def cell(v):
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            return "-"
        return f"{v:.5g}"

    head = ["rows"]
    for label, _ in by_run:
        head.append(f"updates {label}")
        head += [f"{m} {label}" for m in metrics]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        out = [str(row)]
        for _, recs in by_run:
            rec = recs.get(row)
            out.append("-" if rec is None else str(rec["updates"]))
            train = (rec or {}).get("train") or {}
            out += [cell(train.get(m)) for m in metrics]
        lines.append("| " + " | ".join(out) + " |")
    return "\n".join(lines)


#: Most runs one table shows (a record row asked for lies in 0..params.MAX_ROWS, the
#: protocol's largest round).
MAX_RUNS = 16


def main(argv=None) -> int:
    """CLI: the table on stdout; exit 2 with one line ``error: ...`` for a bad argument
    (a label given twice, over 40 characters; a run that is not a directory; a row outside
    0..MAX_ROWS; more than MAX_RUNS runs) before any run is read, or a refused run."""
    ap = records.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=_parse_run, metavar="LABEL=RUN_DIRECTORY",
                    help="a finished run directory of the records schema (DONE.json)")
    ap.add_argument("--rows", nargs="+", type=int, default=None,
                    help="record rows to show (default: all)")
    ap.add_argument("--metrics", nargs="+", default=list(DEFAULT_METRICS))
    args = ap.parse_args(argv)
    labels = [label for label, _ in args.runs]
    if len(set(labels)) != len(labels):
        ap.error(f"labels must differ: {labels}")
    try:      # every argument before any run is read
        records.check_range(len(args.runs), "runs: count of", 1, MAX_RUNS)
        for label, path in args.runs:
            if len(label) > 40 or any(ord(c) < 32 for c in label):
                raise RecordError(f"label {label[:40]!r}: at most 40 printable characters")
            records.check_source(path, f"{label}=", "dir")
        for r in args.rows or []:
            records.check_range(r, "--rows", 0, P.MAX_ROWS)
        records.check_range(len(args.metrics), "--metrics: count of", 1, 64)
        bad = [m for m in args.metrics if not m or len(m) > 80 or any(ord(c) < 32 for c in m)]
        if bad:
            raise RecordError(f"--metrics {bad[0][:80]!r}: a metric name of 1 to 80 printable "
                              f"characters")
    except RecordError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    loaded = []
    for label, path in args.runs:      # every run read and checked before anything prints
        try:
            loaded.append((label, read_records(path)))
        except (RecordError, OSError) as e:
            print(f"error: {label}: {e}", file=sys.stderr)
            return 2
    try:
        print(table(loaded, args.metrics, args.rows))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

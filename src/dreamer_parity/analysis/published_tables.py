"""The numbers of the published study's Markdown reports, as one CSV table.

The study published its per-round reports as Markdown (``compare.md``).  The analysis
needs two kinds of numbers that exist only there: the evaluation-curve table (the tests
that reproduce the study check against it) and the training-metric window tables (the
reference's seed range of a metric, e.g. the actor entropy of the window ending at 4000
rows).  This module extracts those tables, cell by cell, into
``data/published/tables.csv``, and reads them back.

Extraction (needs the study's report files; run once, the CSV is committed)::

    python -m dreamer_parity.analysis.published_tables --source <published study dir> \\
        --out data/published/tables.csv

Columns of the CSV, one row per table cell:

``source``   the report the cell came from, relative to the published directory
             (``round1/compare.md``, ``round2/pairE/compare.md``, ``round2/pairR/compare.md``)
``line``     1-based line of the cell's table row in that report
``section``  the heading above the table (``## Evaluation curve ...`` or
             ``### window ending at <rows> rows``)
``row``      the first cell of the table row (rows, or the metric name)
``column``   the column header
``value``    the cell as printed (one decimal for returns; ``mean [min, max]`` with four
             decimals for window means)
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from dreamer_parity.analysis.load import AnalysisError, display_path

__all__ = ["REPORTS", "TABLE_FILE", "extract", "write_table", "read_table", "curve_table",
           "window_range", "window_cells"]

#: The study's reports that hold numbers the analysis reads (relative to its published dir).
REPORTS = ("round1/compare.md", "round2/pairE/compare.md", "round2/pairR/compare.md")
#: The committed table, relative to the published directory.
TABLE_FILE = "tables.csv"
COLUMNS = ["source", "line", "section", "row", "column", "value"]
CURVE_SECTION = "## Evaluation curve"
#: The columns that name a cell: a second row naming the same cell is refused.
CELL_KEY = ["source", "section", "row", "column"]
#: Largest magnitude of a number in a cell (the bound of every number read,
#: :data:`dreamer_parity.records.MAX_MAGNITUDE`).
MAX_MAGNITUDE = 1e30
WINDOW_SECTION = "### window ending at {rows} rows"


def _wanted(heading: str) -> bool:
    return heading.startswith(CURVE_SECTION) or heading.startswith("### window ending at ")


def extract(report: Path, source: str) -> list[dict]:
    """Every cell of the wanted tables of one report, as CSV rows (see the module doc).

    Raises:
      AnalysisError: a table row has more cells than its header (names file and line).
    """
    lines = Path(report).read_text().splitlines()
    out, section, header = [], None, None
    for i, raw in enumerate(lines, 1):
        line = raw.strip()
        if line.startswith("#"):
            section = line if _wanted(line) else None
            header = None
            continue
        if section is None or not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if header is None:
            header = cells
            continue
        if all(set(c) <= set("-: ") for c in cells):
            continue                                             # the |---| rule
        if len(cells) > len(header):
            raise AnalysisError(f"{display_path(report)}:{i}: {len(cells)} cells under a "
                                f"header of {len(header)}")
        for col, val in zip(header[1:], cells[1:]):
            out.append({"source": source, "line": i, "section": section, "row": cells[0],
                        "column": col, "value": val})
    return out


def write_table(source_dir, out) -> int:
    """Extract :data:`REPORTS` under ``source_dir`` into the CSV ``out`` (atomically).

    Returns the number of cells written.  Raises AnalysisError for a missing report.
    """
    rows = []
    for rel in REPORTS:
        path = Path(source_dir) / rel
        if not path.is_file():
            raise AnalysisError(f"{display_path(path)}: missing")
        rows += extract(path, rel)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    out = Path(out)
    tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
    tmp.write_text(buf.getvalue())
    os.replace(tmp, out)
    return len(rows)


def read_table(path) -> pd.DataFrame:
    """The CSV as a DataFrame of strings, with ``csv_line`` (1-based line in the CSV).

    The CSV is one of the study's published files: its directory's ``MANIFEST.json``
    must list it with its SHA-256 (:func:`dreamer_parity.manifest.verify`), and it is read
    through the guarded reader (:func:`dreamer_parity.records.read_text`: a regular file
    inside the repository, at most ``records.MAX_BYTES["csv"]``, UTF-8).

    Raises:
      AnalysisError: missing file, a CSV that does not parse (naming its line), other
        columns than :data:`COLUMNS`, or two rows naming one cell (:data:`CELL_KEY`,
        naming both lines);
      records.RecordError: the manifest is missing or does not verify, or the guarded
        reader refuses the file (one line naming it).
    """
    from dreamer_parity import manifest, records

    path = Path(path)
    name = display_path(path)
    if not path.exists() and not path.is_symlink():
        raise AnalysisError(f"{name}: missing")
    manifest.verify(path.parent, True, display_path(path.parent), must_list=(path.name,))
    text = records.read_text(path, name)
    try:
        df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, csv.Error) as e:
        line = re.search(r"line (\d+)", str(e))
        raise AnalysisError(f"{name}:{line.group(1) if line else 1}: not a CSV table "
                            f"({str(e).splitlines()[0][:120]})") from None
    if list(df.columns) != COLUMNS:
        raise AnalysisError(f"{display_path(path)}:1: columns {list(df.columns)}, "
                            f"expected {COLUMNS}")
    df["csv_line"] = np.arange(2, len(df) + 2)
    dup = df.duplicated(CELL_KEY, keep=False)
    if dup.any():
        first = df[dup].iloc[0]
        same = df[dup & (df[CELL_KEY] == first[CELL_KEY]).all(axis=1)]["csv_line"].tolist()
        raise AnalysisError(f"{name}:{same[1]}: the cell ({', '.join(str(first[c])[:40] for c in CELL_KEY)}) "
                            f"given twice (lines {same[0]} and {same[1]}); a table names each "
                            f"cell once")
    return df


def curve_table(table_csv, source: str) -> pd.DataFrame:
    """The evaluation-curve table of report ``source``, indexed by rows (int).

    Columns are the report's headers (``ref s0`` ... ``ajax mean``), values float64 as
    printed (one decimal).  Raises AnalysisError when the report has no such table or a
    cell is not a number or not an evaluation mean the environment can produce
    (:mod:`dreamer_parity.environment`), naming the CSV line.
    """
    df = read_table(table_csv)
    sel = df[(df["source"] == source) & df["section"].str.startswith(CURVE_SECTION)]
    if sel.empty:
        raise AnalysisError(f"{display_path(table_csv)}: no evaluation curve of {source}")
    try:
        vals = sel.assign(v=sel["value"].astype(float), r=sel["row"].astype(int))
    except ValueError:
        bad = sel[~sel["value"].str.fullmatch(r"-?[0-9.]+") | ~sel["row"].str.isdigit()]
        raise AnalysisError(f"{display_path(table_csv)}:{bad['csv_line'].iloc[0]}: "
                            f"not a number in the evaluation curve of {source}") from None
    from dreamer_parity import environment

    for v, line in zip(vals["v"], vals["csv_line"]):   # evaluation means: returns' range
        problem = environment.mean_problem("return", float(v))
        if problem:
            raise AnalysisError(f"{display_path(table_csv)}:{line}: evaluation curve of "
                                f"{source} {problem}")
    wide = vals.pivot(index="r", columns="column", values="v")
    wide = wide[list(dict.fromkeys(sel["column"]))]
    wide.index.name, wide.columns.name = "rows", None
    return wide


_RANGE_CELL = re.compile(r"^(?P<mean>\S+)\s*\[\s*(?P<lo>[^,\s]+)\s*,\s*(?P<hi>[^\]\s]+)\s*\]$")


def window_range(table_csv, source: str, rows: int, metric: str,
                 column: str = "ref mean [min, max]") -> dict:
    """One ``mean [min, max]`` cell of a training-metric window table of report ``source``.

    Args:
      table_csv: the committed CSV (``data/published/tables.csv``).
      source: the report, e.g. ``round2/pairE/compare.md``.
      rows: the row count the window ends at (rows over all 16 envs).
      metric: the study's metric name (first column), e.g. ``ent/action/mean``.
      column: the column header (default: the reference side).

    Returns:
      ``{"mean", "lo", "hi"}`` (float, as printed; [min, max] over the study's seeds),
      ``"half_unit"`` (half a unit of the last printed digit),
      ``"line"`` (int, the line of the cell in the report) and ``"csv_line"`` (int).

    Raises:
      AnalysisError: the section, column or row is absent, or the cell is not
      ``mean [min, max]`` with finite numbers and min <= max; names the CSV and its line.
    """
    name = display_path(table_csv)
    df = read_table(table_csv)
    heading = WINDOW_SECTION.format(rows=int(rows))
    sec = df[(df["source"] == source) & (df["section"] == heading)]
    if sec.empty:
        raise AnalysisError(f"{name}: {source} has no section {heading!r}")
    if column not in set(sec["column"]):
        raise AnalysisError(f"{name}: {source} section {heading!r} has no column {column!r}")
    cell = sec[(sec["row"] == metric) & (sec["column"] == column)]
    if cell.empty:
        raise AnalysisError(f"{name}: {source} section {heading!r} has no row {metric!r}")
    return _range_cell(name, cell.iloc[0])


def _range_cell(name: str, cell) -> dict:
    """Parse one ``mean [min, max]`` cell (a row of :func:`read_table`)."""
    text, csv_line = cell["value"], int(cell["csv_line"])
    m = _RANGE_CELL.match(text)
    try:
        vals = {k: float(m.group(k)) for k in ("mean", "lo", "hi")} if m else None
    except ValueError:
        vals = None
    if vals is None or not all(np.isfinite(v) and abs(v) <= MAX_MAGNITUDE
                               for v in vals.values()) or \
            not vals["lo"] <= vals["mean"] <= vals["hi"]:
        raise AnalysisError(f"{name}:{csv_line}: {cell['row']} {cell['column']!r}: expected "
                            f"'mean [min, max]' with finite numbers (at most "
                            f"{MAX_MAGNITUDE:g} in magnitude), min <= mean <= max, "
                            f"got {text[:80]!r}")
    decimals = max(len(m.group(k).partition(".")[2]) for k in ("mean", "lo", "hi"))
    return {**vals, "half_unit": 0.5 * 10.0 ** -decimals, "line": int(cell["line"]),
            "csv_line": csv_line}


def window_cells(table_csv, source: str, column: str) -> pd.DataFrame:
    """Every ``mean [min, max]`` cell of ``column`` in the window tables of ``source``.

    Cells printed ``nan [nan, nan]`` (a metric the study's side did not log) are left out.

    Returns a DataFrame with ``metric, rows, mean, lo, hi, half_unit, line, csv_line``
    (``half_unit``: half a unit of the last printed digit; ``line``: the cell's line in the
    report), sorted by metric and rows.

    Raises:
      AnalysisError: the report has no window tables with that column, or a cell is
        malformed (names the CSV and its line).
    """
    name = display_path(table_csv)
    df = read_table(table_csv)
    sec = df[(df["source"] == source) & df["section"].str.startswith(WINDOW_SECTION[:20])
             & (df["column"] == column)]
    if sec.empty:
        raise AnalysisError(f"{name}: {source} has no window tables with column {column!r}")
    recs = []
    for _, cell in sec.iterrows():
        if cell["value"].strip() == "nan [nan, nan]":
            continue
        rows = (cell["section"][len(WINDOW_SECTION[:20]):].split() or [""])[0]
        if not rows.isdigit():
            raise AnalysisError(f"{name}:{cell['csv_line']}: section {cell['section']!r} "
                                "names no row count")
        recs.append({"metric": cell["row"], "rows": int(rows), **_range_cell(name, cell)})
    return pd.DataFrame(recs).sort_values(["metric", "rows"], ignore_index=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dreamer_parity.analysis.published_tables",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", required=True, help="the published study's directory")
    ap.add_argument("--out", default=f"data/published/{TABLE_FILE}", help="the CSV to write")
    a = ap.parse_args(argv)
    try:
        n = write_table(a.source, a.out)
    except AnalysisError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{a.out}: {n} cells from {', '.join(REPORTS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A side's training metrics against the training-metric windows the study published.

The study's round-1 and round-2 reports give, for windows of 2,000 rows ending at 2,000 ...
20,000 rows, every training metric's ``mean [min, max]`` over the seeds of its reference
runs and of its own candidate (``data/published/tables.csv``; the reports are
:data:`dreamer_parity.analysis.gate.PUBLISHED_REPORTS`).  This module puts a side's runs
on the same windows and says, per metric and window, whether its seeds fall inside the
published seed range.  It is a diagnosis (PROTOCOL.md 5.4 compares windows the same way),
never part of a decision or a gate: the published runs followed their round's protocol,
which may differ from the round being analysed in ways that move some metrics.

Window means: a run's record at row ``r`` holds the mean of each metric over the updates
since its previous record (records.py ``train``).  A window ``(a, b]`` of the published
width is the mean of the records with ``a < r <= b``, weighted by the number of updates
each record covers; records with a null value are left out with their weight.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dreamer_parity.analysis import published_tables
from dreamer_parity.analysis.load import AnalysisError, Run
from dreamer_parity.provenance import REPO_ROOT

__all__ = ["COLUMNS", "TABLE_CSV", "METRIC_NOTES", "window_means", "against_published", "for_sides",
           "summarise", "summary_keys", "report_lines"]

#: The committed published tables (data/published/README.md).
TABLE_CSV = REPO_ROOT / "data" / "published" / published_tables.TABLE_FILE

#: The published tables' column of the study's reference runs.
COLUMNS = {"reference": "ref mean [min, max]"}

#: Metrics whose window means are not learning signals, with what they measure; the
#: report prints the note under a table that holds the metric.
METRIC_NOTES = {
    "opt_grad_steps": "the optimizer's update counter, so its window mean is the window's "
                      "position in the run, not something learned. The reference reports "
                      "its metrics one train call late (D1), so its window holds the "
                      "previous window's last update instead of its own last one and its "
                      "mean sits 0.5-1 below a side that reports on time; apart here by "
                      "construction.",
}


def window_means(runs: list[Run], ends: list[int], width: int | None = None) -> dict[str, np.ndarray]:
    """Each run's training-metric means over the windows ``(end - width, end]``.

    Args:
      runs: runs with training metrics (``Run.train``) and ``Run.evals`` (rows, updates).
      ends: increasing window ends (rows).
      width: the window width in rows; None: the (equal) spacing of ``ends``.

    Returns:
      metric -> float64 ``[len(runs), len(ends)]``, NaN where a run has no finite value
      in a window (or no such metric).  Metrics are the union over the runs.

    Raises:
      AnalysisError: ``ends`` is not increasing, or ``width`` is None and ``ends`` has fewer
        than two entries or unequal steps, or a run has no training metrics.
    """
    ends = [int(e) for e in ends]
    steps = np.diff(ends)
    if (steps <= 0).any():
        raise AnalysisError(f"window ends must increase, got {ends}")
    if width is None:
        if len(ends) < 2 or len(set(steps.tolist())) != 1:
            raise AnalysisError(f"window ends must be >= 2 equally spaced increasing rows, "
                                f"got {ends}")
        width = int(steps[0])
    names = sorted({c for r in runs if r.train is not None for c in r.train.columns})
    out = {m: np.full((len(runs), len(ends)), np.nan) for m in names}
    for i, run in enumerate(runs):
        if run.train is None:
            raise AnalysisError(f"{run.label}: no training metrics "
                                f"({run.unavailable.get('train', 'not in this layout')})")
        ev = run.evals.set_index("rows")["updates"]
        rows = np.asarray(sorted(run.train.index), dtype=np.int64)
        upd = ev.reindex(rows).to_numpy(dtype=np.float64)
        prev = np.concatenate([[0.0], upd[:-1]])
        weight = upd - prev                     # updates each record's window covers
        for k, end in enumerate(ends):
            sel = (rows > end - width) & (rows <= end)
            for m in names:
                if m not in run.train.columns:
                    continue
                v = run.train.loc[rows[sel], m].to_numpy(dtype=np.float64)
                w = weight[sel]
                ok = np.isfinite(v) & np.isfinite(w) & (w > 0)
                if ok.any():
                    out[m][i, k] = float(np.sum(v[ok] * w[ok]) / np.sum(w[ok]))
    return out


def against_published(runs: list[Run], table_csv, source: str, column: str,
                      max_rows: int | None = None) -> pd.DataFrame | None:
    """A side's window means against one published column, per metric and window.

    Args:
      runs: the side's runs (with training metrics).
      table_csv: ``data/published/tables.csv``.
      source: the report, e.g. ``round1/compare.md``.
      column: :data:`COLUMNS` value.
      max_rows: windows ending after this row are left out (the round's last row).

    Returns:
      None when no published window fits the runs (the round ends before the first
      window, or its records do not fall on both ends of any window), else a DataFrame
      with ``metric, rows, window_rows`` (the published width), ``mean, lo, hi, n`` (this
      side: mean and [min, max] over its seeds with a finite value, n of them),
      ``published_mean, published_lo, published_hi, line``, ``inside`` (every seed of this
      side inside the published [min, max] widened by half a unit of its last printed
      digit; None when n is 0), ``overlap`` (the two ranges, so widened, share a point).
      Only metrics that both report.
    """
    pub = published_tables.window_cells(table_csv, source, column)
    pub_ends = sorted(int(r) for r in pub["rows"].unique())
    width = int(np.diff(pub_ends).min()) if len(pub_ends) > 1 else pub_ends[0]
    # every run needs a record at both ends of a window (the start 0 needs none)
    ends = [e for e in pub_ends if (max_rows is None or e <= int(max_rows)) and
            all(e in r.train.index and (e - width == 0 or e - width in r.train.index)
                for r in runs)]
    if not ends:
        return None
    means = window_means(runs, ends, width)
    recs = []
    for _, cell in pub[pub["rows"].isin(ends)].iterrows():
        if cell["metric"] not in means:
            continue
        v = means[cell["metric"]][:, ends.index(int(cell["rows"]))]
        v = v[np.isfinite(v)]
        rec = {"metric": cell["metric"], "rows": int(cell["rows"]), "window_rows": width,
               "mean": float(v.mean()) if len(v) else None,
               "lo": float(v.min()) if len(v) else None,
               "hi": float(v.max()) if len(v) else None, "n": int(len(v)),
               "published_mean": cell["mean"], "published_lo": cell["lo"],
               "published_hi": cell["hi"], "line": int(cell["line"])}
        lo, hi = cell["lo"] - cell["half_unit"], cell["hi"] + cell["half_unit"]
        if len(v):
            rec["inside"] = bool(v.min() >= lo and v.max() <= hi)
            rec["overlap"] = bool(max(v.min(), lo) <= min(v.max(), hi))
        else:
            rec["inside"] = rec["overlap"] = None
        recs.append(rec)
    return pd.DataFrame(recs) if recs else None


def for_sides(sides: dict, max_rows: int, table_csv=TABLE_CSV) -> dict:
    """Every side with training metrics against the study's published reference windows.

    Args:
      sides: ``{"reference" | "candidate": {"runs": [Run, ...], ...}}`` (``analyse``'s).
      max_rows: the round's last row.
      table_csv: the published tables (default :data:`TABLE_CSV`).

    Returns:
      ``{"tables": {(side, report, "reference"): DataFrame | None}, "reason": str | None}``
      over the reports of :data:`dreamer_parity.analysis.gate.PUBLISHED_REPORTS`; sides
      without training metrics (published runs) are left out; ``reason`` says why
      nothing was compared when ``tables`` holds no table.
    """
    from dreamer_parity.analysis.gate import PUBLISHED_REPORTS

    if not Path(table_csv).is_file():
        return {"tables": {}, "reason": f"{published_tables.display_path(table_csv)} not found"}
    tables = {}
    for side, sd in sides.items():
        if any(r.train is None for r in sd["runs"]):
            continue
        for report in PUBLISHED_REPORTS.values():
            tables[(side, report, "reference")] = against_published(
                sd["runs"], table_csv, report, COLUMNS["reference"], max_rows)
    if not any(t is not None for t in tables.values()):
        reason = ("no side has training metrics" if not tables else
                  "no published 2,000-row window fits the round: it ends before the first "
                  "one, or its evaluation rows do not fall on both ends of a window")
        return {"tables": tables, "reason": reason}
    return {"tables": tables, "reason": None}


def summary_keys(pw: dict) -> dict:
    """Flat metrics: per (side, report) the windows compared, inside and apart."""
    out = {}
    for (side, report, _), t in pw["tables"].items():
        if t is None:
            continue
        name = report.split("/compare.md")[0].replace("/", "_")
        t = t[t["inside"].notna()]
        key = f"published_windows.{side}.{name}"
        out[f"{key}.cells"] = int(len(t))
        out[f"{key}.inside"] = int(t["inside"].astype(bool).sum())
        out[f"{key}.apart"] = int((~t["overlap"].astype(bool)).sum())
    return out


def summarise(table: pd.DataFrame) -> pd.DataFrame:
    """Per metric: windows compared, windows with every seed inside, windows whose ranges
    overlap, the rows of the windows without overlap, and the first of those as text
    (``"<rows>: mean [lo, hi] against published mean [lo, hi]"``, None when none)."""
    out = []
    for m, g in table.groupby("metric", sort=True):
        g = g[g["inside"].notna()]
        apart = g[~g["overlap"].astype(bool)]
        first = None
        if len(apart):
            a = apart.sort_values("rows").iloc[0]
            first = (f"{int(a['rows'])}: {a['mean']:.4g} [{a['lo']:.4g}, {a['hi']:.4g}] against "
                     f"{a['published_mean']:.4g} [{a['published_lo']:.4g}, "
                     f"{a['published_hi']:.4g}]")
        out.append({"metric": m, "windows": int(len(g)),
                    "inside": int(g["inside"].astype(bool).sum()),
                    "overlap": int(g["overlap"].astype(bool).sum()),
                    "apart_rows": [int(r) for r in apart["rows"]], "first_apart": first})
    return pd.DataFrame(out)


def report_lines(tables: dict, where: str = "data/published/tables.csv") -> list[str]:
    """Report lines for ``{(side, source, "reference"): table}`` (None tables skipped)."""
    L = []
    for (side, source, _), t in tables.items():
        if t is None:
            continue
        s = summarise(t)
        L += ["", f"### {side} against the study's reference runs in `{source}` ({where})", "",
              f"Windows of {int(t['window_rows'].iloc[0])} rows ending at "
              f"{sorted(int(r) for r in t['rows'].unique())}. 'inside': every {side} seed "
              "within the published [min, max] (widened by half a unit of its last printed "
              "digit); 'apart': the two seed ranges do not meet.", "",
              "| metric | windows | inside | ranges meet | apart at rows | first apart: "
              f"{side} mean [min, max] against published |", "|---|---|---|---|---|---|"]
        for _, r in s.iterrows():
            L.append(f"| `{r['metric']}` | {r['windows']} | {r['inside']} | {r['overlap']} | "
                     f"{', '.join(map(str, r['apart_rows'])) or '-'} | "
                     f"{r['first_apart'] or '-'} |")
        L += [f"* `{m}`: {note}" for m, note in METRIC_NOTES.items() if m in set(s["metric"])]
    return L

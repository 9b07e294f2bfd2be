"""Evaluation curves of two (or more) revisions on one axis, rendered offline.

``dvc plots diff`` writes HTML that loads Vega from a CDN, which stays blank without
internet.  This command takes the data the same way DVC does and renders a PNG (or SVG)
with ``vl-convert-python``, which embeds Vega and needs no network::

    python -m dreamer_parity.analysis.plots_diff <rev-a> <rev-b> --out metrics/plots/diff.png

Steps: ``dvc plots diff --json --split --targets metrics/plots/eval_curve.csv <revs>``
(run in the repository) gives the plot's rows at every revision, each tagged with its
``rev``; a Vega-Lite spec then draws, per revision and side, the mean over seeds (thick
line) and every seed (thin line); ``vl_convert.vegalite_to_png`` renders it.  DVC's own
default template is not used as is: it draws one smoothed line per revision, which mixes
the sides and seeds of ``eval_curve.csv``.  ``--spec-out FILE`` also writes the spec with
its data (a self-contained Vega-Lite JSON).  With one revision DVC compares it with the
workspace.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["dvc_plot_rows", "spec", "render", "main", "TARGET"]

TARGET = "metrics/plots/eval_curve.csv"


class PlotsDiffError(RuntimeError):
    """dvc failed, or the target has no rows at the revisions."""


def dvc_plot_rows(revs: list[str], target: str = TARGET, repo=".", x: str = "rows",
                  y: str = "eval_mean") -> list[dict]:
    """Rows of ``target`` at each revision, from ``dvc plots diff --json --split``.

    Returns dicts with the CSV's columns (``x`` and ``y`` as floats) and ``rev``.

    Raises:
      PlotsDiffError: dvc exits non-zero, or no row of ``target`` is found.
    """
    cmd = [sys.executable, "-m", "dvc", "plots", "diff", "--json", "--split",
           "--targets", target, "-x", x, "-y", y, *revs]
    proc = subprocess.run(cmd, cwd=repo, capture_output=True, text=True)
    if proc.returncode != 0:
        raise PlotsDiffError(f"dvc plots diff failed: {proc.stderr.strip() or proc.stdout.strip()}")
    data = json.loads(proc.stdout or "{}").get("data", {})
    rows = []
    for name, entries in data.items():
        if name != target and not name.endswith(f"::{target}"):
            continue
        for e in entries:
            for r in e.get("anchor_definitions", {}).get("<DVC_METRIC_DATA>", []):
                if r.get(x) in (None, "") or r.get(y) in (None, ""):
                    continue
                rows.append({**r, x: float(r[x]), y: float(r[y])})
    if not rows:
        raise PlotsDiffError(f"{target}: no data at revisions {revs} "
                             f"(dvc: {proc.stderr.strip() or 'no plot found'})")
    return rows


def spec(rows: list[dict], title: str, x: str = "rows", y: str = "eval_mean") -> dict:
    """Vega-Lite spec: per revision (colour) and side (dash) the mean over seeds, thick,
    and each seed, thin."""
    has_side = all("side" in r for r in rows)
    has_seed = all("seed" in r for r in rows)
    enc = {"x": {"field": x, "type": "quantitative", "title": "rows (environment transitions)"},
           "color": {"field": "rev", "type": "nominal", "title": "revision"}}
    if has_side:
        enc["strokeDash"] = {"field": "side", "type": "nominal"}
    layers = [{"mark": {"type": "line", "strokeWidth": 2.5, "point": True},
               "encoding": {**enc, "y": {"aggregate": "mean", "field": y, "type": "quantitative",
                                         "title": f"{y} (mean over seeds; thin: seeds)"}}}]
    if has_seed:
        layers.insert(0, {"mark": {"type": "line", "strokeWidth": 0.8, "opacity": 0.3},
                          "encoding": {**enc, "y": {"field": y, "type": "quantitative"},
                                       "detail": {"field": "seed", "type": "nominal"}}})
    return {"$schema": "https://vega.github.io/schema/vega-lite/v5.json", "title": title,
            "width": 640, "height": 360, "data": {"values": rows}, "layer": layers,
            "config": {"background": "white"}}


def render(revs: list[str], out, target: str = TARGET, repo=".", spec_out=None) -> list[dict]:
    """Render ``target`` at ``revs`` into ``out`` (``.png`` or ``.svg``); returns the rows."""
    import vl_convert as vlc
    rows = dvc_plot_rows(revs, target, repo)
    s = spec(rows, f"{target}: {' vs '.join(revs)}")
    text = json.dumps(s)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    if out.suffix.lower() == ".svg":
        tmp.write_text(vlc.vegalite_to_svg(text))
    else:
        tmp.write_bytes(vlc.vegalite_to_png(text, scale=2))
    os.replace(tmp, out)
    if spec_out is not None:
        Path(spec_out).write_text(json.dumps(s, indent=1) + "\n")
    return rows


def main(argv=None) -> int:
    """CLI; 0 on success, 2 when dvc fails or there is no data."""
    ap = argparse.ArgumentParser(prog="python -m dreamer_parity.analysis.plots_diff",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("revs", nargs="+", help="git revisions (one: compared with the workspace)")
    ap.add_argument("--out", default="metrics/plots/diff.png", help=".png or .svg")
    ap.add_argument("--target", default=TARGET, help="plot CSV with rows, eval_mean, side, seed")
    ap.add_argument("--repo", default=".", help="repository root")
    ap.add_argument("--spec-out", default=None, help="also write the Vega-Lite spec with its data")
    args = ap.parse_args(argv)
    try:
        rows = render(args.revs, args.out, args.target, args.repo, args.spec_out)
    except PlotsDiffError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    revs = sorted({r["rev"] for r in rows})
    print(f"{args.out}: {len(rows)} points from {', '.join(revs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

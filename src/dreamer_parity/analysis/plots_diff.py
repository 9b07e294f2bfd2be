"""Two (or more) rounds' curves on shared axes, rendered offline.

``dvc plots diff`` writes HTML that loads Vega from a CDN, which stays blank without
internet.  This command reads the plot CSVs that ``compare`` writes (git-tracked) at each
round and renders one PNG (or SVG) with ``vl-convert-python``, which embeds Vega::

    python -m dreamer_parity.analysis.plots_diff round3-candidate HEAD --out diff.png
    python -m dreamer_parity.analysis.plots_diff round3-candidate path/to/other/checkout

Each argument is, in this order of precedence: an existing directory (a checkout, or a
``metrics/plots`` directory; read from disk), a kept round's name
(``docs/rounds/index.yaml``, :mod:`dreamer_parity.rounds`), a git revision, or a DVC
experiment's name (its ``refs/exps/.../<name>`` ref).  One argument is compared with the
workspace.  Read per argument: ``metrics/plots/eval_curve.csv`` (evaluation return and
S2 per side and seed), each side's window CSVs ``metrics/plots/windows/<side>_<metric>.csv``
(:mod:`windows`), or for rounds committed before those existed the actor entropy of
``metrics/plots/entropy_windows.csv``.

The figure stacks: evaluation return (per argument, colour, and side, dash: the mean over
seeds thick, each seed thin), S2 where any argument has it, and one panel per window
metric with each argument's side mean and seed [min, max] band.  A line whose data are
the same at several arguments (e.g. the published reference two rounds share) is drawn
once and labelled ``A = B``, so that no round's line hides another's.  ``--spec-out FILE`` also
writes the Vega-Lite spec with its data.

Every CSV is read through the guarded reader (:func:`dreamer_parity.records.read_text`
from disk; from git, its size asked first and the same cap applied), a row repeating
another's key (``rows, side, seed`` of the evaluation curve) is refused naming both lines,
and the arguments are checked before anything is read (:func:`check_args`).  Errors: one
line ``error: ...`` on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

from dreamer_parity import records

__all__ = ["PlotsDiffError", "resolve", "read_source", "merge_identical", "spec", "render",
           "main", "TARGET", "WINDOWS_DIR", "ENTROPY_CSV", "check_args", "MAX_REVS"]

TARGET = "metrics/plots/eval_curve.csv"
WINDOWS_DIR = "metrics/plots/windows"
ENTROPY_CSV = "metrics/plots/entropy_windows.csv"
WORKSPACE = "workspace"


class PlotsDiffError(RuntimeError):
    """An argument resolves to nothing, or its evaluation CSV is missing or malformed."""


def _git(repo, *args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)


def _git_text(repo, rev: str, rel: str) -> str | None:
    """``rev:rel`` as UTF-8 text, or None when absent; the guarded reader's checks on a
    committed file: at most ``records.MAX_BYTES`` of its kind (asked of git before a byte
    is read), UTF-8 (a byte that is not is named with its line)."""
    from dreamer_parity import records

    where = f"{rev[:12]}:{rel}"
    size = _git(repo, "cat-file", "-s", f"{rev}:{rel}")
    if size.returncode != 0:
        return None
    cap = records.MAX_BYTES[records.file_kind(rel)]
    if int(size.stdout.strip() or 0) > cap:
        raise PlotsDiffError(f"{where}: larger than {cap} bytes ({size.stdout.strip()} bytes; "
                             f"the cap of a {records.file_kind(rel)} file)")
    r = subprocess.run(["git", "show", f"{rev}:{rel}"], cwd=repo, capture_output=True)
    if r.returncode != 0:
        return None
    try:
        return r.stdout.decode("utf-8")
    except UnicodeDecodeError as e:
        line = r.stdout[:e.start].count(b"\n") + 1
        raise PlotsDiffError(f"{where}:{line}: not UTF-8 text (byte {e.start})") from None


def resolve(arg: str, repo=".") -> tuple[str, str]:
    """``(kind, where)`` of one argument: ``("dir", path)`` or ``("commit", 40 hex)``.

    Raises:
      PlotsDiffError: neither a directory, a kept round, a git revision nor a DVC experiment.
    """
    if arg == WORKSPACE:
        return "dir", str(repo)
    if Path(arg).is_dir():
        return "dir", arg
    from dreamer_parity import rounds
    try:
        idx = rounds.load_index(repo)
    except rounds.RoundsError:
        idx = {}
    if arg in idx:
        return "commit", idx[arg]["commit"]
    r = _git(repo, "rev-parse", "-q", "--verify", f"{arg}^{{commit}}")
    if r.returncode == 0:
        return "commit", r.stdout.strip()
    refs = [line.split() for line in _git(repo, "for-each-ref", "--format=%(objectname) %(refname)",
                                          "refs/exps").stdout.splitlines()]
    hits = [sha for sha, ref in refs if ref.rsplit("/", 1)[-1] == arg]
    if len(hits) == 1:
        return "commit", hits[0]
    raise PlotsDiffError(f"{arg[:120]}: not a directory, a kept round (docs/rounds/index.yaml), "
                         f"a git revision or a DVC experiment"
                         + (f" ({len(hits)} experiments have that name)" if hits else ""))


def _reader(kind: str, where: str, repo):
    """A function ``rel -> text | None`` and one ``ls(rel_dir) -> [names]`` for a source."""
    if kind == "dir":
        d = Path(where)
        plots = d / "metrics" / "plots"
        if not (plots / Path(TARGET).name).is_file() and (d / Path(TARGET).name).is_file():
            plots = d                       # the argument is a metrics/plots directory

        def path(rel):
            return plots / Path(rel).relative_to("metrics/plots")

        def read(rel):
            from dreamer_parity import records

            try:
                return records.read_text(path(rel), str(path(rel)))
            except FileNotFoundError:
                return None
            except records.RecordError as e:
                raise PlotsDiffError(str(e)) from None

        def ls(rel):
            p = path(rel)
            return sorted(x.name for x in p.iterdir() if x.is_file()) if p.is_dir() else []
        return read, ls

    def read(rel):
        return _git_text(repo, where, rel)

    def ls(rel):
        r = _git(repo, "ls-tree", "--name-only", f"{where}:{rel}")
        return sorted(r.stdout.split()) if r.returncode == 0 else []
    return read, ls


def _rows(text: str, label: str, name: str, key: tuple[str, ...] = ()) -> list[dict]:
    """The CSV's rows as dicts; with ``key``, a second row with the same values of those
    columns is refused, naming both lines (a table names each cell once)."""
    try:
        rows = list(csv.DictReader(io.StringIO(text)))
    except csv.Error as e:
        raise PlotsDiffError(f"{label}: {name}: not a CSV ({str(e)[:120]})") from None
    if key:
        seen = {}
        for i, r in enumerate(rows, 2):
            k = tuple(r.get(c) for c in key)
            if k in seen:
                raise PlotsDiffError(f"{label}: {name}:{i}: ({', '.join(key)}) = "
                                     f"{', '.join(str(x)[:20] for x in k)} given twice "
                                     f"(lines {seen[k]} and {i})")
            seen[k] = i
    return rows


def _float(x):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if v == v else None


def read_source(arg: str, repo=".", target: str = TARGET) -> dict:
    """The curves of one argument.

    Returns:
      ``{"label": arg, "eval": [{"rows", "side", "seed", "eval_mean", "s2"}],
      "windows": [{"metric", "side", "rows", "mean", "lo", "hi"}]}``; numbers are floats
      (``s2`` None where empty), ``seed`` and ``side`` strings as in the CSV.

    Raises:
      PlotsDiffError: the argument resolves to nothing, or ``target`` is absent or lacks
      the columns ``rows, side, seed, eval_mean``.
    """
    from dreamer_parity.analysis.windows import SIDES, WINDOW_METRICS, slug
    kind, where = resolve(arg, repo)
    read, ls = _reader(kind, where, repo)
    text = read(target)
    if text is None:
        raise PlotsDiffError(f"{arg}: no {target} there")
    ev = []
    for r in _rows(text, arg, target, ("rows", "side", "seed")):
        if not {"rows", "side", "seed", "eval_mean"} <= set(r):
            raise PlotsDiffError(f"{arg}: {target}: needs the columns rows, side, seed, eval_mean")
        x, y = _float(r["rows"]), _float(r["eval_mean"])
        if x is None or y is None:
            continue
        ev.append({"rev": arg, "rows": x, "side": r["side"], "seed": r["seed"], "eval_mean": y,
                   "s2": _float(r.get("s2"))})
    if not ev:
        raise PlotsDiffError(f"{arg}: {target}: no rows")
    win = []
    files = set(ls(WINDOWS_DIR))
    by_file = {f"{side}_{slug(m)}.csv": (side, m) for side in SIDES for m in WINDOW_METRICS}
    if files:
        for name in sorted(files & set(by_file)):
            side, m = by_file[name]
            for r in _rows(read(f"{WINDOWS_DIR}/{name}") or "", arg, name, ("rows",)):
                win.append(_window_row(arg, m, side, r))
    else:   # a round committed before the per-side windows: its entropy table
        text = read(ENTROPY_CSV)
        for r in _rows(text or "", arg, ENTROPY_CSV, ("rows", "side")):
            win.append(_window_row(arg, WINDOW_METRICS[0], r.get("side"), r))
    win = [w for w in win if w["rows"] is not None and w["mean"] is not None]
    return {"label": arg, "eval": ev, "windows": win}


def _window_row(label, metric, side, r) -> dict:
    return {"rev": label, "metric": metric, "side": side, "rows": _float(r.get("rows")),
            "mean": _float(r.get("mean")), "lo": _float(r.get("lo")), "hi": _float(r.get("hi"))}


_X = {"field": "rows", "type": "quantitative", "title": "rows (environment transitions)"}


def _curves(rows: list[dict], y: str, title: str) -> dict:
    enc = {"x": _X, "color": {"field": "rev", "type": "nominal", "title": "round"},
           "strokeDash": {"field": "side", "type": "nominal"}}
    return {"title": title, "width": 640, "height": 260, "data": {"values": rows}, "layer": [
        {"mark": {"type": "line", "strokeWidth": 0.8, "opacity": 0.3},
         "encoding": {**enc, "y": {"field": y, "type": "quantitative"},
                      "detail": {"field": "seed", "type": "nominal"}}},
        {"mark": {"type": "line", "strokeWidth": 2.5, "point": True},
         "encoding": {**enc, "y": {"aggregate": "mean", "field": y, "type": "quantitative",
                                   "title": f"{y} (mean over seeds; thin: seeds)"}}}]}


def _window_chart(rows: list[dict], metric: str) -> dict:
    log = metric.endswith("/std") and all(r["lo"] is not None and r["lo"] > 0 for r in rows)
    scale = {"type": "log"} if log else {"zero": False}
    enc = {"x": {**_X, "title": "rows at the window's end"},
           "color": {"field": "rev", "type": "nominal", "title": "round"}}
    return {"title": f"{metric}: mean over seeds, band: seed [min, max]", "width": 640,
            "height": 200, "data": {"values": rows}, "layer": [
                {"mark": {"type": "area", "opacity": 0.15},
                 "encoding": {**enc, "detail": {"field": "side", "type": "nominal"},
                              "y": {"field": "lo", "type": "quantitative", "scale": scale,
                                    "title": metric},
                              "y2": {"field": "hi"}}},
                {"mark": {"type": "line", "strokeWidth": 1.8},
                 "encoding": {**enc, "strokeDash": {"field": "side", "type": "nominal"},
                              "y": {"field": "mean", "type": "quantitative", "scale": scale}}}]}


def merge_identical(rows: list[dict], group: tuple[str, ...]) -> list[dict]:
    """Series identical at several arguments, kept once under a joint label.

    A series is the rows of one ``rev`` and one value of the ``group`` fields (e.g. a
    side); where two or more arguments hold the same series (the same rows, every field
    but ``rev`` equal; e.g. two rounds that share the published reference), the first
    one's rows are kept with ``rev`` set to ``"A = B"`` and the copies dropped, so that
    no line is drawn over another of the same data and the legend names both.  Order of
    the rows is kept otherwise.  Pure; ``rows`` as :func:`read_source` gives them.
    """
    series: dict[tuple, list[dict]] = {}
    for r in rows:
        series.setdefault((r["rev"], *(r.get(g) for g in group)), []).append(r)

    def content(rs):
        return tuple(sorted(tuple(sorted((k, str(v)) for k, v in r.items() if k != "rev"))
                            for r in rs))
    first: dict[tuple, tuple] = {}      # (group values, content) -> key of the first series
    label: dict[tuple, list[str]] = {}
    for key, rs in series.items():
        k = (key[1:], content(rs))
        first.setdefault(k, key)
        label.setdefault(first[k], []).append(key[0])
    out = []
    for key, rs in series.items():
        if key in label:
            joint = " = ".join(label[key])
            out += [{**r, "rev": joint} for r in rs] if len(label[key]) > 1 else rs
    return out


def spec(sources: list[dict], title: str, caption: str = "") -> dict:
    """Vega-Lite spec: evaluation return, S2 where present, then each window metric.
    Lines identical at several arguments are drawn once, labelled ``A = B``
    (:func:`merge_identical`)."""
    ev = merge_identical([r for s in sources for r in s["eval"]], ("side",))
    charts = [_curves(ev, "eval_mean", "evaluation return")]
    s2 = [{**r, "s2": r["s2"]} for r in ev if r["s2"] is not None]
    if s2:
        charts.append(_curves(s2, "s2", "S2 (training-episode rolling mean; sides that have it)"))
    win = merge_identical([r for s in sources for r in s["windows"]], ("metric", "side"))
    from dreamer_parity.analysis.windows import WINDOW_METRICS
    for m in WINDOW_METRICS:
        rows = [r for r in win if r["metric"] == m]
        if rows:
            charts.append(_window_chart(rows, m))
    missing = [s["label"] for s in sources if not s["windows"]]
    sub = [caption] if caption else []
    if missing:
        sub.insert(0, f"no training-metric windows at {', '.join(missing)}")
    return {"$schema": "https://vega.github.io/schema/vega-lite/v5.json",
            "title": {"text": title, "subtitle": sub}, "vconcat": charts,
            "resolve": {"scale": {"color": "shared"}},
            "config": {"background": "white", "legend": {"labelLimit": 480}}}


def render(revs: list[str], out, target: str = TARGET, repo=".", spec_out=None) -> list[dict]:
    """Render the rounds ``revs`` into ``out`` (``.png`` or ``.svg``); one argument is
    compared with the workspace.  Returns the evaluation rows (each with ``rev``).

    Raises:
      PlotsDiffError: see :func:`read_source`.
    """
    import vl_convert as vlc

    from dreamer_parity.analysis.plots import caption
    revs = list(revs) + ([WORKSPACE] if len(revs) == 1 else [])
    sources = [read_source(r, repo, target) for r in revs]
    s = spec(sources, f"{' vs '.join(revs)}",
             caption(f"python -m dreamer_parity.analysis.plots_diff {' '.join(revs)}"))
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
        tmp = Path(spec_out).with_name(f"{Path(spec_out).name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(s, indent=1) + "\n")
        os.replace(tmp, spec_out)
    return [r for src in sources for r in src["eval"]]


#: Most arguments one figure compares.
MAX_REVS = 8


def check_args(args) -> None:
    """The command's arguments, before anything is read or computed: at most
    :data:`MAX_REVS` revisions of at most 200 characters, ``--repo`` a directory,
    ``--target`` a relative ``metrics/plots/...csv`` path without ``..``, ``--out`` a
    ``.png`` or ``.svg`` file path and ``--spec-out`` a file path, neither an existing
    directory (:func:`dreamer_parity.records.check_target`).

    Raises:
      PlotsDiffError: one line naming the argument.
    """
    from dreamer_parity import records

    if len(args.revs) > MAX_REVS:
        raise PlotsDiffError(f"{len(args.revs)} revisions, more than {MAX_REVS}")
    bad = [r for r in args.revs if not r or len(r) > 200 or any(ord(c) < 32 for c in r)]
    if bad:
        raise PlotsDiffError(f"revision {bad[0][:80]!r}: empty, over 200 characters or a "
                             f"control character")
    t = args.target
    if (not t.startswith("metrics/plots/") or not t.endswith(".csv") or ".." in t.split("/")
            or "\\" in t or any(ord(c) < 32 for c in t) or len(t) > 200):
        raise PlotsDiffError(f"--target {t[:80]!r}: a plot CSV of the round, "
                             f"metrics/plots/<name>.csv (relative, no '..')")
    try:
        records.check_source(args.repo, "--repo", "dir")
        records.check_target(args.out, "--out", "file", inside=False,
                             suffixes=(".png", ".svg"))
        if args.spec_out is not None:
            records.check_target(args.spec_out, "--spec-out", "file", inside=False)
    except records.RecordError as e:
        raise PlotsDiffError(str(e)) from None


def main(argv=None) -> int:
    """CLI; 0 on success, 2 when an argument resolves to nothing or has no data."""
    ap = records.ArgumentParser(prog="python -m dreamer_parity.analysis.plots_diff",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("revs", nargs="+", help="round names, directories, git revisions or "
                                            "experiments (one: compared with the workspace)")
    ap.add_argument("--out", default="metrics/plots/diff.png", help=".png or .svg")
    ap.add_argument("--target", default=TARGET, help="plot CSV with rows, eval_mean, side, seed")
    ap.add_argument("--repo", default=".", help="repository root")
    ap.add_argument("--spec-out", default=None, help="also write the Vega-Lite spec with its data")
    args = ap.parse_args(argv)
    try:
        check_args(args)
        rows = render(args.revs, args.out, args.target, args.repo, args.spec_out)
    except PlotsDiffError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    revs = sorted({r["rev"] for r in rows})
    print(f"{args.out}: {len(rows)} evaluation points from {', '.join(revs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

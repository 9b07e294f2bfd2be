"""Where each side's runs come from: the one resolver of ``candidate.source`` and
``reference.source`` (docs/SIDES.md is the contract a runner must meet).

A side's source in params.yaml is one of

``run``
    This repository runs the side: seed ``S`` is ``results/<side>/s<S>`` (the stage
    ``candidate`` or ``reference@S`` writes it).
``<dir>``
    A directory of finished runs inside the repository (``data/...``), in the records
    schema (``<dir>/s<S>/{records.jsonl, episodes.jsonl, run.json, DONE.json}``, or
    ``<dir>/<side>/s<S>/``) or in the study's published layout (``<dir>/ref_s<S>/``,
    ``<dir>/ajax/s<S>/``, or ``<dir>/s<S>/evals.jsonl`` for an ``ajax`` directory).
``[{from: run | <dir>, seeds: [..]}, ...]``
    The side's seeds taken from several places; each seed of the side exactly once.

Kept runs made with the round's parameters: a directory of records runs holds runs made
with some parameters (each run's ``run.json``).  When the runs a directory source names
were made with other parameters than the round's (another ``decode``, rows, evaluation
points, sampler, or for the reference's own runs another ``reference.jax``, ``platform`` or
``precision``: :func:`disagreements`), :func:`resolve` takes instead the one directory of
:data:`KEPT_RUNS` whose runs of those seeds were made with the round's parameters, so that
``dvc exp run -S decode=ref`` reads the kept ``decode: ref`` runs.  When no directory
there matches, or several do, the named runs stay, and the round's check of its runs
(:func:`dreamer_parity.preflight.check_runs`) stops it in one line that ends with the two
ways on (:func:`kept_runs_hint`): run the side here (``-S <side>.source=run``) or name the
kept runs (``-S <side>.source=<dir>``).

A side's seeds and the origin of each (``run`` or a directory) are the round's
(:class:`dreamer_parity.round_spec.RoundSide`, decided once when params.yaml is read): the
round's ``seeds`` for the reference side, ``candidate.seeds`` (where it names the
candidate's own list) or ``seeds`` for the candidate; the two sides may differ in number.

:func:`resolve` turns these into one :class:`SeedSource` per seed of the side: the run directory,
its layout and ``made_by``, the implementation that produced it (``candidate`` or
``reference``: the run's own ``run.json`` ``side``, or the published layout's
directory: ``ref_s<S>`` reference, ``ajax`` candidate).  The checks of ``compare``
judge a run by ``made_by``, not by the side it stands on, so that (for example) the
candidate's own runs of another round can stand as the reference side.

Command line (the Makefile's set-up step)::

    python -m dreamer_parity.sides show [--params params.yaml]     # per-seed table, JSON
    python -m dreamer_parity.sides runs-here SIDE [--params ...]   # prints yes or no
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from dreamer_parity import manifest
from dreamer_parity import params as P
from dreamer_parity import records
from dreamer_parity.round_spec import Round

__all__ = ["SideError", "SeedSource", "Side", "resolve", "side_from_dir",
           "RESULTS", "locate", "write_stand_in", "stand_ins", "stand_in_line", "STAND_IN",
           "published_round_dir",
           "KEPT_RUNS", "disagreements", "matching_kept_runs", "kept_runs_hint", "kept_seeds"]

#: Where a side that this repository runs writes its seeds: ``results/<side>/s<S>``.
RESULTS = "results"
#: The marker a stage writes for a seed it does not run (no DONE.json: not a run).
STAND_IN = "STAND_IN.json"
#: The directory whose subdirectories are the kept runs (``python -m dreamer_parity.keep``),
#: searched by :func:`matching_kept_runs`; relative to the repository root.
KEPT_RUNS = "data/runs"
#: The reference's execution parameters a reference-made run on the reference side must
#: have been made with, and the value a run that records none was made with (runs from
#: before ``reference.jax``, ``platform`` and ``precision`` existed ran with these).
_REFERENCE_EXECUTION = {"jax": "0.4.26", "platform": "cpu", "precision": "default"}


class SideError(ValueError):
    """A side's source cannot be used; one line naming ``<side>.source`` or the file."""


@dataclass(frozen=True)
class SeedSource:
    """Where one seed of one side comes from.

    Attributes:
      seed: the run seed.
      source: ``"run"`` or the source directory as written in params.yaml (relative).
      run_dir: the seed's run directory (relative to the repository root for a params
        source; as given for :func:`side_from_dir`).
      layout: ``"records"`` or ``"published"``.
      made_by: ``"candidate"`` or ``"reference"``: the implementation that produced it.
    """

    seed: int
    source: str
    run_dir: str
    layout: str
    made_by: str


@dataclass(frozen=True)
class Side:
    """One side of a round: its name and one :class:`SeedSource` per seed of the side
    (ascending, the order of :attr:`dreamer_parity.round_spec.RoundSide.seeds`)."""

    name: str
    seeds: tuple

    def by_seed(self, seed: int) -> SeedSource:
        """The :class:`SeedSource` of ``seed`` (KeyError when the side has no such seed)."""
        for s in self.seeds:
            if s.seed == seed:
                return s
        raise KeyError(seed)

    @property
    def sources(self) -> list[str]:
        """The distinct sources, in seed order."""
        out = []
        for s in self.seeds:
            if s.source not in out:
                out.append(s.source)
        return out


def write_stand_in(directory, side: str, seed: int, source: str,
                   named: str | None = None) -> Path:
    """Write ``<directory>/STAND_IN.json`` for a seed whose runs come from ``source``.

    The stage of ``side`` runs nothing for that seed; the directory holds no
    ``DONE.json``, so no reader takes it for a run.  ``named`` is the source params.yaml
    names, recorded when it differs from ``source`` (:func:`resolve` took the kept runs made
    with the round's parameters instead).  Returns the marker's path.
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    path = d / STAND_IN
    info = {"side": side, "seed": int(seed), "source": source}
    if named is not None and named != source:
        info["named"] = named
    info["note"] = (f"{side}.source names runs made elsewhere: they stand in for this seed and "
                    f"nothing was run here (no DONE.json: this is not a run; docs/SIDES.md)")
    records.write_json(path, info)
    return path


def stand_ins(round_: Round, side: str, root: str | Path = ".") -> dict[int, SeedSource]:
    """The seeds of ``side`` that its stage does not run, each with the source
    :func:`resolve` reads it from (what :func:`write_stand_in` records).

    Returns:
      ``{seed: SeedSource}``, ascending; empty when every seed of the side runs here (then
      nothing is resolved or read).

    Raises:
      as :func:`resolve`, for that side only.
    """
    if not [s for s, o in round_.side(side).origins().items() if o != "run"]:
        return {}
    return {e.seed: e for e in resolve(round_, root, sides=(side,))[side].seeds
            if e.source != "run"}


def stand_in_line(side: str, entry: SeedSource, named: str) -> str:
    """The one line a stage prints for a stand-in seed: where it comes from, and the source
    params.yaml names where :func:`resolve` took other kept runs instead."""
    why = "" if named == entry.source else (
        f" in place of {named}, whose runs were made with other parameters than the round's")
    return f"{side}.source: seed {entry.seed} comes from {entry.source}{why}; nothing runs here"


def _is_records_run(p: Path) -> bool:
    if not p.is_dir():
        return False
    try:
        return records.jsonl_path(p, "records.jsonl") is not None or (p / records.DONE).exists()
    except records.RecordError:
        return True   # both forms present: a run, whose reader names the conflict


def _made_by_records(run_dir: Path, key: str) -> str:
    path = run_dir / "run.json"
    if not path.is_file():
        raise SideError(f"{key}: {path}: missing (run.json says which side made the run)")
    info = records.read_run_info(path)   # RecordError naming the file and field
    made = info.get("side")
    if made not in records.SIDES:
        raise SideError(f"{key}: {path}: field 'side' must be one of {records.SIDES}, "
                        f"got {made!r}")
    return made


def published_round_dir(run_dir: Path, made_by: str) -> Path:
    """The round directory of a published run (``<round>/ref_s<S>`` made by the
    reference, ``<round>/ajax/s<S>`` made by the study's candidate): the directory whose
    manifest covers it and whose ``launch_info.txt`` names its commit."""
    run_dir = Path(run_dir)
    return run_dir.parent if made_by == "reference" else run_dir.parent.parent


def locate(directory: Path, side: str, seed: int, key: str,
           shown: str | None = None, require_manifest: bool = False) -> tuple[Path, str, str]:
    """Find seed ``seed`` of ``side`` in a source directory, its manifest verified first.

    Looks, in this order, for a records run ``<dir>/s<S>`` or ``<dir>/<side>/s<S>`` (the
    latter made by ``side``, as its ``run.json`` must say),
    then the published layout: for the reference side
    ``ref_s<S>``, ``ajax/s<S>``, ``s<S>``; for the candidate ``ajax/s<S>``, ``s<S>``,
    ``ref_s<S>`` (each with ``evals.jsonl``).  Before any file of the run is read, its
    manifest is verified (:func:`dreamer_parity.manifest.verify`): a records run's own
    ``MANIFEST.json`` (required with ``require_manifest``, else verified when present), a
    published run's round directory's (always required: the study's files are committed
    with theirs).

    Returns:
      ``(run_dir, layout, made_by)``.

    Args:
      directory: the source directory; side, seed: what to find; key: the message's
        prefix (``params: candidate.source``); shown: the directory as messages name it
        (default: ``directory``); require_manifest: refuse a records run without a
        manifest (a directory source of params.yaml: :func:`resolve`).

    Raises:
      SideError: naming ``key`` when the directory holds no run of that seed, or a
        records run whose ``run.json`` is missing or does not say which side made it;
      records.RecordError: a manifest that is missing (where required) or does not
        verify, or a malformed ``run.json`` (naming the file and field).
    """
    d = Path(directory)
    n = d if shown is None else shown
    for p in (d / f"s{seed}", d / side / f"s{seed}"):
        if _is_records_run(p):
            manifest.verify(p, require_manifest, f"{n}/{p.relative_to(d).as_posix()}")
            made = _made_by_records(p, key)
            if p.parent.name == side and p.parent != d and made != side:
                raise SideError(f"{key}: {n}/{side}/s{seed}/run.json: side {made!r}, but the "
                                f"run stands under {side}/: a folder named after a side holds "
                                f"that side's runs (a run of the other implementation stands "
                                f"on a side as {n}/s{seed}, docs/SIDES.md)")
            return p, "records", made
    pub = {"reference": (d / f"ref_s{seed}", "reference"),
           "ajax": (d / "ajax" / f"s{seed}", "candidate"),
           "flat": (d / f"s{seed}", "candidate")}
    order = ("reference", "ajax", "flat") if side == "reference" else ("ajax", "flat", "reference")
    for name in order:
        p, made = pub[name]
        if (p / "evals.jsonl").is_file():
            round_dir = published_round_dir(p, made)
            manifest.verify(round_dir, True,
                            os.path.normpath(os.path.join(str(n), os.path.relpath(round_dir, d))),
                            must_list=(p.relative_to(round_dir).as_posix() + "/evals.jsonl",))
            return p, "published", made
    raise SideError(
        f"{key}: {n} has no run of seed {seed} (expected {n}/s{seed}/ with records.jsonl "
        f"and DONE.json, or the published {n}/ref_s{seed}/evals.jsonl or "
        f"{n}/ajax/s{seed}/evals.jsonl; docs/SIDES.md)")


def disagreements(run_dir, round_: Round, side: str, seed: int, made_by: str) -> list[str]:
    """How a records run was made otherwise than the round asks: ``["<name> <recorded> !=
    <expected>", ...]``, empty when it was made with the round's parameters.

    The protocol parameters of :func:`dreamer_parity.records.protocol_disagreements` (seed,
    profile, rows, evaluation points and episodes, decode, the reference's sampler) and,
    for a run the reference made standing on the reference side, ``reference.jax``,
    ``platform`` and ``precision`` (recorded in its ``run.json`` ``args``; a run recording
    none ran with 0.4.26 on the CPU at jax's default precision).

    Raises:
      records.RecordError: a malformed ``run.json`` (naming the file and field).
    """
    info = records.read_run_info(Path(run_dir) / "run.json")
    wrong, _ = records.protocol_disagreements(round_, side, seed, info, made_by)
    if made_by == "reference" and side == "reference":
        args = info.get("args") if isinstance(info.get("args"), dict) else {}
        for name, default in _REFERENCE_EXECUTION.items():
            got, want = args.get(name, default), getattr(round_.reference_run, name)
            if got != want:
                wrong.append(f"reference.{name} {repr(got)[:40]} != {want!r}")
    return wrong


def matching_kept_runs(round_: Round, side: str, seeds, root: str | Path = ".",
                       exclude: str | None = None) -> list[str]:
    """The directories of :data:`KEPT_RUNS` that hold a records run of every seed of
    ``seeds`` for ``side``, each made with the round's parameters (:func:`disagreements`
    empty); relative POSIX paths, sorted by name.

    Args:
      round_: the round; side: the side the runs would stand on; seeds: its seeds
        to be taken from one directory; root: the repository root; exclude: a directory
        (relative, as params names it) not to consider.

    Only ``run.json`` of each candidate run is read (the manifest is verified by
    :func:`locate` once a directory is taken).  A directory whose ``run.json`` is malformed
    is not a match.
    """
    base = Path(root) / KEPT_RUNS
    if not base.is_dir():
        return []
    out = []
    for d in sorted(p for p in base.iterdir() if p.is_dir() and not p.is_symlink()):
        rel = d.relative_to(root).as_posix()
        if rel == exclude:
            continue
        ok = True
        for seed in seeds:
            run = d / f"s{seed}"
            if not (run / "run.json").is_file():
                ok = False
                break
            try:
                made = _made_by_records(run, "")
                if disagreements(run, round_, side, seed, made):
                    ok = False
            except (SideError, records.RecordError):
                ok = False
            if not ok:
                break
        if ok:
            out.append(rel)
    return out


def kept_seeds(side: str, root: str | Path = ".") -> list[int]:
    """The seed numbers of the runs ``side`` made that are kept under :data:`KEPT_RUNS`
    (``<root>/data/runs/<name>/s<S>/run.json`` whose ``side`` is ``side``, as
    :mod:`dreamer_parity.keep` checked it), ascending, each once, whatever the round or the
    platform.  A new run of ``side`` takes a number above these (docs/rounds/round3-final.md,
    "The sides": a seed number is used once across platforms).

    Raises:
      SideError: one line naming a kept ``run.json`` that cannot be read, or whose ``seed``
        is not the one its directory names.
    """
    base = Path(root) / KEPT_RUNS
    found = set()
    for f in sorted(base.glob("*/s*/run.json")):
        try:
            info = records.read_json(f, f.relative_to(root).as_posix())
        except records.RecordError as e:
            raise SideError(str(e)) from None
        if info.get("side") != side:
            continue
        if f"s{info.get('seed')}" != f.parent.name:
            raise SideError(f"{f.relative_to(root).as_posix()}: seed {info.get('seed')!r} "
                            f"is not the one its directory names ({f.parent.name})")
        found.add(int(info["seed"]))
    return sorted(found)


def kept_runs_hint(round_: Round, side: str, seeds, root: str | Path = ".",
                   exclude: str | None = None) -> str:
    """The ways on for a side whose named runs were made with other parameters than the
    round's and that :func:`resolve` could not replace (no directory of
    :data:`KEPT_RUNS` made with them, or several): one clause, appended to the refusal's
    line (:func:`dreamer_parity.preflight.check_runs`)."""
    key = f"{side}.source"
    found = matching_kept_runs(round_, side, seeds, root, exclude=exclude)
    ways = f"run them here (-S {key}=run) or name kept runs made with them (-S {key}=<dir>)"
    if len(found) > 1:
        return (f"several kept runs under {KEPT_RUNS}/ were made with the round's parameters "
                f"({', '.join(found)}): name one (-S {key}=<dir>)")
    return f"no kept runs under {KEPT_RUNS}/ were made with the round's parameters: {ways}"


def resolve(round_: Round, root: str | Path = ".", sides=records.SIDES) -> dict[str, Side]:
    """Resolve ``<side>.source`` of every side: the one place the sides are decided.

    Args:
      round_: the round (:func:`dreamer_parity.params.load_round`): each side's seeds and
        the origin of each (:meth:`dreamer_parity.round_spec.RoundSide.origins`).
      root: the repository root; sources are relative to it and must stay inside it
        (:func:`dreamer_parity.params.repo_path`).
      sides: the sides to resolve (default both).

    Returns:
      ``{side: Side}``; a ``run`` seed is ``results/<side>/s<S>`` (layout ``records``,
      made by ``side``; it need not exist yet), every other seed is found by
      :func:`locate`, its manifest verified (required: every run a directory source
      names is kept with one).  Every manifest under a source directory, and the one of
      a directory above it that covers it, is verified first
      (:func:`dreamer_parity.manifest.verify_tree`).  Where the records runs a directory
      names were made with other parameters than the round's (:func:`disagreements`), that
      directory's seeds come from the kept-runs directory made with the round's parameters
      where exactly one is (:func:`matching_kept_runs`), and ``source`` names it.
      ``run_dir`` values are relative to ``root`` (POSIX form).

    Raises:
      SideError / params.ParamsError: one line naming ``<side>.source``: a path outside
        the repository or missing, or a seed the directory does not hold;
      records.RecordError: a manifest missing or not verified, a records run's malformed
        ``run.json``.
    """
    root = Path(root)
    out = {}
    trees = set()
    for side in sides:
        key = f"{side}.source"
        where = round_.side(side).origins()
        # a directory whose records runs were made with other parameters than the round's
        # gives way, for its seeds, to the kept runs made with the round's (one decision)
        instead: dict[str, str] = {}
        located: dict[tuple, tuple] = {}
        for src in dict.fromkeys(v for v in where.values() if v != "run"):
            seeds = [s for s, v in where.items() if v == src]
            d = P.repo_path(key, src, root)
            if not d.is_dir():
                raise SideError(f"params: {key}: {src} is not a directory (the published "
                                f"rounds are data/published/round1, round2 and round3), "
                                f"or set {key}: run")
            if src not in trees:    # every manifest under the source, once
                manifest.verify_tree(d, src, top=root)
                trees.add(src)
            for seed in seeds:
                run_dir, layout, made = located[src, seed] = locate(
                    d, side, seed, f"params: {key}", src, require_manifest=True)
                try:
                    wrong = disagreements(run_dir, round_, side, seed, made) \
                        if layout == "records" else []
                except records.RecordError:
                    wrong = []                  # a malformed run.json: preflight names it
                if wrong:
                    found = matching_kept_runs(round_, side, seeds, root, exclude=src)
                    if len(found) == 1:         # else the named runs stay, and are refused
                        instead[src] = found[0]
                    break
        entries = []
        for seed, src in where.items():
            if src == "run":
                entries.append(SeedSource(seed, "run", f"{RESULTS}/{side}/s{seed}",
                                          "records", side))
                continue
            src = instead.get(src, src)
            if (src, seed) not in located:
                if src not in trees:
                    manifest.verify_tree(P.repo_path(key, src, root), src, top=root)
                    trees.add(src)
                located[src, seed] = locate(P.repo_path(key, src, root), side, seed,
                                            f"params: {key}", src, require_manifest=True)
            run_dir, layout, made = located[src, seed]
            entries.append(SeedSource(seed, src, run_dir.relative_to(root).as_posix(),
                                      layout, made))
        out[side] = Side(side, tuple(entries))
    return out


def side_from_dir(directory, side: str, seeds) -> Side:
    """A side read from one directory (the analysis' command-line ``--reference`` /
    ``--candidate`` and the tests): every seed located there by :func:`locate`.

    ``run_dir`` values keep ``directory``'s form (absolute stays absolute: nothing is
    written out from them; reports print :func:`analysis.load.display_path`).  A records
    run's manifest is verified when it holds one, a published run's is required
    (:func:`locate`).

    Raises:
      SideError: the directory is missing or lacks a seed;
      records.RecordError: a manifest that does not verify.
    """
    d = Path(directory)
    if side not in records.SIDES:
        raise ValueError(f"side must be one of {records.SIDES}, got {side!r}")
    if not d.is_dir():
        raise SideError(f"{side} directory {d}: not found")
    entries = []
    for seed in seeds:
        run_dir, layout, made = locate(d, side, int(seed), f"{side} directory {d}")
        entries.append(SeedSource(int(seed), str(d), str(run_dir), layout, made))
    return Side(side, tuple(entries))


def main(argv=None) -> int:
    ap = records.ArgumentParser(prog="python -m dreamer_parity.sides", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params.yaml")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("show", help="print every side's per-seed sources as JSON")
    r = sub.add_parser("runs-here", help="print yes when this repository runs a seed of SIDE")
    r.add_argument("side", choices=records.SIDES)
    a = ap.parse_args(argv)
    try:
        round_ = P.load_round(a.params)
        if a.cmd == "runs-here":
            print("yes" if round_.side(a.side).runs_here() else "no")
            return 0
        resolved = resolve(round_)
    except (P.ParamsError, SideError, records.RecordError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except FileNotFoundError:
        print(f"error: {a.params}: missing", file=sys.stderr)
        return 2
    print(json.dumps({k: [asdict(s) for s in v.seeds] for k, v in resolved.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Keep a finished run as data: copy its records-schema files into a runs directory.

A run made apart from a round's stages (a one-seed experiment, a frozen clone, another
machine, another implementation that writes the records schema) becomes usable as a side
of any round once its files sit under ``data/`` (docs/SIDES.md). This command copies
them there, checked first::

    python -m dreamer_parity.keep <run dir> data/runs/<name> [--params FILE] [--set KEY=VALUE ...]
    python -m dreamer_parity.keep <runs.tar.gz> data/runs/<name> [--params FILE] ...

The second form takes an archive of finished runs (:mod:`dreamer_parity.archive`, what
comes back from another machine) and keeps every run in it, all checked before any is written.

It copies ``records.jsonl`` and ``episodes.jsonl`` gzip-compressed (as
``records.jsonl.gz`` and ``episodes.jsonl.gz``, :func:`dreamer_parity.records.gzip_bytes`;
a run whose files are already compressed is taken as it is), and ``run.json``,
``timing.json`` (when present) and ``DONE.json`` as they are, into
``data/runs/<name>/s<seed>/``, where ``seed`` is the run's own (``run.json``), and writes
beside them ``MANIFEST.json``, the SHA-256 of each of those files as kept
(:mod:`dreamer_parity.manifest`): every round that names the directory verifies it before
reading the run, so a kept run cannot change unseen. Nothing else is copied (final
parameters stay out of git). Every reader takes either form
(:func:`dreamer_parity.records.jsonl_path`).

A kept directory without a manifest gets one from the same code, after the same checks
(the run read and checked against itself; the directory holding only the kept files)::

    python -m dreamer_parity.keep --add-manifest data/runs/<name>/s<seed> [...]

Before anything is written, the run is read as the analysis reads it
(:func:`dreamer_parity.records.read_run`: a run without ``DONE.json`` is unfinished and
refused) and checked against itself
(:func:`dreamer_parity.records.check_run_agrees`, judged by the implementation named in
its ``run.json``). With ``--params`` (optionally changed by ``--set``, as ``dvc exp run
-S`` would change it) the run must also have been made with that round's protocol
parameters. The copy is written into a temporary directory beside the destination and
renamed into place. A destination that already holds the same files (the same
decompressed content, and a manifest that verifies) is left as it is (exit 0). One that
holds other files is refused.

The arguments are checked before anything is read (:func:`check_args`): a source that
is neither a directory nor a ``.tar.gz`` file, a destination that is an existing file, a
``--params`` that is not a file are refused.  A run's labels are checked where it enters:
the seed its directory names (``s<S>``), ``run.json``'s and every record's and episode's
are one, and the side its place names (an archive member's ``<side>/``, a directory under
``candidate/`` or ``reference/``) is the side that made it, as ``run.json`` records it.

Exit status: 0 kept or already kept; 2 refused (one line ``error: ...`` on stderr,
nothing written).
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sys
import tempfile
from pathlib import Path

from dreamer_parity import manifest
from dreamer_parity import params as P
from dreamer_parity import records
from dreamer_parity.round_spec import Round

__all__ = ["KEPT_FILES", "KeepError", "keep", "keep_archive", "kept_files", "add_manifest",
           "check_args", "main"]

#: The files of a run that are kept, in the order they are written (DONE.json last); the
#: JSON-lines files (records.JSONL_FILES) are kept as ``<name>.gz``.
KEPT_FILES = ("records.jsonl", "episodes.jsonl", "run.json", "timing.json", records.DONE)


def kept_files(src: Path) -> dict[str, bytes]:
    """``{name in the kept directory: bytes}`` of the run in ``src``: the JSON-lines files
    compressed (:func:`dreamer_parity.records.gzip_bytes` of their decompressed content),
    the others as they are; ``timing.json`` only when present.  Insertion order is the
    order of :data:`KEPT_FILES` (DONE.json last).

    Raises:
      RecordError: a JSON-lines file is stored both plain and compressed, or a ``.gz``
        does not decompress (:func:`dreamer_parity.records.read_bytes`).
    """
    out = {}
    for n in KEPT_FILES:
        if n in records.JSONL_FILES:
            path = records.jsonl_path(src, n)
            if path is not None:
                out[n + records.GZ] = records.gzip_bytes(records.read_bytes(path))
        elif (src / n).exists() or (src / n).is_symlink():
            try:
                out[n] = records.read_raw(src / n)
            except FileNotFoundError:
                raise records.RecordError(f"{src / n}: missing (a dangling link)") from None
    return out


class KeepError(ValueError):
    """A run cannot be kept; the message is one line naming the file or argument."""


def load_params(params_file: str | None, sets: list[str]) -> Round | None:
    """The round of ``params_file`` with ``sets`` applied
    (:func:`dreamer_parity.params.load_round`), or None without a file.

    Raises:
      KeepError: a malformed ``--set``, or the params.ParamsError line.
    """
    if params_file is None:
        if sets:
            raise KeepError("--set needs --params")
        return None
    try:
        return P.load_round(params_file, sets)
    except P.ParamsError as e:
        raise KeepError(str(e)) from None
    except FileNotFoundError:
        raise KeepError(f"--params {params_file}: not found") from None


def _prepare(src: Path, round_: Round | None,
             label_side: str | None = None) -> tuple[int, dict[str, bytes]]:
    """``(seed, files to write)`` of the finished run in ``src``, checked as :func:`keep`
    says (KeepError otherwise), its ``MANIFEST.json`` last among them; nothing is written.

    ``label_side``: the side the run's place names (an archive member's ``<side>/``, a
    directory's parent named after a side), which must be the side that made it
    (``run.json``); the seed a directory named ``s<S>`` names must be its seed
    (:func:`dreamer_parity.records.check_run_agrees`)."""
    if not src.is_dir():
        raise KeepError(f"{src}: not a directory")
    if not (src / "run.json").exists() and not (src / records.DONE).exists():
        inner = sorted(p.name for p in src.glob("s[0-9]*") if p.is_dir())
        if inner:
            raise KeepError(f"{src}: holds runs ({', '.join(inner[:5])}"
                            f"{', ...' if len(inner) > 5 else ''}), not one: give one seed's "
                            f"directory, e.g. {src / inner[0]}")
    try:
        manifest.verify(src, required=False)    # a kept run kept again: verified first
        data = records.read_run(src)
        info = data["run"]
        if info.get("side") not in records.SIDES or not isinstance(info.get("seed"), int):
            raise KeepError(f"{src / 'run.json'}: side and seed must be recorded to keep a run "
                            f"(side {str(info.get('side'))[:40]!r}, seed {str(info.get('seed'))[:40]})")
        side, seed = info["side"], info["seed"]
        if label_side is not None and label_side != side:
            raise KeepError(f"{src / 'run.json'}: side {side!r}, but the run stands under "
                            f"{label_side}/: its place names another side than the one that "
                            f"made it")
        records.check_run_agrees(src, round_, side, seed, data=data, made_by=side)
        files = kept_files(src)
    except records.RecordError as e:
        raise KeepError(str(e)) from None
    files[manifest.NAME] = manifest.dumps(manifest.build(files))   # written last
    return seed, files


def _already_kept(target: Path, files: dict[str, bytes]) -> bool:
    """True when ``target`` holds ``files`` (the same content, the JSON-lines ones compared
    decompressed, and a manifest that verifies); False when it does not exist; KeepError
    when it holds something else."""
    if not target.exists():
        return False
    have = sorted(p.name for p in target.iterdir())
    try:
        same = have == sorted(files) and manifest.verify(target) and all(
            records.read_bytes(target / n) == (gzip.decompress(b) if n.endswith(records.GZ)
                                               else b)
            for n, b in files.items() if n != manifest.NAME)
    except records.RecordError:
        same = False
    if not same:
        raise KeepError(f"{target}: holds another run (or other files); remove it first to "
                        f"replace it")
    return True


def _write(dest: Path, seed: int, files: dict[str, bytes]) -> Path:
    """Write ``files`` into ``dest/s<seed>`` through a temporary directory and a rename."""
    target = dest / f"s{seed}"
    dest.mkdir(parents=True, exist_ok=True)
    tmp = dest / f".s{seed}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        for n, data in files.items():
            (tmp / n).write_bytes(data)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return target


def keep(src, dest, round_: Round | None = None) -> tuple[Path, bool]:
    """Copy one finished run into ``dest/s<seed>/``, checked first.

    Args:
      src: the run directory (records schema, ``DONE.json`` present).
      dest: the runs directory (created if absent).
      round_: the round (:class:`dreamer_parity.round_spec.Round`) the run must agree
        with, or None.

    Returns:
      ``(run directory written or found, True when it was written)``.

    Raises:
      KeepError: the run is unfinished, unreadable or disagrees with itself or with
        ``round_``; ``run.json`` names no side or seed; or ``dest/s<seed>`` holds other
        files. Nothing is written.
    """
    src, dest = Path(src), Path(dest)
    seed, files = _prepare(src, round_, src.absolute().parent.name
                           if src.absolute().parent.name in records.SIDES else None)
    target = dest / f"s{seed}"
    if _already_kept(target, files):
        return target, False
    return _write(dest, seed, files), True


def keep_archive(archive, dest, round_: Round | None = None) -> list[tuple[Path, bool]]:
    """Keep every run of an archive (:mod:`dreamer_parity.archive`, e.g. the finished
    seeds of a batch run on another machine) into ``dest/s<seed>/``; all checked, as :func:`keep`
    checks one, before any is written.

    Returns:
      ``[(run directory, True when written), ...]`` in seed order.

    Raises:
      KeepError: the archive is unreadable or refused, it holds runs of both sides or the
        same seed twice, or a run is refused; nothing is written.
    """
    from dreamer_parity import archive as archivelib

    dest = Path(dest)
    with tempfile.TemporaryDirectory(prefix="keep-") as tmp:
        try:
            runs = archivelib.unpack(archive, tmp)
        except archivelib.ArchiveError as e:
            raise KeepError(str(e)) from None
        if len({d.parent.name for d in runs}) > 1:
            raise KeepError(f"{archive}: holds runs of both sides; keep each side's into its "
                            f"own directory")
        prepared = []
        for d in runs:
            try:
                prepared.append(_prepare(d, round_, d.parent.name))
            except KeepError as e:   # named by the archive's member, not the temporary path
                raise KeepError(str(e).replace(str(Path(tmp)) + os.sep, f"{archive}:")) \
                    from None
        seeds = [seed for seed, _ in prepared]
        if len(set(seeds)) != len(seeds):
            raise KeepError(f"{archive}: holds seed {sorted(s for s in seeds if seeds.count(s) > 1)[0]} twice")
        kept = {seed: _already_kept(dest / f"s{seed}", files) for seed, files in prepared}
        return [(dest / f"s{seed}", False) if kept[seed] else (_write(dest, seed, files), True)
                for seed, files in sorted(prepared)]


def add_manifest(directory, round_: Round | None = None) -> tuple[Path, bool]:
    """Give a kept directory without a manifest its ``MANIFEST.json``.

    The run is checked as :func:`keep` checks it (read, and agreeing with itself and with
    ``round_`` when given), the directory must hold only kept files (:data:`KEPT_FILES`,
    the JSON-lines ones compressed), and the manifest is written from the files as they
    are (:func:`dreamer_parity.manifest.write`).

    Returns:
      ``(manifest path, True when written)``; a directory whose manifest is already there
      and verifies is left as it is (False).

    Raises:
      KeepError: one line naming the file: the run is refused, the directory holds another
        file, or a manifest is there and does not verify.
    """
    d = Path(directory)
    try:
        if (d / manifest.NAME).exists():
            manifest.verify(d)
            return d / manifest.NAME, False
        if not d.is_dir():
            raise KeepError(f"{d}: not a directory")
        data = records.read_run(d)
        info = data["run"]
        if info.get("side") not in records.SIDES or not isinstance(info.get("seed"), int):
            raise KeepError(f"{d / 'run.json'}: side and seed must be recorded to keep a run")
        records.check_run_agrees(d, round_, info["side"], info["seed"], data=data,
                                 made_by=info["side"])
        allowed = {n + records.GZ if n in records.JSONL_FILES else n for n in KEPT_FILES}
        other = sorted(set(manifest.listing(d)) - allowed)
        if other:
            raise KeepError(f"{d / other[0]}: not a kept file ({', '.join(sorted(allowed))})")
        return manifest.write(d), True
    except records.RecordError as e:
        raise KeepError(str(e)) from None


def check_args(a) -> None:
    """The command's paths, before anything is read: ``src`` a directory or a ``.tar.gz``
    file, ``dest`` a directory path (not an existing file;
    :func:`dreamer_parity.records.check_target`), ``--params`` a regular file, each
    ``--add-manifest`` a directory.

    Raises:
      KeepError: one line naming the argument.
    """
    try:
        if a.add_manifest is not None:
            for d in a.add_manifest:
                records.check_source(d, "--add-manifest", "dir")
        else:
            src = records.check_source(a.src, "src", "any")
            if src.is_file() and not a.src.endswith(".tar.gz"):
                raise KeepError(f"src {a.src[:80]}: a file, but not an archive (.tar.gz); "
                                f"give a run directory or an archive")
            records.check_target(a.dest, "dest", "dir", inside=False)
        if a.params is not None:
            records.check_source(a.params, "--params", "file")
    except records.RecordError as e:
        raise KeepError(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    """CLI entry point (see the module docstring); returns the exit status."""
    ap = records.ArgumentParser(prog="python -m dreamer_parity.keep", description=__doc__.split("\n\n")[0])
    ap.add_argument("src", nargs="?", help="a finished run directory (records schema), or an "
                                           "archive of finished runs (.tar.gz, python -m "
                                           "dreamer_parity.archive)")
    ap.add_argument("dest", nargs="?", help="the runs directory, e.g. data/runs/<name>")
    ap.add_argument("--params", default=None, help="the round's params file the run must agree with")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="change a parameter of --params first (as dvc exp run -S)")
    ap.add_argument("--add-manifest", nargs="+", default=None, metavar="KEPT_DIR",
                    help="write MANIFEST.json into kept directories that have none")
    a = ap.parse_args(argv)
    if (a.add_manifest is None) == (a.src is None or a.dest is None) or \
            (a.add_manifest is not None and a.src is not None):
        ap.error("give SRC DEST, or --add-manifest KEPT_DIR ...")
    try:
        check_args(a)
        round_ = load_params(a.params, a.set)
        if a.add_manifest is not None:
            for d in a.add_manifest:
                path, written = add_manifest(d, round_)
                print(f"{'manifest written' if written else 'manifest verified'}: {path}")
            return 0
        if Path(a.src).is_file() and a.src.endswith(".tar.gz"):
            results = keep_archive(a.src, a.dest, round_)
        else:
            results = [keep(a.src, a.dest, round_)]
    except KeepError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for target, written in results:
        print(f"{'kept' if written else 'already kept'}: {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

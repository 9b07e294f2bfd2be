"""Finished runs as one archive: what comes back from a device call, and what ``keep`` takes.

A device call returns at most 8 files through ``$OUT``, so the finished seeds of a call
travel as one gzip-compressed tar file.  :func:`pack` writes it from run directories in the
records schema (docs/SIDES.md), and :func:`unpack` reads it back, both standard library
only::

    <archive>.tar.gz
      <side>/s<S>/records.jsonl[.gz]   episodes.jsonl[.gz]   run.json   timing.json   DONE.json

Only finished runs go in (``DONE.json`` present and read as the analysis reads it,
:func:`dreamer_parity.records.read_run`): a seed still running, or cut by the end of a
call, stays out, so nothing in an archive looks finished that did not finish.  Only the
files ``keep`` keeps (:data:`dreamer_parity.keep.KEPT_FILES`) go in: no final parameters,
no checkpoints.  The archive is written to a temporary name and renamed.

:func:`unpack` refuses, before writing anything, a member that is not a regular file or a
directory, an absolute name, a ``..`` part, a name outside ``<side>/s<S>/<kept file>``, or
more than :data:`MAX_MEMBER_BYTES` in one member.

Command line (the device side)::

    python -m dreamer_parity.archive pack <runs root> <archive.tar.gz> [--side candidate]

packs every finished ``<runs root>/<side>/s<S>/`` and prints how many seeds went in and
which were left out (unfinished).  Exit status 0 (also when nothing was finished: the
archive is then not written), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import re
import sys
import tarfile
from pathlib import Path, PurePosixPath

from dreamer_parity import records

__all__ = ["ArchiveError", "pack", "unpack", "finished_runs", "MAX_MEMBER_BYTES", "main"]

#: Largest member :func:`unpack` accepts (bytes): a full-size run's records.jsonl is
#: about 0.35 MB, its run.json about 20 kB.
MAX_MEMBER_BYTES = 16 * 2 ** 20
#: The files of a run that travel (``keep``'s, in either form of the JSON-lines ones).
RUN_FILES = ("records.jsonl", "records.jsonl.gz", "episodes.jsonl", "episodes.jsonl.gz",
             "run.json", "timing.json", records.DONE)
_SEED_DIR = re.compile(r"^s(0|[1-9][0-9]{0,8})$")


class ArchiveError(ValueError):
    """An archive cannot be written or read; the message is one line naming it."""


def finished_runs(root, side: str) -> tuple[list[Path], list[str]]:
    """The finished run directories ``<root>/<side>/s<S>`` (sorted by seed) and the names
    of those left out, each with its reason (unfinished or unreadable).

    Raises:
      ValueError: ``side`` is not one of :data:`dreamer_parity.records.SIDES`.
    """
    if side not in records.SIDES:
        raise ValueError(f"side must be one of {records.SIDES}, got {side!r}")
    base = Path(root) / side
    dirs = sorted((p for p in base.glob("s*") if p.is_dir() and _SEED_DIR.match(p.name)),
                  key=lambda p: int(p.name[1:]))
    done, left = [], []
    for d in dirs:
        try:
            records.read_run(d)
        except records.RecordError as e:
            left.append(f"{d.name}: {str(e).splitlines()[0][:200]}")
            continue
        done.append(d)
    return done, left


def pack(run_dirs, dest, side: str) -> Path:
    """Write the finished runs ``run_dirs`` (each ``.../s<S>``) of ``side`` into the
    gzip-compressed tar file ``dest``, atomically; members ``<side>/s<S>/<file>`` of
    :data:`RUN_FILES` only, in seed order, with neutral owners and times (the same runs
    give the same bytes).

    Raises:
      ArchiveError: no run given, or a run is unfinished or unreadable (checked for every
        run before anything is written).
    """
    run_dirs = [Path(d) for d in run_dirs]
    if not run_dirs:
        raise ArchiveError(f"{dest}: no finished run to pack")
    for d in run_dirs:
        try:
            records.read_run(d)
        except records.RecordError as e:
            raise ArchiveError(f"{d}: not a finished run ({str(e).splitlines()[0][:200]})") from None
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                                  mtime=0) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for d in sorted(run_dirs, key=lambda p: int(p.name[1:])):
                for name in RUN_FILES:
                    f = d / name
                    if not f.is_file():
                        continue
                    data = f.read_bytes()
                    info = tarfile.TarInfo(f"{side}/{d.name}/{name}")
                    info.size, info.mode, info.mtime = len(data), 0o644, 0
                    tar.addfile(info, io.BytesIO(data))
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()
    return dest


def _check_member(archive: Path, m: tarfile.TarInfo) -> None:
    p = PurePosixPath(m.name)
    if p.is_absolute() or ".." in p.parts:
        raise ArchiveError(f"{archive}: member {m.name[:80]!r} leaves the archive's root")
    if m.isdir():
        if len(p.parts) > 2 or (p.parts and p.parts[0] not in records.SIDES) or (
                len(p.parts) == 2 and not _SEED_DIR.match(p.parts[1])):
            raise ArchiveError(f"{archive}: unexpected directory {m.name[:80]!r}")
        return
    if not m.isfile():
        raise ArchiveError(f"{archive}: member {m.name[:80]!r} is not a regular file")
    if len(p.parts) != 3 or p.parts[0] not in records.SIDES or not _SEED_DIR.match(
            p.parts[1]) or p.parts[2] not in RUN_FILES:
        raise ArchiveError(f"{archive}: unexpected member {m.name[:80]!r} (expected "
                           f"<side>/s<S>/<run file>)")
    if m.size > MAX_MEMBER_BYTES:
        raise ArchiveError(f"{archive}: member {m.name[:80]!r} holds {m.size} bytes, more than "
                           f"{MAX_MEMBER_BYTES}")


def unpack(archive, into) -> list[Path]:
    """Extract ``archive`` (written by :func:`pack`) under ``into`` and return the run
    directories ``<into>/<side>/s<S>`` it held, sorted.

    Raises:
      ArchiveError: the file is not a readable gzip tar, or a member is refused (see the
        module docstring); checked for every member before anything is written.
    """
    archive, into = Path(archive), Path(into)
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = tar.getmembers()
            for m in members:
                _check_member(archive, m)
            files = [m for m in members if m.isfile()]
            if not files:
                raise ArchiveError(f"{archive}: holds no run")
            for m in files:
                target = into / m.name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tar.extractfile(m).read())
    except (tarfile.TarError, OSError, EOFError) as e:
        raise ArchiveError(f"{archive}: not a readable .tar.gz ({type(e).__name__}: "
                           f"{str(e)[:100]})") from None
    return sorted({(into / PurePosixPath(m.name).parent) for m in files},
                  key=lambda p: (p.parent.name, int(p.name[1:])))


def main(argv=None) -> int:
    """Command-line entry point (see the module docstring); returns the exit status."""
    ap = argparse.ArgumentParser(prog="python -m dreamer_parity.archive",
                                 description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="pack the finished runs of a runs root")
    p.add_argument("root", help="runs root: <root>/<side>/s<S>/")
    p.add_argument("dest", help="the archive to write (.tar.gz)")
    p.add_argument("--side", default="candidate", choices=records.SIDES)
    a = ap.parse_args(argv)
    done, left = finished_runs(a.root, a.side)
    for line in left:
        print(f"left out (not finished): {a.side}/{line}", file=sys.stderr)
    if not done:
        print(f"archive: no finished {a.side} run under {a.root}; nothing written")
        return 0
    try:
        pack(done, a.dest, a.side)
    except ArchiveError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"archive: {len(done)} finished {a.side} run(s) "
          f"({', '.join(d.name for d in done)}) in {a.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

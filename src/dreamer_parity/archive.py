"""Finished runs as one archive: what comes back from another machine, and what ``keep`` takes.

The finished seeds of a batch run elsewhere (an accelerator's machine) travel back as one
gzip-compressed tar file.  :func:`pack` writes it from run directories in the
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
directory, an absolute name, a ``..`` part, a name outside ``<side>/s<S>/<kept file>``,
more than :data:`MAX_MEMBER_BYTES` (16 MiB) in one member, a name given twice (or a
JSON-lines file in both forms), more than :data:`MAX_MEMBERS` (1,024) members, or more
than :data:`MAX_TOTAL_BYTES` (128 MiB) in all: each header is checked as the stream is
read, so an archive over a cap is refused at the first member over it.

Command line (the device side)::

    python -m dreamer_parity.archive pack <runs root> <archive.tar.gz> [--side candidate]

packs every finished ``<runs root>/<side>/s<S>/`` and prints how many seeds went in and
which were left out (unfinished).  The arguments are checked first: the root must be a
directory, the archive a path ending in ``.tar.gz`` that is not a directory (it may lie
outside the repository).  Exit status 0 (also when nothing was finished: the archive is
then not written), 2 on bad arguments (one line ``error: ...``).
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import re
import sys
import tarfile
import zlib
from pathlib import Path, PurePosixPath

from dreamer_parity import records

__all__ = ["ArchiveError", "pack", "unpack", "finished_runs", "MAX_MEMBER_BYTES",
           "MAX_MEMBERS", "MAX_TOTAL_BYTES", "main"]

#: Largest member :func:`unpack` accepts (bytes): a full-size run's records.jsonl is
#: about 0.35 MB, its run.json about 20 kB.
MAX_MEMBER_BYTES = 16 * 2 ** 20
#: Most members :func:`unpack` accepts in one archive (directories included): 7 files of
#: each of 128 seeds fit (a batch of 8 seeds packs 40).
MAX_MEMBERS = 1024
#: Largest total of the members' sizes :func:`unpack` accepts (bytes, before anything is
#: extracted): 128 seeds of full-size runs, uncompressed (about 0.55 MiB each), fit.
MAX_TOTAL_BYTES = 128 * 2 ** 20
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
      ArchiveError: no run given, or a run is unfinished, unreadable, or not the run its
        member's name says (``run.json``'s side is not ``side``, or a seed in it or its
        records is not the directory's; :func:`dreamer_parity.records.check_run_agrees`),
        checked for every run before anything is written.
    """
    run_dirs = [Path(d) for d in run_dirs]
    if not run_dirs:
        raise ArchiveError(f"{dest}: no finished run to pack")
    if side not in records.SIDES:
        raise ArchiveError(f"side must be one of {records.SIDES}, got {str(side)[:40]!r}")
    for d in run_dirs:
        if not _SEED_DIR.match(d.name):
            raise ArchiveError(f"{d}: not a run directory named s<S> (its members are "
                               f"<side>/s<S>/<file>)")
        try:
            data = records.read_run(d)
            # the member's labels are the run's: side (made by) and seed
            records.check_run_agrees(d, None, side, int(d.name[1:]), data=data, made_by=side)
        except records.RecordError as e:
            raise ArchiveError(f"{d}: not a finished run of {side} seed {d.name[1:]} "
                               f"({str(e).splitlines()[0][:200]})") from None
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


def _scan(archive: Path) -> list[tarfile.TarInfo]:
    """Every member's header, checked (:func:`_check_member`, duplicates, both forms of a
    JSON-lines file, :data:`MAX_MEMBERS`, :data:`MAX_TOTAL_BYTES`) one at a time as the
    stream is read, so that a refusal comes at the first header over a cap; nothing is
    extracted."""
    members, seen, total = [], {}, 0
    with tarfile.open(archive, "r:gz") as tar:
        while True:
            m = tar.next()
            if m is None:
                break
            if len(members) >= MAX_MEMBERS:
                raise ArchiveError(f"{archive}: more than {MAX_MEMBERS} members (member "
                                   f"{m.name[:80]!r} is number {len(members) + 1})")
            _check_member(archive, m)
            name = PurePosixPath(m.name).as_posix()
            if name in seen:
                raise ArchiveError(f"{archive}: member {name[:80]!r} given twice (members "
                                   f"{seen[name]} and {len(members) + 1}); an archive names "
                                   f"each file once")
            seen[name] = len(members) + 1
            if m.isfile():
                twin = name[:-len(records.GZ)] if name.endswith(records.GZ) else name + records.GZ
                if twin in seen and twin.rsplit("/", 1)[-1] in RUN_FILES:
                    raise ArchiveError(f"{archive}: members {twin[:80]!r} and {name[:80]!r} "
                                       f"hold the same file in both forms; keep one")
                total += m.size
                if total > MAX_TOTAL_BYTES:
                    raise ArchiveError(f"{archive}: member {name[:80]!r} takes the members' "
                                       f"total over {MAX_TOTAL_BYTES} bytes")
            members.append(m)
    return members


def unpack(archive, into) -> list[Path]:
    """Extract ``archive`` (written by :func:`pack`) under ``into`` and return the run
    directories ``<into>/<side>/s<S>`` it held, sorted.

    Every member's header is checked before anything is written (:func:`_scan`): not a
    regular file or a directory, an absolute name, a ``..`` part, a name outside
    ``<side>/s<S>/<run file>``, a member over :data:`MAX_MEMBER_BYTES`, a name given twice
    or a JSON-lines file in both forms, more than :data:`MAX_MEMBERS` members, or more
    than :data:`MAX_TOTAL_BYTES` in all.  Then each file is extracted, at most its
    header's size read from it.

    Raises:
      ArchiveError: one line naming the archive and the member: the file is not a
        readable gzip tar, or a member is refused.
    """
    archive, into = Path(archive), Path(into)
    try:
        files = [m for m in _scan(archive) if m.isfile()]
        if not files:
            raise ArchiveError(f"{archive}: holds no run")
        wanted = {m.name: m.size for m in files}    # the sizes checked, and no others
        with tarfile.open(archive, "r:gz") as tar:
            for m in tar:
                if m.name not in wanted or not m.isfile():
                    continue
                if m.size != wanted.pop(m.name):
                    raise ArchiveError(f"{archive}: member {m.name[:80]!r} changed while it "
                                       f"was read")
                target = into / m.name
                target.parent.mkdir(parents=True, exist_ok=True)
                data = tar.extractfile(m).read(m.size + 1)
                if len(data) != m.size:
                    raise ArchiveError(f"{archive}: member {m.name[:80]!r} is not the size "
                                       f"its header says")
                target.write_bytes(data)
                if not wanted:
                    break
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        raise ArchiveError(f"{archive}: not a readable .tar.gz ({type(e).__name__}: "
                           f"{str(e)[:100]})") from None
    return sorted({(into / PurePosixPath(m.name).parent) for m in files},
                  key=lambda p: (p.parent.name, int(p.name[1:])))


def main(argv=None) -> int:
    """Command-line entry point (see the module docstring); returns the exit status."""
    ap = records.ArgumentParser(prog="python -m dreamer_parity.archive",
                                 description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="pack the finished runs of a runs root")
    p.add_argument("root", help="runs root: <root>/<side>/s<S>/")
    p.add_argument("dest", help="the archive to write (.tar.gz)")
    p.add_argument("--side", default="candidate", choices=records.SIDES)
    a = ap.parse_args(argv)
    try:
        records.check_source(a.root, "root", "dir")
        # the device side writes the archive outside the repository: any place, but a file
        records.check_target(a.dest, "dest", "file", inside=False, suffixes=(".tar.gz",))
    except records.RecordError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
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

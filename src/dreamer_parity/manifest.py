"""Manifests: the SHA-256 of every file of a kept directory, verified before it is read.

A directory whose files are data a round reads (a kept run ``data/runs/<name>/s<S>/``,
written by :mod:`dreamer_parity.keep`; a published round ``data/published/<round>/``;
``data/published/`` itself for its top-level files) holds ``MANIFEST.json``::

    {"algorithm": "sha256", "files": {"<path relative to the directory>": "<64 hex>", ...}}

listing every file below the directory (``/``-separated paths) except the manifest itself
and the files of a subdirectory that holds its own manifest, which :func:`verify` then
verifies in turn (a manifest below that cannot be read is refused, never an exemption;
:func:`verify_tree` verifies every manifest under a source directory, and the one of a
directory above it that covers it).  A manifest that names a path twice is refused
(:func:`dreamer_parity.records.read_json` refuses a repeated JSON key).  :func:`verify` refuses,
before anything of the directory is read, a listed file that is missing or whose bytes
(as stored: a ``.gz`` file's compressed bytes) have another SHA-256, and a file that is
not listed; so an edit of a kept value, even one inside every range, is refused like any
other bad input.  Who requires a manifest: :func:`dreamer_parity.sides.resolve` for every
run a directory source names (records layout: the run directory's; published layout: its
round directory's), :func:`dreamer_parity.sides.locate` for every published run, and
:func:`dreamer_parity.analysis.published_tables.read_table` for ``tables.csv``; a records
run read from elsewhere (``results/<side>/s<S>``, DVC's outputs; a command line's
directory) is verified when it holds one.

Command line::

    python -m dreamer_parity.manifest write DIR     # once, for a directory of data
    python -m dreamer_parity.manifest check DIR...  # exit 0 all verified, 2 otherwise

Standard library only.  Every file is read through the guarded reader
(:func:`dreamer_parity.records.read_raw`), every refusal is a
:class:`dreamer_parity.records.RecordError` of one line naming the file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from pathlib import Path

from dreamer_parity import records

__all__ = ["NAME", "ALGORITHM", "MAX_FILES", "build", "dumps", "listing", "write", "verify",
           "verify_tree", "main"]

#: The manifest's file name.
NAME = "MANIFEST.json"
#: The one hash it records.
ALGORITHM = "sha256"
#: Most files one manifest lists (a published round lists 40, a kept run 5).
MAX_FILES = 10_000
_HEX64 = re.compile(r"[0-9a-f]{64}")


def build(files: dict[str, bytes]) -> dict:
    """The manifest of ``{relative path: bytes as stored}``: ``{"algorithm", "files"}``."""
    return {"algorithm": ALGORITHM,
            "files": {k: hashlib.sha256(v).hexdigest() for k, v in sorted(files.items())}}


def dumps(manifest: dict) -> bytes:
    """The bytes of ``MANIFEST.json`` (the form :func:`dreamer_parity.records.write_json`
    writes: indent 1, sorted keys, a final newline)."""
    return (json.dumps(manifest, indent=1, sort_keys=True, allow_nan=False) + "\n").encode()


def _walk(directory) -> tuple[list[str], list[str]]:
    """``(listing, nested)``: the paths a manifest of ``directory`` lists
    (:func:`listing`) and the subdirectories, ``/``-separated and sorted, that hold their
    own :data:`NAME` (a directory, a link or an unreadable file of that name included:
    :func:`verify` verifies or refuses each)."""
    root = Path(directory)
    out, nested = [], []
    for here, dirs, files in os.walk(root):
        rel = Path(here).relative_to(root)
        keep = []
        for d in sorted(dirs):
            p = Path(here) / d
            if p.is_symlink():
                out.append((rel / d).as_posix())
            elif (p / NAME).exists() or (p / NAME).is_symlink():
                nested.append((rel / d).as_posix())
            else:
                keep.append(d)
        dirs[:] = keep
        out += [(rel / f).as_posix() for f in files if not (rel == Path(".") and f == NAME)]
    return sorted(out), sorted(nested)


def listing(directory) -> list[str]:
    """The paths a manifest of ``directory`` lists: every entry below it that is not a
    directory (a symbolic link to one included), ``/``-separated and sorted, without
    :data:`NAME` and without the subtrees of subdirectories holding their own manifest
    (which :func:`verify` verifies in turn)."""
    return _walk(directory)[0]


def write(directory, where: str | None = None) -> Path:
    """Write ``<directory>/MANIFEST.json`` for the files the directory holds now
    (:func:`listing`), atomically; returns its path.

    Raises:
      records.RecordError: a manifest is already there, or a file is refused by the
        guarded reader (not a regular file, over its cap, ...).
    """
    d = Path(directory)
    where = str(d) if where is None else where
    path = d / NAME
    if path.exists() or path.is_symlink():
        raise records.RecordError(f"{where}/{NAME}: already there; check it with "
                                  f"python -m dreamer_parity.manifest check {where}")
    names = listing(d)
    if not names:
        raise records.RecordError(f"{where}: holds no file to list")
    try:
        files = {n: records.read_raw(d / n, f"{where}/{n}") for n in names}
    except FileNotFoundError as e:
        raise records.RecordError(f"{where}: {Path(e.filename or '?').name}: missing (a "
                                  f"dangling link)") from None
    records.write_text(path, dumps(build(files)).decode())
    return path


def _read(path: Path, where: str) -> dict:
    m = records.read_json(path, where)
    if set(m) != {"algorithm", "files"} or m["algorithm"] != ALGORITHM:
        raise records.RecordError(f"{where}: must hold exactly algorithm {ALGORITHM!r} and "
                                  f"files")
    files = m["files"]
    if not isinstance(files, dict) or not files or len(files) > MAX_FILES:
        raise records.RecordError(f"{where}: files must map 1 to {MAX_FILES} paths to "
                                  f"SHA-256 digests")
    for name, digest in files.items():
        parts = name.split("/")
        if (not name or len(name) > 255 or name.startswith("/") or "\\" in name
                or any(p in ("", ".", "..") for p in parts) or name == NAME
                or any(ord(c) < 32 for c in name)):
            raise records.RecordError(f"{where}: {name[:80]!r} is not a path inside the "
                                      f"directory")
        if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
            raise records.RecordError(f"{where}: {name[:80]}: not 64 lowercase hex digits")
    return files


def verify(directory, required: bool = True, where: str | None = None,
           must_list: tuple[str, ...] = ()) -> bool:
    """Verify ``<directory>/MANIFEST.json`` before anything of the directory is read.

    Args:
      directory: the directory the manifest covers.
      required: refuse a directory without a manifest (False: such a directory is
        accepted and nothing is verified).
      where: the directory as messages name it (default: the path).
      must_list: paths the manifest must list (the files the caller will read).

    Returns:
      True when a manifest was verified, False when there is none and none is required.

    Raises:
      records.RecordError: one line naming the file: no manifest (when required), a
        malformed manifest, a listed file that is missing or whose SHA-256 differs, a file
        present but not listed, a path of ``must_list`` not listed, or any refusal of the
        guarded reader.
    """
    d = Path(directory)
    where = str(d) if where is None else where
    path = d / NAME
    mwhere = f"{where}/{NAME}"
    if not path.exists() and not path.is_symlink():
        if required:
            raise records.RecordError(
                f"{mwhere}: missing; every file a round reads from a directory is listed "
                f"with its SHA-256 there (a kept run: python -m dreamer_parity.keep; "
                f"docs/SIDES.md)")
        return False
    files = _read(path, mwhere)
    for name in must_list:
        if name not in files:
            raise records.RecordError(f"{where}/{name}: not listed in {mwhere}")
    for name, digest in files.items():
        try:
            data = records.read_raw(d / name, f"{where}/{name}")
        except FileNotFoundError:
            raise records.RecordError(f"{where}/{name}: listed in {mwhere} but missing") \
                from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise records.RecordError(
                f"{where}/{name}: its SHA-256 is not the one {mwhere} records: the file "
                f"changed after it was kept (git checkout -- {where} restores it)")
    names, nested = _walk(d)
    extra = [n for n in names if n not in files]
    if extra:
        raise records.RecordError(f"{where}/{extra[0]}: not listed in {mwhere} (a kept "
                                  f"directory holds only the files its manifest lists)")
    for sub in nested:     # a manifest below is verified in turn, never an exemption
        verify(d / sub, True, f"{where}/{sub}")
    covered = [n for n in files if any(n.startswith(sub + "/") for sub in nested)]
    if covered:
        raise records.RecordError(f"{where}/{covered[0]}: listed in {mwhere} but inside a "
                                  f"directory with its own {NAME}: one manifest lists a file")
    return True


def verify_tree(directory, where: str | None = None, top=None) -> int:
    """Verify every manifest at or under ``directory`` (each top-most one with
    :func:`verify`, which verifies those below it), and the manifest of each directory
    between ``directory`` and ``top`` (exclusive) that holds one, which covers it.

    Returns:
      How many manifests were verified at the top level (0: none there).

    Raises:
      records.RecordError: any manifest's refusal (:func:`verify`), an unreadable one
        included.
    """
    d = Path(directory)
    where = str(d) if where is None else where
    n = 0
    if top is not None:
        top_abs, here, shown = Path(top).absolute(), d.absolute(), where
        while here != top_abs and top_abs in here.parents:
            here, shown = here.parent, os.path.dirname(shown) or "."
            if here == top_abs:
                break
            if (here / NAME).exists() or (here / NAME).is_symlink():
                verify(here, True, shown)
                n += 1
                return n            # it covers ``directory`` and every manifest below
    if (d / NAME).exists() or (d / NAME).is_symlink():
        verify(d, True, where)
        return n + 1
    for here, dirs, _ in os.walk(d):
        keep = []
        for sub in sorted(dirs):
            p = Path(here) / sub
            if p.is_symlink():
                continue
            if (p / NAME).exists() or (p / NAME).is_symlink():
                verify(p, True, f"{where}/{p.relative_to(d).as_posix()}")
                n += 1
            else:
                keep.append(sub)
        dirs[:] = keep
    return n


def main(argv=None) -> int:
    """CLI entry point (see the module docstring); returns the exit status."""
    ap = records.ArgumentParser(prog="python -m dreamer_parity.manifest",
                                 description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("write", help="write DIR/MANIFEST.json").add_argument("directory")
    sub.add_parser("check", help="verify manifests").add_argument("directories", nargs="+")
    a = ap.parse_args(argv)
    try:
        for d in ([a.directory] if a.cmd == "write" else a.directories):
            records.check_source(d, a.cmd, "dir")
        if a.cmd == "write":
            print(f"written: {write(a.directory, a.directory)}")
        else:
            for d in a.directories:
                verify(d, True, d)
                print(f"{d}: verified")
    except records.RecordError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Set up the reference: a verified git checkout of danijar/dreamerv3 at 29eb964 and its venv.

Command line (main venv; idempotent; safe to run from several clones at once)::

    python -m dreamer_parity.reference.setup [--jax 0.4.26|0.10.2|0.11.2] [--source URL_OR_DIR]
        [--root DIR] [--check]
    python -m dreamer_parity.reference.setup --export DIR [--source DIR]

Layout under the root (default ``${XDG_CACHE_HOME:-~/.cache}/dreamer-parity``, or the
environment variable ``DREAMER_PARITY_REF_ROOT``)::

    <root>/dreamerv3-29eb964/   the checkout, at REF_COMMIT, no local changes, never edited
    <root>/refvenv/             venv from requirements-reference.lock (reference.jax 0.4.26)
    <root>/jaxcache/            its JAX persistent compilation cache
    <root>/refvenv-jax010/      venv from requirements-reference-jax010.lock (reference.jax
    <root>/jaxcache-jax010/     0.10.2, :data:`ENVIRONMENTS`) and its compilation cache
    <root>/refvenv-jax011/      the same for reference.jax 0.11.2 (the GPU machine's jax;
    <root>/jaxcache-jax011/     requirements-reference-jax011.lock, made with Python 3.12)

A venv is made with the Python its environment names (:data:`ENVIRONMENTS` ``python``), found
by :func:`find_python`.

The source (``--source``, else ``DREAMER_PARITY_REF_SOURCE``, else the public GitHub URL)
is any git URL or local git directory (bare or not) that holds the commit, or an export
made by ``--export`` (below).  An existing checkout is verified by its full commit hash and
a clean ``git status``; a checkout at another commit or with local changes is refused
(nothing is changed).  An existing venv is reused when its installed distributions equal
the lock file exactly.

**An export** (``--export DIR`` writes ``DIR/dreamerv3-29eb964.tar.gz``, about 0.1 MiB) is
a checkout that proves its commit without git: the files of the commit (but the
``scores/`` folder of published score tables, 6 MB the runner never reads) and the raw git
objects of the commit and of every tree in it.  The commit object hashes to REF_COMMIT,
names its root tree, each tree hashes to its name and lists its entries' hashes, and each
file present hashes to its entry: a checkout made from it (a folder without ``.git``,
beside ``dreamerv3-29eb964.git-objects.json``) is verified by recomputing those hashes
(:func:`verify_export_tree`), every time it is checked.  Files the export omits are
named in the verification and in the run's provenance.

**A given interpreter** (``DREAMER_PARITY_REF_INTERPRETER=python3``, for a machine whose
Python already holds jax, such as a TPU v5e machine's image): no venv is made; that interpreter
(with the caller's ``PYTHONPATH``) runs the reference.  Every package of the lock must be
importable from it and jax, jaxlib and numpy must equal the lock's pins; other versions that
differ from the lock are allowed, listed by :func:`interpreter_differences` and recorded
by the runner (``run.json`` ``environment.off_lock``).

Every failure is one message naming what to do (exit status 2), never a traceback.
Standard library only.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from dreamer_parity import provenance

__all__ = [
    "REF_COMMIT", "DEFAULT_SOURCE", "SetupError", "default_root", "default_source",
    "checkout_dir", "venv_dir", "venv_python", "jaxcache_dir", "lock_file",
    "check_checkout", "ensure_checkout", "read_lock", "venv_mismatches", "ensure_venv",
    "check_setup", "setup", "SETUP_HINT", "ENVIRONMENTS", "DEFAULT_JAX", "environment",
    "find_python", "PYTHON_ENV",
    "INTERPRETER_ENV", "given_interpreter", "interpreter_differences", "EXPORT_NAME",
    "EXPORT_OMIT", "export", "verify_export_tree", "objects_file", "checkout_state",
    "setup_hint", "installed_here", "lock_differences",
]

REF_COMMIT = "29eb964e2918a3f4db04086f7f51b60388e97f3d"
DEFAULT_SOURCE = "https://github.com/danijar/dreamerv3"
SETUP_HINT = "make reference-setup"
_REPO_ROOT = Path(__file__).resolve().parents[3]

#: The reference's environments by ``reference.jax`` (:data:`dreamer_parity.params.REFERENCE_JAX`):
#: venv and compilation-cache directory names under the root, the lock, the version set
#: whose own lock it is (:data:`dreamer_parity.provenance.VERSION_SETS`), the set-up command,
#: the Python version its venv is made with.
ENVIRONMENTS = {
    "0.4.26": {"venv": "refvenv", "jaxcache": "jaxcache", "lock": "requirements-reference.lock",
               "version_set": None, "hint": "make reference-setup", "python": "3.11"},
    "0.10.2": {"venv": "refvenv-jax010", "jaxcache": "jaxcache-jax010",
               "lock": "requirements-reference-jax010.lock", "version_set": "reference-jax010",
               "hint": "make reference-setup-jax010", "python": "3.11"},
    "0.11.2": {"venv": "refvenv-jax011", "jaxcache": "jaxcache-jax011",
               "lock": "requirements-reference-jax011.lock", "version_set": "reference-jax011",
               "hint": "make reference-setup-jax011", "python": "3.12"},
}
#: The variable that names the base interpreter of each Python version (:func:`find_python`).
PYTHON_ENV = {"3.11": "DREAMER_PARITY_REF_PYTHON", "3.12": "DREAMER_PARITY_PYTHON312"}
DEFAULT_JAX = "0.4.26"
#: An interpreter that runs the reference instead of a venv made here (module doc).
INTERPRETER_ENV = "DREAMER_PARITY_REF_INTERPRETER"
#: The export's file name (``--export``) and the top-level folders it leaves out.
EXPORT_NAME = f"dreamerv3-{REF_COMMIT[:7]}.tar.gz"
EXPORT_OMIT = ("scores",)
_OBJECTS_MEMBER = "git-objects.json"
_TREE_MEMBER = "tree"


class SetupError(RuntimeError):
    """The reference set-up is missing, wrong or cannot be made; one-line message."""


def default_root() -> Path:
    """``$DREAMER_PARITY_REF_ROOT``, else ``${XDG_CACHE_HOME:-~/.cache}/dreamer-parity``."""
    env = os.environ.get("DREAMER_PARITY_REF_ROOT")
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "dreamer-parity"


def default_source() -> str:
    """``$DREAMER_PARITY_REF_SOURCE``, else the public GitHub URL."""
    return os.environ.get("DREAMER_PARITY_REF_SOURCE") or DEFAULT_SOURCE


def environment(jax: str = DEFAULT_JAX) -> dict:
    """The :data:`ENVIRONMENTS` entry of ``reference.jax`` value ``jax``.

    Raises:
      SetupError: an unknown value.
    """
    if jax not in ENVIRONMENTS:
        raise SetupError(f"reference.jax: unknown value {jax!r}; expected one of "
                         f"{', '.join(ENVIRONMENTS)}")
    return ENVIRONMENTS[jax]


def setup_hint(jax: str = DEFAULT_JAX) -> str:
    """The command that makes environment ``jax``'s set-up."""
    return environment(jax)["hint"]


def checkout_dir(root) -> Path:
    """``<root>/dreamerv3-29eb964`` (one checkout for every environment)."""
    return Path(root) / f"dreamerv3-{REF_COMMIT[:7]}"


def objects_file(root) -> Path:
    """``<root>/dreamerv3-29eb964.git-objects.json``: the git objects of a checkout made
    from an export (absent beside a git checkout)."""
    return Path(root) / f"dreamerv3-{REF_COMMIT[:7]}.git-objects.json"


def given_interpreter() -> str | None:
    """``$DREAMER_PARITY_REF_INTERPRETER`` resolved on ``PATH`` (None when unset).

    Raises:
      SetupError: set, but no such interpreter.
    """
    value = os.environ.get(INTERPRETER_ENV, "").strip()
    if not value:
        return None
    found = shutil.which(value)
    if not found:
        raise SetupError(f"{INTERPRETER_ENV}={value}: no such interpreter")
    return found


def venv_dir(root, jax: str = DEFAULT_JAX) -> Path:
    """``<root>/refvenv`` (``refvenv-jax010`` for jax 0.10.2, ``refvenv-jax011`` for 0.11.2)."""
    return Path(root) / environment(jax)["venv"]


def venv_python(root, jax: str = DEFAULT_JAX) -> Path:
    """The interpreter that runs the reference: the given one (:data:`INTERPRETER_ENV`),
    else ``<venv>/bin/python``."""
    given = given_interpreter()
    if given:
        return Path(given)
    return venv_dir(root, jax) / "bin" / "python"


def jaxcache_dir(root, jax: str = DEFAULT_JAX) -> Path:
    """``<root>/jaxcache`` (``jaxcache-jax010``, ``jaxcache-jax011``): the reference
    processes' persistent compilation cache."""
    return Path(root) / environment(jax)["jaxcache"]


def lock_file(jax: str = DEFAULT_JAX) -> Path:
    """This repository's lock of environment ``jax``: ``requirements-reference.lock``,
    ``requirements-reference-jax010.lock`` or ``requirements-reference-jax011.lock``."""
    return _REPO_ROOT / environment(jax)["lock"]


def _git(*args, cwd=None, check=True) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                              check=check, env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    except FileNotFoundError:
        raise SetupError("git is not installed; install git and rerun "
                         f"`{SETUP_HINT}`") from None


def _git_hash(kind: str, data: bytes) -> str:
    return hashlib.sha1(f"{kind} {len(data)}".encode() + b"\0" + data).hexdigest()


def _tree_entries(raw: bytes) -> list[tuple[str, str, str]]:
    """``[(mode, name, sha)]`` of a raw git tree object."""
    out, i = [], 0
    while i < len(raw):
        sp = raw.index(b" ", i)
        nul = raw.index(b"\0", sp)
        out.append((raw[i:sp].decode(), raw[sp + 1:nul].decode("utf-8", "surrogateescape"),
                    raw[nul + 1:nul + 21].hex()))
        i = nul + 21
    return out


def verify_export_tree(path, objects: dict) -> dict:
    """Prove that the files under ``path`` are :data:`REF_COMMIT`'s, by git's own hashes.

    Args:
      path: the checkout made from an export (no ``.git``).
      objects: the export's ``git-objects.json``: ``{"commit": REF_COMMIT, "omit": [top-level
        folders left out], "objects": {sha: base64 of the raw object}}`` holding the commit
        object and every tree object of the commit.  Only the folders of
        :data:`EXPORT_OMIT` may be absent, whatever ``omit`` says.

    Returns:
      ``{"commit": REF_COMMIT, "files": int (checked), "omitted": [top-level folders of the
      commit absent here, each one the export leaves out]}``.

    Raises:
      SetupError: an object that does not hash to its name, a file that differs from its
        entry (content or executable bit), a file the commit does not hold, or a file
        missing that the export does not leave out.
    """
    path = Path(path)
    omit = EXPORT_OMIT   # fixed here: the objects file is not what allows a file to be absent
    try:
        raw = {sha: base64.b64decode(v) for sha, v in objects["objects"].items()}
    except (KeyError, TypeError, AttributeError, ValueError):
        raise SetupError("the export's git objects are unreadable; make it again with "
                         "`python -m dreamer_parity.reference.setup --export DIR`") from None
    commit = raw.get(REF_COMMIT)
    if commit is None or _git_hash("commit", commit) != REF_COMMIT:
        raise SetupError(f"the export's commit object does not hash to {REF_COMMIT[:12]}")
    first = commit.split(b"\n", 1)[0].split()
    if len(first) != 2 or first[0] != b"tree":
        raise SetupError("the export's commit object names no tree")
    expected: dict[str, tuple[str, str]] = {}
    todo = [(first[1].decode(), "")]
    while todo:
        sha, prefix = todo.pop()
        tree = raw.get(sha)
        if tree is None or _git_hash("tree", tree) != sha:
            raise SetupError(f"the export's tree {prefix or '/'} is missing or does not hash to "
                             f"{sha[:12]}")
        for mode, name, child in _tree_entries(tree):
            if mode == "40000":
                todo.append((child, f"{prefix}{name}/"))
            elif mode in ("100644", "100755"):
                expected[prefix + name] = (mode, child)
            else:
                raise SetupError(f"{prefix}{name}: git mode {mode} is not supported in an export")
    present = set()
    for dirpath, dirnames, filenames in os.walk(path):
        for f in filenames:
            present.add((Path(dirpath) / f).relative_to(path).as_posix())
        for d in dirnames:
            if (Path(dirpath) / d).is_symlink():
                present.add((Path(dirpath) / d).relative_to(path).as_posix())
    extra = sorted(present - set(expected))
    if extra:
        raise SetupError(f"{path} has {len(extra)} file(s) the commit does not hold "
                         f"({', '.join(extra[:3])}); the reference must be unmodified: remove "
                         f"the directory and set it up again")
    omitted = set()
    for rel, (mode, sha) in sorted(expected.items()):
        if rel not in present:
            top = rel.split("/", 1)[0]
            if top not in omit:
                raise SetupError(f"{path}: {rel} is missing (deleted); the reference must be "
                                 f"unmodified: remove the directory and set it up again")
            omitted.add(top)
            continue
        f = path / rel
        if f.is_symlink() or _git_hash("blob", f.read_bytes()) != sha:
            raise SetupError(f"{path}: {rel} differs from commit {REF_COMMIT[:7]} (modified); "
                             f"the reference must be unmodified: remove the directory and set "
                             f"it up again")
        if (mode == "100755") != bool(f.stat().st_mode & 0o100):
            raise SetupError(f"{path}: {rel} has another executable bit than the commit's")
    return {"commit": REF_COMMIT, "files": len(present), "omitted": sorted(omitted)}


def _read_objects(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        raise SetupError(f"{path.name} is unreadable; remove the checkout and set it up "
                         f"again") from None


def checkout_state(path) -> dict:
    """What the reference checkout at ``path`` is, for a run's provenance.

    Returns:
      ``{"commit", "dirty"}`` of a git checkout (None values where git cannot say), or
      for a checkout made from an export ``{"commit": REF_COMMIT, "dirty": False,
      "verified": "git objects of the export (no .git)", "omitted": [...]}`` once
      :func:`verify_export_tree` has passed (``{"commit": None, "dirty": None, "error":
      ...}`` when it does not).  Runs no git in an export's checkout, so a checkout under
      another git tree is never taken for that tree.
    """
    path = Path(path)
    if (path / ".git").exists():
        try:
            commit = _git("rev-parse", "HEAD", cwd=path).stdout.strip()
            dirty = bool(_git("status", "--porcelain", cwd=path).stdout.strip())
            return {"commit": commit, "dirty": dirty}
        except (SetupError, subprocess.CalledProcessError):
            return {"commit": None, "dirty": None}
    try:
        v = verify_export_tree(path, _read_objects(objects_file(path.parent)))
    except SetupError as e:
        return {"commit": None, "dirty": None, "error": str(e)[:200]}
    return {"commit": v["commit"], "dirty": False,
            "verified": "git objects of the export (no .git)", "omitted": v["omitted"]}


def check_checkout(path) -> None:
    """Verify a reference checkout: HEAD is :data:`REF_COMMIT` and ``git status`` is clean;
    or, for a checkout made from an export (no ``.git``, ``<name>.git-objects.json``
    beside it), :func:`verify_export_tree`.

    Raises:
      SetupError: missing directory, not a git checkout, another commit, or local changes
        (modified, deleted or untracked files), with what to do.
    """
    path = Path(path)
    if not path.is_dir():
        raise SetupError(f"reference checkout missing ({path.name} under the set-up root); "
                         f"run `{SETUP_HINT}`")
    if not (path / ".git").exists() and objects_file(path.parent).exists():
        verify_export_tree(path, _read_objects(objects_file(path.parent)))
        return
    head = _git("rev-parse", "HEAD", cwd=path, check=False)
    if head.returncode != 0:
        raise SetupError(f"{path} is not a git checkout; remove it and run `{SETUP_HINT}`")
    commit = head.stdout.strip()
    top = _git("rev-parse", "--show-toplevel", cwd=path, check=False).stdout.strip()
    if not top or Path(top).resolve() != path.resolve():
        raise SetupError(f"{path} is not the top of a git checkout; remove it and run "
                         f"`{SETUP_HINT}`")
    if commit != REF_COMMIT:
        raise SetupError(
            f"{path} is at commit {commit[:12]}, not {REF_COMMIT[:12]}; refusing to use or "
            f"change it: remove the directory and run `{SETUP_HINT}`")
    status = _git("status", "--porcelain", cwd=path).stdout
    if status.strip():
        n = len(status.strip().splitlines())
        raise SetupError(
            f"{path} has {n} local change(s) (git status not clean); the reference must be "
            f"unmodified: remove the directory and run `{SETUP_HINT}`")


def _export_archive(src: Path) -> Path | None:
    """The export archive a source names: the file itself, or :data:`EXPORT_NAME` inside a
    folder that is not a git directory; None otherwise."""
    if src.is_file() and src.name.endswith(".tar.gz"):
        return src
    if src.is_dir() and (src / EXPORT_NAME).is_file() and not (src / ".git").exists() \
            and not (src / "HEAD").exists():
        return src / EXPORT_NAME
    return None


def _unpack_export(archive: Path, root, log=print) -> None:
    """Unpack an export into ``<root>``: verified in a temporary folder first, then the
    objects file and the checkout renamed into place (nothing left behind on failure)."""
    target = checkout_dir(root)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=target.parent))
    log(f"unpacking the reference from the export {archive.name} ...")
    try:
        try:
            with tarfile.open(archive, "r:gz") as tar:
                members = tar.getmembers()
                for m in members:
                    name = m.name
                    ok = (name == _OBJECTS_MEMBER and m.isfile()) or (
                        (name == _TREE_MEMBER or name.startswith(_TREE_MEMBER + "/"))
                        and (m.isfile() or m.isdir()) and ".." not in Path(name).parts)
                    if not ok:
                        raise SetupError(f"{archive.name}: member {name[:80]!r} is not part of "
                                         f"an export")
                tar.extractall(tmp, members=members, filter="data")
        except (tarfile.TarError, OSError, EOFError) as e:
            raise SetupError(f"{archive.name} is not a readable export ({type(e).__name__}); "
                             f"make it again with --export") from None
        objects = _read_objects(tmp / _OBJECTS_MEMBER)
        tree = tmp / _TREE_MEMBER
        tree.mkdir(exist_ok=True)
        verify_export_tree(tree, objects)
        tmp_objects = objects_file(root).with_name(objects_file(root).name + f".tmp-{os.getpid()}")
        shutil.copyfile(tmp / _OBJECTS_MEMBER, tmp_objects)
        os.replace(tmp_objects, objects_file(root))
        try:
            os.rename(tree, target)
        except OSError:
            if not target.exists():
                raise
        check_checkout(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def export(dest, source: str | None = None, log=print) -> Path:
    """Write the export ``dest/dreamerv3-29eb964.tar.gz`` (module doc) from a local git
    directory holding :data:`REF_COMMIT` (``source``, else ``$DREAMER_PARITY_REF_SOURCE``,
    else the set-up's git checkout).

    The archive is deterministic: members sorted, times and owners zero.

    Returns:
      The archive's path.

    Raises:
      SetupError: no local git directory holding the commit.
    """
    src = source or os.environ.get("DREAMER_PARITY_REF_SOURCE") or str(checkout_dir(default_root()))
    src = Path(src).expanduser()
    if not src.is_dir() or _git("cat-file", "-e", f"{REF_COMMIT}^{{commit}}", cwd=src,
                                check=False).returncode != 0:
        raise SetupError(f"--export needs a local git directory holding {REF_COMMIT[:7]} "
                         f"(--source or DREAMER_PARITY_REF_SOURCE); {src} is not one")

    def cat(kind, sha) -> bytes:
        r = subprocess.run(["git", "cat-file", kind, sha], cwd=src, capture_output=True,
                           check=True)
        return r.stdout

    objects = {REF_COMMIT: cat("commit", REF_COMMIT)}
    listing = subprocess.run(["git", "ls-tree", "-r", "-t", "-z", REF_COMMIT], cwd=src,
                             capture_output=True, check=True).stdout
    root_tree = objects[REF_COMMIT].split(b"\n", 1)[0].split()[1].decode()
    objects[root_tree] = cat("tree", root_tree)
    files = []
    for entry in filter(None, listing.split(b"\0")):
        meta, name = entry.split(b"\t", 1)
        mode, kind, sha = meta.decode().split()
        name = name.decode("utf-8", "surrogateescape")
        if kind == "tree":
            objects[sha] = cat("tree", sha)
        elif name.split("/", 1)[0] not in EXPORT_OMIT:
            files.append((name, mode, sha))
    payload = json.dumps({"commit": REF_COMMIT, "omit": list(EXPORT_OMIT),
                          "objects": {k: base64.b64encode(v).decode()
                                      for k, v in sorted(objects.items())}},
                         indent=0, sort_keys=True).encode()
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / EXPORT_NAME
    tmp = out.with_name(out.name + f".tmp-{os.getpid()}")

    def add(tar, name, data: bytes, mode=0o644):
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), mode, 0
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        tar.addfile(info, io.BytesIO(data))

    with open(tmp, "wb") as raw_out:
        with gzip.GzipFile(fileobj=raw_out, mode="wb", mtime=0, filename="") as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                add(tar, _OBJECTS_MEMBER, payload)
                for name, mode, sha in sorted(files):
                    add(tar, f"{_TREE_MEMBER}/{name}", cat("blob", sha),
                        0o755 if mode == "100755" else 0o644)
    os.replace(tmp, out)
    log(f"export of {REF_COMMIT[:7]}: {out} ({out.stat().st_size / 2**20:.2f} MiB, "
        f"{len(files)} files; left out: {', '.join(EXPORT_OMIT)})")
    return out


def ensure_checkout(root, source: str | None = None, log=print) -> bool:
    """Make ``<root>/dreamerv3-29eb964`` if absent, then verify it.

    The clone is made in a temporary sibling directory and renamed into place, so a
    failed or interrupted clone leaves nothing behind.

    Returns:
      True when a checkout was made, False when a valid one already existed.

    Raises:
      SetupError: the existing checkout is wrong (see :func:`check_checkout`), the source
        cannot be reached (e.g. no network), or it lacks the commit.
    """
    target = checkout_dir(root)
    if target.exists():
        check_checkout(target)
        return False
    source = source or default_source()
    src_path = Path(source).expanduser()
    if src_path.exists():
        source = str(src_path.resolve())
    archive = _export_archive(src_path) if src_path.exists() else None
    if archive is not None:
        _unpack_export(archive, root, log)
        return True
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".clone-", dir=target.parent))
    try:
        log(f"cloning the reference from {source} ...")
        r = _git("clone", "--quiet", "--no-checkout", source, str(tmp / "repo"), check=False)
        if r.returncode != 0:
            last = (r.stderr.strip().splitlines() or ["unknown error"])[-1]
            raise SetupError(
                f"cannot clone the reference from {source} ({last}); without network access "
                "set DREAMER_PARITY_REF_SOURCE (or --source) to a local clone or mirror of "
                f"danijar/dreamerv3 holding commit {REF_COMMIT[:7]}, then rerun `{SETUP_HINT}`")
        r = _git("checkout", "--quiet", "--detach", REF_COMMIT, cwd=tmp / "repo", check=False)
        if r.returncode != 0:
            raise SetupError(f"the source {source} does not hold commit {REF_COMMIT}; use a "
                             f"clone of danijar/dreamerv3 that does and rerun `{SETUP_HINT}`")
        check_checkout(tmp / "repo")
        try:
            os.rename(tmp / "repo", target)
        except OSError:
            if not target.exists():
                raise
            # Another set-up finished first: verify theirs.
        check_checkout(target)
        return True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def read_lock(path=None) -> dict[str, str]:
    """The pins of a reference lock file (default: :func:`lock_file`), ``{normalised name:
    version}``, read by :func:`dreamer_parity.provenance.read_pins` with its errors as
    :class:`SetupError`.

    Raises:
      SetupError: a line that is not a pin (naming file and line), or a missing file.
    """
    path = Path(path or lock_file())
    if not path.exists():
        raise SetupError(f"lock file {path.name} missing")
    try:
        return provenance.read_pins(path)
    except provenance.LockError as e:
        raise SetupError(str(e)) from None


def _installed(python) -> dict[str, str]:
    # Without the caller's PYTHONPATH: a DVC stage runs with PYTHONPATH=src, where the editable
    # install's dreamer_parity.egg-info would be listed as a package of the venv.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([str(python), "-m", "pip", "list", "--format=freeze",
                        "--disable-pip-version-check"],
                       capture_output=True, text=True, check=False, env=env)
    if r.returncode != 0:
        raise SetupError(f"cannot list the packages of {python} ({r.stderr.strip()[-200:]})")
    out = {}
    for line in r.stdout.splitlines():
        if "==" in line:
            name, ver = line.split("==", 1)
            out[provenance.normalise(name)] = ver.strip()
    for tool in ("pip", "setuptools", "wheel"):
        out.pop(tool, None)
    return out


def venv_mismatches(root, lock=None, jax: str = DEFAULT_JAX) -> list[str]:
    """Differences between the venv's installed distributions and the lock file.

    Returns:
      A list of one-line descriptions (``missing x==1``, ``x 2 != lock 1``, ``extra y``);
      empty when the venv matches.  A missing venv gives ``["venv missing"]``.  With a given
      interpreter (:data:`INTERPRETER_ENV`): :func:`interpreter_differences`' refusals only.
    """
    lock = lock or lock_file(jax)
    if given_interpreter():
        return interpreter_differences(venv_python(root, jax), lock)["refused"]
    py = venv_python(root, jax)
    if not py.exists():
        return ["venv missing"]
    pins = read_lock(lock)
    have = _installed(py)
    out = []
    for name, ver in sorted(pins.items()):
        if name not in have:
            out.append(f"missing {name}=={ver}")
        elif have[name] != ver:
            out.append(f"{name} {have[name]} != lock {ver}")
    out += [f"extra {name}=={have[name]}" for name in sorted(set(have) - set(pins))]
    return out


_VERSIONS_CODE = ("import json, sys\nfrom importlib import metadata\nout = {}\n"
                  "for p in sys.argv[1:]:\n"
                  "    try: out[p] = metadata.version(p)\n"
                  "    except metadata.PackageNotFoundError: out[p] = None\n"
                  "print(json.dumps(out))")


def installed_here(names) -> dict[str, str | None]:
    """``{name: version or None}`` of distributions ``names`` as this interpreter sees them."""
    from importlib import metadata

    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            out[n] = None
    return out


def lock_differences(pins: dict[str, str], have: dict[str, str | None]) -> dict:
    """``{"missing": [...], "pinned": [...], "off_lock": [...]}``: lock packages not
    installed (``name==version``), those of jax, jaxlib, numpy that differ from the lock and
    the other packages that do (``name installed != lock version``)."""
    out = {"missing": [], "pinned": [], "off_lock": []}
    for name, ver in sorted(pins.items()):
        got = have.get(name)
        if got is None:
            out["missing"].append(f"{name}=={ver}")
        elif got != ver:
            key = "pinned" if name in ("jax", "jaxlib", "numpy") else "off_lock"
            out[key].append(f"{name} {got} != lock {ver}")
    return out


def interpreter_differences(python, lock) -> dict:
    """A given interpreter (with the caller's ``PYTHONPATH``) against a lock.

    Returns:
      :func:`lock_differences` plus ``"refused"``: what stops a run (a missing package,
      or jax, jaxlib or numpy off the lock), one line each.

    Raises:
      SetupError: the interpreter cannot be run.
    """
    pins = read_lock(lock)
    env = dict(os.environ)
    try:
        r = subprocess.run([str(python), "-c", _VERSIONS_CODE, *pins], capture_output=True,
                           text=True, check=True, timeout=120, env=env)
        have = {provenance.normalise(k): v for k, v in json.loads(r.stdout).items()}
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        raise SetupError(f"cannot read the package versions of {python} "
                         f"({type(e).__name__})") from None
    out = lock_differences(pins, have)
    out["refused"] = [f"missing {m}" for m in out["missing"]] + out["pinned"]
    return out


def _python_version(py: str) -> str | None:
    """``"3.12"`` of a working interpreter ``py``, None where it does not run (a pyenv shim
    of a version pyenv has not selected exits non-zero)."""
    try:
        r = subprocess.run([py, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                           capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def find_python(version: str = "3.11") -> str | None:
    """A working interpreter of Python ``version`` (``"3.11"``, ``"3.12"``): the one
    :data:`PYTHON_ENV` names (taken as given, even when it does not run), else
    ``python<version>`` on ``PATH`` when it runs, else pyenv's newest installed
    ``<version>.x`` (a pyenv shim on ``PATH`` runs only the versions pyenv selects), else
    this interpreter when it is that version; None when there is none.

    Raises:
      ValueError: a version :data:`PYTHON_ENV` does not know.
    """
    if version not in PYTHON_ENV:
        raise ValueError(f"Python {version!r}: expected one of {', '.join(PYTHON_ENV)}")
    named = os.environ.get(PYTHON_ENV[version])
    if named:
        return named
    on_path = shutil.which(f"python{version}")
    if on_path and _python_version(on_path) == version:
        return on_path
    if shutil.which("pyenv"):
        try:
            r = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True, text=True,
                               timeout=60, check=False)
            found = sorted((v for v in r.stdout.split()
                            if re.fullmatch(re.escape(version) + r"\.\d+", v)),
                           key=lambda v: int(v.rsplit(".", 1)[1]))
            if found:
                r = subprocess.run(["pyenv", "which", f"python{version}"], capture_output=True,
                                   text=True, timeout=60, check=False,
                                   env={**os.environ, "PYENV_VERSION": found[-1]})
                if r.returncode == 0 and _python_version(r.stdout.strip()) == version:
                    return r.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    if "%d.%d" % sys.version_info[:2] == version:
        return sys.executable
    return None


def _base_python(jax: str = DEFAULT_JAX) -> str:
    version = environment(jax)["python"]
    found = find_python(version)
    if found:
        return found
    raise SetupError(f"python{version} not found (the lock of reference.jax {jax} needs Python "
                     f"{version}; PATH, pyenv); set {PYTHON_ENV[version]} to a Python {version} "
                     f"and rerun `{setup_hint(jax)}`")


def ensure_venv(root, lock=None, log=print, jax: str = DEFAULT_JAX) -> bool:
    """Make the venv of environment ``jax`` (``<root>/refvenv``, ``refvenv-jax010``,
    ``refvenv-jax011``) with its Python (:func:`find_python`) from its lock file unless it
    already matches it.  With a given interpreter
    (:data:`INTERPRETER_ENV`) nothing is made: that interpreter is checked
    (:func:`interpreter_differences`).

    Returns:
      True when packages were installed, False when the venv already matched.

    Raises:
      SetupError: no interpreter of the environment's Python version; pip cannot install
        the lock (e.g. no access to the package index), or
        the venv still differs from the lock afterwards (extra packages are not removed:
        delete the venv and rerun); a given interpreter lacks a package of the lock or has
        other jax, jaxlib or numpy versions.
    """
    lock = Path(lock or lock_file(jax))
    hint = setup_hint(jax)
    if given_interpreter():
        py = venv_python(root, jax)
        diff = interpreter_differences(py, lock)
        if diff["refused"]:
            raise SetupError(f"{INTERPRETER_ENV}={py.name} does not hold {lock.name} "
                             f"({'; '.join(diff['refused'][:5])}); install them there "
                             f"(for the TPU machine: the wheels of `make tpu-reference`)")
        if diff["off_lock"]:
            log(f"{py.name}: versions off {lock.name} (recorded by each run): "
                f"{'; '.join(diff['off_lock'])}")
        return False
    diff = venv_mismatches(root, lock, jax)
    if not diff:
        return False
    vdir = venv_dir(root, jax)
    if diff != ["venv missing"]:
        log(f"reference venv differs from {lock.name}: {'; '.join(diff[:5])}")
        if any(d.startswith("extra ") for d in diff):
            raise SetupError(
                f"{vdir} holds packages that are not in {lock.name} ({'; '.join(diff[:5])}); "
                f"remove {vdir} and rerun `{hint}`")
    else:
        log(f"creating the reference venv {vdir.name} from {lock.name} ...")
        r = subprocess.run([_base_python(jax), "-m", "venv", str(vdir)], capture_output=True,
                           text=True, check=False)
        if r.returncode != 0:
            raise SetupError(f"cannot create {vdir}: {r.stderr.strip()[-300:]}")
    r = subprocess.run([str(venv_python(root, jax)), "-m", "pip", "install", "-q",
                        "--disable-pip-version-check", "-r", str(lock)],
                       capture_output=True, text=True, check=False)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["unknown error"])[-1]
        raise SetupError(
            f"pip could not install {lock.name} into {vdir} ({last}); check access to the "
            f"package index (PIP_INDEX_URL / PIP_FIND_LINKS) and rerun `{hint}`")
    diff = venv_mismatches(root, lock, jax)
    if diff:
        raise SetupError(f"{vdir} still differs from {lock.name} after install "
                         f"({'; '.join(diff[:5])}); remove it and rerun `{hint}`")
    return True


def check_setup(root=None, check_packages: bool = True, jax: str = DEFAULT_JAX) -> dict:
    """Verify an existing set-up of environment ``jax`` without changing anything.

    Returns:
      ``{"root", "checkout", "python", "jaxcache", "jax", "lock", "version_set",
      "interpreter"}``: Paths, the environment's ``reference.jax`` value, its lock's file
      name, its version set (None for 0.4.26), and ``"venv"`` or ``"given"``
      (:data:`INTERPRETER_ENV`).

    Raises:
      SetupError: naming the set-up command, when the checkout or venv is missing or wrong.
    """
    root = Path(root) if root else default_root()
    env = environment(jax)
    hint = env["hint"]
    check_checkout(checkout_dir(root))
    given = given_interpreter()
    py = venv_python(root, jax)
    if not py.exists():
        raise SetupError(f"reference venv missing ({env['venv']} under the set-up root); "
                         f"run `{hint}`")
    if check_packages:
        diff = venv_mismatches(root, jax=jax)
        if diff:
            raise SetupError(f"reference venv differs from {env['lock']} "
                             f"({'; '.join(diff[:3])}); run `{hint}`")
    return {"root": root, "checkout": checkout_dir(root), "python": py,
            "jaxcache": jaxcache_dir(root, jax), "jax": jax, "lock": env["lock"],
            "version_set": env["version_set"], "interpreter": "given" if given else "venv"}


@contextlib.contextmanager
def _locked(root: Path):
    import fcntl

    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".setup.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def setup(root=None, source: str | None = None, log=print, jax: str = DEFAULT_JAX) -> dict:
    """Make (or verify) the checkout, the venv of environment ``jax`` and its cache
    directory; see module doc.

    Returns:
      ``{"root", "checkout", "python", "jaxcache", ..., "made": [what was made]}``
      (:func:`check_setup`'s keys).

    Raises:
      SetupError: see :func:`ensure_checkout` and :func:`ensure_venv`.
    """
    root = Path(root) if root else default_root()
    environment(jax)
    made = []
    with _locked(root):
        if ensure_checkout(root, source, log=log):
            made.append("checkout")
        if ensure_venv(root, log=log, jax=jax):
            made.append("venv")
        jaxcache_dir(root, jax).mkdir(parents=True, exist_ok=True)
    info = check_setup(root, check_packages=False, jax=jax)
    info["made"] = made
    return info


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dreamer_parity.reference.setup",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jax", default=DEFAULT_JAX, choices=tuple(ENVIRONMENTS),
                    help="the environment (reference.jax): 0.4.26 (requirements-reference.lock,"
                         " the default), 0.10.2 (requirements-reference-jax010.lock) or 0.11.2 "
                         "(requirements-reference-jax011.lock, Python 3.12)")
    ap.add_argument("--source", default=None,
                    help="git URL or local git directory holding the reference commit, or an "
                         "export (default: $DREAMER_PARITY_REF_SOURCE or the GitHub URL)")
    ap.add_argument("--root", default=None,
                    help="set-up directory (default: $DREAMER_PARITY_REF_ROOT or "
                         "${XDG_CACHE_HOME:-~/.cache}/dreamer-parity)")
    ap.add_argument("--check", action="store_true",
                    help="only verify an existing set-up; change nothing")
    ap.add_argument("--export", default=None, metavar="DIR",
                    help=f"write the export DIR/{EXPORT_NAME} from a local git directory "
                         f"(--source) and exit")
    args = ap.parse_args(argv)
    try:
        if args.export:
            export(args.export, args.source)
            return 0
        if args.check:
            info = check_setup(args.root, jax=args.jax)
            info["made"] = []
        else:
            info = setup(args.root, args.source, jax=args.jax)
    except SetupError as e:
        print(f"reference setup: error: {e}", file=sys.stderr)
        return 2
    what = ", ".join(info["made"]) or "nothing to do"
    kind = ("the given interpreter holds" if info["interpreter"] == "given"
            else f"{environment(args.jax)['venv']} matches")
    print(f"reference setup ok ({what}): checkout {REF_COMMIT[:7]} clean, {kind} "
          f"{lock_file(args.jax).name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Set up the reference: a verified git checkout of danijar/dreamerv3 at 29eb964 and its venv.

Command line (main venv; idempotent; safe to run from several clones at once)::

    python -m dreamer_parity.reference.setup [--source URL_OR_DIR] [--root DIR] [--check]

Layout under the root (default ``${XDG_CACHE_HOME:-~/.cache}/dreamer-parity``, or the
environment variable ``DREAMER_PARITY_REF_ROOT``)::

    <root>/dreamerv3-29eb964/   git checkout, HEAD = REF_COMMIT, no local changes, never edited
    <root>/refvenv/             virtual environment installed from requirements-reference.lock
    <root>/jaxcache/            JAX persistent compilation cache of the reference processes

The source (``--source``, else ``DREAMER_PARITY_REF_SOURCE``, else the public GitHub URL)
is any git URL or local git directory (bare or not) that holds the commit.  An existing
checkout is verified by its full commit hash and a clean ``git status``; a checkout at
another commit or with local changes is refused (nothing is changed).  An existing venv is
reused when its installed distributions equal the lock file exactly.

Every failure is one message naming what to do (exit status 2), never a traceback.
Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = [
    "REF_COMMIT", "DEFAULT_SOURCE", "SetupError", "default_root", "default_source",
    "checkout_dir", "venv_dir", "venv_python", "jaxcache_dir", "lock_file",
    "check_checkout", "ensure_checkout", "read_lock", "venv_mismatches", "ensure_venv",
    "check_setup", "setup", "SETUP_HINT",
]

REF_COMMIT = "29eb964e2918a3f4db04086f7f51b60388e97f3d"
DEFAULT_SOURCE = "https://github.com/danijar/dreamerv3"
SETUP_HINT = "make reference-setup"
_REPO_ROOT = Path(__file__).resolve().parents[3]


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


def checkout_dir(root) -> Path:
    """``<root>/dreamerv3-29eb964``."""
    return Path(root) / f"dreamerv3-{REF_COMMIT[:7]}"


def venv_dir(root) -> Path:
    """``<root>/refvenv``."""
    return Path(root) / "refvenv"


def venv_python(root) -> Path:
    """``<root>/refvenv/bin/python``."""
    return venv_dir(root) / "bin" / "python"


def jaxcache_dir(root) -> Path:
    """``<root>/jaxcache``: the reference processes' persistent compilation cache."""
    return Path(root) / "jaxcache"


def lock_file() -> Path:
    """This repository's ``requirements-reference.lock``."""
    return _REPO_ROOT / "requirements-reference.lock"


def _git(*args, cwd=None, check=True) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                              check=check, env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    except FileNotFoundError:
        raise SetupError("git is not installed; install git and rerun "
                         f"`{SETUP_HINT}`") from None


def check_checkout(path) -> None:
    """Verify a reference checkout: HEAD is :data:`REF_COMMIT` and ``git status`` is clean.

    Raises:
      SetupError: missing directory, not a git checkout, another commit, or local changes
        (modified, deleted or untracked files), with what to do.
    """
    path = Path(path)
    if not path.is_dir():
        raise SetupError(f"reference checkout missing ({path.name} under the set-up root); "
                         f"run `{SETUP_HINT}`")
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


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path=None) -> dict[str, str]:
    """Read ``name==version`` pins of a lock file: ``{normalised name: version}``.

    Raises:
      SetupError: a line that is not a pin (naming file and line), or a missing file.
    """
    path = Path(path or lock_file())
    if not path.exists():
        raise SetupError(f"lock file {path.name} missing")
    pins = {}
    for i, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        if not m:
            raise SetupError(f"{path.name}:{i}: expected name==version, got {line!r}")
        pins[_norm(m.group(1))] = m.group(2)
    return pins


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
            out[_norm(name)] = ver.strip()
    for tool in ("pip", "setuptools", "wheel"):
        out.pop(tool, None)
    return out


def venv_mismatches(root, lock=None) -> list[str]:
    """Differences between the venv's installed distributions and the lock file.

    Returns:
      A list of one-line descriptions (``missing x==1``, ``x 2 != lock 1``, ``extra y``);
      empty when the venv matches.  A missing venv gives ``["venv missing"]``.
    """
    py = venv_python(root)
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


def _base_python() -> str:
    env = os.environ.get("DREAMER_PARITY_REF_PYTHON")
    if env:
        return env
    found = shutil.which("python3.11")
    if found:
        return found
    if sys.version_info[:2] == (3, 11):
        return sys.executable
    raise SetupError("python3.11 not found (the reference lock needs Python 3.11); set "
                     f"DREAMER_PARITY_REF_PYTHON to a Python 3.11 and rerun `{SETUP_HINT}`")


def ensure_venv(root, lock=None, log=print) -> bool:
    """Make ``<root>/refvenv`` from the lock file unless it already matches it.

    Returns:
      True when packages were installed, False when the venv already matched.

    Raises:
      SetupError: pip cannot install the lock (e.g. no access to the package index), or
        the venv still differs from the lock afterwards (extra packages are not removed:
        delete the venv and rerun).
    """
    lock = Path(lock or lock_file())
    diff = venv_mismatches(root, lock)
    if not diff:
        return False
    vdir = venv_dir(root)
    if diff != ["venv missing"]:
        log(f"reference venv differs from {lock.name}: {'; '.join(diff[:5])}")
        if any(d.startswith("extra ") for d in diff):
            raise SetupError(
                f"{vdir} holds packages that are not in {lock.name} ({'; '.join(diff[:5])}); "
                f"remove {vdir} and rerun `{SETUP_HINT}`")
    else:
        log(f"creating the reference venv from {lock.name} ...")
        r = subprocess.run([_base_python(), "-m", "venv", str(vdir)], capture_output=True,
                           text=True, check=False)
        if r.returncode != 0:
            raise SetupError(f"cannot create {vdir}: {r.stderr.strip()[-300:]}")
    r = subprocess.run([str(venv_python(root)), "-m", "pip", "install", "-q",
                        "--disable-pip-version-check", "-r", str(lock)],
                       capture_output=True, text=True, check=False)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["unknown error"])[-1]
        raise SetupError(
            f"pip could not install {lock.name} into {vdir} ({last}); check access to the "
            f"package index (PIP_INDEX_URL / PIP_FIND_LINKS) and rerun `{SETUP_HINT}`")
    diff = venv_mismatches(root, lock)
    if diff:
        raise SetupError(f"{vdir} still differs from {lock.name} after install "
                         f"({'; '.join(diff[:5])}); remove it and rerun `{SETUP_HINT}`")
    return True


def check_setup(root=None, check_packages: bool = True) -> dict:
    """Verify an existing set-up without changing anything.

    Returns:
      ``{"root", "checkout", "python", "jaxcache"}`` as Paths.

    Raises:
      SetupError: naming the set-up command, when the checkout or venv is missing or wrong.
    """
    root = Path(root) if root else default_root()
    check_checkout(checkout_dir(root))
    py = venv_python(root)
    if not py.exists():
        raise SetupError(f"reference venv missing (refvenv under the set-up root); "
                         f"run `{SETUP_HINT}`")
    if check_packages:
        diff = venv_mismatches(root)
        if diff:
            raise SetupError(f"reference venv differs from requirements-reference.lock "
                             f"({'; '.join(diff[:3])}); run `{SETUP_HINT}`")
    return {"root": root, "checkout": checkout_dir(root), "python": py,
            "jaxcache": jaxcache_dir(root)}


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


def setup(root=None, source: str | None = None, log=print) -> dict:
    """Make (or verify) the checkout, the venv and the cache directory; see module doc.

    Returns:
      ``{"root", "checkout", "python", "jaxcache", "made": [what was made]}``.

    Raises:
      SetupError: see :func:`ensure_checkout` and :func:`ensure_venv`.
    """
    root = Path(root) if root else default_root()
    made = []
    with _locked(root):
        if ensure_checkout(root, source, log=log):
            made.append("checkout")
        if ensure_venv(root, log=log):
            made.append("venv")
        jaxcache_dir(root).mkdir(parents=True, exist_ok=True)
    info = check_setup(root, check_packages=False)
    info["made"] = made
    return info


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dreamer_parity.reference.setup",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", default=None,
                    help="git URL or local git directory holding the reference commit "
                         "(default: $DREAMER_PARITY_REF_SOURCE or the GitHub URL)")
    ap.add_argument("--root", default=None,
                    help="set-up directory (default: $DREAMER_PARITY_REF_ROOT or "
                         "${XDG_CACHE_HOME:-~/.cache}/dreamer-parity)")
    ap.add_argument("--check", action="store_true",
                    help="only verify an existing set-up; change nothing")
    args = ap.parse_args(argv)
    try:
        if args.check:
            info = check_setup(args.root)
            info["made"] = []
        else:
            info = setup(args.root, args.source)
    except SetupError as e:
        print(f"reference setup: error: {e}", file=sys.stderr)
        return 2
    what = ", ".join(info["made"]) or "nothing to do"
    print(f"reference setup ok ({what}): checkout {REF_COMMIT[:7]} clean, venv matches "
          f"{lock_file().name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where code came from, recorded without absolute paths or host names.

Standard library only: the reference's virtual environment imports this module.

A location is written relative to a named root, ``<name>/relative/path`` (for example
``<repo>/src/dreamer_parity/records.py`` or ``<reference-checkout>/dreamerv3/agent.py``);
a file under no root is recorded by its base name under ``<elsewhere>``.  Code identity
is a git commit plus a dirty flag.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

__all__ = ["git_state", "relative_to_roots", "collect", "cpu_model", "REPO_ROOT",
           "PinError", "read_pins", "check_pins", "ALLOW_VERSIONS_ENV", "PINNED_PACKAGES"]

REPO_ROOT = Path(__file__).resolve().parents[2]

#: Set to ``1`` to run with other versions than the lock pins (a deliberate experiment);
#: the run records ``versions_checked: false, versions_override: true`` in its provenance.
ALLOW_VERSIONS_ENV = "DREAMER_PARITY_ALLOW_VERSIONS"
#: Set by a launcher whose pin check passed for the process it starts (reference runner).
CHECKED_ENV = "DREAMER_PARITY_VERSIONS_CHECKED"
#: Packages whose installed version must equal the lock before a run starts.
PINNED_PACKAGES = ("jax", "jaxlib", "numpy")

_pins_checked = False


class PinError(RuntimeError):
    """An installed package differs from its pin; one line naming package and versions."""


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(".", "-")


def read_pins(lock_file) -> dict[str, str]:
    """``{normalised name: version}`` of the ``name==version`` lines of a lock file."""
    pins = {}
    for line in Path(lock_file).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line and not line.startswith("-"):
            name, version = line.split("==", 1)
            name = name.split("[", 1)[0]
            pins[_norm(name)] = version.split(";", 1)[0].strip()
    return pins


def _installed(packages, python=None) -> dict[str, str | None]:
    if python is None:
        from importlib import metadata

        out = {}
        for p in packages:
            try:
                out[p] = metadata.version(p)
            except metadata.PackageNotFoundError:
                out[p] = None
        return out
    code = ("import json, sys\nfrom importlib import metadata\nout = {}\n"
            "for p in sys.argv[1:]:\n"
            "    try: out[p] = metadata.version(p)\n"
            "    except metadata.PackageNotFoundError: out[p] = None\n"
            "print(json.dumps(out))")
    try:
        r = subprocess.run([str(python), "-c", code, *packages], capture_output=True,
                           text=True, check=True, timeout=120)
        import json

        return json.loads(r.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        raise PinError(f"versions: cannot read the package versions of {Path(python).name} "
                       f"({type(e).__name__})") from None


def check_pins(lock_file, packages: tuple[str, ...] = PINNED_PACKAGES, python=None) -> dict:
    """Compare installed versions with the pins of ``lock_file``.

    Args:
      lock_file: ``requirements.lock`` (candidate) or ``requirements-reference.lock``.
      packages: distribution names to compare.
      python: an interpreter whose packages are meant (another venv); None for this one.

    Returns:
      ``{"checked": bool, "override": bool, "versions": {name: installed}}``: with
      ``$DREAMER_PARITY_ALLOW_VERSIONS=1`` nothing is refused (``checked`` False,
      ``override`` True) and the process's provenance records it (:func:`collect`).

    Raises:
      PinError: ``versions: <package> <installed> installed, <lock> pins <version>
        (...)``, for the first package that differs or is not installed or not pinned.
    """
    global _pins_checked
    lock_file = Path(lock_file)
    installed = _installed(packages, python)
    if os.environ.get(ALLOW_VERSIONS_ENV) == "1":
        return {"checked": False, "override": True, "versions": installed}
    pins = read_pins(lock_file)
    for p in packages:
        want, got = pins.get(_norm(p)), installed.get(p)
        if want is None or got != want:
            raise PinError(
                f"versions: {p} {got or 'not'} installed, {lock_file.name} pins "
                f"{want or 'nothing'} (reinstall from the lock, or set "
                f"{ALLOW_VERSIONS_ENV}=1 for a deliberate experiment; the run records it)")
    if python is None:
        _pins_checked = True
    return {"checked": True, "override": False, "versions": installed}


#: Files of this repository that a round or ``dvc exp run -S`` rewrites; their state is
#: recorded elsewhere (run.json holds the parameters, dvc.lock the outputs), so they do not
#: make the code dirty.
ROUND_FILES = ("params.yaml", "dvc.lock", "metrics", "results", "store")


def git_state(directory, paths: list[str] | None = None, exclude=()) -> dict:
    """Commit and dirty flag of the git tree holding ``directory``.

    Args:
      directory: any directory inside the tree.
      paths: restrict the dirty check to these paths, relative to the tree's top
        (e.g. ``["src"]``), wherever ``directory`` lies in the tree.
      exclude: paths (relative to the tree's top) whose changes do not count.

    Returns:
      ``{"commit": str | None, "dirty": bool | None}``; None values when ``directory`` is
      not in a git tree or git is missing.
    """
    try:
        commit = subprocess.run(
            ["git", "-C", str(directory), "rev-parse", "HEAD"], capture_output=True,
            text=True, check=True).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(directory), "status", "--porcelain", "--untracked-files=no", "--",
             *(f":(top){p}" for p in paths or ([""] if exclude else [])),
             *(f":(top,exclude){p}" for p in exclude)], capture_output=True, text=True,
            check=True).stdout
        return {"commit": commit, "dirty": bool(status.strip())}
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}


def relative_to_roots(path, roots: dict[str, str | os.PathLike]) -> str:
    """Write ``path`` as ``<name>/relative`` for the first root that contains it."""
    p = Path(path).resolve()
    for name, root in roots.items():
        try:
            rel = p.relative_to(Path(root).resolve())
        except ValueError:
            continue
        return f"<{name}>/{rel.as_posix()}" if str(rel) != "." else f"<{name}>"
    return f"<elsewhere>/{p.name}"


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (or platform.processor())."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def collect(extra_trees: dict[str, str | os.PathLike] | None = None,
            modules: tuple[str, ...] = ("jax", "jaxlib", "numpy")) -> dict:
    """Provenance of the current process.

    Args:
      extra_trees: named git trees to record besides this repository (for example
        ``{"reference": <checkout>}``).
      modules: module names whose ``__version__`` is recorded when importable.

    Returns:
      ``{"repo": {commit, dirty}, "<name>": {commit, dirty}, "python", "versions",
      "versions_checked", "versions_override", "cpu", "cpu_count", "os", "xla_flags",
      "threads"}``.  No path, no host name.  ``versions_checked``: :func:`check_pins`
      passed in this process (or its launcher's did, ``$DREAMER_PARITY_VERSIONS_CHECKED``);
      ``versions_override``: ``$DREAMER_PARITY_ALLOW_VERSIONS=1``.
    """
    out = {"repo": git_state(REPO_ROOT, exclude=ROUND_FILES)}
    for name, tree in (extra_trees or {}).items():
        out[name] = git_state(tree)
    versions = {}
    for m in modules:
        try:
            mod = __import__(m)
            versions[m] = getattr(mod, "__version__", "unknown")
        except ImportError:
            versions[m] = None
    out.update({
        "python": platform.python_version(),
        "versions": versions,
        "versions_checked": _pins_checked or os.environ.get(CHECKED_ENV) == "1",
        "versions_override": os.environ.get(ALLOW_VERSIONS_ENV) == "1",
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "os": f"{platform.system()} {platform.machine()}",
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "threads": {k: os.environ.get(k) for k in (
            "OMP_NUM_THREADS", "XLA_CPU_THREADS", "MALLOC_MMAP_THRESHOLD_")},
        "argv0": Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "",
    })
    return out

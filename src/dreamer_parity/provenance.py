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

__all__ = ["git_state", "relative_to_roots", "collect", "cpu_model", "REPO_ROOT"]

REPO_ROOT = Path(__file__).resolve().parents[2]


def git_state(directory, paths: list[str] | None = None) -> dict:
    """Commit and dirty flag of the git tree holding ``directory``.

    Args:
      directory: any directory inside the tree.
      paths: restrict the dirty check to these paths, relative to the tree's top
        (e.g. ``["src"]``), wherever ``directory`` lies in the tree.

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
             *(f":(top){p}" for p in paths or [])], capture_output=True, text=True,
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
      "cpu", "cpu_count", "os", "xla_flags", "threads"}``.  No path, no host name.
    """
    out = {"repo": git_state(REPO_ROOT)}
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
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "os": f"{platform.system()} {platform.machine()}",
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "threads": {k: os.environ.get(k) for k in (
            "OMP_NUM_THREADS", "XLA_CPU_THREADS", "MALLOC_MMAP_THRESHOLD_")},
        "argv0": Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "",
    })
    return out

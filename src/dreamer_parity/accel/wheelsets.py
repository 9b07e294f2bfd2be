"""The wheels an accelerator's machine gets: which (per version set), fetched here, installed
there into a temporary directory (nothing goes into the interpreter's own environment).

Standard library and the package only.  ``make accel-wheels`` and ``make gpu-wheels`` fetch
(:func:`download_wheels`); ``benchmarks/accel_check.py`` and ``benchmarks/gpu_call.py``
install (:func:`prepare`).  pip does the work (:mod:`dreamer_parity.wheels`).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from dreamer_parity import provenance, wheels

REPO = provenance.REPO_ROOT
#: Distributions the device machines lack and the TPU machine's index does not hold at the
#: lock's version (docs/CANDIDATE.md#accelerators); their versions come from
#: requirements.lock.  gymnax imports gymnasium, which needs farama-notifications, and
#: seaborn; the index holds PyYAML 6.0.3 only (a CPython 3.11 x86-64 binary wheel).
ACCEL_WHEELS = ("gymnax", "gymnasium", "farama-notifications", "seaborn", "pyyaml")
#: Modules the candidate's programs import besides the standard library (gymnax imports
#: six, matplotlib and seaborn when it is imported).
NEEDED_MODULES = ("jax", "jaxlib", "numpy", "optax", "flax", "gymnax", "gymnasium", "six",
                  "matplotlib", "seaborn", "yaml")
#: The wheels shipped to the GPU machine (``make gpu-wheels``): the lines of this lock marked
#: ``# shipped`` (what that machine's image lacks), for CPython 3.12, beside a wheel of this
#: project; the lock's other lines are the image's own packages (tests/test_gpu_cpu312.py).
GPU_LOCK = "requirements-gpu-cpu312.lock"
#: Per ``--versions`` value: which wheels ``--download-wheels`` fetches (``names``: None for
#: the lock's ``# shipped`` lines), from which lock, for which CPython, into which directory
#: (relative to the repository: the default of ``--wheels``), whether this project's own
#: wheel goes with them, and the make target that fetches them.
WHEEL_SETS = {
    "none": {"lock": "requirements.lock", "names": ACCEL_WHEELS, "python": "3.11",
             "dir": ".accel-wheels", "project": False, "make": "accel-wheels"},
    "gpu-h200": {"lock": GPU_LOCK, "names": None, "python": "3.12", "dir": ".gpu-wheels",
                 "project": True, "make": "gpu-wheels"},
}


def wheel_set(versions: str) -> dict:
    """The :data:`WHEEL_SETS` entry of a ``--versions`` value: its own, or ``none``'s for a
    version set without wheels of its own.

    Raises:
      ValueError: ``versions`` is neither ``none`` nor in ``provenance.VERSION_SETS``
        (one line, naming the sets).
    """
    if versions != "none" and versions not in provenance.VERSION_SETS:
        raise ValueError(f"--versions {versions!r} is not in provenance.VERSION_SETS "
                         f"({', '.join(sorted(provenance.VERSION_SETS))}) nor 'none'")
    return WHEEL_SETS.get(versions, WHEEL_SETS["none"])


def marked_names(lock, mark: str) -> tuple[str, ...]:
    """The normalised names of the ``name==version  # <mark>`` lines of the file ``lock``, in
    file order; ``mark`` ``""``: the lines without a mark (in :data:`GPU_LOCK`, the image's
    own packages)."""
    out = []
    for line in Path(lock).read_text().splitlines():
        body, _, found = line.partition("#")
        if "==" in body and found.strip() == mark:
            out.append(provenance.normalise(body.split("==", 1)[0].strip()))
    return tuple(out)


def shipped_names(lock) -> tuple[str, ...]:
    """The normalised names of the ``name==version  # shipped`` lines of the file ``lock``."""
    return marked_names(lock, "shipped")


def plan_wheels(wheel_dir) -> list[dict]:
    """What to do with each wheel of ``wheel_dir`` (none where it is not a directory):
    ``{"wheel", "name", "version", "installed" (version or None), "action": "install" |
    "present"}``; a distribution already installed, at any version, is left alone."""
    out = []
    for whl in sorted(Path(wheel_dir).glob("*.whl")) if Path(wheel_dir).is_dir() else []:
        name, version = wheels.wheel_name(whl)
        have = provenance.package_versions((name,))[name]
        out.append({"wheel": whl.name, "name": name, "version": version, "installed": have,
                    "action": "present" if have else "install"})
    return out


def install_wheels(wheel_dir, target) -> list[dict]:
    """Install the wheels of ``wheel_dir`` whose distributions are missing into ``target``
    (:func:`dreamer_parity.wheels.install`) and put ``target`` first on ``sys.path`` and
    ``$PYTHONPATH`` (for child processes).  Returns :func:`plan_wheels`.

    Raises:
      RuntimeError: pip's last line, when pip fails.
      ValueError: a file of ``wheel_dir`` whose name is not a wheel's.
    """
    plan = plan_wheels(wheel_dir)
    todo = [Path(wheel_dir) / p["wheel"] for p in plan if p["action"] == "install"]
    if todo:
        wheels.install(todo, target)
        sys.path.insert(0, str(target))
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [str(target)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    return plan


def prepare(wheel_dir, target, versions: str) -> tuple[list[dict], str | None]:
    """Install the missing wheels of ``wheel_dir`` into ``target`` (:func:`install_wheels`),
    then check that every module of :data:`NEEDED_MODULES` imports.  Returns ``(the plan,
    None)``, or ``(plan or [], the one-line reason)`` when pip fails, a wheel's name is bad
    or a module is missing (naming the make target of ``versions``' wheel set)."""
    try:
        plan = install_wheels(wheel_dir, target)
    except (RuntimeError, ValueError) as e:
        return [], f"wheels: {e}"
    missing = [m for m in NEEDED_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        shown = Path(wheel_dir).name
        return plan, (f"not installed: {', '.join(missing)} (no wheel in {shown}/: run `make "
                      f"{wheel_set(versions)['make']}` and copy {shown}/ with the working tree)")
    return plan, None


def build_project_wheel(dest) -> Path:
    """Build this project's wheel (pure Python, ``pip wheel --no-deps``) into ``dest`` from a
    copy of ``pyproject.toml`` and ``src/`` (the checkout gets no build files), replacing an
    earlier one; returns its path.

    Raises:
      RuntimeError: pip's last line, when the build fails.
    """
    dest = Path(dest)
    for old in dest.glob("dreamer_parity-*.whl"):
        old.unlink()
    with tempfile.TemporaryDirectory(prefix="project-wheel-") as tmp:
        shutil.copy2(REPO / "pyproject.toml", tmp)
        shutil.copytree(REPO / "src", Path(tmp) / "src",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                            "--disable-pip-version-check", "-w", str(dest), tmp],
                           capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"pip wheel of the project failed: {last}")
    return next(dest.glob("dreamer_parity-*.whl"))


def download_wheels(dest, wset: dict) -> list[Path]:
    """Download the wheels of the :data:`WHEEL_SETS` entry ``wset`` at its lock's versions
    into ``dest``: its ``names`` (None: the lock's ``# shipped`` lines, :func:`shipped_names`)
    for CPython ``wset["python"]`` on x86-64 Linux, pure Python or manylinux up to glibc 2.28
    (:func:`dreamer_parity.wheels.download`, no dependencies), removing other wheels there;
    with ``wset["project"]``, this project's wheel too (:func:`build_project_wheel`).
    Returns the wheels of ``dest``, sorted.

    Raises:
      RuntimeError: naming a package the lock does not pin, or pip's last line.
    """
    lock = REPO / wset["lock"]
    pins = provenance.read_pins(lock)
    names = shipped_names(lock) if wset["names"] is None else wset["names"]
    missing = [n for n in names if n not in pins]
    if missing:
        raise RuntimeError(f"{lock.name} pins no version of {', '.join(missing)}")
    got = wheels.download({n: pins[n] for n in names}, dest, python_version=wset["python"])
    if wset["project"]:
        build_project_wheel(dest)
        got = sorted(Path(dest).glob("*.whl"))
    return got


def travelling_bytes() -> int | None:
    """Bytes of the files copied to the accelerator's machine besides the wheel folder: the
    tracked and the untracked, not ignored files of this checkout (None without git)."""
    try:
        names = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached",
                                "--others", "--exclude-standard"], capture_output=True,
                               check=True).stdout.split(b"\0")
    except (OSError, subprocess.CalledProcessError):
        return None
    total = 0
    for n in names:
        f = REPO / os.fsdecode(n)
        if n and f.is_file() and not f.is_symlink():
            total += f.stat().st_size
    return total

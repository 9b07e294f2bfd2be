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
import re
import subprocess
import sys
from pathlib import Path

__all__ = ["git_state", "relative_to_roots", "collect", "cpu_model", "REPO_ROOT",
           "PinError", "LockError", "normalise", "read_pins", "check_pins", "allowed_versions", "package_versions",
           "backend", "ALLOW_VERSIONS_ENV", "PINNED_PACKAGES", "VERSION_SETS",
           "RECORDED_PACKAGES", "VERSION_SET_ENV", "CHECKED_ENV", "environment_set",
           "gpu", "autotune_level"]

REPO_ROOT = Path(__file__).resolve().parents[2]

#: Set to ``1`` to run with other versions than the lock pins (a deliberate experiment);
#: the run records ``versions_checked: false, versions_override: true`` in its provenance.
#: Set to the name of a :data:`VERSION_SETS` entry to accept that set's versions as well as
#: the lock's pins (the run records ``version_set`` when it ran on the set's versions).
ALLOW_VERSIONS_ENV = "DREAMER_PARITY_ALLOW_VERSIONS"
#: Set by a launcher whose pin check passed for the process it starts (reference runner).
CHECKED_ENV = "DREAMER_PARITY_VERSIONS_CHECKED"
#: Set by a launcher, beside :data:`CHECKED_ENV`, to the ``environment`` version set whose
#: own lock the process was checked against (the process records it as ``version_set``).
VERSION_SET_ENV = "DREAMER_PARITY_VERSION_SET"
#: Packages whose installed version must equal the lock before a run starts.
PINNED_PACKAGES = ("jax", "jaxlib", "numpy")

#: Named sets of versions.  Two kinds:
#:
#: * ``accepts`` (a machine's versions): ``$DREAMER_PARITY_ALLOW_VERSIONS=<name>`` accepts the
#:   set's ``versions`` besides the pins of the lock file the set names; the run records
#:   ``version_set`` and ``versions_override: true``.
#: * ``environment`` (a second environment with its own lock): the set's ``lock`` is the one
#:   its ``versions`` come from, chosen by a parameter (``selected_by``), never by the
#:   variable; the launcher checks the environment against that lock
#:   (:func:`check_pins` with ``version_set=<name>``) and the run records ``version_set``
#:   with ``versions_override: false``.  The analysis judges such a run against that lock
#:   (``analysis.checks.version_flags``).
#:
#: ``versions`` gives every package of :data:`PINNED_PACKAGES`; ``also`` lists what else that
#: machine is known to hold that the lock does not (not checked; :func:`collect` records
#: the versions found, :data:`RECORDED_PACKAGES`).
VERSION_SETS = {
    "gpu-h200": {
        "kind": "accepts",
        "lock": "requirements.lock",
        "about": "an NVIDIA GPU machine (NVIDIA H200 or H100, x86-64, Python 3.12, CUDA 13; "
                 "docs/PERFORMANCE.md#gpu)",
        "versions": {"jax": "0.11.2", "jaxlib": "0.11.2", "numpy": "2.5.2"},
        "also": {"jax-cuda13-plugin": "0.11.2", "jax-cuda13-pjrt": "0.11.2", "python": "3.12"},
    },
    "reference-jax010": {
        "kind": "environment",
        "lock": "requirements-reference-jax010.lock",
        "selected_by": "reference.jax: 0.10.2",
        "about": "the reference on jax 0.10.2 (CPU, or a TPU v5e machine's preinstalled "
                 "jax), with the outside shims of reference/shims.py (docs/REFERENCE_RUN.md)",
        "versions": {"jax": "0.10.2", "jaxlib": "0.10.2", "numpy": "2.4.6"},
        "also": {},
    },
    "reference-jax011": {
        "kind": "environment",
        "lock": "requirements-reference-jax011.lock",
        "selected_by": "reference.jax: 0.11.2",
        "about": "the reference on jax 0.11.2, the GPU machine's (CPU here, or that machine's "
                 "preinstalled jax), with the shims of 0.10.2 (docs/REFERENCE_RUN.md)",
        "versions": {"jax": "0.11.2", "jaxlib": "0.11.2", "numpy": "2.5.2"},
        "also": {"python": "3.12"},
    },
}

#: Distributions whose installed versions :func:`collect` records (None where absent): what
#: the candidate imports besides the standard library, and the jax GPU plugins.
RECORDED_PACKAGES = ("jax", "jaxlib", "numpy", "optax", "flax", "gymnax", "gymnasium",
                     "ml_dtypes", "opt_einsum", "scipy", "PyYAML", "jax-cuda13-plugin",
                     "jax-cuda13-pjrt", "jax-cuda12-plugin", "jax-cuda12-pjrt")

_pins_checked = False
_version_set = None


class PinError(RuntimeError):
    """An installed package differs from its pin; one line naming package and versions."""


class LockError(ValueError):
    """A lock file line that is not a pin; one line naming the file and the line."""


_PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;]+)\s*(?:;.*)?")


def normalise(name: str) -> str:
    """A distribution name as PEP 503 compares it: runs of ``-``, ``_`` and ``.`` as one
    ``-``, lower case (``ML_Dtypes`` -> ``ml-dtypes``).  The one name normaliser."""
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def read_pins(lock_file) -> dict[str, str]:
    """The one lock-file reader: ``{normalised name: version}`` of a lock file's
    ``name==version`` lines (comments and blank lines skipped; extras ``name[x]`` and an
    environment marker after ``;`` dropped).

    Raises:
      FileNotFoundError: no such file.
      LockError: a line that is not a pin, as ``<file>:<line>: expected name==version``.
    """
    path = Path(lock_file)
    pins = {}
    for i, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = _PIN.fullmatch(line)
        if not m:
            raise LockError(f"{path.name}:{i}: expected name==version, got {line!r}")
        pins[normalise(m.group(1))] = m.group(2)
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


def allowed_versions() -> str | None:
    """What ``$DREAMER_PARITY_ALLOW_VERSIONS`` allows: None (unset, empty or ``0``: the
    lock's pins only), ``"1"`` (any versions) or the name of a :data:`VERSION_SETS` entry.

    Raises:
      PinError: one line naming the variable when its value is none of these.
    """
    value = os.environ.get(ALLOW_VERSIONS_ENV, "").strip()
    if value in ("", "0"):
        return None
    accepts = sorted(k for k, v in VERSION_SETS.items()
                     if v.get("kind", "accepts") == "accepts")   # no kind: accepts
    if value == "1" or value in accepts:
        return value
    raise PinError(f"versions: {ALLOW_VERSIONS_ENV}={value!r} is neither 1 nor a version set "
                   f"({', '.join(accepts)}; provenance.VERSION_SETS)")


def environment_set(name: str) -> dict:
    """The ``environment`` entry ``name`` of :data:`VERSION_SETS`.

    Raises:
      PinError: no such set, or a set of another kind.
    """
    vset = VERSION_SETS.get(name)
    if vset is None or vset.get("kind") != "environment":
        raise PinError(f"versions: {name!r} is not an environment version set "
                       f"(provenance.VERSION_SETS)")
    return vset


def _first_mismatch(packages, installed: dict, want: dict) -> str | None:
    for p in packages:
        if want.get(normalise(p)) is None or installed.get(p) != want.get(normalise(p)):
            return p
    return None


def check_pins(lock_file, packages: tuple[str, ...] = PINNED_PACKAGES, python=None,
               version_set: str | None = None) -> dict:
    """Compare installed versions with the pins of ``lock_file``.

    Args:
      lock_file: ``requirements.lock`` (candidate), ``requirements-reference.lock``, or the
        lock an ``environment`` version set names.
      packages: distribution names to compare.
      python: an interpreter whose packages are meant (another venv); None for this one.
      version_set: the name of an ``environment`` entry of :data:`VERSION_SETS` whose own
        lock ``lock_file`` is (the environment a parameter chose); the result names it in
        ``version_set`` with ``override`` False.  None: no such environment.

    Returns:
      ``{"checked": bool, "override": bool, "version_set": str | None, "versions": {name:
      installed}}``.  With ``$DREAMER_PARITY_ALLOW_VERSIONS=1`` nothing is refused
      (``checked`` False, ``override`` True); with it naming a :data:`VERSION_SETS` entry
      made for ``lock_file``, the set's versions pass too (``checked`` True, ``override``
      True, ``version_set`` its name; the lock's own pins still pass as without it).  The
      process's provenance records either (:func:`collect`).

    Raises:
      PinError: ``versions: <package> <installed> installed, <lock> pins <version>
        (...)``, for the first package that differs or is not installed or not pinned
        (naming the version set's version too where one was allowed); or a bad value of
        ``$DREAMER_PARITY_ALLOW_VERSIONS`` (:func:`allowed_versions`).
    """
    global _pins_checked, _version_set
    lock_file = Path(lock_file)
    if version_set is not None and environment_set(version_set)["lock"] != lock_file.name:
        raise PinError(f"versions: version set {version_set} stands beside "
                       f"{environment_set(version_set)['lock']}, not {lock_file.name}")
    allowed = allowed_versions()
    installed = _installed(packages, python)
    if allowed == "1":
        return {"checked": False, "override": True, "version_set": None, "versions": installed}
    vset = VERSION_SETS.get(allowed) if allowed else None
    if vset is not None and vset["lock"] != lock_file.name:
        vset = None   # a set names the one lock it stands beside
    pins = read_pins(lock_file)
    bad = _first_mismatch(packages, installed, pins)
    used = None
    if bad is not None and vset is not None:
        set_pins = {**pins, **{normalise(k): v for k, v in vset["versions"].items()}}
        if _first_mismatch(packages, installed, set_pins) is None:
            bad, used = None, allowed
    if bad is not None:
        want, got = pins.get(normalise(bad)), installed.get(bad)
        also = (f" and version set {allowed} names {vset['versions'].get(bad, want)}"
                if vset is not None else "")
        raise PinError(
            f"versions: {bad} {got or 'not'} installed, {lock_file.name} pins "
            f"{want or 'nothing'}{also} (reinstall from the lock, or set "
            f"{ALLOW_VERSIONS_ENV}=1 for a deliberate experiment; the run records it)")
    if python is None:
        _pins_checked, _version_set = True, used or version_set
    return {"checked": True, "override": used is not None, "version_set": used or version_set,
            "versions": installed}


def package_versions(names: tuple[str, ...] = RECORDED_PACKAGES) -> dict[str, str | None]:
    """``{distribution: installed version or None}`` of this interpreter, by
    ``importlib.metadata`` (no module is imported)."""
    return _installed(names)


def backend() -> dict | None:
    """The jax backend of this process, when jax is already imported (None otherwise; this
    function never imports it): ``{"platform": "cpu" | "gpu" | ..., "devices": int,
    "device_kind": str, "matmul_precision": str | None}``; ``{"error": ...}`` when jax
    cannot say."""
    jax = sys.modules.get("jax")
    if jax is None:
        return None
    try:
        devs = jax.devices()
        return {"platform": jax.default_backend(), "devices": len(devs),
                "device_kind": devs[0].device_kind if devs else None,
                "matmul_precision": (None if jax.config.jax_default_matmul_precision is None
                                     else str(jax.config.jax_default_matmul_precision))}
    except Exception as e:   # noqa: BLE001 - provenance never stops a run
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}


def autotune_level(xla_flags: str | None = None) -> int | None:
    """The XLA:GPU autotuning level ``--xla_gpu_autotune_level=N`` of ``xla_flags`` (default:
    ``$XLA_FLAGS``; the last one given wins, as in XLA), or None where none is given (XLA's
    own default then applies)."""
    import re

    flags = os.environ.get("XLA_FLAGS", "") if xla_flags is None else xla_flags
    found = re.findall(r"--xla_gpu_autotune_level=(\d+)", flags)
    return int(found[-1]) if found else None


def gpu(nvidia_smi: str = "nvidia-smi") -> dict:
    """The NVIDIA GPUs of this machine and the XLA:GPU settings of this process, for run.json
    (:func:`collect` adds it when the jax backend is a GPU).

    Returns:
      ``{"gpus": [{"name": str, "driver": str, "memory_mib": int | None}, ...] | None,
      "error": str (only when nvidia-smi cannot say), "xla_flags": str,
      "autotune_level": int | None (:func:`autotune_level`), "matmul_precision": str |
      None ($JAX_DEFAULT_MATMUL_PRECISION)}``; ``gpus`` from ``nvidia-smi
      --query-gpu=name,driver_version,memory.total --format=csv,noheader,nounits``, None
      where it is missing or fails (the reason in ``error``).  Never raises.
    """
    out = {"gpus": None, "xla_flags": os.environ.get("XLA_FLAGS", ""),
           "autotune_level": autotune_level(),
           "matmul_precision": os.environ.get("JAX_DEFAULT_MATMUL_PRECISION") or None}
    try:
        r = subprocess.run([nvidia_smi, "--query-gpu=name,driver_version,memory.total",
                            "--format=csv,noheader,nounits"], capture_output=True, text=True,
                           timeout=30, check=True)
        gpus = []
        for line in r.stdout.strip().splitlines():
            name, driver, mem = (part.strip() for part in line.rsplit(",", 2))
            gpus.append({"name": name, "driver": driver,
                         "memory_mib": int(mem) if mem.isdigit() else None})
        out["gpus"] = gpus
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        out["error"] = f"nvidia-smi: {type(e).__name__}"
    return out


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
      "versions_checked", "versions_override", "version_set", "packages", "backend", "cpu",
      "cpu_count", "os", "xla_flags", "threads"}``.  No path, no host name.
      ``versions_checked``: :func:`check_pins` passed in this process (or its launcher's
      did, ``$DREAMER_PARITY_VERSIONS_CHECKED``); ``versions_override``:
      ``$DREAMER_PARITY_ALLOW_VERSIONS=1``, or an ``accepts`` version set's versions passed
      the check; ``version_set``: that set, or the ``environment`` set whose own lock the
      process was checked against (here or by its launcher, ``$DREAMER_PARITY_VERSION_SET``);
      ``packages``: :func:`package_versions`; ``backend``: :func:`backend`; on a GPU
      backend only (platform ``gpu`` or ``cuda``), ``gpu``: :func:`gpu` (model, driver,
      ``XLA_FLAGS``, autotuning level, precision).
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
        "versions_override": (os.environ.get(ALLOW_VERSIONS_ENV, "").strip() == "1"
                              or (_version_set is not None
                                  and VERSION_SETS.get(_version_set, {}).get("kind")
                                  != "environment")),
        "version_set": _version_set or (os.environ.get(VERSION_SET_ENV) or None
                                        if os.environ.get(CHECKED_ENV) == "1" else None),
        "packages": package_versions(),
        "backend": backend(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "os": f"{platform.system()} {platform.machine()}",
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "threads": {k: os.environ.get(k) for k in (
            "OMP_NUM_THREADS", "XLA_CPU_THREADS", "MALLOC_MMAP_THRESHOLD_")},
        "argv0": Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "",
    })
    if (out["backend"] or {}).get("platform") in ("gpu", "cuda"):
        out["gpu"] = gpu()
    return out

"""The candidate's fast tests under the GPU machine's versions, on the CPU.

The GPU machine (``provenance.VERSION_SETS["gpu-h200"]``) runs Python 3.12 and jax 0.11.2; this
suite runs Python 3.11 and requirements.lock's jax.  Where ``python3.12`` exists, a virtual
environment is made once from ``requirements-gpu-cpu312.lock`` (every line, ``--no-deps``: the
image's packages with the CPU jaxlib, the shipped ones ``make gpu-wheels`` fetches, pytest),
cached under ``~/.cache/dreamer-parity/gpu-cpu312-<digest of the lock's pins>``, and the
candidate's fast tests (agent units, two-hot, loop parts, the observe scan's gradient forms)
run there against this checkout's ``src``.  So a
change that breaks the candidate under jax 0.11.2 fails here rather than on the GPU machine.
Without a working ``python3.12`` (on PATH, from pyenv, or named by
``$DREAMER_PARITY_PYTHON312``), or where the environment cannot be made (no package index), the tests
skip and say why.
"""

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from dreamer_parity import provenance
from dreamer_parity.accel import wheelsets

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements-gpu-cpu312.lock"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dreamer-parity"
#: The candidate's tests run under Python 3.12, its comparisons with the reference's formulas
#: included; the slowest gradient checks (the same code, run by the main suite) are left out.
TESTS = ["tests/test_candidate_agent_units.py", "tests/test_candidate_twohot_index.py",
         "tests/test_candidate_loop_parts.py", "tests/test_candidate_observe.py",
         "tests/test_candidate_executables.py"]
DESELECT = "not observe_scan_gradients and not hoisted_inputs and not compiled_in_advance"

pytestmark = pytest.mark.slow


def test_the_lock_holds_the_gpu_version_set_and_the_shipped_wheels():
    # fast: the lock's jax, jaxlib and numpy are the version set's; its shipped lines are
    # what `make gpu-wheels` fetches, and they cover what the candidate imports
    pins = provenance.read_pins(LOCK)
    vset = provenance.VERSION_SETS["gpu-h200"]
    assert {p: pins[p] for p in provenance.PINNED_PACKAGES} == vset["versions"]
    assert vset["also"]["python"] == "3.12"
    shipped = wheelsets.shipped_names(LOCK)
    assert wheelsets.WHEEL_SETS["gpu-h200"]["lock"] == LOCK.name
    assert {"gymnax", "gymnasium", "seaborn", "matplotlib", "pandas", "six",
            "flatbuffers"} <= set(shipped)
    # the image's own packages are not shipped
    assert not {"jax", "jaxlib", "numpy", "optax", "chex", "flax", "scipy"} & set(shipped)
    # where requirements.lock pins a shipped package, the version is the same
    main = provenance.read_pins(REPO / "requirements.lock")
    assert {n: pins[n] for n in shipped if n in main} == {n: main[n] for n in shipped if n in main}


def _python312() -> tuple[str | None, str]:
    """A working Python 3.12 interpreter (``reference.setup.find_python``:
    ``$DREAMER_PARITY_PYTHON312``, ``python3.12`` on PATH, pyenv), or None and why not."""
    from dreamer_parity.reference.setup import find_python, _python_version
    py = find_python("3.12")
    if py and _python_version(py) == "3.12":
        return py, ""
    if py:
        return None, "$DREAMER_PARITY_PYTHON312 is not a working Python 3.12"
    return None, ("no working python3.12 (PATH, pyenv or $DREAMER_PARITY_PYTHON312): the GPU "
                  "machine's versions are not tested here")


@pytest.fixture(scope="module")
def venv312():
    """The cached Python 3.12 environment of the lock (made on first use, about a minute
    from PyPI); its python."""
    py, why = _python312()
    if py is None:
        pytest.skip(why)
    pins = "".join(f"{k}=={v}\n" for k, v in sorted(provenance.read_pins(LOCK).items()))
    key = hashlib.sha256(pins.encode()).hexdigest()[:12]   # the pins, not the comments
    venv = CACHE / f"gpu-cpu312-{key}"
    done = venv / ".complete"
    if not done.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = CACHE / f"gpu-cpu312-{key}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        steps = ([py, "-m", "venv", str(tmp)],
                 [str(tmp / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
                  "--only-binary=:all:", "--disable-pip-version-check", "-r", str(LOCK)])
        for cmd in steps:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
            if r.returncode != 0:
                shutil.rmtree(tmp, ignore_errors=True)
                last = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
                pytest.skip(f"the Python 3.12 environment of {LOCK.name} cannot be made: {last}")
        (tmp / ".complete").touch()
        try:
            tmp.rename(venv)
        except OSError:   # made meanwhile by another session
            shutil.rmtree(tmp, ignore_errors=True)
    return venv / "bin" / "python"


def _env() -> dict:
    env = dict(os.environ)
    env.pop(provenance.ALLOW_VERSIONS_ENV, None)
    env.update({"PYTHONPATH": str(REPO / "src"), "JAX_PLATFORMS": "cpu",
                "JAX_COMPILATION_CACHE_DIR": str(CACHE / "jaxcache-gpu-cpu312"),
                "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"})
    return env


def test_the_environment_is_the_lock_s_and_imports_the_candidate(venv312):
    r = subprocess.run([str(venv312), "-m", "pip", "check"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr   # the lock is closed under dependencies
    code = ("import sys, jax, gymnax, numpy\n"
            "from dreamer_parity.candidate import agent\n"
            "from dreamer_parity.candidate.runtime import run, loop\n"
            "from dreamer_parity import archive, keep\n"
            "print(sys.version_info[0], sys.version_info[1], jax.__version__, numpy.__version__,"
            " jax.default_backend())")
    r = subprocess.run([str(venv312), "-c", code], capture_output=True, text=True,
                       env=_env(), cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr
    v = provenance.VERSION_SETS["gpu-h200"]["versions"]
    assert r.stdout.split() == ["3", "12", v["jax"], v["numpy"], "cpu"]


def test_the_candidate_s_fast_tests_pass_under_python312_and_jax_0_11(venv312):
    r = subprocess.run([str(venv312), "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                        "-k", DESELECT, *TESTS], capture_output=True, text=True,
                       env=_env(), cwd=REPO, timeout=1500)
    tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-15:])
    assert r.returncode == 0, tail
    m = re.search(r"(\d+) passed", r.stdout)
    assert m and int(m.group(1)) >= 30 and "failed" not in r.stdout, tail
    assert " error" not in r.stdout.splitlines()[-1], tail

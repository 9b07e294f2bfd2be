"""Shared test set-up: CPU JAX with a persistent compilation cache, paths to shared data."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# host devices for the candidate's one-device-per-seed layout (candidate/runtime/seedmesh.py), as
# the run's command line asks for them; single-device programs still run on device 0
from dreamer_parity.candidate.runtime import seedmesh  # noqa: E402  (imports no jax)

seedmesh.request_host_devices(4)
_cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dreamer-parity" / "jaxcache-main"
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(_cache))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
# the candidate's exported-program store (candidate/runtime/program_store.py), apart from the user's
os.environ.setdefault("DREAMER_PARITY_PROGRAMS", str(_cache.parent / "programs-tests"))
# candidate checkpoints of the tests' runs, apart from the user's (candidate/runtime/checkpoint.py)
os.environ.setdefault("DREAMER_PARITY_WORK_DIR", str(_cache.parent / "candidate-runs-tests"))

REPO = Path(__file__).resolve().parents[1]
PUBLISHED = REPO / "data" / "published"


@pytest.fixture(scope="session")
def published_dir():
    """The published study's files, git-tracked in data/published."""
    assert PUBLISHED.is_dir(), "data/published is part of the repository"
    return PUBLISHED


# --- slow subprocess runs started before the first test ------------------------------------
#
# The real reference's runs (tests/test_reference_jax010.py, tests/test_reference_smoke.py)
# and the smoke round's `dvc repro` (tests/test_pipeline_e2e.py) take minutes of one core
# each and only wait on their subprocess.  A module that has them
# defines ``start_in_background(background, tmp_path_factory)`` and names the fixtures that
# use them in ``BACKGROUND_FIXTURES``; when a selected test uses one of those fixtures the
# runs are queued at the session's first test and run, one after the other, on one worker
# thread while the other tests run on the other core.  The fixtures then wait for their
# results and make the same assertions on them as before.  A fixture that finds its run not
# queued (its module's starter did not run) starts it itself and waits for it.

import concurrent.futures  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402


class Background:
    """Named jobs run one at a time on one worker thread; ``run`` starts a subprocess that
    the session's end stops if it is still running.  The subprocesses get the environment
    as it was when the session began: a test's monkeypatched variable (running meanwhile on
    the main thread) never reaches them."""

    def __init__(self):
        self._env = dict(os.environ)
        self._pool = None
        self._jobs: dict[str, concurrent.futures.Future] = {}
        self._procs: list[subprocess.Popen] = []
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, name: str, fn) -> None:
        """Queue ``fn()`` under ``name`` (once: a second submit of the same name is ignored)."""
        if name in self._jobs:
            return
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="tests-background")
        self._jobs[name] = self._pool.submit(fn)

    def queued(self, name: str) -> bool:
        return name in self._jobs

    def result(self, name: str):
        """What the job returned (waiting for it), or the exception it raised (a skip too)."""
        return self._jobs[name].result()

    def run(self, cmd, *, timeout, **kw) -> subprocess.CompletedProcess:
        """``subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)``
        (``stderr=subprocess.STDOUT`` merges the two)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the test session has ended")
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                 stderr=kw.pop("stderr", subprocess.PIPE), text=True,
                                 start_new_session=True, env=kw.pop("env", self._env), **kw)
            self._procs.append(p)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._stop(p)
            p.communicate()
            raise
        return subprocess.CompletedProcess(p.args, p.returncode, out, err)

    @staticmethod
    def _stop(p: subprocess.Popen) -> None:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)   # the process and its children
            except ProcessLookupError:
                pass

    def close(self) -> None:
        with self._lock:
            self._closed = True
            procs = list(self._procs)
        for p in procs:
            self._stop(p)
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="session", autouse=True)
def background(request, tmp_path_factory):
    """The session's :class:`Background`; queues the runs of the selected tests' modules."""
    bg = Background()
    starters = []
    for item in request.session.items:
        mod = getattr(item, "module", None)
        start = getattr(mod, "start_in_background", None)
        if start is None or start in starters:
            continue
        if set(getattr(mod, "BACKGROUND_FIXTURES", ())) & set(getattr(item, "fixturenames", ())):
            starters.append(start)
    for start in starters:
        start(bg, tmp_path_factory)
    yield bg
    bg.close()

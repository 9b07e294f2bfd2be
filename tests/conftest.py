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

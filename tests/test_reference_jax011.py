"""The reference on jax 0.11.2 (reference.jax: 0.11.2, the GPU machine's versions), on the
CPU, through the one-command device script as tests/test_reference_jax010.py runs 0.10.2: the
export unpacked and verified, the environment's interpreter given, the three shims, the
pipeline's reference stage and the archive.  One smoke-sized seed 0 (1,200 rows, 81
updates), precision ``highest``.  Skipped, naming ``make reference-setup-jax011``, where
that environment cannot be made (no Python 3.12 or no package index)."""

import sys

import pytest

from dreamer_parity import archive, records
from dreamer_parity.reference import setup as rs
from dreamer_parity.reference import shims
from test_reference_jax010 import REPO, SCRIPT, SMOKE_SETS, _git_source, check_seed_0_records

JAX = "0.11.2"
#: conftest.background queues the run at the session's first test (start_in_background)
BACKGROUND_FIXTURES = ("device_run",)


def start_in_background(background, tmp_path_factory):
    """Queue the script's run (as tests/test_reference_jax010.py does for 0.10.2); nothing
    is queued without the environment or a git source."""
    try:
        info = rs.check_setup(jax=JAX)
        source = _git_source()
    except (rs.SetupError, pytest.skip.Exception):
        return
    base = tmp_path_factory.mktemp("jax011")
    rs.export(base / "carry", source, log=lambda m: None)
    (base / "root").mkdir()
    shared = rs.jaxcache_dir(rs.default_root(), JAX)     # the environment's warm cache
    shared.mkdir(parents=True, exist_ok=True)
    (base / "root" / shared.name).symlink_to(shared)
    cmd = [sys.executable, *SCRIPT, "--seed", "0", "--name", "cpu-s0", "--carry",
           str(base / "carry"), "--root", str(base / "root"), "--work", str(base / "work"),
           "--out-dir", str(base / "out"), "--interpreter", str(info["python"]),
           *(x for s in [f"reference.jax={JAX}", "reference.precision=highest", *SMOKE_SETS]
             for x in ("--set", s))]
    background.submit("reference-jax011-device", lambda: (
        base, background.run(cmd, cwd=REPO, timeout=1500)))


@pytest.fixture(scope="module")
def device_run(background, tmp_path_factory):
    """The run directory of the script's seed 0, unpacked from its archive."""
    try:
        rs.check_setup(jax=JAX)
    except rs.SetupError as e:
        pytest.skip(f"the jax {JAX} reference environment is not set up: run "
                    f"`{rs.setup_hint(JAX)}` ({e})")
    if not background.queued("reference-jax011-device"):
        _git_source()
        start_in_background(background, tmp_path_factory)
    base, proc = background.result("reference-jax011-device")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    unpacked = archive.unpack(base / "out" / "cpu-s0.tar.gz", base / "unpacked")
    assert unpacked == [base / "unpacked" / "reference" / "s0"]
    return unpacked[0]


@pytest.mark.slow
@pytest.mark.reference
def test_seed_0_evaluates_as_on_jax_0_4_26_and_records_the_environment(device_run):
    check_seed_0_records(device_run)     # evaluates [16.0, 41.0] before its first update
    run = records.read_json(device_run / "run.json")
    env = run["environment"]
    assert (env["jax"], env["version_set"], env["lock"], env["interpreter"], env["off_lock"]) \
        == (JAX, "reference-jax011", "requirements-reference-jax011.lock", "given", [])
    assert env["shims"] == list(shims.SHIMS) and env["threefry_partitionable"] is False
    assert [env[k] for k in ("platform", "precision", "backend", "device_kind",
                             "matmul_precision")] == ["cpu", "highest", "cpu", "cpu", "highest"]
    assert len(env) == 12
    prov = run["provenance"]
    assert prov["versions"] == {"jax": JAX, "jaxlib": JAX, "numpy": "2.5.2"}
    assert (prov["versions_checked"], prov["versions_override"], prov["version_set"]) == (
        True, False, "reference-jax011")

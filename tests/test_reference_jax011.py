"""The reference on jax 0.11.2 (reference.jax: 0.11.2, the GPU machine's versions), on the
CPU, through the one-command device script as tests/test_reference_jax010.py runs 0.10.2: the
export unpacked and verified, the environment's interpreter given, the three shims, the
pipeline's reference stage and the archive.  Seed 0 at the smoke size, stopped at 800 rows:
two evaluations of the initial policy and no update, precision ``highest``, so that the
suite compiles the reference's policy but not its train step on this environment (the train
step's compile alone took 464 s of a shared core, 2026-12-07).  The whole smoke on 0.11.2
(1,200 rows, 81 updates) is ``python -m dreamer_parity.device_reference --seed 0 --name s0
--set reference.jax=0.11.2 --set profile=smoke ...`` as in docs/REFERENCE_RUN.md; it gave
tests/test_reference_jax010.py's records.  Skipped, naming ``make reference-setup-jax011``,
where that environment cannot be made (no Python 3.12 or no package index)."""

import sys

import pytest

from dreamer_parity import archive, records
from dreamer_parity.reference import setup as rs
from dreamer_parity.reference import shims
from test_reference_jax010 import REPO, SCRIPT, SMOKE_SETS, _git_source

#: the smoke's settings, stopped before the first update (updates begin at row 1,040)
EVAL_ONLY_SETS = [s for s in SMOKE_SETS if not s.startswith("rows=")] + ["rows=800"]

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
    rs.export(base / "prepared", source, log=lambda m: None)
    (base / "root").mkdir()
    shared = rs.jaxcache_dir(rs.default_root(), JAX)     # the environment's warm cache
    shared.mkdir(parents=True, exist_ok=True)
    (base / "root" / shared.name).symlink_to(shared)
    cmd = [sys.executable, *SCRIPT, "--seed", "0", "--name", "cpu-s0", "--prepared",
           str(base / "prepared"), "--root", str(base / "root"), "--work", str(base / "work"),
           "--out-dir", str(base / "out"), "--interpreter", str(info["python"]),
           *(x for s in [f"reference.jax={JAX}", "reference.precision=highest",
                                *EVAL_ONLY_SETS]
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
    done = records.read_done(device_run)
    assert done["status"] == "ok" and records.done_agrees(device_run, done, "reference", 0)
    recs = records.read_records(device_run)
    assert [(r["rows"], r["updates"]) for r in recs] == [(400, 0), (800, 0)]
    # the initial policy's draws are jax 0.4.26's (threefry_partitionable False), and so are
    # its returns (tests/test_reference_smoke.py, seed 0)
    assert recs[0]["eval_returns"] == recs[1]["eval_returns"] == [16.0, 41.0]
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

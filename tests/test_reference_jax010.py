"""The reference on jax 0.10.2 (reference.jax: 0.10.2), on the CPU, through the one-command
device script (python -m dreamer_parity.device_reference) exactly as the TPU machine runs it: the
export of the checkout unpacked and verified without git, the environment's interpreter
given (DREAMER_PARITY_REF_INTERPRETER) instead of a venv made there, the three shims, the
pipeline's reference stage, the archive, and `keep` taking the archive.

One smoke-sized seed (1,200 rows, an evaluation every 400 rows with 2 episodes, 81 updates)
with round 3's replay sampler and decode, matmul precision `highest`.  The unit tests of
the script's own logic run without the environment.
"""

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from dreamer_parity import device_reference as dev
from dreamer_parity import records
from dreamer_parity.reference import setup as rs
import synthetic  # tests/synthetic.py

REPO = Path(__file__).resolve().parents[1]
SCRIPT = ["-m", "dreamer_parity.device_reference"]

SMOKE_SETS = ["reference.platform=cpu", "profile=smoke", "rows=1200", "eval_every=400",
              "eval_episodes=2"]
ROUND = ("round: smoke\nprofile: smoke\nseeds: [0]\nrows: 1200\neval_every: 400\n"
         "eval_episodes: 2\nreference:\n  decode: exact\n  sampler: per_run\n  source: run\n"
         "stats:\n  s1_rows: [1200]\n  late_rows: []\n  concordance_rows: [1200]\n"
         "  concordance_range: []\n")


# --- the script's logic, no reference needed -----------------------------------------------

def test_device_params_are_round_3_on_the_tpu_unless_changed():
    p = dev.device_params(7)
    assert (p["profile"], p["rows"], p["eval_every"], p["eval_episodes"], p["seeds"]) == (
        "full", 24000, 400, 10, [7])
    assert p["reference"] == {"decode": "exact", "sampler": "per_run", "jax": "0.10.2",
                              "platform": "tpu", "precision": "highest", "source": "run"}
    q = dev.device_params(0, SMOKE_SETS)
    assert (q["profile"], q["rows"], q["reference"]["platform"]) == ("smoke", 1200, "cpu")
    from dreamer_parity import params as P
    with pytest.raises(P.ParamsError, match="reference.precision: unknown value 'low'"):
        dev.device_params(0, ["reference.precision=low"])
    with pytest.raises(P.ParamsError, match="expected KEY=VALUE"):
        dev.device_params(0, ["rows"])


def test_the_wheels_are_the_jax010_lock_but_what_the_machine_holds_and_pyyaml():
    want = dev.wanted_wheels()
    lock = rs.read_lock(rs.lock_file("0.10.2"))
    assert set(want) == (set(lock) - set(dev.preinstalled("tpu-v5e"))) | {"pyyaml"}
    assert want == dev.wanted_wheels("tpu-v5e") and dev.image_differences() == {}
    assert all(want[n] == lock[n] for n in want if n in lock)
    assert {"tensorflow-probability", "chex", "dm-tree", "ruamel-yaml", "pyzmq"} <= set(want)
    assert not {"jax", "jaxlib", "numpy", "scipy"} & set(want)


def _finished_run(root: Path, status="ok") -> Path:
    """A synthetic reference run ``root/s3`` (tests/synthetic.py), with the files a run
    directory holds beside the kept ones."""
    import synthetic
    from dreamer_parity import params as P
    p = P.validate({"seeds": [3], "rows": 1200, "eval_every": 400, "eval_episodes": 2,
                    "profile": "smoke", "stats": {"s1_rows": [1200], "concordance_rows": [1200],
                                                  "concordance_range": []}})
    d = synthetic.write_run(root, "reference", 3, p, fail_at=800 if status == "failed" else None)
    (d / "params.npz").write_bytes(b"x")
    (d / "stdout.log").write_text("x")
    return d


def test_only_a_finished_run_is_archived_and_under_its_final_name_only_when_complete(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    run = _finished_run(tmp_path / "ok")
    target = dev.archive_run(run, out, "t-s3")
    assert target == out / "t-s3.tar.gz" and sorted(p.name for p in out.iterdir()) == [
        "t-s3.tar.gz"]
    with tarfile.open(target) as tar:      # dreamer_parity.archive's layout: keep takes it
        assert tar.getnames() == ["reference/s3/records.jsonl", "reference/s3/episodes.jsonl",
                                  "reference/s3/run.json", "reference/s3/timing.json",
                                  "reference/s3/DONE.json"]
    cut = _finished_run(tmp_path / "cut")
    (cut / records.DONE).unlink()                       # a run cut by the call's limit
    assert dev.archive_run(cut, out, "cut") is None
    failed = _finished_run(tmp_path / "failed", status="failed")
    assert dev.archive_run(failed, out, "failed") is None
    assert sorted(p.name for p in out.iterdir()) == ["t-s3.tar.gz"]


def test_the_heads_output_layers_come_back_under_their_final_name_only(tmp_path):
    import numpy as np
    out = tmp_path / "out"
    out.mkdir()
    run = _finished_run(tmp_path / "ok")
    arrays = {k: np.full((2, 3), i, np.float32) for i, k in enumerate(dev.HEAD_KEYS)}
    np.savez(run / "params.npz", **arrays, **{"agent/enc/kernel": np.zeros(5, np.float32)})
    target = dev.save_heads(run, out, "probe")
    assert target == out / "probe.heads.npz"
    assert sorted(p.name for p in out.iterdir()) == ["probe.heads.npz"]
    with np.load(target) as d:               # the heads only, values as saved
        assert sorted(d.files) == sorted(dev.HEAD_KEYS)
        assert all(np.array_equal(d[k], arrays[k]) for k in dev.HEAD_KEYS)
    np.savez(run / "params.npz", **{k: v for k, v in arrays.items()
                                    if k != "agent/critic/dist/out/bias"})
    with pytest.raises(KeyError, match="no agent/critic/dist/out/bias"):
        dev.save_heads(run, out, "partial")
    (run / "params.npz").unlink()
    with pytest.raises(FileNotFoundError):
        dev.save_heads(run, out, "gone")
    assert sorted(p.name for p in out.iterdir()) == ["probe.heads.npz"]


def test_bad_arguments_are_one_line_before_anything(tmp_path):
    r = subprocess.run([sys.executable, *SCRIPT, "--seed", "0", "--name", "a/b",
                        "--out-dir", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 2 and "--name letters" in r.stderr and list(tmp_path.iterdir()) == []
    r = subprocess.run([sys.executable, *SCRIPT, "--seed", "0", "--name", "a",
                        "--out-dir", str(tmp_path), "--set", "reference.jax=0.4.26"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("error: params: reference.platform: tpu "
                                                     "needs reference.jax 0.10.2")


# --- one seed on jax 0.10.2 through the script ----------------------------------------------

def _git_source() -> str:
    import os
    for cand in (os.environ.get("DREAMER_PARITY_REF_SOURCE"), rs.checkout_dir(rs.default_root())):
        if cand and Path(cand).is_dir() and subprocess.run(
                ["git", "cat-file", "-e", f"{rs.REF_COMMIT}^{{commit}}"], cwd=cand,
                capture_output=True).returncode == 0:
            return str(cand)
    pytest.skip("no local git directory holds the reference commit; run `make reference-setup`")


#: conftest.background queues the run at the session's first test (start_in_background)
BACKGROUND_FIXTURES = ("device_run",)


def start_in_background(background, tmp_path_factory):
    """Queue the script's run on the session's background worker (tests/conftest.py): it
    runs while other tests do, and ``device_run`` waits for it.  The export and the cache
    link are made here, on the main thread; the worker only waits on the script.  Nothing
    is queued without the environment or a git source (``device_run`` then skips, saying
    why)."""
    try:
        info = rs.check_setup(jax="0.10.2")
        source = _git_source()
    except (rs.SetupError, pytest.skip.Exception):
        return
    base = tmp_path_factory.mktemp("jax010")
    prepared = base / "prepared"
    rs.export(prepared, source, log=lambda m: None)
    root = base / "root"
    root.mkdir()
    shared = rs.jaxcache_dir(rs.default_root(), "0.10.2")   # the environment's warm cache
    shared.mkdir(parents=True, exist_ok=True)
    (root / shared.name).symlink_to(shared)
    out = base / "out"
    cmd = [sys.executable, *SCRIPT, "--seed", "0", "--name", "cpu-s0",
           "--prepared", str(prepared), "--root", str(root), "--work", str(base / "work"),
           "--out-dir", str(out),
           "--interpreter", str(info["python"]), "--set", "reference.precision=highest",
           *(x for s in SMOKE_SETS for x in ("--set", s))]
    background.submit("reference-jax010-device", lambda: (
        base, background.run(cmd, cwd=REPO, timeout=1500)))


@pytest.fixture(scope="module")
def device_run(background, tmp_path_factory):
    """The script run once as on the device (CPU, smoke size); ``{"out", "proc", "unpacked",
    "work"}``."""
    try:
        rs.check_setup(jax="0.10.2")
    except rs.SetupError as e:
        pytest.skip(f"the jax 0.10.2 reference environment is not set up: run "
                    f"`make reference-setup-jax010` ({e})")
    if not background.queued("reference-jax010-device"):
        _git_source()                 # skips, saying why, when no git source holds the commit
        start_in_background(background, tmp_path_factory)
    base, proc = background.result("reference-jax010-device")
    out = base / "out"
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    from dreamer_parity import archive
    unpacked = archive.unpack(out / "cpu-s0.tar.gz", base / "unpacked")
    assert unpacked == [base / "unpacked" / "reference" / "s0"]
    return {"out": out, "proc": proc, "unpacked": unpacked[0], "work": base / "work",
            "root": base / "root"}




@pytest.mark.slow
@pytest.mark.reference
def test_the_archive_holds_the_finished_run_and_nothing_else(device_run):
    out = device_run["out"]
    assert sorted(p.name for p in out.iterdir()) == ["cpu-s0.log", "cpu-s0.tar.gz"]
    assert sorted(p.name for p in device_run["unpacked"].iterdir()) == [
        "DONE.json", "episodes.jsonl", "records.jsonl", "run.json", "timing.json"]
    log = (out / "cpu-s0.log").read_text()
    assert "[device] no wheels in " in log and "(`make tpu-reference` prepares them)" in log
    assert "unpacking the reference from the export" in log
    assert "[device] archived cpu-s0.tar.gz" in log


def check_seed_0_records(d: Path) -> None:
    """Smoke seed 0's records in run directory ``d`` (tests/test_reference_jax011.py too)."""
    done = records.read_done(d)
    assert done["status"] == "ok" and records.done_agrees(d, done, "reference", 0)
    recs = records.read_records(d)
    assert [r["rows"] for r in recs] == [400, 800, 1200]
    assert [r["updates"] for r in recs] == [0, 0, 81]
    # before the first update the policy is the initial one: with jax_threefry_partitionable
    # False its draws are jax 0.4.26's, and so are the returns (test_reference_smoke, seed 0)
    assert recs[0]["eval_returns"] == [16.0, 41.0]
    assert isinstance(recs[2]["train"]["opt_grad_norm"], float)
    assert recs[2]["train_counts"]["vector_loss"] == 80


@pytest.mark.slow
@pytest.mark.reference
def test_records_follow_the_schedule_and_seed_0_evaluates_as_on_jax_0_4_26(device_run):
    check_seed_0_records(device_run["unpacked"])


@pytest.mark.slow
@pytest.mark.reference
def test_run_json_records_the_environment_shims_and_where_it_ran(device_run):
    run = records.read_json(device_run["unpacked"] / "run.json")
    assert run["environment"] == {
        "jax": "0.10.2", "version_set": "reference-jax010",
        "lock": "requirements-reference-jax010.lock", "interpreter": "given", "off_lock": [],
        "shims": ["xla_pytype_aval_mappings", "jit_keyword_shardings",
                  "threefry_partitionable_false"],
        "threefry_partitionable": False, "platform": "cpu", "precision": "highest",
        "backend": "cpu", "device_kind": "cpu", "matmul_precision": "highest"}
    assert {k: run["args"][k] for k in ("jax", "platform", "precision")} == {
        "jax": "0.10.2", "platform": "cpu", "precision": "highest"}
    prov = run["provenance"]
    assert prov["versions"] == {"jax": "0.10.2", "jaxlib": "0.10.2", "numpy": "2.4.6"}
    assert (prov["versions_checked"], prov["versions_override"], prov["version_set"]) == (
        True, False, "reference-jax010")
    assert prov["backend"]["platform"] == "cpu" and prov["backend"]["matmul_precision"] == "highest"
    assert prov["reference"] == {"commit": rs.REF_COMMIT, "dirty": False,
                                 "verified": "git objects of the export (no .git)",
                                 "omitted": ["scores"]}
    assert run["config"]["resolved"]["jax"]["platform"] == "cpu"
    for name in ("run.json", "records.jsonl", "timing.json"):
        text = (device_run["unpacked"] / name).read_text()
        assert str(device_run["work"]) not in text and str(Path.home()) not in text, name


@pytest.mark.slow
@pytest.mark.reference
def test_keep_takes_the_archive_and_the_checkout_stays_verified(device_run, tmp_path):
    pfile = synthetic.write_params(tmp_path / "round.yaml", yaml.safe_load(ROUND))
    r = subprocess.run([sys.executable, "-m", "dreamer_parity.keep",
                        str(device_run["out"] / "cpu-s0.tar.gz"), str(tmp_path / "kept"),
                        "--params", str(pfile)], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "kept" / "s0").iterdir()) == [
        "DONE.json", "MANIFEST.json", "episodes.jsonl.gz", "records.jsonl.gz", "run.json",
        "timing.json"]
    rs.check_checkout(rs.checkout_dir(device_run["root"]))     # nothing written into it


@pytest.mark.reference
@pytest.mark.parametrize("jax, platform, message", [
    ("0.10.2", "tpu", "reference runner: error: reference.platform tpu: jax runs on cpu "
                      "(JAX_PLATFORMS='cpu')"),
    ("0.10.2", "cpu", "reference runner: error: reference.jax 0.10.2: its shims are for jax "
                      "0.10.2, but jax 0.4.26 is installed"),
])
def test_the_runner_stops_before_writing_when_jax_is_not_what_the_run_asks(
        tmp_path, jax, platform, message):
    """On the CPU a run asking for the TPU stops (no silent fallback); the 0.10.2
    environment's shims refuse jax 0.4.26.  Nothing is written."""
    env_jax = "0.10.2" if platform == "tpu" else "0.4.26"
    try:
        info = rs.check_setup(check_packages=False, jax=env_jax)
    except rs.SetupError as e:
        pytest.skip(f"reference environment {env_jax} not set up ({e})")
    import os
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": f"{REPO / 'src'}:{info['checkout']}"}
    out = tmp_path / "s0"
    r = subprocess.run([str(info["python"]), "-m", "dreamer_parity.reference.runner", "--json",
                        json.dumps({"seed": 0, "out": str(out), "profile": "smoke", "rows": 1200,
                                    "eval_every": 400, "eval_episodes": 2, "jax": jax,
                                    "platform": platform})],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1] == message
    assert not out.exists()

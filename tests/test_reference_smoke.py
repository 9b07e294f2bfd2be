"""Reference smoke runs (seeds 0 and 1, 1200 rows, evaluation every 400 rows with 2
episodes, smoke widths) through the real launcher; one shared session-scoped run, started
in the background at the session's first test (tests/conftest.py, ``background``).

Seed 0 runs the stock reference (decode ref, sampler stock); seed 1 runs with both
protocol patches (decode exact, sampler per_run), so both paths are exercised end to end.
"""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from dreamer_parity import records
from dreamer_parity.reference import runner as ref_runner
from dreamer_parity.reference import setup as rs
import synthetic  # tests/synthetic.py

REPO = Path(__file__).resolve().parents[1]
ROWS, EVERY, EPISODES = 1200, 400, 2
PATCHES = {0: ("ref", "stock"), 1: ("exact", "per_run")}

pytestmark = [pytest.mark.slow, pytest.mark.reference]


def _params(decode, sampler) -> dict:
    """The smoke round's parameters (written out complete by synthetic.write_params)."""
    return {"round": "smoke", "profile": "smoke", "seeds": [0, 1], "rows": ROWS,
            "eval_every": EVERY, "eval_episodes": EPISODES,
            "reference": {"decode": decode, "sampler": sampler, "source": "run"},
            "stats": {"s1_rows": [400, 800, 1200], "late_rows": [],
                      "concordance_rows": [1200], "concordance_range": [400, 1200]}}


#: conftest.background queues the two runs at the session's first test (start_in_background)
BACKGROUND_FIXTURES = ("smoke_runs",)


def start_in_background(background, tmp_path_factory):
    """Queue the two smoke runs on the session's background worker (tests/conftest.py):
    they run while other tests do, and ``smoke_runs`` waits for them.  Nothing is queued
    without the set-up (``smoke_runs`` then skips, saying why)."""
    try:
        rs.check_setup()
    except rs.SetupError:
        return
    base = tmp_path_factory.mktemp("reference-smoke")
    for seed, (decode, sampler) in PATCHES.items():
        pfile = base / f"params-s{seed}.yaml"
        synthetic.write_params(pfile, _params(decode, sampler))
        run_dir = records.run_dir(base / "results", "reference", seed)
        cmd = [sys.executable, "-m", "dreamer_parity.reference.launch", "--params", str(pfile),
               "--seed", str(seed), "--out", str(run_dir)]
        background.submit(f"reference-smoke-s{seed}", lambda cmd=cmd, run_dir=run_dir: (
            run_dir, background.run(cmd, cwd=REPO, timeout=1500)))


@pytest.fixture(scope="session")
def smoke_runs(background, tmp_path_factory):
    """``{seed: (run directory, launcher CompletedProcess)}`` of the two smoke runs."""
    try:
        info = rs.check_setup()
    except rs.SetupError as e:
        pytest.skip(f"reference not set up: run `make reference-setup` ({e})")
    if not background.queued("reference-smoke-s0"):
        start_in_background(background, tmp_path_factory)
    out = {}
    for seed in PATCHES:
        run_dir, proc = background.result(f"reference-smoke-s{seed}")
        assert proc.returncode == 0, proc.stderr[-4000:]
        out[seed] = (run_dir, proc)
    out["checkout"] = info["checkout"]
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_three_records_with_the_schedule_updates(smoke_runs, seed):
    run_dir, _ = smoke_runs[seed]
    done = records.read_done(run_dir)
    assert done["status"] == "ok" and "reason" not in done
    assert records.done_agrees(run_dir, done, "reference", seed)   # names this run.json
    recs = records.read_records(run_dir)
    assert [r["rows"] for r in recs] == [400, 800, 1200]
    assert [r["updates"] for r in recs] == [0, 0, 81]
    for r in recs:
        assert r["side"] == "reference" and r["seed"] == seed and r["status"] == "ok"
        assert len(r["eval_returns"]) == EPISODES and len(r["eval_lengths"]) == EPISODES
        # CartPole: one reward per step; an evaluation episode lasts at most 500 steps.
        assert r["eval_returns"] == [float(n) for n in r["eval_lengths"]]
        assert all(1 <= n <= 500 for n in r["eval_lengths"])
        assert r["eval_mean"] == pytest.approx(np.mean(r["eval_returns"]))
    if seed == 0:   # the initial policy's returns, equal on jax 0.10.2 (test_reference_jax010)
        assert recs[0]["eval_returns"] == [16.0, 41.0]
    # No update before the gate (row 1040): empty windows, no return normaliser yet.
    assert recs[0]["train"] == {} and recs[1]["train"] == {} and recs[0]["retnorm"] is None
    last = recs[2]
    for name in ("vector_loss", "reward_loss", "cont_loss", "dyn_loss", "rep_loss",
                 "actor_loss", "critic_loss", "replay_critic_loss", "ent/action/mean",
                 "opt_grad_norm", "ret/std", "ret_normed/std"):
        assert isinstance(last["train"][name], float), name
    assert not any(k.startswith("train/") or k.endswith("/dist") for k in last["train"])
    # The stock JAXAgent.train returns the previous call's metrics: 80 of 81 updates.
    assert last["train_counts"]["vector_loss"] == 80
    assert set(last["train_counts"]) == set(last["train"])
    rn = last["retnorm"]
    assert rn["scale"] == pytest.approx(max(1.0, rn["hi"] - rn["lo"]))


@pytest.mark.parametrize("seed", [0, 1])
def test_episodes_tile_every_env_and_the_flush_step_ran(smoke_runs, seed):
    run_dir, _ = smoke_runs[seed]
    eps = records.read_episodes(run_dir)
    timing = records.read_json(run_dir / "timing.json")
    last_row = ROWS // 16            # row 75: the flush step's env step
    # Most envs finish episodes in 76 rows under a near-random policy; an env whose first
    # episode outlasts the run has none (its rows belong to the unfinished episode).
    assert {e["worker"] for e in eps} <= set(range(16)) and len({e["worker"] for e in eps}) >= 8
    for w in range(16):
        mine = [e for e in eps if e["worker"] == w]
        start = 0
        for e in mine:                # in completion order
            assert e["seed"] == seed
            assert e["row_last"] == start + e["length"]     # L steps take L + 1 rows
            assert e["score"] == e["length"] and 1 <= e["length"] <= 500
            assert e["terminal"] or e["length"] == 500
            start = e["row_last"] + 1
        assert start - 1 <= last_row          # nothing recorded past the flush row
    flushed = [e for e in eps if e["row_last"] == last_row]
    assert timing["flush_episodes"] == len(flushed)
    assert timing["first_update_row"] == 1040 and timing["updates"] == 81
    assert timing["build_compile_s"] > 0 and timing["s_per_update_loop"] > 0
    assert timing["evaluations"] == 3


@pytest.mark.parametrize("seed", [0, 1])
def test_run_json_holds_the_resolved_config_patches_and_provenance(smoke_runs, seed):
    run_dir, proc = smoke_runs[seed]
    run = records.read_json(run_dir / "run.json")
    decode, sampler = PATCHES[seed]
    cfg = run["config"]
    assert run["side"] == "reference" and run["seed"] == seed
    assert {k: cfg[k] for k in ("profile", "rows", "eval_every", "eval_episodes", "decode",
                                "sampler")} == {
        "profile": "smoke", "rows": ROWS, "eval_every": EVERY, "eval_episodes": EPISODES,
        "decode": decode, "sampler": sampler}
    res = cfg["resolved"]
    ovr = ref_runner.overrides(seed, "smoke", ROWS)
    assert cfg["overrides"] == ovr
    for key, value in ovr.items():
        if key == r".*\.units":
            for path in ("enc.simple.units", "dec.simple.units", "rewhead.units",
                         "conhead.units", "actor.units", "critic.units"):
                node = res
                for part in path.split("."):
                    node = node[part]
                assert node == 16, path
            continue
        node = res
        for part in key.split("."):
            node = node[part]
        assert node == value, key
    assert res["dyn"]["rssm"]["deter"] == 64 and res["dyn"]["rssm"]["hidden"] == 16
    assert res["dyn"]["rssm"]["stoch"] == 32 and res["dyn"]["rssm"]["blocks"] == 8
    assert res["batch_size"] == 16 and res["batch_length"] == 65
    assert res["replay_length"] == 65
    expected = {0: [], 1: ["dreamerv3.jaxutils.TwoHotDist.mean",
                           "embodied.replay.selectors.Uniform.__init__"]}[seed]
    assert run["patches"] == {"decode": decode, "sampler": sampler, "replaced": expected}
    prov = run["provenance"]
    assert prov["reference"] == {"commit": rs.REF_COMMIT, "dirty": False}
    assert prov["versions"]["jax"] == "0.4.26"
    assert prov["version_set"] is None and prov["versions_override"] is False
    # the default environment: jax 0.4.26 as it is, no shim, no precision set
    assert run["environment"] == {
        "jax": "0.4.26", "version_set": None, "lock": "requirements-reference.lock",
        "interpreter": "venv", "off_lock": [], "shims": [], "threefry_partitionable": False,
        "platform": "cpu", "precision": "default", "backend": "cpu", "device_kind": "cpu",
        "matmul_precision": None}
    assert run["imported_from"]["dreamerv3.agent"] == "<reference-checkout>/dreamerv3/agent.py"
    assert run["imported_from"]["embodied"] == "<reference-checkout>/embodied/__init__.py"
    # No absolute path in what the run wrote.
    for name in ("run.json", "records.jsonl", "episodes.jsonl", "timing.json",
                 "logdir/config.yaml"):
        text = (run_dir / name).read_text()
        assert str(run_dir) not in text and str(Path.home()) not in text, name


def test_the_stock_config_file_and_final_parameters_are_written(smoke_runs):
    run_dir, _ = smoke_runs[0]
    cfg = (run_dir / "logdir" / "config.yaml").read_text()
    assert "train_ratio: 512" in cfg and "compute_dtype: float32" in cfg
    with np.load(run_dir / "params.npz") as z:
        names = list(z.keys())
        assert any("/retnorm/" in n for n in names)
        assert all(np.isfinite(z[n]).all() for n in names)
        total = sum(z[n].size for n in names if "/opt/" not in n and "slowcritic" not in n)
    assert total > 10_000
    with zipfile.ZipFile(run_dir / "params.npz") as zf:   # np.savez_compressed
        assert {i.compress_type for i in zf.infolist()} == {zipfile.ZIP_DEFLATED}


@pytest.mark.parametrize("seed", [0, 1])
def test_the_stock_initial_checkpoint_is_removed(smoke_runs, seed):
    run_dir, _ = smoke_runs[seed]
    files = sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*") if p.is_file())
    assert files == ["DONE.json", "episodes.jsonl", "logdir/config.yaml", "logdir/metrics.jsonl",
                     "params.npz", "records.jsonl", "run.json", "stdout.log", "timing.json"]


def test_checkout_is_untouched_after_the_runs(smoke_runs):
    checkout = smoke_runs["checkout"]
    status = subprocess.run(["git", "status", "--porcelain"], cwd=checkout,
                            capture_output=True, text=True, check=True).stdout
    assert status == ""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True,
                          text=True, check=True).stdout.strip()
    assert head == rs.REF_COMMIT


def test_progress_is_reported_on_stderr(smoke_runs):
    _, proc = smoke_runs[0]
    assert "rows 1200/1200 updates 81/81" in proc.stderr
    assert "upd/s) ETA" in proc.stderr


def test_a_completed_run_is_not_rerun(smoke_runs):
    run_dir, _ = smoke_runs[0]
    before = (run_dir / "records.jsonl").read_text()
    pfile = run_dir.parent.parent.parent / "params-s0.yaml"
    r = subprocess.run([sys.executable, "-m", "dreamer_parity.reference.launch", "--params",
                        str(pfile), "--seed", "0", "--out", str(run_dir)],
                       capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 2 and "already holds a completed reference run" in r.stderr
    assert (run_dir / "records.jsonl").read_text() == before

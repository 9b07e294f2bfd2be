"""End-to-end candidate runs at smoke size: records, determinism, resume, failures, CLI.

Most runs use the stand-in agent of ``candidate_stub`` (fast to compile); one test runs
the real agent at the smoke profile.
"""

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import candidate_stub as stub
import synthetic  # tests/synthetic.py
from dreamer_parity import params as paramslib
from dreamer_parity import records
from dreamer_parity.candidate.runtime import recording
from dreamer_parity.candidate.runtime import run as runlib

REPO = Path(__file__).resolve().parents[1]
SMOKE = paramslib.smoke_params()
CFG = stub.StubConfig()


def _run(tmp, name, params=SMOKE, work=None, **kw):
    out = tmp / name / "out"
    return out, runlib.run(params, out, work or (tmp / name / "work"), agent=stub, cfg=CFG,
                           **kw)


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("cand")


@pytest.fixture(scope="module")
def run_a(tmp):
    return _run(tmp, "a")


def _files(out, seed):
    d = records.run_dir(out, "candidate", seed)
    return {n: (d / n).read_text() for n in ("records.jsonl", "episodes.jsonl", "DONE.json")}


def _check_episodes(eps, steps_per_env):
    by_w = {}
    for e in eps:
        by_w.setdefault(e["worker"], []).append(e)
        assert e["length"] == e["score"] and 1 <= e["length"] <= 500
        assert e["terminal"] or e["length"] == 500
    for w, es in by_w.items():
        row = -1
        for e in es:   # each episode: a reset row plus `length` step rows
            row += 1 + e["length"]
            assert e["row_last"] == row
        assert es[-1]["row_last"] <= steps_per_env


@pytest.mark.slow
def test_smoke_run_records(run_a):
    out, res = run_a
    assert res["completed"] and res["resumed_from_rows"] == 0
    for seed in SMOKE["seeds"]:
        d = records.run_dir(out, "candidate", seed)
        run = records.read_run(d)
        assert run["done"] == {"status": "ok", "side": "candidate", "seed": seed,
                               "run_sha256": records.file_sha256(d / "run.json")}
        recs = run["records"]
        assert [r["rows"] for r in recs] == [400, 800, 1200]
        assert [r["updates"] for r in recs] == [0, 0, 81]
        for r in recs:
            assert r["side"] == "candidate" and r["seed"] == seed and r["status"] == "ok"
            assert len(r["eval_returns"]) == 2 and r["eval_returns"] == [float(x) for x in
                                                                         r["eval_lengths"]]
        # window means: nothing before the gate; NaNs skipped (stub: NaN every other update)
        assert recs[0]["retnorm"] is None and recs[0]["train"]["vector_loss"] is None
        last = recs[-1]
        assert last["train_counts"]["vector_loss"] == 81
        assert last["train_counts"]["maybe_nan"] == 41
        assert last["train"]["maybe_nan"] == pytest.approx(41.0)   # mean of 1, 3, ..., 81
        assert last["retnorm"]["lo"] == pytest.approx(-8.1, abs=1e-4)
        assert last["retnorm"]["scale"] == pytest.approx(48.6, abs=1e-3)
        # the same 2 initial states and noise at every evaluation: stub params barely move
        assert recs[0]["eval_returns"] == recs[1]["eval_returns"]
        eps = run["episodes"]
        _check_episodes(eps, 1200 // 16)
        for r in recs:
            assert r["s2"] == recording.s2(eps, 16, r["rows"] // 16)
        assert run["run"]["config"]["params"]["rows"] == 1200
        assert run["run"]["config"]["schedule"]["updates_at_points"] == [0, 0, 81]
        assert "repo" in run["run"]["provenance"]
        assert run["timing"]["compile_s"] > 0
        # CPU: the seed vmap runs the train step one seed at a time (candidate/runtime/seedmap.py)
        assert run["timing"]["backend"] == "cpu" and run["timing"]["seed_batch"] == 1
        with np.load(d / "params.npz") as z:
            assert set(z.files) == {"enc/w", "actor/w", "actor/b"}
            assert np.all(np.isfinite(z["actor/w"]))
    # seeds differ
    r0 = records.read_records(records.run_dir(out, "candidate", 0))
    r1 = records.read_records(records.run_dir(out, "candidate", 1))
    assert r0[-1]["train"] != r1[-1]["train"]


@pytest.mark.slow
def test_smoke_run_deterministic(tmp, run_a):
    out_b, res_b = _run(tmp, "b")
    for seed in SMOKE["seeds"]:
        assert _files(run_a[0], seed) == _files(out_b, seed)


@pytest.mark.slow
def test_resume_after_kill_gives_same_records(tmp, run_a):
    work = tmp / "c" / "work"
    out, res = _run(tmp, "c", work=work, hooks={"stop_after_points": 2})
    assert not res["completed"]
    assert not (records.run_dir(out, "candidate", 0) / records.DONE).exists()
    # a partial checkpoint write (killed while writing) leaves a temp file only
    key_dir = work / res["key"]
    (key_dir / "checkpoint.npz.tmp-99999").write_bytes(b"garbage")
    out2, res2 = _run(tmp, "c", work=work)
    assert res2["completed"] and res2["resumed_from_rows"] == 800, (res["key"], res2["key"])
    for seed in SMOKE["seeds"]:
        assert _files(run_a[0], seed) == _files(out2, seed)
    # other parameters: a clean start under another key
    other = paramslib.validate({**SMOKE, "decode": "ref"})
    _, res3 = _run(tmp, "c", params=other, work=work, hooks={"stop_after_points": 1})
    assert res3["key"] != res["key"] and res3["resumed_from_rows"] == 0


@pytest.mark.slow
def test_deadline_stops_with_a_checkpoint_and_resumes_to_the_same_records(tmp, run_a):
    """A deadline already passed: the run stops after its first chunk, writes a checkpoint
    (and none at the evaluation point before, with ``checkpoint="deadline"``) and no
    result file; the same run started again resumes there and writes run_a's records."""
    import time
    work = tmp / "d" / "work"
    out, res = _run(tmp, "d", work=work, deadline=time.perf_counter(), checkpoint="deadline")
    assert res["stopped"] == "deadline" and not res["completed"]
    assert not (out / "candidate").exists()
    ckpt = work / res["key"] / "checkpoint.npz"
    assert ckpt.exists()
    out2, res2 = _run(tmp, "d", work=work, deadline=time.perf_counter() + 3600,
                      checkpoint="deadline")
    assert res2["completed"] and res2["stopped"] is None
    assert res2["key"] == res["key"] and res2["resumed_from_rows"] == 400
    for seed in SMOKE["seeds"]:
        assert _files(run_a[0], seed) == _files(out2, seed)
    with pytest.raises(ValueError, match="checkpoint must be one of"):
        runlib.run(SMOKE, out2, work, agent=stub, cfg=CFG, checkpoint="sometimes")


@pytest.mark.slow
def test_nan_seed_fails_alone(tmp):
    import jax
    import jax.numpy as jnp

    def poison(carry, point):
        if point != 0:
            return carry
        agent = dict(carry["agent"])
        agent["params"] = jax.tree.map(lambda x: x.at[1].set(jnp.nan), agent["params"])
        return dict(carry, agent=agent)

    out, res = _run(tmp, "nan", hooks={"after_point": poison})
    ok = records.read_run(records.run_dir(out, "candidate", 0))
    assert ok["done"]["status"] == "ok" and len(ok["records"]) == 3
    bad_dir = records.run_dir(out, "candidate", 1)
    bad = records.read_run(bad_dir)
    assert bad["done"]["status"] == "failed"
    assert "rows 800" in bad["done"]["reason"] and "parameters" in bad["done"]["reason"]
    assert [r["status"] for r in bad["records"]] == ["ok", "failed"]
    assert [r["rows"] for r in bad["records"]] == [400, 800]


def _cli(tmp_path, text, extra=()):
    p = tmp_path / "p.yaml"
    p.write_text(text)
    code = ("import sys; from dreamer_parity.candidate.runtime.run import main; "
            f"rc = main(['--params', {str(p)!r}, '--out', {str(tmp_path / 'o')!r}, *{list(extra)!r}]); "
            "assert 'jax' not in sys.modules, 'jax imported before validation'; sys.exit(rc)")
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=env, cwd=tmp_path)


@pytest.mark.parametrize("over,needle", [
    ({"profile": "huge"}, "profile"),
    ({"decode": "fancy"}, "decode"),
    ({"seeds": [1, 1]}, "seeds"),
    ({"seeds": [-2]}, "seeds"),
    ({"seeds": [0.5]}, "seeds"),
    ({"rows": 1000, "eval_every": 400}, "eval_every"),
    ({"round": "README"}, "round"),
])
def test_cli_rejects_bad_params_before_compiling(tmp_path, over, needle):
    r = _cli(tmp_path, synthetic.params_text(over))
    assert r.returncode == 2, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("error: params: ") and needle in line
    assert not (tmp_path / "o").exists()


def test_cli_missing_file_and_work_dir_inside_out(tmp_path):
    r = subprocess.run([sys.executable, "-m", "dreamer_parity.candidate.runtime.run", "--params",
                        str(tmp_path / "nope.yaml"), "--out", "o"], capture_output=True,
                       text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 2 and "not found" in r.stderr
    r = _cli(tmp_path, synthetic.params_text({"round": "x"}),
             ["--work-dir", str(tmp_path / "o" / "w")])
    assert r.returncode == 2 and "--work-dir" in r.stderr


@pytest.mark.parametrize("extra,needle", [
    (["--checkpoint", "deadline"], "--checkpoint deadline needs --deadline-s"),
    (["--deadline-s", "0"], "--deadline-s 0.0: must be a positive number"),
    (["--deadline-s", "nan"], "--deadline-s nan: must be a positive number"),
    (["--set", "seeds"], "params: --set: 'seeds': expected KEY=VALUE"),
    (["--set", "seeds=[1, 1]"], "params: seeds: duplicate seeds"),
    (["--set", "round.x=1"], "params: --set: 'round.x': 'round' is not a section"),
])
def test_cli_refuses_a_deadline_it_cannot_keep(tmp_path, extra, needle):
    r = _cli(tmp_path, synthetic.params_text({"round": "x"}), extra)
    assert r.returncode == 2 and needle in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("value", ["0", "-2", "x", "1.5", "ALL", "", "1000001", "\u0663"])
def test_cli_refuses_a_bad_seed_batch_in_one_line(tmp_path, value):
    r = _cli(tmp_path, synthetic.params_text({"round": "x"}), ["--seed-batch", value])
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"error: --seed-batch {value!r}: must be auto, all or a whole number of seeds from 1 "
        f"to 1000000"]
    assert not (tmp_path / "o").exists()


def test_cli_hands_the_seed_batch_to_the_run(tmp_path, monkeypatch):
    """``--seed-batch`` reaches :func:`run` parsed (``all``: None), and run.json's
    ``args`` name it unless it is ``auto``."""
    seen = []
    monkeypatch.setattr(runlib, "run", lambda params, out, work, **kw: seen.append(kw) or
                        {"stopped": None})
    p = tmp_path / "p.yaml"
    p.write_text(synthetic.params_text({"round": "x"}))
    for text, value in (("7", 7), (" all", None), ("auto", "auto")):
        rc = runlib.main(["--params", str(p), "--out", str(tmp_path / "o"), "--work-dir",
                          str(tmp_path / "w"), "--seed-batch", text])
        assert rc == 0 and seen[-1]["seed_batch"] == value
        assert seen[-1]["argv"].get("seed_batch") == (None if value == "auto" else text.strip())
    assert len(seen) == 3


@pytest.mark.slow
def test_seed_batch_reaches_the_programs_and_keys_the_checkpoint(tmp, run_a):
    """An explicit seed batch is the one the programs were built with (what
    ``program_store.load_or_build`` returns is recorded), ``timing.json`` and ``run.json``
    record it, and it keys the checkpoint apart from auto's (1 on CPU) and from all
    seeds batched (None); on the CPU's seed mesh every device holds one seed, so the
    records are run_a's."""
    out, res = _run(tmp, "sb2", seed_batch=2)
    assert res["completed"] and run_a[1]["timing"]["seed_batch"] == 1
    assert res["timing"]["seed_batch"] == 2 and res["timing"]["seed_devices"] == 2
    _, res_all = _run(tmp, "sball", seed_batch=None, hooks={"stop_after_points": 1})
    assert res_all["timing"]["seed_batch"] is None
    assert len({run_a[1]["key"], res["key"], res_all["key"]}) == 3
    for seed in SMOKE["seeds"]:
        d = records.run_dir(out, "candidate", seed)
        assert records.read_json(d / "timing.json")["seed_batch"] == 2
        info = records.read_run_info(d / "run.json")
        assert info["config"]["seed_layout"] == {"seed_batch": 2, "seed_devices": 2}
        assert records.read_run_info(records.run_dir(run_a[0], "candidate", seed) / "run.json")[
            "config"]["seed_layout"] == {"seed_batch": 1, "seed_devices": 2}
        # DONE.json names its run.json, which records the seed batch: only it differs
        mine, theirs = _files(out, seed), _files(run_a[0], seed)
        assert mine["records.jsonl"] == theirs["records.jsonl"]
        assert mine["episodes.jsonl"] == theirs["episodes.jsonl"]
        assert mine["DONE.json"] != theirs["DONE.json"]
    with pytest.raises(ValueError, match="seed_batch must be a positive integer or None"):
        runlib.run(SMOKE, out, tmp / "sb0" / "work", agent=stub, cfg=CFG, seed_batch=0)


@pytest.mark.slow
def test_real_agent_smoke_run(tmp):
    """The real agent at the smoke profile: 81 updates, finite metrics, deterministic."""
    outs = []
    for name in ("real1", "real2"):
        out = tmp / name / "out"
        res = runlib.run(SMOKE, out, tmp / name / "work")
        assert res["completed"] and not res["failed"]
        outs.append(out)
    for seed in SMOKE["seeds"]:
        assert _files(outs[0], seed) == _files(outs[1], seed)
        run = records.read_run(records.run_dir(outs[0], "candidate", seed))
        recs = run["records"]
        assert [r["updates"] for r in recs] == [0, 0, 81]
        last = recs[-1]
        for name in ("vector_loss", "reward_loss", "cont_loss", "dyn_loss", "rep_loss",
                     "actor_loss", "critic_loss", "replay_critic_loss", "opt_loss"):
            assert last["train_counts"][name] == 81
            assert math.isfinite(last["train"][name])
        assert last["retnorm"] is not None and last["retnorm"]["scale"] >= 1.0
        assert all(0 < x <= 500 for x in last["eval_returns"])
        _check_episodes(run["episodes"], 1200 // 16)
        assert run["run"]["config"]["agent"]["deter"] == paramslib.PROFILES["smoke"]["deter"]

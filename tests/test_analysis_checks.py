"""Checks on synthetic runs: a clean round passes, each corruption fails the right check."""

import json

import pytest

from dreamer_parity import records, sides
from dreamer_parity.analysis import checks, load
import synthetic  # tests/synthetic.py
from dreamer_parity.params import eval_points, validate
from dreamer_parity.round_spec import Round

PARAMS = validate({"round": "t", "seeds": [0, 1], "rows": 1200, "eval_every": 400, "eval_episodes": 2,
                   "profile": "smoke", "stats": {"s1_rows": [400, 800, 1200], "concordance_rows": [1200],
                                                 "concordance_range": [400, 1200]}})


def _run_checks(params, root):
    ref = load.load_side(root / "reference", "reference", params["seeds"])
    cand = load.load_side(root / "candidate", "candidate", params["seeds"])
    load.check_eval_rows(ref + cand, eval_points(params))
    return checks.run_checks(Round.from_params(params), ref, cand)


def _status(cs, name, side="candidate", seed=0):
    [c] = [c for c in cs if name in c.name and c.side == side and c.seed == seed]
    return c


def _edit_jsonl(path, fn):
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    records.write_jsonl(path, fn(rows))


@pytest.fixture
def root(tmp_path):
    synthetic.write_round(tmp_path, PARAMS)
    return tmp_path


def test_clean_round_passes_every_check(root):
    cs = _run_checks(PARAMS, root)
    assert len(cs) == 1 + 4 * 7
    assert {c.status for c in cs} == {"PASS"}, [c.line() for c in cs if c.status != "PASS"]


def test_updates_off_schedule_fails(root):
    def bump(rows):
        rows[1]["updates"] += 1
        return rows
    _edit_jsonl(root / "candidate" / "s0" / "records.jsonl", bump)
    c = _status(_run_checks(PARAMS, root), "updates")
    assert c.status == "FAIL" and "800:" in c.detail


def test_episode_length_score_terminal_and_tiling_fail(root):
    path = root / "reference" / "s1" / "episodes.jsonl"

    def corrupt(rows):
        rows[0]["score"] += 1.0
        return rows
    _edit_jsonl(path, corrupt)
    c = _status(_run_checks(PARAMS, root), "episodes consistent", "reference", 1)
    assert c.status == "FAIL" and "length != score (episodes.jsonl line 1)" in c.detail

    synthetic.write_run(root / "reference", "reference", 1, PARAMS)

    def nonterminal(rows):
        rows[0]["terminal"] = False
        return rows
    _edit_jsonl(path, nonterminal)
    c = _status(_run_checks(PARAMS, root), "episodes consistent", "reference", 1)
    assert c.status == "FAIL" and "non-terminal" in c.detail

    synthetic.write_run(root / "reference", "reference", 1, PARAMS)

    def gap(rows):  # drop env 3's first episode: its rows are no longer tiled
        i = next(i for i, r in enumerate(rows) if r["worker"] == 3)
        return rows[:i] + rows[i + 1:]
    _edit_jsonl(path, gap)
    c = _status(_run_checks(PARAMS, root), "episodes consistent", "reference", 1)
    assert c.status == "FAIL" and "env 3" in c.detail


def test_tail_longer_than_an_episode_and_late_episode_fail(tmp_path):
    params = validate({"seeds": [0], "rows": 16000, "eval_every": 8000, "eval_episodes": 2,
                       "stats": {"s1_rows": [16000], "concordance_rows": [16000],
                                 "concordance_range": [8000, 16000]}})
    synthetic.write_round(tmp_path, params)
    path = tmp_path / "candidate" / "s0" / "episodes.jsonl"
    # keep only env 5's episodes ending before row 400: 600 unfinished rows follow
    _edit_jsonl(path, lambda rows: [r for r in rows if r["worker"] != 5 or r["row_last"] < 400])
    cs = _run_checks(params, tmp_path)
    c = _status(cs, "flush step")
    assert c.status == "FAIL" and "env 5" in c.detail and "at most 500" in c.detail

    synthetic.write_run(tmp_path / "candidate", "candidate", 0, params)

    def late(rows):
        rows.append({"seed": 0, "worker": 0, "row_last": 1001, "length": 1, "score": 1.0,
                     "terminal": True})
        return rows
    _edit_jsonl(path, late)
    c = _status(_run_checks(params, tmp_path), "flush step")
    assert c.status == "FAIL" and "1001 > 1000" in c.detail


def test_flush_count_must_match_timing(root):
    d = root / "reference" / "s0"
    t = records.read_json(d / "timing.json")
    t["flush_episodes"] += 1
    records.write_json(d / "timing.json", t)
    c = _status(_run_checks(PARAMS, root), "flush step", "reference", 0)
    assert c.status == "FAIL" and "flush_episodes" in c.detail


def _write_run(d, run):
    """Rewrite a run's run.json as its runner would have written it: DONE.json, which
    names run.json by its SHA-256, is rewritten after it with the same status."""
    done = records.read_done(d)
    records.write_json(d / "run.json", run)
    records.write_done(d, done["status"], done.get("reason"))


def test_config_mismatch_and_missing_key_fail(root):
    d = root / "candidate" / "s1"
    run = records.read_json(d / "run.json")
    run["args"]["decode"] = "ref"
    _write_run(d, run)
    c = _status(_run_checks(PARAMS, root), "config", "candidate", 1)
    assert c.status == "FAIL" and "decode 'ref' != 'exact'" in c.detail
    del run["args"]["decode"]
    _write_run(d, run)
    c = _status(_run_checks(PARAMS, root), "config", "candidate", 1)
    assert c.status == "FAIL" and "no decode" in c.detail
    d = root / "reference" / "s0"
    run = records.read_json(d / "run.json")
    run["args"]["reference"]["sampler"] = "per_run"
    _write_run(d, run)
    c = _status(_run_checks(PARAMS, root), "config", "reference", 0)
    assert c.status == "FAIL" and "sampler" in c.detail


def test_reference_provenance_must_be_29eb964_and_clean(root):
    d = root / "reference" / "s0"
    run = records.read_json(d / "run.json")
    run["provenance"]["reference"]["dirty"] = True
    _write_run(d, run)
    c = _status(_run_checks(PARAMS, root), "provenance", "reference", 0)
    assert c.status == "FAIL" and "dirty" in c.detail
    run["provenance"]["reference"] = {"commit": "1" * 40, "dirty": False}
    _write_run(d, run)
    c = _status(_run_checks(PARAMS, root), "provenance", "reference", 0)
    assert c.status == "FAIL" and "expected 29eb964" in c.detail
    c = _status(_run_checks(PARAMS, root), "provenance", "candidate", 0)
    assert c.status == "PASS" and "dirty False" in c.detail


def test_evaluation_episode_count(root):
    def drop(rows):
        rows[2]["eval_returns"] = rows[2]["eval_returns"][:1]
        rows[2]["eval_lengths"] = rows[2]["eval_lengths"][:1]
        rows[2]["eval_mean"] = rows[2]["eval_returns"][0]       # a consistent record
        rows[2]["eval_len_mean"] = rows[2]["eval_lengths"][0]
        return rows
    _edit_jsonl(root / "candidate" / "s1" / "records.jsonl", drop)
    c = _status(_run_checks(PARAMS, root), "every evaluation holds 2 episodes", "candidate", 1)
    assert c.status == "FAIL" and "[1200]" in c.detail


def test_failed_seed_is_flagged_not_failed(tmp_path):
    synthetic.write_round(tmp_path, PARAMS, fail={("candidate", 1): 800})
    cs = _run_checks(PARAMS, tmp_path)
    c = _status(cs, "completion", "candidate", 1)
    assert c.status == "FLAG" and "800" in c.detail and "zero" in c.detail
    assert not [c for c in cs if c.status == "FAIL"]


def test_nested_side_directory_and_params_in_config(tmp_path):
    # records.run_dir(out, side, seed) = <out>/<side>/s<seed>: accepted as <out>
    synthetic.write_round(tmp_path / "out", PARAMS)
    cand = tmp_path / "cand_out"
    cand.mkdir()
    (tmp_path / "out" / "candidate").rename(cand / "candidate")
    assert {e.layout for e in sides.side_from_dir(cand, "candidate", PARAMS["seeds"]).seeds} == \
        {"records"}
    runs = load.load_side(cand, "candidate", PARAMS["seeds"])
    assert [r.seed for r in runs] == [0, 1]
    # the candidate records its validated params under config.params, the seed at top level
    d = cand / "candidate" / "s0"
    run = records.read_json(d / "run.json")
    run["config"] = {"params": dict(PARAMS), "agent": {}}
    run["args"] = {"params": "params.yaml", "out": "<repo>/results/candidate"}
    _write_run(d, run)
    ref = load.load_side(tmp_path / "out" / "reference", "reference", PARAMS["seeds"])
    cs = checks.run_checks(Round.from_params(PARAMS), ref, load.load_side(cand, "candidate", PARAMS["seeds"]))
    c = _status(cs, "config", "candidate", 0)
    assert c.status == "PASS", c.detail
    run["config"]["params"] = dict(PARAMS, rows=2400)
    _write_run(d, run)
    cs = checks.run_checks(Round.from_params(PARAMS), ref, load.load_side(cand, "candidate", PARAMS["seeds"]))
    assert "rows 2400 != 1200" in _status(cs, "config", "candidate", 0).detail

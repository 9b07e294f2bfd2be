"""Our reference runs against the study's published reference runs (analysis/reference_check.py)."""

import json

import numpy as np
import pytest

from dreamer_parity import records
from dreamer_parity.analysis import compare, metrics_out, reference_check, report
import synthetic  # tests/synthetic.py
from dreamer_parity.analysis.load import load_side
from dreamer_parity.params import load, smoke_params, validate
from dreamer_parity.round_spec import Round

PUB = reference_check.PUBLISHED_DIR


def _round1(seeds=(0,)):
    p = load("tests/fixtures/params_round1.yaml")
    p["seeds"] = list(seeds)
    return validate(p)


def test_matching_rounds_by_grid_then_protocol():
    assert reference_check.matching_rounds(Round.from_params(_round1())) == [
        ("round1", True), ("round2", False)]
    exact = _round1()
    exact["reference"] = {**exact["reference"], "decode": "exact"}
    assert reference_check.matching_rounds(Round.from_params(exact)) == [
        ("round2", True), ("round1", False)]
    r3 = validate({"round": "r3", "rows": 24000, "eval_every": 400,
                   "reference": {"decode": "exact", "sampler": "per_run"}})
    assert reference_check.matching_rounds(Round.from_params(r3)) == [("round3", True)]
    assert reference_check.matching_rounds(Round.from_params(smoke_params())) == []


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    d = tmp_path_factory.mktemp("refcheck")
    params = _round1()
    synthetic.write_round(d, params)
    t = d / "reference" / "s0" / "timing.json"
    timing = json.loads(t.read_text())
    records.write_json(t, {**timing, "first_update_row": 1040, "flush_episodes": 0,
                           "s_per_update_loop": 0.9})
    return params, compare.analyse(Round.from_params(params), d / "reference", d / "candidate")


def test_published_values_are_the_studys(checked):
    params, res = checked
    rc = res["published_reference"]
    e = rc["rounds"][0]
    assert (e["name"], e["same_protocol"], rc["seeds"]) == ("round1", True, [0])
    study = json.loads((PUB / "round1" / "summary.json").read_text())
    assert e["s1"]["published"]["lo"] == pytest.approx(study["ref_S1_min"], abs=1e-9)
    assert e["s1"]["published"]["hi"] == pytest.approx(study["ref_S1_max"], abs=1e-9)
    np.testing.assert_allclose(e["s2"]["published"]["values"],
                               [study["per_seed"]["ref"][s]["S2"] for s in ("0", "1", "2")],
                               rtol=0, atol=1e-12)
    at = {p["rows"]: p for p in e["eval"]}
    assert at[20000]["published"]["values"] == [404.8, 466.1, 399.8]   # 399.8 < 400: 2 of 3
    assert e["concordance"] == [{"rows": 20000, "ours": int(at[20000]["ours"][0] >= 400),
                                 "ours_n": 1, "published": 2, "published_n": 3,
                                 "good_return": 400}]
    # the synthetic run follows the schedule: the update counts equal the study's
    assert e["updates"] == {"ours_last": [9481], "published_last": 9481, "equal": True,
                            "mismatches": []}
    assert e["first_update_row"] == {"ours": [1040], "published": [1040], "equal": True}
    assert e["flush_episodes"] == {"ours": [0], "published": [0], "equal": True}
    t0 = json.loads((PUB / "round1" / "ref_s0" / "timing.json").read_text())
    assert e["s_per_update"]["ours"] == [0.9]
    assert e["s_per_update"]["published"][0] == pytest.approx(
        (t0["t_end"] - t0["t_loop_start"]) / 9481, rel=1e-12)
    assert rc["rounds"][1]["name"] == "round2" and not rc["rounds"][1]["same_protocol"]


def test_summary_and_report(checked):
    _, res = checked
    s = metrics_out.summary(res)
    assert s["published_reference.round"] == "round1"
    assert s["published_reference.updates_equal"] is True
    assert s["published_reference.S1.s0"] == res["s1"]["values"]["reference"][0]
    assert metrics_out.missing_reasons(s) == []
    text = report.render(res)
    assert "### `data/published/round1` (same protocol; seeds [0, 1, 2])" in text
    assert "| updates at the last point | 9481 | 9481 | equal at every point |" in text


def test_counts_that_differ_are_named(checked):
    params, res = checked
    run = res["sides"]["reference"]["runs"][0]
    run.evals.loc[run.evals["rows"] == 4000, "updates"] = 1480
    run.timing["flush_episodes"] = 3
    try:
        e = reference_check.check(res["round"], res)["rounds"][0]
    finally:
        run.evals.loc[run.evals["rows"] == 4000, "updates"] = 1481
        run.timing["flush_episodes"] = 0
    assert e["updates"]["equal"] is False
    assert e["updates"]["mismatches"] == ["seed 0 rows 4000: 1480 vs 1481"]
    assert e["flush_episodes"] == {"ours": [3], "published": [0], "equal": False}
    lines = "\n".join(reference_check.report_lines({"rounds": [e], "reason": None, "seeds": [0]}))
    assert "DIFFER: seed 0 rows 4000: 1480 vs 1481" in lines
    assert "| episodes of the flush step | 3 | 0 | DIFFER |" in lines


def test_a_published_reference_or_another_grid_gives_no_check(tmp_path):
    d = PUB / "round1"
    params = _round1((0, 1, 2))
    params["reference"] = {**params["reference"], "source": "data/published/round1"}
    res = compare.analyse(Round.from_params(params), d, d / "ajax")
    assert res["published_reference"] is None
    odd = validate({**_round1(), "rows": 8000,
                    "stats": {**_round1()["stats"], "s1_rows": [8000], "concordance_rows": [8000],
                              "concordance_range": [4000, 8000]}})
    synthetic.write_round(tmp_path, odd)
    res = compare.analyse(Round.from_params(odd), tmp_path / "reference", tmp_path / "candidate")
    assert res["published_reference"]["rounds"] == []
    assert "rows 8000, eval_every 2000" in res["published_reference"]["reason"]


def test_same_seed_finds_where_the_episodes_part(checked):
    params, res = checked
    run = res["sides"]["reference"]["runs"][0]
    pub = {r.seed: r for r in load_side(
        PUB / "round1", "reference", [0, 1, 2])}
    # the synthetic seed 0 is not the study's: its first point already differs
    m = reference_check.same_seed(run, pub[0])
    assert m["rows"] == list(range(2000, 20001, 2000))
    assert (m["equal_through"], m["first_differ"], m["equal"][0]) == (None, 2000, False)
    saved = list(run.eval_returns)
    try:
        # the study's seed-0 episodes at the first three points, then one return off by 1
        for j in range(3):
            run.eval_returns[j] = list(pub[0].eval_returns[j])
        run.eval_returns[3] = [x + (1.0 if i == 9 else 0.0)
                               for i, x in enumerate(pub[0].eval_returns[3])]
        m = reference_check.same_seed(run, pub[0])
        assert m["equal"][:4] == [True, True, True, False]
        assert (m["equal_through"], m["first_differ"]) == (6000, 8000)
        e = reference_check.check(res["round"], res)["rounds"][0]
        assert e["same_seed"][0]["equal_through"] == 6000
        rc = {"rounds": [e], "reason": None, "seeds": [0]}
        assert reference_check.summary_keys(rc)[
            "published_reference.same_seed.s0.equal_through_rows"] == 6000
        assert ("| seed 0: every episode return equal to the published seed 0's | 3 of 10 "
                "points | | equal through 6000 rows, first differ at 8000 rows |"
                ) in reference_check.report_lines(rc)
    finally:
        run.eval_returns[:] = saved
    # a seed the study did not run gets no entry
    run.seed = 7
    try:
        assert reference_check.check(res["round"], res)["rounds"][0]["same_seed"] == []
    finally:
        run.seed = 0

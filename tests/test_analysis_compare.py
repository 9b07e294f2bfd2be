"""The compare stage end to end on synthetic runs: outputs, exit status, bad input,
failed seeds, degenerate statistics, training-metric windows."""

import json

import numpy as np
import pandas as pd
import pytest

from dreamer_parity import records
from dreamer_parity.analysis import compare, load, metrics_out, stats
import synthetic  # tests/synthetic.py
from dreamer_parity.params import load_round, validate
from dreamer_parity.round_spec import Round

RAW = {"round": "t3", "seeds": [0, 1, 2], "rows": 2400, "eval_every": 400, "eval_episodes": 2,
       "profile": "smoke",
       "stats": {"s1_rows": [1600, 2000, 2400], "late_rows": [1200, 2400],
                 "concordance_rows": [2000, 2400], "concordance_range": [1600, 2400]}}
PARAMS = validate(RAW)
ROUND = Round.from_params(PARAMS)


def _cli(tmp_path, root, extra=(), params=RAW):
    synthetic.write_params(tmp_path / "params.yaml", params)
    return compare.main(["--params", str(tmp_path / "params.yaml"),
                         "--reference", str(root / "reference"), "--candidate", str(root / "candidate"),
                         "--metrics-dir", str(tmp_path / "metrics"),
                         "--plots-dir", str(tmp_path / "metrics" / "plots"),
                         "--report", str(tmp_path / "results" / "report.md"), *extra])


def _no_nan(text):
    assert "NaN" not in text and "Infinity" not in text


def test_cli_writes_every_output(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "runs"
    synthetic.write_round(root, PARAMS)
    prereg = tmp_path / "docs" / "rounds" / "t3.md"
    prereg.parent.mkdir(parents=True)
    prereg.write_text("# pre-registration\n")
    assert _cli(tmp_path, root, ["--prereg", str(prereg)]) == 0
    text = (tmp_path / "metrics" / "summary.json").read_text()
    _no_nan(text)
    s = json.loads(text)
    # default eval_fn: every seed and side identical, 2 episodes around a rising base
    for key in ("S1", "LATE"):
        assert s[f"{key}.A"] == s[f"{key}.lo"] == s[f"{key}.hi"]
        assert s[f"{key}.LEARNS"] is True and s[f"{key}.WITHIN_RANGE"] is True
        assert s[f"{key}.welch_p"] is None and "no variance" in s[f"{key}.welch.reason"]
        assert s[f"{key}.addition.boot_lo"] == s[f"{key}.addition.boot_hi"] == 0.0
    # evaluations [base - 10, base], base = min(500, 20 + 480 rows / 2400): 335, 415, 495
    assert s["S1.reference.s0"] == s["S1.candidate.s2"] == 415.0
    # 150 rows per env: env draws of candidate seed 1 leave one env without a finished episode
    assert s["S2.row"] == 2400 and s["S2.candidate.s1"] is None
    assert "no finished episode" in s["S2.candidate.s1.reason"]
    assert s["S2.A"] is None and s["S2.reason"] == "S2(2400) undefined for candidate seed 1"
    assert s["S2.reference.s0"] > 0 and s["S2.candidate.s0"] > 0
    assert metrics_out.missing_reasons(s) == []
    assert s["LATE.points"] == 4
    # identical sides: no difference to read, and no variance for the Welch test
    assert s["concordance.reading"] == "H2 or noise"
    assert "no variance" in s["concordance.reading.reason"]
    assert s["concordance.candidate.rate"] == s["concordance.reference.rate"] == 2 / 3
    assert s["entropy.windows"] == 6 and s["entropy.overlap_windows"] == 6
    assert s["checks.failed"] == 0 and s["checks.passed"] > 0
    curve = pd.read_csv(tmp_path / "metrics" / "plots" / "eval_curve.csv")
    assert list(curve.columns) == ["rows", "side", "seed", "eval_mean", "s2"]
    assert len(curve) == 2 * 3 * 6
    ent = pd.read_csv(tmp_path / "metrics" / "plots" / "entropy_windows.csv")
    assert len(ent) == 12 and set(ent["side"]) == {"reference", "candidate"}
    for name in ("eval_curves.png", "s2_curve.png", "entropy_windows.png"):
        assert (tmp_path / "metrics" / "plots" / name).read_bytes()[:4] == b"\x89PNG"
    report = (tmp_path / "results" / "report.md").read_text()
    assert "[../docs/rounds/t3.md](../docs/rounds/t3.md)" in report
    assert "failed_rule = zero" in report and "D22" in report and "D2, shared" in report
    assert str(tmp_path) not in report
    assert "Exploratory additions: seed bootstrap and power (not pre-registered)" in report


def test_failing_check_exits_1_and_still_writes(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "runs"
    synthetic.write_round(root, PARAMS)
    path = root / "candidate" / "s2" / "records.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[-1]["updates"] = 0
    records.write_jsonl(path, rows)
    assert _cli(tmp_path, root) == 1
    err = capsys.readouterr().err
    assert "1 check(s) failed" in err and "candidate s2: updates equal the schedule" in err
    s = json.loads((tmp_path / "metrics" / "summary.json").read_text())
    assert s["checks.failed"] == 1
    assert "**1 failed**" in (tmp_path / "results" / "report.md").read_text()


def test_missing_marker_and_truncated_record_exit_2_naming_the_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "runs"
    synthetic.write_round(root, PARAMS)
    (root / "reference" / "s1" / "DONE.json").unlink()
    assert _cli(tmp_path, root) == 2
    err = capsys.readouterr().err
    assert "s1/DONE.json" in err and "completion marker" in err
    assert not (tmp_path / "metrics" / "summary.json").exists()
    synthetic.write_run(root / "reference", "reference", 1, PARAMS)
    path = root / "candidate" / "s0" / "records.jsonl"
    path.write_text(path.read_text()[:-40])
    assert _cli(tmp_path, root) == 2
    err = capsys.readouterr().err
    assert "s0/records.jsonl:6" in err and "truncated" in err


def test_different_evaluation_rows_are_an_error(tmp_path):
    root = tmp_path / "runs"
    synthetic.write_round(root, PARAMS)
    other = validate(dict(RAW, eval_every=800, stats=dict(RAW["stats"], s1_rows=[1600, 2400],
                                                          late_rows=[800, 2400],
                                                          concordance_rows=[2400])))
    d = synthetic.write_run(root / "candidate", "candidate", 1, other)
    # its run.json says so: refused as a run of other parameters, before its rows are read
    with pytest.raises(records.RecordError, match=r"s1/run.json: eval_every 800 != 400: the run "
                                                  r"was made with other parameters"):
        compare.analyse(ROUND, root / "reference", root / "candidate")
    # a run.json that claims the round's grid: its rows give it away
    run = records.read_json(d / "run.json")
    run["args"]["eval_every"] = 400
    records.write_json(d / "run.json", run)
    records.write_done(d, "ok")
    with pytest.raises(load.AnalysisError, match=r"candidate seed 1 .*missing rows \[400, 1200, 2000\]"):
        compare.analyse(ROUND, root / "reference", root / "candidate")


def test_statistic_rows_missing_from_a_run_are_named(tmp_path):
    root = tmp_path / "runs"
    synthetic.write_round(root, PARAMS)
    runs = load.load_side(root / "reference", "reference", [0])
    with pytest.raises(load.AnalysisError, match=r"no evaluation at rows \[2800\]"):
        stats.s1_values(runs, [2400, 2800])


def test_malformed_published_line_is_named(tmp_path):
    d = tmp_path / "pub" / "ref_s0"
    d.mkdir(parents=True)
    (d / "evals.jsonl").write_text('{"seed": 0, "rows": 400, "updates": 0, "mean": 1.0}\n{"seed": 0,\n')
    synthetic.reseal(tmp_path / "pub")    # the study's files come with their manifest
    with pytest.raises(records.RecordError, match=r"evals.jsonl:2: truncated or invalid JSON"):
        load.load_side(tmp_path / "pub", "reference", [0])


def test_failed_seed_scores_zero_and_is_reported(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "runs"
    synthetic.write_round(root, PARAMS, eval_fns={s: (lambda n, seed: [500.0, 500.0]) for s in records.SIDES},
                          fail={("candidate", 1): 2000})
    res = compare.analyse(ROUND, root / "reference", root / "candidate")
    assert res["round"] is ROUND and res["seeds"] == ROUND.seeds()   # passed on, not re-derived
    s1 = res["s1"]["values"]["candidate"]
    assert list(s1) == [500.0, 500.0 / 3, 500.0]  # 1600 counts, 2000 and 2400 score 0
    assert list(res["late"]["values"]["candidate"]) == [500.0, 250.0, 500.0]
    assert res["s2"]["curve"]["candidate"][1, -2:].tolist() == [0.0, 0.0]
    assert res["concordance"]["at"][2400] == {"reference": 3, "candidate": 2}
    compare.write_outputs(res, tmp_path / "m", tmp_path / "m" / "plots", tmp_path / "r.md", figures=False)
    s = json.loads((tmp_path / "m" / "summary.json").read_text())
    assert metrics_out.missing_reasons(s) == []
    assert s["failed_seeds.candidate"] == 1 and s["S1.candidate.s1"] == pytest.approx(500 / 3)
    assert s["S1.LEARNS"] is False and s["checks.flagged"] == 1 and s["checks.failed"] == 0
    report = (tmp_path / "r.md").read_text()
    assert "**candidate seed 1 FAILED** from row 2000" in report and "failed_rule = zero" in report


def test_constant_500_everywhere_has_no_nan_and_reasons(tmp_path):
    root = tmp_path / "runs"
    synthetic.write_round(root, PARAMS, eval_fns={s: (lambda n, seed: [500.0, 500.0]) for s in records.SIDES})
    res = compare.analyse(ROUND, root / "reference", root / "candidate")
    s = metrics_out.summary(res)
    _no_nan(json.dumps(s, allow_nan=True))
    assert s["S1.A"] == 500.0 and s["S1.welch_t"] is None and s["S1.welch.reason"]
    assert s["S1.addition.boot_lo"] == s["S1.addition.boot_hi"] == 0.0
    assert s["S1.addition.seeds_needed"] is None and s["S1.addition.seeds_needed.reason"]
    assert s["concordance.reference.rate"] == 1.0
    # H1 needs the reference's rate over the range to be at most 0.4: here it is 1.0
    assert s["concordance.H1"] is False and s["concordance.H3"] is False
    assert s["concordance.reading"] == "H2 or noise" and "Welch" in s["concordance.reading.reason"]
    assert metrics_out.missing_reasons(s) == []
    assert metrics_out.missing_reasons({"S1.welch_p": None, "S1.lo": 1.0}) == ["S1.welch_p"]


def test_training_windows_overlap_relative_embed_and_null_windows(tmp_path):
    root = tmp_path / "runs"
    synthetic.write_round(root, PARAMS)

    def shifted(rows, seed):
        x = rows / PARAMS["rows"]
        return {"ent/action/mean": 0.69 - 0.5 * x + 0.2, "activation/embed": 0.3 + 0.1 * seed,
                "vector_loss": None, "reward_loss": 0.7}
    for s in PARAMS["seeds"]:
        synthetic.write_run(root / "candidate", "candidate", s, PARAMS, train_fn=shifted)
    res = compare.analyse(ROUND, root / "reference", root / "candidate")
    t = res["windows"]["table"]
    assert res["entropy"] == {"overlap": 0, "windows": 6, "reason": None}
    ent = t[t["metric"] == stats.ENTROPY].iloc[0]
    assert ent["reference_lo"] == pytest.approx(0.69 - 0.5 / 6)
    assert ent["reference_hi"] == pytest.approx(0.69 - 0.5 / 6 + 0.02)
    assert ent["candidate_mean"] == pytest.approx(0.69 - 0.5 / 6 + 0.2)
    assert ent["ratio"] == pytest.approx((0.69 - 0.5 / 6 + 0.2) / (0.69 - 0.5 / 6 + 0.01))
    rel = t[t["metric"] == stats.EMBED_REL]
    assert rel["candidate_mean"].tolist() == pytest.approx([1.0] * 6)
    assert rel["reference_mean"].iloc[0] == pytest.approx(1.0)
    # vector_loss null on the candidate side everywhere: not a metric both sides report
    assert "vector_loss" not in set(t["metric"])
    first = t[(t["metric"] == "reward_loss") & (t["rows"] == 400)].iloc[0]
    assert first["reference_n"] == 0 and pd.isna(first["overlap"]) and pd.isna(first["ratio"])
    s = metrics_out.summary(res)
    assert s["entropy.overlap_windows"] == 0 and s["entropy.w400.overlap"] is False
    assert metrics_out.missing_reasons(s) == []


def test_the_same_seeds_in_another_order_give_byte_identical_outputs(tmp_path):
    """Order does not matter (#57): params.yaml with seeds [4, 3, 2, 1, 0] and with
    [0, 1, 2, 3, 4] give byte-identical summary.json, windows.json, plot data and report;
    every resampling (the bootstrap of the difference, rliable's IQM and PoI) sees the
    seeds in one canonical order (params.validate sorts them)."""
    raw = {**RAW, "seeds": [0, 1, 2, 3, 4]}

    def spread(side_shift):
        return lambda rows, seed: [float(min(500, 20 + rows // 10 + 37 * seed + side_shift + k))
                                   for k in range(2)]

    root = tmp_path / "runs"
    synthetic.write_round(root, validate(raw), eval_fns={"reference": spread(0),
                                                         "candidate": spread(11)})
    outputs = {}
    for order in ([4, 3, 2, 1, 0], [0, 1, 2, 3, 4]):
        out = tmp_path / "-".join(map(str, order))
        round_ = load_round(synthetic.write_params(out / "params.yaml", {**raw, "seeds": order}))
        assert round_.reference.seeds == round_.candidate.seeds == (0, 1, 2, 3, 4)
        res = compare.analyse(round_, root / "reference", root / "candidate")
        compare.write_outputs(res, out / "metrics", out / "metrics" / "plots",
                              out / "report.md", figures=False)
        outputs[tuple(order)] = {str(p.relative_to(out)): p.read_bytes()
                                 for p in sorted(out.rglob("*")) if p.is_file()
                                 and p.name != "params.yaml"}
    first, *rest = outputs.values()
    assert "metrics/summary.json" in first and "report.md" in first
    assert len(first) > 5
    s = json.loads(first["metrics/summary.json"])
    assert s["LATE.addition.boot_lo"] is not None and s["addition.rliable.poi_lo"] is not None
    for other in rest:
        assert other == first

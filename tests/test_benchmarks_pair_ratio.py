"""The pairing script's parsing and summary (benchmarks/pair_ratio.py); no benchmark runs."""

import importlib.util
import json
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "pair_ratio", Path(__file__).resolve().parents[1] / "benchmarks" / "pair_ratio.py")
pair_ratio = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(pair_ratio)


def test_parse_result_takes_the_last_result_line_and_names_the_script_on_failure():
    out = "| table |\nRESULT {\"a\": 1}\nnoise\nRESULT {\"a\": 2, \"b\": [3]}\n"
    assert pair_ratio.parse_result(out, "bench_x") == {"a": 2, "b": [3]}
    with pytest.raises(ValueError, match="bench_x: no RESULT line"):
        pair_ratio.parse_result("| table |\n", "bench_x")
    with pytest.raises(ValueError, match="bench_y: RESULT line is not valid JSON"):
        pair_ratio.parse_result("RESULT {oops", "bench_y")


def test_figures_are_read_from_the_benchmarks_result_fields():
    cand = {"throughput": {"1": {"s_per_update_per_seed": 0.47},
                           "3": {"s_per_update_per_seed": 0.363}}}
    assert pair_ratio.candidate_s_per_seed_update(cand, 3) == 0.363
    assert pair_ratio.candidate_s_per_seed_update(cand, 1) == 0.47
    with pytest.raises(ValueError, match="no throughput figure for 2 seed"):
        pair_ratio.candidate_s_per_seed_update(cand, 2)
    assert pair_ratio.reference_s_per_update({"s_per_update_loop": 1.028}) == 1.028
    with pytest.raises(ValueError, match="s_per_update_loop"):
        pair_ratio.reference_s_per_update({"s_per_update_isolated": [1.0, 1.0]})


def test_summary_judges_the_target_by_the_median_of_the_ratios():
    # three measured pairings (docs/PERFORMANCE.md): 3.25x, 2.75x and 2.64x.
    pairs = [{"candidate_s": 0.329, "reference_s": 1.070},
             {"candidate_s": 0.374, "reference_s": 1.028},
             {"candidate_s": 0.360, "reference_s": 0.952}]
    s = pair_ratio.summarise(pairs)
    assert [round(p["ratio"], 3) for p in s["pairs"]] == [3.252, 2.749, 2.644]
    assert s["median_ratio"] == pytest.approx(1.028 / 0.374)
    assert s["min_ratio"] == pytest.approx(0.952 / 0.360)
    assert s["max_ratio"] == pytest.approx(1.070 / 0.329)
    assert s["median_meets_target"] is False
    assert s["median_candidate_s"] == 0.360 and s["median_reference_s"] == 1.028
    # An even count takes the mean of the middle two; 2.9x and 3.1x meet 3x.
    s = pair_ratio.summarise([{"candidate_s": 1.0, "reference_s": 2.9},
                              {"candidate_s": 1.0, "reference_s": 3.1}])
    assert s["median_ratio"] == pytest.approx(3.0) and s["median_meets_target"] is True
    json.dumps(s)                                   # the RESULT line must serialise


def test_summary_rejects_empty_and_non_positive_figures():
    with pytest.raises(ValueError, match="no pairings"):
        pair_ratio.summarise([])
    with pytest.raises(ValueError, match="pairing 2: figures must be positive"):
        pair_ratio.summarise([{"candidate_s": 0.3, "reference_s": 1.0},
                              {"candidate_s": 0.0, "reference_s": 1.0}])


@pytest.mark.parametrize("args, name", [(["--pairs", "0"], "--pairs"),
                                        (["--seeds", "0"], "--seeds"),
                                        (["--timed-chunks", "0"], "--timed-chunks")])
def test_bad_arguments_stop_before_any_benchmark_runs(args, name, capsys):
    assert pair_ratio.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {name} 0: must lie in") and err.count("\n") == 1


def test_main_alternates_the_order_and_writes_the_summary(tmp_path, monkeypatch, capsys):
    from dreamer_parity.reference import setup as rs
    monkeypatch.setattr(rs, "check_setup", lambda root: {})
    calls, cand_s, ref_s = [], iter([0.30, 0.32, 0.31]), iter([0.90, 0.80, 0.93])

    def fake_run(cmd, what):
        calls.append(what)
        if what == "bench_candidate":
            assert "--skip-cold" in cmd and cmd[cmd.index("--seeds") + 1] == "3"
            return {"code": {"commit": "abc1234", "dirty": False},
                    "throughput": {"3": {"s_per_update_per_seed": next(cand_s),
                                         "cpu_s_per_seed_update": 0.6}}}
        assert cmd[cmd.index("--profile") + 1] == "full"
        return {"s_per_update_loop": next(ref_s)}

    monkeypatch.setattr(pair_ratio, "_run", fake_run)
    out = tmp_path / "pairs.json"
    assert pair_ratio.main(["--pairs", "3", "--out", str(out)]) == 0
    assert calls == ["bench_candidate", "bench_reference", "bench_reference",
                     "bench_candidate", "bench_candidate", "bench_reference"]
    res = json.loads(out.read_text())
    assert [round(p["ratio"], 4) for p in res["pairs"]] == [3.0, 2.5, 3.0]
    assert res["median_ratio"] == pytest.approx(3.0) and res["median_meets_target"] is True
    err = capsys.readouterr().err
    assert "pairing 2: candidate 0.320 s, reference 0.800 s, ratio 2.50x" in err
    assert not (tmp_path / "pairs.json.tmp").exists()

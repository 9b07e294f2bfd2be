"""The analysis reproduces the published study's own numbers from its published files."""

import json

import numpy as np
import pytest

from pathlib import Path

from dreamer_parity import sides
from dreamer_parity.analysis import compare, load, metrics_out, published, published_tables, stats
from dreamer_parity.params import validate
import synthetic  # tests/synthetic.py
from dreamer_parity.round_spec import Round

SEEDS = [0, 1, 2]
S1_ROWS = [16000, 18000, 20000]

# (summary.json, reference round dir, candidate round dir, compare.md)
PAIRS = {
    "round1": ("round1/summary.json", "round1", "round1", "round1/compare.md"),
    "pairE": ("round2/pairE/summary.json", "round2", "round1", "round2/pairE/compare.md"),
    "pairR": ("round2/pairR/summary.json", "round1", "round2", "round2/pairR/compare.md"),
}


@pytest.fixture(scope="module", params=sorted(PAIRS))
def pair(request, published_dir):
    summ, ref, cand, md = PAIRS[request.param]
    expected = json.loads((published_dir / summ).read_text())
    ref_runs = load.load_side(published_dir / ref, "reference", SEEDS)
    cand_runs = load.load_side(published_dir / cand, "candidate", SEEDS)
    return expected, ref_runs, cand_runs, (published_dir / "tables.csv", md)


def test_layout_detected(published_dir):
    ref = sides.side_from_dir(published_dir / "round1", "reference", SEEDS)
    assert {(e.layout, e.made_by) for e in ref.seeds} == {("published", "reference")}
    assert Path(ref.seeds[0].run_dir).name == f"ref_s{SEEDS[0]}"
    cand = sides.side_from_dir(published_dir / "round1" / "ajax", "candidate", SEEDS)
    assert {(e.layout, e.made_by) for e in cand.seeds} == {("published", "candidate")}


def test_s1_and_rule_equal_published_summary(pair):
    expected, ref_runs, cand_runs, _ = pair
    s1_ref = stats.s1_values(ref_runs, S1_ROWS)
    s1_cand = stats.s1_values(cand_runs, S1_ROWS)
    for i, s in enumerate(SEEDS):
        assert s1_ref[i] == pytest.approx(expected["per_seed"]["ref"][str(s)]["S1"], abs=1e-9)
        assert s1_cand[i] == pytest.approx(expected["per_seed"]["ajax"][str(s)]["S1"], abs=1e-9)
    d = stats.decide(s1_cand, s1_ref, "S1")
    assert d["A"] == pytest.approx(expected["A"], abs=1e-9)
    assert d["lo"] == pytest.approx(expected["ref_S1_min"], abs=1e-9)
    assert d["hi"] == pytest.approx(expected["ref_S1_max"], abs=1e-9)
    assert d["LEARNS"] is expected["LEARNS"]
    assert d["WITHIN_RANGE"] is expected["WITHIN_RANGE"]


def test_eval_curve_equals_published_summary_and_compare_md(pair):
    expected, ref_runs, cand_runs, md = pair
    pts = expected["rows"]
    ev = {"ref": stats.eval_matrix(ref_runs, pts), "ajax": stats.eval_matrix(cand_runs, pts)}
    table = published_tables.curve_table(*md)
    assert list(table.index) == pts
    for side in ("ref", "ajax"):
        for i, s in enumerate(SEEDS):
            np.testing.assert_allclose(ev[side][i], expected["per_seed"][side][str(s)]["eval"],
                                       rtol=0, atol=1e-9)
            # compare.md prints one decimal
            np.testing.assert_allclose(ev[side][i], table[f"{side} s{s}"].to_numpy(), rtol=0,
                                       atol=0.05 + 1e-9)
        np.testing.assert_allclose(ev[side].mean(axis=0), table[f"{side} mean"].to_numpy(), rtol=0,
                                   atol=0.05 + 1e-9)


def test_round1_updates_match_schedule_and_published_counts(published_dir):
    runs = load.load_side(published_dir / "round1", "reference", SEEDS)
    assert runs[0].evals["updates"].tolist()[-1] == 9481


def test_cli_on_published_round1(published_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    synthetic.write_params(tmp_path / "params.yaml", {"round": "round1"})
    rc = compare.main(["--params", "params.yaml", "--reference", str(published_dir / "round1"),
                       "--candidate", str(published_dir / "round1" / "ajax"),
                       "--metrics-dir", "metrics", "--plots-dir", "metrics/plots",
                       "--report", "results/report.md"])
    assert rc == 0
    text = (tmp_path / "metrics" / "summary.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    s = json.loads(text)
    assert s["S1.A"] == pytest.approx(204.13333638509116, abs=1e-9)
    assert s["S1.LEARNS"] is False and s["S1.WITHIN_RANGE"] is False
    # statistics that need episodes or training metrics: not available, with the reason
    assert "S2.A" not in s and "episodes" in s["S2.reason"]
    assert s["entropy.overlap_windows"] is None and "training-metric" in s["entropy.reason"]
    assert s["checks.failed"] == 0 and s["checks.not_available"] > 0
    assert metrics_out.missing_reasons(s) == []
    report = (tmp_path / "results" / "report.md").read_text()
    assert "N/A" in report and str(published_dir) not in report and str(tmp_path) not in report
    assert "<outside>/published/round1" in report
    assert "| 20000 | 404.8 | 466.1 | 399.8 | 423.6 | 143.3 | 178.3 | 500.0 | 273.9 |" in report
    for name in ("eval_curves.png", "s2_curve.png", "entropy_windows.png", "eval_curve.csv",
                 "entropy_windows.csv"):
        assert (tmp_path / "metrics" / "plots" / name).stat().st_size > 0


def test_reference_source_param_selects_published(published_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(published_dir.parents[1])             # the repository root
    params = validate({"reference": {"source": "data/published/round2"}})
    res = compare.analyse(Round.from_params(params), params["reference"]["source"],
                          published_dir / "round1" / "ajax")
    assert res["s1"]["decision"]["lo"] == pytest.approx(265.1666666666667, abs=1e-9)

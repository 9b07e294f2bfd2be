"""The pre-registered window tests (analysis/window_tests.py): per-window comparisons, the
early-signature reading (P1), the persistence stretch (P3), their summary keys and report
section, and the params that name their rows."""

import json
import math

import numpy as np
import pytest
import scipy.stats as sps

from dreamer_parity.analysis import compare, metrics_out, window_tests as wt
from dreamer_parity.params import ParamsError, validate
from test_analysis_windows import RAW, publish, runs, train_fn  # noqa: F401 (fixture)
import synthetic  # tests/synthetic.py
from dreamer_parity import records


def test_window_test_values():
    ref = np.array([0.004, 0.005, 0.006, 0.003, 0.010])
    cand = np.array([0.09, 0.05, 0.07, 0.08, 0.06])
    t = wt.window_test(ref, cand)
    assert t["reference_mean"] == pytest.approx(0.0056)
    assert t["reference_median"] == 0.005
    assert t["candidate_mean"] == pytest.approx(0.07)
    assert t["ratio"] == pytest.approx(0.07 / 0.0056)
    assert t["ratio_to_median"] == pytest.approx(14.0)
    assert (t["reference_lo"], t["reference_hi"]) == (0.003, 0.010)
    assert (t["candidate_lo"], t["candidate_hi"]) == (0.05, 0.09)
    assert t["overlap"] is False and t["above"] is True and t["below"] is False
    assert t["welch_p"] == pytest.approx(sps.ttest_ind(cand, ref, equal_var=False).pvalue, rel=1e-12)
    # overlapping ranges; a NaN seed makes the window untestable
    t = wt.window_test(np.array([1.0, 3.0]), np.array([2.0, 4.0]))
    assert t["overlap"] is True and t["above"] is False and t["below"] is False
    t = wt.window_test(np.array([1.0, np.nan]), np.array([2.0, 4.0]))
    assert t["ratio"] is None and t["welch_p"] is None and "no finite value" in t["reason"]
    # zero reference: no ratio, with a reason; constant sides: Welch undefined
    t = wt.window_test(np.zeros(3), np.array([-0.1, -0.2, -0.3]))
    assert t["ratio"] is None and t["ratio_to_median"] is None and "is 0" in t["ratio_reason"]
    assert t["below"] is True and t["welch_p"] is not None
    t = wt.window_test(np.zeros(3), np.zeros(3))
    assert t["welch_p"] is None and "every seed equal" in t["welch_reason"]


def welch_interval(c, r, level=0.95):
    """The Welch-Satterthwaite interval of mean(c) - mean(r), written out."""
    vc, vr = np.var(c, ddof=1) / len(c), np.var(r, ddof=1) / len(r)
    df = (vc + vr) ** 2 / (vc ** 2 / (len(c) - 1) + vr ** 2 / (len(r) - 1))
    half = sps.t.ppf(0.5 + level / 2, df) * math.sqrt(vc + vr)
    d = np.mean(c) - np.mean(r)
    return d - half, d + half


def test_stretch_test_means_interval_and_reading():
    rows = np.arange(400, 4001, 400)
    rng = np.random.default_rng(3)
    ref = 0.3 + 0.01 * rng.standard_normal((5, len(rows)))
    cand = 0.36 + 0.01 * rng.standard_normal((5, len(rows)))
    t = wt.stretch_test(ref, cand, rows, 1200, 2800)
    inside = (rows >= 1200) & (rows <= 2800)
    cm, rm = cand[:, inside].mean(1), ref[:, inside].mean(1)
    assert t["windows"] == 5
    assert t["candidate_mean"] == pytest.approx(cm.mean(), rel=1e-12)
    assert t["diff"] == pytest.approx(cm.mean() - rm.mean(), rel=1e-12)
    lo, hi = welch_interval(cm, rm)
    assert (t["ci_lo"], t["ci_hi"]) == (pytest.approx(lo, rel=1e-9), pytest.approx(hi, rel=1e-9))
    assert t["welch_p"] < 0.05 and t["reading"] == "persists"
    assert t["non_overlap"] == sum(
        max(ref[:, j].min(), cand[:, j].min()) > min(ref[:, j].max(), cand[:, j].max())
        for j in np.nonzero(inside)[0])
    assert wt.stretch_test(cand, ref, rows, 1200, 2800)["reading"] == "reverses"
    same = wt.stretch_test(ref, ref + 1e-3 * rng.standard_normal(ref.shape), rows, 1200, 2800)
    assert same["welch_p"] > 0.05 and same["reading"] == "not shown"
    none = wt.stretch_test(ref, cand, rows, 4400, 5000)
    assert none["windows"] == 0 and none["reading"] is None and "no window" in none["reason"]
    cand[2, 4] = np.nan       # row 2000, inside the stretch
    bad = wt.stretch_test(ref, cand, rows, 1200, 2800)
    assert bad["diff"] is None and "no finite value" in bad["reason"]


def sig(ratio, above, rmin_hi):
    return {"val/std": {"ratio_to_median": ratio, "above": above},
            "rew/min": {"candidate_hi": rmin_hi}}


@pytest.mark.parametrize("tests, reading", [
    ({2000: sig(12.0, True, -0.2), 4000: sig(10.0, True, -0.01)}, "present"),
    ({2000: sig(1.1, False, 0.0), 4000: sig(0.9, False, 0.0)}, "absent"),
    ({2000: sig(12.0, True, -0.2), 4000: sig(9.99, True, -0.01)}, "partial"),
    ({2000: sig(1.0, False, -0.2), 4000: sig(1.0, False, 0.0)}, "partial"),
])
def test_signature_reading(tests, reading):
    r = wt.signature_reading(tests)
    assert r["reading"] == reading and r["reason"] is None
    assert set(r["conditions"]) == {2000, 4000}


def test_signature_reading_without_a_metric():
    r = wt.signature_reading({2000: {"val/std": {"ratio_to_median": 12.0, "above": True}}})
    assert r["reading"] is None and r["conditions"][2000]["rew_min_negative"] is None


def params_with(**stats):
    raw = json.loads(json.dumps(RAW))
    raw["stats"].update(stats)
    return raw


def test_params_name_evaluation_points():
    p = validate(params_with(signature_rows=[800, 1200], persistence_rows=[1200, 2000]))
    assert p["stats"]["signature_rows"] == [800, 1200]
    assert p["stats"]["persistence_rows"] == [1200, 2000]
    assert validate(RAW)["stats"]["signature_rows"] == []
    with pytest.raises(ParamsError, match=r"stats\.signature_rows.*\[900\].*not evaluation points"):
        validate(params_with(signature_rows=[900]))
    with pytest.raises(ParamsError, match=r"stats\.signature_rows.*duplicate"):
        validate(params_with(signature_rows=[800, 800]))
    with pytest.raises(ParamsError, match=r"stats\.persistence_rows.*ends after rows=2400"):
        validate(params_with(persistence_rows=[1200, 2800]))
    with pytest.raises(ParamsError, match=r"stats\.persistence_rows"):
        validate(params_with(persistence_rows=[2000, 1200]))


def run(tmp_path, ref_dir, cand_dir, raw):
    synthetic.write_params(tmp_path / "params.yaml", raw)
    rc = compare.main(["--params", str(tmp_path / "params.yaml"), "--reference", str(ref_dir),
                       "--candidate", str(cand_dir), "--metrics-dir", str(tmp_path / "metrics"),
                       "--plots-dir", str(tmp_path / "metrics" / "plots"),
                       "--report", str(tmp_path / "results" / "report.md")])
    return rc, json.loads((tmp_path / "metrics" / "summary.json").read_text())


def test_two_sides_with_windows_through_compare(tmp_path, monkeypatch):
    """val/std 20x on the candidate side; entropy equal on both; rew/min -0.01 seed (seed 0
    at 0.0): the signature is partial, persistence not shown (difference exactly 0)."""
    monkeypatch.chdir(tmp_path)
    raw = params_with(signature_rows=[800, 1200], persistence_rows=[1200, 2000])
    p = validate(raw)
    for side in records.SIDES:
        for s in p["seeds"]:
            synthetic.write_run(tmp_path / "runs" / side, side, s, p, rng_seed=100 + s,
                                train_fn=train_fn(20.0 if side == "candidate" else 1.0))
    rc, s = run(tmp_path, tmp_path / "runs" / "reference", tmp_path / "runs" / "candidate", raw)
    assert rc == 0
    # val/std at 1200 rows (k = 3): reference 0.003 (seed + 1), candidate 20x that
    assert s["signature.w1200.val/std.reference_median"] == pytest.approx(0.006)
    assert s["signature.w1200.val/std.ratio_to_median"] == pytest.approx(20.0)
    assert s["signature.w1200.val/std.above"] is True
    assert s["signature.w1200.val_std_ratio"] is True and s["signature.w1200.val_std_above"] is True
    assert s["signature.w1200.rew/min.candidate_hi"] == 0.0
    assert s["signature.w1200.rew_min_negative"] is False
    assert s["signature.reading"] == "partial"
    assert s["persistence.first"] == 1200 and s["persistence.last"] == 2000
    assert s["persistence.ent/action/mean.windows"] == 3
    assert s["persistence.ent/action/mean.diff"] == pytest.approx(0.0, abs=1e-15)
    assert s["persistence.ent/action/mean.welch_p"] == pytest.approx(1.0)
    assert s["persistence.reading"] == "not shown"
    # val/std per seed over k = 3, 4, 5: reference 0.004 (seed + 1), candidate 20x; with
    # 3 seeds a side the 19-fold difference is not significant at 0.05 (p about 0.08)
    ref_m, cand_m = 0.004 * np.arange(1, 4), 0.08 * np.arange(1, 4)
    p_val = sps.ttest_ind(cand_m, ref_m, equal_var=False).pvalue
    assert s["persistence.val/std.welch_p"] == pytest.approx(p_val, rel=1e-9)
    assert 0.05 < p_val < 0.1 and s["persistence.val/std.reading"] == "not shown"
    assert s["persistence.val/std.non_overlap"] == 3
    assert metrics_out.missing_reasons(s) == []
    report = (tmp_path / "results" / "report.md").read_text()
    assert "### Early signature: **partial**" in report
    assert "### Persistence over the windows ending at 1200-2000 rows: **not shown**" in report


def test_against_a_published_side_the_tests_say_why(tmp_path, runs, monkeypatch):  # noqa: F811
    monkeypatch.chdir(tmp_path)
    raw = params_with(signature_rows=[800], persistence_rows=[1200, 2000])
    rc, s = run(tmp_path, runs / "published", runs / "candidate", raw)
    assert rc == 0
    assert s["signature.reading"] is None
    assert s["signature.reading.reason"].startswith("reference side: published runs")
    assert s["persistence.reading"] is None and "persistence.ent/action/mean.diff" not in s
    assert metrics_out.missing_reasons(s) == []


def test_a_round_without_window_tests_has_no_keys(tmp_path, runs, monkeypatch):  # noqa: F811
    monkeypatch.chdir(tmp_path)
    rc, s = run(tmp_path, runs / "reference", runs / "candidate", RAW)
    assert rc == 0
    assert not [k for k in s if k.startswith(("signature.", "persistence."))]
    assert "Pre-registered window tests" not in (tmp_path / "results" / "report.md").read_text()


def test_null_values_carry_their_own_reason():
    """Welch undefined (one seed a side): the interval's reason is Welch's; a zero
    reference mean: the ratio's reason is the ratio's."""
    rows = np.array([400, 800])
    t = wt.stretch_test(np.ones((1, 2)), 2 * np.ones((1, 2)), rows, 400, 800)
    w = wt.window_test(np.zeros(2), np.array([1.0, 2.0]))
    keys = wt.summary_keys({"persistence": {"rows": [400, 800], "tests": {"m": t},
                                            "reading": t["reading"], "reason": None},
                            "signature": {"rows": [400], "tests": {400: {"m": w}},
                                          "conditions": {}, "reading": "absent", "reason": None}})
    assert keys["persistence.m.ci_lo"] is None
    assert keys["persistence.m.ci_lo.reason"].startswith("needs at least 2 seeds per side")
    assert keys["persistence.m.welch_p.reason"] == keys["persistence.m.ci_lo.reason"]
    assert keys["signature.w400.m.ratio.reason"] == "the reference side's mean or median is 0: no ratio"
    assert metrics_out.missing_reasons(keys) == []

"""The labelled additions (analysis/additions.py): TOST, rliable aggregates, collapse flags,
their summary keys, report section and figures."""

import json
import math

import numpy as np
import pytest
from scipy import stats as sps

from dreamer_parity.analysis import additions, compare, metrics_out
import synthetic  # tests/synthetic.py
from dreamer_parity.params import validate
from dreamer_parity.round_spec import Round

C = np.array([300.0, 310.0, 295.0, 305.0, 290.0])
R = np.array([302.0, 298.0, 315.0, 300.0, 306.0])


def _welch_by_hand(c, r):
    vc, vr = c.var(ddof=1) / len(c), r.var(ddof=1) / len(r)
    se = math.sqrt(vc + vr)
    df = (vc + vr) ** 2 / (vc ** 2 / (len(c) - 1) + vr ** 2 / (len(r) - 1))
    return c.mean() - r.mean(), se, df


def test_tost_against_hand_computed_values():
    t = additions.tost(C, R, 0.10)
    diff, se, df = _welch_by_hand(C, R)
    margin = 0.10 * R.mean()
    assert t["margin"] == pytest.approx(margin, abs=1e-12)
    assert t["diff"] == pytest.approx(diff, abs=1e-12)
    assert t["df"] == pytest.approx(df, rel=1e-12)
    assert t["p_lower"] == pytest.approx(sps.t.sf((diff + margin) / se, df), rel=1e-9)
    assert t["p_upper"] == pytest.approx(sps.t.cdf((diff - margin) / se, df), rel=1e-9)
    q = sps.t.ppf(0.95, df)
    assert (t["ci_lo"], t["ci_hi"]) == pytest.approx((diff - q * se, diff + q * se), rel=1e-12)
    assert t["verdict"] == "equivalent"          # 90% CI well inside +-30
    assert t["min_margin"] == pytest.approx(max(abs(diff - q * se), abs(diff + q * se)))
    assert t["min_margin_frac"] == pytest.approx(t["min_margin"] / R.mean())
    # at the smallest margin the larger one-sided p is exactly 0.05
    at = additions.tost(C, R, t["min_margin_frac"] * 1.000001)
    assert at["verdict"] == "equivalent"
    assert additions.tost(C, R, t["min_margin_frac"] * 0.999)["verdict"] == "not shown"
    assert t["seeds_needed"] is not None and t["reason"] is None


def test_tost_not_shown_with_a_narrow_margin():
    t = additions.tost(C, R, 0.01)
    assert t["verdict"] == "not shown" and max(t["p_lower"], t["p_upper"]) >= 0.05
    # a narrower margin needs more seeds
    assert t["seeds_needed"] > additions.tost(C, R, 0.10)["seeds_needed"]


def test_tost_seeds_needed_reaches_the_power():
    s, margin = 10.0, 15.0
    n, why = additions.tost_seeds_needed(s, margin)
    assert why is None and n >= 2
    assert additions.tost_power(n, s, margin) >= 0.8
    assert n == 2 or additions.tost_power(n - 1, s, margin) < 0.8
    # large n: the normal approximation n = 2 s^2 (z_0.95 + z_0.90)^2 / margin^2
    n2, _ = additions.tost_seeds_needed(s, 1.0)
    z = sps.norm.ppf(0.95) + sps.norm.ppf(0.9)
    assert n2 == pytest.approx(2 * s ** 2 * z ** 2 / 1.0, rel=0.02)


def test_tost_constant_sides_give_a_reason_not_nan():
    t = additions.tost([300.0] * 5, [310.0] * 5, 0.10)
    assert t["p_lower"] is None and t["p_upper"] is None and t["verdict"] is None
    assert "every seed equal on both sides" in t["reason"]
    assert t["seeds_needed"] is None and t["seeds_needed_reason"]
    keys = additions.summary_keys({"primary": "S1", "primary_points": [1], "tost": t,
                                   "rliable": {"reason": "x"}, "collapse": {"reference": {}, "candidate": {}}})
    text = json.dumps(keys, allow_nan=False)
    assert "NaN" not in text
    assert not metrics_out.missing_reasons(keys)
    # one constant side: Welch still defined
    t1 = additions.tost([300.0] * 5, R, 0.10)
    assert t1["p_lower"] is not None and math.isfinite(t1["p_lower"])
    # too few seeds, reference mean 0
    assert "at least 2 seeds" in additions.tost([1.0], R, 0.1)["reason"]
    t0 = additions.tost([0.0, 1.0, 0.0], [0.0, 0.0, 0.0], 0.1)
    assert t0["verdict"] is None and "margin is 0" in t0["reason"]
    assert t0["min_margin_frac"] is None and t0["min_margin_frac_reason"]


def test_rliable_iqm_of_1_to_8_and_a_constant_side():
    v = additions.iqm_and_mean({"a": np.arange(1.0, 9.0).reshape(-1, 1),
                                "c": np.full((5, 1), 0.3)}, reps=2000)
    assert v["a"]["iqm"] == pytest.approx(4.5) and v["a"]["mean"] == pytest.approx(4.5)
    assert v["a"]["iqm_lo"] < 4.5 < v["a"]["iqm_hi"]
    assert v["c"]["iqm"] == pytest.approx(0.3)
    assert v["c"]["iqm_lo"] == v["c"]["iqm_hi"] == pytest.approx(0.3)
    assert v["c"]["mean_lo"] == v["c"]["mean_hi"] == pytest.approx(0.3)


def test_rliable_is_seeded_and_leaves_the_global_generator_alone():
    x = np.array([0.2, 0.5, 0.55, 0.9, 0.4]).reshape(-1, 1)
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    a = additions.iqm_and_mean({"x": x}, reps=500)
    assert np.array_equal(np.random.get_state()[1], before)
    assert additions.iqm_and_mean({"x": x}, reps=500) == a


def test_probability_of_improvement_matches_rliable():
    from rliable import metrics
    rng = np.random.default_rng(0)
    for _ in range(20):
        x = rng.integers(0, 4, size=(5, 1)).astype(float)
        y = rng.integers(0, 4, size=(4, 1)).astype(float)
        assert additions.probability_of_improvement(x, y) == pytest.approx(
            float(metrics.probability_of_improvement(x, y)), abs=1e-12)
    x, y = np.array([[0.3], [0.9], [0.5]]), np.array([[0.4], [0.4], [0.6], [0.1]])
    fast = additions.poi_interval(x, y, reps=300)
    slow = additions.poi_interval(x, y, reps=300, func=metrics.probability_of_improvement)
    assert fast == pytest.approx(slow, abs=1e-12)


def test_performance_profile_matches_rliable_score_distribution():
    from rliable import library as rly
    x = np.array([[0.1], [0.5], [0.5], [1.0]])
    prof, ci = additions.performance_profile({"x": x}, reps=200)
    np.testing.assert_allclose(prof["x"], rly.score_distributions(x, additions.TAUS))
    assert ci["x"].shape == (2, len(additions.TAUS))


def _curve(collapse: bool, n: int = 50):
    rows = np.arange(1, n + 1)
    peak = int(0.6 * n)
    c = np.minimum(500.0, 500.0 * rows / peak)
    if collapse:
        c[peak:] = 200.0 + 5.0 * np.sin(rows[peak:])
    return c


def test_collapse_flags():
    mat = np.stack([_curve(True), _curve(False)])
    pts = list(range(400, 400 * 51, 400))
    f = additions.collapse_flags(mat, pts, [3, 7])
    assert f[3]["collapsed"] is True and f[3]["best"] == 500.0 and f[3]["best_row"] == pts[29]
    assert f[3]["final"] == pytest.approx(mat[0, -1])
    assert f[7]["collapsed"] is False and f[7]["final"] == 500.0


RAW = {"round": "t3", "seeds": [0, 1, 2], "rows": 2400, "eval_every": 400, "eval_episodes": 2,
       "profile": "smoke",
       "stats": {"s1_rows": [1600, 2000, 2400], "late_rows": [1200, 2400],
                 "concordance_rows": [2000, 2400], "concordance_range": [1600, 2400]}}


def test_compare_writes_the_additions(tmp_path):
    params = validate(RAW)

    def collapsing(rows, seed):  # candidate seed 1 peaks at 500 and falls to 200
        v = 500.0 if rows == 1600 else (200.0 if rows > 1600 and seed == 1 else 100.0 + rows / 10 + seed)
        return [v, v]

    def steady(rows, seed):
        return [100.0 + rows / 10 + 3 * seed] * 2

    root = tmp_path / "runs"
    synthetic.write_round(root, params, eval_fns={"candidate": collapsing, "reference": steady})
    res = compare.analyse(Round.from_params(params), root / "reference", root / "candidate")
    add = res["additions"]
    assert add["primary"] == "LATE" and add["primary_points"] == [1200, 1600, 2000, 2400]
    plots = tmp_path / "plots"
    compare.write_outputs(res, tmp_path / "metrics", plots, tmp_path / "report.md")
    text = (tmp_path / "metrics" / "summary.json").read_text()
    assert "NaN" not in text
    s = json.loads(text)
    assert s["addition.collapse.candidate.s1"] is True
    assert s["addition.collapse.candidate.s1.best"] == 500.0
    assert s["addition.collapse.candidate.s1.final"] == 200.0
    assert s["addition.collapse.candidate.s0"] is False
    assert s["addition.collapse.reference.s2"] is False
    assert s["addition.collapse.flagged"] == 1
    assert s["addition.tost.margin_frac"] == 0.1
    assert s["addition.tost.verdict"] in ("equivalent", "not shown")
    lv = res["late"]["values"]
    assert s["addition.rliable.reference.mean"] == pytest.approx(lv["reference"].mean() / 500)
    assert s["addition.rliable.candidate.mean"] == pytest.approx(lv["candidate"].mean() / 500)
    report = (tmp_path / "report.md").read_text()
    assert "## Additions outside the gate: equivalence, rliable aggregates, collapse flags" in report
    assert "**FLAG**" in report and "plots/iqm.png" in report
    for name in ("iqm.png", "performance_profile.png"):
        assert (plots / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # identical reruns
    again = compare.analyse(Round.from_params(params), root / "reference", root / "candidate")
    assert metrics_out.summary(again) == metrics_out.summary(res)


def test_primary_is_s1_without_late_rows(tmp_path):
    raw = {**RAW, "stats": {**RAW["stats"], "late_rows": []}}
    params = validate(raw)
    root = tmp_path / "runs"
    synthetic.write_round(root, params)
    res = compare.analyse(Round.from_params(params), root / "reference", root / "candidate")
    add = res["additions"]
    assert add["primary"] == "S1" and add["primary_points"] == [1600, 2000, 2400]
    # default synthetic runs: every seed and side identical
    assert add["tost"]["verdict"] is None and "every seed equal" in add["tost"]["reason"]
    s = metrics_out.summary(res)
    assert s["addition.tost.p_lower"] is None and s["addition.tost.p_lower.reason"]
    assert not metrics_out.missing_reasons(s)
    assert s["addition.rliable.poi"] == 0.5
    assert s["addition.rliable.reference.iqm_lo"] == s["addition.rliable.reference.iqm_hi"]


ROUND3 = {"round": "round3-candidate", "decode": "exact", "seeds": [0, 1, 2, 3, 4],
          "rows": 24000, "eval_every": 400,
          "reference": {"decode": "exact", "sampler": "per_run", "source": "data/published/round3"},
          "stats": {"late_rows": [12000, 24000], "concordance_rows": [20000, 24000],
                    "concordance_range": [16000, 24000]}}


def test_published_round3(published_dir):
    d = published_dir / "round3"
    res = compare.analyse(Round.from_params(validate(ROUND3)), d, d / "ajax")
    add = res["additions"]
    t = add["tost"]
    assert add["primary"] == "LATE"
    assert t["diff"] == pytest.approx(res["late"]["decision"]["diff"], abs=1e-9)
    assert t["verdict"] == "not shown"
    assert t["margin"] == pytest.approx(0.1 * res["late"]["values"]["reference"].mean(), abs=1e-9)
    assert t["seeds_needed"] == 32
    assert t["min_margin_frac"] == pytest.approx(0.3140, abs=1e-3)
    rl = add["rliable"]
    assert rl["poi"] == pytest.approx(0.2)
    flagged = {(side, s) for side in ("reference", "candidate")
               for s, f in add["collapse"][side].items() if f["collapsed"]}
    assert flagged == {("reference", 4), ("candidate", 3), ("candidate", 4)}


def _git(repo, *args):
    import subprocess
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def test_plots_diff_renders_two_revisions_offline(tmp_path):
    import subprocess
    import sys

    from dreamer_parity.analysis import plots_diff
    repo = tmp_path / "repo"
    (repo / "metrics" / "plots").mkdir(parents=True)
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.org")
    _git(repo, "config", "user.name", "t")
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=repo, check=True,
                   capture_output=True)
    csv = repo / "metrics" / "plots" / "eval_curve.csv"

    def write(level):
        lines = ["rows,side,seed,eval_mean,s2"]
        for side, k in (("reference", 1.0), ("candidate", 0.8)):
            for seed in (0, 1):
                for r in (400, 800, 1200):
                    lines.append(f"{r},{side},{seed},{level * k * r / 1200 + seed},")
        csv.write_text("\n".join(lines) + "\n")

    write(100.0)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "round a")
    _git(repo, "tag", "a")
    write(400.0)
    _git(repo, "commit", "-q", "-am", "round b")
    out = tmp_path / "diff.png"
    spec_out = tmp_path / "diff.vl.json"
    rows = plots_diff.render(["a", "HEAD"], out, repo=repo, spec_out=spec_out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {r["rev"] for r in rows} == {"a", "HEAD"}
    assert len(rows) == 2 * 12
    by = {(r["rev"], r["side"], r["seed"], r["rows"]): r["eval_mean"] for r in rows}
    assert by[("a", "reference", "0", 1200.0)] == 100.0
    assert by[("HEAD", "reference", "0", 1200.0)] == 400.0
    spec = json.loads(spec_out.read_text())
    assert len(spec["vconcat"][0]["data"]["values"]) == 24
    # the CLI: an unknown target is a one-line error, exit 2
    assert plots_diff.main(["a", "HEAD", "--repo", str(repo), "--target", "nope.csv",
                            "--out", str(tmp_path / "x.png")]) == 2


@pytest.mark.parametrize("shift, spread, reading", [
    (0.0, 1.0, "equivalent"), (-80.0, 1.0, "deficit"), (80.0, 1.0, "candidate ahead"),
    (-10.0, 20.0, "inconclusive")])
def test_tost_reading_of_the_interval(shift, spread, reading):
    """The reading follows the 90% interval: inside the margin, wholly below 0, wholly
    above 0, else inconclusive (docs/rounds/round3-10seeds.md)."""
    c = R + shift + spread * np.array([3.0, -2.0, 1.0, -1.0, -1.0])
    t = additions.tost(c, R, 0.10)
    assert t["reading"] == reading
    m = t["margin"]
    assert (reading == "equivalent") == (-m < t["ci_lo"] and t["ci_hi"] < m)
    if reading != "equivalent":
        assert (reading == "deficit") == (t["ci_hi"] < 0)
        assert (reading == "candidate ahead") == (t["ci_lo"] > 0)

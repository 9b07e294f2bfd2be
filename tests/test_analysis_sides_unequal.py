"""Sides of unequal size (docs/SIDES.md): 7 candidate seeds against 4 reference seeds.

A synthetic round whose every per-seed value is known (LATE, S1, the training-metric
windows) goes through ``analysis.compare``; each statistic is recomputed here from the
per-seed arrays with scipy / rliable / numpy and compared with what the analysis wrote:
Welch (t, df, p), TOST and its interval, the seeds-per-side figures, rliable's IQM and
the probability of improvement, the halves check of a side pooled from two sources (4
seeds against 3), concordance, the windows and their tests, the gate, the per-seed keys of
each side's own seeds only, and the report's two seed sets.  Then the same round through
``python -m dreamer_parity.pipeline compare`` in a temporary copy, and the refusals.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

import synthetic  # tests/synthetic.py
from dreamer_parity import params as P
from dreamer_parity import sides
from dreamer_parity.analysis import additions, compare, metrics_out, report
from dreamer_parity.round_spec import Round

REPO = Path(__file__).resolve().parents[1]
REF_SEEDS, CAND_SEEDS = [0, 1, 2, 3], [0, 1, 2, 3, 4, 5, 6]

RAW = {"round": "unequal", "seeds": [3, 1, 0, 2], "rows": 2400, "eval_every": 400,
       "eval_episodes": 2, "profile": "smoke",
       "candidate": {"seeds": [6, 5, 4, 3, 2, 1, 0],
                     "source": [{"from": "data/runs/cpu", "seeds": [0, 1, 2, 3]},
                                {"from": "data/runs/tpu", "seeds": [4, 5, 6]}]},
       "reference": {"source": "data/runs/ref"},
       "gate": {"statistic": "late", "learns": True, "welch_p_min": 0.05},
       "stats": {"s1_rows": [1600, 2000, 2400], "late_rows": [1200, 2400],
                 "concordance_rows": [2000, 2400], "concordance_range": [1600, 2400],
                 "equivalence_margin": 0.1, "signature_rows": [800, 1600],
                 "persistence_rows": [800, 2400]}}
PARAMS = P.validate(RAW)
ROUND = Round.from_params(PARAMS)
# per seed a level; two evaluation episodes level +- 3 at every point, rising with rows
LEVEL = {"reference": {0: 300, 1: 340, 2: 280, 3: 360},
         "candidate": {0: 250, 1: 310, 2: 330, 3: 270, 4: 410, 5: 290, 6: 350}}


def _eval_fn(side):
    def fn(rows, seed):
        base = LEVEL[side][seed] - 60 + 60 * rows / 2400
        return [float(round(base) - 3), float(round(base) + 3)]
    return fn


def _train_fn(side):
    def fn(rows, seed):
        x = rows / 2400
        off = (0.03 if side == "candidate" else 0.0) + 0.011 * seed
        return {"ent/action/mean": 0.7 - 0.4 * x + off, "val/std": 0.2 + 0.05 * seed + off,
                "ret/std": 0.3 + off, "adv/std": 0.1 + 0.01 * seed, "rew/min": -0.01 * seed - off,
                "activation/embed": 0.4 + off}
    return fn


def _write_round(root: Path) -> None:
    """The runs kept under ``root/data/runs/``: reference seeds 0-3 in ``ref``, candidate
    seeds 0-3 in ``cpu`` and 4-6 in ``tpu`` (recorded on a TPU at precision highest)."""
    runs = root / "data" / "runs"
    for s in REF_SEEDS:
        synthetic.write_run(runs / "ref", "reference", s, PARAMS, _eval_fn("reference"),
                            train_fn=_train_fn("reference"), manifest=True)
    for s in CAND_SEEDS:
        d = runs / ("cpu" if s < 4 else "tpu")
        synthetic.write_run(d, "candidate", s, PARAMS, _eval_fn("candidate"),
                            train_fn=_train_fn("candidate"))
        info = json.loads((d / f"s{s}" / "run.json").read_text())
        info["provenance"]["backend"] = {"platform": "cpu" if s < 4 else "tpu",
                                         "matmul_precision": None if s < 4 else "highest"}
        (d / f"s{s}" / "run.json").write_text(json.dumps(info))
        from dreamer_parity import records
        records.write_done(d / f"s{s}", "ok")
        synthetic.reseal(d / f"s{s}")


def _late(side, seed):
    pts = [p for p in range(400, 2401, 400) if 1200 <= p <= 2400]
    return float(np.mean([round(LEVEL[side][seed] - 60 + 60 * p / 2400) for p in pts]))


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    root = tmp_path_factory.mktemp("unequal")
    _write_round(root)
    cwd = os.getcwd()
    os.chdir(root)
    try:
        r = sides.resolve(ROUND, ".")
        res = compare.analyse(ROUND, r["reference"], r["candidate"])
        compare.write_outputs(res, root / "metrics", root / "metrics" / "plots",
                              root / "results" / "report.md")
        from dreamer_parity import records
        from dreamer_parity.analysis.last_window import last_window_metrics
        records.write_json(root / "metrics" / "train_last_window.json",
                           last_window_metrics(ROUND, res["sides"]))
    finally:
        os.chdir(cwd)
    summary = json.loads((root / "metrics" / "summary.json").read_text())
    return root, res, summary


def test_each_side_keeps_its_own_seeds(analysed):
    root, res, s = analysed
    assert res["seeds"] == {"reference": REF_SEEDS, "candidate": CAND_SEEDS}
    assert [r.seed for r in res["sides"]["candidate"]["runs"]] == CAND_SEEDS
    for stat in ("S1", "LATE"):
        assert [f"{stat}.candidate.s{k}" in s for k in range(8)] == [True] * 7 + [False]
        assert [f"{stat}.reference.s{k}" in s for k in range(8)] == [True] * 4 + [False] * 4
    for k in CAND_SEEDS:
        assert s[f"LATE.candidate.s{k}"] == pytest.approx(_late("candidate", k), abs=1e-12)
        assert f"addition.collapse.candidate.s{k}" in s
    assert "addition.collapse.reference.s4" not in s
    assert s["LATE.candidate.mean"] == pytest.approx(np.mean([_late("candidate", k) for k in CAND_SEEDS]))
    assert metrics_out.missing_reasons(s) == []
    curve = pd.read_csv(root / "metrics" / "plots" / "eval_curve.csv")
    assert len(curve) == (4 + 7) * 6
    assert sorted(set(curve[curve["side"] == "candidate"]["seed"])) == CAND_SEEDS
    last = json.loads((root / "metrics" / "train_last_window.json").read_text())
    assert "val/std.candidate.s6" in last and "val/std.reference.s4" not in last
    assert last["val/std.candidate.mean"] == pytest.approx(
        np.mean([0.2 + 0.05 * k + 0.03 + 0.011 * k for k in CAND_SEEDS]))


def test_welch_and_the_rule_on_arrays_of_different_length(analysed):
    _, res, s = analysed
    c = np.array([_late("candidate", k) for k in CAND_SEEDS])
    r = np.array([_late("reference", k) for k in REF_SEEDS])
    want = sps.ttest_ind(c, r, equal_var=False)
    assert s["LATE.welch_t"] == pytest.approx(float(want.statistic), rel=1e-12)
    assert s["LATE.welch_p"] == pytest.approx(float(want.pvalue), rel=1e-12)
    assert s["LATE.welch_df"] == pytest.approx(float(want.df), rel=1e-12)
    vc, vr = c.var(ddof=1) / 7, r.var(ddof=1) / 4
    assert s["LATE.welch_df"] == pytest.approx((vc + vr) ** 2 / (vc ** 2 / 6 + vr ** 2 / 3), rel=1e-12)
    assert (s["LATE.A"], s["LATE.lo"], s["LATE.hi"]) == pytest.approx((c.mean(), r.min(), r.max()))
    assert s["LATE.LEARNS"] is bool(c.mean() >= r.min())
    assert s["LATE.WITHIN_RANGE"] is bool(r.min() <= c.mean() <= r.max())
    assert s["LATE.diff"] == pytest.approx(c.mean() - r.mean())
    # the gate reads the same decision
    assert s["gate.learns.value"] == pytest.approx(c.mean()) and s["gate.learns.bar"] == r.min()
    assert s["gate.welch_p.value"] == pytest.approx(float(want.pvalue), rel=1e-12)
    # S1 likewise
    c1 = res["s1"]["values"]["candidate"]
    r1 = res["s1"]["values"]["reference"]
    assert (len(c1), len(r1)) == (7, 4)
    assert s["S1.welch_p"] == pytest.approx(float(sps.ttest_ind(c1, r1, equal_var=False).pvalue),
                                            rel=1e-12)
    # the bootstrap of the difference resamples each side with its own n
    assert s["LATE.addition.boot_lo"] < c.mean() - r.mean() < s["LATE.addition.boot_hi"]


def test_tost_and_its_seed_figures_from_the_same_arrays(analysed):
    _, _, s = analysed
    c = np.array([_late("candidate", k) for k in CAND_SEEDS])
    r = np.array([_late("reference", k) for k in REF_SEEDS])
    margin = 0.1 * r.mean()
    se = math.sqrt(c.var(ddof=1) / 7 + r.var(ddof=1) / 4)
    df = float(sps.ttest_ind(c, r, equal_var=False).df)
    tq = sps.t.ppf(0.95, df)
    diff = c.mean() - r.mean()
    assert s["addition.tost.margin"] == pytest.approx(margin)
    assert s["addition.tost.df"] == pytest.approx(df, rel=1e-12)
    assert s["addition.tost.ci_lo"] == pytest.approx(diff - tq * se, rel=1e-12)
    assert s["addition.tost.ci_hi"] == pytest.approx(diff + tq * se, rel=1e-12)
    assert s["addition.tost.p_lower"] == pytest.approx(float(sps.ttest_ind(
        c + margin, r, equal_var=False, alternative="greater").pvalue), rel=1e-12)
    assert s["addition.tost.p_upper"] == pytest.approx(float(sps.ttest_ind(
        c - margin, r, equal_var=False, alternative="less").pvalue), rel=1e-12)
    # seeds per side at equal numbers (the planning figure), common variance
    s_common = math.sqrt((c.var(ddof=1) + r.var(ddof=1)) / 2)
    assert s["addition.tost.seeds_needed"] == additions.tost_seeds_needed(s_common, margin)[0]
    # with the reference's 4 seeds as they are: the candidate's number, or why none does
    n, why = additions.tost_candidate_seeds_needed(c.std(ddof=1), r.std(ddof=1), 4, margin)
    assert s["addition.tost.candidate_seeds_needed"] == n
    if n is None:
        assert s["addition.tost.candidate_seeds_needed.reason"] == why
        assert why.startswith("not reachable with 4 reference seeds")
        bound = 2 * sps.t.cdf(margin / (r.std(ddof=1) / 2) - sps.t.ppf(0.95, 3), 3) - 1
        assert f"at most {max(0.0, bound):.2f}" in why


def test_candidate_seeds_at_the_references_n_against_a_direct_power_search():
    """The fixed-reference figure is the smallest n_c whose Welch-df power reaches 0.8."""
    s_c, s_r, n_r, margin = 65.3, 40.6, 30, 30.9
    n, why = additions.tost_candidate_seeds_needed(s_c, s_r, n_r, margin)
    assert why is None
    powers = [additions.tost_power_welch(k, n_r, s_c, s_r, margin) for k in range(2, n + 1)]
    assert powers[-1] >= 0.8 and max(powers[:-1]) < 0.8
    # 10 reference seeds: no number of candidate seeds is enough
    n, why = additions.tost_candidate_seeds_needed(s_c, s_r, 10, margin)
    assert n is None and "not reachable with 10 reference seeds" in why


def test_rliable_iqm_and_probability_of_improvement_with_unequal_n(analysed):
    _, res, s = analysed
    from rliable import metrics
    c = np.array([_late("candidate", k) for k in CAND_SEEDS]) / 500
    r = np.array([_late("reference", k) for k in REF_SEEDS]) / 500
    assert s["addition.rliable.candidate.iqm"] == pytest.approx(
        metrics.aggregate_iqm(c.reshape(-1, 1)), rel=1e-12)
    assert s["addition.rliable.reference.iqm"] == pytest.approx(
        metrics.aggregate_iqm(r.reshape(-1, 1)), rel=1e-12)
    poi = np.mean([(a > b) + 0.5 * (a == b) for a in c for b in r])
    assert s["addition.rliable.poi"] == pytest.approx(poi, rel=1e-12)
    assert s["addition.rliable.poi"] == pytest.approx(
        metrics.probability_of_improvement(c.reshape(-1, 1), r.reshape(-1, 1)), rel=1e-12)
    assert s["addition.rliable.poi_lo"] <= poi <= s["addition.rliable.poi_hi"]
    assert s["addition.rliable.poi_lo"] < s["addition.rliable.poi_hi"]
    for side, n in (("candidate", 7), ("reference", 4)):
        assert s[f"addition.rliable.{side}.iqm_lo"] <= s[f"addition.rliable.{side}.iqm"] \
            <= s[f"addition.rliable.{side}.iqm_hi"]
        assert len(res["additions"]["rliable"]["scores"][side]) == n


def test_halves_of_the_pooled_side_with_its_own_seeds(analysed):
    _, res, s = analysed
    assert s["halves.candidate.sources"] == "data/runs/cpu: 0,1,2,3; data/runs/tpu: 4,5,6"
    assert "halves.reference.sources" not in s
    late = {k: _late("candidate", k) for k in CAND_SEEDS}
    a, b = [late[k] for k in (0, 1, 2, 3)], [late[k] for k in (4, 5, 6)]
    assert s["halves.candidate.LATE.g1.mean"] == pytest.approx(np.mean(a))
    assert s["halves.candidate.LATE.g2.mean"] == pytest.approx(np.mean(b))
    want = sps.ttest_ind(b, a, equal_var=False)
    assert s["halves.candidate.LATE.welch_p"] == pytest.approx(float(want.pvalue), rel=1e-12)
    assert s["halves.candidate.LATE.welch_df"] == pytest.approx(float(want.df), rel=1e-12)


def test_concordance_counts_each_side_out_of_its_own_seeds(analysed):
    _, res, s = analysed
    ev = {side: res["eval"][side] for side in ("reference", "candidate")}
    assert ev["candidate"].shape == (7, 6) and ev["reference"].shape == (4, 6)
    for row, j in ((2000, 4), (2400, 5)):
        for side in ("reference", "candidate"):
            assert s[f"concordance.{side}.at_{row}"] == int((ev[side][:, j] >= 400).sum())
    assert s["concordance.candidate.rate"] == pytest.approx(float((ev["candidate"][:, 3:] >= 400).mean()))
    assert s["concordance.needed_reference"] == math.ceil(0.8 * 4)
    text = (analysed[0] / "results" / "report.md").read_text()
    assert f"| 2400 | {s['concordance.reference.at_2400']} of 4 | " \
           f"{s['concordance.candidate.at_2400']} of 7 |" in text


def test_windows_and_their_tests_per_side(analysed):
    _, res, s = analysed
    win = res["side_windows"]["sides"]
    assert win["candidate"]["seeds"] == CAND_SEEDS and win["reference"]["seeds"] == REF_SEEDS
    # the window ending at 1600 rows of val/std, per seed of each side
    c = np.array([0.2 + 0.05 * k + 0.03 + 0.011 * k for k in CAND_SEEDS])
    r = np.array([0.2 + 0.05 * k + 0.011 * k for k in REF_SEEDS])
    t = res["window_tests"]["signature"]["tests"][1600]["val/std"]
    assert t["welch_p"] == pytest.approx(float(sps.ttest_ind(c, r, equal_var=False).pvalue), rel=1e-9)
    assert t["candidate_mean"] == pytest.approx(c.mean()) and t["reference_median"] == \
        pytest.approx(np.median(r))
    per = res["window_tests"]["persistence"]["tests"]["ent/action/mean"]
    assert per["windows"] == 5   # 800 .. 2400
    xs = [p / 2400 for p in range(800, 2401, 400)]
    cm = np.array([np.mean([0.7 - 0.4 * x + 0.03 + 0.011 * k for x in xs]) for k in CAND_SEEDS])
    rm = np.array([np.mean([0.7 - 0.4 * x + 0.011 * k for x in xs]) for k in REF_SEEDS])
    want = sps.ttest_ind(cm, rm, equal_var=False)
    assert per["welch_p"] == pytest.approx(float(want.pvalue), rel=1e-9)
    ci = want.confidence_interval(0.95)
    assert (per["ci_lo"], per["ci_hi"]) == pytest.approx((ci.low, ci.high), rel=1e-9)
    # every synthetic record holds a window (a real run's first, at 400 rows, holds none)
    assert s["entropy.candidate.windows"] == s["entropy.reference.windows"] == 6


def test_report_lists_both_seed_sets_and_says_what_unequal_n_means(analysed):
    root, _, s = analysed
    text = (root / "results" / "report.md").read_text()
    assert "* Seeds of each side: reference 0-3 (4 seeds), candidate 0-6 (7 seeds); " in text
    assert "| candidate.seeds | [0, 1, 2, 3, 4, 5, 6] |" in text
    assert "| seeds | [0, 1, 2, 3] |" in text
    assert "The sides have 7 candidate and 4 reference seeds" in text
    assert "nothing pairs a candidate seed with the reference seed of the same number" in text
    assert "with 7 candidate and 4 reference seeds." in text
    # per-seed table: seeds 4-6 have no reference cells
    assert (f"| 5 |  | {s['S1.candidate.s5']:.1f} |  | {s['S2.candidate.s5']:.1f} |  | "
            f"{s['LATE.candidate.s5']:.1f} |") in text
    assert "Each side's mean is over its own seeds (4 reference, 7 candidate)" in text
    assert "* Candidate side: cpu/default (s0-3); tpu/highest (s4-6) (pooled from 2 " \
           "platform/precision parts)." in text
    assert "With the reference's 4 seeds as they are, candidate seeds needed" in text
    for name in ("eval_curves.png", "iqm.png", "performance_profile.png", "windows.png"):
        assert (root / "metrics" / "plots" / name).read_bytes()[:4] == b"\x89PNG"


def test_candidate_seed_order_does_not_change_a_byte(tmp_path):
    root = tmp_path / "root"
    _write_round(root)
    outs = []
    for order in ([6, 5, 4, 3, 2, 1, 0], [0, 1, 2, 3, 4, 5, 6]):
        raw = json.loads(json.dumps(RAW))
        raw["candidate"]["seeds"] = order
        raw["candidate"]["source"] = list(reversed(raw["candidate"]["source"]))
        p = P.load_round(synthetic.write_params(tmp_path / "p.yaml", raw))
        out = tmp_path / "-".join(map(str, order))
        cwd = os.getcwd()
        os.chdir(root)
        try:
            r = sides.resolve(p, ".")
            res = compare.analyse(p, r["reference"], r["candidate"])
        finally:
            os.chdir(cwd)
        compare.write_outputs(res, out / "metrics", out / "metrics" / "plots", out / "report.md",
                              figures=False)
        outs.append({str(f.relative_to(out)): f.read_bytes() for f in sorted(out.rglob("*"))
                     if f.is_file()})
    assert outs[0] == outs[1] and "metrics/summary.json" in outs[0]


def _pipeline(cwd: Path, *args):
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    return subprocess.run([sys.executable, "-m", "dreamer_parity.pipeline", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def copy_root(tmp_path_factory):
    """A temporary copy of a repository: params.yaml, the pre-registration, data/runs/."""
    root = tmp_path_factory.mktemp("pipeline")
    _write_round(root)
    synthetic.write_params(root / "params.yaml", RAW)
    (root / "docs" / "rounds").mkdir(parents=True)
    (root / "docs" / "rounds" / "unequal.md").write_text("# pre-registration\n")
    return root


def test_pipeline_compare_end_to_end(copy_root, analysed):
    r = _pipeline(copy_root, "preflight", "--out", "results/preflight.ok")
    assert r.returncode == 0, r.stderr
    r = _pipeline(copy_root, "compare")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("gate LATE: ")
    s = json.loads((copy_root / "metrics" / "summary.json").read_text())
    c = np.array([_late("candidate", k) for k in CAND_SEEDS])
    ref = np.array([_late("reference", k) for k in REF_SEEDS])
    assert s["LATE.welch_p"] == pytest.approx(
        float(sps.ttest_ind(c, ref, equal_var=False).pvalue), rel=1e-12)
    assert s["platform.candidate"] == "cpu/default (s0-3); tpu/highest (s4-6)"
    # the same numbers as the analysis called directly
    assert {k: v for k, v in s.items() if not k.startswith("source.")} == \
        {k: v for k, v in analysed[2].items() if not k.startswith("source.")}
    text = (copy_root / "results" / "report.md").read_text()
    assert "* Seeds of each side: reference 0-3 (4 seeds), candidate 0-6 (7 seeds); " in text
    assert "[../docs/rounds/unequal.md](../docs/rounds/unequal.md)" in text


@pytest.mark.parametrize("change, line", [
    ({"candidate": {"seeds": [0, 1, 2, 2, 3, 4, 5, 6]}},
     "error: params: candidate.seeds: duplicate seeds [2]"),
    ({"candidate": {"seeds": [0, 1, 2, 3, 4, 5, 6, 7]}},
     "error: params: candidate.source: candidate.seeds [7] have no source"),
    ({"candidate": {"source": [{"from": "data/runs/cpu", "seeds": [0, 1, 2, 3]},
                               {"from": "data/runs/tpu", "seeds": [4, 5, 6, 7]}]}},
     "error: params: candidate.source: seeds [7] are not in candidate.seeds [0, 1, 2, 3, 4, 5, 6]"),
    ({"seeds": [0, 1, 2, 3, 4]},
     "error: params: reference.source: data/runs/ref has no run of seed 4"),
])
def test_refusals_are_one_line_and_write_nothing(copy_root, change, line):
    """A bad seed list of a side, or a source that does not cover it: preflight and
    compare refuse in one line (exit 2) and every file stays as it was."""
    import yaml

    work = copy_root.parent / f"refused-{len(list(copy_root.parent.iterdir()))}"
    shutil.copytree(copy_root, work)
    shutil.rmtree(work / "metrics", ignore_errors=True)
    shutil.rmtree(work / "results", ignore_errors=True)
    d = yaml.safe_load((work / "params.yaml").read_text())
    for key, v in change.items():
        d[key] = {**d[key], **v} if isinstance(v, dict) else v
    (work / "params.yaml").write_text(yaml.safe_dump(d, sort_keys=False))
    before = {str(f.relative_to(work)): f.read_bytes() for f in work.rglob("*") if f.is_file()}
    for cmd in (("preflight", "--out", "results/preflight.ok"), ("compare",)):
        r = _pipeline(work, *cmd)
        assert r.returncode == 2, (cmd, r.stderr)
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(line), r.stderr
    after = {str(f.relative_to(work)): f.read_bytes() for f in work.rglob("*") if f.is_file()}
    assert after == before

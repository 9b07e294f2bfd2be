"""A round's gate (analysis/gate.py) against published references: the round-1 learning
check's gate (S1 against pair E, with the entropy overlap from the study's report table)
on synthetic candidates with known values, and the round-3 gate on the study's own
candidate (which misses LEARNS by 4.9)."""

import numpy as np
import pytest

from dreamer_parity.analysis import compare, gate
import synthetic  # tests/synthetic.py
from dreamer_parity.params import validate
from dreamer_parity.round_spec import Gate, Round

LEARNING_CHECK = {"round": "round1", "profile": "full", "seeds": [0, 1, 2], "rows": 20000,
                  "eval_every": 2000, "eval_episodes": 10, "decode": "exact",
                  "reference": {"decode": "exact", "source": "data/published/round2"},
                  "gate": {"statistic": "s1", "mean_min": 156, "welch_p_min": 0.05,
                           "entropy_overlap_rows": 4000}}
PAIR_E_S1 = [306.96666666666664, 265.1666666666667, 297.6333333333333]


def _candidate(root, params, s1, ent):
    """Every evaluation of seed s returns s1[s]; the window ending at 4000 rows has
    entropy ent[s] (0.6 elsewhere)."""
    for s in params["seeds"]:
        synthetic.write_run(root, "candidate", s, params,
                            eval_fn=lambda n, seed: [float(s1[seed])] * params["eval_episodes"],
                            train_fn=lambda n, seed: {"ent/action/mean":
                                                      ent[seed] if n == 4000 else 0.6})
    return root


def _gate(published_dir, tmp_path, s1, ent):
    params = validate(LEARNING_CHECK)
    cand = _candidate(tmp_path / "cand", params, s1, ent)
    round_ = Round.from_params(params)
    return gate.evaluate(round_.gate, compare.analyse(round_, published_dir / "round2", cand))


def test_learning_check_gate_passes(published_dir, tmp_path):
    g = _gate(published_dir, tmp_path, {0: 250, 1: 290, 2: 330}, {0: 0.45, 1: 0.46, 2: 0.47})
    assert g["statistic"] == "s1" and g["pass"] is True and g["reason"] is None
    p = g["parts"]
    assert set(p) == {"mean_min", "welch_p", "entropy_overlap"}
    assert (p["mean_min"]["value"], p["mean_min"]["bar"]) == (290.0, 156.0)
    assert p["welch_p"]["value"] == pytest.approx(0.9978235947068914, abs=1e-9)
    assert p["entropy_overlap"]["value"] == [0.45, 0.47]
    assert p["entropy_overlap"]["bar"] == [0.4481, 0.4765]
    assert p["entropy_overlap"]["source"] == "round2/pairE/compare.md line 169 (tables.csv)"
    flat = gate.flat_keys(g)
    assert flat["gate.pass"] is True and flat["gate.welch_p.ok"] is True
    assert (flat["gate.entropy_overlap.ref_lo"], flat["gate.entropy_overlap.ref_hi"]) == \
        (0.4481, 0.4765)
    assert "passes" in "\n".join(gate.report_lines(g))


@pytest.mark.parametrize("s1, ent, failing", [
    ({0: 10, 1: 10, 2: 440}, {0: 0.45, 1: 0.46, 2: 0.47}, "mean_min"),      # A 153.3 < 156
    ({0: 180, 1: 181, 2: 182}, {0: 0.45, 1: 0.46, 2: 0.47}, "welch_p"),     # p 0.013
    ({0: 250, 1: 290, 2: 330}, {0: 0.50, 1: 0.51, 2: 0.52}, "entropy_overlap"),
])
def test_each_part_fails_alone(published_dir, tmp_path, s1, ent, failing):
    g = _gate(published_dir, tmp_path, s1, ent)
    assert g["pass"] is False
    assert {k for k, p in g["parts"].items() if p["ok"] is False} == {failing}


def test_round3_gate_on_the_studys_candidate(published_dir):
    d = published_dir / "round3"
    params = validate({"seeds": [0, 1, 2, 3, 4], "rows": 24000, "eval_every": 400,
                       "reference": {"decode": "exact", "sampler": "per_run",
                                     "source": "data/published/round3"},
                       "stats": {"late_rows": [12000, 24000],
                                 "concordance_rows": [20000, 24000],
                                 "concordance_range": [16000, 24000]},
                       "gate": {"statistic": "late", "learns": True, "welch_p_min": 0.05}})
    round_ = Round.from_params(params)
    g = gate.evaluate(round_.gate, compare.analyse(round_, d, d / "ajax"))
    assert g["pass"] is False
    learns, p = g["parts"]["learns"], g["parts"]["welch_p"]
    assert learns["ok"] is False and p["ok"] is True
    assert learns["value"] == pytest.approx(265.4258102909211, abs=1e-9)
    assert learns["bar"] - learns["value"] == pytest.approx(4.8516, abs=1e-4)
    assert p["value"] == pytest.approx(0.1216447677760917, abs=1e-9)


def test_no_gate_and_undecidable_entropy(published_dir, tmp_path):
    assert gate.evaluate(Round.from_params(validate({})).gate, {})["pass"] is None
    d = published_dir / "round3"                   # the study published no round-3 windows
    side = {"dir": str(d), "layout": "published", "runs": []}
    r = gate.reference_entropy_range(side, 4000)
    assert r["lo"] is None and "no training-metric windows for round3" in r["reason"]
    assert gate.ranges_overlap(0.1, 0.2, None, 0.3) is None
    assert gate.seed_range([np.nan, 1.0, 3.0]) == {"lo": 1.0, "hi": 3.0, "mean": 2.0, "n": 2}


def test_an_undecided_welch_part_explains_its_nulls():
    """One seed per side: Welch's p is undefined; the flat keys give the part's reason, and
    summary.json's null check accepts them (it refused them before)."""
    from dreamer_parity.analysis import metrics_out, stats

    dec = {"A": 285.9, "lo": 307.6, "LEARNS": False, "welch": stats.welch([285.9], [307.6])}
    rule = Gate(statistic="late", learns=True, mean_min=None, welch_p_min=0.05,
                entropy_overlap_rows=None)
    g = gate.evaluate(rule, {"late": {"decision": dec}, "checks": []})
    flat = gate.flat_keys(g)
    assert flat["gate.welch_p.value"] is None and flat["gate.welch_p.ok"] is None
    assert flat["gate.welch_p.reason"] == "needs at least 2 seeds per side (candidate 1, reference 1)"
    assert flat["gate.verdict"] == "fail"        # LEARNS failed, whatever Welch would say
    assert metrics_out.missing_reasons(flat) == []
    del flat["gate.welch_p.reason"]
    assert metrics_out.missing_reasons(flat) == ["gate.welch_p.value", "gate.welch_p.ok"]

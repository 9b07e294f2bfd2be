"""The halves check (analysis/halves.py): a side whose seeds come from two sources, one
source against the other, through compare with list sources."""

import json

import numpy as np
import pytest
import scipy.stats as sps

from dreamer_parity.analysis import compare, metrics_out
from dreamer_parity.params import validate
import synthetic  # tests/synthetic.py

SEEDS = [0, 1, 2, 3, 4, 5]
RAW = {"round": "th", "seeds": SEEDS, "rows": 2400, "eval_every": 400, "eval_episodes": 2,
       "profile": "smoke", "reference": {"decode": "exact"},
       "stats": {"s1_rows": [1600, 2000, 2400], "late_rows": [1200, 2400],
                 "concordance_rows": [2400], "concordance_range": [1600, 2400]}}


def level(base):
    """Every evaluation episode returns base + 7 seed (a flat curve)."""
    return lambda rows, seed: [base + 7.0 * seed] * 2


@pytest.fixture
def repo(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    p = validate(RAW)
    # reference runs: seeds 0-5 in data/a at 100 + 7 s, seeds 3-5 in data/b at 160 + 7 s
    # and in data/d at 79 + 7 s (the mean of seeds 3-5 there equals data/a's 0-2: 107);
    # candidate: all six in data/c at 120 + 7 s (one source: no halves keys)
    for d, seeds, base in (("a", SEEDS, 100.0), ("b", [3, 4, 5], 160.0), ("d", [3, 4, 5], 79.0)):
        for s in seeds:
            synthetic.write_run(tmp_path / "data" / d, "reference", s, p, eval_fn=level(base),
                                manifest=True)
    for s in SEEDS:
        synthetic.write_run(tmp_path / "data" / "c", "candidate", s, p, eval_fn=level(120.0),
                            manifest=True)
    return tmp_path


def run(repo, reference_source):
    raw = json.loads(json.dumps(RAW))
    raw["reference"]["source"] = reference_source
    raw["candidate"] = {"source": "data/c"}
    synthetic.write_params(repo / "params.yaml", raw)
    rc = compare.main(["--params", "params.yaml", "--metrics-dir", "metrics",
                       "--plots-dir", "metrics/plots", "--report", "results/report.md"])
    return rc, json.loads((repo / "metrics" / "summary.json").read_text())


def test_two_sources_are_tested_against_each_other(repo):
    rc, s = run(repo, [{"from": "data/a", "seeds": [0, 1, 2]}, {"from": "data/b", "seeds": [3, 4, 5]}])
    assert rc == 0
    assert s["halves.reference.sources"] == "data/a: 0,1,2; data/b: 3,4,5"
    # LATE of seed s: base + 7 s; means 107 and 160 + 28 = 188
    assert s["halves.reference.LATE.g1.mean"] == pytest.approx(107.0)
    assert s["halves.reference.LATE.g2.mean"] == pytest.approx(188.0)
    # equal within-source spreads (7 apart): Welch t = 81 / (7 sqrt(2/3)), df 4
    want = sps.ttest_ind([181.0, 188.0, 195.0], [100.0, 107.0, 114.0], equal_var=False)
    assert s["halves.reference.LATE.welch_t"] == pytest.approx(want.statistic, rel=1e-12)
    assert s["halves.reference.LATE.welch_p"] == pytest.approx(want.pvalue, rel=1e-12)
    assert s["halves.reference.S1.welch_p"] == pytest.approx(want.pvalue, rel=1e-12)
    assert s["halves.reference.agree"] is False
    assert not [k for k in s if k.startswith("halves.candidate")]
    assert metrics_out.missing_reasons(s) == []
    report = (repo / "results" / "report.md").read_text()
    assert "* reference: **differ** (S1 Welch p" in report


def test_sources_that_agree(repo):
    rc, s = run(repo, [{"from": "data/a", "seeds": [0, 1, 2]}, {"from": "data/d", "seeds": [3, 4, 5]}])
    assert rc == 0
    assert s["halves.reference.LATE.g2.mean"] == pytest.approx(107.0)
    assert s["halves.reference.LATE.welch_p"] == pytest.approx(1.0)
    assert s["halves.reference.agree"] is True


@pytest.mark.parametrize("source, why", [
    ([{"from": "data/a", "seeds": [0, 1, 2, 3, 4]}, {"from": "data/b", "seeds": [5]}],
     "needs at least 2 seeds per side"),
    ([{"from": "data/a", "seeds": [0, 1, 2]}, {"from": "data/d", "seeds": [3, 4]},
      {"from": "data/b", "seeds": [5]}], "3 sources: the check compares two"),
])
def test_undecided_halves_say_why(repo, source, why):
    rc, s = run(repo, source)
    assert rc == 0
    assert s["halves.reference.agree"] is None
    assert why in s["halves.reference.agree.reason"]
    assert metrics_out.missing_reasons(s) == []

"""Statistics: exact values on hand-built data, degenerate cases, the round-3 reading."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from dreamer_parity.analysis import stats


def _eps(rows):
    return pd.DataFrame(rows, columns=["worker", "row_last", "score"])


def test_s2_curve_rolling_window_and_nan_until_every_env_has_an_episode():
    # env 0: 12 episodes of scores 1..12 ending at rows 10, 20, ..., 120; env 1..15: one
    # episode of score 100 ending at row 50 (row_last <= N/16 counts).
    rows = [(0, 10 * (i + 1), float(i + 1)) for i in range(12)]
    rows += [(w, 50, 100.0) for w in range(1, 16)]
    eps = _eps(rows).sample(frac=1.0, random_state=0)  # order must not matter
    pts = [16 * 40, 16 * 50, 16 * 100, 16 * 120, 16 * 200]
    got = stats.s2_curve(eps, pts)
    assert math.isnan(got[0])  # envs 1..15 have none by row 40
    # row 50: env 0 has 5 episodes (mean 3); others 100
    assert got[1] == pytest.approx((3.0 + 15 * 100) / 16, abs=1e-12)
    # row 100: env 0 has 10 episodes (mean 5.5)
    assert got[2] == pytest.approx((5.5 + 15 * 100) / 16, abs=1e-12)
    # row 120 and later: last 10 of 12 (3..12, mean 7.5)
    assert got[3] == pytest.approx((7.5 + 15 * 100) / 16, abs=1e-12)
    assert got[4] == got[3]


def test_s2_episode_on_the_boundary_row_counts():
    eps = _eps([(w, 125, 7.0) for w in range(16)])
    assert stats.s2_curve(eps, [2000])[0] == 7.0  # 2000 / 16 = 125
    assert math.isnan(stats.s2_curve(eps, [1984])[0])


def test_decide_rule_edges_and_welch_matches_scipy():
    ref = np.array([100.0, 200.0, 300.0])
    d = stats.decide(np.array([90.0, 110.0, 100.0]), ref)  # A == lo exactly
    assert d["A"] == 100.0 and d["lo"] == 100.0 and d["hi"] == 300.0
    assert d["LEARNS"] is True and d["WITHIN_RANGE"] is True
    d = stats.decide(np.array([300.0, 302.0]), ref)
    assert d["LEARNS"] is True and d["WITHIN_RANGE"] is False
    want = sps.ttest_ind([300.0, 302.0], ref, equal_var=False)
    assert d["welch"]["t"] == pytest.approx(want.statistic, rel=1e-12)
    assert d["welch"]["p"] == pytest.approx(want.pvalue, rel=1e-12)
    assert d["diff"] == pytest.approx(301.0 - 200.0)


def test_welch_undefined_for_constant_sides_never_a_rounding_p():
    # scipy gives p ~ 0.05 here because 0.1 is inexact
    w = stats.welch([0.1] * 5, [0.1] * 7)
    assert w["t"] is None and w["p"] is None and "no variance" in w["reason"]
    w = stats.welch([500.0] * 5, [500.0] * 5)
    assert w["p"] is None and w["reason"]
    w = stats.welch([500.0] * 3, [200.0] * 3)  # different constants: still undefined
    assert w["p"] is None
    # one constant side, one varying side: defined
    w = stats.welch([500.0] * 3, [400.0, 450.0, 500.0])
    assert w["p"] is not None and 0 < w["p"] < 1
    w = stats.welch([1.0], [1.0, 2.0])
    assert w["p"] is None and "2 seeds" in w["reason"]


def test_decide_all_500_gives_point_interval_and_exact_mean():
    d = stats.decide(np.full(5, 500.0), np.full(5, 500.0))
    assert d["A"] == 500.0 and d["LEARNS"] and d["WITHIN_RANGE"]
    assert d["welch"]["p"] is None and d["welch"]["reason"]
    assert d["bootstrap"]["lo"] == d["bootstrap"]["hi"] == 0.0
    assert d["power"]["n"] is None and d["power"]["reason"]
    b = stats.bootstrap_diff([0.1] * 5, [0.1] * 7)
    assert b["lo"] == b["hi"] == b["diff"] == 0.0


def test_decide_with_undefined_seed_is_all_none_with_reason():
    d = stats.decide(np.array([1.0, np.nan]), np.array([1.0, 2.0]), "S2")
    assert d["A"] is None and d["LEARNS"] is None and "candidate #1" in d["reason"]


def test_bootstrap_interval_is_reproducible_and_brackets_the_difference():
    c, r = [10.0, 12.0, 14.0], [1.0, 2.0, 6.0]
    a, b = stats.bootstrap_diff(c, r), stats.bootstrap_diff(c, r)
    assert a == b
    assert a["diff"] == pytest.approx(9.0)
    assert a["lo"] < a["diff"] < a["hi"]
    # the percentile interval lies within the extreme resamples
    assert a["lo"] >= 10.0 - 6.0 and a["hi"] <= 14.0 - 1.0


def test_seeds_needed_matches_cohen_tables():
    assert [stats.n_for_effect(d) for d in (0.5, 0.8, 1.0)] == [64, 26, 17]
    # observed effect d = 1 exactly: pooled sd 1, difference 1
    c, r = np.array([1.0, 2.0, 3.0]), np.array([0.0, 1.0, 2.0])
    p = stats.seeds_needed(c, r)
    assert p["effect"] == pytest.approx(1.0) and p["n"] == 17
    assert stats.seeds_needed([1.0, 2.0], [1.0, 2.0])["n"] is None  # no difference


def test_concordance_and_round3_reading():
    pts = [16000, 20000, 24000]
    ref = np.array([[100, 100, 450], [100, 100, 420], [100, 100, 400], [100, 420, 410], [100, 100, 100.0]])
    cand = np.full((5, 3), 200.0)
    c = stats.concordance(ref, cand, pts, 400.0, [20000, 24000], [16000, 24000])
    assert c["at"][24000] == {"reference": 4, "candidate": 0}
    assert c["at"][20000] == {"reference": 1, "candidate": 0}
    assert c["rate"]["reference"] == pytest.approx(5 / 15) and c["rate"]["candidate"] == 0.0
    late_ref = ref.mean(axis=1)
    late = stats.decide(cand.mean(axis=1), late_ref, "LATE")
    r = stats.round3_reading(c, late, 24000)
    assert r["needed_reference"] == 4 and r["H1"] is True
    assert r["H3"] is False and r["reading"] == "H1"
    # reference clearly higher in LATE with the same concordance: H1 and H3
    late = stats.decide(np.array([100.0, 101, 99, 100, 100]), np.array([300.0, 310, 305, 295, 300]))
    assert stats.round3_reading(c, late, 24000)["reading"] == "H1 and H3"
    # candidate higher, no H1 (rate above 0.4)
    ref2 = np.full((5, 3), 450.0)
    c2 = stats.concordance(ref2, cand, pts, 400.0, [24000], [16000, 24000])
    late = stats.decide(np.array([400.0, 401, 399, 400, 400]), np.array([100.0, 110, 105, 95, 100]))
    r2 = stats.round3_reading(c2, late, 24000)
    assert r2["H1"] is False and r2["reading"] == "candidate better"
    late = stats.decide(np.array([100.0, 200, 300]), np.array([150.0, 250, 260]))
    assert stats.round3_reading(c2, late, 24000)["reading"] == "H2 or noise"
    # no LATE pre-registered: no reading, with the reason
    r3 = stats.round3_reading(c2, None, 24000)
    assert r3["reading"] is None and "LATE" in r3["reason"]


def test_round3_share_generalises_to_other_seed_counts():
    pts = [24000]
    for n, need in ((3, 3), (5, 4), (10, 8)):
        ref = np.full((n, 1), 450.0)
        c = stats.concordance(ref, ref, pts, 400.0, [24000], [24000, 24000])
        assert stats.round3_reading(c, None, 24000)["needed_reference"] == need

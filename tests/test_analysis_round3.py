"""The analysis reproduces the study's own round-3 result (``analysis3.json``) to 1e-9.

Reference side: the study's ``ref_s<S>`` runs (exact expectation, per-run sampler);
candidate side: the study's own candidate (``ajax``), on round 3's statistics.
"""

import json

import numpy as np
import pytest

from dreamer_parity.analysis import compare, report
from dreamer_parity.params import validate
from dreamer_parity.round_spec import Round

ROUND3 = {"round": "round3-candidate", "decode": "exact", "seeds": [0, 1, 2, 3, 4],
          "rows": 24000, "eval_every": 400,
          "reference": {"decode": "exact", "sampler": "per_run",
                        "source": "data/published/round3"},
          "stats": {"late_rows": [12000, 24000], "concordance_rows": [20000, 24000],
                    "concordance_range": [16000, 24000]}}


@pytest.fixture(scope="module")
def round3(published_dir):
    d = published_dir / "round3"
    expected = json.loads((d / "analysis3.json").read_text())
    return expected, compare.analyse(Round.from_params(validate(ROUND3)), d, d / "ajax")


def test_late_and_welch_p(round3):
    expected, res = round3
    assert len(res["late"]["points"]) == 31
    np.testing.assert_allclose(res["late"]["values"]["reference"], expected["late_ref"],
                               rtol=0, atol=1e-9)
    np.testing.assert_allclose(res["late"]["values"]["candidate"], expected["late_ajax"],
                               rtol=0, atol=1e-9)
    assert res["late"]["decision"]["welch"]["p"] == pytest.approx(expected["p_late"], abs=1e-9)
    assert res["late"]["decision"]["lo"] == pytest.approx(270.27741935483874, abs=1e-9)
    assert res["late"]["decision"]["LEARNS"] is False          # 265.43 < 270.28


def test_s1(round3):
    expected, res = round3
    np.testing.assert_allclose(res["s1"]["values"]["reference"], expected["s1_ref"], rtol=0,
                               atol=1e-9)
    np.testing.assert_allclose(res["s1"]["values"]["candidate"], expected["s1_ajax"], rtol=0,
                               atol=1e-9)


def test_concordance_counts_and_rates(round3):
    expected, res = round3
    c, e = res["concordance"], expected["concordance"]
    at = {int(k): v for k, v in c["at"].items()}
    for rows in (20000, 24000):
        assert at[rows] == {"reference": e[f"ref_{rows}"],
                                      "candidate": e[f"ajax_{rows}"]}
    assert c["rate"]["reference"] == pytest.approx(e["ref_rate_16_24k"], abs=1e-9)
    assert c["rate"]["candidate"] == pytest.approx(e["ajax_rate_16_24k"], abs=1e-9)
    assert c["rate_points"] == 21


def test_reading(round3):
    expected, res = round3
    assert res["reading"]["reading"] == "H2 or noise"
    assert expected["reading"].startswith(res["reading"]["reading"] + " ")
    assert res["reading"]["H1"] is False and res["reading"]["H3"] is False


def test_study_candidate_is_context_and_gate_fails_on_late(round3, published_dir, tmp_path):
    expected, res = round3
    ctx = res["context"]
    assert ctx["dir"].endswith("round3/ajax")
    np.testing.assert_allclose(ctx["late"], expected["late_ajax"], rtol=0, atol=1e-9)
    np.testing.assert_allclose(ctx["s1"], expected["s1_ajax"], rtol=0, atol=1e-9)
    from dreamer_parity.analysis import metrics_out
    s = metrics_out.summary(res)
    assert s["context.study_candidate.LATE.mean"] == pytest.approx(265.4258102909211, abs=1e-9)
    assert metrics_out.missing_reasons(s) == []
    # a records-layout reference has no study candidate beside it
    assert compare.study_candidate(res["round"], {"layout": "records", "dir": "x"},
                                   res["points"]) is None


def test_study_candidate_curve_in_plot_data_and_report(round3):
    _, res = round3
    from dreamer_parity.analysis import metrics_out
    frame = metrics_out.eval_curve_frame(res)
    assert sorted(frame["side"].unique()) == ["candidate", "reference", "study_candidate"]
    study = frame[frame["side"] == "study_candidate"].pivot(index="seed", columns="rows",
                                                             values="eval_mean")
    np.testing.assert_array_equal(study.to_numpy(), res["context"]["eval"])
    # ajax is both the candidate and the context side here: the same curve
    np.testing.assert_array_equal(res["context"]["eval"], res["eval"]["candidate"])
    table = report._curve_table(res, "eval")
    assert table[0].endswith("| study cand s4 | study cand mean |")
    assert table[-1].startswith("| 24000 |")


def test_plain_words_from_the_numbers(published_dir):
    d = published_dir / "round3"
    params = validate({**ROUND3, "gate": {"statistic": "late", "learns": True,
                                          "welch_p_min": 0.05}})
    res = compare.analyse(Round.from_params(params), d, d / "ajax")
    text = "\n".join(report.plain_words(res))
    assert "candidate mean **265.4** (seeds 198.3 to 321.1)" in text
    assert "reference mean **312.7** (seeds 270.3 to 346.7)" in text
    assert "Welch p 0.122, with 5 candidate and 5 reference seeds" in text
    assert "**The pre-registered gate failed** on: learns." in text
    assert "lowest 270.3, short by 4.9" in text
    assert "is [-98.2, 3.7] return" in text and "the largest 98.2 return (31% of" in text
    assert "+-31.3 (10%) is **not shown**; about 32 seeds per side" in text
    assert "**H2 or noise**" in text
    # a gate that passes says so, and nothing about a failure
    passing = validate({**ROUND3, "gate": {"statistic": "late", "welch_p_min": 0.05}})
    text = "\n".join(report.plain_words(
        compare.analyse(Round.from_params(passing), d, d / "ajax")))
    assert ("**The pre-registered gate passed**: every part held: Welch's p 0.122 is at least "
            "0.05, so these seeds show no difference between the sides at that level.") in text
    assert "failed" not in text and "lowest reference seed" not in text   # LEARNS is False here
    learns_only = validate({**ROUND3, "gate": {"statistic": "late", "learns": True}})
    res = compare.analyse(Round.from_params(learns_only), d, d / "ajax")
    res["late"]["decision"]["LEARNS"] = True            # as if the candidate had reached 270.3
    res["gate"]["parts"]["learns"]["ok"] = True
    res["gate"]["pass"] = True
    text = "\n".join(report.plain_words(res))
    assert "the candidate's mean 265.4 is at least the lowest reference seed's 270.3" in text
    assert "no difference" not in text                  # no Welch part: nothing said about p

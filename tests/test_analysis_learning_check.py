"""The learning check (dreamer_parity.analysis.learning_check): the published references'
numbers reproduced, the gate on synthetic full-size candidates with known values, the
smoke round as not applicable, bad input."""

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from dreamer_parity.analysis import published_tables, learning_check as lc
from dreamer_parity.analysis import load, metrics_out, published, synthetic
from dreamer_parity.params import validate

REPO = Path(__file__).resolve().parents[1]
FULL = {"round": "round1", "profile": "full", "seeds": [0, 1, 2], "rows": 20000,
        "eval_every": 2000, "eval_episodes": 10, "decode": "exact"}
SMOKE = {"round": "smoke", "profile": "smoke", "seeds": [0, 1], "rows": 1200, "eval_every": 400,
         "eval_episodes": 2,
         "stats": {"s1_rows": [400, 800, 1200], "late_rows": [], "concordance_rows": [1200],
                   "concordance_range": [400, 1200]}}

# pair E's reference S1 per seed (round 2, the exact expectation) and round 1's stock one
PAIR_E_S1 = [306.96666666666664, 265.1666666666667, 297.6333333333333]
ROUND1_S1 = [386.1, 246.43333333333334, 241.36666666666667]


@pytest.fixture(scope="module")
def pub(published_dir):
    return published_dir


def _candidate(root, raw, s1, ent, fail=None):
    """Synthetic candidate runs: every evaluation of seed s returns s1[s] (all episodes),
    the window ending at 4000 rows has entropy ent[s] (0.6 elsewhere)."""
    params = validate(raw)
    for s in params["seeds"]:
        synthetic.write_run(root, "candidate", s, params,
                            eval_fn=lambda n, seed: [float(s1[seed])] * params["eval_episodes"],
                            train_fn=lambda n, seed: {"ent/action/mean": ent[seed] if n == 4000 else 0.6},
                            fail_at=(fail or {}).get(s))
    return root


def _cli(tmp_path, cand, pub, raw=FULL):
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    out, csv = tmp_path / "metrics" / "learning_check.json", tmp_path / "metrics" / "plots" / "lc.csv"
    rc = lc.main(["--params", str(tmp_path / "params.yaml"), "--candidate", str(cand),
                  "--published", str(pub), "--out", str(out), "--plot-data", str(csv)])
    return rc, out, csv


def _read(out):
    text = out.read_text()
    assert "NaN" not in text and "Infinity" not in text
    m = json.loads(text)
    assert all(not isinstance(v, (dict, list)) for v in m.values())  # flat
    assert {k for k in m if not k.endswith("reason")} == set(lc.metric_keys())
    return m


# ----------------------------------------------------------------------------- published

def test_published_references_reproduced(pub):
    e = lc.reference_side(pub, "pairE")
    np.testing.assert_allclose(e["s1"], PAIR_E_S1, rtol=0, atol=1e-9)
    assert np.round(e["s1"], 2).tolist() == [306.97, 265.17, 297.63]
    assert e["entropy"]["lo"] == 0.4481 and e["entropy"]["hi"] == 0.4765
    assert e["entropy"]["mean"] == 0.4591
    r1 = lc.reference_side(pub, "round1")
    np.testing.assert_allclose(r1["s1"], ROUND1_S1, rtol=0, atol=1e-9)
    assert round(r1["s1"].min(), 1) == 241.4 and round(r1["s1"].max(), 1) == 386.1
    assert (r1["entropy"]["lo"], r1["entropy"]["hi"]) == (0.5056, 0.5178)
    # both were printed on line 169 of their compare.md, section at line 157
    assert e["entropy"]["line"] == r1["entropy"]["line"] == 169


def test_window_range_reader_names_file_and_line(pub, tmp_path):
    table, src = pub / "tables.csv", "round1/compare.md"
    with pytest.raises(load.AnalysisError, match=r"tables.csv: round1/compare.md has no section '### window ending at 5000 rows'"):
        published_tables.window_range(table, src, 5000, "ent/action/mean")
    with pytest.raises(load.AnalysisError, match=r"tables.csv: round1/compare.md section .* has no row 'ent/nothing'"):
        published_tables.window_range(table, src, 4000, "ent/nothing")
    bad = tmp_path / "tables.csv"
    bad.write_text(table.read_text().replace(
        'ent/action/mean,"ref mean [min, max]","0.5135 [0.5056, 0.5178]"',
        'ent/action/mean,"ref mean [min, max]","0.5135 [0.5056]"', 1))
    with pytest.raises(load.AnalysisError, match=r"tables.csv:199: ent/action/mean .*got '0.5135 \[0.5056\]'"):
        published_tables.window_range(bad, src, 4000, "ent/action/mean")


# ----------------------------------------------------------------------------- the gate

def test_candidate_that_passes(tmp_path, pub):
    cand = _candidate(tmp_path / "cand", FULL, {0: 250, 1: 290, 2: 330}, {0: 0.45, 1: 0.46, 2: 0.47})
    rc, out, csv = _cli(tmp_path, cand, pub)
    assert rc == 0
    m = _read(out)
    assert metrics_out.missing_reasons(m) == []
    assert m["applicable"] is True and "reason" not in m
    assert [m[f"candidate.S1.s{s}"] for s in (0, 1, 2)] == [250.0, 290.0, 330.0]
    assert m["candidate.S1.A"] == 290.0 and m["candidate.failed_seeds"] == 0
    assert (m["candidate.entropy_w4000.lo"], m["candidate.entropy_w4000.hi"]) == (0.45, 0.47)
    assert m["pairE.S1.lo"] == pytest.approx(265.1666666666667, abs=1e-9)
    assert m["pairE.S1.hi"] == pytest.approx(306.96666666666664, abs=1e-9)
    assert m["pairE.LEARNS"] is True and m["pairE.WITHIN_RANGE"] is True
    assert m["pairE.welch_p"] == pytest.approx(0.9978235947068914, abs=1e-9)
    assert m["pairE.diff"] == pytest.approx(290.0 - np.mean(PAIR_E_S1), abs=1e-9)
    assert m["pairE.entropy_overlap"] is True
    assert m["round1.LEARNS"] is True and m["round1.WITHIN_RANGE"] is True
    assert m["round1.welch_p"] == pytest.approx(0.9819355089969406, abs=1e-9)
    assert m["round1.entropy_overlap"] is False  # [0.45, 0.47] vs [0.5056, 0.5178]: reported only
    assert (m["gate.mean_S1_bar"], m["gate.welch_p_min"]) == (156.0, 0.05)
    assert m["gate.mean_S1_ok"] is m["gate.welch_p_ok"] is m["gate.entropy_overlap_ok"] is True
    assert m["gate_pass"] is True
    df = pd.read_csv(csv)
    assert list(df.columns) == ["side", "seed", "rows", "eval_mean"]
    assert df.groupby("side").size().to_dict() == {"candidate": 30, "reference_pairE": 30,
                                                   "reference_round1": 30}
    ref = df[(df["side"] == "reference_pairE") & (df["seed"] == 0)]
    assert ref["rows"].tolist() == list(range(2000, 20001, 2000))
    assert ref["eval_mean"].tolist()[-3:] == [300.1, 150.4, 470.4]


@pytest.mark.parametrize("s1, ent, A, learns, within, p, failing", [
    # mean S1 below 156, yet Welch p large (one seed learnt, two did not)
    ({0: 10, 1: 10, 2: 440}, {0: 0.45, 1: 0.46, 2: 0.47}, 460 / 3, False, False,
     0.44136242220453314, "mean_S1_ok"),
    # mean above 156, but consistently lower than pair E's reference: p < 0.05
    ({0: 180, 1: 181, 2: 182}, {0: 0.45, 1: 0.46, 2: 0.47}, 181.0, False, False,
     0.013117799143743962, "welch_p_ok"),
    # S1 as the passing case, entropy range [0.50, 0.52] above pair E's [0.4481, 0.4765]
    ({0: 250, 1: 290, 2: 330}, {0: 0.50, 1: 0.51, 2: 0.52}, 290.0, True, True,
     0.9978235947068914, "entropy_overlap_ok"),
])
def test_each_gate_part_fails_alone(tmp_path, pub, s1, ent, A, learns, within, p, failing):
    cand = _candidate(tmp_path / "cand", FULL, s1, ent)
    rc, out, _ = _cli(tmp_path, cand, pub)
    assert rc == 0  # a failing gate is a result, not an error
    m = _read(out)
    assert m["candidate.S1.A"] == pytest.approx(A, abs=1e-9)
    assert m["pairE.LEARNS"] is learns and m["pairE.WITHIN_RANGE"] is within
    assert m["pairE.welch_p"] == pytest.approx(p, abs=1e-9)
    parts = {k: m[f"gate.{k}"] for k in ("mean_S1_ok", "welch_p_ok", "entropy_overlap_ok")}
    assert parts == {k: k != failing for k in parts}
    assert m["gate_pass"] is False


def test_entropy_overlap_with_round1_is_reported_not_gated(tmp_path, pub):
    cand = _candidate(tmp_path / "cand", FULL, {0: 250, 1: 290, 2: 330}, {0: 0.50, 1: 0.51, 2: 0.52})
    m = _read(_cli(tmp_path, cand, pub)[1])
    assert m["round1.entropy_overlap"] is True and m["pairE.entropy_overlap"] is False
    assert m["gate_pass"] is False


def test_failed_seed_scores_zero_and_null_entropy_has_a_reason(tmp_path, pub):
    cand = _candidate(tmp_path / "cand", FULL, {0: 300, 1: 300, 2: 300}, {0: 0.45, 1: None, 2: 0.47},
                      fail={1: 18000})
    m = _read(_cli(tmp_path, cand, pub)[1])
    assert m["candidate.failed_seeds"] == 1
    assert m["candidate.S1.s1"] == 100.0  # 300 at 16000, 0 at 18000 and 20000 (failed rule zero)
    assert m["candidate.S1.A"] == pytest.approx(700 / 3, abs=1e-9)
    assert m["candidate.entropy_w4000.s1"] is None and "row 4000" in m["candidate.entropy_w4000.s1.reason"]
    assert (m["candidate.entropy_w4000.lo"], m["candidate.entropy_w4000.hi"]) == (0.45, 0.47)
    assert metrics_out.missing_reasons(m) == []


# ----------------------------------------------------------------------------- not applicable

def test_smoke_round_is_not_applicable_and_exits_0(tmp_path, pub, capsys):
    cand = _candidate(tmp_path / "cand", SMOKE, {0: 30, 1: 40}, {0: 0.6, 1: 0.6})
    rc, out, csv = _cli(tmp_path, cand, pub, raw=SMOKE)
    assert rc == 0
    m = _read(out)
    assert m["applicable"] is False
    assert all(v is None for k, v in m.items() if k not in ("applicable", "reason"))
    assert m["reason"].startswith("not applicable to this round")
    for part in ("profile smoke (needs full)", "seeds [0, 1] (needs [0, 1, 2])",
                 "rows 1200 (needs 20000; no evaluation at 16000)", "eval_every 400 (needs 2000)",
                 "eval_episodes 2 (needs 10)"):
        assert part in m["reason"]
    assert "decode" not in m["reason"]
    assert "not applicable" in capsys.readouterr().out
    df = pd.read_csv(csv)
    c = df[df["side"] == "candidate"]
    assert c[["seed", "rows"]].values.tolist() == [[0, 400], [0, 800], [0, 1200],
                                                   [1, 400], [1, 800], [1, 1200]]
    assert c["eval_mean"].tolist() == [30.0] * 3 + [40.0] * 3
    assert len(df) == 6 + 60


def test_other_decode_is_not_applicable(tmp_path, pub):
    cand = _candidate(tmp_path / "cand", FULL, {0: 250, 1: 290, 2: 330}, {0: 0.45, 1: 0.46, 2: 0.47})
    rc, out, _ = _cli(tmp_path, cand, pub, raw=dict(FULL, decode="ref"))
    m = _read(out)
    assert rc == 0 and m["applicable"] is False and m["gate_pass"] is None
    assert m["reason"].endswith("params have decode ref (needs exact)")


# ----------------------------------------------------------------------------- bad input

def _nothing_written(tmp_path):
    assert not (tmp_path / "metrics").exists()


def test_missing_completion_marker_exits_2_naming_the_file(tmp_path, pub, capsys):
    cand = _candidate(tmp_path / "cand", FULL, {0: 250, 1: 290, 2: 330}, {0: 0.45, 1: 0.46, 2: 0.47})
    (cand / "s1" / "DONE.json").unlink()
    rc, _, _ = _cli(tmp_path, cand, pub)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err
    assert err.startswith("error: ") and "s1/DONE.json" in err and "completion marker" in err
    _nothing_written(tmp_path)


def test_missing_candidate_directory_exits_2(tmp_path, pub, capsys):
    rc, _, _ = _cli(tmp_path, tmp_path / "nothing", pub)
    err = capsys.readouterr().err
    assert rc == 2 and "error: candidate directory" in err and "nothing: not found" in err
    _nothing_written(tmp_path)


def test_candidate_without_the_rounds_evaluation_points_exits_2(tmp_path, pub, capsys):
    sparse = dict(FULL, eval_every=4000, stats={"s1_rows": [16000, 20000]})
    cand = _candidate(tmp_path / "cand", sparse, {0: 1, 1: 2, 2: 3},
                      {0: 0.45, 1: 0.46, 2: 0.47})
    rc, _, _ = _cli(tmp_path, cand, pub)
    assert rc == 2
    assert "missing rows [2000, 6000, 10000, 14000, 18000]" in capsys.readouterr().err
    _nothing_written(tmp_path)


def test_malformed_published_files_exit_2_naming_file_and_line(tmp_path, pub, capsys):
    cand = _candidate(tmp_path / "cand", FULL, {0: 250, 1: 290, 2: 330}, {0: 0.45, 1: 0.46, 2: 0.47})
    copy = tmp_path / "pub"
    shutil.copytree(pub, copy)
    ev = copy / "round2" / "ref_s1" / "evals.jsonl"
    ev.write_text(ev.read_text()[:-30])
    assert _cli(tmp_path, cand, copy)[0] == 2
    err = capsys.readouterr().err
    assert "ref_s1/evals.jsonl:10: truncated line" in err
    _nothing_written(tmp_path)
    shutil.copy2(pub / "round2" / "ref_s1" / "evals.jsonl", ev)
    table = copy / "tables.csv"
    lines = table.read_text().splitlines(keepends=True)
    table.write_text("".join(x for x in lines if not x.startswith(
        "round2/pairE/compare.md,169,### window ending at 4000 rows,ent/action/mean,")))
    assert _cli(tmp_path, cand, copy)[0] == 2
    err = capsys.readouterr().err
    assert "tables.csv: round2/pairE/compare.md section '### window ending at 4000 rows' " \
           "has no row 'ent/action/mean'" in err
    _nothing_written(tmp_path)

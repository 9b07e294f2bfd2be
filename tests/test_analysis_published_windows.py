"""Training-metric windows against the study's published tables (analysis/published_windows.py)."""

import re
import shutil

import numpy as np
import pytest

from dreamer_parity import schedule
from dreamer_parity.analysis import published_tables, published_windows
import synthetic  # tests/synthetic.py
from dreamer_parity.analysis.load import AnalysisError, load_side
from dreamer_parity.params import validate
from dreamer_parity.round_spec import Round

ROUND1 = "round1/compare.md"
ENT = "ent/action/mean"
PARAMS = validate({"round": "windows-test", "seeds": [0, 1], "rows": 20000, "eval_every": 400})


def _runs(tmp_path, train_fn):
    for s in PARAMS["seeds"]:
        synthetic.write_run(tmp_path / "cand", "candidate", s, PARAMS, train_fn=train_fn)
    return load_side(tmp_path / "cand", "candidate", PARAMS["seeds"])


def test_window_means_weight_records_by_their_updates(tmp_path):
    runs = _runs(tmp_path, lambda rows, s: {"x": float(rows), "y": None if rows == 1600 else 1.0})
    means = published_windows.window_means(runs, [18000, 20000])
    # (18000, 20000]: five records, 200 updates each -> the plain mean of their rows
    assert means["x"][0, 1] == 19200.0
    means = published_windows.window_means(runs, [2000, 4000])
    # (0, 2000]: records at 400 and 800 cover no update; 1200, 1600, 2000 cover 81, 200, 200
    assert schedule.updates_at([400, 800, 1200, 1600, 2000]) == [0, 0, 81, 281, 481]
    assert means["x"][0, 0] == pytest.approx((1200 * 81 + 1600 * 200 + 2000 * 200) / 481, rel=1e-12)
    # a null record is left out with its weight
    assert means["y"][1, 0] == 1.0
    with pytest.raises(AnalysisError, match="equally spaced"):
        published_windows.window_means(runs, [2000, 4000, 8000])
    # an explicit width: (16000, 20000] and (18000, 20000]
    assert published_windows.window_means(runs, [20000], 4000)["x"][0, 0] == 18200.0
    assert published_windows.window_means(runs, [20000], 2000)["x"][0, 0] == 19200.0


def test_against_the_round1_reference_windows(tmp_path):
    cells = published_tables.window_cells(published_windows.TABLE_CSV, ROUND1,
                                          published_windows.COLUMNS["reference"])
    ent = cells[cells["metric"] == ENT].set_index("rows")
    assert list(ent.index) == list(range(2000, 20001, 2000))
    # the printed cell of the window ending at 4000 rows, as the report has it
    assert (ent.loc[4000, "lo"] <= ent.loc[4000, "mean"] <= ent.loc[4000, "hi"])

    def train(rows, s):   # on the published mean in every window but 20,000, far off there
        end = -(-rows // 2000) * 2000
        return {ENT: float(ent.loc[end, "mean"]) if end < 20000 else 5.0, "rec_loss": 1e6}

    t = published_windows.against_published(_runs(tmp_path, train), published_windows.TABLE_CSV,
                                            ROUND1, published_windows.COLUMNS["reference"], 20000)
    e = t[t["metric"] == ENT].set_index("rows")
    np.testing.assert_allclose(e.loc[2000:18000, "mean"], ent.loc[2000:18000, "mean"], rtol=1e-12)
    assert e.loc[2000:18000, "inside"].all() and not e.loc[20000, "overlap"]
    s = published_windows.summarise(t).set_index("metric")
    assert s.loc[ENT, "windows"] == 10 and s.loc[ENT, "inside"] == 9
    assert s.loc[ENT, "apart_rows"] == [20000]
    p20 = ent.loc[20000]
    assert s.loc[ENT, "first_apart"] == (
        f"20000: 5 [5, 5] against {p20['mean']:.4g} [{p20['lo']:.4g}, {p20['hi']:.4g}]")
    assert s.loc["rec_loss", "overlap"] == 0
    assert s.loc["rec_loss", "first_apart"].startswith("2000: 1e+06 [1e+06, 1e+06] against ")
    lines = published_windows.report_lines({("candidate", ROUND1, "reference"): t})
    assert lines[-2].startswith(f"| `{ENT}` | 10 | 9 | 9 | 20000 | 20000: 5 [5, 5] against ")
    # a counter metric gets its note under the table
    counter = t[t["metric"] == ENT].assign(metric="opt_grad_steps")
    lines = published_windows.report_lines({("candidate", ROUND1, "reference"): counter})
    assert lines[-1] == "* `opt_grad_steps`: " + published_windows.METRIC_NOTES["opt_grad_steps"]
    # only metrics both report; a shorter round compares only the windows it reaches
    assert set(t["metric"]) == {ENT, "rec_loss"}
    short = published_windows.against_published(_runs(tmp_path / "b", train),
                                                published_windows.TABLE_CSV, ROUND1,
                                                published_windows.COLUMNS["reference"], 6000)
    assert sorted(short["rows"].unique()) == [2000, 4000, 6000]
    assert set(short["window_rows"]) == {2000}


@pytest.mark.parametrize("eval_every,rows,ends", [(4000, 20000, None), (2000, 2000, [2000])])
def test_only_windows_the_records_cover(tmp_path, eval_every, rows, ends):
    params = validate({"round": "w", "seeds": [0], "rows": rows, "eval_every": eval_every,
                       "stats": {"s1_rows": [rows], "concordance_rows": [rows],
                                 "concordance_range": [0, rows]}})
    synthetic.write_run(tmp_path, "candidate", 0, params)
    runs = load_side(tmp_path, "candidate", [0])
    t = published_windows.against_published(runs, published_windows.TABLE_CSV, ROUND1,
                                            published_windows.COLUMNS["reference"], rows)
    # records every 4,000 rows cannot make a 2,000-row window; one record at 2,000 can
    assert (t is None) if ends is None else (sorted(t["rows"].unique()) == ends)


def test_malformed_published_cell_names_the_csv_line(tmp_path):
    bad = tmp_path / "tables.csv"
    shutil.copy(published_windows.TABLE_CSV, bad)
    lines = bad.read_text().splitlines(keepends=True)
    i = next(k for k, line in enumerate(lines)
             if line.startswith(ROUND1) and ",rec_loss,\"ref mean [min, max]\"," in line)
    lines[i] = re.sub(r'"[^"]*"\s*$', '"0.4 [0.5, 0.3]"\n', lines[i])   # min > max
    bad.write_text("".join(lines))
    synthetic.reseal(tmp_path)    # the study's files come with their manifest
    with pytest.raises(AnalysisError, match=rf"tables.csv:{i + 1}: rec_loss"):
        published_tables.window_cells(bad, ROUND1, published_windows.COLUMNS["reference"])


def test_compare_reports_the_windows_for_sides_with_training_metrics(tmp_path):
    from dreamer_parity.analysis import compare, metrics_out, report
    synthetic.write_round(tmp_path, PARAMS)
    res = compare.analyse(Round.from_params(PARAMS), tmp_path / "reference", tmp_path / "candidate")
    pw = res["published_windows"]
    assert pw["reason"] is None
    assert sorted(k[:2] for k in pw["tables"]) == [
        ("candidate", "round1/compare.md"), ("candidate", "round2/pairE/compare.md"),
        ("reference", "round1/compare.md"), ("reference", "round2/pairE/compare.md")]
    s = metrics_out.summary(res)
    t = pw["tables"][("candidate", ROUND1, "reference")]
    assert s["published_windows.candidate.round1.cells"] == len(t) > 0
    assert s["published_windows.candidate.round1.inside"] == int(t["inside"].sum())
    text = report.render(res)
    assert "### candidate against the study's reference runs in `round1/compare.md`" in text
    assert ("Windows of 2000 rows ending at [2000, 4000, 6000, 8000, 10000, 12000, 14000, "
            "16000, 18000, 20000].") in text
    # a published reference (no training metrics) is left out, the candidate still compared
    r3 = validate({"round": "r3", "seeds": [0, 1, 2, 3, 4], "rows": 24000, "eval_every": 400,
                   "reference": {"decode": "exact", "sampler": "per_run",
                                 "source": "data/published/round3"}})
    synthetic.write_round(tmp_path / "r3", r3)
    res = compare.analyse(Round.from_params(r3), published_windows.TABLE_CSV.parent / "round3",
                          tmp_path / "r3" / "candidate")
    assert sorted(k[:2] for k in res["published_windows"]["tables"]) == [
        ("candidate", "round1/compare.md"), ("candidate", "round2/pairE/compare.md")]

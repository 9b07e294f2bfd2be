"""The runs kept under data/runs/ against the committed metrics that name them.

data/runs/round3-candidate/ is a copy of the committed round 3's candidate outputs (the
reference side of comparison B); its LATE and S1 per seed, recomputed here from its
records by the protocol's definitions, must equal the committed summary of that round
(HEAD's params.yaml is round3-candidate)."""

import json
import statistics
from pathlib import Path

import pytest

from dreamer_parity import records

REPO = Path(__file__).resolve().parents[1]
SUMMARY = json.loads((REPO / "metrics" / "summary.json").read_text())
KEPT = REPO / "data" / "runs" / "round3-candidate"


def test_head_is_the_round_the_copy_came_from():
    assert SUMMARY["round"] == "round3-candidate"


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_kept_copy_scores_as_committed(seed):
    recs = records.read_records(KEPT / f"s{seed}")
    late = statistics.fmean(r["eval_mean"] for r in recs if 12000 <= r["rows"] <= 24000)
    s1 = statistics.fmean(r["eval_mean"] for r in recs if r["rows"] in (16000, 18000, 20000))
    assert late == pytest.approx(SUMMARY[f"LATE.candidate.s{seed}"], rel=1e-12)
    assert s1 == pytest.approx(SUMMARY[f"S1.candidate.s{seed}"], rel=1e-12)
    assert json.loads((KEPT / f"s{seed}" / "run.json").read_text())["config"]["agent"]["decode"] == "exact"


def test_kept_runs_hold_no_parameters():
    assert not list((REPO / "data" / "runs").rglob("params.npz"))

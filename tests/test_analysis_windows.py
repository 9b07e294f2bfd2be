"""Each side's own S2 and training-metric windows (analysis/windows.py), also when the
other side is a published directory without them: summary keys, windows.json, the
per-side CSVs, the figures drawn (no placeholder), the report."""

import json

import numpy as np
import pandas as pd
import pytest

from dreamer_parity import records
from dreamer_parity.analysis import compare, plots, windows
import synthetic  # tests/synthetic.py
from dreamer_parity.params import validate

RAW = {"round": "tw", "seeds": [0, 1, 2], "rows": 2400, "eval_every": 400, "eval_episodes": 2,
       "profile": "smoke",
       "stats": {"s1_rows": [1600, 2000, 2400], "late_rows": [1200, 2400],
                 "concordance_rows": [2000, 2400], "concordance_range": [1600, 2400]}}
PARAMS = validate(RAW)


def train_fn(scale: float = 1.0):
    """The five window metrics: ``ent`` = 0.7 - 0.1 k + 0.01 seed (k = rows / 400), no
    value in the first window; ``val/std`` = scale * 0.001 (seed + 1) k."""
    def fn(rows, seed):
        k = rows // 400
        if k == 1:
            return {m: None for m in windows.WINDOW_METRICS}
        return {"ent/action/mean": 0.7 - 0.1 * k + 0.01 * seed,
                "val/std": scale * 0.001 * (seed + 1) * k, "ret/std": 0.1 * k,
                "adv/std": 0.2, "rew/min": -0.01 * seed}
    return fn


def publish(src_side, dest) -> None:
    """A side's synthetic runs rewritten in the published layout (evaluations only)."""
    for s in PARAMS["seeds"]:
        recs = records.read_records(src_side / f"s{s}")
        lines = [{"seed": s, "rows": r["rows"], "updates": r["updates"],
                  "returns": r["eval_returns"], "lengths": r["eval_lengths"],
                  "mean": r["eval_mean"], "len_mean": r["eval_len_mean"], "wall_s": 1.0}
                 for r in recs]
        records.write_jsonl(dest / f"ref_s{s}" / "evals.jsonl", lines)
    (dest / "launch_info.txt").write_text(
        f"reference: <reference-checkout> @ {synthetic.REFERENCE_COMMIT}\n")
    synthetic.reseal(dest)    # the published layout comes with its manifest


def s2_by_protocol(episodes: list[dict], n: int) -> float:
    """PROTOCOL.md 5.2, written out: per env the mean score of its last min(10, k)
    episodes with row_last <= n / 16 (completion order), averaged over the 16 envs."""
    total = 0.0
    for w in range(16):
        mine = [e for e in episodes if e["worker"] == w and e["row_last"] <= n // 16]
        mine.sort(key=lambda e: e["row_last"])
        last = mine[-10:]
        if not last:
            return float("nan")
        total += sum(e["score"] for e in last) / len(last)
    return total / 16


def run_compare(tmp_path, ref_dir, cand_dir):
    synthetic.write_params(tmp_path / "params.yaml", RAW)
    return compare.main(["--params", str(tmp_path / "params.yaml"), "--reference", str(ref_dir),
                         "--candidate", str(cand_dir), "--metrics-dir", str(tmp_path / "metrics"),
                         "--plots-dir", str(tmp_path / "metrics" / "plots"),
                         "--report", str(tmp_path / "results" / "report.md")])


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "runs"
    for side in records.SIDES:
        for s in PARAMS["seeds"]:
            # episode draws in which every env finishes an episode by 2400 rows (150 per env)
            synthetic.write_run(root / side, side, s, PARAMS, train_fn=train_fn(
                10.0 if side == "candidate" else 1.0), rng_seed={0: 100, 1: 103, 2: 104}[s])
    publish(root / "reference", root / "published")
    return root


def test_candidate_against_published_side(tmp_path, runs, monkeypatch):
    monkeypatch.chdir(tmp_path)
    placeholders = []
    monkeypatch.setattr(plots, "_placeholder", lambda path, title, reason:
                        placeholders.append(path.name))
    assert run_compare(tmp_path, runs / "published", runs / "candidate") == 0
    s = json.loads((tmp_path / "metrics" / "summary.json").read_text())
    # S2 of the candidate, per seed, by the protocol's definition
    for seed in PARAMS["seeds"]:
        eps = records.read_episodes(runs / "candidate" / f"s{seed}")
        want = s2_by_protocol(eps, 2400)
        assert np.isfinite(want)
        assert s[f"S2.candidate.s{seed}"] == pytest.approx(want, rel=1e-12)
    assert s["S2.candidate.mean"] == pytest.approx(
        np.mean([s[f"S2.candidate.s{x}"] for x in PARAMS["seeds"]]), rel=1e-12)
    assert "published runs carry no episodes" in s["S2.reference.reason"]
    assert s["S2.reason"].startswith("no comparison: reference seed 0")
    assert "S2.A" not in s and "S2.reference.s0" not in s
    # entropy windows of the candidate: k = 3 (1200 rows): 0.4 + 0.01 seed
    assert s["entropy.candidate.w1200.lo"] == pytest.approx(0.40)
    assert s["entropy.candidate.w1200.hi"] == pytest.approx(0.42)
    assert s["entropy.candidate.w1200.mean"] == pytest.approx(0.41)
    assert s["entropy.candidate.windows"] == 5                 # 800 .. 2400; 400 is empty
    assert "entropy.candidate.w400.mean" not in s
    assert s["entropy.reference.reason"] == "published runs carry no training-metric windows"
    # windows.json: five metrics of the candidate, none of the reference, no overlap keys
    w = json.loads((tmp_path / "metrics" / "windows.json").read_text())
    assert w["reference.reason"] == "published runs carry no training-metric windows"
    assert w["val/std.candidate.w2400.hi"] == pytest.approx(10 * 0.001 * 3 * 6)
    assert w["rew/min.candidate.w800.lo"] == pytest.approx(-0.02)
    assert {k for k in w if k.endswith(".candidate.windows")} == \
        {f"{m}.candidate.windows" for m in windows.WINDOW_METRICS}
    assert not [k for k in w if "overlap" in k or ".reference." in k]
    files = sorted(p.name for p in (tmp_path / "metrics" / "plots" / "windows").iterdir())
    assert files == sorted(f"{side}_{windows.slug(m)}.csv" for m in windows.WINDOW_METRICS
                           for side in records.SIDES)
    # the published side's files hold the header only
    assert (tmp_path / "metrics" / "plots" / "windows" / "reference_val_std.csv").read_text() == \
        "rows,mean,lo,hi,n\n"
    csv = pd.read_csv(tmp_path / "metrics" / "plots" / "windows" / "candidate_ent_action_mean.csv")
    assert list(csv.columns) == ["rows", "mean", "lo", "hi", "n", "s0", "s1", "s2"]
    assert csv["rows"].tolist() == [800, 1200, 1600, 2000, 2400]
    assert csv["s2"].tolist() == pytest.approx([0.52, 0.42, 0.32, 0.22, 0.12])
    curve = pd.read_csv(tmp_path / "metrics" / "plots" / "eval_curve.csv")
    assert curve[curve["side"] == "candidate"]["s2"].notna().any()
    assert curve[curve["side"] == "reference"]["s2"].isna().all()
    ent = pd.read_csv(tmp_path / "metrics" / "plots" / "entropy_windows.csv")
    assert set(ent["side"]) == {"candidate"} and len(ent) == 5
    # every figure drawn, none a placeholder
    assert placeholders == []
    for name in ("s2_curve.png", "entropy_windows.png", "windows.png"):
        assert (tmp_path / "metrics" / "plots" / name).read_bytes()[:4] == b"\x89PNG"
    report = (tmp_path / "results" / "report.md").read_text()
    assert "| seed | reference S1 | candidate S1 | candidate S2(2400) |" in report
    assert "* reference: none (published runs carry no training-metric windows)" in report
    assert "<code>val/std</code>" in report


def test_both_sides_overlap_per_window_and_stale_files_go(tmp_path, runs, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_compare(tmp_path, runs / "reference", runs / "candidate") == 0
    w = json.loads((tmp_path / "metrics" / "windows.json").read_text())
    # entropy identical per seed on both sides: every window overlaps
    assert w["ent/action/mean.overlap_windows"] == w["ent/action/mean.windows"] == 5
    # val/std: reference 0.001 k [1..3], candidate 10x: apart in every window
    assert w["val/std.overlap_windows"] == 0 and w["val/std.w1200.overlap"] is False
    assert w["val/std.reference.w1200.lo"] == pytest.approx(0.003)
    s = json.loads((tmp_path / "metrics" / "summary.json").read_text())
    assert s["S2.A"] == pytest.approx(s["S2.candidate.mean"])
    assert s["entropy.reference.w1200.mean"] == pytest.approx(s["entropy.candidate.w1200.mean"])
    wdir = tmp_path / "metrics" / "plots" / "windows"
    assert len(list(wdir.iterdir())) == 10
    assert len(pd.read_csv(wdir / "reference_val_std.csv")) == 5
    # the same outputs against the published side: the reference's windows are gone, and a
    # stray file in the directory too (the directory is replaced as a whole)
    (wdir / "stray.csv").write_text("x\n")
    assert run_compare(tmp_path, runs / "published", runs / "candidate") == 0
    assert len(list(wdir.iterdir())) == 10
    assert len(pd.read_csv(wdir / "reference_val_std.csv")) == 0


def test_side_windows_reason_and_nan_windows():
    from dreamer_parity.analysis.load import Run
    ev = pd.DataFrame({"rows": [400, 800]})
    train = pd.DataFrame({"val/std": [np.nan, 2.0]}, index=pd.Index([400, 800], name="rows"))
    run = Run("candidate", 0, "records", "x", "ok", None, None, ev, [], train, None, None, None)
    w = windows.side_windows([run])
    assert w["reason"] is None and list(w["metrics"]) == ["val/std"]
    assert w["metrics"]["val/std"]["n"].tolist() == [0, 1]
    assert w["metrics"]["val/std"]["hi"][1] == 2.0
    pub = Run("reference", 0, "published", "x", "ok", None, None, ev, [], None, None, None, None,
              {"train": "published runs carry no training-metric windows"})
    assert windows.side_windows([pub]) == {"reason": "published runs carry no training-metric windows"}

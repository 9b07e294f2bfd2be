"""The runs kept under data/runs/ against the committed metrics that name them.

Two checks, both recomputing LATE and S1 per seed from the kept records by the protocol's
definitions (LATE: mean ``eval_mean`` over the records in [12,000, 24,000] rows; S1: at
16,000, 18,000 and 20,000 rows) and comparing them with a committed summary:

- data/runs/round3-candidate/ is a copy of the committed round 3's candidate outputs (the
  reference side of comparison B); it must score as round3-candidate's summary (HEAD's
  params.yaml is that round).
- every kept round of docs/rounds/index.yaml whose params take seeds of a side from a
  directory under data/runs/ (the whole side, or some seeds in the list form) must score,
  seed by seed, as the summary at that round's commit, and the directory at HEAD must hold
  the runs that commit used (the same files, the JSON-lines ones compared decompressed:
  runs kept before compression are plain files at their round's commit).
"""

import gzip
import json
import statistics
import subprocess
from pathlib import Path

import pytest
import yaml

from dreamer_parity import params as P
from dreamer_parity import manifest, records, rounds
from dreamer_parity.round_spec import Round

REPO = Path(__file__).resolve().parents[1]
SUMMARY = json.loads((REPO / "metrics" / "summary.json").read_text())
KEPT = REPO / "data" / "runs" / "round3-candidate"


def _git(*args) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True,
                          text=True).stdout


def _late_s1(run_dir: Path) -> tuple[float, float]:
    recs = records.read_records(run_dir)
    late = statistics.fmean(r["eval_mean"] for r in recs if 12000 <= r["rows"] <= 24000)
    s1 = statistics.fmean(r["eval_mean"] for r in recs if r["rows"] in (16000, 18000, 20000))
    return late, s1


def test_head_is_the_round_the_copy_came_from():
    assert SUMMARY["round"] == "round3-candidate"


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_kept_copy_scores_as_committed(seed):
    late, s1 = _late_s1(KEPT / f"s{seed}")
    assert late == pytest.approx(SUMMARY[f"LATE.candidate.s{seed}"], rel=1e-12)
    assert s1 == pytest.approx(SUMMARY[f"S1.candidate.s{seed}"], rel=1e-12)
    assert json.loads((KEPT / f"s{seed}" / "run.json").read_text())["config"]["agent"]["decode"] == "exact"


def test_kept_runs_hold_no_parameters():
    assert not list((REPO / "data" / "runs").rglob("params.npz"))


def _kept_run_sides():
    """(round, commit, side, directory, seeds) for every kept round and every directory
    under data/runs/ that gives seeds of one of its sides (whole side or list form)."""
    out = []
    for name, entry in rounds.load_index(REPO).items():
        raw = yaml.safe_load(_git("show", f"{entry['commit']}:params.yaml"))
        round_ = Round.from_params(P.validate(raw, where=f"{entry['commit'][:7]}:params.yaml"))
        for side in ("candidate", "reference"):
            if side not in raw:                 # older rounds have no candidate key
                continue
            by_dir: dict[str, list[int]] = {}
            for seed, src in round_.side(side).origins().items():
                by_dir.setdefault(src, []).append(seed)
            out += [(name, entry["commit"], side, src, seeds) for src, seeds in by_dir.items()
                    if src.startswith("data/runs/")]
    return out


KEPT_SIDES = _kept_run_sides()


def _files_at(rev: str, src: str) -> dict[str, bytes]:
    """``{path under src, without .gz: decompressed bytes}`` of the tree at ``rev``; the
    manifests left out (runs kept before manifests have none at their round's commit)."""
    out = {}
    for path in _git("ls-tree", "-r", "--name-only", rev, "--", src).split():
        if Path(path).name == manifest.NAME:
            continue
        data = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=REPO, check=True,
                              capture_output=True).stdout
        if path.endswith(records.GZ):
            path, data = path[:-len(records.GZ)], gzip.decompress(data)
        out[path] = data
    return out


def _assert_same_runs(commit: str, src: str, seeds) -> None:
    """The runs of ``seeds`` under ``src`` are byte-identical at ``commit`` and at HEAD (a
    kept-runs folder may gain seeds later; the runs a round read never change)."""
    for seed in seeds:
        run = f"{src}/s{seed}"
        then, now = _files_at(commit, run), _files_at("HEAD", run)
        assert then and then == now, f"{run}: differs between {commit[:12]} and HEAD"


def test_kept_runs_are_stored_compressed():
    """Every kept run's JSON-lines files are gzip files (keep writes them so)."""
    dirs = [d for d in (REPO / "data" / "runs").glob("*/s*") if d.is_dir()]
    assert len(dirs) >= 20
    for d in dirs:
        names = {p.name for p in d.iterdir()}
        assert {"records.jsonl.gz", "episodes.jsonl.gz", "run.json", "DONE.json",
                manifest.NAME} <= names, d
        assert not names & set(records.JSONL_FILES), d


def test_every_kept_run_and_published_directory_verifies_against_its_manifest():
    """Each kept run holds its MANIFEST.json (keep writes it; the runs kept before it got
    theirs from ``keep --add-manifest``), and so does each published directory."""
    dirs = [d for d in (REPO / "data" / "runs").glob("*/s*") if d.is_dir()]
    assert len(dirs) >= 20
    for d in dirs:
        assert manifest.verify(d, True, str(d.relative_to(REPO)))
        listed = json.loads((d / manifest.NAME).read_text())["files"]
        assert {"records.jsonl.gz", "episodes.jsonl.gz", "run.json", "DONE.json"} <= set(listed)
    pub = REPO / "data" / "published"
    for d in [pub, *sorted(pub.glob("round*"))]:
        assert manifest.verify(d, True, str(d.relative_to(REPO)))


def test_the_decode_ref_round_is_kept_from_data_runs():
    """The round of #38 is a kept round whose candidate side is its kept runs."""
    assert ("round3-candidate-ref", "candidate", "data/runs/round3-candidate-ref") in \
        {(n, side, src) for n, _, side, src, _ in KEPT_SIDES}


@pytest.mark.parametrize("name,commit,side,src,seeds", KEPT_SIDES,
                         ids=[f"{n}-{s}-{Path(d).name}" for n, _, s, d, _ in KEPT_SIDES])
def test_kept_round_scores_from_its_kept_runs(name, commit, side, src, seeds):
    _assert_same_runs(commit, src, seeds)
    summary = json.loads(_git("show", f"{commit}:metrics/summary.json"))
    assert seeds and all(f"LATE.{side}.s{seed}" in summary for seed in seeds)
    for seed in seeds:
        late, s1 = _late_s1(REPO / src / f"s{seed}")
        assert late == pytest.approx(summary[f"LATE.{side}.s{seed}"], rel=1e-12), (name, seed)
        assert s1 == pytest.approx(summary[f"S1.{side}.s{seed}"], rel=1e-12), (name, seed)

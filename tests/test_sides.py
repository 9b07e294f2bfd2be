"""The one resolver of the sides (dreamer_parity.sides): source forms, per-seed sources,
made_by, refusals, and the analysis reading sides from several places."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from dreamer_parity import params as P
from dreamer_parity import records, sides
from dreamer_parity.analysis import checks, compare
import synthetic  # tests/synthetic.py
from dreamer_parity.round_spec import Round

REPO = Path(__file__).resolve().parents[1]
ROUND3 = REPO / "data" / "published" / "round3"

SMALL = {"round": "t", "seeds": [0, 1, 2], "rows": 2400, "eval_every": 400,
         "eval_episodes": 2, "profile": "smoke",
         "stats": {"s1_rows": [1600, 2000, 2400], "late_rows": [1200, 2400],
                   "concordance_rows": [2000, 2400], "concordance_range": [1600, 2400]}}


def _validated(raw: dict, over: dict) -> dict:
    """``raw`` with dotted keys of ``over`` set, validated."""
    for key, v in over.items():
        node = raw
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = v
    return P.validate(raw)


def _small(**over) -> dict:
    """The validated params of :data:`SMALL` with dotted keys of ``over`` set."""
    return _validated(json.loads(json.dumps(SMALL)), over)


def _params(**over) -> Round:
    """The round of :data:`SMALL` with dotted keys of ``over`` set."""
    return Round.from_params(_small(**over))


def _round3(**over) -> Round:
    return Round.from_params(_validated(yaml.safe_load((REPO / "params.yaml").read_text()), over))


@pytest.fixture
def synthetic_root(tmp_path):
    """A repository-like root with a synthetic round under data/runs/t/{reference,candidate}."""
    synthetic.write_round(tmp_path / "data" / "runs" / "t", _small(), manifest=True)
    return tmp_path


# ------------------------------------------------------------------ resolution


def test_run_source_is_results_side_seed():
    s = sides.resolve(_params(), REPO)
    for side in ("reference", "candidate"):
        assert [(e.seed, e.source, e.run_dir, e.layout, e.made_by) for e in s[side].seeds] == [
            (k, "run", f"results/{side}/s{k}", "records", side) for k in (0, 1, 2)]
    assert _params().candidate.runs_here() == (0, 1, 2)


@pytest.mark.parametrize("src, run_dir", [
    ("data/published/round3/ajax", "data/published/round3/ajax/s{}"),
    ("data/published/round3", "data/published/round3/ajax/s{}"),  # the candidate side picks ajax
])
def test_published_candidate_source(src, run_dir):
    s = sides.resolve(_round3(**{"candidate.source": src}), REPO)
    cand = s["candidate"]
    assert [e.run_dir for e in cand.seeds] == [run_dir.format(k) for k in range(5)]
    assert {e.layout for e in cand.seeds} == {"published"}
    assert {e.made_by for e in cand.seeds} == {"candidate"}
    assert [e.run_dir for e in s["reference"].seeds] == [
        f"data/published/round3/ref_s{k}" for k in range(5)]
    assert {e.made_by for e in s["reference"].seeds} == {"reference"}
    assert _round3(**{"candidate.source": src}).candidate.runs_here() == ()


def test_records_directory_nested_by_side_and_made_by_from_run_json(synthetic_root):
    p = _params(**{"candidate.source": "data/runs/t"})
    cand = sides.resolve(p, synthetic_root)["candidate"]
    assert [e.run_dir for e in cand.seeds] == [f"data/runs/t/candidate/s{k}" for k in (0, 1, 2)]
    assert {e.made_by for e in cand.seeds} == {"candidate"}
    # the candidate's runs standing on the reference side keep made_by candidate
    p = _params(**{"reference.source": "data/runs/t/candidate"})
    ref = sides.resolve(p, synthetic_root)["reference"]
    assert [e.run_dir for e in ref.seeds] == [f"data/runs/t/candidate/s{k}" for k in (0, 1, 2)]
    assert {e.made_by for e in ref.seeds} == {"candidate"}


def test_mixed_sources_each_seed_once(synthetic_root):
    p = _params(**{"candidate.source": [{"from": "run", "seeds": [1]},
                                        {"from": "data/runs/t", "seeds": [2, 0]}]})
    assert p.candidate.origins() == {0: "data/runs/t", 1: "run", 2: "data/runs/t"}
    assert p.candidate.runs_here() == (1,)
    cand = sides.resolve(p, synthetic_root)["candidate"]
    assert [(e.seed, e.source, e.run_dir) for e in cand.seeds] == [
        (0, "data/runs/t", "data/runs/t/candidate/s0"), (1, "run", "results/candidate/s1"),
        (2, "data/runs/t", "data/runs/t/candidate/s2")]
    assert cand.sources == ["data/runs/t", "run"]


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize("value, message", [
    ([{"from": "run", "seeds": [0, 1]}, {"from": "data/x", "seeds": [1, 2]}],
     "params: candidate.source: seeds [1] listed more than once"),
    ([{"from": "run", "seeds": [0, 1]}], "params: candidate.source: round seeds [2] have no source"),
    ([{"from": "run", "seeds": [0, 1, 2, 7]}],
     "params: candidate.source: seeds [7] are not round seeds [0, 1, 2]"),
    ([{"from": "run"}], "params: candidate.source: entry 0: expected {from: run | <dir>, seeds: [..]}"),
    ([{"from": "run", "seeds": []}, {"from": "run", "seeds": [0, 1, 2]}],
     "params: candidate.source: entry 0: seeds: needs at least one seed"),
    ("../elsewhere", "params: candidate.source: '../elsewhere' leaves the repository"),
    ("/abs/runs", "params: candidate.source: '/abs/runs' is absolute"),
    ("", "params: candidate.source: must be 'run', a directory"),
    (3, "params: candidate.source: expected 'run', a directory or a list"),
])
def test_validate_refuses_bad_source_forms(value, message):
    with pytest.raises(P.ParamsError) as e:
        _params(**{"candidate.source": value})
    assert str(e.value).startswith(message), str(e.value)
    assert "\n" not in str(e.value)


def test_repo_path_refuses_a_symlink_out(tmp_path):
    root = tmp_path / "repo"
    (root / "data").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, root / "data" / "link")
    with pytest.raises(P.ParamsError, match=r"^params: reference.source: 'data/link' resolves "
                                            r"outside the repository"):
        sides.resolve(_params(**{"reference.source": "data/link"}), root)
    assert P.repo_path("reference.source", "data", root) == root / "data"


def test_missing_directory_and_missing_seed_name_the_key(synthetic_root):
    with pytest.raises(sides.SideError, match=r"^params: candidate.source: data/none is not a "
                                              r"directory"):
        sides.resolve(_params(**{"candidate.source": "data/none"}), synthetic_root)
    shutil.rmtree(synthetic_root / "data/runs/t/candidate/s2")
    with pytest.raises(sides.SideError, match=r"^params: candidate.source: data/runs/t has no run "
                                              r"of seed 2 "):
        sides.resolve(_params(**{"candidate.source": "data/runs/t"}), synthetic_root)


def test_run_json_must_say_who_made_the_run(synthetic_root):
    run_json = synthetic_root / "data/runs/t/candidate/s1/run.json"
    info = json.loads(run_json.read_text())
    info["side"] = "ajax"
    run_json.write_text(json.dumps(info))
    # the kept run changed after it was kept: its manifest refuses it first
    with pytest.raises(records.RecordError, match=r"^data/runs/t/candidate/s1/run\.json: its "
                                                  r"SHA-256 is not the one .*MANIFEST\.json"):
        sides.resolve(_params(**{"candidate.source": "data/runs/t"}), synthetic_root)
    synthetic.reseal(run_json.parent)    # resealed: the reader behind it refuses it too
    with pytest.raises(records.RecordError, match=r"s1/run.json: field 'side' must be one of"):
        sides.resolve(_params(**{"candidate.source": "data/runs/t"}), synthetic_root)
    del info["side"]
    run_json.write_text(json.dumps(info))
    synthetic.reseal(run_json.parent)
    with pytest.raises(sides.SideError, match=r"^params: candidate.source: .*s1/run.json: field "
                                              r"'side' must be one of .*got None"):
        sides.resolve(_params(**{"candidate.source": "data/runs/t"}), synthetic_root)
    run_json.unlink()
    synthetic.reseal(run_json.parent)
    with pytest.raises(sides.SideError, match=r"s1/run.json: missing"):
        sides.resolve(_params(**{"candidate.source": "data/runs/t"}), synthetic_root)


def test_a_kept_run_without_its_manifest_is_refused(synthetic_root):
    (synthetic_root / "data/runs/t/candidate/s2/MANIFEST.json").unlink()
    with pytest.raises(records.RecordError, match=r"^data/runs/t/candidate/s2/MANIFEST\.json: "
                                                  r"missing; every file a round reads"):
        sides.resolve(_params(**{"candidate.source": "data/runs/t"}), synthetic_root)
    # read from a command line's directory, the same run needs none
    side = sides.side_from_dir(synthetic_root / "data/runs/t/candidate", "candidate", [2])
    assert side.seeds[0].layout == "records"


# ------------------------------------------------------------------ through the analysis


def test_analysis_reads_mixed_sources_and_records_them(synthetic_root, monkeypatch):
    """Reference seeds from two directories; the result equals the one-directory analysis."""
    monkeypatch.chdir(synthetic_root)
    split = synthetic_root / "data" / "runs" / "split"
    split.mkdir()
    shutil.move(synthetic_root / "data/runs/t/reference/s2", split / "s2")
    p = _params(**{"reference.source": [{"from": "data/runs/t/reference", "seeds": [0, 1]},
                                        {"from": "data/runs/split", "seeds": [2]}],
                   "candidate.source": "data/runs/t"})
    res = compare.analyse(p, *[sides.resolve(p, ".")[k] for k in ("reference", "candidate")])
    assert res["sides"]["reference"]["layout"] == "records"
    assert res["sides"]["reference"]["dir"] == "data/runs/t/reference; data/runs/split"
    shutil.move(split / "s2", synthetic_root / "data/runs/t/reference/s2")
    whole = compare.analyse(p, "data/runs/t/reference", "data/runs/t/candidate")
    for key in ("s1", "late"):
        assert res[key]["decision"] == whole[key]["decision"]
    from dreamer_parity.analysis import metrics_out
    keys = metrics_out.source_keys(res)
    assert keys["source.reference.s2"] == "data/runs/split"
    assert keys["source.reference.s0"] == "data/runs/t/reference"
    assert keys["made_by.reference.s2"] == "reference"


def test_checks_judge_a_run_by_who_made_it(synthetic_root, monkeypatch):
    """The candidate's runs standing on the reference side get the candidate's checks."""
    monkeypatch.chdir(synthetic_root)
    # reference.decode as the candidate's runs record it: a run recorded with another
    # protocol than the round's is refused (records.check_run_agrees), not scored
    p = _params(**{"reference.source": "data/runs/t/candidate",
                   "candidate.source": "data/runs/t/candidate", "reference.decode": "exact"})
    r = sides.resolve(p, ".")
    res = compare.analyse(p, r["reference"], r["candidate"])
    ref_runs = res["sides"]["reference"]["runs"]
    assert {run.side for run in ref_runs} == {"reference"}
    assert {run.made_by for run in ref_runs} == {"candidate"}
    prov = [c for c in res["checks"] if c.name == "provenance" and c.side == "reference"]
    assert len(prov) == 3 and all("candidate at" in c.detail for c in prov), prov
    # the same runs with the reference's checks would need a reference commit
    for run in ref_runs:
        run.made_by = "reference"
    again = checks.run_checks(p, ref_runs, res["sides"]["candidate"]["runs"])
    prov = [c for c in again if c.name == "provenance" and c.side == "reference"]
    assert len(prov) == 3 and all(c.status == "FAIL" and "reference commit" in c.detail
                                  for c in prov), prov
    # the round's own reference decode would be another protocol than the runs recorded
    p_ref = _params(**{"reference.source": "data/runs/t/candidate",
                       "candidate.source": "data/runs/t/candidate"})
    with pytest.raises(records.RecordError, match=r"s0/run\.json: decode 'exact' != 'ref'"):
        compare.analyse(p_ref, r["reference"], r["candidate"])


def test_stand_in_marker_is_not_a_run(tmp_path):
    path = sides.write_stand_in(tmp_path / "s3", "candidate", 3, "data/published/round3/ajax")
    marker = json.loads(path.read_text())
    assert marker["side"] == "candidate" and marker["seed"] == 3
    assert marker["source"] == "data/published/round3/ajax"
    assert sorted(x.name for x in path.parent.iterdir()) == ["STAND_IN.json"]


def test_study_candidate_as_the_candidate_side_gives_the_studys_analysis():
    """candidate.source: data/published/round3/ajax reproduces the study's analysis3.json."""
    p = _round3(**{"candidate.source": "data/published/round3/ajax"})
    r = sides.resolve(p, REPO)
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        res = compare.analyse(p, r["reference"], r["candidate"])
    finally:
        os.chdir(cwd)
    pub = json.loads((ROUND3 / "analysis3.json").read_text())
    import numpy as np
    np.testing.assert_allclose(res["late"]["values"]["candidate"], pub["late_ajax"], rtol=0, atol=1e-9)
    np.testing.assert_allclose(res["late"]["values"]["reference"], pub["late_ref"], rtol=0, atol=1e-9)
    np.testing.assert_allclose(res["s1"]["values"]["candidate"], pub["s1_ajax"], rtol=0, atol=1e-9)
    assert res["late"]["decision"]["welch"]["p"] == pytest.approx(pub["p_late"], rel=1e-12)
    assert res["reading"]["reading"] == "H2 or noise"
    assert {run.made_by for run in res["sides"]["candidate"]["runs"]} == {"candidate"}


def test_candidate_stage_writes_stand_ins_and_runs_nothing(synthetic_root, monkeypatch, capsys):
    """A candidate side from elsewhere: the stage's runner writes markers, no run, exit 0;
    a source that is not there is refused in one line, and nothing is written."""
    from dreamer_parity.candidate.runtime import run as cand_run

    monkeypatch.chdir(synthetic_root)
    raw = json.loads(json.dumps(SMALL))
    args = ["--params", "params.yaml", "--out", "out", "--work-dir", "work"]
    raw["candidate"] = {"source": "data/elsewhere"}
    synthetic.write_params(synthetic_root / "params.yaml", raw)
    assert cand_run.main(args) == 2
    assert capsys.readouterr().err.strip() == (
        "error: params: candidate.source: data/elsewhere is not a directory (the published "
        "rounds are data/published/round1, round2 and round3), or set candidate.source: run")
    assert not (synthetic_root / "out").exists()
    raw["candidate"] = {"source": "data/runs/t"}
    synthetic.write_params(synthetic_root / "params.yaml", raw)
    assert cand_run.main(args) == 0
    for s in SMALL["seeds"]:
        d = synthetic_root / "out" / "candidate" / f"s{s}"
        assert sorted(x.name for x in d.iterdir()) == ["STAND_IN.json"]
        marker = json.loads((d / "STAND_IN.json").read_text())
        assert (marker["source"], marker["seed"], "named" in marker) == ("data/runs/t", s, False)
    assert not (synthetic_root / "work").exists()


def test_a_stand_in_names_the_kept_runs_that_stand_in(tmp_path, monkeypatch, capsys):
    """``-S decode=ref`` with a candidate source made with ``decode: exact``: the stage's
    marker and line name the kept ``decode: ref`` runs that compare reads, and the source
    params.yaml names."""
    from dreamer_parity.candidate.runtime import run as cand_run

    root = _kept_tree(tmp_path, {"exact": "round3-candidate", "ref": "round3-candidate-ref"})
    monkeypatch.chdir(root)
    shutil.copy(REPO / "params.yaml", root / "params.yaml")
    assert cand_run.main(["--params", "params.yaml", "--out", "out", "--work-dir", "work",
                          "--set", "seeds=[0]", "--set", "decode=ref",
                          "--set", "candidate.source=data/runs/exact"]) == 0
    marker = json.loads((root / "out" / "candidate" / "s0" / "STAND_IN.json").read_text())
    assert (marker["source"], marker["named"]) == ("data/runs/ref", "data/runs/exact")
    assert capsys.readouterr().err.strip().endswith(
        "candidate.source: seed 0 comes from data/runs/ref in place of data/runs/exact, whose "
        "runs were made with other parameters than the round's; nothing runs here")


def _set_backend(run_dir: Path, platform: str, precision) -> None:
    """Record a jax backend in a synthetic run's run.json (DONE.json rewritten to name it)."""
    info = json.loads((run_dir / "run.json").read_text())
    info["provenance"]["backend"] = {"platform": platform, "devices": 1,
                                     "device_kind": "TPU v5 lite" if platform == "tpu" else "cpu",
                                     "matmul_precision": precision}
    records.write_json(run_dir / "run.json", info)
    records.write_done(run_dir, "ok")
    if (run_dir / "MANIFEST.json").exists():   # a kept run: its manifest names the new files
        synthetic.reseal(run_dir)


def test_platform_and_precision_per_seed_and_per_side_part(synthetic_root, monkeypatch):
    """Each seed's platform and precision come from its run.json (provenance.backend), a
    side pooled from several shows each part (summary keys and the report's source
    table), and a run recording no backend is `unknown`."""
    monkeypatch.chdir(synthetic_root)
    ref = synthetic_root / "data/runs/t/reference"
    _set_backend(ref / "s0", "cpu", None)
    _set_backend(ref / "s1", "cpu", None)
    _set_backend(ref / "s2", "tpu", "highest")
    p = _params(**{"reference.source": "data/runs/t/reference",
                   "candidate.source": "data/runs/t/candidate"})
    res = compare.analyse(p, *[sides.resolve(p, ".")[k] for k in ("reference", "candidate")])
    from dreamer_parity.analysis import metrics_out, report
    keys = metrics_out.source_keys(res)
    assert [keys[f"platform.reference.s{s}"] for s in (0, 1, 2)] == ["cpu", "cpu", "tpu"]
    assert [keys[f"precision.reference.s{s}"] for s in (0, 1, 2)] == [
        "default", "default", "highest"]
    assert keys["platform.reference"] == "cpu/default (s0-1); tpu/highest (s2)"
    # the synthetic candidate records no backend: as a published run, unknown
    assert keys["platform.candidate.s0"] == "unknown" == keys["precision.candidate.s0"]
    assert keys["platform.candidate"] == "unknown/unknown (s0-2)"
    assert {k: v for k, v in metrics_out.summary(res).items() if k.startswith("platform.")} \
        == {k: v for k, v in keys.items() if k.startswith("platform.")}
    text = report.render(res)
    assert "| side | seed | source | run directory | layout | made by | platform | precision |" \
        in text
    assert ("| reference | 2 | `data/runs/t/reference` | `data/runs/t/reference/s2` | records | "
            "reference | tpu | highest |") in text
    assert ("* Reference side: cpu/default (s0-1); tpu/highest (s2) (pooled from 2 "
            "platform/precision parts).") in text
    assert "* Candidate side: unknown/unknown (s0-2)." in text


def test_published_runs_are_of_unknown_platform():
    from dreamer_parity.analysis import load, runs
    run = load.load_side(ROUND3, "reference", [0])[0]
    assert runs.execution(run) == {"platform": "unknown", "precision": "unknown"}


# ------------------------------------------------------------------ sides of unequal size

UNEQUAL = {"seeds": [0, 1, 2, 3], "candidate.seeds": [6, 5, 4, 3, 2, 1, 0]}


@pytest.fixture
def unequal_root(tmp_path):
    """A repository-like root with a synthetic round of 4 reference and 7 candidate seeds
    under data/runs/t/{reference,candidate}."""
    synthetic.write_round(tmp_path / "data" / "runs" / "t", _small(**UNEQUAL), manifest=True)
    return tmp_path


def test_each_side_resolves_its_own_seeds(unequal_root):
    """candidate.seeds gives the candidate 7 seeds against the round's 4 (the reference's);
    every reader of the sides (origins, runs_here, resolve) takes them from the round
    (round_spec.RoundSide.seeds)."""
    p = _params(**UNEQUAL)
    assert p.candidate.origins() == {s: "run" for s in range(7)}
    assert p.reference.origins() == {s: "run" for s in range(4)}
    assert p.candidate.runs_here() == tuple(range(7))
    r = sides.resolve(p, REPO)
    assert [e.seed for e in r["candidate"].seeds] == list(range(7))
    assert [e.seed for e in r["reference"].seeds] == list(range(4))
    # a directory source must hold every seed of its side, and only those are looked for
    q = _params(**UNEQUAL, **{"candidate.source": "data/runs/t/candidate",
                              "reference.source": "data/runs/t/reference"})
    r = sides.resolve(q, unequal_root)
    assert [e.run_dir for e in r["candidate"].seeds] == [f"data/runs/t/candidate/s{k}"
                                                         for k in range(7)]
    assert [e.seed for e in r["reference"].seeds] == [0, 1, 2, 3]
    with pytest.raises(sides.SideError, match=r"data/runs/t/reference has no run of seed 4"):
        sides.resolve(_params(**{"seeds": [0, 1, 2, 3, 4],
                                 "reference.source": "data/runs/t/reference"}), unequal_root)


def test_candidate_stage_takes_the_candidates_own_seeds(unequal_root, monkeypatch):
    """The candidate stage's runner writes a stand-in for each candidate seed (7), none
    for a seed of the reference side only."""
    from dreamer_parity.candidate.runtime import run as cand_run

    monkeypatch.chdir(unequal_root)
    raw = json.loads(json.dumps(SMALL))
    raw["seeds"] = [0, 1, 8]
    raw["candidate"] = {"source": "data/runs/t/candidate", "seeds": [6, 5, 4, 3, 2, 1, 0]}
    synthetic.write_params(unequal_root / "params.yaml", raw)
    rc = cand_run.main(["--params", "params.yaml", "--out", "out", "--work-dir", "work"])
    assert rc == 0
    assert sorted(d.name for d in (unequal_root / "out" / "candidate").iterdir()) == \
        [f"s{k}" for k in range(7)]


def test_reference_stage_refuses_a_seed_of_the_candidate_only(tmp_path, monkeypatch, capsys):
    from dreamer_parity import pipeline

    raw = json.loads(json.dumps(SMALL))
    raw["candidate"] = {"source": "run", "seeds": [0, 1, 2, 5]}
    raw["reference"] = {"source": "data/runs/t"}
    synthetic.write_round(tmp_path / "data" / "runs" / "t", _small(), manifest=True)
    synthetic.write_params(tmp_path / "params.yaml", raw)
    monkeypatch.chdir(tmp_path)
    assert pipeline.main(["reference", "--seed", "5", "--out", "results/reference/s5"]) == 2
    assert capsys.readouterr().err.strip() == \
        "error: params: seeds: seed 5 is not a reference seed [0, 1, 2]"
    assert not (tmp_path / "results").exists()
    assert pipeline.main(["reference", "--seed", "2", "--out", "results/reference/s2"]) == 0
    marker = json.loads((tmp_path / "results/reference/s2/STAND_IN.json").read_text())
    assert (marker["seed"], marker["source"]) == (2, "data/runs/t")


def test_platform_parts_of_a_pooled_side_with_unequal_seed_lists(unequal_root, monkeypatch):
    """A candidate side of 7 seeds pooled from two sources and two platforms (CPU seeds 0-3
    kept in one directory, TPU seeds 4-6 in another) against 4 reference seeds: each seed's
    platform and precision, the side's parts and both seed sets in the summary and the
    report."""
    monkeypatch.chdir(unequal_root)
    tpu = unequal_root / "data/runs/tpu"
    for s in (4, 5, 6):
        shutil.move(unequal_root / "data/runs/t/candidate" / f"s{s}", tpu / f"s{s}")
        _set_backend(tpu / f"s{s}", "tpu", "highest")
    for s in (0, 1, 2, 3):
        _set_backend(unequal_root / "data/runs/t/candidate" / f"s{s}", "cpu", None)
    q = _params(**UNEQUAL, **{"reference.source": "data/runs/t/reference",
                              "candidate.source": [{"from": "data/runs/t/candidate",
                                                    "seeds": [0, 1, 2, 3]},
                                                   {"from": "data/runs/tpu", "seeds": [4, 5, 6]}]})
    r = sides.resolve(q, ".")
    res = compare.analyse(q, r["reference"], r["candidate"])
    from dreamer_parity.analysis import metrics_out, report
    s = metrics_out.summary(res)
    assert [s[f"platform.candidate.s{k}"] for k in range(7)] == ["cpu"] * 4 + ["tpu"] * 3
    assert [s[f"precision.candidate.s{k}"] for k in range(7)] == ["default"] * 4 + ["highest"] * 3
    assert s["platform.candidate"] == "cpu/default (s0-3); tpu/highest (s4-6)"
    assert s["platform.reference"] == "unknown/unknown (s0-3)"
    assert "platform.reference.s4" not in s and "source.reference.s4" not in s
    assert s["source.candidate.s5"] == "data/runs/tpu" and s["source.candidate.s0"] == \
        "data/runs/t/candidate"
    text = report.render(res)
    assert "* Seeds of each side: reference 0-3 (4 seeds), candidate 0-6 (7 seeds); " in text
    assert ("* Candidate side: cpu/default (s0-3); tpu/highest (s4-6) (pooled from 2 "
            "platform/precision parts).") in text
    assert ("| candidate | 6 | `data/runs/tpu` | `data/runs/tpu/s6` | records | candidate | tpu "
            "| highest |") in text
    assert "| reference | 4 |" not in text
    # the halves check of the pooled side: 4 seeds against 3, each source its own mean
    assert s["halves.candidate.sources"] == "data/runs/t/candidate: 0,1,2,3; data/runs/tpu: 4,5,6"
    assert "halves.reference.sources" not in s


# --- kept runs made with the round's parameters (sides.resolve, matching_kept_runs) --------

def _round3_params(**over) -> Round:
    """The round of params.yaml (round 3, decode exact) with dotted keys of ``over`` set,
    seed 0 only."""
    return _round3(**{"seeds": [0], **over})


def _kept_tree(tmp_path: Path, names: dict[str, str]) -> Path:
    """A root whose data/runs/<name>/s0 is a copy of data/runs/<source>/s0 (and the
    published round 3, the reference side)."""
    root = tmp_path / "repo"
    shutil.copytree(ROUND3, root / "data" / "published" / "round3")
    for name, source in names.items():
        shutil.copytree(REPO / "data" / "runs" / source / "s0", root / "data" / "runs" / name / "s0")
    return root


def test_a_directory_of_runs_made_otherwise_gives_way_to_the_matching_kept_runs(tmp_path):
    root = _kept_tree(tmp_path, {"exact": "round3-candidate", "ref": "round3-candidate-ref"})
    named = {"candidate.source": "data/runs/exact"}
    cand = sides.resolve(_round3_params(**named), root)["candidate"].by_seed(0)
    assert (cand.source, cand.run_dir) == ("data/runs/exact", "data/runs/exact/s0")
    cand = sides.resolve(_round3_params(decode="ref", **named), root)["candidate"].by_seed(0)
    assert (cand.source, cand.run_dir) == ("data/runs/ref", "data/runs/ref/s0")
    assert sides.matching_kept_runs(_round3_params(decode="ref"), "candidate", [0], root) \
        == ["data/runs/ref"]


def test_no_or_several_matching_kept_runs_stop_in_one_line_with_the_two_ways_on(tmp_path):
    from dreamer_parity import preflight

    root = _kept_tree(tmp_path, {"exact": "round3-candidate", "ref": "round3-candidate-ref",
                                 "ref2": "round3-candidate-ref"})
    named = {"candidate.source": "data/runs/exact"}
    p = _round3_params(eval_episodes=5, **named)
    resolved = sides.resolve(p, root)                # no match: the named runs stay
    assert resolved["candidate"].by_seed(0).source == "data/runs/exact"
    with pytest.raises(preflight.PreflightError) as e:
        preflight.check_runs(p, resolved, root)
    msg = str(e.value)
    assert "\n" not in msg and msg.endswith(
                  "data/runs/exact/s0/run.json: eval_episodes 10 != 5: the run was made with "
                   "other parameters than the round's; no kept runs under data/runs/ were made "
                   "with the round's parameters: run them here (-S candidate.source=run) or "
                   "name kept runs made with them (-S candidate.source=<dir>)")
    p = _round3_params(decode="ref", **named)
    resolved = sides.resolve(p, root)                # two matches: the named runs stay
    with pytest.raises(preflight.PreflightError, match=r"several kept runs under data/runs/ "
                       r"were made with the round's parameters \(data/runs/ref, "
                       r"data/runs/ref2\): name one \(-S candidate.source=<dir>\)$"):
        preflight.check_runs(p, resolved, root)


def test_reference_runs_match_on_jax_platform_and_precision_too():
    run = REPO / "data" / "runs" / "round3-ref-tpu" / "s0"       # jax 0.10.2, tpu, highest
    p = _round3_params()
    assert sides.disagreements(run, p, "reference", 0, "reference") == [
        "reference.jax '0.10.2' != '0.4.26'", "reference.platform 'tpu' != 'cpu'",
        "reference.precision 'highest' != 'default'"]
    tpu = _round3_params(**{"reference.jax": "0.10.2", "reference.platform": "tpu",
                            "reference.precision": "highest"})
    assert sides.disagreements(run, tpu, "reference", 0, "reference") == []
    cpu = REPO / "data" / "runs" / "round3-10seeds-reference" / "s5"   # records none: 0.4.26
    assert sides.disagreements(cpu, _round3_params(seeds=[5]), "reference", 5, "reference") == []


def test_kept_seeds_are_every_kept_run_of_the_side_once(tmp_path):
    base = tmp_path / sides.KEPT_RUNS
    for name, side, seed in (("a", "candidate", 3), ("a", "candidate", 12), ("b", "candidate", 3),
                             ("b", "reference", 40), ("c", "candidate", 7)):
        (base / name / f"s{seed}").mkdir(parents=True)
        (base / name / f"s{seed}" / "run.json").write_text(json.dumps({"side": side, "seed": seed}))
    (base / "c" / "s9").mkdir()                     # a directory without run.json: no run
    assert sides.kept_seeds("candidate", tmp_path) == [3, 7, 12]
    assert sides.kept_seeds("reference", tmp_path) == [40]
    assert sides.kept_seeds("candidate", tmp_path / "nothing") == []
    (base / "c" / "s9" / "run.json").write_text(json.dumps({"side": "candidate", "seed": 8}))
    with pytest.raises(sides.SideError, match=r"^data/runs/c/s9/run.json: seed 8 is not the one "
                                              r"its directory names \(s9\)$"):
        sides.kept_seeds("candidate", tmp_path)
    (base / "c" / "s9" / "run.json").write_text("{")
    with pytest.raises(sides.SideError, match=r"^data/runs/c/s9/run.json"):
        sides.kept_seeds("candidate", tmp_path)
    # this repository: candidate seeds 0-9 on the CPU and 10-65 on a TPU v5e are kept
    assert set(range(66)) <= set(sides.kept_seeds("candidate", REPO))

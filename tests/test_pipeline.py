"""The DVC pipeline's mechanics (dvc.yaml, dreamer_parity.pipeline), without the models.

The stage graph, the parameters each stage declares, what `dvc exp run -S` reruns, the
preflight errors, the published stand-in and failure handling are checked in temporary
clones whose components are replaced by tiny stand-ins (files written over
``src/dreamer_parity/...`` in the clone only): the same dvc.yaml and the same glue, each
command taking well under a second.  The real end-to-end run is test_pipeline_e2e.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from dreamer_parity import params as P
from dreamer_parity import preflight as pf
from dreamer_parity import records
import synthetic  # tests/synthetic.py

from pipeline_helpers import (REPO, dvc, git, lock_stage, make_clone, ran_stages,
                              set_params, tree_digest)


DVC_YAML = yaml.safe_load((REPO / "dvc.yaml").read_text())
STAGES = DVC_YAML["stages"]

# ---------------------------------------------------------------------------------------
# Stand-in components.  They read params through the real loader and write the declared
# files; the values they write depend on exactly the parameters their stage declares.

STUB_PORT = '''
import argparse
from dreamer_parity import records as R
ap = argparse.ArgumentParser(); ap.add_argument("--out"); a = ap.parse_args()
R.write_json(a.out, {"passed": True})
'''

RECORD = '''
def record(side, seed, rows, val_std):
    return {"side": side, "seed": seed, "rows": rows, "updates": 1, "eval_returns": [9.0],
            "eval_lengths": [9], "eval_mean": 9.0, "eval_len_mean": 9.0,
            "train": {"val/std": val_std}, "train_counts": {"val/std": 1}, "retnorm": None,
            "status": "ok"}
'''

STUB_LAUNCH = RECORD + '''
import os, sys
from pathlib import Path
from dreamer_parity import records as R


def launch(round_, seed, out_dir, root=None):
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if os.environ.get("STUB_FAIL_SEED") == str(seed):
        (out / "records.jsonl").write_text("{}\\n")
        print("stub reference: failing midway on purpose", file=sys.stderr)
        return 1
    rows = round_.protocol.rows
    R.write_json(out / "run.json", {"side": "reference", "seed": seed,
                                    "decode": round_.reference.decode,
                                    "sampler": round_.reference_run.sampler, "rows": rows})
    v = 0.08 if round_.reference.decode == "ref" else 0.01
    R.write_jsonl(out / "records.jsonl", [record("reference", seed, rows, v)])
    R.write_done(out)
    return 0
'''

STUB_CANDIDATE = RECORD + '''
import argparse
from pathlib import Path
from dreamer_parity import params as P, records as R
ap = argparse.ArgumentParser(); ap.add_argument("--params"); ap.add_argument("--out")
a = ap.parse_args(); r = P.load_round(a.params)
for s in r.candidate.seeds:
    out = R.run_dir(a.out, "candidate", s)
    R.write_json(out / "run.json", {"side": "candidate", "seed": s, "decode": r.candidate.decode,
                                    "rows": r.protocol.rows})
    v = 0.02 if r.candidate.decode == "exact" else 0.07
    R.write_jsonl(out / "records.jsonl", [record("candidate", s, r.protocol.rows, v)])
    R.write_jsonl(out / "episodes.jsonl", [])
    R.write_done(out)
'''

STUB_COMPARE = '''
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from dreamer_parity import records as R, sides
from dreamer_parity.analysis.last_window import last_window_metrics


def _runs(side):
    out = []
    for e in side.seeds:
        train = None
        if e.layout == "records":
            recs = R.read_records(e.run_dir)
            train = pd.DataFrame([r["train"] for r in recs], index=[r["rows"] for r in recs],
                                 dtype=float)
        out.append(SimpleNamespace(seed=e.seed, train=train))
    return out


def run_round(round_, root=".", metrics_dir="metrics", plots_dir="metrics/plots",
              report="results/report.md", prereg=None, reference=None, candidate=None):
    resolved = sides.resolve(round_, root)
    exact = round_.candidate.decode == "exact"
    R.write_json(Path(metrics_dir) / "summary.json", {
        "candidate": {"last_val_std": 1.0 if exact else 2.0},
        "reference": {"last_val_std": 3.0 if round_.reference.decode == "ref" else 4.0},
        "good_return": round_.stats.good_return})
    R.write_json(Path(metrics_dir) / "train_last_window.json", last_window_metrics(
        round_, {k: {"runs": _runs(v)} for k, v in resolved.items()}))
    pl = Path(plots_dir); pl.mkdir(parents=True, exist_ok=True)
    for n in ("eval_curve.csv", "entropy_windows.csv", "eval_curves.png", "s2_curve.png",
              "entropy_windows.png", "iqm.png", "performance_profile.png", "windows.png",
              "windows/candidate_val_std.csv"):
        (pl / n).parent.mkdir(parents=True, exist_ok=True)
        (pl / n).write_text(n)
    R.write_json(Path(metrics_dir) / "windows.json", {"round": round_.name})
    R.write_json(Path(metrics_dir) / "headline.json", {"candidate.mean": 1.0 if exact else 2.0})
    ref = "; ".join(resolved["reference"].sources)
    Path(report).write_text(f"reference {ref}\\nprereg {prereg}\\n")
    return 0
'''

STUBS = {
    "src/dreamer_parity/port_check.py": STUB_PORT,
    "src/dreamer_parity/reference/launch.py": STUB_LAUNCH,
    "src/dreamer_parity/candidate/runtime/run.py": STUB_CANDIDATE,
    "src/dreamer_parity/analysis/compare.py": STUB_COMPARE,
}

# The stand-in round runs the reference stage without the reference set-up (CI has no
# reference checkout): preflight's set-up check is stood in for as well.  The real check is
# exercised by test_preflight_reports_a_missing_reference_setup and the bad-input tests.
STUB_SETUP = '''
class SetupError(Exception):
    """Stand-in of dreamer_parity.reference.setup.SetupError."""


def check_setup(root=None, check_packages=True, jax="0.4.26"):
    """Stand-in: the set-up is taken as present."""
    return {"checkout": "stand-in", "venv": "stand-in"}
'''

STUBS_NO_SETUP = {**STUBS, "src/dreamer_parity/reference/setup.py": STUB_SETUP}

SMALL = {"seeds": [0, 1], "round": "smoke"}


# ---------------------------------------------------------------------------------------
# dvc.yaml as written


def _params(stage):
    out = []
    for p in stage.get("params", []):
        out += list(p) if isinstance(p, dict) else [p]
    return out


def test_stage_parameters_are_exactly_what_each_side_reads():
    ref, cand, comp = STAGES["reference"]["do"], STAGES["candidate"], STAGES["compare"]
    assert "learning_check" not in STAGES   # a round's gate is compare's (params gate.*)
    assert STAGES["reference"]["foreach"] == "${seeds}"
    assert sorted(_params(ref)) == sorted(["profile", "rows", "eval_every", "eval_episodes",
                                           "reference.decode", "reference.sampler",
                                           "reference.jax", "reference.platform",
                                           "reference.precision", "reference.source"])
    assert "requirements-reference-jax010.lock" in ref["deps"]
    assert sorted(_params(cand)) == sorted(["decode", "profile", "seeds", "rows", "eval_every",
                                            "eval_episodes", "candidate.source",
                                            "candidate.seeds"])
    assert {"round", "decode", "reference", "candidate", "stats", "gate", "seeds",
            "rows"} <= set(_params(comp))
    assert _params(STAGES["preflight"]) == ["params.yaml"]  # the whole file
    # every key of the schema is read by some stage besides preflight
    declared = set(_params(ref)) | set(_params(cand)) | set(_params(comp))
    for key in P.SCHEMA:
        assert key in declared or key.split(".")[0] in declared, key


def test_every_stage_waits_for_preflight_and_metrics_live_in_git():
    for name, st in STAGES.items():
        if name == "preflight":
            continue
        body = st.get("do", st)
        assert "results/preflight.ok" in body["deps"], name
        assert body["cmd"].startswith("PYTHONPATH=src python -m dreamer_parity."), name
    for name in ("port_check", "compare"):
        for o in STAGES[name].get("metrics", []) + STAGES[name]["outs"]:
            (path, opts), = o.items()
            assert opts == {"cache": False}, path
    # the DVC metrics are the headline only; the rest are plain git-tracked outputs
    assert STAGES["compare"]["metrics"] == [{"metrics/headline.json": {"cache": False}}]
    assert "metrics" not in STAGES["port_check"]
    # run outputs are cached (no options), so they go to the remote with dvc push
    assert STAGES["candidate"]["outs"] == ["results/candidate"]
    assert STAGES["reference"]["do"]["outs"] == ["results/reference/s${item}"]


def test_make_run_restores_before_it_recomputes():
    """`make run` is `dvc repro --pull`; `make run FORCE=1` is `dvc repro -f`."""
    import subprocess

    def dry(*args):
        out = subprocess.run(["make", "-n", "run", *args], cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, check=True).stdout
        return [x for x in out.splitlines() if "dvc repro" in x]

    assert len(dry()) == 1 and dry()[0].endswith("dvc repro --pull")
    assert len(dry("FORCE=1")) == 1 and dry("FORCE=1")[0].endswith("dvc repro -f")


def test_stage_list_expands_one_reference_stage_per_seed():
    out = dvc(REPO, "stage", "list", "--name-only").stdout.split()
    seeds = P.load(REPO / "params.yaml")["seeds"]
    assert out == ["preflight", "port_check", *[f"reference@{s}" for s in seeds],
                   "candidate", "compare"]


# ---------------------------------------------------------------------------------------
# preflight, as a function


def _write_params(tmp_path, **flat):
    """Round 1's complete params file with ``flat`` (dotted keys) set."""
    (tmp_path / "params.yaml").write_text(synthetic.params_text(flat))
    (tmp_path / "docs" / "rounds").mkdir(parents=True, exist_ok=True)
    (tmp_path / "docs" / "rounds" / "round1.md").write_text("# round 1\n")


@pytest.mark.parametrize("flat, message", [
    ({"decode": "foo"}, "params: decode: unknown value 'foo'; expected one of exact, ref"),
    ({"seeds": [0, 0, 1]}, "params: seeds: duplicate seeds [0]"),
    ({"rows": 20100}, "params: eval_every: 2000 does not divide rows=20100"),
    ({"round": "round9"}, "params: round: no pre-registration docs/rounds/round9.md"),
    ({"reference.source": "/abs/published"}, "params: reference.source: '/abs/published' is absolute"),
    ({"reference.source": "data/nothing"}, "params: reference.source: data/nothing is not a directory"),
])
def test_preflight_names_the_bad_parameter(tmp_path, flat, message):
    _write_params(tmp_path, **flat)
    with pytest.raises(pf.PreflightError) as e:
        pf.preflight(root=tmp_path)
    assert str(e.value).startswith(message)
    assert "\n" not in str(e.value)


def test_preflight_reports_a_missing_reference_setup(tmp_path, monkeypatch):
    _write_params(tmp_path)
    monkeypatch.setenv("DREAMER_PARITY_REF_ROOT", str(tmp_path / "no-setup"))
    with pytest.raises(pf.PreflightError) as e:
        pf.preflight(root=tmp_path)
    assert str(e.value).startswith("reference set-up: ")
    assert "make reference-setup" in str(e.value)


def test_preflight_checks_the_published_seeds(tmp_path):
    pub = tmp_path / "data" / "published" / "round1"
    for s in (0, 1):
        (pub / f"ref_s{s}").mkdir(parents=True)
        (pub / f"ref_s{s}" / "evals.jsonl").write_text("{}\n")
    synthetic.reseal(pub)     # the study's files come with their manifest
    _write_params(tmp_path, **{"reference.source": "data/published/round1"})
    with pytest.raises(pf.PreflightError, match=r"^params: reference.source: "
                                                  r"data/published/round1 has no run of seed 2 "):
        pf.preflight(root=tmp_path)
    _write_params(tmp_path, **{"reference.source": "data/published/round1", "seeds": [0, 1]})
    round_ = pf.preflight(root=tmp_path)
    assert round_.reference.seeds == (0, 1)
    ref = pf.check(round_, tmp_path)["reference"]
    assert [e.run_dir for e in ref.seeds] == ["data/published/round1/ref_s0",
                                              "data/published/round1/ref_s1"]


# ---------------------------------------------------------------------------------------
# Bad input through DVC: one line, and nothing but preflight runs


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory):
    return make_clone(tmp_path_factory.mktemp("pipe-bad"), overlay=STUBS)


@pytest.mark.parametrize("flat, line", [
    ({"decode": "foo"}, "error: params: decode: unknown value 'foo'; expected one of exact, ref"),
    ({"seeds": [0, 0, 1]}, "error: params: seeds: duplicate seeds [0]"),
    ({"rows": 1000, "eval_every": 400}, "error: params: eval_every: 400 does not divide rows=1000"),
    ({}, "error: reference set-up: "),
])
def test_bad_input_fails_before_any_stage_runs(fresh_clone, tmp_path, flat, line):
    git(fresh_clone, "checkout", "-q", "--", "params.yaml")
    set_params(fresh_clone, **flat)
    extra = {"DREAMER_PARITY_REF_ROOT": str(tmp_path / "no-setup")} if not flat else None
    p = dvc(fresh_clone, "repro", check=False, extra_env=extra)
    assert p.returncode != 0
    assert ran_stages(p.stdout) == ["preflight"]
    errors = [x for x in p.stdout.splitlines() if x.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(line), p.stdout
    assert not (fresh_clone / "results" / "reference").exists()
    assert not (fresh_clone / "results" / "preflight.ok").exists()


# ---------------------------------------------------------------------------------------
# What reruns: one repro of the stand-in pipeline shared by the tests below


@pytest.fixture(scope="module")
def stub_round(tmp_path_factory):
    clone = make_clone(tmp_path_factory.mktemp("pipe-stub"), overlay=STUBS_NO_SETUP)
    set_params(clone, **SMALL)
    git(clone, "commit", "-qam", "smoke-size parameters")
    first = dvc(clone, "repro")
    git(clone, "add", "-A")
    git(clone, "commit", "-qm", "round a")
    git(clone, "tag", "round-a")
    return clone, first.stdout


def _reset(clone):
    git(clone, "checkout", "-q", "round-a", "--", ".")
    dvc(clone, "checkout", "-q")


def test_repro_runs_every_stage_once_in_order(stub_round):
    clone, out = stub_round
    assert ran_stages(out) == ["preflight", "port_check", "reference@0", "reference@1",
                               "candidate", "compare"]
    assert (clone / "results" / "preflight.ok").read_text() == pf.GATE_TEXT
    for s in (0, 1):
        done = json.loads((clone / f"results/reference/s{s}/DONE.json").read_text())
        assert done == {"status": "ok", "side": "reference", "seed": s, "run_sha256":
                        records.file_sha256(clone / f"results/reference/s{s}/run.json")}
        assert (clone / f"results/candidate/s{s}/DONE.json").is_file()
    assert "prereg docs/rounds/smoke.md" in (clone / "results" / "report.md").read_text()
    # cached outputs are git-ignored, git-tracked metrics are not
    ignored = git(clone, "status", "--porcelain", "--ignored").stdout
    assert "results/candidate" in ignored and "metrics/summary.json" not in ignored


def test_decode_reruns_only_candidate_and_compare(stub_round):
    clone, _ = stub_round
    _reset(clone)
    before = {s: lock_stage(clone, f"reference@{s}") for s in (0, 1)}
    p = dvc(clone, "exp", "run", "-n", "pair-r", "-S", "decode=ref")
    assert [s for s in ran_stages(p.stdout) if s != "preflight"] == ["candidate", "compare"]
    assert "Stage 'reference@0' didn't change, skipping" in p.stdout
    assert {s: lock_stage(clone, f"reference@{s}") for s in (0, 1)} == before
    assert json.loads(dvc(clone, "metrics", "diff", "round-a", "pair-r", "--json").stdout) == \
        {"metrics/headline.json": {"candidate.mean": {"old": 1.0, "new": 2.0, "diff": 1.0}}}
    diff = json.loads(dvc(clone, "metrics", "diff", "round-a", "pair-r", "--json", "--targets",
                          "metrics/summary.json", "metrics/train_last_window.json").stdout)
    change = diff["metrics/summary.json"]
    assert change["candidate.last_val_std"] == {"old": 1.0, "new": 2.0, "diff": 1.0}
    assert "reference.last_val_std" not in change
    train = diff["metrics/train_last_window.json"]
    assert train["val/std.candidate.s0"] == {"old": 0.02, "new": 0.07, "diff": 0.05}
    assert not [k for k in train if ".reference." in k], train


def test_reference_decode_reruns_only_reference_and_compare(stub_round):
    clone, _ = stub_round
    _reset(clone)
    before = lock_stage(clone, "candidate")
    p = dvc(clone, "exp", "run", "-n", "pair-e", "-S", "reference.decode=exact")
    assert [s for s in ran_stages(p.stdout) if s != "preflight"] == [
        "reference@0", "reference@1", "compare"]
    assert lock_stage(clone, "candidate") == before
    run0 = json.loads((clone / "results/reference/s0/run.json").read_text())
    assert run0["decode"] == "exact"


def test_round_and_statistics_rerun_only_compare(stub_round):
    """-S writes 3e-05 back as a YAML scalar PyYAML reads as a string: the loader types it."""
    clone, _ = stub_round
    _reset(clone)
    p = dvc(clone, "exp", "run", "-S", "stats.good_return=0.00003", "-S", "round=round1")
    assert [s for s in ran_stages(p.stdout) if s != "preflight"] == ["compare"]
    text = (clone / "params.yaml").read_text()
    assert "good_return: 3e-05" in text
    assert yaml.safe_load(text)["stats"]["good_return"] == "3e-05"
    assert P.load(clone / "params.yaml")["stats"]["good_return"] == 3e-05
    assert json.loads((clone / "metrics/summary.json").read_text())["good_return"] == 3e-05
    assert "prereg docs/rounds/round1.md" in (clone / "results/report.md").read_text()


def test_candidate_seeds_rerun_only_candidate_and_compare_and_make_no_reference_stage(stub_round):
    """candidate.seeds gives the candidate 3 seeds against the round's 2: the reference
    stages stay reference@0 and reference@1 (they are made from `seeds`) and do not rerun;
    the candidate stage runs its 3 seeds and compare reads each side's own."""
    clone, _ = stub_round
    _reset(clone)
    before = {s: lock_stage(clone, f"reference@{s}") for s in (0, 1)}
    p = dvc(clone, "exp", "run", "-n", "cand3", "-S", "candidate.seeds=[2,0,1]")
    assert [s for s in ran_stages(p.stdout) if s != "preflight"] == ["candidate", "compare"]
    assert {s: lock_stage(clone, f"reference@{s}") for s in (0, 1)} == before
    assert dvc(clone, "stage", "list", "--name-only").stdout.split() == [
        "preflight", "port_check", "reference@0", "reference@1", "candidate", "compare"]
    assert P.load(clone / "params.yaml")["candidate"]["seeds"] == [0, 1, 2]
    assert sorted(x.name for x in (clone / "results/candidate").iterdir()
                  if x.is_dir()) == ["s0", "s1", "s2"]
    train = json.loads((clone / "metrics/train_last_window.json").read_text())
    assert train["val/std.candidate.s2"] == 0.02 and "val/std.reference.s2" not in train
    assert train["val/std.reference.s1"] == 0.08


def test_published_source_stands_in_for_the_reference(stub_round):
    clone, _ = stub_round
    _reset(clone)
    p = dvc(clone, "exp", "run", "-S", "reference.source=data/published/round1")
    assert [s for s in ran_stages(p.stdout) if s != "preflight"] == [
        "reference@0", "reference@1", "compare"]
    for s in (0, 1):
        d = clone / f"results/reference/s{s}"
        assert sorted(x.name for x in d.iterdir()) == ["STAND_IN.json"]
        assert json.loads((d / "STAND_IN.json").read_text())["source"] == "data/published/round1"
    assert "reference data/published/round1" in (clone / "results/report.md").read_text()
    train = json.loads((clone / "metrics/train_last_window.json").read_text())
    assert train["reference.reason"] == "published runs carry no training-metric windows"
    assert train["val/std.candidate.s1"] == 0.02


def test_failed_stage_leaves_no_finished_output_and_loses_nothing(stub_round):
    clone, _ = stub_round
    _reset(clone)
    good = tree_digest(clone / "results/reference/s0")
    p = dvc(clone, "repro", "-f", "reference@0", check=False, extra_env={"STUB_FAIL_SEED": "0"})
    assert p.returncode != 0 and "failing midway on purpose" in p.stdout
    d = clone / "results/reference/s0"
    assert not (d / "DONE.json").exists()          # nothing looks finished
    assert (d / "records.jsonl").read_text() == "{}\n"
    # the earlier run is intact in the cache and comes back
    dvc(clone, "checkout", "-f", "reference@0")
    assert tree_digest(d) == good
    # a rerun starts clean: the partial file of the failed attempt is gone
    (d / "stray.txt").write_text("left by hand")
    dvc(clone, "repro", "-f", "reference@0")
    assert sorted(x.name for x in d.iterdir()) == ["DONE.json", "records.jsonl", "run.json"]
    assert tree_digest(d) == good

"""README's documented uses, walked in one fresh clone of this repository's HEAD.

One ``git clone`` (the committed tree, with its history: the kept rounds' commits), this
repository's ``.venv`` linked into it (nothing installed; ``make`` is told the venv is
made), then, as README says, in this order:

- set-up: ``make venv`` makes a git tag per entry of docs/rounds/index.yaml; ``dvc pull``;
  ``make run`` restores the committed round with ``dvc status`` clean;
- ``dvc metrics diff round3-candidate round3-candidate-ref --targets metrics/summary.json``
  by round name: LATE of both rounds as each round's commit holds it;
- ``dvc exp run -S decode=ref``: nothing trains (the candidate seeds are stand-ins for the
  kept ``decode: ref`` runs) and LATE is round3-candidate-ref's; ``make head`` returns;
- every entry of the index: ``make round ROUND=<name>`` recomputes the round from its kept
  runs with its metrics the round's committed ones, and ``make head`` returns with ``dvc
  status`` and ``git status`` clean.

Metrics are compared key by key over the keys the round's commit holds (keys added to
``compare`` later are new, not different); ``checks.passed`` and ``checks.flagged`` may
trade counts (a check added after a round flags its runs' older ``DONE.json`` marker), with
their sum equal.  No JAX program is compiled; the walk takes a few minutes of one core,
mostly ``compare`` once per round.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

import pipeline_helpers as ph  # tests/pipeline_helpers.py
from dreamer_parity import rounds

REPO = ph.REPO
INDEX = rounds.load_index(REPO)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (ph.VENV_BIN / "dvc").exists(), reason="no .venv/bin/dvc: run `make venv`"),
    pytest.mark.skipif(any(subprocess.run(["git", "cat-file", "-e", f"{e['commit']}^{{commit}}"],
                                          cwd=REPO, capture_output=True).returncode
                           for e in INDEX.values()),
                       reason="shallow clone: the kept rounds' commits are not here "
                              "(git fetch --unshallow)"),
]


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A fresh clone of HEAD with this repository's venv linked in; README's set-up done
    (``make venv``, ``dvc pull``)."""
    root = tmp_path_factory.mktemp("front-door") / "repo"
    ph.git(root.parent, "clone", "-q", str(REPO), str(root))
    os.symlink(REPO / ".venv", root / ".venv")
    make(root, "venv")
    ph.dvc(root, "pull", "-q")
    return root


def make(root: Path, *args: str) -> subprocess.CompletedProcess:
    """``make`` in the clone, its code first on the path, the linked venv taken as made
    (``-o`` the venv's stamp: the clone's newer requirements.lock must not reinstall it)."""
    stamps = sorted((REPO / ".venv").glob(".installed-*"))
    assert stamps, "the venv has no stamp: run `make venv`"
    return ph.run(root, "make", "--no-print-directory", "-o", f".venv/{stamps[-1].name}", *args,
                  extra_env={"PYTHONPATH": str(root / "src")})


def committed(root: Path, commit: str) -> dict:
    return json.loads(ph.git(root, "show", f"{commit}:metrics/summary.json").stdout)


def differences(now: dict, then: dict) -> list[str]:
    """Keys of ``then`` whose value ``now`` does not hold (the exception of the docstring
    for the checks' two counts)."""
    counts = ("checks.passed", "checks.flagged")
    out = [k for k in then if k not in counts and now.get(k) != then[k]]
    if all(k in then for k in counts) and \
            sum(now.get(k, 0) for k in counts) != sum(then[k] for k in counts):
        out += list(counts)
    return out


def clean(root: Path) -> None:
    assert json.loads(ph.dvc(root, "status", "--json").stdout or "{}") == {}
    lines = [x for x in ph.git(root, "status", "--porcelain").stdout.splitlines()
             if x != "?? .venv"]
    assert lines == []


def summary(root: Path) -> dict:
    return json.loads((root / "metrics" / "summary.json").read_text())


def test_setup_run_and_round_names(clone):
    tags = set(ph.git(clone, "tag", "--list").stdout.split())
    assert set(INDEX) <= tags
    make(clone, "run")
    clean(clone)
    diff = json.loads(ph.dvc(clone, "metrics", "diff", "round3-candidate", "round3-candidate-ref",
                             "--targets", "metrics/summary.json", "--json").stdout)
    late = diff["metrics/summary.json"]["LATE.candidate.mean"]
    assert late["old"] == committed(clone, INDEX["round3-candidate"]["commit"])["LATE.candidate.mean"]
    assert late["new"] == \
        committed(clone, INDEX["round3-candidate-ref"]["commit"])["LATE.candidate.mean"]
    assert late["old"] != late["new"]


def test_exp_run_decode_ref_reads_the_kept_runs(clone):
    ph.dvc(clone, "exp", "run", "-S", "decode=ref")
    cand = sorted((clone / "results" / "candidate").iterdir())
    assert cand and all((d / "STAND_IN.json").is_file() and not (d / "DONE.json").exists()
                        for d in cand)                       # nothing trained here
    s = summary(clone)
    want = committed(clone, INDEX["round3-candidate-ref"]["commit"])
    assert s["LATE.candidate.mean"] == want["LATE.candidate.mean"]
    assert {s[f"source.candidate.s{d.name[1:]}"] for d in cand} == \
        {"data/runs/round3-candidate-ref"}
    markers = [json.loads((d / "STAND_IN.json").read_text()) for d in cand]
    assert {(m["source"], m["named"]) for m in markers} == \
        {("data/runs/round3-candidate-ref", "data/runs/round3-candidate")}
    make(clone, "head")
    clean(clone)


@pytest.mark.parametrize("name", list(INDEX))
def test_every_kept_round_and_back(clone, name):
    make(clone, "round", f"ROUND={name}")
    assert yaml.safe_load((clone / "params.yaml").read_text())["round"] == name
    assert differences(summary(clone), committed(clone, INDEX[name]["commit"])) == []
    for d in (clone / "results").glob("*/s*"):
        assert not (d / "DONE.json").exists(), f"{d} ran here"
    make(clone, "head")
    clean(clone)

"""End to end: the smoke round through DVC with the real components (both sides).

In one temporary clone of the working tree (module-scoped, shared by the tests):

1. ``dvc repro`` of the smoke profile runs every stage (the smoke round has no gate:
   ``gate.pass`` is null with its reason);
2. ``dvc exp run -S decode=ref`` reruns the candidate and compare stages, not the
   reference seeds (DVC's output and dvc.lock), and ``dvc metrics diff`` shows the
   candidate's numbers changed and the reference's not;
3. ``dvc push`` to a temporary local remote and ``dvc pull`` into a fresh clone restore
   the run outputs bit-identically.

Needs the reference set-up (``make reference-setup``); skips
naming them otherwise.  About 4-6 minutes on 2 cores with a warm compilation cache; the
first repro is queued at the session's first test and runs while other tests do
(tests/conftest.py, ``background``).
"""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest
import yaml

from dreamer_parity import params as P
from dreamer_parity import records

from pipeline_helpers import (VENV_BIN, dvc, env, git, lock_stage, make_clone, ran_stages,
                              set_params, tree_digest)

pytestmark = [pytest.mark.slow, pytest.mark.reference]


def _reference_ready() -> str | None:
    try:
        from dreamer_parity.reference import setup as ref_setup
    except ImportError as e:  # pragma: no cover - the package is part of the repository
        return f"reference package not importable ({e})"
    try:
        ref_setup.check_setup(check_packages=False)
    except ref_setup.SetupError as e:
        return f"reference not set up ({e}); run `make reference-setup`"
    return None


#: conftest.background queues the smoke round's repro at the session's first test
BACKGROUND_FIXTURES = ("smoke",)


def start_in_background(background, tmp_path_factory):
    """Make the clone with the smoke round (main thread) and queue its ``dvc repro`` on the
    session's background worker (tests/conftest.py): it runs while other tests do, and
    ``smoke`` waits for it.  Nothing is queued without the reference set-up (``smoke`` then
    skips, saying why); a clone that cannot be made is the fixture's error."""
    if _reference_ready():
        return
    try:
        tmp = tmp_path_factory.mktemp("e2e")
        clone = make_clone(tmp)
        set_params(clone, **P.SMOKE)
        P.load(clone / "params.yaml")  # the smoke parameters are valid as written
        git(clone, "commit", "-qam", "smoke round")
        cmd, environ = [str(VENV_BIN / "dvc"), "repro"], env()
    except Exception as e:           # raised where the fixture asks for the result
        failed = e

        def job():
            raise failed
    else:
        def job():
            t0 = time.perf_counter()
            p = background.run(cmd, cwd=clone, env=environ, stderr=subprocess.STDOUT,
                               timeout=3000)
            seconds = time.perf_counter() - t0
            if p.returncode != 0:      # as pipeline_helpers.run(check=True)
                raise AssertionError(f"{' '.join(cmd)} exited {p.returncode}:\n"
                                     f"{p.stdout[-6000:]}")
            return tmp, clone, p, seconds
    background.submit("e2e-smoke-repro", job)


@pytest.fixture(scope="module")
def smoke(background, tmp_path_factory):
    why = _reference_ready()
    if why:
        pytest.skip(why)
    if not background.queued("e2e-smoke-repro"):
        start_in_background(background, tmp_path_factory)
    tmp, clone, first, seconds = background.result("e2e-smoke-repro")
    git(clone, "add", "-A")
    git(clone, "commit", "-qm", "smoke results")
    git(clone, "tag", "smoke-a")
    print(f"smoke dvc repro: {seconds:.0f} s")
    return {"clone": clone, "tmp": tmp, "out": first.stdout}


def test_smoke_repro_runs_both_sides(smoke):
    clone = smoke["clone"]
    assert ran_stages(smoke["out"]) == ["preflight", "port_check", "reference@0",
                                        "reference@1", "candidate", "compare"]
    for s in P.SMOKE["seeds"]:
        done = json.loads((clone / f"results/reference/s{s}/DONE.json").read_text())
        assert done["status"] == "ok", (s, done)
        # the candidate side (layout checked by the next test)
        d = records.run_dir(clone / "results", "candidate", s)
        assert json.loads((d / "DONE.json").read_text())["status"] == "ok", (s, d)
    summary = json.loads((clone / "metrics/summary.json").read_text())
    for s in P.SMOKE["seeds"]:
        for side in ("reference", "candidate"):
            v = summary[f"S1.{side}.s{s}"]
            assert isinstance(v, (int, float)) and 0 <= v <= 500, (side, s, v)
    report = (clone / "results/report.md").read_text()
    assert "docs/rounds/smoke.md" in report
    for png in ("eval_curves.png", "s2_curve.png", "entropy_windows.png"):
        assert (clone / "metrics/plots" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the smoke round pre-registers no gate
    assert summary["gate.statistic"] is None and summary["gate.pass"] is None
    assert "no gate" in summary["gate.pass.reason"]


def test_candidate_writes_one_directory_per_seed_under_its_output(smoke):
    """Agreed CLI: ``candidate.runtime.run --out results/candidate`` writes ``results/candidate/s<S>``."""
    clone = smoke["clone"]
    nested = sorted(p.relative_to(clone).as_posix()
                    for p in (clone / "results/candidate").glob("candidate/s*"))
    assert not nested, (f"candidate wrote {nested}: expected results/candidate/s<seed> "
                        f"(the layout of the reference side and of the agreed CLI)")
    for s in P.SMOKE["seeds"]:
        assert (clone / f"results/candidate/s{s}/DONE.json").is_file()


def test_decode_reruns_candidate_and_compare_only(smoke):
    clone = smoke["clone"]
    before = {s: lock_stage(clone, f"reference@{s}") for s in P.SMOKE["seeds"]}
    cand_before = lock_stage(clone, "candidate")
    p = dvc(clone, "exp", "run", "-n", "smoke-decode-ref", "-S", "decode=ref", timeout=900)
    assert [s for s in ran_stages(p.stdout) if s != "preflight"] == ["candidate", "compare"]
    for s in P.SMOKE["seeds"]:
        assert f"Stage 'reference@{s}' didn't change, skipping" in p.stdout
    assert {s: lock_stage(clone, f"reference@{s}") for s in P.SMOKE["seeds"]} == before
    assert lock_stage(clone, "candidate")["outs"] != cand_before["outs"]
    assert lock_stage(clone, "candidate")["params"]["params.yaml"]["decode"] == "ref"

    diff = json.loads(dvc(clone, "metrics", "diff", "smoke-a", "smoke-decode-ref", "--json",
                          "--targets", "metrics/summary.json",
                          "metrics/train_last_window.json").stdout)
    changed = {f"{path}:{k}": v for path, d in diff.items() for k, v in d.items()
               if v.get("old") != v.get("new")}
    # the candidate's decode-sensitive training metrics move (at smoke size the
    # evaluation returns may not) ...
    assert [k for k in changed if ".candidate." in k], diff
    assert changed.get("metrics/train_last_window.json:val/std.candidate.mean"), diff
    # ... and the reference seeds' numbers, restored from the cache, do not
    assert not [k for k in changed if re.search(r"\.reference\.(s\d+|mean)$", k)], changed


def test_push_then_pull_restores_results_bit_identically(smoke):
    clone, tmp = smoke["clone"], smoke["tmp"]
    git(clone, "add", "-A")
    git(clone, "commit", "-qm", "workspace as pushed", check=False)
    store = tmp / "store"
    dvc(clone, "remote", "add", "-f", "-d", "teststore", str(store))
    git(clone, "commit", "-qam", "test remote")
    push = dvc(clone, "push")
    assert re.search(r"\d+ files? pushed", push.stdout), push.stdout
    fresh = tmp / "fresh"
    git(tmp, "clone", "-q", str(clone), str(fresh))
    assert not (fresh / "results/reference/s0").exists()
    dvc(fresh, "pull")
    for rel in ["results/reference", "results/candidate", "data/published", "metrics"]:
        a, b = tree_digest(clone / rel), tree_digest(fresh / rel)
        # final parameters stay in the workspace that ran (.dvcignore): never pushed
        kept = {k for k in a if rel.startswith("results/") and k.endswith("/params.npz")}
        assert len(kept) == (len(P.SMOKE["seeds"]) if rel.startswith("results/") else 0), rel
        assert a and {k: v for k, v in a.items() if k not in kept} == b, rel
    status = dvc(fresh, "status")
    assert "Data and pipelines are up to date" in status.stdout, status.stdout

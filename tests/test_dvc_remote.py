"""The DVC remote ``store`` travels with the repository: a fresh clone restores every output.

The committed default remote is ``store/`` at the repository root (``url = ../store``,
relative to ``.dvc/``), a git-tracked folder.  These tests clone the committed HEAD into a
temporary directory that has no ``../shared`` beside it, pull the stages that
``dvc.lock`` names, and check the restored files against ``dvc.lock`` with ``dvc status``
and with an md5 computed here.  They also show that a missing or corrupted object in the
store makes ``dvc pull`` fail, naming the output it could not restore.
"""

import configparser
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DVC = REPO / ".venv" / "bin" / "dvc"

pytestmark = pytest.mark.skipif(not DVC.exists(), reason="no .venv/bin/dvc: run `make venv`")

ENV = {**os.environ, "DVC_NO_ANALYTICS": "1", "GIT_TERMINAL_PROMPT": "0"}


def run(*cmd, cwd, check=True):
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=ENV, capture_output=True, text=True,
                       timeout=300)
    if check:
        assert r.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{r.stdout}\n{r.stderr}"
    return r


def md5_file(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def locked_outs(repo: Path) -> dict[str, list[dict]]:
    """``{stage: [{"path", "md5"}, ...]}`` for every stage of ``dvc.lock`` with outputs."""
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    return {name: st["outs"] for name, st in lock["stages"].items() if st.get("outs")}


def restore_problems(repo: Path, stages=None) -> list[str]:
    """What differs between the workspace and ``dvc.lock``, checked without DVC.

    A file output must have the md5 that ``dvc.lock`` records; a directory output (md5
    ``<hash>.dir``) must match the listing object ``store/files/md5/<hash>.dir`` file by
    file, and that listing must itself hash to ``<hash>``; a git-tracked directory output
    (``cache: false``, no listing in the store) must hash to ``<hash>`` the way DVC hashes
    a directory (md5 of the JSON list of ``{"md5", "relpath"}`` sorted by path).
    """
    problems = []
    for stage, outs in locked_outs(repo).items():
        if stages is not None and stage not in stages:
            continue
        for out in outs:
            path, md5 = repo / out["path"], out["md5"]
            if not path.exists():
                problems.append(f"{stage}: {out['path']} missing")
            elif md5.endswith(".dir"):
                h = md5[:-len(".dir")]
                listing_file = repo / "store" / "files" / "md5" / h[:2] / (h[2:] + ".dir")
                if not listing_file.exists():   # git-tracked (cache: false): hash it as DVC does
                    rel = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())
                    listing = [{"md5": md5_file(path / r), "relpath": r} for r in rel]
                    if hashlib.md5(json.dumps(listing, sort_keys=True).encode()).hexdigest() != h:
                        problems.append(f"{stage}: {out['path']} does not hash to {h}")
                    continue
                if md5_file(listing_file) != h:
                    problems.append(f"{stage}: listing of {out['path']} does not hash to {h}")
                    continue
                listing = json.loads(listing_file.read_text())
                files = sorted(p.relative_to(path).as_posix() for p in path.rglob("*")
                               if p.is_file())
                if files != sorted(e["relpath"] for e in listing):
                    problems.append(f"{stage}: {out['path']} holds other files than dvc.lock")
                for e in listing:
                    f = path / e["relpath"]
                    if f.is_file() and md5_file(f) != e["md5"]:
                        problems.append(f"{stage}: {out['path']}/{e['relpath']} md5 differs")
            elif md5_file(path) != md5:
                problems.append(f"{stage}: {out['path']} md5 differs from dvc.lock")
    return problems


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory):
    """A clone of the committed HEAD, with no ``../shared`` beside it and nothing pulled."""
    root = tmp_path_factory.mktemp("fresh")
    clone = root / "repo"
    run("git", "clone", "-q", REPO, clone, cwd=root)
    assert not (root / "shared").exists()
    return clone


def copy_of(clone: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "repo"
    shutil.copytree(clone, dst, symlinks=True)
    return dst


def test_project_config():
    """Analytics off; the default remote is ``store`` and resolves to ``<repo>/store``."""
    cfg = configparser.ConfigParser()
    cfg.read_string((REPO / ".dvc" / "config").read_text())
    assert cfg["core"]["analytics"] == "false"
    assert cfg["core"]["remote"] == "store"
    assert cfg['\'remote "store"\'']["url"] == "../store"
    listing = run(DVC, "config", "--list", "--project", cwd=REPO).stdout.split()
    assert f"remote.store.url={REPO / 'store'}" in listing


def test_dvc_lock_names_outputs(fresh_clone):
    outs = locked_outs(fresh_clone)
    assert "preflight" in outs and outs["preflight"][0]["path"] == "results/preflight.ok"
    assert sum(len(v) for v in outs.values()) >= 1


def test_fresh_clone_restores_every_locked_output(fresh_clone):
    stages = sorted(locked_outs(fresh_clone))
    assert restore_problems(fresh_clone)                     # nothing there before the pull
    run(DVC, "pull", *stages, cwd=fresh_clone)
    assert restore_problems(fresh_clone) == []
    status = json.loads(run(DVC, "status", "--json", *stages, cwd=fresh_clone).stdout or "{}")
    assert {k: v for k, v in status.items() if k in stages} == {}
    # the independent check does see a changed file
    out = locked_outs(fresh_clone)["preflight"][0]["path"]
    target = fresh_clone / out
    target.unlink()
    target.write_text("changed\n")
    assert restore_problems(fresh_clone) == [f"preflight: {out} md5 differs from dvc.lock"]
    run(DVC, "checkout", "--force", "preflight", cwd=fresh_clone)
    assert restore_problems(fresh_clone) == []


def _object_of(repo: Path, stage: str) -> tuple[str, Path]:
    out = locked_outs(repo)[stage][0]
    h = out["md5"]
    return out["path"], repo / "store" / "files" / "md5" / h[:2] / h[2:]


def test_a_missing_object_fails_the_pull_and_the_check(fresh_clone, tmp_path):
    repo = copy_of(fresh_clone, tmp_path)
    shutil.rmtree(repo / ".dvc" / "cache", ignore_errors=True)
    path, obj = _object_of(repo, "preflight")
    (repo / path).unlink(missing_ok=True)
    obj.unlink()
    r = run(DVC, "pull", "preflight", cwd=repo, check=False)
    assert r.returncode != 0 and path in r.stderr
    assert f"preflight: {path} missing" in restore_problems(repo)


def test_a_corrupted_object_fails_the_pull_naming_the_file(fresh_clone, tmp_path):
    repo = copy_of(fresh_clone, tmp_path)
    shutil.rmtree(repo / ".dvc" / "cache", ignore_errors=True)
    path, obj = _object_of(repo, "preflight")
    (repo / path).unlink(missing_ok=True)
    obj.chmod(0o644)
    obj.write_bytes(b"corrupted\n")
    r = run(DVC, "pull", "preflight", cwd=repo, check=False)
    assert r.returncode != 0
    assert path in r.stderr and obj.parent.name + obj.name in r.stderr + r.stdout
    assert not (repo / path).exists()


#: Rounds whose results live in an earlier commit of main, not at HEAD (docs name the
#: commit): ``{round: commit}``.  HEAD's ``store/`` must still hold every object that
#: commit's ``dvc.lock`` names, and a checkout of the commit must restore them.
KEPT_ROUNDS = {"round1-reference-s0": "48879486c1b7f0edad58a25725eff6b63f5080c9"}


@pytest.mark.parametrize("name", sorted(KEPT_ROUNDS))
def test_a_round_kept_in_history_restores_from_a_fresh_clone(fresh_clone, tmp_path, name):
    commit = KEPT_ROUNDS[name]
    repo = copy_of(fresh_clone, tmp_path)
    r = run("git", "cat-file", "-e", f"{commit}^{{commit}}", cwd=repo, check=False)
    assert r.returncode == 0, f"{name}: commit {commit} is not in this clone's history"
    at_head = set(run("git", "ls-tree", "-r", "--name-only", "HEAD", "store",
                      cwd=repo).stdout.split())
    # start from no outputs (another test may have pulled HEAD's round into the clone)
    shutil.rmtree(repo / "results", ignore_errors=True)
    run("git", "checkout", "-q", commit, "--", ".", cwd=repo)
    # files HEAD added since (a new module under a stage's dependency) go too; store/ stays HEAD's
    for f in run("git", "diff", "--name-only", "--diff-filter=A", commit, "HEAD", "--", ".",
                 ":!store", cwd=repo).stdout.split():
        (repo / f).unlink()
    assert yaml.safe_load((repo / "params.yaml").read_text())["round"] == name
    # the stages of that round's dvc.yaml and params (its dvc.lock may keep entries of
    # stages an earlier round had, e.g. reference@1-4; DVC ignores those)
    stages = set(run(DVC, "stage", "list", "--name-only", cwd=repo).stdout.split())
    outs = {k: v for k, v in locked_outs(repo).items() if k in stages}
    assert {"candidate", "reference@0"} <= set(outs)

    def obj(h):
        return f"store/files/md5/{h[:2]}/{h[2:]}"
    # HEAD's store still holds every object the round names (the store only grows);
    # outputs with `cache: false` (metrics, plots, the report) live in git instead
    in_git = set(run("git", "ls-tree", "-r", "--name-only", commit, cwd=repo).stdout.split())
    for stage, entries in outs.items():
        for out in entries:
            if out["path"] in in_git:
                continue
            assert obj(out["md5"]) in at_head, f"{name}: {stage} {out['path']} not in HEAD's store"
            if out["md5"].endswith(".dir"):
                for e in json.loads((repo / obj(out["md5"])).read_text()):
                    assert obj(e["md5"]) in at_head, \
                        f"{name}: {out['path']}/{e['relpath']} not in HEAD's store"
    run(DVC, "pull", *sorted(outs), cwd=repo)
    assert restore_problems(repo, stages) == []
    status = json.loads(run(DVC, "status", "--json", *sorted(outs), cwd=repo).stdout or "{}")
    assert {k: v for k, v in status.items() if k in outs} == {}
    # both sides' seed finished: their completion markers say so
    for side in ("reference", "candidate"):
        done = json.loads((repo / "results" / side / "s0" / "DONE.json").read_text())
        assert done["status"] == "ok", side


def test_final_parameters_stay_out_of_every_output(fresh_clone, tmp_path):
    """``.dvcignore`` keeps ``results/<side>/s<seed>/params.npz`` out of the outputs: the
    committed candidate output lists none, and one written into the workspace leaves the
    stage up to date (so `dvc commit` / `dvc push` never take it into store/)."""
    repo = copy_of(fresh_clone, tmp_path)
    run(DVC, "pull", "candidate", cwd=repo)
    (out,) = locked_outs(repo)["candidate"]
    h = out["md5"][:-len(".dir")]
    listing = json.loads((repo / "store" / "files" / "md5" / h[:2] / (h[2:] + ".dir")).read_text())
    names = {e["relpath"].split("/")[-1] for e in listing}
    assert "records.jsonl" in names and "params.npz" not in names
    seed_dir = repo / out["path"] / listing[0]["relpath"].split("/")[0]
    (seed_dir / "params.npz").write_bytes(b"final parameters of a run made here\n")
    status = json.loads(run(DVC, "status", "--json", "candidate", cwd=repo).stdout or "{}")
    assert status == {}
    assert run(DVC, "check-ignore", seed_dir.relative_to(repo) / "params.npz",
               cwd=repo, check=False).returncode == 0
    assert run(DVC, "check-ignore", seed_dir.relative_to(repo) / "records.jsonl",
               cwd=repo, check=False).returncode == 1
    # a changed result file is still seen
    (seed_dir / "timing.json").write_text("{}\n")
    status = json.loads(run(DVC, "status", "--json", "candidate", cwd=repo).stdout or "{}")
    assert "candidate" in status

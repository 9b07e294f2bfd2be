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


def _kept_rounds() -> dict[str, str]:
    """``{round: commit}`` of every kept round (docs/rounds/index.yaml)."""
    idx = yaml.safe_load((REPO / "docs" / "rounds" / "index.yaml").read_text())
    return {name: e["commit"] for name, e in idx.items()}


KEPT_ROUNDS = _kept_rounds()


@pytest.mark.parametrize("name", sorted(KEPT_ROUNDS))
def test_a_round_kept_in_history_restores_from_a_fresh_clone(fresh_clone, tmp_path, name):
    """``git checkout <round's commit>`` brings that commit's own store/, and ``dvc pull``
    restores every output its dvc.lock names (the store at HEAD holds HEAD's only)."""
    commit = KEPT_ROUNDS[name]
    repo = copy_of(fresh_clone, tmp_path)
    r = run("git", "cat-file", "-e", f"{commit}^{{commit}}", cwd=repo, check=False)
    if r.returncode != 0 and run("git", "rev-parse", "--is-shallow-repository",
                                 cwd=repo).stdout.strip() == "true":
        pytest.skip("shallow clone: the kept rounds' commits are not here (git fetch --unshallow)")
    assert r.returncode == 0, f"{name}: commit {commit} is not in this clone's history"
    run("git", "checkout", "-q", "-f", commit, cwd=repo)
    run("git", "clean", "-qfdx", "-e", ".dvc/cache", cwd=repo)
    shutil.rmtree(repo / ".dvc" / "cache", ignore_errors=True)
    assert yaml.safe_load((repo / "params.yaml").read_text())["round"] == name
    # the stages of that round's dvc.yaml and params (its dvc.lock may keep entries of
    # stages an earlier round had, e.g. reference@1-4; DVC ignores those)
    stages = set(run(DVC, "stage", "list", "--name-only", cwd=repo).stdout.split())
    outs = {k: v for k, v in locked_outs(repo).items() if k in stages}
    assert "candidate" in outs and any(k.startswith("reference@") for k in outs)

    def obj(h):
        return f"store/files/md5/{h[:2]}/{h[2:]}"
    # that commit's store holds every object the round names; outputs with `cache: false`
    # (metrics, plots, the report) live in git instead
    in_git = set(run("git", "ls-tree", "-r", "-t", "--name-only", commit, cwd=repo).stdout.split())
    for stage, entries in outs.items():
        for out in entries:
            if out["path"] in in_git:
                continue
            assert obj(out["md5"]) in in_git, f"{name}: {stage} {out['path']} not in its store"
            if out["md5"].endswith(".dir"):
                for e in json.loads((repo / obj(out["md5"])).read_text()):
                    assert obj(e["md5"]) in in_git, \
                        f"{name}: {out['path']}/{e['relpath']} not in its store"
    run(DVC, "pull", *sorted(outs), cwd=repo)
    assert restore_problems(repo, stages) == []
    status = json.loads(run(DVC, "status", "--json", *sorted(outs), cwd=repo).stdout or "{}")
    assert {k: v for k, v in status.items() if k in outs} == {}
    # every seed of each side that ran there finished: its completion marker says so
    for side in ("reference", "candidate"):
        for d in sorted((repo / "results" / side).glob("s*")):
            if (d / "STAND_IN.json").exists():
                continue
            done = json.loads((d / "DONE.json").read_text())
            assert done["status"] == "ok", (side, d.name)


def test_heads_store_holds_exactly_what_heads_lock_names(fresh_clone):
    """store/ at HEAD: every object HEAD's dvc.lock names (listings and their files), and
    nothing else (old rounds' objects are in their own commits)."""
    named = set()
    for outs in locked_outs(fresh_clone).values():
        for out in outs:
            h = out["md5"]
            obj = fresh_clone / "store" / "files" / "md5" / h[:2] / h[2:]
            if not obj.exists():
                continue     # a git-tracked output (cache: false)
            named.add(obj)
            if h.endswith(".dir"):
                named |= {fresh_clone / "store" / "files" / "md5" / e["md5"][:2] / e["md5"][2:]
                          for e in json.loads(obj.read_text())}
    held = {p for p in (fresh_clone / "store").rglob("*") if p.is_file()}
    assert held == named


def test_final_parameters_stay_out_of_every_output(fresh_clone, tmp_path):
    """``.dvcignore`` keeps ``results/<side>/s<seed>/params.npz`` out of the outputs: no
    committed output lists one, and one written into the workspace leaves the stage up to
    date (so `dvc commit` / `dvc push` never take it into store/)."""
    repo = copy_of(fresh_clone, tmp_path)
    run(DVC, "pull", "candidate", cwd=repo)
    listings = [json.loads(p.read_text()) for p in (repo / "store").rglob("*.dir")]
    assert listings and not any(e["relpath"].endswith("params.npz") for ls in listings for e in ls)
    (out,) = locked_outs(repo)["candidate"]
    seed_dir = repo / out["path"] / "s0"
    assert seed_dir.is_dir()
    (seed_dir / "params.npz").write_bytes(b"final parameters of a run made here\n")
    status = json.loads(run(DVC, "status", "--json", "candidate", cwd=repo).stdout or "{}")
    assert status == {}
    assert run(DVC, "check-ignore", seed_dir.relative_to(repo) / "params.npz",
               cwd=repo, check=False).returncode == 0
    assert run(DVC, "check-ignore", seed_dir.relative_to(repo) / "records.jsonl",
               cwd=repo, check=False).returncode == 1
    # a result file written there is still seen
    (seed_dir / "timing.json").write_text("{}\n")
    status = json.loads(run(DVC, "status", "--json", "candidate", cwd=repo).stdout or "{}")
    assert "candidate" in status

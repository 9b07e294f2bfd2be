"""A team's DVC remote on an SSH server (docs/REMOTES.md), against a real OpenSSH server.

The module starts ``sshd`` once (tests/ssh_server.py: a loopback port, a throwaway host
key, client key, client home and remote directory) and stops it at the end. Every
``dvc`` call runs with that client home, so the user's own ``~/.ssh`` stays unread.
Each clone adds the remote as the README says: the URL with ``dvc remote add``, the
login (user, key file) with ``dvc remote modify --local``, into the git-ignored
``.dvc/config.local``.

- dvc-ssh does not check the server's host key (what docs/REMOTES.md says of it);
- a round's outputs pushed from one clone are pulled into a fresh clone from the server
  alone (its ``store/`` removed): ``dvc status`` is clean and LATE recomputed from the
  pulled records is the committed summary's;
- the multi-machine recipe: clone A runs its share of the seeds (``reference@0``, after
  ``preflight``) and pushes with its run cache; clone B, with the same params,
  ``dvc repro --pull`` restores A's stages from the server without running their
  commands, and runs only its own share (``reference@1``);
- a push and a pull cut part-way (the server killed mid-transfer) leave no object that
  passes as complete, on the server or in the local cache, and a rerun completes them.

Skipped, with the reason, only where ``sshd`` is missing or does not start.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import time
from pathlib import Path

import pytest
import yaml

import pipeline_helpers as ph  # tests/pipeline_helpers.py
import ssh_server  # tests/ssh_server.py
from ssh_server import Relay, SSHServer, SSHUnavailable
from test_dvc_remote import restore_problems  # tests/test_dvc_remote.py
from test_kept_runs import _late_s1  # tests/test_kept_runs.py

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not (ph.VENV_BIN / "dvc").exists(),
                                reason="no .venv/bin/dvc: run `make venv`")


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    """The server, once for the module; the tests skip, naming why, where it cannot start."""
    try:
        server = SSHServer(tmp_path_factory.mktemp("sshd"))
        server.start()
    except SSHUnavailable as e:
        pytest.skip(f"no SSH server here: {e}")
    yield server
    server.stop()


def env(server: SSHServer, extra: dict | None = None) -> dict:
    """pipeline_helpers' environment with the server's client home and no ssh-agent."""
    return {"HOME": str(server.home), "SSH_AUTH_SOCK": "", **(extra or {})}


def dvc(server, cwd, *args, check=True, extra_env=None, timeout=300):
    return ph.dvc(cwd, *args, check=check, extra_env=env(server, extra_env), timeout=timeout)


def clone(server: SSHServer, dest: Path, source: Path = REPO) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    ph.git(dest.parent, "clone", "-q", str(source), str(dest), extra_env=env(server))
    return dest


def add_remote(server: SSHServer, repo: Path, name: str, url: str) -> None:
    """The README's steps: the URL in the project config, the login in config.local."""
    dvc(server, repo, "remote", "add", name, url)
    dvc(server, repo, "remote", "modify", "--local", name, "user", server.user)
    dvc(server, repo, "remote", "modify", "--local", name, "keyfile", str(server.keyfile))


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def objects(root: Path) -> tuple[dict[str, Path], list[Path]]:
    """``({hash: path}, [other files])`` of a DVC object store (a remote or a cache):
    a file ``files/md5/<2 hex>/<30 hex>[.dir]`` is an object named by its hash; anything
    else there (a partial transfer's temporary name) is listed apart."""
    named, other = {}, []
    base = root / "files" / "md5"
    for p in sorted(base.rglob("*")) if base.is_dir() else []:
        if not p.is_file():
            continue
        h = p.parent.name + p.name
        if re.fullmatch(r"[0-9a-f]{32}(\.dir)?", h):
            named[h] = p
        else:
            other.append(p)
    return named, other


def objects_that_fail_their_name(root: Path) -> list[str]:
    """Objects whose content does not hash to their name, and ``.dir`` listings that
    name an object the store lacks: what would pass as complete and is not."""
    named, _ = objects(root)
    bad = [h for h, p in named.items() if md5(p) != h.removesuffix(".dir")]
    for h, p in named.items():
        if h.endswith(".dir") and h not in bad:
            bad += [f"{h}: {e['relpath']}" for e in json.loads(p.read_text())
                    if e["md5"] not in named]
    return bad


def test_ssh_client_does_not_check_the_host_key(sshd, tmp_path):
    """dvc-ssh connects whatever host key the server shows (sshfs passes asyncssh
    ``known_hosts=None``): a known_hosts that names another key for this server, which
    OpenSSH's client would refuse, does not stop a push. docs/REMOTES.md says so; if this
    fails, the client has started checking, and the docs should say how to trust a key."""
    repo = clone(sshd, tmp_path / "repo")
    add_remote(sshd, repo, "team", sshd.url("hostkey"))
    (repo / "note.txt").write_text("a file to push\n")
    dvc(sshd, repo, "add", "note.txt")
    other = ssh_server.write_key(tmp_path / "another_host_key")
    known = sshd.home / ".ssh" / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {other}\n")
    if shutil.which("ssh"):                      # OpenSSH's client refuses this server
        r = subprocess.run(["ssh", "-F", "none", "-o", "BatchMode=yes", "-o",
                            "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known}",
                            "-i", str(sshd.keyfile), "-p", str(sshd.port),
                            f"{sshd.user}@127.0.0.1", "true"], capture_output=True, text=True,
                           env=ph.env(env(sshd)), timeout=60)
        assert r.returncode != 0 and "HOST IDENTIFICATION HAS CHANGED" in r.stderr, r.stderr
    try:
        out = dvc(sshd, repo, "push", "-r", "team", "note.txt", timeout=60).stdout
    finally:
        known.unlink()
    assert "1 file pushed" in out


#: A commit whose round ran its candidate seeds in the pipeline, so that their records are
#: stage outputs in that commit's store/: round 3 with the candidate's five seeds, as first
#: committed (its kept runs, data/runs/round3-candidate, are copies of these outputs; the
#: headline round reads them from there since).
CANDIDATE_RAN_AT = "8f1d3ff2ecde47b8e323e48fc0d3d82ad179288e"


def test_ssh_push_then_pull_into_a_fresh_clone(sshd, tmp_path):
    if ph.git(REPO, "cat-file", "-e", f"{CANDIDATE_RAN_AT}^{{commit}}",
              check=False).returncode != 0:
        pytest.skip("shallow clone: the round's commit is not here (git fetch --unshallow)")
    # clone A: the round at that commit, restored from its store/, pushed to the server
    a = clone(sshd, tmp_path / "a" / "repo")
    ph.git(a, "checkout", "-q", CANDIDATE_RAN_AT)
    dvc(sshd, a, "pull")
    url = sshd.url("team")
    add_remote(sshd, a, "team", url)
    push_out = dvc(sshd, a, "push", "-r", "team").stdout
    n_pushed = int(re.search(r"(\d+) files? pushed", push_out).group(1))
    named, other = objects(sshd.remotes / "team")
    assert len(named) == n_pushed and not other
    assert objects_that_fail_their_name(sshd.remotes / "team") == []

    # clone B: fresh, its store/ gone; the login in .dvc/config.local, which git ignores
    b = clone(sshd, tmp_path / "b" / "repo")
    ph.git(b, "checkout", "-q", CANDIDATE_RAN_AT)
    shutil.rmtree(b / "store")                   # nothing can come from the default remote
    add_remote(sshd, b, "team", url)
    assert ph.git(b, "check-ignore", ".dvc/config.local", check=False).returncode == 0
    assert "keyfile" not in (b / ".dvc" / "config").read_text()
    pull = dvc(sshd, b, "pull", "-r", "team").stdout
    assert re.search(rf"{n_pushed} files? fetched", pull), pull[-2000:]

    assert json.loads(dvc(sshd, b, "status", "--json").stdout or "{}") == {}
    assert restore_problems(b) == []

    # LATE per seed and the side's mean, recomputed from the pulled records, as committed
    params = yaml.safe_load((b / "params.yaml").read_text())
    summary = json.loads((b / "metrics" / "summary.json").read_text())
    assert params["candidate"]["source"] == "run", "the round runs no candidate seed here"
    assert params["stats"]["late_rows"] == [12000, 24000]   # the window _late_s1 reads
    lates = []
    for seed in params["seeds"]:
        late, _ = _late_s1(b / "results" / "candidate" / f"s{seed}")
        assert late == pytest.approx(summary[f"LATE.candidate.s{seed}"], rel=1e-12), seed
        lates.append(late)
    assert statistics.fmean(lates) == pytest.approx(summary["LATE.candidate.mean"], rel=1e-12)


def _sentinel_path(tmp: Path) -> tuple[dict, Path]:
    """A ``python`` first on PATH that notes each call in a file, then runs the venv's:
    a stage command that runs leaves its line there."""
    bin_dir, sentinel = tmp / "sentinel-bin", tmp / "python-calls.txt"
    bin_dir.mkdir()
    wrapper = bin_dir / "python"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> "{sentinel}"\nexec "{ph.VENV_BIN / "python"}" "$@"\n')
    wrapper.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{ph.env()['PATH']}"}, sentinel


#: the round both machines run: its params.yaml differs from dvc.lock's in a parameter of
#: preflight (the whole file) and of every reference@<seed>, and each reference@<seed>
#: writes a STAND_IN.json that names this source: an output HEAD's dvc.lock does not name,
#: so a clone has it only from the server
RECIPE_PARAMS = {"reference.source": "data/runs/round3-candidate"}


def test_ssh_run_cache_restores_another_machines_stages_instead_of_running_them(sshd, tmp_path):
    """The recipe of docs/REMOTES.md with two machines, each running its share of the
    reference seeds (stand-ins: each reference@<seed> runs our code, which writes
    STAND_IN.json, about a second), with ``team`` as each one's default remote
    (``dvc remote default --local``: ``dvc repro --pull`` takes run cache and objects
    from the default remote only)."""
    url = sshd.url("recipe")
    # machine A: its share, reference seed 0 (preflight runs first); pushes with the run cache
    a = clone(sshd, tmp_path / "a" / "repo")
    ph.set_params(a, **RECIPE_PARAMS)
    add_remote(sshd, a, "team", url)
    dvc(sshd, a, "remote", "default", "--local", "team")
    path_a, calls_a = _sentinel_path(tmp_path / "a")
    ran = dvc(sshd, a, "repro", "reference@0", extra_env=path_a).stdout
    assert sorted(ph.ran_stages(ran)) == ["preflight", "reference@0"], ran[-2000:]
    assert "is cached" not in ran
    calls = calls_a.read_text()                 # the sentinel sees a stage that runs
    assert "pipeline preflight" in calls and "pipeline reference --seed 0" in calls, calls
    dvc(sshd, a, "push", "--run-cache")
    assert list((sshd.remotes / "recipe" / "runs").rglob("*")), "no run cache on the server"
    (s0,) = ph.lock_stage(a, "reference@0")["outs"]

    # machine B: the same commit and params, its store/ gone (the server is the only
    # source); reproducing its own share, seed 1, restores what A ran
    b = clone(sshd, tmp_path / "b" / "repo")
    shutil.rmtree(b / "store")
    ph.set_params(b, **RECIPE_PARAMS)
    assert (b / "params.yaml").read_bytes() == (a / "params.yaml").read_bytes()
    add_remote(sshd, b, "team", url)
    dvc(sshd, b, "remote", "default", "--local", "team")
    assert not (b / ".dvc" / "cache").exists()
    path_b, calls_b = _sentinel_path(tmp_path / "b")
    out = dvc(sshd, b, "repro", "--pull", "reference@0", "reference@1", extra_env=path_b).stdout
    for stage in ("preflight", "reference@0"):
        assert f"Stage '{stage}' is cached - skipping run, checking out outputs" in out, out
        assert ph.lock_stage(b, stage) == ph.lock_stage(a, stage)
    assert ph.ran_stages(out) == ["reference@1"], out[-2000:]
    calls = calls_b.read_text().splitlines()    # only B's own share ran on B
    assert len(calls) == 1 and "pipeline reference --seed 1" in calls[0], calls
    h = s0["md5"].removesuffix(".dir")          # A's output, from the server into B's cache
    assert (b / ".dvc" / "cache" / "files" / "md5" / h[:2] / (h[2:] + ".dir")).is_file()
    assert ph.tree_digest(b / s0["path"]) == ph.tree_digest(a / s0["path"])
    assert "data/runs/round3-candidate" in (b / s0["path"] / "STAND_IN.json").read_text()
    assert json.loads(dvc(sshd, b, "status", "--json", "reference@0", "reference@1").stdout
                      or "{}") == {}


#: the cut test's data: one file large enough to be mid-transfer when the relay holds,
#: and small ones that may finish before
BIG = 8 << 20
HOLD_AFTER = 2 << 20


def _wait_for_partial(where: Path, proc: subprocess.Popen, relay: Relay, timeout=60.0) -> Path:
    """Wait until the relay holds and a temporary (partial) file in directory ``where``
    has data; return it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"dvc exited {proc.returncode} before the cut:\n"
                                 f"{proc.stdout.read()[-3000:]}")
        if relay.holding.is_set() and where.is_dir():
            partial = [p for p in where.iterdir() if p.name.endswith(".tmp")
                       and p.stat().st_size > 0]
            if partial:
                return partial[0]
        time.sleep(0.02)
    raise AssertionError(f"no partial transfer in {where} within {timeout:.0f} s")


def _cut(sshd: SSHServer, relay: Relay, repo: Path, args: list[str], direction: str,
         where: Path):
    """Run ``dvc <args>`` through the relay; once the relay holds and a temporary file in
    ``where`` has data, kill the server. Returns dvc's exit code and output, and the
    partial file's size when the server went down."""
    relay.hold_after(direction, HOLD_AFTER)
    proc = subprocess.Popen([str(ph.VENV_BIN / "dvc"), *args], cwd=repo, env=ph.env(env(sshd)),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        partial = _wait_for_partial(where, proc, relay)
        size = partial.stat().st_size
        sshd.kill()                              # the server goes down mid-transfer
        relay.cut()
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if sshd.proc is None or sshd.proc.poll() is not None:
            sshd.start()
    return proc.returncode, out, size


def test_ssh_cut_push_and_pull_leave_nothing_that_passes_as_complete(sshd, tmp_path):
    relay = Relay(sshd.port)
    try:
        url = sshd.url("cut", port=relay.port)
        remote = sshd.remotes / "cut"
        a = clone(sshd, tmp_path / "a" / "repo")
        data = a / "transfer"
        data.mkdir()
        (data / "big.bin").write_bytes(os.urandom(BIG))
        for i in range(12):
            (data / f"small{i:02d}.bin").write_bytes(os.urandom(4096))
        dvc(sshd, a, "add", "transfer")
        ph.git(a, "add", "transfer.dvc", ".gitignore")
        ph.git(a, "commit", "-qm", "transfer data")
        add_remote(sshd, a, "cut", url)
        big_md5 = md5(data / "big.bin")

        # a push cut part-way: what the server holds under an object's name is that
        # object, the big file is only a temporary file, the directory's listing (pushed
        # last) is absent, and DVC still counts every file as to be pushed
        rc, out, size = _cut(sshd, relay, a, ["push", "-r", "cut", "transfer.dvc"], "up",
                             remote / "files" / "md5" / big_md5[:2])
        assert rc != 0 and "failed to push" in out, out[-3000:]
        assert 0 < size < BIG
        named, partial = objects(remote)
        assert big_md5 not in named and partial, (sorted(named), partial)
        assert not [h for h in named if h.endswith(".dir")]
        assert objects_that_fail_their_name(remote) == []
        status = json.loads(dvc(sshd, a, "status", "--cloud", "-r", "cut", "--json",
                                "transfer.dvc").stdout)
        assert status["transfer/big.bin"] == "new" and status["transfer"] == "new", status
        # the server back: the rerun completes it
        dvc(sshd, a, "push", "-r", "cut", "transfer.dvc")
        named, _ = objects(remote)
        assert big_md5 in named and objects_that_fail_their_name(remote) == []
        assert json.loads(dvc(sshd, a, "status", "--cloud", "-r", "cut", "--json",
                              "transfer.dvc").stdout or "{}") == {}

        # a pull cut part-way, into a fresh clone: the cache holds complete objects only
        # (the partial one's temporary file is gone), nothing is checked out
        b = clone(sshd, tmp_path / "b" / "repo", source=a)
        add_remote(sshd, b, "cut", url)
        cache = b / ".dvc" / "cache"
        rc, out, size = _cut(sshd, relay, b, ["pull", "-r", "cut", "transfer.dvc"], "down",
                             cache / "files" / "md5" / big_md5[:2])
        assert rc != 0 and "failed to pull" in out, out[-3000:]
        assert 0 < size < BIG
        named, _ = objects(cache)
        assert big_md5 not in named and objects_that_fail_their_name(cache) == []
        assert not (b / "transfer").exists()
        status = json.loads(dvc(sshd, b, "status", "--json", "transfer.dvc").stdout)
        assert status == {"transfer.dvc": [{"changed outs": {"transfer": "not in cache"}}]}
        # the server back: the rerun completes it, every file as pushed
        dvc(sshd, b, "pull", "-r", "cut", "transfer.dvc")
        assert objects_that_fail_their_name(cache) == []
        assert ph.tree_digest(b / "transfer") == ph.tree_digest(data)
        assert json.loads(dvc(sshd, b, "status", "--json", "transfer.dvc").stdout or "{}") == {}
    finally:
        relay.close()


def _cross_round(server: SSHServer, repo: Path, old: str, new: str) -> tuple[dict, dict, dict]:
    """``dvc metrics diff`` (no targets) and ``dvc params diff`` between two kept rounds'
    commits as JSON, and the revisions ``dvc plots diff`` rendered per image plot
    (``{file: {rev, ...}}``; empty where it rendered nothing)."""
    def as_json(*args) -> dict:    # the JSON DVC prints after any warning lines; {} if none
        out = dvc(server, repo, *args, "--json", check=False).stdout
        try:
            return json.loads(out[out.index("{"):])
        except ValueError:
            return {}

    m = as_json("metrics", "diff", old, new)
    p = as_json("params", "diff", old, new)
    data = as_json("plots", "diff", old, new, "--split", "-o", str(repo.parent / "plots"))
    data = data.get("data", {})
    revs = {f: {rev for r in rows for rev in r.get("revisions", [])}
            for f, rows in data.items() if f.endswith(".png") and isinstance(rows, list)}
    return m, p, revs


def test_team_remote_recipe_keeps_other_revisions_readable(sshd, tmp_path):
    """docs/REMOTES.md's recipe (the URL in .dvc/config and again in .dvc/config.local):
    every revision's config loads, so diffs between two kept rounds (neither of which
    knows the remote) show both sides' values; with the URL in .dvc/config alone they do
    not (the failure the recipe avoids)."""
    from dreamer_parity import rounds

    old, new = (rounds.rev(REPO, n) for n in ("round3-candidate", "round3-candidate-ref"))
    if any(ph.git(REPO, "cat-file", "-e", f"{c}^{{commit}}", check=False).returncode
           for c in (old, new)):
        pytest.skip("shallow clone: the kept rounds' commits are not here")
    url = sshd.url("team")
    # the recipe: the URL committed, and the URL and login in the git-ignored config.local
    a = clone(sshd, tmp_path / "a" / "repo")
    dvc(sshd, a, "remote", "add", "team", url)
    dvc(sshd, a, "remote", "modify", "--local", "team", "url", url)
    dvc(sshd, a, "remote", "modify", "--local", "team", "user", sshd.user)
    dvc(sshd, a, "remote", "modify", "--local", "team", "keyfile", str(sshd.keyfile))
    assert "keyfile" not in (a / ".dvc" / "config").read_text()
    dvc(sshd, a, "pull")
    push = dvc(sshd, a, "push", "-r", "team").stdout
    assert re.search(r"\d+ files? pushed", push), push[-2000:]
    m, p, plots = _cross_round(sshd, a, old, new)
    late = m["metrics/summary.json"]["LATE.candidate.mean"]
    assert late["old"] == pytest.approx(287.5709677419355) and \
        late["new"] == pytest.approx(285.8264516129032)
    assert len(m["metrics/summary.json"]) > 100        # every metric, no target named
    assert p["params.yaml"]["decode"] == {"old": "exact", "new": "ref"}
    assert plots and all(revs == {old, new} for revs in plots.values()), plots

    # without the URL in config.local, the older revisions' config (no `team`) does not load
    b = clone(sshd, tmp_path / "b" / "repo")
    add_remote(sshd, b, "team", url)
    m, p, plots = _cross_round(sshd, b, old, new)
    late = m.get("metrics/summary.json", {}).get("LATE.candidate.mean", {})
    assert late.get("old") is None and late.get("new") is None
    assert "decode" not in p.get("params.yaml", {})
    assert not any(revs == {old, new} for revs in plots.values()), plots

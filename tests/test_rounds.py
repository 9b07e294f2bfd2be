"""Kept rounds by name (src/dreamer_parity/rounds.py, docs/rounds/index.yaml).

A small git repository with a local DVC store is built per test: each commit holds
``params.yaml``, a pre-registration, ``dvc.lock`` (one file output and one directory
output, both in the store) and ``metrics/summary.json``.  The tests resolve names,
break one thing at a time and read what ``check`` says, move an entry with ``pin`` and
make tags; the last tests run on this repository's own index and on ``dvc metrics diff``
of two kept rounds by name in a clone.
"""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dreamer_parity import rounds

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@t", "DVC_NO_ANALYTICS": "1"}


def git(root, *args) -> str:
    r = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, env=ENV)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def put(store: Path, data: bytes, suffix: str = "") -> str:
    """Put ``data`` into the store as DVC 3 does (``files/md5/ab/cdef...[.dir]``)."""
    md5 = hashlib.md5(data).hexdigest() + suffix
    p = store / "files" / "md5" / md5[:2] / md5[2:]
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return md5


def commit_round(root: Path, name: str, summary: dict, files=(b"a", b"b")) -> str:
    """Commit a round ``name`` whose outputs are put into ``root/store``; returns the commit."""
    store = root / "store"
    (root / ".dvc").mkdir(exist_ok=True)
    (root / ".dvc" / "config").write_text("[core]\n    remote = store\n"
                                          "['remote \"store\"']\n    url = ../store\n")
    (root / "params.yaml").write_text(f"round: {name}\nseeds:\n- 0\n")
    (root / "docs" / "rounds").mkdir(parents=True, exist_ok=True)
    (root / "docs" / "rounds" / f"{name}.md").write_text("pre-registration\n")
    one = put(store, f"preflight ok {name}\n".encode())
    listing = [{"md5": put(store, d), "relpath": f"f{i}"} for i, d in enumerate(files)]
    dir_md5 = put(store, json.dumps(listing).encode(), ".dir")
    (root / "dvc.lock").write_text(
        "schema: '2.0'\nstages:\n  preflight:\n    cmd: x\n    outs:\n"
        f"    - path: results/preflight.ok\n      hash: md5\n      md5: {one}\n"
        "  run:\n    cmd: y\n    outs:\n"
        f"    - path: results/candidate\n      hash: md5\n      md5: {dir_md5}\n"
        "  compare:\n    cmd: z\n    outs:\n"
        "    - path: metrics/summary.json\n      hash: md5\n      md5: 0\n")
    (root / "metrics").mkdir(exist_ok=True)
    (root / "metrics" / "summary.json").write_text(json.dumps(summary))
    git(root, "add", "-A")
    git(root, "commit", "-qm", f"{name} {summary}")
    return git(root, "rev-parse", "HEAD")


def write_index(root: Path, entries: dict) -> None:
    lines = ["# kept rounds"]
    for name, c in entries.items():
        lines += [f"{name}:", f"  commit: '{c}'", f"  about: the round {name}"]
    p = root / rounds.INDEX
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("\n".join(lines) + "\n")


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    a = commit_round(root, "ra", {"S1.A": 1.0})
    b = commit_round(root, "rb", {"S1.A": 2.0})
    write_index(root, {"ra": a, "rb": b})
    git(root, "add", "-A")
    git(root, "commit", "-qm", "index")
    return root, a, b


def test_rev_resolves_names_and_refuses_unknown(repo):
    root, a, b = repo
    assert rounds.rev(root, "ra") == a and rounds.rev(root, "rb") == b
    with pytest.raises(rounds.RoundsError, match=r"'rz' is not a kept round .*kept: ra, rb"):
        rounds.rev(root, "rz")


def test_cli_rev_and_bad_name_exit_codes(repo):
    root, a, _ = repo
    run = [sys.executable, "-m", "dreamer_parity.rounds"]
    r = subprocess.run([*run, "rev", "ra"], cwd=root, capture_output=True, text=True)
    assert (r.returncode, r.stdout.strip()) == (0, a)
    r = subprocess.run([*run, "rev", "nope"], cwd=root, capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "nope" in r.stderr


def test_a_name_given_twice_is_refused_naming_both_entries(repo):
    """PyYAML alone keeps the second entry silently: every reader of the index refuses
    (rev, check, list, tag, pin), exit 2, one line with the line of each entry."""
    root, a, b = repo
    text = (root / rounds.INDEX).read_text()
    (root / rounds.INDEX).write_text(text + f"ra:\n  commit: '{b}'\n  about: again\n")
    with pytest.raises(rounds.RoundsError) as e:
        rounds.load_index(root)
    assert str(e.value) == (f"{rounds.INDEX}:8: round 'ra' given twice (first at line 2): a "
                            f"kept round has one entry")
    run = [sys.executable, "-m", "dreamer_parity.rounds"]
    for args in (["rev", "ra"], ["rev", "rb"], ["check"], ["list"], ["tag"], ["pin", "ra"]):
        r = subprocess.run([*run, *args], cwd=root, capture_output=True, text=True)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr == f"error: {e.value}\n" and r.stdout == "", args


@pytest.mark.parametrize("name", ["README", "index"])
def test_a_reserved_name_is_not_a_kept_round(repo, name):
    root, a, _ = repo
    (root / rounds.INDEX).write_text(f"{name}:\n  commit: '{a}'\n  about: x\n")
    with pytest.raises(rounds.RoundsError, match=f"round name '{name}' is reserved"):
        rounds.load_index(root)


def _drop_from_store_and_commit(root: Path, md5: str) -> str:
    """A new commit of the current round whose store lacks the object ``md5``."""
    (root / "store" / "files" / "md5" / md5[:2] / md5[2:]).unlink()
    (root / "metrics" / "summary.json").write_text('{"S1.A": 3.0}')
    git(root, "add", "-A")
    git(root, "commit", "-qm", f"drop {md5}")
    return git(root, "rev-parse", "HEAD")


def test_check_passes_then_names_each_break(repo):
    root, a, b = repo
    assert rounds.check(root) == []
    # the store at HEAD loses an output of round rb: rb is restored from its own commit,
    # whose store still holds it
    lock = git(root, "show", f"{b}:dvc.lock")
    md5 = lock.split("md5: ")[1].split()[0]
    c = _drop_from_store_and_commit(root, md5)
    assert rounds.check(root, ["ra"]) == []
    assert rounds.check(root, ["rb"]) == [f"rb ({b[:12]}): newer metrics for this round at "
                                          f"{c[:12]} (python -m dreamer_parity.rounds pin rb)"]
    # a round kept at a commit whose own store lacks the object no longer restores
    write_index(root, {"ra": a, "rb": c})
    got = rounds.check(root, ["rb"])
    assert got == [f"rb ({c[:12]}): preflight: results/preflight.ok: {md5} not in the store"]


def test_check_finds_a_missing_file_of_a_directory_output(repo):
    root, a, b = repo
    f1 = hashlib.md5(b"b").hexdigest()
    c = _drop_from_store_and_commit(root, f1)
    write_index(root, {"ra": a, "rb": c})
    # ra's commit still holds the file; the entry at c does not
    assert rounds.check(root) == [f"rb ({c[:12]}): run: results/candidate: 1 file(s) not "
                                  f"in the store, first f1"]


def test_check_reads_the_store_of_each_commit_not_the_workspace(repo):
    root, a, b = repo
    import shutil
    shutil.rmtree(root / "store")
    assert rounds.check(root) == []
    # a commit whose remote is outside the repository cannot be checked from git
    (root / ".dvc" / "config").write_text("[core]\n    remote = s\n['remote \"s\"']\n    url = ../../elsewhere\n")
    (root / "metrics" / "summary.json").write_text('{"S1.A": 5.0}')
    git(root, "add", "-A")
    git(root, "commit", "-qm", "remote elsewhere")
    c = git(root, "rev-parse", "HEAD")
    write_index(root, {"ra": a, "rb": c})
    assert rounds.check(root, ["rb"]) == [
        f"rb ({c[:12]}): {stage}: {path}: the default DVC remote is not a directory inside the "
        f"repository" for stage, path in (("preflight", "results/preflight.ok"),
                                          ("run", "results/candidate"))]


def test_check_refuses_wrong_round_and_foreign_commit(repo, tmp_path):
    root, a, b = repo
    write_index(root, {"ra": b})                       # rb's commit filed under ra
    got = rounds.check(root)
    assert f"ra ({b[:12]}): params.yaml there names round 'rb'" in got
    assert f"ra ({b[:12]}): no docs/rounds/ra.md (pre-registration) in the commit" not in got
    write_index(root, {"ra": "0" * 40})
    assert rounds.check(root) == [f"ra ({'0' * 12}): no such commit in this repository"]


def test_newer_metrics_make_an_entry_stale_and_pin_moves_it(repo):
    root, a, b = repo
    c = commit_round(root, "ra", {"S1.A": 1.5})       # round ra's compare rerun
    assert rounds.latest(root, "ra") == c
    assert rounds.check(root, ["ra"]) == [
        f"ra ({a[:12]}): newer metrics for this round at {c[:12]} "
        "(python -m dreamer_parity.rounds pin ra)"]
    text_before = (root / rounds.INDEX).read_text()
    assert rounds.pin(root, "ra") == c
    text = (root / rounds.INDEX).read_text()
    assert text == text_before.replace(a, c)            # one line changed, comments kept
    assert rounds.check(root) == []


def test_rebased_away_commit_is_not_in_history(repo):
    root, a, b = repo
    git(root, "checkout", "-q", "-b", "side", a)
    s = commit_round(root, "ra", {"S1.A": 9.0})
    git(root, "checkout", "-q", "main")
    write_index(root, {"ra": s})
    got = rounds.check(root)
    assert got[0] == (f"ra ({s[:12]}): not in HEAD's history (after a rebase: "
                      "python -m dreamer_parity.rounds pin ra)")


def test_tags_made_kept_and_moved_only_with_force(repo):
    root, a, b = repo
    assert rounds.make_tags(root) == [f"ra: tag made at {a[:12]}", f"rb: tag made at {b[:12]}"]
    assert git(root, "rev-parse", "ra^{commit}") == a
    assert rounds.make_tags(root)[0] == f"ra: tag already at {a[:12]}"
    git(root, "tag", "-f", "ra", b)
    assert f"ra ({a[:12]}): tag ra points at {b[:12]} (make round-tags FORCE=1)" in rounds.check(root)
    with pytest.raises(rounds.RoundsError, match="tag ra points at"):
        rounds.make_tags(root)
    assert rounds.make_tags(root, force=True)[0] == f"ra: tag moved to {a[:12]}"
    assert git(root, "rev-parse", "ra^{commit}") == a


@pytest.mark.parametrize("text, match", [
    ("ra:\n  commit: abc\n  about: x\n", r"ra.commit: must be 40 lower-case hex"),
    ("ra:\n  commit: " + "a" * 40 + "\n", r"ra: needs exactly the keys \['about', 'commit'\]"),
    ("'r a':\n  commit: " + "a" * 40 + "\n  about: x\n", r"'r a' is not a plain name"),
    ("- ra\n", "must be a mapping"),
    ("ra: [\n", r"index\.yaml:2: <root>: invalid YAML"),
])
def test_malformed_index_is_one_line_naming_the_key(repo, text, match):
    root, _, _ = repo
    (root / rounds.INDEX).write_text(text)
    with pytest.raises(rounds.RoundsError, match=match) as e:
        rounds.load_index(root)
    assert "\n" not in str(e.value)


def test_this_repository_index_resolves_and_restores():
    """The committed index: every kept round is in HEAD's history, names its round, and
    the store of its commit holds every output its dvc.lock records."""
    if git(REPO, "rev-parse", "--is-shallow-repository") == "true":
        pytest.skip("shallow clone: the kept rounds' commits are not here (git fetch --unshallow)")
    idx = rounds.load_index(REPO)
    assert {"round3-candidate", "round1-reference-s0", "round3-candidate-ref",
            "round3-candidate-ref-vs-exact", "round3-10seeds"} <= set(idx)
    assert rounds.check(REPO) == []


def _assert_summary_diff(dvc, clone, old_round, new_round, want):
    """`dvc metrics diff <old_round> <new_round>` of metrics/summary.json in ``clone``;
    asserts each key's (old, new) of ``want`` to 1e-4 and returns the whole diff."""
    r = subprocess.run([str(dvc), "metrics", "diff", old_round, new_round, "--json",
                        "--targets", "metrics/summary.json"], cwd=clone, capture_output=True,
                       text=True, env=ENV)
    assert r.returncode == 0, r.stderr
    diff = json.loads(r.stdout)["metrics/summary.json"]
    for key, (old, new) in want.items():
        assert (diff[key]["old"], diff[key]["new"]) == \
            (pytest.approx(old, abs=1e-4), pytest.approx(new, abs=1e-4)), key
    return diff


def test_dvc_metrics_diff_by_round_name_in_a_clone(tmp_path):
    """`make round-tags` then `dvc metrics diff <round> <round>` in a fresh clone lists
    the candidate's S1, S2 and LATE and the entropy windows of round 3."""
    dvc = REPO / ".venv" / "bin" / "dvc"
    if not dvc.exists():
        pytest.skip("no .venv/bin/dvc: run `make venv`")
    if git(REPO, "rev-parse", "--is-shallow-repository") == "true":
        pytest.skip("shallow clone: the kept rounds' commits are not here (git fetch --unshallow)")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--no-checkout", str(REPO), str(clone))
    git(clone, "checkout", "-q", git(REPO, "rev-parse", "HEAD"))
    # a clone carries whatever tags its origin has: start from none, as on a host that drops them
    tags = [t for t in git(clone, "tag", "--list").split() if t in rounds.load_index(clone)]
    if tags:
        git(clone, "tag", "-d", *tags)
    assert "round3-candidate: tag made at" in "\n".join(rounds.make_tags(clone))
    r = subprocess.run([str(dvc), "metrics", "diff", "round1-reference-s0", "round3-candidate",
                        "--json"], cwd=clone, capture_output=True, text=True, env=ENV)
    assert r.returncode == 0, r.stderr
    diff = json.loads(r.stdout)["metrics/summary.json"]
    assert diff["S2.candidate.s0"]["new"] == pytest.approx(123.32222222222221)
    assert diff["LATE.welch_p"]["new"] == pytest.approx(0.38581076767303435)
    assert diff["entropy.candidate.w4000.lo"]["new"] == pytest.approx(0.29002357482910157)
    assert diff["S1.candidate.s0"]["old"] is not None
    # the two candidate rounds of the D22 A/B (decode: exact, then decode: ref), by name:
    # numeric S1, S2, LATE and entropy windows of the candidate on both sides
    _assert_summary_diff(dvc, clone, "round3-candidate", "round3-candidate-ref", {
        "LATE.candidate.mean": (287.5709677, 285.8264516), "S1.candidate.mean": (254.44, 239.92),
        "S2.candidate.mean": (122.3499, 120.6159), "entropy.candidate.w4000.mean": (0.30618, 0.36450),
        "entropy.candidate.w12000.mean": (0.22364, 0.23245)})
    # round 3 at 5 seeds against round 3 at 10 seeds per side (#42): the means, the TOST
    # interval narrowing, and seeds that exist only in the larger round
    ten = _assert_summary_diff(dvc, clone, "round3-candidate", "round3-10seeds", {
        "LATE.candidate.mean": (287.5709677, 289.8170968), "LATE.reference.mean": (312.6658065, 309.2583871),
        "addition.tost.ci_lo": (-77.1923466, -62.0594038), "addition.tost.ci_hi": (27.0026692, 23.1768232)})
    assert ten["LATE.candidate.s9"]["old"] is None
    assert ten["LATE.candidate.s9"]["new"] == pytest.approx(325.8451613, abs=1e-4)
    assert ten["halves.reference.agree"] == {"old": None, "new": True}
    # by commit, where tags were dropped: the same numbers
    c = rounds.rev(clone, "round3-candidate")
    git(clone, "tag", "-d", *rounds.load_index(clone))
    r3 = subprocess.run([str(dvc), "metrics", "diff", c, "HEAD", "--json", "--all"], cwd=clone,
                        capture_output=True, text=True, env=ENV)
    assert r3.returncode == 0, r3.stderr
    assert json.loads(r3.stdout)["metrics/summary.json"]["S2.candidate.s0"]["old"] == \
        pytest.approx(123.32222222222221)


def test_rounds_table_prints_every_kept_round_within_120_columns():
    """`python -m dreamer_parity.rounds table`: one line per kept round, read from each
    round's committed summary.json through git, the numbers README quotes."""
    if git(REPO, "rev-parse", "--is-shallow-repository") == "true":
        pytest.skip("shallow clone: the kept rounds' commits are not here (git fetch --unshallow)")
    r = subprocess.run([sys.executable, "-m", "dreamer_parity.rounds", "table"], cwd=REPO,
                       capture_output=True, text=True, env=ENV)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines == rounds.table(REPO)
    idx = rounds.load_index(REPO)
    assert len(lines) == 1 + len(idx) and max(len(x) for x in lines) <= 120
    assert lines[0].split()[:4] == ["round", "decode", "stat", "n"]
    rows = {x.split()[0]: x.split() for x in lines[1:]}
    assert list(rows) == list(idx)
    assert rows["round3-candidate"] == ["round3-candidate", "exact", "LATE", "5/5", "287.6",
                                        "312.7", "-25.1", "[-77.2,", "27.0]", "0.386", "pass",
                                        "inconclusive"]
    assert rows["round3-candidate-ref"][1:6] == ["ref", "LATE", "5/5", "285.8", "312.7"]
    assert rows["round3-ref-tpu-windows"][3] == "10/5"
    assert rows["round3-ref-tpu"][-1] == "deficit"
    # round 1 pre-registers S1 and has one seed a side: no interval, no Welch test, no gate
    assert rows["round1-reference-s0"] == ["round1-reference-s0", "exact", "S1", "1/1", "229.4",
                                           "357.6", "-128.2", "-", "-", "no", "gate", "-"]


def test_headline_metrics_are_the_summary_s_and_the_only_dvc_metrics():
    """metrics/headline.json at HEAD is metrics_out.headline of HEAD's summary.json, and
    dvc.yaml declares it as the only metrics file (the full summary stays a plain output)."""
    import yaml

    from dreamer_parity.analysis import metrics_out
    summary = json.loads((REPO / "metrics" / "summary.json").read_text())
    head = json.loads((REPO / "metrics" / "headline.json").read_text())
    assert head == metrics_out.headline(summary)
    assert set(head) == set(metrics_out.HEADLINE_KEYS)
    assert (head["statistic"], head["candidate.n"], head["reference.n"], head["gate"],
            head["reading"]) == ("LATE", 5, 5, "pass", "inconclusive")
    assert head["ci90.lo"] == summary["addition.tost.ci_lo"] == pytest.approx(-77.19234660)
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    declared = [next(iter(m)) if isinstance(m, dict) else m
                for st in stages.values() for m in (st.get("do", st).get("metrics") or [])]
    assert declared == ["metrics/headline.json"]
    # a summary without the keys (a round that failed early) still gives every key
    bare = metrics_out.headline({})
    assert set(bare) == set(metrics_out.HEADLINE_KEYS) and bare["candidate.mean"] is None
    assert (bare["statistic"], bare["candidate.n"], bare["gate"]) == ("LATE", 0, "no gate")


def test_dvc_exp_show_fits_80_columns():
    """`dvc exp show --csv` at HEAD: its own columns, the dependencies, the parameters and
    the headline metrics, at most 80 columns."""
    import csv
    import io
    dvc = REPO / ".venv" / "bin" / "dvc"
    if not dvc.exists():
        pytest.skip("no .venv/bin/dvc: run `make venv`")
    r = subprocess.run([str(dvc), "exp", "show", "--csv"], cwd=REPO, capture_output=True,
                       text=True, env=ENV)
    assert r.returncode == 0, r.stderr
    header = next(csv.reader(io.StringIO(r.stdout)))
    assert len(header) <= 80, len(header)
    assert {"candidate.mean", "reference.mean", "ci90.lo", "ci90.hi", "reading", "decode"} <= set(header)
    assert not any(h.startswith(("LATE.", "entropy.", "lockstep_")) for h in header)

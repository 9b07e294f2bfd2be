"""Each kind of bad input is refused with one line, or reported, and a refusal loses nothing.

A small repository stand-in (round 3's params.yaml and pre-registration, the published
round-3 directory as the reference, a synthetic candidate on round 3's grid) is analysed
once by ``python -m dreamer_parity.pipeline compare``; every test copies it, changes one
input, runs the same command and checks: exit 2 and one stderr line of at most 400
characters naming the file / line / key (refusals), or the report, summary and console
line saying what is missing or withheld (the two rows whose remedy is to report); and
that every file other than the changed input is byte-identical after a refusal.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dreamer_parity import params as params_mod
from dreamer_parity import records
from dreamer_parity.analysis import metrics_out

import synthetic  # tests/synthetic.py

REPO = Path(__file__).resolve().parents[1]
ROUND3 = REPO / "data" / "published" / "round3"
PARAMS_TEXT = """round: round3-candidate
decode: exact
profile: full
seeds:
- 0
- 1
- 2
- 3
- 4
rows: 24000
eval_every: 400
eval_episodes: 10
reference:
  decode: exact
  sampler: per_run
  jax: 0.4.26
  platform: cpu
  precision: default
  source: data/published/round3
gate:
  statistic: late
  learns: true
  mean_min:
  welch_p_min: 0.05
  entropy_overlap_rows:
stats:
  s1_rows:
  - 16000
  - 18000
  - 20000
  late_rows:
  - 12000
  - 24000
  good_return: 400
  concordance_rows:
  - 20000
  - 24000
  concordance_range:
  - 16000
  - 24000
  equivalence_margin: 0.1
  failed_rule: zero
  signature_rows: []
  persistence_rows: []
candidate:
  source: run
  seeds:
"""
LAST = len(PARAMS_TEXT.splitlines())
#: Longest error line accepted (characters, without "error: " and the newline).
MAX_LINE = 400


def _run(root: Path, *args: str) -> tuple[int, str, str, float]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(REPO / "src")}
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "dreamer_parity.pipeline", *args], cwd=root,
                       env=env, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t0


def _hashes(root: Path, skip=()) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()
            and str(p.relative_to(root)) not in skip}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo")
    (root / "params.yaml").write_text(PARAMS_TEXT)
    (root / "docs" / "rounds").mkdir(parents=True)
    (root / "docs" / "rounds" / "round3-candidate.md").write_text("# round 3 (test copy)\n")
    shutil.copytree(ROUND3, root / "data" / "published" / "round3")
    params = params_mod.load(root / "params.yaml")
    for s in params["seeds"]:
        synthetic.write_run(root / "results" / "candidate", "candidate", s, params)
    rc, out, err, _ = _run(root, "compare")
    assert rc == 0, err
    return root


@pytest.fixture
def repo(base, tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(base, root)
    return root


def _refused(root: Path, changed: set[str], *names: str, cmd: str = "compare") -> str:
    """Run ``cmd``; require exit 2, one line naming ``names``, nothing else changed."""
    before = _hashes(root, changed)
    rc, out, err, seconds = _run(root, cmd, *(["--out", "results/preflight.ok"]
                                              if cmd == "preflight" else []))
    assert rc == 2, (rc, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and len(lines[0]) - len("error: ") <= MAX_LINE, err
    for n in names:
        assert n in lines[0], (n, lines[0])
    after = _hashes(root, changed)
    assert after == before, sorted(k for k in set(after) | set(before)
                                   if after.get(k) != before.get(k))
    assert seconds < 30, seconds
    print(f"refused in {seconds:.2f} s: {lines[0]}")
    return lines[0]


def _edit_params(root: Path, fn) -> set[str]:
    path = root / "params.yaml"
    path.write_text(fn(path.read_text()))
    return {"params.yaml"}


# ------------------------------------------------------------------ params.yaml rows

@pytest.mark.parametrize("cmd", ["compare", "preflight"])
def test_key_given_twice_is_refused(repo, cmd):
    changed = _edit_params(repo, lambda t: t + "decode: ref\n")
    line = _refused(repo, changed, "params: decode: params.yaml:", "given twice (first at line 2)",
                    cmd=cmd)
    assert line.startswith(f"error: params: decode: params.yaml:{LAST + 1}:")


def test_nested_key_given_twice_is_refused(repo):
    changed = _edit_params(repo, lambda t: t.replace("  sampler: per_run\n",
                                                     "  sampler: per_run\n  sampler: stock\n"))
    _refused(repo, changed, "reference.sampler", "params.yaml:16", "given twice (first at line 15)")


def test_dotted_top_level_key_is_refused(repo):
    changed = _edit_params(repo, lambda t: t + '"stats.s1_rows": [400]\n')
    _refused(repo, changed, f"params: stats.s1_rows: params.yaml:{LAST + 1}: a dotted key")


def test_dotted_key_in_a_mapping_is_refused_by_validate():
    with pytest.raises(params_mod.ParamsError, match=r"^params: stats\.s1_rows: a dotted key"):
        params_mod.validate({"stats.s1_rows": [20000]})


@pytest.mark.parametrize("value", ["a" * 300, "a" * 65, "../x", "x/y", "x.y", "round 3", ""])
def test_round_that_is_not_a_plain_name_is_refused(repo, value):
    changed = _edit_params(repo, lambda t: t.replace("round: round3-candidate",
                                                     f"round: '{value}'"))
    line = _refused(repo, changed, "params: round:")
    assert "letters, digits" in line or "expected a string" in line


@pytest.mark.parametrize("value,what", [
    ("../round3", "through '..'"), ("data/../../x", "through '..'"),
    ("/tmp/x", "is absolute"), ("~/x", "is absolute"), ("a\\\\b", "backslash"),
    ("x" * 300, "path of 300 characters")])
def test_source_outside_the_repository_is_refused(repo, value, what):
    changed = _edit_params(repo, lambda t: t.replace("source: data/published/round3",
                                                     f'source: "{value}"'))
    _refused(repo, changed, "params: reference.source:", what)


def test_source_through_a_symlink_leading_out_is_refused(repo, tmp_path):
    outside = tmp_path / "outside"
    shutil.copytree(repo / "data" / "published" / "round3", outside)
    (repo / "data" / "elsewhere").symlink_to(outside, target_is_directory=True)
    changed = _edit_params(repo, lambda t: t.replace("source: data/published/round3",
                                                     "source: data/elsewhere"))
    for cmd in ("compare", "preflight"):
        _refused(repo, changed, "params: reference.source: 'data/elsewhere' resolves outside",
                 cmd=cmd)


def test_repo_path_resolves_inside(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "up").symlink_to(tmp_path / "a", target_is_directory=True)
    assert params_mod.repo_path("k.source", "a/b", tmp_path) == tmp_path / "a" / "b"
    assert params_mod.repo_path("k.source", "a/up/b", tmp_path) == tmp_path / "a" / "up" / "b"
    assert params_mod.repo_path("k.source", "a/./b") == Path("a/b")
    (tmp_path / "a" / "loop").symlink_to(tmp_path / "a" / "loop")
    with pytest.raises(params_mod.ParamsError, match=r"^params: k\.source: 'a/loop'"):
        params_mod.repo_path("k.source", "a/loop", tmp_path)


ALIAS_BOMB = ("a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
              "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c]\n"
              "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e]\n"
              "decode: [*f, *f, *f, *f, *f, *f, *f, *f, *f]\n")


@pytest.mark.parametrize("tail,what", [
    (ALIAS_BOMB, "anchor &a: aliases and anchors are not accepted"),
    ("x: &big 1\n", "anchor &big"),
    ("stats2:\n  <<: {good_return: 1}\n", "merge key '<<'"),
    ("? [a, b]\n: 1\n", "a key that is a list or mapping"),
    ("deep: " + "[" * 12 + "]" * 12 + "\n", "nested deeper than 8 levels"),
])
def test_yaml_structure_refused_before_expansion(repo, tail, what):
    changed = _edit_params(repo, lambda t: t + tail)
    line = _refused(repo, changed, what, "params.yaml:")
    assert len(line) < 200


def test_alias_bomb_is_refused_at_once(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(ALIAS_BOMB)
    t0 = time.monotonic()
    with pytest.raises(params_mod.ParamsError, match=r"^params: <root>: params.yaml:1: anchor"):
        params_mod.load(path)
    assert time.monotonic() - t0 < 0.5


@pytest.mark.parametrize("value", ["x" * 60000, "[" + ", ".join(["1"] * 20000) + "]"])
def test_long_value_gives_a_short_line(repo, value):
    changed = _edit_params(repo, lambda t: t.replace("decode: exact\n", f"decode: {value}\n", 1))
    line = _refused(repo, changed, "params: decode:")
    assert "chars)" in line


def test_params_file_over_the_size_bound_is_refused(repo):
    changed = _edit_params(repo, lambda t: t + "#" * params_mod.MAX_FILE_BYTES + "\n")
    _refused(repo, changed, "params: <root>: params.yaml: larger than 65536 bytes")


def test_error_lines_are_bounded():
    e = params_mod.ParamsError("k" * 1000, "m" * 5000)
    assert len(str(e)) <= params_mod.MESSAGE_CHARS and "\n" not in str(e)
    assert params_mod.quote("x" * 1000).endswith("...(1002 chars)")
    assert len(params_mod.quote(list(range(10 ** 6)))) < 120


# ------------------------------------------------------------------ a run's files

def _cand(root: Path, seed: int) -> Path:
    return root / "results" / "candidate" / f"s{seed}"


def _rewrite_run_json(d: Path, fn, reclose: bool = True) -> set[str]:
    run = json.loads((d / "run.json").read_text())
    done = json.loads((d / records.DONE).read_text())
    records.write_json(d / "run.json", fn(run))
    if reclose:   # the runner would have closed this run.json
        records.write_done(d, done["status"], done.get("reason"))
    rel = d.relative_to(d.parents[2])
    return {str(rel / "run.json"), str(rel / records.DONE)}


def test_failed_done_beside_a_complete_run_is_refused(repo):
    d = _cand(repo, 1)
    records.write_done(d, "failed", "non-finite loss")
    _refused(repo, {"results/candidate/s1/DONE.json"}, "results/candidate/s1/DONE.json",
             "says failed (non-finite loss) beside a complete run")


def test_run_json_of_another_seed_is_refused(repo):
    changed = _rewrite_run_json(_cand(repo, 1), lambda r: {**r, "seed": 3})
    _refused(repo, changed, "results/candidate/s1/run.json: seed 3, expected 1")


def test_run_json_of_another_side_is_refused(repo):
    changed = _rewrite_run_json(_cand(repo, 2), lambda r: {**r, "side": "reference"})
    _refused(repo, changed, "results/candidate/s2/run.json: side 'reference', expected "
                            "'candidate'")


@pytest.mark.parametrize("key,value,shown", [
    ("rows", 20000, "rows 20000 != 24000"), ("eval_every", 800, "eval_every 800 != 400"),
    ("eval_episodes", 5, "eval_episodes 5 != 10"), ("profile", "smoke", "profile 'smoke' != 'full'"),
    ("decode", "ref", "decode 'ref' != 'exact'")])
def test_run_json_with_other_protocol_parameters_is_refused(repo, key, value, shown):
    changed = _rewrite_run_json(_cand(repo, 0), lambda r: {**r, "args": {**r["args"], key: value}})
    _refused(repo, changed, "results/candidate/s0/run.json:", shown, "other parameters")


def test_done_that_closes_another_run_json_is_refused(repo):
    changed = _rewrite_run_json(_cand(repo, 3), lambda r: {**r, "note": "edited"}, reclose=False)
    _refused(repo, changed, "results/candidate/s3/DONE.json: run_sha256 is not the SHA-256")


def test_done_naming_another_seed_is_refused(repo):
    d = _cand(repo, 4)
    done = json.loads((d / records.DONE).read_text())
    records.write_json(d / records.DONE, {**done, "seed": 0})
    _refused(repo, {"results/candidate/s4/DONE.json"}, "results/candidate/s4/DONE.json: seed 0, "
                                                       "expected 4")


def test_done_naming_its_run_in_part_is_refused(repo):
    d = _cand(repo, 4)
    done = json.loads((d / records.DONE).read_text())
    del done["run_sha256"]
    records.write_json(d / records.DONE, done)
    _refused(repo, {"results/candidate/s4/DONE.json"}, "names its run only in part")


def test_missing_completion_marker_is_refused(repo):
    (_cand(repo, 2) / records.DONE).unlink()
    _refused(repo, {"results/candidate/s2/DONE.json"}, "s2/DONE.json: missing completion marker")


def test_write_done_needs_run_json_first(tmp_path):
    with pytest.raises(records.RecordError, match="run.json: missing"):
        records.write_done(tmp_path, "ok")
    assert not (tmp_path / records.DONE).exists()


def test_legacy_done_is_a_flag_and_changes_no_number(repo):
    summary = json.loads((repo / "metrics" / "summary.json").read_text())
    for s in (0, 3):
        records.write_json(_cand(repo, s) / records.DONE, {"status": "ok"})
    rc, out, err, _ = _run(repo, "compare")
    assert rc == 0, err
    legacy = json.loads((repo / "metrics" / "summary.json").read_text())
    assert legacy["checks.flagged"] == summary["checks.flagged"] + 2
    assert legacy["checks.passed"] == summary["checks.passed"] - 2
    moved = {k for k in summary if legacy.get(k) != summary[k]}
    assert moved == {"checks.flagged", "checks.passed"}, moved
    assert err.count("names no run (status only, the older marker)") == 2


# ------------------------------------- every file a round reads, held back (issue #57)

@pytest.mark.parametrize("value", ["README", "index", "Readme"])
def test_a_round_name_names_a_pre_registration(repo, value):
    (repo / "docs" / "rounds" / "README.md").write_text("# Pre-registrations\n")
    changed = _edit_params(repo, lambda t: t.replace("round: round3-candidate",
                                                     f"round: {value}"))
    for cmd in ("preflight", "compare"):
        _refused(repo, changed, f"params: round: '{value}' names no pre-registration", cmd=cmd)


@pytest.mark.parametrize("edit, shown", [
    (lambda t: "", "params: <root>: params.yaml: empty; see README"),
    (lambda t: "# nothing but a comment\n", "params: <root>: params.yaml: empty; see README"),
    (lambda t: t.replace("candidate:\n  source: run\n  seeds:\n", ""),
     "params: candidate.source: missing from params.yaml"),
    (lambda t: t.replace("  source: run\n  seeds:\n", "  source: run\n"),
     "params: candidate.seeds: missing from params.yaml"),
    (lambda t: t.replace("  signature_rows: []\n", ""),
     "params: stats.signature_rows: missing from params.yaml"),
    (lambda t: t.replace("rows: 24000", "rows: 16000000000").replace("eval_every: 400",
                                                                       "eval_every: 16"),
     "params: rows: 16000000000 is over 24000, the protocol's largest round"),
    (lambda t: t.replace("eval_episodes: 10", "eval_episodes: 1000000000"),
     "params: eval_episodes: 1000000000 is over 100"),
])
def test_params_never_filled_with_defaults_nor_absurd(repo, edit, shown):
    changed = _edit_params(repo, edit)
    for cmd in ("preflight", "compare"):
        _refused(repo, changed, shown, cmd=cmd)


def _keep_candidate(repo: Path, check: bool = False) -> None:
    """The candidate's runs kept as data/runs/c (manifests written by keep) and named by
    candidate.source (with ``check``: compare accepts them as they are)."""
    from dreamer_parity import keep

    for s in range(5):
        keep.keep(_cand(repo, s), repo / "data" / "runs" / "c")
    _edit_params(repo, lambda t: t.replace("candidate:\n  source: run",
                                           "candidate:\n  source: data/runs/c"))
    if check:
        rc, out, err, _ = _run(repo, "compare")
        assert rc == 0, err


def _gz_edit(path: Path, fn) -> None:
    import gzip

    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    lines = fn(lines)
    path.write_bytes(records.gzip_bytes("".join(x + "\n" for x in lines).encode()))


def _return_in_record(line: str, value) -> str:
    o = json.loads(line)
    o["eval_returns"][0] = value
    o["eval_mean"] = sum(o["eval_returns"]) / len(o["eval_returns"])
    return json.dumps(o)


def test_a_kept_value_changed_in_range_is_refused_by_its_manifest(repo):
    _keep_candidate(repo, check=True)
    d = repo / "data" / "runs" / "c" / "s2"
    # one evaluation return changed by one step, the mean recomputed: every check but the
    # manifest would accept it
    _gz_edit(d / "records.jsonl.gz", lambda ls: ls[:30] + [
        _return_in_record(ls[30], json.loads(ls[30])["eval_returns"][0] - 1)] + ls[31:])
    _refused(repo, {"data/runs/c/s2/records.jsonl.gz"}, "data/runs/c/s2/records.jsonl.gz: its "
             "SHA-256 is not the one data/runs/c/s2/MANIFEST.json records")
    _refused(repo, {"data/runs/c/s2/records.jsonl.gz"}, "data/runs/c/s2/records.jsonl.gz",
             cmd="preflight")


@pytest.mark.parametrize("value, shown", [
    (600, "field 'eval_returns' holds 600, outside CartPole-v1's returns: whole numbers in "
          "[1, 500]"),
    (1e308, "field 'eval_"),    # eval_mean comes first in the line: the first number past
    (12.5, "field 'eval_returns' holds 12.5, outside")])
def test_a_kept_value_outside_the_environment_is_refused_naming_file_line_field(repo, value,
                                                                                 shown):
    import synthetic as syn

    _keep_candidate(repo)
    d = repo / "data" / "runs" / "c" / "s1"
    _gz_edit(d / "records.jsonl.gz",
             lambda ls: ls[:4] + [_return_in_record(ls[4], value)] + ls[5:])
    syn.reseal(d)   # the manifest rewritten too: the ranges still refuse it
    line = _refused(repo, {"data/runs/c/s1/records.jsonl.gz", "data/runs/c/s1/MANIFEST.json"},
                    f"data/runs/c/s1/records.jsonl.gz:5: {shown}")
    if value == 1e308:       # the bound of every number read, before any sum of them
        assert line.endswith("holds 1e+307, outside +-1e+30 (the bound of every number read)")


def _pub(repo: Path) -> Path:
    return repo / "data" / "published" / "round3"


def _published_edit(repo: Path, rel: str, data: bytes, reseal: bool = True) -> set[str]:
    (_pub(repo) / rel).write_bytes(data)
    if reseal:
        synthetic.reseal(_pub(repo))
    return {f"data/published/round3/{rel}", "data/published/round3/MANIFEST.json"}


def test_a_published_value_changed_in_range_is_refused_by_the_manifest(repo):
    path = _pub(repo) / "ref_s1" / "evals.jsonl"
    lines = path.read_text().splitlines()
    o = json.loads(lines[9])
    o["returns"][0] -= 1
    o["mean"] = sum(o["returns"]) / len(o["returns"])
    lines[9] = json.dumps(o)
    changed = _published_edit(repo, "ref_s1/evals.jsonl",
                              "".join(x + "\n" for x in lines).encode(), reseal=False)
    for cmd in ("preflight", "compare"):
        _refused(repo, changed, "data/published/round3/ref_s1/evals.jsonl: its SHA-256 is not "
                                "the one data/published/round3/MANIFEST.json records", cmd=cmd)


@pytest.mark.parametrize("rel, edit, shown", [
    # the study's candidate logged a mean only: a mean of 1e308 is outside the returns' range
    ("ajax/s0/evals.jsonl", lambda ls: [ls[0].replace('"mean": ', '"mean": 1e308, "x": ')]
     + ls[1:], "ajax/s0/evals.jsonl:1: field 'mean' holds 1e+308, outside +-1e+30"),
    # consistent returns of 1e308 (their mean too): no sum overflows into a traceback
    ("ref_s2/evals.jsonl", lambda ls: ls[:6] + [json.dumps({
        **json.loads(ls[6]), "returns": [1e308] * 10, "mean": 1e308})] + ls[7:],
     "ref_s2/evals.jsonl:7: field 'returns[0]' holds 1e+308, outside +-1e+30"),
    ("ref_s0/run_args.json", lambda ls: ls[:3] + ["  \"rows\": 24000,,"] + ls[4:],
     "ref_s0/run_args.json:4: invalid JSON"),
    ("launch_info.txt", lambda ls: ls[:2] + ["load: \udcff"] + ls[3:],
     "launch_info.txt:3: not UTF-8 text (byte"),
    ("ajax/config.json", lambda ls: ["["] + ls[1:], "ajax/config.json:"),
])
def test_a_published_file_resealed_but_malformed_is_refused_in_one_line(repo, rel, edit, shown):
    path = _pub(repo) / rel
    lines = edit(path.read_text().splitlines())
    data = "".join(x + "\n" for x in lines).encode("utf-8", "surrogateescape")
    _refused(repo, _published_edit(repo, rel, data), shown)


def _dev_zero(p: Path):
    p.unlink()
    p.symlink_to("/dev/zero")


def _directory(p: Path):
    p.unlink()
    p.mkdir()


def _fifo(p: Path):
    p.unlink()
    os.mkfifo(p)


def _sparse(p: Path):
    with open(p, "r+b") as f:
        f.truncate(2 * 10 ** 9)


def _outside(p: Path):
    import tempfile

    target = Path(tempfile.mkdtemp()) / p.name
    target.write_bytes(p.read_bytes())
    p.unlink()
    p.symlink_to(target)


@pytest.mark.parametrize("rel, damage, shown", [
    ("results/candidate/s0/DONE.json", _directory, "DONE.json: not a regular file but a "
                                                   "directory"),
    ("results/candidate/s1/records.jsonl", _dev_zero, "records.jsonl: not a regular file but "
                                                      "a character device"),
    ("results/candidate/s2/episodes.jsonl", _fifo, "episodes.jsonl: not a regular file but a "
                                                   "fifo"),
    ("results/candidate/s3/records.jsonl", _sparse, "records.jsonl: larger than 4194304 bytes "
                                                    "(2000000000 bytes"),
    ("results/candidate/s4/run.json", _outside, "run.json: resolves outside the repository"),
    ("docs/rounds/round3-candidate.md", _directory, "params: round: docs/rounds/"
                                                    "round3-candidate.md: not a regular file"),
])
def test_a_file_of_another_type_or_size_is_refused_before_reading(repo, rel, damage, shown):
    damage(repo / rel)
    for cmd in ("compare", "preflight") if rel.startswith("docs") else ("compare",):
        _refused(repo, {rel}, shown, cmd=cmd)


# ------------------------------------------------------------------ reported, not refused

def test_failed_check_withholds_the_gate_verdict(repo):
    summary = json.loads((repo / "metrics" / "summary.json").read_text())
    assert summary["gate.pass"] is not None and summary["gate.verdict"] in ("pass", "fail")
    assert summary["gate.withheld"] is False
    _rewrite_run_json(_cand(repo, 2), lambda r: {**r, "provenance": {}})   # no commit: FAIL
    rc, out, err, _ = _run(repo, "compare")
    assert rc == 1, err
    s = json.loads((repo / "metrics" / "summary.json").read_text())
    assert s["checks.failed"] == 1
    assert s["gate.pass"] is None and s["gate.verdict"] == "no verdict"
    assert s["gate.withheld"] is True
    assert "provenance (candidate s2)" in s["gate.pass.reason"]
    assert metrics_out.missing_reasons(s) == []
    for k in ("LATE.A", "S1.A", "gate.learns.value"):
        assert s[k] == summary[k], k            # the numbers stay; only the verdict goes
    report = (repo / "results" / "report.md").read_text()
    assert "* **No verdict**: 1 check(s) failed: provenance (candidate s2)" in report
    assert "gate passed" not in report and "gate failed" not in report
    last = err.strip().splitlines()[-1]
    assert last.startswith("gate LATE: no verdict (1 check(s) failed"), last
    assert "; LATE: A " in last and "S1:" not in last


def test_console_line_prints_the_gate_statistic(base):
    rc, out, err, _ = _run(base, "compare")
    assert rc == 0, err
    s = json.loads((base / "metrics" / "summary.json").read_text())
    line = out.strip().splitlines()[-1]
    assert line.startswith(f"gate LATE: {s['gate.verdict']}; LATE: A {s['LATE.A']:.1f}, "), line


def test_console_line_of_a_round_without_a_gate_prints_its_headline(repo):
    """No gate: the line ends with the headline of headline.json, not another statistic."""
    text = (repo / "params.yaml").read_text()
    (repo / "params.yaml").write_text(text.replace(
        "  statistic: late\n  learns: true\n  mean_min:\n  welch_p_min: 0.05\n",
        "  statistic: none\n  learns: false\n  mean_min:\n  welch_p_min:\n"))
    rc, out, err, _ = _run(repo, "compare")
    assert rc == 0, err
    h = json.loads((repo / "metrics" / "headline.json").read_text())
    assert h["statistic"] == "LATE" and h["gate"] == "no gate"
    assert out.strip().splitlines()[-1] == (
        f"gate none: no gate; LATE: candidate {h['candidate.mean']:.1f}, reference "
        f"{h['reference.mean']:.1f}, difference {h['diff']:.1f}, 90% interval "
        f"[{h['ci90.lo']:.1f}, {h['ci90.hi']:.1f}], {h['reading']}; report results/report.md")


def test_published_directory_missing_part_of_the_study_candidate_says_which(repo):
    shutil.rmtree(repo / "data" / "published" / "round3" / "ajax" / "s2")
    shutil.rmtree(repo / "data" / "published" / "round3" / "ajax" / "s4")
    synthetic.reseal(repo / "data" / "published" / "round3")   # published so, with its manifest
    rc, out, err, _ = _run(repo, "compare")
    assert rc == 0, err
    s = json.loads((repo / "metrics" / "summary.json").read_text())
    assert s["context.study_candidate.missing"] == "s2, s4"
    assert "lacks seeds [2, 4]" in s["context.study_candidate.reason"]
    assert not [k for k in s if k.startswith("context.study_candidate.S1")]
    assert metrics_out.missing_reasons(s) == []
    report = (repo / "results" / "report.md").read_text()
    assert "lacks seeds 2, 4 of this round: the study's own candidate is not scored" in report


def test_published_directory_without_the_study_candidate_says_so(repo):
    shutil.rmtree(repo / "data" / "published" / "round3" / "ajax")
    synthetic.reseal(repo / "data" / "published" / "round3")   # published so, with its manifest
    rc, out, err, _ = _run(repo, "compare")
    assert rc == 0, err
    s = json.loads((repo / "metrics" / "summary.json").read_text())
    assert s["context.study_candidate.missing"] == "s0, s1, s2, s3, s4"
    assert "lacks seeds 0, 1, 2, 3, 4" in (repo / "results" / "report.md").read_text()


def test_complete_study_candidate_has_its_context(base):
    s = json.loads((base / "metrics" / "summary.json").read_text())
    assert "context.study_candidate.missing" not in s
    assert [f"context.study_candidate.S1.s{i}" in s for i in range(5)] == [True] * 5

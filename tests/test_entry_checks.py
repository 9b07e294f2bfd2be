"""What enters a kept run or a published table is seen first (issue #69): a thing a file
names twice is refused naming both places, a run's labels (its directory, run.json, its
records and episodes, an archive member's side) agree, a manifest below another is
verified or refused, an archive's totals are capped before anything is extracted, a seed
is an integer as written, and every command refuses a bad argument in one line (exit 2)
before it computes."""

import gzip
import io
import json
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from dreamer_parity import archive, keep, manifest, records, rounds
from dreamer_parity import params as params_mod
from dreamer_parity import pipeline
from dreamer_parity.analysis import published_tables
from dreamer_parity.analysis.load import AnalysisError
from dreamer_parity.params import validate
import synthetic  # tests/synthetic.py

REPO = Path(__file__).resolve().parents[1]
PARAMS = validate({"round": "te", "seeds": [0, 1], "rows": 1200, "eval_every": 400,
                   "eval_episodes": 2, "profile": "smoke", "decode": "exact",
                   "stats": {"s1_rows": [400, 800, 1200], "concordance_rows": [1200],
                             "concordance_range": [400, 1200]}})


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) <= 500, text
    return lines[0]


# -- duplicates ------------------------------------------------------------------------

def test_a_json_key_given_twice_is_refused_naming_both_lines(tmp_path):
    f = tmp_path / "x.json"
    f.write_text('{\n "a": 1,\n "files": {"p": "1",\n  "p": "2"}\n}\n')
    with pytest.raises(records.RecordError, match=r"x\.json:4: key 'p' given twice "
                                                  r"\(lines 3 and 4\)"):
        records.read_json(f, "x.json")
    g = tmp_path / "y.jsonl"
    g.write_text('{"a": 1}\n{"a": 1, "b": 2, "a": 3}\n')
    with pytest.raises(records.RecordError, match=r"y\.jsonl:2: key 'a' given twice"):
        records.read_lines(g, "y.jsonl")


def test_a_manifest_naming_a_file_twice_is_refused(tmp_path):
    d = tmp_path / "kept"
    d.mkdir()
    (d / "a.txt").write_text("a\n")
    manifest.write(d)
    good = json.loads((d / manifest.NAME).read_text())["files"]["a.txt"]
    text = ('{"algorithm": "sha256", "files": {"a.txt": "' + "0" * 64 + '",\n "a.txt": "'
            + good + '"}}\n')
    (d / manifest.NAME).write_text(text)
    with pytest.raises(records.RecordError, match=r"key 'a\.txt' given twice \(lines 1 and 2\)"):
        manifest.verify(d)


def _published_copy(tmp_path, edit):
    d = tmp_path / "published"
    d.mkdir(parents=True)
    lines = (REPO / "data" / "published" / "tables.csv").read_text().splitlines(keepends=True)
    (d / "tables.csv").write_text("".join(edit(lines)))
    manifest.write(d)            # a user's fix, resealed: the table itself must refuse it
    return d / "tables.csv"


def test_a_cell_given_twice_in_the_published_table_is_refused(tmp_path):
    def twice(lines):
        row = lines[7].split(",")
        row[-1] = "251\n"
        return lines[:9] + [",".join(row)] + lines[9:]
    path = _published_copy(tmp_path, twice)
    with pytest.raises(AnalysisError, match=r"tables\.csv:10: the cell .* given twice "
                                            r"\(lines 8 and 10\)"):
        published_tables.read_table(path)
    # the same rows without the repeat read
    assert len(published_tables.read_table(_published_copy(tmp_path / "ok", lambda x: x)))\
        == len((REPO / "data" / "published" / "tables.csv").read_text().splitlines()) - 1


def test_round_names_differing_only_in_case_are_refused(tmp_path):
    idx = tmp_path / "docs" / "rounds" / "index.yaml"
    idx.parent.mkdir(parents=True)
    idx.write_text(f"r3:\n  commit: '{'a' * 40}'\n  about: x\nR3:\n  commit: '{'b' * 40}'\n"
                   f"  about: y\n")
    with pytest.raises(rounds.RoundsError, match="'R3' and round 'r3' differ only in case"):
        rounds.load_index(tmp_path)


# -- a seed is an integer as written -----------------------------------------------------

@pytest.mark.parametrize("seeds", ["[0, 1.0, 2]", "[0, true]", "[0, '1']", "[0, 1e0]"])
def test_a_seed_not_written_as_an_integer_is_refused(seeds):
    with pytest.raises(params_mod.ParamsError, match=r"params: seeds: item 1: a seed is a "
                                                     r"whole number"):
        params_mod.load(REPO / "params.yaml", [f"seeds={seeds}"])
    with pytest.raises(params_mod.ParamsError, match=r"candidate\.source: item 1"):
        params_mod.load(REPO / "params.yaml",
                        [f"candidate.source=[{{from: run, seeds: {seeds}}}]"])


def test_the_reference_stage_names_a_float_seed_in_params(tmp_path, monkeypatch, capsys):
    text = (REPO / "params.yaml").read_text()
    monkeypatch.chdir(tmp_path)
    Path("params.yaml").write_text(text.replace("seeds:\n- 0\n- 1\n", "seeds:\n- 0\n- 1.0\n"))
    assert "1.0" in Path("params.yaml").read_text()
    assert pipeline.main(["reference", "--seed", "1.0", "--out", "results/reference/s1.0"]) == 2
    assert "seeds: item 1" in one_line(capsys.readouterr().err)
    assert not Path("results").exists()


# -- a run is what its labels say ---------------------------------------------------------

def _relabel(d: Path, **fields):
    info = json.loads((d / "run.json").read_text())
    info.update(fields)
    (d / "run.json").write_text(json.dumps(info))
    records.write_done(d)              # a marker that agrees with the edited run.json


def test_a_run_whose_records_say_another_seed_is_refused(tmp_path):
    d = synthetic.write_run(tmp_path / "made", "candidate", 0, PARAMS)
    moved = d.rename(tmp_path / "made" / "run")      # no s<S> name to compare with
    _relabel(moved, seed=7)
    with pytest.raises(keep.KeepError, match=r"seed 7, but records\.jsonl line 1 says seed 0"):
        keep.keep(moved, tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


def test_a_run_in_a_directory_named_for_another_seed_is_refused(tmp_path):
    d = synthetic.write_run(tmp_path / "made", "candidate", 0, PARAMS)
    _relabel(d, seed=7)
    with pytest.raises(records.RecordError, match=r"seed 7, but its directory is named s0"):
        records.check_run_agrees(d, None, "candidate", 7)


def test_episodes_of_another_seed_are_refused(tmp_path):
    d = synthetic.write_run(tmp_path / "made", "candidate", 0, PARAMS)
    eps = (d / "episodes.jsonl").read_text().splitlines()
    eps[1] = eps[1].replace('"seed": 0', '"seed": 5')
    (d / "episodes.jsonl").write_text("\n".join(eps) + "\n")
    with pytest.raises(records.RecordError, match=r"episodes\.jsonl line 2 says seed 5"):
        records.check_run_agrees(d, None, "candidate", 0)


def _tar(path, entries, level=9):
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=level,
                                                mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w") as tar:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _run_entries(d: Path, prefix: str):
    return [(f"{prefix}/{f.name}", f.read_bytes()) for f in sorted(d.iterdir()) if f.is_file()
            and f.name in archive.RUN_FILES]


def test_an_archive_member_under_the_other_side_is_refused_naming_the_member(tmp_path):
    ref = synthetic.write_run(tmp_path / "made" / "reference", "reference", 0, PARAMS)
    bad = tmp_path / "runs.tar.gz"
    _tar(bad, _run_entries(ref, "candidate/s0"))
    with pytest.raises(keep.KeepError) as e:
        keep.keep_archive(bad, tmp_path / "runs")
    msg = str(e.value)
    assert msg.startswith(f"{bad}:candidate/s0/run.json: side 'reference', but the run "
                          f"stands under candidate/"), msg
    assert "keep-" not in msg and not (tmp_path / "runs").exists()
    # pack refuses to put it there in the first place
    with pytest.raises(archive.ArchiveError, match="not a finished run of candidate seed 0"):
        archive.pack([ref], tmp_path / "x.tar.gz", "candidate")


def test_a_member_given_twice_is_refused(tmp_path):
    d = synthetic.write_run(tmp_path / "made" / "candidate", "candidate", 0, PARAMS)
    entries = _run_entries(d, "candidate/s0")
    edited = ("candidate/s0/records.jsonl", entries[[n for n, _ in entries].index(
        "candidate/s0/records.jsonl")][1].replace(b'"eval_mean"', b'"eval_mean" '))
    bad = tmp_path / "twice.tar.gz"
    _tar(bad, entries + [edited])
    with pytest.raises(keep.KeepError, match=r"member 'candidate/s0/records\.jsonl' given "
                                             r"twice \(members \d+ and \d+\)"):
        keep.keep_archive(bad, tmp_path / "runs")
    both = tmp_path / "both.tar.gz"
    _tar(both, entries + [("candidate/s0/records.jsonl.gz", gzip.compress(edited[1]))])
    with pytest.raises(keep.KeepError, match="in both forms"):
        keep.keep_archive(both, tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


# -- totals -----------------------------------------------------------------------------

def test_the_archive_of_many_capped_members_is_refused_before_extraction(tmp_path):
    """Members each under the member cap whose total passes the total cap: refused at the
    first header over it, within seconds, nothing extracted."""
    each = archive.MAX_MEMBER_BYTES
    n = archive.MAX_TOTAL_BYTES // each + 1
    zeros = bytes(each)
    bad = tmp_path / "many.tar.gz"
    _tar(bad, [(f"candidate/s{i}/records.jsonl", zeros) for i in range(n)], level=1)
    assert bad.stat().st_size < 2 ** 20
    into = tmp_path / "into"
    t0 = time.monotonic()
    with pytest.raises(archive.ArchiveError,
                       match=rf"member 'candidate/s{n - 1}/records\.jsonl' takes the members' "
                             rf"total over {archive.MAX_TOTAL_BYTES} bytes"):
        archive.unpack(bad, into)
    assert time.monotonic() - t0 < 5
    assert not into.exists()


def test_more_members_than_the_cap_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(archive, "MAX_MEMBERS", 6)
    bad = tmp_path / "count.tar.gz"
    _tar(bad, [(f"candidate/s{i}/run.json", b"{}") for i in range(7)])
    with pytest.raises(archive.ArchiveError, match=r"more than 6 members \(member "
                                                   r"'candidate/s6/run\.json' is number 7\)"):
        archive.unpack(bad, tmp_path / "into")
    assert not (tmp_path / "into").exists()


# -- manifests cannot be sidestepped -----------------------------------------------------

def _sealed(tmp_path):
    d = tmp_path / "round"
    (d / "ref_s0").mkdir(parents=True)
    (d / "ref_s0" / "evals.jsonl").write_text("{}\n")
    (d / "notes.txt").write_text("n\n")
    manifest.write(d)
    return d


@pytest.mark.parametrize("content", [b"not json", b"", None])
def test_a_manifest_below_another_is_verified_never_an_exemption(tmp_path, content):
    d = _sealed(tmp_path)
    sub = d / "ref_s0" / manifest.NAME
    if content is None:
        sub.mkdir()
    else:
        sub.write_bytes(content)
    (d / "ref_s0" / "extra.txt").write_text("unlisted\n")
    with pytest.raises(records.RecordError, match=r"ref_s0/MANIFEST\.json"):
        manifest.verify(d)
    with pytest.raises(records.RecordError, match=r"ref_s0/MANIFEST\.json"):
        manifest.verify_tree(d / "ref_s0", "round/ref_s0", top=tmp_path)


def test_an_unlisted_file_is_refused_wherever_it_sits(tmp_path):
    d = _sealed(tmp_path)
    sub = d / "ref_s0"
    (sub / "evals.jsonl").unlink()
    (sub / "evals.jsonl").write_text("{}\n")
    manifest.verify(d)
    deep = sub / "deeper"
    deep.mkdir()
    (deep / "stray.csv").write_text("x\n")
    with pytest.raises(records.RecordError, match=r"ref_s0/deeper/stray\.csv: not listed"):
        manifest.verify(d)
    # a sub-manifest that lists the stray file still leaves the upper listing to verify
    shutil.rmtree(deep)
    manifest.write(sub)
    with pytest.raises(records.RecordError, match="inside a directory with its own"):
        manifest.verify(d)
    # a source below a manifested directory is covered by it
    (d / "notes.txt").write_text("changed\n")
    with pytest.raises(records.RecordError, match=r"notes\.txt: its SHA-256"):
        manifest.verify_tree(sub, "round/ref_s0", top=tmp_path)


def test_every_kept_and_published_manifest_verifies():
    """The repository's own data passes every check above (manifests, labels)."""
    n = 0
    for d in sorted((REPO / "data" / "runs").glob("*/s*")):
        data = records.read_run(d)
        side = data["run"]["side"]
        records.check_run_agrees(d, None, side, int(d.name[1:]), data=data, made_by=side)
        n += 1
    assert n >= 46
    assert manifest.verify_tree(REPO / "data" / "runs", "data/runs") == n
    assert manifest.verify_tree(REPO / "data" / "published", "data/published") == 1


# -- every command checks its arguments first ------------------------------------------

def _cases(tmp_path):
    a_dir = tmp_path / "a_dir"
    a_dir.mkdir()
    a_file = tmp_path / "a_file.txt"
    a_file.write_text("x\n")
    a_png_dir = tmp_path / "a_dir.png"
    a_png_dir.mkdir()
    outside = tmp_path / "outside.ok"
    return [
        ("pipeline", ["preflight", "--out", "src"], "an existing directory"),
        ("pipeline", ["preflight", "--out", str(outside)], "outside the repository"),
        ("pipeline", ["reference", "--seed", "0", "--out", "params.yaml"], "not a directory"),
        ("pipeline", ["reference", "--seed", "-1", "--out", "results/reference/s0"],
         "not a seed"),
        ("port_check", ["--steps", "1000000000"], "--steps 1000000000: must lie in"),
        ("port_check", ["--resets", "3"], "--resets 3: must lie in 8.."),
        ("port_check", ["--seed", "-1"], "--seed -1: must lie in"),
        ("port_check", ["--out", str(a_dir)], "an existing directory"),
        ("analysis.plots_diff", ["HEAD", "--target", "../x.csv"], "--target"),
        ("analysis.plots_diff", ["HEAD", "--out", str(a_png_dir)], "an existing directory"),
        ("analysis.plots_diff", ["HEAD", "--out", str(a_file)], "must end in .png or .svg"),
        ("analysis.plots_diff", ["HEAD", "--repo", str(tmp_path / "none")], "not found"),
        ("analysis.plots_diff", ["HEAD", "--spec-out", str(a_dir)], "an existing directory"),
        ("keep", [str(tmp_path / "none"), str(tmp_path / "runs")], "not found"),
        ("keep", [str(a_dir), str(a_file)], "not a directory"),
        ("keep", [str(a_file), str(tmp_path / "runs")], "not an archive"),
        ("keep", [str(a_dir), str(tmp_path / "runs"), "--params", str(a_dir)],
         "not a regular file"),
        ("archive", ["pack", str(tmp_path / "none"), str(tmp_path / "x.tar.gz")], "not found"),
        ("archive", ["pack", str(a_dir), str(a_dir)], "must end in .tar.gz"),
        ("archive", ["pack", str(a_dir), str(a_file / "x.tar.gz")], "is a file"),
        ("rounds", ["--index", "../index.yaml", "list"], "--index"),
        ("rounds", ["rev", "no such/name"], "not a plain name"),
        ("analysis.window_table", [f"a={tmp_path / 'none'}"], "not found"),
        ("analysis.window_table", [f"a={a_dir}", "--rows", "-400"], "--rows -400"),
        ("analysis.window_table", [f"a={a_dir}", f"a={a_dir}"], "labels must differ"),
        ("manifest", ["check", str(a_file)], "not a directory"),
        ("pipeline", ["frobnicate"], "invalid choice"),
        ("accel.phases", ['{"kind": "train"}'], "kind is one of probe, step, loop"),
        ("accel.mirror", ["--platform", "rocm"], "the mirror probe runs on cpu, cuda, tpu"),
        # the benchmarks' scripts
        ("benchmarks/pair_ratio.py", ["--pairs", "100000"], "--pairs 100000: must lie in"),
        ("benchmarks/pair_ratio.py", ["--out", str(a_dir)], "an existing directory"),
        ("benchmarks/bench_reference.py", ["--updates", "0"], "--updates 0: must lie in"),
        ("benchmarks/bench_reference.py", ["--root", str(a_file)], "not a directory"),
        ("benchmarks/bench_candidate.py", ["--seeds", "1", "100000"], "--seeds 100000"),
        ("benchmarks/bench_candidate.py", ["--rows", "1000000000"], "--rows 1000000000"),
        ("benchmarks/fingerprint_candidate.py", ["--points", "0"], "--points 0"),
        ("benchmarks/gpu_kernels.py", ["--seeds", "1", "200"], "--seeds 200: must lie in"),
        ("benchmarks/gpu_kernels.py", ["--profile", "huge"], "profile: unknown value 'huge'"),
        ("benchmarks/gpu_kernels.py", ["--kernel-us", "-1"], "--kernel-us -1.0: must lie in"),
        ("benchmarks/fingerprint_candidate.py", ["--records", str(tmp_path / "none")],
         "not found"),
        ("benchmarks/fingerprint_candidate.py", ["--set", "seeds=[1, 1]"], "duplicate seeds"),
        # a kept directory holds s42 itself; s999 is looked for as a results root holds it
        ("benchmarks/fingerprint_candidate.py",
         ["--records", "data/runs/round3-tpu-candidate", "--set", "candidate.source=run",
          "--set", "seeds=[42, 999]"],
         "--records: data/runs/round3-tpu-candidate/candidate/s999/records.jsonl: missing"),
        ("measurements/2026-12-06-tpu-scaling/plot.py", [str(a_file), "--out", str(a_file)],
         "must end in .svg or .png"),
        ("measurements/2026-12-06-tpu-scaling/plot.py", [str(a_file), "--out", str(tmp_path / "f.svg")],
         "a_file.txt"),
        ("measurements/2026-12-07-reference-cpu-mirror/twohot_mirror.py", [f"a={a_dir}"], "not a regular file"),
        ("measurements/2026-12-07-reference-cpu-mirror/twohot_mirror.py", [f"a={tmp_path / 'none.npz'}"], "not found"),
    ]


def _refusal(tool: str, argv: list[str], capsys) -> tuple[int, str]:
    """``(exit status, stderr)`` of ``tool`` refusing ``argv``: a package module's ``main``
    called here, a script of benchmarks/ or measurements/ run as its users run it."""
    import importlib

    if tool.endswith(".py"):
        r = subprocess.run([sys.executable, tool, *argv], cwd=REPO, capture_output=True,
                           text=True, timeout=60)
        return r.returncode, r.stderr
    try:
        rc = importlib.import_module(f"dreamer_parity.{tool}").main(argv)
    except SystemExit as e:      # argparse's own refusals
        rc = e.code
    return rc, capsys.readouterr().err


def test_every_command_refuses_a_bad_argument_in_one_line_before_computing(
        tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    before = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True,
                            text=True).stdout
    for tool, argv, expected in _cases(tmp_path):
        t0 = time.monotonic()
        rc, err = _refusal(tool, argv, capsys)
        assert rc == 2, (tool, argv, err)
        line = one_line(err)
        assert line.startswith("error: ") and expected in line, (tool, argv, line)
        assert time.monotonic() - t0 < 30
    assert not (tmp_path / "runs").exists() and not (tmp_path / "x.tar.gz").exists()
    assert not (tmp_path / "outside.ok").exists()
    assert subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True,
                          text=True).stdout == before

"""Keeping a finished run as data (dreamer_parity.keep): what is copied, what is refused
(nothing written), and a second keep of the same run."""

import json
import os

import pytest
import yaml

from dreamer_parity import keep, records
from dreamer_parity.params import validate
import synthetic  # tests/synthetic.py

RAW = {"round": "tk", "seeds": [3], "rows": 1200, "eval_every": 400, "eval_episodes": 2,
       "profile": "smoke", "decode": "ref",
       "stats": {"s1_rows": [400, 800, 1200], "concordance_rows": [1200],
                 "concordance_range": [400, 1200]}}
PARAMS = validate(RAW)


@pytest.fixture
def run(tmp_path):
    d = synthetic.write_run(tmp_path / "made", "candidate", 3, PARAMS)
    (d / "params.npz").write_bytes(b"weights")
    return d


def tree(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_keeps_the_records_files_only(tmp_path, run):
    target, written = keep.keep(run, tmp_path / "data" / "runs" / "x", PARAMS)
    assert written and target == tmp_path / "data" / "runs" / "x" / "s3"
    assert sorted(p.name for p in target.iterdir()) == sorted(
        n for n in keep.KEPT_FILES if (run / n).exists())
    assert "params.npz" not in os.listdir(target)
    for n in os.listdir(target):
        assert (target / n).read_bytes() == (run / n).read_bytes()
    # the kept run reads as the original does
    assert records.read_records(target) == records.read_records(run)
    # keeping it again changes nothing
    before = tree(tmp_path / "data")
    assert keep.keep(run, tmp_path / "data" / "runs" / "x", PARAMS) == (target, False)
    assert tree(tmp_path / "data") == before


def test_cli_with_params_and_set(tmp_path, run, capsys):
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump({**RAW, "decode": "exact"}))
    dest = tmp_path / "runs"
    # the file's round has decode exact: the run (decode ref) disagrees, nothing written
    assert keep.main([str(run), str(dest), "--params", str(f)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "run.json: decode 'ref' != 'exact'" in err
    assert not dest.exists()
    assert keep.main([str(run), str(dest), "--params", str(f), "--set", "decode=ref"]) == 0
    assert capsys.readouterr().out.strip() == f"kept: {dest / 's3'}"
    assert keep.main([str(run), str(dest), "--set", "decode=ref"]) == 2
    assert "--set needs --params" in capsys.readouterr().err


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / "DONE.json").unlink(), "DONE.json"),
    (lambda d: (d / "run.json").write_text(
        (d / "run.json").read_text().replace('"seed": 3', '"seed": 4')), "DONE.json: seed 3, expected 4"),
    (lambda d: (d / "records.jsonl").write_text("{not json\n"), "records.jsonl:1"),
])
def test_a_damaged_run_is_refused_and_nothing_written(tmp_path, run, damage, message):
    damage(run)
    dest = tmp_path / "runs"
    with pytest.raises(keep.KeepError, match=message):
        keep.keep(run, dest, PARAMS)
    assert not dest.exists()


def test_a_destination_with_another_run_is_left_alone(tmp_path, run):
    dest = tmp_path / "runs"
    keep.keep(run, dest)
    (dest / "s3" / "records.jsonl").write_text("other\n")
    before = tree(dest)
    with pytest.raises(keep.KeepError, match=r"s3: holds another run"):
        keep.keep(run, dest)
    assert tree(dest) == before


def test_a_directory_of_runs_is_named_as_such(tmp_path, run):
    with pytest.raises(keep.KeepError, match=r"made: holds runs \(s3\), not one: give one seed's "
                                             r"directory, e\.g\. .*made/s3"):
        keep.keep(run.parent, tmp_path / "runs")
    assert not (tmp_path / "runs").exists()

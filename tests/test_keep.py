"""Keeping a finished run as data (dreamer_parity.keep): what is copied, what is refused
(nothing written), and a second keep of the same run."""

import gzip
import json
import os

import pytest
import yaml

from dreamer_parity import keep, manifest, records
from dreamer_parity.params import validate
import synthetic  # tests/synthetic.py
from dreamer_parity.round_spec import Round

RAW = {"round": "tk", "seeds": [3], "rows": 1200, "eval_every": 400, "eval_episodes": 2,
       "profile": "smoke", "decode": "ref",
       "stats": {"s1_rows": [400, 800, 1200], "concordance_rows": [1200],
                 "concordance_range": [400, 1200]}}
PARAMS = validate(RAW)
ROUND = Round.from_params(PARAMS)


@pytest.fixture
def run(tmp_path):
    d = synthetic.write_run(tmp_path / "made", "candidate", 3, PARAMS)
    (d / "params.npz").write_bytes(b"weights")
    return d


def tree(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_keeps_the_records_files_only(tmp_path, run):
    target, written = keep.keep(run, tmp_path / "data" / "runs" / "x", ROUND)
    assert written and target == tmp_path / "data" / "runs" / "x" / "s3"
    assert sorted(p.name for p in target.iterdir()) == [
        "DONE.json", "MANIFEST.json", "episodes.jsonl.gz", "records.jsonl.gz", "run.json",
        "timing.json"]
    assert manifest.verify(target)
    assert "params.npz" not in os.listdir(target)
    for n in ("DONE.json", "run.json", "timing.json"):
        assert (target / n).read_bytes() == (run / n).read_bytes()
    for n in records.JSONL_FILES:   # compressed, and the same bytes once decompressed
        packed = (target / (n + ".gz")).read_bytes()
        assert packed[:2] == b"\x1f\x8b" and len(packed) < len((run / n).read_bytes()) / 3
        assert gzip.decompress(packed) == (run / n).read_bytes()
    # the kept run reads as the original does
    assert records.read_records(target) == records.read_records(run)
    assert records.read_episodes(target) == records.read_episodes(run)
    assert records.read_run(target)["records"] == records.read_run(run)["records"]
    # keeping it again changes nothing, and so does keeping the kept copy itself
    before = tree(tmp_path / "data")
    assert keep.keep(run, tmp_path / "data" / "runs" / "x", ROUND) == (target, False)
    assert keep.keep(target, tmp_path / "data" / "runs" / "x", ROUND) == (target, False)
    assert tree(tmp_path / "data") == before
    # a kept run kept again elsewhere gives the same bytes (compression is deterministic)
    again, _ = keep.keep(target, tmp_path / "other", ROUND)
    assert tree(again) == tree(target)


def test_both_forms_of_a_file_are_refused(tmp_path, run):
    (run / "records.jsonl.gz").write_bytes(gzip.compress((run / "records.jsonl").read_bytes()))
    with pytest.raises(records.RecordError, match=r"holds both records\.jsonl and records\.jsonl\.gz"):
        records.read_records(run)
    with pytest.raises(keep.KeepError, match=r"holds both records\.jsonl and records\.jsonl\.gz"):
        keep.keep(run, tmp_path / "runs", ROUND)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("damage, message", [
    (lambda b: b[:len(b) // 2], "not a complete gzip file"),
    (lambda b: b"not gzip at all", "not a complete gzip file"),
    (lambda b: gzip.compress(b"\xff\xfe{}\n"), r"records\.jsonl\.gz:1: not UTF-8 text \(byte 0\)"),
    (lambda b: gzip.compress(gzip.decompress(b) + b'{"side": "candidate"'),
     r"records\.jsonl\.gz:\d+: truncated line"),
])
def test_a_damaged_compressed_file_is_named(tmp_path, run, damage, message):
    target, _ = keep.keep(run, tmp_path / "runs", ROUND)
    path = target / "records.jsonl.gz"
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(records.RecordError, match=message):
        records.read_records(target)


def test_a_compressed_file_too_large_once_decompressed_is_refused(tmp_path, run, monkeypatch):
    target, _ = keep.keep(run, tmp_path / "runs", ROUND)
    size = len(gzip.decompress((target / "records.jsonl.gz").read_bytes()))
    monkeypatch.setattr(records, "MAX_DECOMPRESSED", size - 1)
    with pytest.raises(records.RecordError, match=f"decompresses to more than {size - 1} bytes"):
        records.read_records(target)
    monkeypatch.setattr(records, "MAX_DECOMPRESSED", size)
    assert len(records.read_records(target)) == len(records.read_records(run))


def test_cli_with_params_and_set(tmp_path, run, capsys):
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(validate({**RAW, "decode": "exact"})))   # a complete file
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
        keep.keep(run, dest, ROUND)
    assert not dest.exists()


def test_a_destination_with_another_run_is_left_alone(tmp_path, run):
    dest = tmp_path / "runs"
    keep.keep(run, dest)
    (dest / "s3" / "records.jsonl.gz").write_bytes(gzip.compress(b"other\n"))
    before = tree(dest)
    with pytest.raises(keep.KeepError, match=r"s3: holds another run"):
        keep.keep(run, dest)
    assert tree(dest) == before


def test_a_directory_of_runs_is_named_as_such(tmp_path, run):
    with pytest.raises(keep.KeepError, match=r"made: holds runs \(s3\), not one: give one seed's "
                                             r"directory, e\.g\. .*made/s3"):
        keep.keep(run.parent, tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("replaced, kept", [
    (["dreamerv3.jaxutils.TwoHotDist.mean", "embodied.replay.selectors.Uniform.__init__"], True),
    ([], True),
    (["dreamerv3.jaxutils.TwoHotDist.mean", "dreamerv3.jaxutils.TwoHotDist.__init__"], False),
])
def test_a_diagnostic_run_is_never_kept(tmp_path, run, replaced, kept):
    """A run that replaced a reference function no protocol patch replaces (the mirror
    probe's TwoHotDist.__init__) is refused with the name; the protocol's own are kept."""
    info = json.loads((run / "run.json").read_text())
    info["patches"] = {"decode": "exact", "sampler": "per_run", "replaced": replaced}
    (run / "run.json").write_text(json.dumps(info))
    records.write_done(run, "ok")   # the marker names the run.json it closes
    dest = tmp_path / "runs"
    if kept:
        assert keep.keep(run, dest, ROUND)[1]
        return
    with pytest.raises(keep.KeepError, match=r"run\.json: patches\.replaced names "
                       r"'dreamerv3\.jaxutils\.TwoHotDist\.__init__'.*diagnostic run"):
        keep.keep(run, dest, ROUND)
    assert not dest.exists()

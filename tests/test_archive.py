"""Finished runs as one archive (dreamer_parity.archive) and keeping an archive
(dreamer_parity.keep): only finished runs travel, nothing but the kept files, and a bad
archive is refused before anything is written."""

import io
import json
import os
import tarfile

import pytest

from dreamer_parity import archive, keep, records
from dreamer_parity.params import validate
import synthetic  # tests/synthetic.py
from dreamer_parity.round_spec import Round

PARAMS = validate({"round": "ta", "seeds": [10, 11, 12], "rows": 1200, "eval_every": 400,
                   "eval_episodes": 2, "profile": "smoke", "decode": "exact",
                   "stats": {"s1_rows": [400, 800, 1200], "concordance_rows": [1200],
                             "concordance_range": [400, 1200]}})


@pytest.fixture
def root(tmp_path):
    """A runs root with candidate seeds 10 and 11 finished (with final parameters beside
    them) and seed 12 cut before its end (no DONE.json)."""
    r = tmp_path / "results"
    for s in (10, 11, 12):
        d = synthetic.write_run(r / "candidate", "candidate", s, PARAMS)
        (d / "params.npz").write_bytes(b"weights")
    (r / "candidate" / "s12" / records.DONE).unlink()
    return r


def members(path):
    with tarfile.open(path, "r:gz") as tar:
        return sorted(m.name for m in tar.getmembers())


def test_pack_takes_finished_runs_and_their_kept_files_only(root, tmp_path, capsys):
    out = tmp_path / "out" / "runs.tar.gz"
    assert archive.main(["pack", str(root), str(out)]) == 0
    io_ = capsys.readouterr()
    assert "2 finished candidate run(s) (s10, s11)" in io_.out
    assert "left out (not finished): candidate/s12:" in io_.err and "DONE.json" in io_.err
    assert members(out) == [f"candidate/s{s}/{n}" for s in (10, 11) for n in
                            ("DONE.json", "episodes.jsonl", "records.jsonl", "run.json", "timing.json")]
    assert [p.name for p in out.parent.iterdir()] == ["runs.tar.gz"]   # no temporary left


def test_pack_is_the_same_bytes_twice(root, tmp_path):
    done, _ = archive.finished_runs(root, "candidate")
    a = archive.pack(done, tmp_path / "a.tar.gz", "candidate").read_bytes()
    b = archive.pack(done, tmp_path / "b.tar.gz", "candidate").read_bytes()
    assert a == b


def test_nothing_finished_writes_nothing(root, tmp_path, capsys):
    for s in (10, 11):
        (root / "candidate" / f"s{s}" / records.DONE).unlink()
    out = tmp_path / "runs.tar.gz"
    assert archive.main(["pack", str(root), str(out)]) == 0
    assert "nothing written" in capsys.readouterr().out and not out.exists()
    with pytest.raises(archive.ArchiveError, match="not a finished run"):
        archive.pack([root / "candidate" / "s12"], out, "candidate")
    assert not out.exists()


def test_keep_takes_an_archive_whole(root, tmp_path, capsys):
    out = tmp_path / "runs.tar.gz"
    archive.main(["pack", str(root), str(out)])
    capsys.readouterr()
    dest = tmp_path / "data" / "runs" / "tpu"
    assert keep.main([str(out), str(dest)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"kept: {dest / 's10'}", f"kept: {dest / 's11'}"]
    for s in (10, 11):
        assert sorted(os.listdir(dest / f"s{s}")) == [
            "DONE.json", "MANIFEST.json", "episodes.jsonl.gz", "records.jsonl.gz", "run.json",
            "timing.json"]
        assert records.read_records(dest / f"s{s}") == records.read_records(root / "candidate" / f"s{s}")
    # again: already kept, nothing changes
    assert keep.main([str(out), str(dest)]) == 0
    assert capsys.readouterr().out.count("already kept") == 2


def _tar(path, entries):
    with tarfile.open(path, "w:gz") as tar:
        for name, data, kind in entries:
            info = tarfile.TarInfo(name)
            if kind == "sym":
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize("entries, message", [
    ([("../evil.json", b"{}", "file")], "leaves the archive's root"),
    ([("/abs/run.json", b"{}", "file")], "leaves the archive's root"),
    ([("candidate/s1/run.json", b"", "sym")], "not a regular file"),
    ([("candidate/s1/params.npz", b"x", "file")], "unexpected member"),
    ([("other/s1/run.json", b"{}", "file")], "unexpected member"),
    ([("candidate/x1/run.json", b"{}", "file")], "unexpected member"),
])
def test_a_refused_member_writes_nothing(tmp_path, entries, message):
    bad = tmp_path / "bad.tar.gz"
    _tar(bad, [("candidate/s0/run.json", b"{}", "file")] + entries)
    dest = tmp_path / "runs"
    with pytest.raises(keep.KeepError, match=message):
        keep.keep_archive(bad, dest)
    assert not dest.exists()


def test_an_unreadable_archive_is_named(tmp_path):
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"not a tar")
    with pytest.raises(keep.KeepError, match=r"bad\.tar\.gz: not a readable \.tar\.gz"):
        keep.keep_archive(bad, tmp_path / "runs")


def test_one_bad_run_in_an_archive_keeps_none(root, tmp_path):
    done, _ = archive.finished_runs(root, "candidate")
    info = json.loads((done[1] / "run.json").read_text())
    out = archive.pack(done, tmp_path / "runs.tar.gz", "candidate")
    # the round's params say decode ref: both runs disagree, the first refusal names s10
    wrong = validate({**{k: PARAMS[k] for k in ("round", "seeds", "rows", "eval_every",
                                                 "eval_episodes", "profile", "stats")},
                      "decode": "ref"})
    dest = tmp_path / "runs"
    with pytest.raises(keep.KeepError, match="decode 'exact' != 'ref'"):
        keep.keep_archive(out, dest, Round.from_params(wrong))
    assert not dest.exists()
    assert info["seed"] == 11

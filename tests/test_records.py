"""Record schema: atomic writers, and readers that name file, line and field."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from dreamer_parity import records as R
from dreamer_parity.records import RecordError


def _record(rows=400, **kw):
    rec = {"side": "candidate", "seed": 0, "rows": rows, "updates": 0,
           "eval_returns": [20.0, 30.0], "eval_lengths": [20, 30], "eval_mean": 25.0,
           "eval_len_mean": 25.0, "train": {"vector_loss": 0.5, "ent/action/mean": None},
           "train_counts": {"vector_loss": 12, "ent/action/mean": 0},
           "retnorm": {"lo": 0.0, "hi": 1.0, "scale": 1.0}, "status": "ok"}
    rec.update(kw)
    return rec


def _episode(**kw):
    ep = {"seed": 0, "worker": 3, "row_last": 21, "length": 21, "score": 21.0,
          "terminal": True}
    ep.update(kw)
    return ep


def _run(tmp_path, recs=None, eps=None, done="ok"):
    d = R.run_dir(tmp_path, "candidate", 0)
    R.write_jsonl(d / "records.jsonl", recs if recs is not None else
                  [_record(400), _record(800), _record(1200)])
    R.write_jsonl(d / "episodes.jsonl", eps if eps is not None else [_episode()])
    R.write_json(d / "run.json", {"side": "candidate", "seed": 0, "config": {}, "args": {},
                                  "provenance": {}})
    if done:
        R.write_done(d, done, None if done == "ok" else "non-finite loss at row 800")
    return d


def _lines(d, name):
    return (d / name).read_text().splitlines(keepends=True)


def _rewrite(d, name, lines):
    (d / name).write_text("".join(lines))


# --- layout and writers ----------------------------------------------------------------

def test_run_dir_layout(tmp_path):
    assert R.run_dir(tmp_path, "reference", 2) == tmp_path / "reference" / "s2"
    with pytest.raises(ValueError, match="side must be one of"):
        R.run_dir(tmp_path, "ajax", 0)


def test_round_trip(tmp_path):
    d = _run(tmp_path)
    run = R.read_run(d)
    assert [r["rows"] for r in run["records"]] == [400, 800, 1200]
    assert run["records"][0] == _record(400)
    assert run["episodes"] == [_episode()]
    assert run["done"] == {"status": "ok", "side": "candidate", "seed": 0,
                           "run_sha256": R.file_sha256(d / "run.json")}
    assert run["timing"] is None


def test_writers_replace_non_finite_and_numpy_values(tmp_path):
    f = tmp_path / "a.json"
    R.write_json(f, {"a": float("nan"), "b": [np.float32(1.5), float("inf")],
                     "c": np.int64(7)})
    assert json.loads(f.read_text()) == {"a": None, "b": [1.5, None], "c": 7}
    R.write_jsonl(tmp_path / "b.jsonl", [{"x": float("-inf")}, {"x": 2}])
    assert (tmp_path / "b.jsonl").read_text() == '{"x": null}\n{"x": 2}\n'


def test_writer_leaves_no_temporary_file(tmp_path):
    R.write_jsonl(tmp_path / "r" / "records.jsonl", [_record()])
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["records.jsonl"]


_KILLED_WRITER = textwrap.dedent("""
    import os, signal, sys
    from dreamer_parity import records
    def die(fd):                     # the data is written; kill before the rename
        os.kill(os.getpid(), signal.SIGKILL)
    os.fsync = die
    records.write_jsonl(sys.argv[1], [{"rows": 16 * k} for k in range(1000)])
""")


def test_killed_writer_leaves_the_previous_file_complete(tmp_path):
    """A writer killed before its rename never leaves a partial file under the name."""
    f = tmp_path / "records.jsonl"
    R.write_jsonl(f, [{"rows": 1}])
    r = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(f)], capture_output=True)
    assert r.returncode == -9
    assert f.read_text() == '{"rows": 1}\n'                      # old content, complete
    tmp = [p.name for p in tmp_path.iterdir() if p.name != "records.jsonl"]
    assert len(tmp) == 1 and tmp[0].startswith("records.jsonl.tmp-")
    assert len((tmp_path / tmp[0]).read_text().splitlines()) == 1000


def test_killed_first_writer_leaves_no_file(tmp_path):
    f = tmp_path / "records.jsonl"
    r = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(f)], capture_output=True)
    assert r.returncode == -9 and not f.exists()
    with pytest.raises(RecordError, match=r"records.jsonl: missing$"):
        R.read_records(tmp_path, require_done=False)


def test_write_done_rejects_unknown_status(tmp_path):
    with pytest.raises(ValueError, match="status must be 'ok' or 'failed'"):
        R.write_done(tmp_path, "partial")
    assert not (tmp_path / R.DONE).exists()


# --- readers: each error names file, line, field ---------------------------------------

def test_run_without_completion_marker(tmp_path):
    d = _run(tmp_path, done=None)
    for reader in (R.read_records, R.read_episodes, R.read_run, R.read_done):
        with pytest.raises(RecordError) as e:
            reader(d)
        assert str(e.value) == (f"{d / R.DONE}: missing completion marker: "
                                "the run did not finish")


def test_failed_run_is_readable(tmp_path):
    d = _run(tmp_path, recs=[_record(400), _record(800, status="failed")], done="failed")
    run = R.read_run(d)
    assert run["done"] == {"status": "failed", "reason": "non-finite loss at row 800",
                           "side": "candidate", "seed": 0,
                           "run_sha256": R.file_sha256(d / "run.json")}
    assert run["records"][-1]["status"] == "failed"


def test_malformed_completion_marker(tmp_path):
    d = _run(tmp_path)
    (d / R.DONE).write_text('{"status": "running"}\n')
    with pytest.raises(RecordError, match=r"DONE.json: status must be 'ok' or 'failed', "
                                          r"got 'running'$"):
        R.read_done(d)


def test_truncated_last_line(tmp_path):
    d = _run(tmp_path)
    text = (d / "records.jsonl").read_text()
    (d / "records.jsonl").write_text(text[:-40])
    with pytest.raises(RecordError) as e:
        R.read_records(d)
    assert str(e.value) == f"{d / 'records.jsonl'}:3: truncated line (no final newline)"


def test_truncated_line_in_the_middle(tmp_path):
    d = _run(tmp_path)
    lines = _lines(d, "records.jsonl")
    lines[1] = lines[1][:50] + "\n"
    _rewrite(d, "records.jsonl", lines)
    with pytest.raises(RecordError, match=r"records.jsonl:2: truncated or invalid JSON"):
        R.read_records(d)


def test_empty_line(tmp_path):
    d = _run(tmp_path)
    _rewrite(d, "episodes.jsonl", _lines(d, "episodes.jsonl") + ["\n"])
    with pytest.raises(RecordError, match=r"episodes.jsonl:2: empty line$"):
        R.read_episodes(d)


@pytest.mark.parametrize("field", sorted(R.RECORD_FIELDS))
def test_missing_record_field(tmp_path, field):
    rec = _record(800)
    del rec[field]
    d = _run(tmp_path, recs=[_record(400), rec])
    with pytest.raises(RecordError) as e:
        R.read_records(d)
    assert str(e.value) == f"{d / 'records.jsonl'}:2: missing field {field!r}"


@pytest.mark.parametrize("field", sorted(R.EPISODE_FIELDS))
def test_missing_episode_field(tmp_path, field):
    ep = _episode()
    del ep[field]
    d = _run(tmp_path, eps=[_episode(), _episode(), ep])
    with pytest.raises(RecordError) as e:
        R.read_episodes(d)
    assert str(e.value) == f"{d / 'episodes.jsonl'}:3: missing field {field!r}"


@pytest.mark.parametrize("field, value, message", [
    ("rows", "800", "field 'rows' should be int, got str"),
    ("rows", 800.0, "field 'rows' should be int, got float"),
    ("seed", True, "field 'seed' has type bool"),
    ("eval_mean", "25", "field 'eval_mean' should be float/int, got str"),
    ("eval_returns", 25.0, "field 'eval_returns' should be list, got float"),
    ("retnorm", [0, 1], "field 'retnorm' should be dict/null, got list"),
    ("train", None, "field 'train' should be dict, got NoneType"),
    ("status", "running", "field 'status' must be 'ok' or 'failed', got 'running'"),
    ("side", "ajax", "field 'side' must be one of ('reference', 'candidate')"),
    ("eval_returns", [20.0, "30"], "field 'eval_returns' must hold numbers, got '30'"),
    ("eval_lengths", [20, 30.5], "field 'eval_lengths' must hold integers, got 30.5"),
    ("train", {"vector_loss": "x"}, "field 'train.vector_loss' must be numbers or null, "
                                    "got 'x'"),
    ("train_counts", {"vector_loss": None}, "field 'train_counts.vector_loss' must be "
                                            "integers, got None"),
    ("eval_lengths", [20], "eval_returns and eval_lengths differ in length"),
])
def test_wrong_record_type(tmp_path, field, value, message):
    rec = _record(400)
    rec[field] = value
    d = _run(tmp_path, recs=[rec])
    with pytest.raises(RecordError) as e:
        R.read_records(d)
    assert str(e.value) == f"{d / 'records.jsonl'}:1: {message}"


def test_wrong_episode_type(tmp_path):
    d = _run(tmp_path, eps=[_episode(terminal=1)])
    with pytest.raises(RecordError) as e:
        R.read_episodes(d)
    assert str(e.value) == f"{d / 'episodes.jsonl'}:1: field 'terminal' should be bool, got int"


@pytest.mark.parametrize("rows", [[400, 1200, 800], [400, 400]])
def test_rows_out_of_order(tmp_path, rows):
    d = _run(tmp_path, recs=[_record(r) for r in rows])
    with pytest.raises(RecordError) as e:
        R.read_records(d)
    n = len(rows)
    assert str(e.value) == (f"{d / 'records.jsonl'}:{n}: field 'rows' out of order: "
                            f"{rows[-1]} after {rows[-2]}")


def test_line_that_is_not_an_object(tmp_path):
    d = _run(tmp_path)
    _rewrite(d, "records.jsonl", _lines(d, "records.jsonl")[:1] + ["[1, 2]\n"])
    with pytest.raises(RecordError, match=r"records.jsonl:2: expected a JSON object$"):
        R.read_records(d)


def test_missing_run_json(tmp_path):
    d = _run(tmp_path)
    os.remove(d / "run.json")
    with pytest.raises(RecordError, match=r"run.json: missing$"):
        R.read_run(d)


def test_invalid_json_object_file(tmp_path):
    d = _run(tmp_path)
    (d / "timing.json").write_text('{"total_s": 1.0')
    with pytest.raises(RecordError, match=r"timing.json:1: invalid JSON \(Expecting .,. delimiter, column 16\)"):
        R.read_run(d)

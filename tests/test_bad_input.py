"""Bad input is refused in one place, with one line, and never changes a number silently.

Numbers inside lists (records.jsonl, published evals.jsonl), one rule per parameter at
every entry point, and the versions a run imported against the pins.
"""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dreamer_parity import params as params_mod
from dreamer_parity import provenance, records
from dreamer_parity.analysis import checks, compare, load, published, synthetic

REPO = Path(__file__).resolve().parents[1]
PUBLISHED = REPO / "data" / "published"
ROUND3 = PUBLISHED / "round3"

PARAMS = params_mod.validate({
    "round": "t", "seeds": [0, 1], "rows": 1200, "eval_every": 400, "eval_episodes": 2,
    "profile": "smoke", "stats": {"s1_rows": [400, 800, 1200], "concordance_rows": [1200],
                                  "concordance_range": [400, 1200]}})


# ---------------------------------------------------------------- 1. numbers inside lists

def _published_files():
    return sorted(PUBLISHED.glob("**/evals.jsonl"))


def test_every_published_evals_file_is_read():
    files = _published_files()
    if not files:
        pytest.skip("data/published not present (make published)")
    for f in files:
        rows = published.read_evals(f)
        assert rows, f


def _edit_line(path: Path, lineno: int, fn) -> None:
    """Rewrite line ``lineno`` (1-based) of a JSONL file as text (NaN stays NaN)."""
    lines = path.read_text().splitlines()
    obj = json.loads(lines[lineno - 1])
    lines[lineno - 1] = json.dumps(fn(obj))   # allow_nan: NaN / Infinity written as such
    path.write_text("".join(x + "\n" for x in lines))


def _nan(o):
    o["returns"][3] = math.nan
    return o


def _inf(o):
    o["returns"][3] = math.inf
    return o


def _tens(o):
    assert o["mean"] != 10.0
    o["returns"] = [10.0] * len(o["returns"])
    return o


@pytest.fixture
def round3_copy(tmp_path, monkeypatch):
    if not (ROUND3 / "ref_s1" / "evals.jsonl").is_file():
        pytest.skip("data/published/round3 not present (make published)")
    shutil.copytree(ROUND3, tmp_path / "pub" / "round3")
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw = {"round": "round3-candidate", "profile": "full", "seeds": [0, 1, 2, 3, 4],
           "rows": 24000, "eval_every": 400, "eval_episodes": 10,
           "reference": {"decode": "exact", "sampler": "per_run", "source": "pub/round3"},
           "stats": {"s1_rows": [16000, 18000, 20000], "late_rows": [12000, 24000],
                     "concordance_rows": [20000, 24000], "concordance_range": [16000, 24000]}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _compare(root):
    return compare.main(["--params", "params.yaml", "--candidate", "pub/round3/ajax",
                         "--metrics-dir", "m", "--plots-dir", "m/plots", "--report", "r.md"])


@pytest.mark.parametrize("edit,what", [(_nan, "NaN"), (_inf, "Infinity"),
                                       (_tens, "not the mean of 'returns'")])
def test_published_list_numbers_refused_by_compare(round3_copy, capsys, edit, what):
    _edit_line(round3_copy / "pub" / "round3" / "ref_s1" / "evals.jsonl", 31, edit)
    capsys.readouterr()
    assert _compare(round3_copy) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: pub/round3/ref_s1/evals.jsonl:31: "), err
    assert what in err
    assert not (round3_copy / "m" / "summary.json").exists()


def test_published_null_returns_have_nothing_to_compare():
    if not (ROUND3 / "ajax" / "s0" / "evals.jsonl").is_file():
        pytest.skip("data/published/round3 not present")
    rows = published.read_evals(ROUND3 / "ajax" / "s0" / "evals.jsonl")
    assert all(r["returns"] is None for r in rows)


def _records_round(tmp_path):
    synthetic.write_round(tmp_path, PARAMS)
    return tmp_path / "candidate" / "s1" / "records.jsonl"


@pytest.mark.parametrize("edit,what", [
    (lambda o: {**o, "eval_returns": [math.nan] + o["eval_returns"][1:]}, "NaN"),
    (lambda o: {**o, "eval_returns": [math.inf] + o["eval_returns"][1:]}, "Infinity"),
    (lambda o: {**o, "eval_returns": [10.0] * len(o["eval_returns"]),
                "eval_lengths": [10] * len(o["eval_returns"]), "eval_len_mean": 10.0,
                "eval_mean": 450.0}, "'eval_mean' 450.0 is not the mean of 'eval_returns'"),
    (lambda o: {**o, "eval_len_mean": o["eval_len_mean"] + 1}, "is not the mean of 'eval_lengths'"),
    (lambda o: {**o, "train": {**o["train"], "vector_loss": math.nan}}, "NaN"),
    (lambda o: {**o, "rows": 2 ** 70}, "field 'rows' must lie in 0..2**53"),
])
def test_records_list_numbers_refused(tmp_path, edit, what):
    path = _records_round(tmp_path)
    _edit_line(path, 2, edit)
    with pytest.raises(records.RecordError) as e:
        load.load_side(tmp_path / "candidate", "candidate", PARAMS["seeds"])
    msg = str(e.value)
    assert msg.startswith(f"{path}:2: ") and "\n" not in msg and what in msg, msg


def test_records_with_consistent_lists_still_load(tmp_path):
    _records_round(tmp_path)
    runs = load.load_side(tmp_path / "candidate", "candidate", PARAMS["seeds"])
    assert [len(r.evals) for r in runs] == [3, 3]


def test_run_json_of_wrong_shape_is_refused_with_its_name(tmp_path):
    _records_round(tmp_path)
    path = tmp_path / "candidate" / "s0" / "run.json"
    info = json.loads(path.read_text())
    info["provenance"] = ["not", "an", "object"]
    path.write_text(json.dumps(info))
    with pytest.raises(records.RecordError, match=r"run\.json: field 'provenance' must be an object"):
        load.load_side(tmp_path / "candidate", "candidate", PARAMS["seeds"])

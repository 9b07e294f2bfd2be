"""The compile-only TPU sizing script (benchmarks/tpu_compile_only.py), without the TPU compiler.

The compiling itself needs the libtpu package, which requirements.lock does not hold; what
is tested here is everything around it: the arguments, the plan, the figures taken from the
compiler's analyses, the fit against the chip's memory, the merge of results, the table,
and the one-line refusal when libtpu is missing.  The script imports no jax at its top, so
importing it here needs no libtpu.
"""

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "tpu_compile_only.py"
_SPEC = importlib.util.spec_from_file_location("tpu_compile_only", SCRIPT)
tpu = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(tpu)


def _stats(arg, out, alias, temp, code=7):
    return SimpleNamespace(argument_size_in_bytes=arg, output_size_in_bytes=out,
                           alias_size_in_bytes=alias, temp_size_in_bytes=temp,
                           generated_code_size_in_bytes=code, host_temp_size_in_bytes=0)


def test_importing_the_script_imports_no_jax():
    code = (f"import importlib.util, sys; s = importlib.util.spec_from_file_location('t', "
            f"{str(SCRIPT)!r}); m = importlib.util.module_from_spec(s); "
            f"s.loader.exec_module(m); print(sorted({{'jax', 'libtpu'}} & set(sys.modules)))")
    import subprocess
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stderr


def test_seed_batch_words_and_the_plan():
    assert [tpu.resolve_seed_batch(x) for x in ("all", "auto", "10", " 25 ")] == [
        None, None, 10, 25]
    for bad in ("0", "-1", "x", "2.5"):
        with pytest.raises(Exception, match="--seed-batch .*must be auto, all or a whole"):
            tpu.resolve_seed_batch(bad)
    assert tpu.plan([1, 10, 100], [None, 10]) == [
        (1, None), (1, 10), (10, None), (10, 10), (100, None), (100, 10)]
    assert tpu.plan([100, 100], [20, 20, None]) == [(100, 20), (100, None)]


def test_memory_and_cost_figures():
    m = tpu.memory_figures(_stats(arg=620, out=630, alias=600, temp=5000))
    assert m == {"argument_bytes": 620, "output_bytes": 630, "alias_bytes": 600,
                 "temp_bytes": 5000, "generated_code_bytes": 7, "need_bytes": 5650}
    with pytest.raises(ValueError, match="memory analysis without temp_size_in_bytes"):
        tpu.memory_figures(SimpleNamespace(argument_size_in_bytes=1, output_size_in_bytes=1,
                                           alias_size_in_bytes=0,
                                           generated_code_size_in_bytes=0))
    c = {"flops": 2.5e9, "bytes accessed": 4e9, "utilization0{}": 1.0}
    assert tpu.cost_figures([c]) == {"flops": 2.5e9, "bytes_accessed": 4e9,
                                     "transcendentals": None}
    assert tpu.cost_figures(c) == tpu.cost_figures([c])
    assert tpu.cost_figures([]) == {"flops": None, "bytes_accessed": None,
                                    "transcendentals": None}


def test_the_verdict_takes_the_largest_program_against_the_budget():
    progs = {"init": {"memory": {"need_bytes": 700}}, "chunk": {"memory": {"need_bytes": 900}},
             "point": {"memory": {"need_bytes": 100}}}
    assert tpu.verdict(progs, 1000, 0.10) == {"need_bytes": 900, "need_program": "chunk",
                                              "budget_bytes": 900, "fits": True}
    assert tpu.verdict(progs, 999, 0.10)["fits"] is False            # budget 899
    assert tpu.verdict(progs, 1000, 0.0)["budget_bytes"] == 1000
    # the lent v5e's memory less the default 10%
    assert tpu.verdict(progs, tpu.V5E_HBM_BYTES, tpu.HEADROOM)["budget_bytes"] == 15218402457


def _entry(seeds, sb, need, temp=1, flops=3e9, hbm=None):
    mem = {"argument_bytes": 2**30, "output_bytes": 2**30, "alias_bytes": 2**30,
           "temp_bytes": temp, "generated_code_bytes": 0, "need_bytes": need}
    progs = {"chunk": {"memory": mem, "cost": {"flops": flops, "bytes_accessed": 5e9,
                                               "transcendentals": None}, "compile_s": 81.4}}
    if hbm is not None:
        progs["chunk"]["traffic"] = {"hbm": {"padded_bytes": hbm, "logical_bytes": hbm}}
    return {"seeds": seeds, "seed_batch": sb, "programs": progs,
            "verdict": tpu.verdict(progs, 16 * 2**30, 0.1)}


def test_merge_replaces_the_same_entry_and_sorts_and_the_table_shows_it():
    old = [_entry(10, None, 1), _entry(100, 20, 2)]
    new = [_entry(100, 10, 3), _entry(10, None, 4), _entry(1, None, 5)]
    merged = tpu.merge(old, new)
    assert [(e["seeds"], e["seed_batch"], e["verdict"]["need_bytes"]) for e in merged] == [
        (1, None, 5), (10, None, 4), (100, 10, 3), (100, 20, 2)]
    rows = tpu.table([_entry(100, 10, 3 * 2**30, temp=2 * 2**30, hbm=68.1e9),
                      _entry(30, None, 15 * 2**30)])
    lines = rows.splitlines()
    assert lines[0].startswith("| seeds | seed batch |") and len(lines) == 4
    assert lines[2] == ("| 100 | 10 | 1.00 | 2.00 | 3.00 | 3.0 | 5.0 | 68.10 | 81 "
                        "| 3.00 (chunk) | yes |")
    # an entry without the traffic estimate (a file made before it was recorded) shows "-"
    assert lines[3].startswith("| 30 | all |") and lines[3].endswith(
        "| 5.0 | - | 81 | 15.00 (chunk) | no |")


SETTINGS = {"topology": "v5e:1x1", "profile": "full", "rows": 24000, "capacity": 1500,
            "chunk_steps": 4, "eval_episodes": 10, "precision": "highest",
            "hbm_bytes": tpu.V5E_HBM_BYTES, "headroom": 0.1}


def test_append_keeps_invocations_and_refuses_other_settings():
    inv = {"argv": ["--seeds", "1"], "date_utc": "2026-12-06T16:23:07Z",
           "code": {"commit": "ab", "dirty": False}}
    one = {"schema": tpu.SCHEMA, "settings": {**SETTINGS, "device_kind": "TPU v5 lite"},
           **inv, "results": [_entry(1, None, 5)]}
    invs, res = tpu.previous(one, SETTINGS)
    assert invs == [inv] and [e["invocation"] for e in res] == [0]
    assert "invocation" not in one["results"][0]          # the file's object is left alone
    two = {**one, "invocations": [inv, inv], "results": [dict(_entry(1, None, 5), invocation=1)]}
    assert tpu.previous(two, SETTINGS) == ([inv, inv], two["results"])
    with pytest.raises(ValueError, match="its settings differ in chunk_steps, precision"):
        tpu.previous(one, {**SETTINGS, "chunk_steps": 25, "precision": "default"})


def test_the_recorded_command_line_names_no_directory():
    assert tpu._argv_recorded(["--seeds", "1", "--out", "/a/b/r.json", "--append"]) == [
        "--seeds", "1", "--out", "r.json", "--append"]
    assert tpu._argv_recorded(["--out=/x/y/z.json"]) == ["--out=z.json"]


def test_missing_libtpu_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    for k in tpu.TPU_ENV:   # main sets them where unset: restored after the test
        monkeypatch.delenv(k, raising=False)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "libtpu" else real(name, *a))
    out = tmp_path / "r.json"
    assert tpu.main(["--seeds", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "tpu_compile_only: error: the libtpu package (the TPU compiler, not in "
        "requirements.lock) is not importable"), err
    assert not out.exists()


def test_bad_arguments_exit_2(tmp_path, capsys):
    for args, msg in ((["--seeds", "0"], "'0' is not a positive whole number"),
                      (["--seeds", "1", "--seed-batch", "0"], "--seed-batch '0': must be"),
                      (["--seeds", "1", "--headroom", "1"], "'1' must lie in [0, 1)"),
                      (["--seeds", "1", "--rows", "1000"], "--rows 1000 is not a multiple"),
                      (["--seed-batch", "2"], "the following arguments are required: --seeds")):
        with pytest.raises(SystemExit) as e:
            tpu.main([*args, "--out", str(tmp_path / "r.json")])
        assert e.value.code == 2 and msg in capsys.readouterr().err, args
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "accel_check/1"}))
    assert tpu.main(["--seeds", "1", "--append", "--out", str(other)]) == 2
    assert "--append other.json: schema 'accel_check/1', not 'tpu_compile_only/1'" in \
        capsys.readouterr().err


def test_the_two_hot_form_is_the_one_a_tpu_run_resolves():
    """The sizing compiles what a run on the TPU builds: ``auto`` is the comparison form
    there, though this host's own backend is the CPU."""
    assert tpu.twohot_form_on_tpu("auto") == "compare"
    assert tpu.twohot_form_on_tpu("window") == "window"
    with pytest.raises(ValueError, match="index_form"):
        tpu.twohot_form_on_tpu("gather")

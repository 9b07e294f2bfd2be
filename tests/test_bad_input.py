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
from dreamer_parity.analysis import checks, compare, load, published
import synthetic  # tests/synthetic.py

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
    assert len(files) == 22, files   # git-tracked: rounds 1-2 three seeds a side, round 3 five
    for f in files:
        rows = published.read_evals(f)
        assert rows, f


def _edit_line(path: Path, lineno: int, fn, reseal: Path | None = None) -> None:
    """Rewrite line ``lineno`` (1-based) of a JSONL file as text (NaN stays NaN); with
    ``reseal``, rewrite that directory's manifest after it (to reach the readers behind
    the manifest, which would refuse the edit first)."""
    lines = path.read_text().splitlines()
    obj = json.loads(lines[lineno - 1])
    lines[lineno - 1] = json.dumps(fn(obj))   # allow_nan: NaN / Infinity written as such
    path.write_text("".join(x + "\n" for x in lines))
    if reseal is not None:
        synthetic.reseal(reseal)


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
    shutil.copytree(ROUND3, tmp_path / "pub" / "round3")
    raw = {"round": "round3-candidate", "profile": "full", "seeds": [0, 1, 2, 3, 4],
           "rows": 24000, "eval_every": 400, "eval_episodes": 10,
           "reference": {"decode": "exact", "sampler": "per_run", "source": "pub/round3"},
           "stats": {"s1_rows": [16000, 18000, 20000], "late_rows": [12000, 24000],
                     "concordance_rows": [20000, 24000], "concordance_range": [16000, 24000]}}
    # a complete params file (a file never takes a default)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params_mod.validate(raw)))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _compare(root):
    return compare.main(["--params", "params.yaml", "--candidate", "pub/round3/ajax",
                         "--metrics-dir", "m", "--plots-dir", "m/plots", "--report", "r.md"])


@pytest.mark.parametrize("edit,what", [(_nan, "NaN"), (_inf, "Infinity"),
                                       (_tens, "not the mean of 'returns'")])
def test_published_list_numbers_refused_by_compare(round3_copy, capsys, edit, what):
    _edit_line(round3_copy / "pub" / "round3" / "ref_s1" / "evals.jsonl", 31, edit,
               reseal=round3_copy / "pub" / "round3")
    capsys.readouterr()
    assert _compare(round3_copy) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: pub/round3/ref_s1/evals.jsonl:31: "), err
    assert what in err
    assert not (round3_copy / "m" / "summary.json").exists()


def test_published_null_returns_have_nothing_to_compare():
    rows = published.read_evals(ROUND3 / "ajax" / "s0" / "evals.jsonl")
    assert rows and all(r["returns"] is None for r in rows)


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


# ---------------------------------------------- 2. one rule per parameter, at every entry point

#: a complete params file (every key: a file never takes a default)
_VALID = params_mod.validate({
    "round": "smoke", "profile": "smoke", "seeds": [0, 1], "rows": 1200, "eval_every": 400,
    "eval_episodes": 2, "stats": {"s1_rows": [400, 800, 1200], "late_rows": [],
                                  "concordance_rows": [1200], "concordance_range": [400, 1200]}})


def _with(dotted: str, value) -> dict:
    return synthetic.with_key(_VALID, dotted, value)


_BAD = {
    "absolute_source": _with("reference.source", "/srv/published/round3"),
    "negative_rows": _with("rows", -5),
    # each side's own seeds (docs/SIDES.md): a list with a seed twice; a list-form source
    # that leaves a seed of its side without a source
    "candidate_seeds_twice": _with("candidate.seeds", [0, 1, 1]),
    "source_short_of_candidate_seeds": _with("candidate", {
        "seeds": [0, 1, 2], "source": [{"from": "run", "seeds": [0, 1]}]}),
}

#: entry point -> argv after ``python -m`` (P: the params file, O: an output path)
_ENTRY_POINTS = {
    "params check": ["dreamer_parity.params", "check", "--file", "P"],
    "pipeline preflight": ["dreamer_parity.pipeline", "--params", "P", "preflight", "--out", "O"],
    "pipeline reference": ["dreamer_parity.pipeline", "--params", "P", "reference", "--seed", "0",
                           "--out", "O"],
    "pipeline compare": ["dreamer_parity.pipeline", "--params", "P", "compare"],
    "port_check": ["dreamer_parity.port_check", "--params", "P", "--out", "O"],
    "candidate run": ["dreamer_parity.candidate.runtime.run", "--params", "P", "--out", "O"],
    "reference launch": ["dreamer_parity.reference.launch", "--params", "P", "--seed", "0",
                         "--out", "O"],
    "compare": ["dreamer_parity.analysis.compare", "--params", "P", "--candidate", "O"],
    "make run": None,
}


def _guarded_env(tmp_path):
    """PYTHONPATH with a ``jax`` / ``jaxlib`` that stop the process when imported."""
    guard = tmp_path / "guard"
    for name in ("jax", "jaxlib"):
        (guard / name).mkdir(parents=True)
        (guard / name / "__init__.py").write_text(
            f"raise SystemExit('{name} imported before the parameters were validated')\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(guard), str(REPO / "src")])
    env.pop(provenance.ALLOW_VERSIONS_ENV, None)
    return env


@pytest.fixture(scope="module")
def expected_lines(tmp_path_factory):
    out = {}
    for case, raw in _BAD.items():
        try:
            params_mod.validate(raw)
        except params_mod.ParamsError as e:
            out[case] = f"error: {e}"
    assert out["absolute_source"].startswith("error: params: reference.source: '/srv/")
    assert out["negative_rows"].startswith("error: params: rows: ")
    assert out["candidate_seeds_twice"] == "error: params: candidate.seeds: duplicate seeds [1]"
    assert out["source_short_of_candidate_seeds"] == \
        "error: params: candidate.source: candidate.seeds [2] have no source"
    return out


@pytest.mark.parametrize("case", sorted(_BAD))
@pytest.mark.parametrize("entry", list(_ENTRY_POINTS))
def test_bad_params_give_the_same_line_everywhere(tmp_path, expected_lines, entry, case):
    work = tmp_path / "work"
    work.mkdir()
    (work / "params.yaml").write_text(yaml.safe_dump(_BAD[case]))
    env = _guarded_env(tmp_path)
    if entry == "make run":
        if shutil.which("make") is None:
            pytest.skip("make not installed")
        shutil.copy(REPO / "requirements.lock", work / "requirements.lock")
        # params-check runs before setup; venv is marked up to date (-o): nothing installed
        stamp = subprocess.run(["make", "-s", "-f", str(REPO / "Makefile"), "-p", "-n", "-q",
                                "clean-venv"], cwd=work, capture_output=True, text=True).stdout
        stamp = next(line.split(":=", 1)[1].strip() for line in stamp.splitlines()
                     if line.startswith("STAMP :="))
        cmd = ["make", "-s", "-f", str(REPO / "Makefile"), "-o", stamp, "run",
               f"PY={sys.executable}"]
    else:
        args = [str(work / "params.yaml") if x == "P" else str(work / "out") if x == "O" else x
                for x in _ENTRY_POINTS[entry]]
        cmd = [sys.executable, "-m", *args]
    r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=120)
    first = (r.stderr.splitlines() or [""])[0]
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert first == expected_lines[case], r.stderr
    assert "imported before the parameters were validated" not in r.stderr
    assert not (work / "out").exists()


# ------------------------------------------------------------- 3. versions against the pins

def test_pins_of_this_venv_match_requirements_lock(monkeypatch):
    monkeypatch.delenv(provenance.ALLOW_VERSIONS_ENV, raising=False)
    got = provenance.check_pins(REPO / "requirements.lock")
    assert got["checked"] and not got["override"]
    assert got["versions"]["jax"] == provenance.read_pins(REPO / "requirements.lock")["jax"]


@pytest.mark.parametrize("python", [None, sys.executable])
def test_pin_mismatch_is_one_line_naming_package_and_versions(tmp_path, monkeypatch, python):
    monkeypatch.delenv(provenance.ALLOW_VERSIONS_ENV, raising=False)
    lock = tmp_path / "requirements-reference.lock"
    lock.write_text("jax==0.0.1\njaxlib==0.0.1\nnumpy==1.0.0\n")
    installed = provenance._installed(("jax",))["jax"]
    with pytest.raises(provenance.PinError) as e:
        provenance.check_pins(lock, python=python)
    msg = str(e.value)
    assert msg.startswith(f"versions: jax {installed} installed, requirements-reference.lock "
                          f"pins 0.0.1 (") and "\n" not in msg


def test_override_is_allowed_and_recorded(tmp_path, monkeypatch):
    lock = tmp_path / "requirements.lock"
    lock.write_text("jax==0.0.1\njaxlib==0.0.1\nnumpy==1.0.0\n")
    monkeypatch.setenv(provenance.ALLOW_VERSIONS_ENV, "1")
    got = provenance.check_pins(lock)
    assert got == {"checked": False, "override": True, "version_set": None,
                   "versions": got["versions"]}
    prov = provenance.collect(modules=())
    assert prov["versions_override"] is True and prov["version_set"] is None


def _set_of_this_venv(monkeypatch, lock_name="requirements.lock"):
    """A version set named ``here`` holding this venv's jax/jaxlib/numpy, for ``lock_name``."""
    here = provenance._installed(provenance.PINNED_PACKAGES)
    monkeypatch.setattr(provenance, "VERSION_SETS", {
        "here": {"lock": lock_name, "about": "test", "versions": here, "also": {}}})
    monkeypatch.setattr(provenance, "_version_set", None)
    monkeypatch.setattr(provenance, "_pins_checked", False)
    return here


def test_version_set_passes_its_versions_and_is_recorded(tmp_path, monkeypatch):
    here = _set_of_this_venv(monkeypatch)
    lock = tmp_path / "requirements.lock"
    lock.write_text("jax==0.0.1\njaxlib==0.0.1\nnumpy==1.0.0\n")
    monkeypatch.setenv(provenance.ALLOW_VERSIONS_ENV, "here")
    got = provenance.check_pins(lock)
    assert got == {"checked": True, "override": True, "version_set": "here", "versions": here}
    prov = provenance.collect(modules=())
    assert prov["versions_checked"] is True and prov["versions_override"] is True
    assert prov["version_set"] == "here"
    assert prov["packages"]["jax"] == here["jax"]
    assert prov["packages"]["jax-cuda13-plugin"] is None or isinstance(
        prov["packages"]["jax-cuda13-plugin"], str)


def test_version_set_named_but_lock_pins_installed_is_no_override(monkeypatch):
    _set_of_this_venv(monkeypatch)
    monkeypatch.setenv(provenance.ALLOW_VERSIONS_ENV, "here")
    got = provenance.check_pins(REPO / "requirements.lock")
    assert (got["checked"], got["override"], got["version_set"]) == (True, False, None)
    assert provenance.collect(modules=())["versions_override"] is False


def test_version_set_other_versions_refused_naming_lock_and_set(tmp_path, monkeypatch):
    here = _set_of_this_venv(monkeypatch)
    provenance.VERSION_SETS["here"]["versions"] = {**here, "numpy": "0.0.2"}
    lock = tmp_path / "requirements.lock"
    lock.write_text(f"jax=={here['jax']}\njaxlib=={here['jaxlib']}\nnumpy==1.0.0\n")
    monkeypatch.setenv(provenance.ALLOW_VERSIONS_ENV, "here")
    with pytest.raises(provenance.PinError) as e:
        provenance.check_pins(lock)
    assert str(e.value).startswith(
        f"versions: numpy {here['numpy']} installed, requirements.lock pins 1.0.0 and version "
        f"set here names 0.0.2 (")
    assert provenance._version_set is None


def test_version_set_of_another_lock_does_not_apply(tmp_path, monkeypatch):
    here = _set_of_this_venv(monkeypatch)
    lock = tmp_path / "requirements-reference.lock"
    lock.write_text("jax==0.0.1\njaxlib==0.0.1\nnumpy==1.0.0\n")
    monkeypatch.setenv(provenance.ALLOW_VERSIONS_ENV, "here")
    with pytest.raises(provenance.PinError) as e:
        provenance.check_pins(lock)
    assert str(e.value).startswith(f"versions: jax {here['jax']} installed, "
                                   f"requirements-reference.lock pins 0.0.1 (")


@pytest.mark.parametrize("value", ["yes", "gpu", "2"])
def test_unknown_allow_versions_value_is_one_line(monkeypatch, value):
    monkeypatch.setenv(provenance.ALLOW_VERSIONS_ENV, value)
    with pytest.raises(provenance.PinError) as e:
        provenance.check_pins(REPO / "requirements.lock")
    assert str(e.value) == (f"versions: DREAMER_PARITY_ALLOW_VERSIONS={value!r} is neither 1 "
                            f"nor a version set (gpu-h200; provenance.VERSION_SETS)")


def test_gpu_version_set_names_every_pinned_package_of_an_existing_lock():
    s = provenance.VERSION_SETS["gpu-h200"]
    assert (REPO / s["lock"]).is_file()
    assert set(s["versions"]) == set(provenance.PINNED_PACKAGES)
    assert s["versions"] == {"jax": "0.11.2", "jaxlib": "0.11.2", "numpy": "2.5.2"}
    pins = provenance.read_pins(REPO / s["lock"])
    assert all(s["versions"][p] != pins[p] for p in provenance.PINNED_PACKAGES)


def _fake_dist(guard: Path, name: str, version: str) -> None:
    d = guard / f"{name}-{version}.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_candidate_run_refuses_other_jax_before_compiling(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "params.yaml").write_text(yaml.safe_dump(_VALID))
    env = _guarded_env(tmp_path)
    _fake_dist(tmp_path / "guard", "jax", "0.0.1")
    pin = provenance.read_pins(REPO / "requirements.lock")["jax"]
    r = subprocess.run([sys.executable, "-m", "dreamer_parity.candidate.runtime.run", "--params",
                        "params.yaml", "--out", "out", "--work-dir", str(tmp_path / "w")],
                       cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"error: versions: jax 0.0.1 installed, requirements.lock pins "
                               f"{pin} ("), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (work / "out").exists()


def _run_with_versions(side, seed, versions, override=False):
    info = {"provenance": {"versions": versions, "versions_override": override}}
    return load.Run(side=side, seed=seed, source="records", label=f"{side}/s{seed}",
                    status="ok", reason=None, failed_row=None, evals=None, eval_returns=[],
                    train=None, episodes=None, run_info=info, timing=None)


_PINS = {"reference": {"jax": "0.4.26", "jaxlib": "0.4.26"},
         "candidate": {"jax": "0.10.2", "jaxlib": "0.10.2"}}
_REF = {"jax": "0.4.26", "jaxlib": "0.4.26", "numpy": "1.26.4"}
_CAND = {"jax": "0.10.2", "jaxlib": "0.10.2", "numpy": "2.4.6"}


def test_version_flags_pass_when_each_side_is_at_its_pins():
    f = checks.version_flags([_run_with_versions("reference", s, _REF) for s in (0, 1)],
                             [_run_with_versions("candidate", s, _CAND) for s in (0, 1)], _PINS)
    assert f["status"] == "PASS", f
    assert f["sides_differ"] is True and f["mixed"] == {"reference": False, "candidate": False}
    assert f["versions"]["candidate"]["s1"] == {"jax": "0.10.2", "jaxlib": "0.10.2"}


def test_version_flags_flag_mixed_off_pin_and_override():
    cand = [_run_with_versions("candidate", 0, _CAND),
            _run_with_versions("candidate", 1, {**_CAND, "jaxlib": "0.10.1"}, override=True)]
    f = checks.version_flags([_run_with_versions("reference", 0, _REF)], cand, _PINS)
    assert f["status"] == "FLAG"
    assert f["mixed"] == {"reference": False, "candidate": True}
    assert f["off_pin"]["candidate"] == ["s1 jaxlib 0.10.1 != pin 0.10.2"]
    assert f["overrides"] == ["candidate s1"]
    assert "candidate runs imported different versions" in f["detail"]


def test_version_flags_name_the_version_set_of_an_override():
    run = _run_with_versions("candidate", 0, {**_CAND, "jax": "0.11.2", "jaxlib": "0.11.2"},
                             override=True)
    run.run_info["provenance"]["version_set"] = "gpu-h200"
    f = checks.version_flags([_run_with_versions("reference", 0, _REF)], [run], _PINS)
    assert f["status"] == "FLAG" and f["overrides"] == ["candidate s0 (version set gpu-h200)"]
    assert f["detail"].endswith(
        "started with DREAMER_PARITY_ALLOW_VERSIONS: candidate s0 (version set gpu-h200)")


def test_version_flags_na_for_published_runs():
    ref = load.load_side(ROUND3, "reference", [0, 1])
    cand = load.load_side(ROUND3 / "ajax", "candidate", [0, 1])
    f = checks.version_flags(ref, cand)
    assert f["status"] == "N/A" and len(f["unrecorded"]) == 4


def _environment_set_of_this_venv(monkeypatch, tmp_path):
    """An ``environment`` version set named ``env-here`` whose own lock pins this venv's
    jax/jaxlib/numpy (as reference-jax010 stands beside requirements-reference-jax010.lock)."""
    here = provenance._installed(provenance.PINNED_PACKAGES)
    lock = tmp_path / "requirements-env-here.lock"
    lock.write_text("".join(f"{k}=={v}\n" for k, v in here.items()))
    monkeypatch.setattr(provenance, "VERSION_SETS", {
        "env-here": {"kind": "environment", "lock": lock.name, "about": "test",
                     "versions": here, "also": {}}})
    monkeypatch.setattr(provenance, "_version_set", None)
    monkeypatch.setattr(provenance, "_pins_checked", False)
    monkeypatch.delenv(provenance.ALLOW_VERSIONS_ENV, raising=False)
    return lock, here


def test_environment_version_set_is_checked_against_its_own_lock_without_override(
        tmp_path, monkeypatch):
    lock, here = _environment_set_of_this_venv(monkeypatch, tmp_path)
    got = provenance.check_pins(lock, version_set="env-here")
    assert got == {"checked": True, "override": False, "version_set": "env-here",
                   "versions": here}
    prov = provenance.collect(modules=())
    assert (prov["versions_checked"], prov["versions_override"], prov["version_set"]) == (
        True, False, "env-here")
    with pytest.raises(provenance.PinError, match="stands beside requirements-env-here.lock, "
                                                  "not requirements.lock"):
        provenance.check_pins(REPO / "requirements.lock", version_set="env-here")
    # the variable names accepted versions only: an environment is chosen by a parameter
    monkeypatch.setenv(provenance.ALLOW_VERSIONS_ENV, "env-here")
    with pytest.raises(provenance.PinError, match="is neither 1 nor a version set"):
        provenance.check_pins(lock, version_set="env-here")


def test_a_launched_process_records_its_launchers_environment_set(monkeypatch):
    monkeypatch.setattr(provenance, "_version_set", None)
    monkeypatch.setattr(provenance, "_pins_checked", False)
    monkeypatch.delenv(provenance.ALLOW_VERSIONS_ENV, raising=False)
    monkeypatch.setenv(provenance.VERSION_SET_ENV, "reference-jax010")
    monkeypatch.delenv(provenance.CHECKED_ENV, raising=False)
    assert provenance.collect(modules=())["version_set"] is None      # not checked: nothing
    monkeypatch.setenv(provenance.CHECKED_ENV, "1")
    prov = provenance.collect(modules=())
    assert (prov["versions_checked"], prov["versions_override"], prov["version_set"]) == (
        True, False, "reference-jax010")


def test_version_flags_judge_a_jax010_reference_run_by_its_environments_lock():
    """A reference run on jax 0.10.2 (version set reference-jax010, checked against that
    set's lock) is at its pins; a side that pools it with 0.4.26 runs is mixed (FLAG)."""
    pins = {**_PINS, "reference-jax010": {"jax": "0.10.2", "jaxlib": "0.10.2"}}
    tpu = _run_with_versions("reference", 10, _CAND)
    tpu.run_info["provenance"]["version_set"] = "reference-jax010"
    cand = [_run_with_versions("candidate", 0, _CAND)]
    alone = checks.version_flags([tpu], cand, pins)
    assert alone["status"] == "PASS" and alone["off_pin"]["reference"] == [], alone
    pooled = checks.version_flags([_run_with_versions("reference", 0, _REF), tpu], cand, pins)
    assert pooled["status"] == "FLAG" and pooled["off_pin"]["reference"] == []
    assert pooled["mixed"]["reference"] is True and pooled["overrides"] == []
    # without the set recorded, the same versions are off the reference lock's pins
    plain = _run_with_versions("reference", 10, _CAND)
    assert checks.version_flags([plain], cand, pins)["off_pin"]["reference"] == [
        "s10 jax 0.10.2 != pin 0.4.26", "s10 jaxlib 0.10.2 != pin 0.4.26"]

"""The accelerator check (benchmarks/accel_check.py, :mod:`dreamer_parity.accel`) run end to
end on the CPU backend.

The dry runs call the script as the TPU or GPU machine would (a child process per phase, the JSON
in --out), with ``--platform cpu``: once with the stand-in agent of ``candidate_stub``
(growing counts, the three comparison precisions, the budget) and once with the real agent at
the smoke profile, so an API change in the agent, the loop or jax breaks the suite rather
than the one run on the accelerator.
"""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from dreamer_parity import provenance
from dreamer_parity.accel import check, options, outcome, phases, wheelsets
from dreamer_parity.candidate.config import AgentConfig
from dreamer_parity.schedule import per_vector_step

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "accel_check.py"

TINY = ["--platform", "cpu", "--step-updates", "2", "--loop-steps", "2", "--loop-chunks", "1",
        "--rows", "1200", "--compare-updates", "2"]


def _run(tmp_path, *args, agent_stub=True, timeout=900):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "tests")] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.pop(provenance.ALLOW_VERSIONS_ENV, None)
    cmd = [sys.executable, str(SCRIPT), "--out", str(tmp_path / "out"), *TINY, *args]
    if agent_stub:
        cmd += ["--agent", "candidate_stub"]
    r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=timeout)
    res = json.loads((tmp_path / "out" / "accel_check.json").read_text())
    return r, res


def _phase(res, name):
    return next(p for p in res["phases"] if p["name"] == name)


def test_dry_run_with_the_stub_grows_compares_and_records(tmp_path):
    r, res = _run(tmp_path, "--seeds", "1", "--max-seeds", "2", "--budget-s", "400")
    assert r.returncode == 0, r.stderr
    names = [p["name"] for p in res["phases"]]
    # probe, count 1, the high- and highest-precision compares, count 2 (grown; 4 is past
    # --max-seeds), and the CPU side, which ran alongside (recorded when it ended)
    assert [x for x in names if x != "compare-cpu"] == [
        "probe", "step-1", "loop-1", "compare-high", "compare-highest", "step-2", "loop-2"], names
    assert names.count("compare-cpu") == 1 and names.index("compare-cpu") > 1
    assert _phase(res, "step-2")["grown"] is True
    assert all(p["status"] == "ok" for p in res["phases"]), res["summary"]
    assert res["device"]["backend"]["platform"] == "cpu"
    s = res["summary"]
    assert s["largest_ok"] == {"step": 2, "loop": 2}
    for kind in ("step", "loop"):
        for n in ("1", "2"):
            f = s[kind][n]
            assert f["seed_updates_per_s"] > 0 and f["compile_s"] > 0
            assert f["peak_bytes"] > 2**20 and f["memory_source"] == "ru_maxrss"
    loop2 = _phase(res, "loop-2")["result"]
    # one timed chunk of 2 vector steps after the gate at 8 updates each; the whole run:
    # 33 chunks of 2 up to the gate's vector step 65, one untimed and one timed chunk
    assert loop2["timed_updates"] == 16 and loop2["seeds"] == 2
    # --seed-batch auto: the loop as a run on this backend (CPU: one seed at a time), the
    # step as plain vmap
    assert loop2["seed_batch"] == 1 and _phase(res, "step-2")["result"]["seed_batch"] is None
    assert res["settings"]["seed_batch"] == "auto"
    assert loop2["updates_done"] == sum(per_vector_step(70)) == 41
    assert loop2["seed_updates_per_s"] == pytest.approx(2 * 16 / loop2["timed_s"])
    step2 = _phase(res, "step-2")["result"]
    assert len(step2["times_s"]) == 3 and step2["updates"] == 2
    assert step2["seed_updates_per_s"] == pytest.approx(2 * 2 / sum(step2["times_s"][1:]))
    # the same program on the same backend: no difference; the stub's NaN metric (every
    # other update) compares equal to itself
    for prec in ("default", "high", "highest"):
        d = s["compare"][prec]
        assert d["max_abs"] == 0.0 and d["max_rel"] == 0.0 and d["max_abs_metric"] is None
        assert d["metrics"] == 6 and d["only_one_side"] == []
    dev = _phase(res, "step-1")["result"]["metrics"]
    assert len(dev["vector_loss"]) == 2 and dev["maybe_nan"][1] is None
    assert res["versions"]["checked"] is True and res["versions"]["version_set"] is None
    assert res["argv"][:2] == ["--out", "<out>"]
    assert res["code"]["sha256_src_and_check"] == check.tree_digest(
        ["src/dreamer_parity", "benchmarks/accel_check.py"])
    assert "| 2 |" in r.stdout and "every value equal" in r.stdout


def test_dry_run_runs_and_records_the_seed_batch(tmp_path):
    """``--seed-batch 2`` at 3 seeds: both parts run the train step in groups of 2 (a
    group of 2, then the remaining seed) and record it."""
    r, res = _run(tmp_path, "--seeds", "3", "--max-seeds", "3", "--seed-batch", "2",
                  "--compare-updates", "0", "--budget-s", "400")
    assert r.returncode == 0, r.stderr
    assert [p["name"] for p in res["phases"]] == ["probe", "step-3", "loop-3"]
    assert res["settings"]["seed_batch"] == "2" and "--seed-batch 2" in r.stdout
    for kind in ("step", "loop"):
        ph = _phase(res, f"{kind}-3")
        assert ph["status"] == "ok" and ph["result"]["seed_batch"] == 2, ph
        assert res["summary"][kind]["3"]["seed_batch"] == 2
    loop3 = _phase(res, "loop-3")["result"]
    assert loop3["timed_updates"] == 16 and loop3["updates_done"] == 41
    step3 = _phase(res, "step-3")["result"]
    assert step3["seed_updates_per_s"] == pytest.approx(3 * 2 / sum(step3["times_s"][1:]))


def test_step_seed_batch_is_plain_vmap_for_auto_and_the_compare():
    assert phases.step_seed_batch({"seed_batch": "auto"}) is None
    assert phases.step_seed_batch({"seed_batch": None}) is None
    assert phases.step_seed_batch({"seed_batch": 4}) == 4
    assert phases.step_seed_batch({"seed_batch": 4, "compare_updates": 3}) is None


def test_budget_ends_the_check_cleanly(tmp_path):
    r, res = _run(tmp_path, "--seeds", "1", "2", "--budget-s", "9")
    assert r.returncode == 0, r.stderr
    assert res["elapsed_s"] < 9 + 20
    # 9 s less the 3 s kept back: the probe (a jax import) leaves too little for the rest
    assert any(p["status"] in ("skipped", "stopped") for p in res["phases"]), res["phases"]
    for p in res["phases"]:
        assert p["status"] in ("ok", "skipped", "stopped"), p
        if p["status"] != "ok":
            assert "budget" in p["reason"]
    assert res["summary"]["skipped"]


def test_real_agent_smoke_dry_run(tmp_path):
    # the train step only (the loop's phase is the stub test's; the real agent's loop is
    # test_candidate_loop_run's).  The "device" side runs the two-hot comparison form, the
    # CPU side the table lookups (auto on the CPU), so the compare also checks that the
    # two forms give the same metrics over two updates
    r, res = _run(tmp_path, "--profile", "smoke", "--seeds", "1", "--max-seeds", "1",
                  "--parts", "step", "--compare-precisions", "default", "--cpu-compare",
                  "after", "--twohot-index", "compare", "--budget-s", "850",
                  agent_stub=False, timeout=900)
    assert r.returncode == 0, r.stderr
    assert [p["name"] for p in res["phases"]] == ["probe", "step-1", "compare-cpu"]
    assert all(p["status"] == "ok" for p in res["phases"]), res["summary"]
    s = res["summary"]
    assert s["step"]["1"]["seed_updates_per_s"] > 0 and s["loop"] == {}
    assert s["cpu_step_1"]["seed_updates_per_s"] > 0
    d = s["compare"]["default"]
    assert d["max_abs"] == 0.0 and d["metrics"] > 50     # the agent's metrics, all equal
    assert res["settings"]["twohot_index"] == "compare"
    assert _phase(res, "step-1")["result"]["twohot_index"] == "compare"
    assert _phase(res, "compare-cpu")["result"]["twohot_index"] == "window"
    # on the CPU the other auto settings resolve to the CPU's forms (a GPU: batched, chunked)
    for name in ("step-1", "compare-cpu"):
        r = _phase(res, name)["result"]
        assert (r["observe_grad"], r["opt_norms"]) == ("scan", "tensor")
    assert res["settings"]["head_rows"] is None
    assert _phase(res, "step-1")["result"]["head_rows"] == AgentConfig().head_rows == 8
    m = _phase(res, "step-1")["result"]["metrics"]
    assert all(len(v) == 2 for k, v in m.items() if k != "params_abs_sum")
    assert m["params_abs_sum"][0] > 0
    assert _phase(res, "step-1")["result"]["state_bytes_per_seed"] > 0
    prov = res["device"]["provenance"]
    assert prov["packages"]["gymnax"] == provenance.read_pins(REPO / "requirements.lock")["gymnax"]


def test_agent_config_takes_the_speed_settings_of_the_spec():
    # --head-rows and --twohot-index reach the device phases' config; the CPU side's spec
    # keeps the profile's (the real agent: no compile here)
    spec = {"agent": "dreamer_parity.candidate.agent", "profile": "smoke"}
    _, cfg = phases.agent_and_config({**spec, "head_rows": 2, "twohot_index": "compare"})
    assert (cfg.head_rows, cfg.twohot_index) == (2, "compare")
    _, cfg = phases.agent_and_config({**spec, "head_rows": None, "twohot_index": "auto"})
    assert (cfg.head_rows, cfg.twohot_index) == (AgentConfig().head_rows, "auto") == (8, "auto")
    ap = options.parser("the check")
    a = ap.parse_args(["--out", "x", "--head-rows", "2"])
    options.validate(ap, a)
    assert check.phase_spec(a, {"kind": "loop", "side": "device"})["head_rows"] == 2
    assert check.phase_spec(a, {"kind": "loop", "side": "cpu"})["head_rows"] is None
    with pytest.raises(SystemExit):
        ap.parse_args(["--out", "x", "--head-rows", "0"])


def test_metric_differences_pick_the_largest_and_handle_non_finite():
    dev = {"a": [1.0, 2.0], "b": [0.0, None], "c": [float("inf"), 1.0], "d": [5.0]}
    cpu = {"a": [1.0, 2.5], "b": [0.0, None], "c": [1.0, 1.0], "e": [1.0]}
    d = outcome.metric_differences(dev, cpu)
    assert d["per_metric"]["a"] == {"max_abs": 0.5, "max_rel": 0.2}
    assert d["per_metric"]["b"] == {"max_abs": 0.0, "max_rel": 0.0}
    assert d["max_abs"] == float("inf") and d["max_abs_metric"] == "c"
    assert d["max_abs_update"] == 0
    assert d["only_one_side"] == ["d", "e"] and d["metrics"] == 3


def test_classify_tells_oom_from_error_and_reads_the_result():
    ok = outcome.classify(0, 'noise\nPHASE {"x": 1}\n', "", False, 1.0)
    assert ok == {"status": "ok", "result": {"x": 1}}
    err = "Traceback (most recent call last):\n  File x\njaxlib.XlaRuntimeError: " \
          "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 123 bytes.\n"
    oom = outcome.classify(1, "", err, False, 1.0)
    assert oom["status"] == "oom" and oom["reason"].startswith("jaxlib.XlaRuntimeError")
    bad = outcome.classify(1, "", "Traceback\n  File y\nKeyError: 'nope'\n", False, 1.0)
    assert bad["status"] == "error" and bad["reason"] == "KeyError: 'nope'"
    assert outcome.classify(0, "", "", False, 1.0)["reason"] == "exit 0"
    st = outcome.classify(-9, "", "", True, 12.4)
    assert st == {"status": "stopped", "reason": "budget ended after 12 s of this phase"}


def test_a_phase_child_refuses_a_bad_spec_in_one_line(capsys):
    for argv in ([], ["not json"], ['{"kind": "train"}'], ["[1]"]):
        assert phases.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == ["error: expected one argument, a JSON object whose kind is one of "
                       "probe, step, loop"], argv


def test_wheel_sets_by_version_set_and_a_missing_module_named(tmp_path, monkeypatch):
    assert wheelsets.wheel_set("none")["dir"] == ".accel-wheels"
    assert wheelsets.wheel_set("gpu-h200")["make"] == "gpu-wheels"
    with pytest.raises(ValueError, match=r"^--versions 'gpu-x' is not in provenance\.VERSION_SETS"):
        wheelsets.wheel_set("gpu-x")
    # an empty wheel folder: nothing to install; a module nobody has is named with the fix
    monkeypatch.setattr(wheelsets, "NEEDED_MODULES", ("json", "dp_no_such_module"))
    (tmp_path / ".gpu-wheels").mkdir()
    plan, why = wheelsets.prepare(tmp_path / ".gpu-wheels", tmp_path / "site", "gpu-h200")
    assert plan == [] and why == (
        "not installed: dp_no_such_module (no wheel in .gpu-wheels/: run `make gpu-wheels` "
        "and copy .gpu-wheels/ with the working tree)")
    (tmp_path / "w" / "notes.whl").mkdir(parents=True)
    assert wheelsets.prepare(tmp_path / "w", tmp_path / "site", "none") == (
        [], "wheels: notes.whl: not a wheel file name")
    assert not (tmp_path / "site").exists()


def _wheel(dest: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel holding one module ``<name>_probe``."""
    mod = f"{name.replace('-', '_')}_probe"
    info = f"{name.replace('-', '_')}-{version}.dist-info"
    path = dest / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    files = {f"{mod}.py": "VALUE = 7\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{k},,\n" for k in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for k, v in files.items():
            z.writestr(k, v)
    return path


def test_only_missing_wheels_are_installed_into_the_target(tmp_path, monkeypatch):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "dp-accel-check-probe", "0.1")
    numpy_version = provenance.package_versions(("numpy",))["numpy"]
    _wheel(wheels, "numpy", "0.0.1")     # installed already: left alone
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "")
    plan = wheelsets.install_wheels(wheels, tmp_path / "site")
    by = {p["name"]: p for p in plan}
    assert by["dp-accel-check-probe"]["action"] == "install"
    assert by["dp-accel-check-probe"]["installed"] is None
    assert by["numpy"] == {"wheel": "numpy-0.0.1-py3-none-any.whl", "name": "numpy",
                           "version": "0.0.1", "installed": numpy_version, "action": "present"}
    assert (tmp_path / "site" / "dp_accel_check_probe_probe.py").read_text() == "VALUE = 7\n"
    assert not (tmp_path / "site" / "numpy_probe.py").exists()
    assert os.environ["PYTHONPATH"] == str(tmp_path / "site")
    assert sys.path[0] == str(tmp_path / "site")


def test_wheel_names_and_bad_arguments():
    from dreamer_parity import wheels
    assert wheels.wheel_name("Farama_Notifications-0.0.6-py3-none-any.whl") == (
        "farama-notifications", "0.0.6")
    with pytest.raises(ValueError, match="notes.txt: not a wheel file name"):
        wheels.wheel_name("notes.txt")
    for args, msg in ((["--seeds", "0"], "argument --seeds: '0' must be positive"),
                      (["--versions", "gpu-x"], "--versions 'gpu-x' is not in"),
                      (["--rows", "1000"], "--rows must be a multiple of 16"),
                      (["--compare-precisions", "highest"], "must include default"),
                      (["--seed-batch", "0"], "--seed-batch '0': must be auto, all or a whole"),
                      (["--seed-batch", "some"], "--seed-batch 'some': must be auto, all or"),
                      ([], "--out is required")):
        out = ["--out", "x"] if args else []
        r = subprocess.run([sys.executable, str(SCRIPT), *out, *args], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 2 and msg in r.stderr, (args, r.stderr)


def test_the_wheels_are_pinned_by_the_lock():
    pins = provenance.read_pins(REPO / "requirements.lock")
    assert {n: pins[n] for n in wheelsets.ACCEL_WHEELS} == {
        "gymnax": "1.0.1", "gymnasium": "1.3.0", "farama-notifications": "0.0.6",
        "seaborn": "0.13.2", "pyyaml": "6.0.4"}


def test_the_tree_copied_to_an_accelerator_stays_under_its_limit():
    # the copy holds the tracked and untracked, not ignored files plus the wheel folder
    # (about 1 MiB), 64 MiB at most (docs/CANDIDATE.md#accelerators)
    sent = wheelsets.travelling_bytes()
    if sent is None:
        pytest.skip("not a git checkout")
    assert sent > (REPO / "requirements.lock").stat().st_size + SCRIPT.stat().st_size
    assert sent + 2**20 < 64 * 2**20, f"{sent / 2**20:.1f} MiB would travel"


def test_device_env_installs_what_the_program_store_needs_at_the_lock_s_versions():
    # the candidate's program store serialises with jax.export, which imports flatbuffers; the
    # TPU machine has only jax, jaxlib and numpy, so benchmarks/device_env.sh must install it
    import re
    script = (REPO / "benchmarks" / "device_env.sh").read_text()
    lists = re.findall(r"\$\(_dp_pins ([a-z0-9 _-]+)\)", script)
    assert len(lists) == 1, lists
    names = lists[0].split()
    assert "flatbuffers" in names and "optax" in names and "flax" in names
    pins = {n.lower(): v for n, v in provenance.read_pins(REPO / "requirements.lock").items()}
    assert all(n in pins for n in names), [n for n in names if n not in pins]
    # what each name resolves to in the shell function, checked by running it
    r = subprocess.run(["bash", "-c", script.split("if [ ! -f")[0] + "\n_dp_pins " + " ".join(names)],
                       cwd=REPO, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [f"{n}=={pins[n]}" for n in names]


def test_device_env_refuses_without_the_machine_s_index_before_writing(tmp_path):
    # the package index is the machine's, named by PIP_INDEX_URL; without it nothing is made
    env = {k: v for k, v in os.environ.items() if k != "PIP_INDEX_URL"}
    env["HOME"] = str(tmp_path)
    r = subprocess.run(["bash", "-c", ". benchmarks/device_env.sh; echo rc=$?"], cwd=REPO,
                       env=env, capture_output=True, text=True, timeout=30)
    assert r.stdout.strip() == "rc=1"
    assert r.stderr == "device_env: PIP_INDEX_URL: unset (the machine's package index)\n"
    assert list(tmp_path.iterdir()) == []

"""The GPU call (benchmarks/gpu_call.py, :mod:`dreamer_parity.accel.deadline`) run end to end
on the CPU backend.

Every phase but the GPU itself runs here: the wheel install (a stand-in wheel), the probe, the
smoke seed and its archive, the measurement (accel_check's loop at the smoke profile), the
batch sized from it, run at precision highest, and the archive of its finished seeds, which
``keep``'s reader accepts.  The GPU's own figures (``provenance.gpu``) are checked with a
stand-in ``nvidia-smi``.
"""

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from dreamer_parity import params as paramslib, provenance, sides
from dreamer_parity.accel import mirror
from dreamer_parity.accel.deadline import plan_batch, updates_per_seed

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "gpu_call.py"

SMOKE_SETS = [f"--set={k}={json.dumps(v) if v is not None else 'null'}"
              for k, v in paramslib.SMOKE.items()]
# the smoke, the measurement and the batch: the smoke round's 1,200 rows in chunks of 5 vector
# steps, 15 in all; the 14th is the first whose every step updates, the 15th is timed (81
# updates a seed)
BATCH = ["eval_every=80"]


def _wheel(d: Path, name: str, version: str) -> Path:
    mod = name.replace("-", "_")
    path = d / f"{mod}-{version}-py3-none-any.whl"
    info = f"{mod}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{mod}_probe.py", "VALUE = 7\n")
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return path


def test_plan_batch_fits_the_deadline_and_bounds_wider_batches():
    # 8 seeds measured at 40 seed-updates/s: 0.2 s per batched update; 100 updates a seed
    p = plan_batch(left_s=100.0, updates_per_seed=100, measured_seeds=8,
                            seed_updates_per_s=40.0, compile_s=20.0, max_seeds=32)
    # up to 8 seeds: 20 + 30 + 100 * 0.2 = 70 s; n seeds above: 50 + 20 * n / 8 <= 100 -> 20
    assert p == {"seeds": 20, "estimate_s": pytest.approx(100.0), "update_s_measured": 0.2}
    assert plan_batch(100.0, 100, 8, 40.0, 20.0, 4)["seeds"] == 4
    assert plan_batch(60.0, 100, 8, 40.0, 20.0, 32) == {
        "seeds": 0, "estimate_s": None, "update_s_measured": 0.2}
    # programs that load in 2 s: a count among them costs 2 s, not the 20 s compile
    assert plan_batch(100.0, 100, 8, 40.0, 20.0, 32, ready={24: 2.0}) == {
        "seeds": 24, "estimate_s": pytest.approx(92.0), "update_s_measured": 0.2}
    # no compile measured: only the counts that load
    assert plan_batch(100.0, 100, 8, 40.0, None, 32, ready={8: 2.0, 16: 2.0})["seeds"] == 16
    assert plan_batch(100.0, 100, 8, 40.0, None, 32)["seeds"] == 0
    with pytest.raises(ValueError, match="must be positive"):
        plan_batch(100.0, 100, 8, 0.0, 20.0, 32)
    # the round's 24,000 rows: 11,481 updates a seed (docs/CANDIDATE.md)
    assert updates_per_seed(24000) == 11481


def test_gpu_provenance_from_nvidia_smi_and_xla_flags(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA H200, 580.95.05, 143771'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_autotune_level=4 --xla_gpu_autotune_level=0")
    monkeypatch.setenv("JAX_DEFAULT_MATMUL_PRECISION", "highest")
    g = provenance.gpu(str(smi))
    assert g == {"gpus": [{"name": "NVIDIA H200", "driver": "580.95.05", "memory_mib": 143771}],
                 "xla_flags": "--xla_gpu_autotune_level=4 --xla_gpu_autotune_level=0",
                 "autotune_level": 0, "matmul_precision": "highest"}
    missing = provenance.gpu(str(tmp_path / "none"))
    assert missing["gpus"] is None and missing["error"] == "nvidia-smi: FileNotFoundError"
    assert provenance.autotune_level("") is None
    # collect() adds it on a GPU backend only
    monkeypatch.setattr(provenance, "backend", lambda: {"platform": "gpu"})
    assert "gpu" in provenance.collect()
    monkeypatch.setattr(provenance, "backend", lambda: {"platform": "cpu"})
    assert "gpu" not in provenance.collect()


@pytest.mark.parametrize("args,msg", [
    (["--deadline-s", "0"], "--deadline-s 0.0: must be a positive number"),
    (["--deadline-s", "9", "--max-seeds", "0"], "--max-seeds 0: must be positive"),
    (["--deadline-s", "9", "--measure-chunks", "0"], "--measure-chunks 0: must be positive"),
    (["--deadline-s", "9", "--versions", "gpu-x"], "--versions 'gpu-x' is not in"),
    (["--deadline-s", "9", "--set", "seeds=[1, 1]"], "duplicate seeds"),
    (["--deadline-s", "9", "--params", "nope.yaml"], "--params: file not found"),
    (["--deadline-s", "9", "--smoke-set", "rows=1000"], "eval_every"),
    (["--deadline-s", "9", "--first-seed", "50"],
     "--first-seed 50: candidate seeds up to"),   # 50-65 are kept TPU seeds
    (["--deadline-s", "9", "--platform", "rocm"],
     "--platform 'rocm': the mirror probe runs on cpu, cuda, tpu only"),
])
def test_bad_arguments_are_refused_before_anything_runs(tmp_path, args, msg):
    r = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "out"), *args],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 2 and msg in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


#: The smoke's mirror probe on XLA:CPU: no pair of 127 differs in any product, at either
#: precision, autotuning "off" and "on" alike (the flag is not passed there)
CPU_DIFFER = {p: {k: {f"{rows}/{what}": 0 for rows in ("imagination", "replay")
                      for what in ("forward", "gradient")}
                  for k in ("autotune_off", "autotune_on")} for p in ("default", "highest")}


def test_the_mirror_probe_table_and_its_limits():
    one = {"results": {"replay": {"forward": {"differ": 3}, "gradient": {"differ": 0}},
                       "imagination": {"forward": {"differ": 0}, "gradient": {"differ": 127}}}}
    pair = {"autotune_off": one, "autotune_on": {"results": {
        "replay": {"forward": {"differ": 0}}}}}
    assert mirror.differ_table({"default": pair, "highest": {"error": "exit 1: boom"}}) == {
        "default": {"autotune_off": {"imagination/forward": 0, "imagination/gradient": 127,
                                     "replay/forward": 3, "replay/gradient": 0},
                    "autotune_on": {"replay/forward": 0}},
        "highest": {"error": "exit 1: boom"}}
    assert mirror.probe_platform("cuda,cpu") == "cuda" and mirror.probe_platform("cpu") == "cpu"
    with pytest.raises(ValueError, match="--platform 'gpu': the mirror probe runs on"):
        mirror.probe_platform("gpu")
    with pytest.raises(ValueError, match="--budget-s 0: must be a positive number"):
        mirror.run("cpu", 0)
    # a process past its share (0.2 s of 0.8 s: jax does not even import) is killed, and said
    got = mirror.run("cpu", 0.8)
    assert got["pairs"] == {p: {"error": "a probe process ran past 0.2 s"}
                            for p in ("default", "highest")}
    assert got["differ"] == got["pairs"] and got["mirror_pairs"] == 127


@pytest.mark.slow
def test_the_call_runs_every_phase_on_the_cpu(tmp_path):
    """Programs compiled beforehand for one seed (``precompile``, target ``cpu``) are loaded by
    the smoke, the measurement and the batch (all three run one seed of the same programs
    here), so nothing else compiles."""
    import jax

    from dreamer_parity.accel import precompile
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "dp-gpu-call-probe", "0.1")
    sets = [x[len("--set="):] for x in SMOKE_SETS] + BATCH
    with jax.default_matmul_precision("highest"):
        built = precompile.build(paramslib.load(REPO / "params.yaml", sets), [1],
                                 tmp_path / "programs", "cpu", log=lambda _: None)
    env = {k: v for k, v in os.environ.items() if k != provenance.ALLOW_VERSIONS_ENV}
    out, runs = tmp_path / "out", tmp_path / "runs"
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--runs", str(runs),
         "--deadline-s", "3000", "--max-seeds", "1",
         "--measure-seeds", "1", "--measure-chunks", "1", "--platform", "cpu",
         "--versions", "none", "--smoke-timeout-s", "1200", "--wheels", str(wheels),
         "--programs", str(tmp_path / "programs"), *(f"--set={x}" for x in sets),
         *(f"--smoke-set={x}" for x in BATCH)],
        capture_output=True, text=True, timeout=3000, cwd=REPO, env=env)
    res = json.loads((out / "gpu_call.json").read_text())
    assert r.returncode == 0, (r.stderr[-3000:], res)
    assert [p["name"] for p in res["phases"]] == [
        "probe", "programs", "smoke", "smoke-pack", "mirror", "measure", "batch", "pack"]
    key = built[0]["key"]
    assert list(res["programs"]["entries"]) == [key]
    assert res["programs"]["entries"][key]["ok"] and res["programs"]["entries"][key]["seeds"] == 1
    # what the plan matches against the call's own parameters and precision
    assert res["programs"]["entries"][key]["settings"] == {
        "profile": "smoke", "decode": "exact", "rows": 1200, "eval_every": 80,
        "eval_episodes": 2, "precision": "highest"}
    measure = res["phases"][5]
    assert measure["name"] == "measure" and measure["loop"]["seed_updates_per_s"] > 0
    assert measure["loop"]["programs"] == {"source": "precompiled", "key": key, "target": {
        "platform": "cpu", "device_kind": jax.devices()[0].device_kind,
        "compute_capability": None, "described": False}}
    assert measure["loop"]["timed_updates"] == 40   # one chunk of 5 vector steps
    # no compile was measured: the batch is a count whose programs loaded
    # the first seed number above every kept candidate seed (--first-seed's default)
    first = sides.kept_seeds("candidate", REPO)[-1] + 1
    assert first >= 66
    assert res["plan"]["seed_list"] == [first] and res["finished"] == [first]
    assert res["plan"]["updates_per_seed"] == 81
    # the smoke's mirror probe: on XLA:CPU no pair differs, at either precision
    assert res["mirror"]["differ"] == CPU_DIFFER and res["mirror"]["mirror_pairs"] == 127
    for precision, pair in res["mirror"]["pairs"].items():
        assert (pair["platform"], pair["precision"], pair["flag_passed"]) == (
            "cpu", precision, False)
        assert {pair[k]["backend"] for k in ("autotune_off", "autotune_on")} == {"cpu"}
        assert mirror.mirror_gemm.AUTOTUNE_OFF not in pair["autotune_off"]["xla_flags"]
    assert res["mirror"]["budget_s"] == mirror.BUDGET_S
    assert [w["action"] for w in res["wheels"]] == ["install"]
    assert res["probe"]["backend"]["platform"] == "cpu"
    assert res["probe"]["backend"]["matmul_precision"] == "highest"
    # only the JSON and the archive come back
    archive = f"candidate-s{first}-s{first}.tar.gz"
    assert sorted(p.name for p in out.iterdir()) == [archive, "gpu_call.json"]
    with tarfile.open(out / archive) as tar:
        names = tar.getnames()
        run = json.load(tar.extractfile(f"candidate/s{first}/run.json"))
    assert {n.split("/")[1] for n in names} == {f"s{first}"}
    assert f"candidate/s{first}/DONE.json" in names
    assert run["seed"] == first and run["provenance"]["backend"]["matmul_precision"] == "highest"
    assert run["config"]["programs"]["source"] == "precompiled"
    assert run["config"]["programs"]["key"] == key
    smoke = json.loads((runs / "smoke" / "candidate" / "s0" / "run.json").read_text())
    assert smoke["config"]["programs"] == run["config"]["programs"]
    assert run["provenance"]["xla_flags"] == os.environ.get("XLA_FLAGS", "")

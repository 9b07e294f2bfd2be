"""The machine choice of the one-command reference seed (python -m dreamer_parity.device_reference
--machine tpu-v5e|gpu-h200), on the CPU: each machine's parameters, the wheels it is sent (its
reference lock and PyYAML, less what its image holds), the preparation of its folder where the
package index and a git source of the reference commit are at hand (skipped, saying why,
otherwise), and the refusals, before anything runs."""

import subprocess
import sys
from pathlib import Path

import pytest

from dreamer_parity import device_reference as dev
from dreamer_parity import params as P
from dreamer_parity import provenance
from dreamer_parity.reference import setup as rs
from test_reference_jax010 import REPO, SCRIPT, _git_source

#: What the GPU machine's image lacks of requirements-reference-jax011.lock (its image:
#: the unmarked lines of requirements-gpu-cpu312.lock, which hold PyYAML)
GPU_WHEELS = {"attrs": "26.1.0", "cloudpickle": "3.1.3", "colored": "2.3.2",
              "decorator": "5.3.2", "dm-tree": "0.1.10", "einops": "0.8.2", "gast": "0.7.0",
              "pyzmq": "27.3.0", "ruamel-yaml": "0.19.1", "six": "1.17.0",
              "tensorflow-probability": "0.24.0", "wrapt": "2.5.2"}


def test_each_machine_has_its_reference_environment_platform_and_folder():
    gpu = dev.device_params(7, name="gpu-h200")
    assert gpu["reference"] == {"decode": "exact", "sampler": "per_run", "jax": "0.11.2",
                                "platform": "gpu", "precision": "highest", "source": "run"}
    assert (gpu["profile"], gpu["rows"], gpu["eval_every"], gpu["seeds"]) == (
        "full", 24000, 400, [7])
    tpu = dev.device_params(7)
    assert (tpu["reference"]["jax"], tpu["reference"]["platform"]) == ("0.10.2", "tpu")
    assert dev.DEFAULT_MACHINE == "tpu-v5e"
    assert {n: (m["python"], m["prepared"], m["make"]) for n, m in dev.MACHINES.items()} == {
        "tpu-v5e": ("3.11", ".tpu-ref", "tpu-reference"),
        "gpu-h200": ("3.12", ".gpu-ref", "gpu-reference")}
    # the machine's environment is the one its version set names
    assert provenance.VERSION_SETS["reference-jax011"]["also"]["python"] == "3.12"
    assert rs.lock_file("0.11.2").name == "requirements-reference-jax011.lock"
    with pytest.raises(ValueError, match="--machine: unknown value 'gpu-x'; expected one of "
                                         "tpu-v5e, gpu-h200"):
        dev.device_params(0, name="gpu-x")
    with pytest.raises(P.ParamsError, match="reference.platform: gpu needs reference.jax 0.11.2"):
        dev.device_params(0, ["reference.jax=0.10.2"], name="gpu-h200")


def test_the_gpu_machine_gets_the_jax011_lock_less_its_image():
    want = dev.wanted_wheels("gpu-h200")
    assert want == GPU_WHEELS
    lock = rs.read_lock(rs.lock_file("0.11.2"))
    held = dev.preinstalled("gpu-h200")
    # the image holds jax, jaxlib 0.11.2, numpy 2.5.2 (the version set) and PyYAML
    assert {n: held[n] for n in ("jax", "jaxlib", "numpy", "pyyaml", "optax", "chex")} == {
        "jax": "0.11.2", "jaxlib": "0.11.2", "numpy": "2.5.2", "pyyaml": "6.0.4",
        "optax": "0.2.8", "chex": "0.1.92"}
    assert set(want) | (set(lock) & set(held)) == set(lock)
    # at the lock's versions: nothing of the image differs from it
    assert dev.image_differences("gpu-h200") == {}
    # the TPU machine lacks PyYAML, the GPU machine's image holds it
    assert "pyyaml" in dev.wanted_wheels("tpu-v5e") and "pyyaml" not in want


def test_prepare_fetches_cpython_312_wheels_and_the_export(tmp_path):
    source = _git_source()          # skips, saying why, without a git source of the commit
    try:
        got = dev.prepare(tmp_path / "gpu-ref", source, "gpu-h200")
    except RuntimeError as e:
        if not str(e).startswith("pip download failed"):
            raise
        pytest.skip(f"the package index is not reachable: {e}")
    files = sorted((tmp_path / "gpu-ref" / "wheels").glob("*.whl"))
    assert got["wheels"] == [f.name for f in files]
    from dreamer_parity import wheels
    assert dict(wheels.wheel_name(f) for f in files) == GPU_WHEELS
    # compiled wheels for CPython 3.12 (or its stable ABI), the rest pure Python
    tags = {wheels.wheel_name(f)[0]: f.name.split("-")[-2] for f in files}
    assert {n: t for n, t in tags.items() if t != "none"} == {
        "dm-tree": "cp312", "pyzmq": "abi3", "wrapt": "cp312"}
    assert got["wheels_mib"] == round(sum(f.stat().st_size for f in files) / 2**20, 2)
    assert 7.5 < got["wheels_mib"] < 9.0      # tensorflow-probability 6.6 MiB of it
    assert (tmp_path / "gpu-ref" / f"dreamerv3-{rs.REF_COMMIT[:7]}.tar.gz").is_file()
    assert got["machine"] == "gpu-h200" and got["image_differs"] == {}


def test_an_unknown_machine_or_a_bad_pair_is_refused_before_anything(tmp_path):
    r = subprocess.run([sys.executable, *SCRIPT, "--machine", "gpu-x", "--prepare",
                        str(tmp_path / "p")], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2 and "invalid choice: 'gpu-x'" in r.stderr
    r = subprocess.run([sys.executable, *SCRIPT, "--machine", "gpu-h200", "--seed", "0",
                        "--name", "a", "--out-dir", str(tmp_path / "o"), "--set",
                        "reference.jax=0.10.2"], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2 and r.stderr.startswith(
        "error: params: reference.platform: gpu needs reference.jax 0.11.2")
    assert list(tmp_path.iterdir()) == []


def test_a_seed_without_out_dir_is_refused_even_with_OUT_set(tmp_path, capsys, monkeypatch):
    # the output folder is an argument of the command only, never taken from the environment
    monkeypatch.setenv("OUT", str(tmp_path / "o"))
    assert dev.main(["--seed", "0", "--name", "a"]) == 2
    assert capsys.readouterr().err == "error: --seed, --name and --out-dir are needed\n"
    assert list(tmp_path.iterdir()) == []

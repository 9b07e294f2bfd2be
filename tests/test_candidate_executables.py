"""Programs compiled in advance (candidate/runtime/executables.py, accel/precompile.py): saved,
loaded, refused with their reason, and used by a run in place of its own compile, with the
same records (stand-in agent, CPU; the GPU's compile is the same code with another device)."""

import json
import shutil

import jax
import jax.numpy as jnp
import pytest

import candidate_stub as stub
from dreamer_parity import params as paramslib
from dreamer_parity import records
from dreamer_parity.accel import precompile
from dreamer_parity.candidate.runtime import executables, program_store
from dreamer_parity.candidate.runtime import run as runlib
from stub_programs import CAP, CFG, CFG_DICT, CHUNK, EPISODES, assert_same as _same
from stub_programs import keys as _keys, run_programs as _outputs

CPU = {"platform": "cpu", "device_kind": "cpu", "compute_capability": None, "described": False}
#: One seed (one device: a CPU run of several seeds lays them over host devices instead).
ONE = paramslib.validate({**paramslib.smoke_params(), "seeds": [0]})


def _compiled(tmp_path, n=2):
    progs, shape, info = program_store.load_or_build(stub, CFG, CFG_DICT, CAP, CHUNK, EPISODES,
                                                     _keys(n), root=tmp_path / "store")
    with executables.fresh_compiles():
        compiled = program_store.compile_all(progs, _keys(n), shape)
    return compiled, shape, info["key"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("exe")
    compiled, shape, key = _compiled(tmp)
    entry = executables.save(tmp / "exe", key, compiled, shape, CPU, 2, compile_s=1.5)
    return tmp, compiled, shape, key, entry


def test_a_saved_entry_loads_and_computes_what_its_compile_did(saved):
    tmp, compiled, shape, key, entry = saved
    assert entry == tmp / "exe" / key
    assert sorted(p.name for p in entry.iterdir()) == [
        "chunk.xla", "init.xla", "meta.json", "point.xla", "trees.pkl"]
    assert not [p for p in entry.parent.iterdir() if p.name.startswith(".")]
    meta = json.loads((entry / "meta.json").read_text())
    assert (meta["format"], meta["key"], meta["seeds"], meta["target"]) == (1, key, 2, CPU)
    assert meta["settings"] == {} and meta["compile_s"] == 1.5
    assert meta["bytes"]["chunk"] == (entry / "chunk.xla").stat().st_size > 1000
    progs, carry, info = executables.load(tmp / "exe", key)
    assert info["source"] == "precompiled" and info["target"] == CPU
    assert info["compile_s"] == 1.5 and info["load_s"] >= 0
    assert all(isinstance(getattr(progs, p), jax.stages.Compiled) for p in executables.PROGRAMS)
    assert (progs.metric_names, progs.capacity, progs.chunk_steps) == (
        compiled.metric_names, CAP, CHUNK)
    _same(carry, jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), shape))
    _same(_outputs(progs), _outputs(compiled))
    # the loaded chunk program donates its carry, as compiled
    c = progs.init(_keys(2))
    leaf = jax.tree.leaves(c)[0]
    progs.chunk(c, jnp.zeros((CHUNK,), jnp.int32))
    assert leaf.is_deleted()


@pytest.mark.parametrize("change, reason", [
    (lambda e: (e / "meta.json").write_text(json.dumps(
        {**json.loads((e / "meta.json").read_text()), "format": 0})), "format 0, expected 1"),
    (lambda e: (e / "meta.json").write_text(json.dumps(
        {**json.loads((e / "meta.json").read_text()), "key": "0" * 16})),
     "made for key 0000000000000000"),
    (lambda e: (e / "meta.json").write_text("{"), "meta.json: unreadable"),
    (lambda e: (e / "meta.json").write_text(json.dumps(
        {**json.loads((e / "meta.json").read_text()),
         "target": {**CPU, "platform": "gpu", "compute_capability": "9.0"}})),
     "compiled for platform gpu, this device is cpu"),
    (lambda e: (e / "meta.json").write_text(json.dumps(
        {**json.loads((e / "meta.json").read_text()), "jaxlib": "0.0.1"})),
     "compiled with jaxlib 0.0.1, this process has"),
    (lambda e: (e / "meta.json").write_text(json.dumps(
        {**json.loads((e / "meta.json").read_text()),
         "xla_flags": "--xla_gpu_autotune_level=0"})),
     "compiled with XLA_FLAGS '--xla_gpu_autotune_level=0', this process has ''"),
    (lambda e: (e / "chunk.xla").write_bytes(b"not an executable"), "does not load"),
])
def test_an_entry_made_for_something_else_is_refused_with_its_reason(saved, tmp_path, change,
                                                                      reason, monkeypatch):
    _, _, _, key, entry = saved
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    root = tmp_path / "exe"
    shutil.copytree(entry, root / key)
    change(root / key)
    with pytest.raises(executables.ExecutableStoreError) as e:
        executables.load(root, key)
    assert reason in str(e.value) and key in str(e.value) and "\n" not in str(e.value)
    checked = executables.check_all(root)
    assert list(checked) == [key] and checked[key]["why"] == str(e.value)
    assert checked[key]["ok"] is False
    with pytest.raises(executables.ExecutableStoreError, match="no compiled programs"):
        executables.load(root, "f" * 16)


def test_xla_flags_of_the_host_device_count_do_not_count():
    assert executables.xla_flags({"XLA_FLAGS": " --xla_force_host_platform_device_count=4  "
                                               "--xla_gpu_autotune_level=0 "}) == \
        "--xla_gpu_autotune_level=0"
    assert executables.xla_flags({}) == ""


def test_check_command_prints_every_entry(saved, tmp_path, capsys):
    tmp, _, _, key, _ = saved
    assert executables.main(["check", str(tmp / "exe")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["entries"][key]["ok"] and out["entries"][key]["seeds"] == 2
    assert executables.main(["check", str(tmp_path / "none")]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_the_key_names_backend_and_precision():
    base = dict(agent=stub, cfg_dict=CFG_DICT, capacity=CAP, chunk_steps=CHUNK,
                eval_episodes=EPISODES, n_seeds=2)
    cpu, sb, _ = program_store.key_for(**base)
    gpu, sb_gpu, opts = program_store.key_for(**base, backend="gpu")
    assert (sb, sb_gpu, opts) == (1, None, None) and cpu != gpu
    assert program_store.key_for(**base, backend="cpu")[0] == cpu
    with jax.default_matmul_precision("highest"):
        assert program_store.key_for(**base)[0] not in (cpu, gpu)


def _run(tmp, name, **kw):
    out = tmp / name / "out"
    res = runlib.run(ONE, out, tmp / name / "work", agent=stub, cfg=CFG, **kw)
    d = records.run_dir(out, "candidate", 0)
    return res, d, {n: (d / n).read_text() for n in ("records.jsonl", "episodes.jsonl")}


@pytest.mark.slow
def test_a_run_uses_programs_compiled_in_advance_and_records_so(tmp_path):
    """The builder's entry for a one-seed run is loaded by the run (no compile), gives the
    records of the run that compiled, is named in run.json and keys the checkpoint apart;
    an entry that does not fit is refused and the run compiles, saying why."""
    done = precompile.build(ONE, [1], tmp_path / "exe", "cpu", log=lambda _: None,
                            agent=stub, cfg=CFG)
    assert [d["seeds"] for d in done] == [1] and done[0]["bytes"] > 1000
    meta = json.loads((tmp_path / "exe" / done[0]["key"] / "meta.json").read_text())
    assert meta["settings"] == {"profile": "smoke", "decode": "exact", "rows": 1200,
                                "eval_every": 400, "eval_episodes": 2, "precision": "default"}
    res_c, d_c, files_c = _run(tmp_path, "compiled")
    res_p, d_p, files_p = _run(tmp_path, "loaded", executables=tmp_path / "exe")
    assert files_p == files_c
    prog_c = records.read_run_info(d_c / "run.json")["config"]["programs"]
    prog_p = records.read_run_info(d_p / "run.json")["config"]["programs"]
    assert prog_c == {"source": "compiled", "key": done[0]["key"]}
    assert prog_p == {"source": "precompiled", "key": done[0]["key"], "target": {
        "platform": "cpu", "device_kind": jax.devices()[0].device_kind,
        "compute_capability": None, "described": False}}
    assert (res_c["timing"]["programs"], res_p["timing"]["programs"]) == (
        "compiled", "precompiled")
    assert res_c["key"] != res_p["key"]
    # an entry for another precision: refused, compiled here, the reason recorded
    meta = tmp_path / "exe" / done[0]["key"] / "meta.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "jax": "0.0.1"}))
    res_f, d_f, files_f = _run(tmp_path, "fallback", executables=tmp_path / "exe")
    prog_f = records.read_run_info(d_f / "run.json")["config"]["programs"]
    assert prog_f["source"] == "compiled" and "compiled with jax 0.0.1" in prog_f["why"]
    assert files_f == files_c and res_f["key"] == res_c["key"]


def test_the_builder_s_key_is_the_one_a_gpu_run_computes(monkeypatch):
    """The builder (in a CPU process) and a run on a GPU decide the key from the same
    settings: the GPU's forms, all seeds batched, no XLA:CPU options, the precision."""
    from dreamer_parity.provenance import REPO_ROOT
    params = paramslib.load(REPO_ROOT / "params.yaml")
    ps = runlib.program_settings(params, backend="gpu")
    args = (ps.agent, ps.cfg_dict, ps.capacity, ps.chunk_steps, ps.eval_episodes, 8, ps.schedule)
    with jax.default_matmul_precision("highest"):
        built = program_store.key_for(*args, "auto", None, backend="gpu")[0]
        monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
        there = runlib.program_settings(params)
        assert there.cfg_dict == ps.cfg_dict
        assert (there.cfg_dict["observe_grad"], there.cfg_dict["opt_norms"]) == (
            "batched", "chunked")
        key, seed_batch, opts = program_store.key_for(
            there.agent, there.cfg_dict, there.capacity, there.chunk_steps,
            there.eval_episodes, 8, there.schedule, "auto", None)
    assert (key, seed_batch, opts) == (built, None, None)
    monkeypatch.undo()
    assert program_store.key_for(*args, "auto", None, backend="gpu")[0] != built   # precision


@pytest.mark.parametrize("argv, msg", [
    (["--target", "cpu", "--seeds", "2"], "--target cpu: --seeds must be 1"),
    (["--smoke", "--seeds", "8"], "--smoke: the smoke run has one seed"),
    (["--seeds", "0"], "--seeds 0: must be 1.."),
    (["--seeds", "8", "8"], "--seeds: a count is named twice"),
    (["--params", "nope.yaml"], "--params: file not found"),
    (["--set", "rows=7"], "rows"),
])
def test_the_builder_refuses_bad_arguments_in_one_line(tmp_path, capsys, argv, msg):
    with pytest.raises(SystemExit) as e:
        precompile.main(["--out", str(tmp_path / "exe"), *argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and msg in err and err.count("\n") == 1, err
    assert not (tmp_path / "exe").exists()


def test_without_the_cuda_plugin_the_h200_target_is_refused_before_anything_is_written(
        tmp_path, capsys):
    if executables.plugin_version() is not None:
        pytest.skip("the CUDA plugin is installed here: the H200 target compiles")
    with pytest.raises(SystemExit) as e:
        precompile.main(["--out", str(tmp_path / "exe"), "--seeds", "8"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "no XLA:GPU compiler (install jax-cuda13-plugin" in err
    assert not (tmp_path / "exe").exists()


def test_the_rate_refuses_bad_arguments_in_one_line(tmp_path, capsys):
    from dreamer_parity.accel import rate
    for argv, msg in ((["--seeds", "0"], "--seeds 0: must be 1.."),
                      (["--seeds", "1", "--timed-chunks", "0"], "--timed-chunks 0"),
                      (["--seeds", "1", "--executables", str(tmp_path / "none")],
                       "not a directory"),
                      (["--seeds", "1", *(f"--set={x}" for x in
                                          paramslib.one_seed_smoke_sets())],
                       "1200 rows end before 2 timed chunks")):
        with pytest.raises(SystemExit) as e:
            rate.main(argv)
        err = capsys.readouterr().err
        assert e.value.code == 2 and msg in err and err.count("\n") == 1, err

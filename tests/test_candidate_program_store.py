"""The exported-program store: a second start loads what the first one traced, and the
loaded programs compute exactly what freshly built ones do (stand-in agent, smoke sizes)."""

import dataclasses

import jax
import jax.numpy as jnp
import pytest

import candidate_stub as stub
from dreamer_parity.candidate.runtime import loop, program_store
from dreamer_parity.schedule import Schedule
from stub_programs import CAP, CFG, CFG_DICT, CHUNK, EPISODES, assert_same as _same
from stub_programs import keys as _keys, run_programs as _run_programs


def _load(root, n=2, log=None):
    return program_store.load_or_build(stub, CFG, CFG_DICT, CAP, CHUNK, EPISODES, _keys(n),
                                       root=root, log=log)


def test_second_start_loads_from_the_store_and_computes_the_same(tmp_path):
    lines = []
    progs1, shape1, info1 = _load(tmp_path, log=lines.append)
    progs2, shape2, info2 = _load(tmp_path, log=lines.append)
    assert (info1["source"], info2["source"]) == ("built", "store")
    assert info1["key"] == info2["key"]
    assert "traced and stored" in lines[0] and "loaded from the store" in lines[1]
    entry = tmp_path / info1["key"]
    assert sorted(p.name for p in entry.iterdir()) == [
        "chunk.bin", "init.bin", "meta.json", "point.bin", "trees.pkl"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]   # no temp dirs left
    built = loop.build(stub, CFG, CAP, CHUNK, EPISODES)
    assert progs1.metric_names == progs2.metric_names == built.metric_names
    assert progs2.metric_names == ("ctx_action", "maybe_nan", "opt_loss", "reward_loss",
                                   "vector_loss")
    _same(shape1, shape2)
    _same(shape1, jax.eval_shape(built.init, _keys(2)))
    out_store = _run_programs(progs2)
    _same(_run_programs(progs1), out_store)
    _same(_run_programs(built), out_store)
    assert int(out_store[0]["updates"][0]) == 3 * CHUNK


def test_compile_all_gives_executables_that_compute_the_same(tmp_path):
    progs, shape, _ = _load(tmp_path)
    compiled = program_store.compile_all(progs, _keys(2), shape)
    assert all(isinstance(getattr(compiled, p), jax.stages.Compiled)
               for p in program_store.PROGRAMS)
    assert (compiled.metric_names, compiled.capacity, compiled.chunk_steps) == (
        progs.metric_names, progs.capacity, progs.chunk_steps)
    _same(_run_programs(compiled), _run_programs(progs))
    # an executable takes only the lowered shapes
    with pytest.raises(TypeError):
        compiled.chunk(compiled.init(_keys(2)), jnp.zeros((CHUNK + 1,), jnp.int32))


def test_unusable_entry_is_rebuilt(tmp_path):
    _, _, info = _load(tmp_path)
    (tmp_path / info["key"] / "chunk.bin").write_bytes(b"not a program")
    lines = []
    progs, _, info2 = _load(tmp_path, log=lines.append)
    assert info2["source"] == "built" and info2["key"] == info["key"]
    assert "unusable, rebuilding" in lines[0] and info["key"] in lines[0]
    assert _load(tmp_path)[2]["source"] == "store"
    # a wrong argument structure is refused before anything runs
    with pytest.raises(ValueError, match="program chunk: arguments"):
        progs.chunk({"not": jnp.zeros(3)}, jnp.zeros((CHUNK,), jnp.int32))


def test_key_covers_the_programs_static_settings():
    base = dict(agent=stub, cfg_dict=CFG_DICT, capacity=CAP, chunk_steps=CHUNK,
                eval_episodes=EPISODES, n_seeds=2, s=Schedule(), compiler_options=None)
    k0 = program_store.program_key(**base)
    assert k0 == program_store.program_key(**base) and len(k0) == 16
    changed = [dict(capacity=CAP + 1), dict(chunk_steps=CHUNK + 1), dict(eval_episodes=3),
               dict(n_seeds=3), dict(compiler_options={"xla_cpu_experimental_ynn_fusion_type": ""}),
               dict(cfg_dict={**CFG_DICT, "deter": 9}),
               dict(s=dataclasses.replace(Schedule(), batch_size=8)), dict(seed_batch=1)]
    keys = {program_store.program_key(**{**base, **c}) for c in changed}
    assert k0 not in keys and len(keys) == len(changed)

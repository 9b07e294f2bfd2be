"""One host device per seed (candidate/runtime/seedmesh.py): the flag, the mesh, and programs on
it that compute per seed what the one-device programs compute (stand-in agent)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import candidate_stub as stub
from dreamer_parity.candidate.runtime import loop, program_store, seedmesh

CFG = stub.StubConfig()
CAP, CHUNK, EPISODES = 75, 5, 2


def test_request_host_devices_edits_the_flag_only_upwards():
    env = {"XLA_FLAGS": "--xla_cpu_enable_fast_math=false"}
    assert seedmesh.request_host_devices(3, env)
    assert env["XLA_FLAGS"] == ("--xla_cpu_enable_fast_math=false "
                                "--xla_force_host_platform_device_count=3")
    assert seedmesh.host_device_count(env) == 3
    assert seedmesh.request_host_devices(2, env)          # 3 already suffice
    assert seedmesh.host_device_count(env) == 3
    assert seedmesh.request_host_devices(5, env)
    assert env["XLA_FLAGS"].count("device_count") == 1 and seedmesh.host_device_count(env) == 5
    empty = {}
    assert not seedmesh.request_host_devices(1, empty) and empty == {}
    with pytest.raises(ValueError, match="n must be an int"):
        seedmesh.request_host_devices(2.0, {})


def test_seed_mesh_only_on_cpu_with_a_device_per_seed():
    assert len(jax.devices("cpu")) == 4                   # conftest asks for 4
    mesh = seedmesh.seed_mesh(3)
    assert mesh.devices.size == 3 and mesh.axis_names == (seedmesh.AXIS,)
    assert seedmesh.seed_mesh(1) is None
    assert seedmesh.seed_mesh(5) is None
    assert seedmesh.seed_mesh(3, backend="gpu") is None


def _keys(n):
    ks = [loop.seed_keys(s) for s in range(n)]
    return {k: jnp.stack([kk[k] for kk in ks]) for k in ks[0]}


def _run(progs, n, mesh):
    put = lambda c: seedmesh.put_replicated(jnp.full((CHUNK,), c, jnp.int32), mesh)
    carry = progs.init(seedmesh.put_seeds(_keys(n), mesh))
    for _ in range(13):
        carry, _ = progs.chunk(carry, put(0))
    carry, ep = progs.chunk(carry, put(3))
    carry, report = progs.point(carry)
    return jax.device_get((carry, ep, report)), carry


def test_programs_on_the_mesh_run_each_seed_on_its_own_device(tmp_path):
    mesh = seedmesh.seed_mesh(3)
    progs, shape, info = program_store.load_or_build(
        stub, CFG, dataclasses.asdict(CFG), CAP, CHUNK, EPISODES, _keys(3), root=tmp_path,
        mesh=mesh)
    assert progs.mesh is mesh
    leaf = jax.tree.leaves(shape)[0]
    assert leaf.shape[0] == 3 and leaf.sharding.spec == jax.sharding.PartitionSpec("seed")
    compiled = program_store.compile_all(progs, _keys(3), shape)
    out_mesh, carry = _run(compiled, 3, mesh)
    assert {d.id for d in jax.tree.leaves(carry)[0].devices()} == {0, 1, 2}
    # the same programs traced fresh (loop.build) give the same bits
    built = loop.build(stub, CFG, CAP, CHUNK, EPISODES, mesh=mesh)
    out_built, _ = _run(built, 3, mesh)
    for x, y in zip(jax.tree.leaves(out_mesh), jax.tree.leaves(out_built)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    # and per seed the values of the one-device program (float32 rounding apart)
    out_one, _ = _run(loop.build(stub, CFG, CAP, CHUNK, EPISODES), 3, None)
    assert int(out_mesh[0]["updates"][0]) == 3 * CHUNK
    for x, y in zip(jax.tree.leaves(out_mesh), jax.tree.leaves(out_one)):
        np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64),
                                   rtol=1e-5, atol=1e-6)
    # a mesh of another size than the seed count is refused before tracing
    with pytest.raises(ValueError, match="2 devices for 3 seeds"):
        program_store.load_or_build(stub, CFG, dataclasses.asdict(CFG), CAP, CHUNK, EPISODES,
                                    _keys(3), root=tmp_path, mesh=seedmesh.seed_mesh(2))

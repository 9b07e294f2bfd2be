"""The stand-in agent's run programs, run and compared bit for bit: shared by the program
store's tests and those of the programs compiled beforehand."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

import candidate_stub as stub
from dreamer_parity.candidate.runtime import loop

CFG = stub.StubConfig()
CFG_DICT = dataclasses.asdict(CFG)
#: Replay rows per env, vector steps per chunk, evaluation episodes.
CAP, CHUNK, EPISODES = 75, 5, 2


def keys(n):
    """The stacked seed keys of seeds 0..n-1."""
    ks = [loop.seed_keys(s) for s in range(n)]
    return {k: jnp.stack([kk[k] for kk in ks]) for k in ks[0]}


def run_programs(progs, n=2):
    """init, 13 chunks without updates (65 rows per env, the replay's first full window),
    one chunk with 3 updates per vector step, one point; host arrays."""
    carry = progs.init(keys(n))
    for _ in range(13):
        carry, ep0 = progs.chunk(carry, jnp.zeros((CHUNK,), jnp.int32))
    carry, ep1 = progs.chunk(carry, jnp.full((CHUNK,), 3, jnp.int32))
    carry, report = progs.point(carry)
    return jax.device_get((carry, ep0, ep1, report))


def assert_same(a, b):
    """The two pytrees have one structure and bitwise equal leaves."""
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    assert ta == tb
    for x, y in zip(la, lb):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))

"""Candidate loop parts: schedule counts, env rows against the numpy port, replay semantics."""

from collections import deque

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dreamer_parity.cartpole_port import CartPolePort
from dreamer_parity.schedule import per_vector_step
from dreamer_parity.candidate.runtime import env as envlib
from dreamer_parity.candidate.runtime import replay as replaylib
from dreamer_parity.candidate.runtime.run import chunk_steps_for


# ---------------------------------------------------------------- update counts

@pytest.mark.parametrize("rows,expected", [(1200, 81), (2000, 481), (20000, 9481),
                                           (24000, 11481)])
def test_update_counts_per_run(rows, expected):
    counts = per_vector_step(rows // 16)
    assert sum(counts) == expected
    # nothing before the vector step that brings the rows to 1040, then 8 per step
    assert counts[:64] == [0] * 64 and counts[64] == 1
    assert set(counts[65:]) == {8}


def test_chunk_steps_divides():
    assert chunk_steps_for(125) == 25
    assert chunk_steps_for(25) == 25
    assert chunk_steps_for(1) == 1
    assert chunk_steps_for(31) == 1


# ---------------------------------------------------------------- env rows vs port

def test_env_rows_match_numpy_port():
    n, steps = 4, 700
    rng = np.random.default_rng(3)
    actions = jnp.asarray(rng.integers(0, 2, (steps, n)).astype(np.int32))
    key = jax.random.PRNGKey(11)
    state0, row0 = envlib.reset_rows(jax.random.split(key, n))
    # env 2 starts at time 499: its first step truncates (time limit, is_terminal False)
    state0 = state0.replace(time=state0.time.at[2].set(499))

    @jax.jit
    def rollout(state, row):
        def body(c, xs):
            state, row = c
            t, a = xs
            # env 3 balances with a simple controller so that its episodes are long
            ctrl = (row["vector"][3, 2] + 0.3 * row["vector"][3, 3] > 0).astype(jnp.int32)
            a = a.at[3].set(ctrl)
            state, row, stepped = envlib.step_rows(
                state, row, a, jax.random.split(jax.random.fold_in(key, t), n))
            return (state, row), (state, row, stepped, a)
        return jax.lax.scan(body, (state, row), (jnp.arange(steps), actions))[1]

    states, rows, stepped, acts = jax.device_get(rollout(state0, row0))
    state0, row0 = jax.device_get((state0, row0))

    def st(states, t, w):
        return np.array([states.x[t, w], states.x_dot[t, w], states.theta[t, w],
                         states.theta_dot[t, w]], np.float32), int(states.time[t, w])

    ports = [CartPolePort([0, w], worker=w) for w in range(n)]
    for w, p in enumerate(ports):
        p.reset()
        p.set_state(np.array([state0.x[w], state0.x_dot[w], state0.theta[w],
                              state0.theta_dot[w]], np.float32), int(state0.time[w]))
    n_last = n_trunc = n_first = 0
    prev_last = np.asarray(row0["is_last"])
    for t in range(steps):
        np.testing.assert_array_equal(stepped[t], ~prev_last)
        for w, p in enumerate(ports):
            if prev_last[w]:
                # the env was held on its is_last row: this row is the next reset row
                assert rows["is_first"][t, w] and rows["reward"][t, w] == 0.0
                assert not rows["is_last"][t, w] and not rows["is_terminal"][t, w]
                assert st(states, t, w)[1] == 0
                p.reset()
                p.set_state(*st(states, t, w))
                n_first += 1
                continue
            o = p.step(int(acts[t, w]))
            np.testing.assert_allclose(rows["vector"][t, w], o["vector"], atol=1e-6)
            assert rows["reward"][t, w] == o["reward"] == 1.0
            assert not rows["is_first"][t, w]
            assert bool(rows["is_last"][t, w]) == o["is_last"]
            assert bool(rows["is_terminal"][t, w]) == o["is_terminal"]
            # keep the port on exactly gymnax's float32 state (ulp differences of sin/cos)
            p.set_state(*st(states, t, w))
            n_last += o["is_last"]
            n_trunc += o["is_last"] and not o["is_terminal"]
        prev_last = rows["is_last"][t]
    assert n_last > 20 and n_first >= n_last - n and n_trunc >= 1


# ---------------------------------------------------------------- replay

class RefReplayModel:
    """Plain-Python model of replay.py:98-144 and :178-191 (items, queue; no storage)."""

    def __init__(self, length=65):
        self.length = length
        self.streams, self.lengths = {}, {}
        self.items, self.queue, self.queued_all = [], deque(), []

    def add(self, worker):
        stream = self.streams.setdefault(worker, deque())
        count = self.lengths.setdefault(worker, 0)
        stream.append(count)   # per-env row index
        if len(stream) >= self.length:
            start = stream.popleft()
            self.items.append((worker, start))
            if count % self.length == 0:
                self.queue.append((worker, start))
                self.queued_all.append((worker, start))
        self.lengths[worker] += 1


def test_queue_formula_matches_reference_model():
    model = RefReplayModel()
    for n in range(1, 800):
        for w in range(16):
            model.add(w)
        assert 16 * int(replaylib.queue_size(n)) == len(model.queued_all)
        assert len(model.items) == 16 * max(0, n - 64)
    j = np.arange(len(model.queued_all))
    formula = list(zip((j % 16).tolist(), (65 * (j // 16 + 1) - 64).tolist()))
    assert formula == model.queued_all


def test_every_queued_window_sampled_once_before_uniform():
    """Drive sample_starts with the run's schedule; compare with the model's queue."""
    steps = 300
    counts = per_vector_step(steps)
    model = RefReplayModel()
    replay = replaylib.init(16, steps, 2, 2)
    sample = jax.jit(replaylib.sample_starts, static_argnums=3)
    key = jax.random.PRNGKey(0)
    online_seen, uniform_seen = [], 0
    for v in range(steps):
        for w in range(16):
            model.add(w)
        n = v + 1
        for u in range(counts[v]):
            key, k = jax.random.split(key)
            queue_before = len(model.queue)
            replay, worker, start, online = sample(replay, n, k, 16)
            worker, start, online = map(np.asarray, (worker, start, online))
            # queue entries are consumed first, in order, then uniform draws
            n_on = min(16, queue_before)
            assert online.tolist() == [True] * n_on + [False] * (16 - n_on)
            for b in range(n_on):
                assert (int(worker[b]), int(start[b])) == model.queue.popleft()
                online_seen.append((int(worker[b]), int(start[b])))
            # uniform draws are valid items: start <= n - 65
            assert np.all(start[~online] <= n - 65) and np.all(start >= 0)
            assert np.all((worker >= 0) & (worker < 16))
            uniform_seen += int((~online).sum())
    assert online_seen == model.queued_all[:len(online_seen)]
    assert len(set(online_seen)) == len(online_seen)
    # with 8 updates x 16 windows per step the queue is drained every step
    assert len(model.queue) == 0 and len(online_seen) == len(model.queued_all)
    assert uniform_seen > 1000


def test_uniform_sampling_covers_all_items():
    n = 70   # 6 items per env
    replay = replaylib.init(16, 100, 2, 2)
    replay["popped"] = jnp.asarray(16 * int(replaylib.queue_size(n)), jnp.int32)
    f = jax.jit(jax.vmap(lambda k: replaylib.sample_starts(replay, n, k, 16)[1:3]))
    worker, start = f(jax.random.split(jax.random.PRNGKey(1), 400))
    pairs = set(zip(np.asarray(worker).ravel().tolist(), np.asarray(start).ravel().tolist()))
    assert pairs == {(w, s) for w in range(16) for s in range(6)}


_add = jax.jit(replaylib.add)


def _filled_replay(rows=200, deter=3, stoch=2):
    replay = replaylib.init(16, rows, deter, stoch)
    for t in range(rows):
        w = np.arange(16)
        row = {
            "vector": np.stack([w, np.full(16, t), w, w], 1).astype(np.float32),
            "reward": np.full(16, float(t % 7 != 0), np.float32),
            "is_first": np.full(16, t % 7 == 0), "is_last": np.full(16, t % 7 == 6),
            "is_terminal": np.zeros(16, bool),
            "action": ((w + t) % 2 * (t % 7 != 6)).astype(np.int32),
            "deter": (1000.0 * w[:, None] + t + np.arange(deter)[None] / 10).astype(np.float32),
            "stoch": np.tile(((w * 7 + t) % 4)[:, None], (1, stoch)).astype(np.int32),
        }
        replay = _add(replay, t, row)
    return replay


def test_context_row_carries_stored_latent_and_previous_action():
    replay = _filled_replay()
    worker = jnp.asarray([0, 3, 15, 3, 7, 7, 1, 2, 4, 5, 6, 8, 9, 10, 11, 12], jnp.int32)
    start = jnp.asarray([0, 5, 100, 13, 7, 8, 20, 30, 40, 50, 60, 70, 80, 90, 100, 135],
                        jnp.int32)
    batch = replaylib.gather(replay, worker, start)
    for b in range(16):
        w, s = int(worker[b]), int(start[b])
        np.testing.assert_array_equal(batch["deter"][b, 0], replay["deter"][w, s])
        assert int(batch["action"][b, 0]) == int(replay["action"][w, s])
        assert int(batch["stoch"][b, 0, 0]) == (w * 7 + s) % 4
        np.testing.assert_array_equal(batch["vector"][b, :, 1], np.arange(s, s + 65))
        # annotation: forced is_first on the context row; is_last before every is_first
        assert bool(batch["is_first"][b, 0])
        nf = np.asarray(batch["is_first"][b, 1:])
        il = np.asarray(batch["is_last"][b, :-1])
        assert np.all(il[nf])
        orig_last = np.asarray(replay["is_last"][w, s:s + 65])
        assert bool(batch["is_last"][b, -1]) == bool(orig_last[-1])


def test_write_back_rows_and_order():
    replay = _filled_replay()
    worker = jnp.asarray([2] * 16, jnp.int32)
    start = jnp.asarray([10, 20] + [100] * 14, jnp.int32)
    outs = {"deter": jnp.broadcast_to(-jnp.arange(16, dtype=jnp.float32)[:, None, None] - 1,
                                      (16, 64, 3)),
            "stoch": jnp.broadcast_to(jnp.arange(16, dtype=jnp.int32)[:, None, None] + 50,
                                      (16, 64, 2))}
    new = replaylib.write_back(replay, worker, start, outs)
    d = np.asarray(new["deter"][2, :, 0])
    assert d[10] == replay["deter"][2, 10, 0]          # the context row is not written
    assert np.all(d[11:21] == -1) and np.all(d[21:85] == -2)  # row 1 overwrites row 0's tail
    assert np.all(d[101:165] == -16)                   # the last batch row wins
    assert d[165] == replay["deter"][2, 165, 0]
    assert np.all(np.asarray(new["stoch"][2, 101:165]) == 65)
    np.testing.assert_array_equal(new["deter"][3], replay["deter"][3])   # other envs untouched


def test_write_back_matches_sequential_numpy():
    rng = np.random.default_rng(5)
    replay = replaylib.init(3, 200, 2, 1)
    wb = jax.jit(replaylib.write_back)
    for trial in range(5):
        worker = rng.integers(0, 3, 16).astype(np.int32)
        start = rng.integers(0, 200 - 65, 16).astype(np.int32)
        outs = {"deter": rng.normal(size=(16, 64, 2)).astype(np.float32),
                "stoch": rng.integers(0, 9, (16, 64, 1)).astype(np.int32)}
        expect = {k: np.asarray(replay[k]).copy() for k in ("deter", "stoch")}
        for b in range(16):   # replay.py:159-167: batch rows in order
            for k in expect:
                expect[k][worker[b], start[b] + 1:start[b] + 65] = outs[k][b]
        replay = wb(replay, jnp.asarray(worker), jnp.asarray(start),
                    {k: jnp.asarray(v) for k, v in outs.items()})
        for k in expect:
            np.testing.assert_array_equal(np.asarray(replay[k]), expect[k])

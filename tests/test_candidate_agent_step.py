"""Train and policy steps of the candidate at smoke widths: jit, vmap, draws, slow critic."""

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dreamer_parity.candidate import agent
from dreamer_parity.candidate.config import AgentConfig

CFG = AgentConfig.for_profile("smoke")
B, L = 2, 5
T, H = L - 1, CFG.imag_length
N = B * T

#: Cheaper XLA:CPU compilation for tests (code generation effort only; same HLO semantics).
FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
jit = partial(jax.jit, compiler_options=FAST_COMPILE)

EXPECTED = (
    [f"{k}_loss" for k in ("vector", "reward", "cont", "dyn", "rep", "actor", "critic", "replay_critic")]
    + [f"{k}_loss_std" for k in ("vector", "reward", "cont", "dyn", "rep", "actor", "critic", "replay_critic")]
    + [f"{p}/{s}" for p in ("adv", "rew", "weight", "val", "ret", "ret_normed", "replay_ret", "act/action",
                            "rand/action", "ent/action", "prior_ent", "post_ent")
       for s in ("mean", "std", "mag", "min", "max")]
    + ["td_error", "ret_rate", "activation/embed", "data_rew/max", "data_rew/mean", "data_rew/std",
       "pred_rew/max", "pred_rew/mean", "pred_rew/std", "opt_loss", "opt_grad_norm", "opt_update_norm",
       "opt_param_norm", "opt_grad_steps"])


def make_batch(seed, cfg=CFG, b=B, length=L):
    rng = np.random.default_rng(seed)
    is_first = np.zeros((b, length), bool)
    is_first[:, 0] = True
    is_first[0, 3] = True
    is_last = np.roll(is_first, -1, 1)
    is_last[:, -1] = False
    is_terminal = is_last.copy()
    return {"vector": rng.normal(size=(b, length, cfg.obs_dim)).astype(np.float32),
            "reward": np.where(is_first, 0.0, 1.0).astype(np.float32),
            "is_first": is_first, "is_last": is_last, "is_terminal": is_terminal,
            "action": rng.integers(0, cfg.num_actions, (b, length)).astype(np.int32),
            "deter": rng.normal(size=(b, length, cfg.deter)).astype(np.float32),
            "stoch": rng.integers(0, cfg.classes, (b, length, cfg.stoch)).astype(np.int32)}


def make_draws(seed):
    rng = np.random.default_rng(seed)
    oh = lambda shape, k: np.eye(k, dtype=np.float32)[rng.integers(0, k, shape)]
    return {"post": oh((B, T, CFG.stoch), CFG.classes),
            "imag_stoch": oh((H, N, CFG.stoch), CFG.classes),
            "imag_action": oh((H + 1, N), CFG.num_actions)}


@pytest.fixture(scope="module")
def step_draws():
    return jit(lambda s, b, d: agent.train_step(CFG, s, b, draws=d, internals=True))


def _finite(metrics):
    bad = [k for k, v in metrics.items() if not np.isfinite(float(v))]
    assert not bad, bad


def test_train_step_with_draws_uses_them_and_copies_slow_critic(step_draws):
    state = agent.init(jax.random.PRNGKey(0), CFG)
    batch = make_batch(0)
    d1, d2 = make_draws(1), make_draws(2)
    s1, outs1, m1 = step_draws(state, batch, d1)
    _, outs2, m2 = step_draws(state, batch, d2)
    assert sorted(m1) == sorted(EXPECTED)
    _finite(m1)
    assert outs1["deter"].shape == (B, T, CFG.deter) and outs1["deter"].dtype == jnp.float32
    assert outs1["stoch"].shape == (B, T, CFG.stoch) and outs1["stoch"].dtype == jnp.int32
    # internals (parity hooks)
    assert jax.tree_util.tree_structure(outs1["grads"]) == jax.tree_util.tree_structure(state["params"])
    assert outs1["imag_rew"].shape == (H + 1, N) and outs1["imag_val_logits"].shape == (H + 1, N, CFG.bins)
    assert outs1["imag_rew_logits"].shape == (H, N, CFG.bins)
    np.testing.assert_array_equal(np.asarray(outs1["imag_rew"])[0], batch["reward"][:, 1:].reshape(-1))
    kl_dyn = np.asarray(outs1["kl_dyn"])
    assert kl_dyn.shape == (B, T) and kl_dyn.min() >= 0
    assert float(m1["dyn_loss"]) == pytest.approx(np.maximum(kl_dyn, CFG.free_nats).mean(), rel=1e-5)
    np.testing.assert_allclose(outs1["kl_rep"], kl_dyn, rtol=1e-5)     # same value, other gradient
    # the posterior samples are the supplied ones
    assert np.array_equal(np.asarray(outs1["stoch"]), d1["post"].argmax(-1))
    assert np.array_equal(np.asarray(outs2["stoch"]), d2["post"].argmax(-1))
    # the imagined actions are the supplied ones (act/action stats are over all H+1 steps)
    assert float(m1["act/action/mean"]) == pytest.approx(d1["imag_action"].argmax(-1).mean(), abs=1e-6)
    assert float(m2["act/action/mean"]) == pytest.approx(d2["imag_action"].argmax(-1).mean(), abs=1e-6)
    # changing only the imagined prior draws changes the actor's entropy on the trajectory
    d3 = {**d1, "imag_stoch": make_draws(3)["imag_stoch"]}
    _, _, m3 = step_draws(state, batch, d3)
    assert float(m3["ent/action/mean"]) != float(m1["ent/action/mean"])
    assert float(m3["actor_loss"]) != float(m1["actor_loss"])
    # first update: LR warm-up factor 0, slow critic becomes an exact copy of the critic
    assert float(m1["opt_update_norm"]) == 0.0 and float(m1["opt_grad_steps"]) == 1.0
    assert float(m1["opt_grad_norm"]) > 0
    for a, b in zip(jax.tree_util.tree_leaves(s1["slow_critic"]),
                    jax.tree_util.tree_leaves(s1["params"]["critic"])):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    # zero-initialised reward head and critic: exact decode gives exactly 0 at init
    assert float(m1["val/max"]) == 0.0 and float(m1["val/min"]) == 0.0
    assert float(m1["pred_rew/max"]) == 1.0          # = max |replay reward| at the start column
    # second update: parameters move, slow critic is the 0.02 EMA
    s2, _, m_2 = step_draws(s1, batch, d1)
    assert float(m_2["opt_update_norm"]) > 0 and int(s2["updates"]) == 2
    for a, c1, c2 in zip(jax.tree_util.tree_leaves(s2["slow_critic"]),
                         jax.tree_util.tree_leaves(s1["params"]["critic"]),
                         jax.tree_util.tree_leaves(s2["params"]["critic"])):
        np.testing.assert_allclose(a, 0.02 * np.asarray(c2) + 0.98 * np.asarray(c1), rtol=1e-6, atol=1e-7)
    # imagined rewards and values are still exactly 0 (zero heads, lr ~ 4e-8), so are the
    # returns and their percentile EMAs
    assert float(s2["retnorm"]["hi"]) == 0.0 and float(s2["retnorm"]["lo"]) == 0.0
    assert float(m_2["ret/std"]) == 0.0


def test_train_step_vmap_over_seeds_finite_and_keyed():
    seeds = 2
    states = jax.vmap(lambda k: agent.init(k, CFG))(jax.random.split(jax.random.PRNGKey(7), seeds))
    batches = jax.tree_util.tree_map(lambda *x: np.stack(x), *[make_batch(i) for i in range(seeds)])
    keys = jax.random.split(jax.random.PRNGKey(1), seeds)
    step = jit(jax.vmap(partial(agent.train_step, CFG)))
    states, outs, m = step(states, batches, keys)
    for _ in range(2):
        states, outs, m = step(states, batches, keys)
    assert outs["stoch"].shape == (seeds, B, T, CFG.stoch)
    assert set(m) == set(EXPECTED)
    for k, v in m.items():
        assert v.shape == (seeds,) and np.all(np.isfinite(np.asarray(v))), k
    assert np.all(np.asarray(m["opt_grad_steps"]) == 3.0)
    # seeds differ (different init and draws)
    assert float(m["vector_loss"][0]) != float(m["vector_loss"][1])


def test_policy_step_draws_and_reset():
    params = agent.init_params(jax.random.PRNGKey(0), CFG)
    n = 3
    carry = agent.initial_carry(CFG, n)
    assert carry["deter"].shape == (n, CFG.deter) and carry["stoch"].shape == (n, CFG.stoch, CFG.classes)
    assert carry["prev_action"].dtype == jnp.int32
    obs = np.random.default_rng(0).normal(size=(n, CFG.obs_dim)).astype(np.float32)
    first = np.array([True, False, True])
    rng = np.random.default_rng(5)
    draws = {"post": np.eye(CFG.classes, dtype=np.float32)[rng.integers(0, CFG.classes, (n, CFG.stoch))],
             "action": np.eye(CFG.num_actions, dtype=np.float32)[[1, 0, 1]]}
    pol = jit(lambda p, c, o, f, d: agent.policy_step(CFG, p, c, o, f, draws=d))
    action, carry2, lat = pol(params, carry, obs, first, draws)
    assert action.tolist() == [1, 0, 1] and action.dtype == jnp.int32
    assert np.array_equal(np.asarray(lat["stoch"]), draws["post"].argmax(-1))
    assert np.array_equal(np.asarray(carry2["stoch"]), draws["post"])
    assert np.array_equal(np.asarray(carry2["deter"]), np.asarray(lat["deter"]))
    # is_first resets the carry: a first step gives the same latent whatever the carry was
    a2, c3, lat3 = pol(params, carry2, obs, np.array([True, True, True]), draws)
    np.testing.assert_array_equal(np.asarray(lat3["deter"])[[0, 2]], np.asarray(lat["deter"])[[0, 2]])
    assert not np.array_equal(np.asarray(pol(params, carry2, obs, first, draws)[2]["deter"])[1],
                              np.asarray(lat["deter"])[1])
    # key sampling works and is vmappable
    keyed = jit(jax.vmap(lambda p, c, o, f, k: agent.policy_step(CFG, p, c, o, f, key=k),
                             in_axes=(None, None, None, None, 0)))
    acts, _, lats = keyed(params, carry, obs, first, jax.random.split(jax.random.PRNGKey(0), 4))
    assert acts.shape == (4, n) and lats["stoch"].shape == (4, n, CFG.stoch)
    assert int(lats["stoch"].max()) < CFG.classes


def test_bad_inputs_raise_before_compute():
    state = agent.init(jax.random.PRNGKey(0), CFG)
    batch = make_batch(0)
    with pytest.raises(ValueError, match="deter"):
        agent.train_step(CFG, state, {**batch, "deter": batch["deter"][..., :3]}, key=jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match="lacks keys"):
        agent.train_step(CFG, state, {k: v for k, v in batch.items() if k != "reward" and k != "vector"},
                         key=jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match="imag_action"):
        agent.train_step(CFG, state, batch, draws={**make_draws(0), "imag_action": np.zeros((H, N, 2))})
    with pytest.raises(ValueError, match="no key"):
        agent.train_step(CFG, state, batch)


def test_speed_settings_do_not_change_the_update():
    """Two updates under each speed-only setting.  ``twohot_index`` only chooses how the
    two-hot targets find their bins (table lookups or the 255-wide comparison,
    twohot.index_form): both updates bitwise the same.  ``head_rows`` only groups the
    imagined rows the heads read (uneven groups included; a value above the number of
    imagined rows means one pass; zero is refused), but the gradient of a head's weights
    is then a sum over the groups, added in another order: the first update from
    initialisation is bitwise the same (its metrics too), and from the second on the
    parameters differ by float32 rounding (the critic's output layer, about 1e-6
    relative; the metrics of the second update are still computed from equal parameters)."""
    base = dataclasses.replace(CFG, imag_length=5)          # 6 imagined rows, cheap to compile
    state = agent.init(jax.random.PRNGKey(0), base)
    batch = make_batch(3)
    key = jax.random.PRNGKey(5)
    results = {}
    # row by row, groups 4 + 2, one pass (table lookups); groups 4 + 2 by comparison
    settings = [(1, "window"), (4, "window"), (16, "window"), (4, "compare")]
    for rows, form in settings:
        cfg = dataclasses.replace(base, head_rows=rows, twohot_index=form)
        step = jit(lambda s, b, k, cfg=cfg: agent.train_step(cfg, s, b, k))
        s, out = state, []
        for i in range(2):
            s, _, m = step(s, batch, jax.random.fold_in(key, i))
            out.append((jax.tree.leaves(s["params"]), {k: float(v) for k, v in m.items()}))
        results[rows, form] = out
    ref = results[settings[0]]
    _finite(ref[1][1])
    assert ref[0][1]["reward_loss"] != 0.0 and ref[0][1]["critic_loss"] != 0.0
    for setting in settings[1:]:
        (first, m1), (second, m2) = results[setting]
        for a, b in zip(ref[0][0], first):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        assert m1 == ref[0][1] and m2 == ref[1][1], setting
        for a, b in zip(ref[1][0], second):
            np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-9)
    # the two-hot forms at the same head_rows: both updates bitwise the same
    for a, b in zip(results[4, "window"][1][0], results[4, "compare"][1][0]):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match="head_rows"):
        dataclasses.replace(base, head_rows=0)


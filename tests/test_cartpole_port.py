"""The numpy CartPole port against installed gymnax 1.0.1, and its row semantics.

The figures come from the same functions the DVC stage ``port_check`` runs
(``python -m dreamer_parity.port_check``).
"""

import json
import types

import numpy as np
import pytest

from dreamer_parity import cartpole_port, port_check
from dreamer_parity.cartpole_port import (
    PARAMS, CartPolePort, StepAfterLastError, make_embodied_env)


@pytest.fixture(scope="module")
def figures(tmp_path_factory):
    """Run the stage's CLI once with its default sizes; return (exit code, figures)."""
    out = tmp_path_factory.mktemp("port") / "port_check.json"
    rc = port_check.main(["--out", str(out)])
    return rc, json.loads(out.read_text())


def test_cli_passes_and_writes_flat_json(figures):
    rc, fig = figures
    assert rc == 0, fig["failures"]
    assert fig["passed"] is True and fig["failures"] == ""
    assert all(not isinstance(v, (dict, list)) for v in fig.values())


def test_single_steps_match_gymnax(figures):
    _, fig = figures
    assert fig["single_states"] == 400
    assert fig["single_steps"] == 2 * (400 + 40)          # both actions, 40 states outside
    assert fig["single_prev_terminal_steps"] == 2 * 40     # reward 0 from a terminated state
    assert fig["single_truncations"] > 0 and fig["single_terminations"] > 0
    for k in ("reward", "terminated", "truncated", "is_last"):
        assert fig[f"single_{k}_mismatches"] == 0, k
    assert fig["single_obs_max_rel"] <= 1e-6
    assert fig["single_obs_max_abs"] <= 1e-6              # PROTOCOL 2.2: 1e-6 absolute
    assert fig["single_obs_max_scaled_ulp"] <= 8


def test_lockstep_rollout_matches_gymnax(figures):
    _, fig = figures
    assert fig["lockstep_steps"] == 4000
    assert fig["lockstep_terminations"] > 50
    for k in ("reward", "terminated", "truncated", "is_last"):
        assert fig[f"lockstep_{k}_mismatches"] == 0, k
    assert fig["lockstep_obs_max_rel"] <= 1e-6
    assert fig["lockstep_ok"] is True


def test_forced_truncation_is_not_terminal(figures):
    _, fig = figures
    assert fig["truncation_gymnax_truncated"] is True
    assert fig["truncation_gymnax_terminated"] is False
    assert fig["truncation_port_is_last"] is True
    assert fig["truncation_port_is_terminal"] is False


def test_reset_distribution_matches_gymnax(figures):
    _, fig = figures
    assert fig["resets_n"] == 4000
    assert fig["resets_ks_pvalue_min"] > 1e-3
    assert fig["resets_port_abs_max"] <= 0.05


def test_check_detects_a_wrong_constant(monkeypatch):
    """The single-step check fails for a port whose tau is off by 0.5%."""
    monkeypatch.setitem(cartpole_port.PARAMS, "tau", np.float32(0.0201))
    fig = port_check.check_single_steps(n_states=50, seed=3)
    assert fig["single_ok"] is False
    assert fig["single_obs_max_rel"] > 1e-4


def test_cli_exits_1_on_failure(tmp_path):
    """A rollout too short to hold 50 terminations fails the stage: exit 1, figures kept."""
    out = tmp_path / "m" / "pc.json"
    rc = port_check.main(["--out", str(out), "--states", "20", "--steps", "300",
                          "--resets", "80"])
    fig = json.loads(out.read_text())
    assert 0 < fig["lockstep_terminations"] < port_check.MIN_TERMINATIONS
    assert rc == 1 and fig["passed"] is False and fig["failures"] == "lockstep"
    assert not list(out.parent.glob("*.tmp-*"))


# --- row semantics (PROTOCOL.md 2.2) ---------------------------------------------------

def _drive(env, rng, rows):
    """Driver-style loop: reset = previous is_last; returns the list of rows."""
    out = [env.step({"action": 0, "reset": True})]
    for _ in range(rows - 1):
        out.append(env.step({"action": int(rng.integers(2)), "reset": out[-1]["is_last"]}))
    return out


def test_rows_per_episode_and_recorder():
    rec = []
    env = CartPolePort(entropy=[5, 3], worker=3, recorder=rec)
    rows = _drive(env, np.random.default_rng(0), 400)
    assert rows[0]["is_first"] and rows[0]["reward"] == 0 and not rows[0]["is_last"]
    assert rows[0]["vector"].dtype == np.float32 and rows[0]["vector"].shape == (4,)
    firsts = [i for i, r in enumerate(rows) if r["is_first"]]
    lasts = [i for i, r in enumerate(rows) if r["is_last"]]
    assert len(rec) == len(lasts) >= 10
    for ep, (f, last) in enumerate(zip(firsts, lasts)):
        length = last - f                                   # L steps, L + 1 rows
        assert all(rows[i]["reward"] == 1.0 and not rows[i]["is_first"]
                   for i in range(f + 1, last + 1))
        assert rows[last]["is_terminal"]                    # random play: the pole falls
        assert rec[ep] == {"worker": 3, "row_last": last, "length": length,
                           "score": float(length), "terminal": True}
    # each episode after the first starts on the row after the previous one's last
    assert len(firsts) in (len(lasts), len(lasts) + 1)
    assert firsts[1:] == [last + 1 for last in lasts][:len(firsts) - 1]


def test_step_after_last_raises():
    env = CartPolePort(entropy=0)
    with pytest.raises(StepAfterLastError):
        env.step({"action": 0, "reset": False})            # before the first reset
    env.reset()
    row = None
    for _ in range(600):
        row = env.step({"action": 1, "reset": False})      # always right: falls fast
        if row["is_last"]:
            break
    assert row["is_last"] and row["is_terminal"]
    with pytest.raises(StepAfterLastError, match="step after is_last"):
        env.step({"action": 1, "reset": False})
    assert env.step({"action": 1, "reset": True})["is_first"]


def test_bad_action_raises():
    env = CartPolePort(entropy=0)
    env.reset()
    with pytest.raises(ValueError, match="action must be 0 or 1"):
        env.step({"action": 2, "reset": False})


def test_natural_truncation_at_500_steps():
    """A balancing controller keeps the pole up: the episode ends by truncation."""
    rec = []
    env = CartPolePort(entropy=[0, 0], worker=1, recorder=rec)
    row = env.reset()
    steps = 0
    while not row["is_last"]:
        x, x_dot, th, th_dot = row["vector"]
        row = env.step(int(th + 0.5 * th_dot + 0.01 * x + 0.1 * x_dot > 0))
        steps += 1
    assert steps == PARAMS["max_steps_in_episode"] == 500
    assert not row["is_terminal"]
    assert rec == [{"worker": 1, "row_last": 500, "length": 500, "score": 500.0,
                    "terminal": False}]


def test_reset_draws_are_seeded_by_entropy():
    a = CartPolePort(entropy=[1, 2]).reset()["vector"]
    b = CartPolePort(entropy=[1, 2]).reset()["vector"]
    c = CartPolePort(entropy=[1, 3]).reset()["vector"]
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    expected = np.random.default_rng([1, 2]).uniform(-0.05, 0.05, 4).astype(np.float32)
    np.testing.assert_array_equal(a, expected)


def test_make_embodied_env_delegates_to_the_port():
    class Env:
        pass

    fake = types.SimpleNamespace(Env=Env, Space=lambda *a, **k: (a, k))
    rec = []
    env = make_embodied_env(fake, entropy=[0, 4], worker=4, recorder=rec)
    assert isinstance(env, Env)
    assert set(env.obs_space) == {"vector", "reward", "is_first", "is_last", "is_terminal"}
    assert env.act_space["action"] == ((np.int32, (), 0, 2), {})
    row = env.step({"action": 0, "reset": True})
    np.testing.assert_array_equal(row["vector"], CartPolePort([0, 4]).reset()["vector"])


# --- the port under numpy 1 (reference venv) and numpy 2 (here) ------------------------

def test_port_is_bit_identical_in_the_reference_venv(figures):
    _, fig = figures
    if not fig["refvenv_present"]:
        pytest.skip("reference venv missing: run `make reference-setup`")
    assert fig["refvenv_numpy"].startswith("1.")
    assert fig["refvenv_identical"] is True


def test_venv_check_detects_a_difference(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 1.26.4 float32 0000\n")
    fake.chmod(0o755)
    fig = port_check.check_reference_venv(fake, n_states=10)
    assert fig == {"refvenv_present": True, "refvenv_numpy": "1.26.4",
                   "refvenv_identical": False, "refvenv_ok": False}
    absent = port_check.check_reference_venv(tmp_path / "none", n_states=10)
    assert absent["refvenv_present"] is False and absent["refvenv_identical"] is None

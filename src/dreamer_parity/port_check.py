"""Self-test of the numpy CartPole port against the installed gymnax CartPole-v1.

The DVC stage ``port_check`` runs::

    python -m dreamer_parity.port_check --out metrics/port_check.json

which writes a flat JSON of figures and exits 1 when a check fails; the pytest module
``tests/test_cartpole_port.py`` calls the same functions.  Main venv only (needs gymnax,
jax and scipy).  Checks (PROTOCOL.md section 2.2, "Port self-test", extended):

single steps
    ``n_states`` random float32 states strictly inside the termination thresholds, at
    random times (every tenth at time 499, so that truncation happens), both actions:
    the port's row against gymnax's six-value ``CartPole.step`` under ``jax.jit``
    (``gymnax/environments/environment.py``; the observation is
    ``info["final_observation"]``, before the auto-reset).  ``reward``, ``terminated``
    and ``truncated`` must be equal exactly; the observation within
    :data:`OBS_RTOL` of the scale ``max(|s|, |s'|)`` of each coordinate (see below).
lock-step rollout
    gymnax runs ``steps`` random-action steps with its own auto-reset; before every step
    the port is put into gymnax's current state and time, so both step from the same
    state (no open-loop drift).  Same tolerances; at least :data:`MIN_TERMINATIONS`
    terminations must occur.
forced truncation
    a live state at time 499: gymnax reports truncated and not terminated; the port's
    row has ``is_last`` and not ``is_terminal``.
numpy 1 and numpy 2
    the port's steps and reset draws are bit-identical in the reference venv (numpy
    1.26) and here (numpy 2), when the reference venv exists (``make reference-setup``);
    ``refvenv_identical`` is null otherwise.
reset distribution
    ``n_resets`` port resets against as many gymnax resets: a two-sample
    Kolmogorov-Smirnov test (``scipy.stats.ks_2samp``) per coordinate at level
    :data:`KS_ALPHA`, and every draw inside ``[-0.05, 0.05]``.

Why a tolerance and not bit equality: XLA's CPU backend contracts ``a * b + c`` into a
fused multiply-add and rewrites division by a constant as multiplication by its
reciprocal inside fused kernels (measured: ``x + tau * x_dot`` under ``jax.jit``
equals ``float32(x + tau * x_dot)`` computed with one rounding, not numpy's two), and its
``sin``/``cos`` differ from numpy's in the last bit for about 1% of angles.  The port
keeps gymnax's operation order in plain float32, so single ulps differ in about 15% of
coordinates; where the Euler sum cancels (``|s'|`` much smaller than ``|s|``) one ulp of
an operand is many ulps of the result, so the error is measured against the operands'
scale ``max(|s|, |s'|)``: at most 6 ulp of that scale's binade (relative error
4.8e-7, absolute 2.4e-7) was seen; :data:`OBS_RTOL` = 1e-6.  The raw ulp distance is reported as well.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

from dreamer_parity.cartpole_port import PARAMS, CartPolePort
from dreamer_parity import records

__all__ = [
    "OBS_RTOL", "KS_ALPHA", "MIN_TERMINATIONS", "sample_states", "check_single_steps",
    "check_lockstep", "check_truncation", "check_resets", "check_reference_venv", "run_all",
    "main",
]

#: Observation tolerance relative to ``max(|s|, |s'|)`` per coordinate.
OBS_RTOL = 1e-6
#: Level of the per-coordinate two-sample KS test of the reset draws.
KS_ALPHA = 1e-3
#: Terminations the lock-step rollout must contain.
MIN_TERMINATIONS = 50
#: Bounds of the sampled velocities (m/s, rad/s): beyond what CartPole episodes reach
#: within the thresholds under random actions.
VEL_BOUNDS = (3.0, 3.5)


def _gymnax():
    import jax
    import jax.numpy as jnp
    from gymnax.environments.classic_control.cartpole import CartPole, EnvState

    env = CartPole()
    params = env.default_params

    def one(key, s, t, a):
        state = EnvState(x=s[0], x_dot=s[1], theta=s[2], theta_dot=s[3], time=t)
        _, _, reward, terminated, truncated, info = env.step(key, state, a, params)
        return info["final_observation"], reward, terminated, truncated

    return jax, jnp, env, params, EnvState, jax.jit(jax.vmap(one))


def _f32_ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Number of float32 values between ``a`` and ``b`` (int64, same shape)."""
    def ordered(v):
        i = np.asarray(v, np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    return np.abs(ordered(a) - ordered(b))


def _obs_errors(prev: np.ndarray, port: np.ndarray, ref: np.ndarray) -> dict:
    """Error figures of port observations against gymnax's (arrays ``[n, 4]`` float32)."""
    prev = np.asarray(prev, np.float32)
    scale = np.maximum(np.abs(prev), np.abs(ref)).astype(np.float32)
    diff = np.abs(port.astype(np.float64) - ref.astype(np.float64))
    rel = diff / np.maximum(scale.astype(np.float64), np.finfo(np.float32).tiny)
    return {
        "max_abs": float(diff.max(initial=0.0)),
        "max_rel": float(rel.max(initial=0.0)),
        "max_ulp": int(_f32_ulp_distance(port, ref).max(initial=0)),
        "max_scaled_ulp": float((diff / np.spacing(scale).astype(np.float64)).max(initial=0.0)),
        "frac_unequal": float(np.mean(port != ref)) if port.size else 0.0,
    }


def sample_states(n: int, seed: int = 0) -> np.ndarray:
    """``n`` float32 states ``[x, x_dot, theta, theta_dot]`` strictly inside the thresholds.

    Positions uniform in ``(-2.4, 2.4)`` and ``(-0.2094, 0.2094)`` rad (shrunk by one
    float32 step so the state is not terminated), velocities uniform in
    ``+-VEL_BOUNDS``.  Returns float32 ``[n, 4]``.
    """
    rng = np.random.default_rng([seed, 0x5057])
    xt = np.nextafter(PARAMS["x_threshold"], np.float32(0))
    tt = np.nextafter(PARAMS["theta_threshold_radians"], np.float32(0))
    hi = np.array([xt, VEL_BOUNDS[0], tt, VEL_BOUNDS[1]], np.float32)
    s = rng.uniform(-hi, hi, (n, 4)).astype(np.float32)
    return np.clip(s, -hi, hi)


def _port_rows(states, times, actions):
    """Step a fresh port from each (state, time) with each action; return arrays."""
    n = len(states)
    obs = np.zeros((n, 4), np.float32)
    rew = np.zeros(n, np.float32)
    term = np.zeros(n, bool)
    trunc = np.zeros(n, bool)
    last = np.zeros(n, bool)
    port = CartPolePort(entropy=0)
    for i in range(n):
        port.set_state(states[i], int(times[i]))
        row = port.step({"action": int(actions[i]), "reset": False})
        obs[i] = row["vector"]
        rew[i] = row["reward"]
        term[i] = row["is_terminal"]
        last[i] = row["is_last"]
        trunc[i] = port.state[1] >= PARAMS["max_steps_in_episode"]
    return obs, rew, term, trunc, last


def _compare(prefix, prev, port, ref) -> dict:
    p_obs, p_rew, p_term, p_trunc, p_last = port
    g_obs, g_rew, g_term, g_trunc = ref
    err = _obs_errors(prev, p_obs, g_obs)
    out = {f"{prefix}_obs_{k}": v for k, v in err.items()}
    out[f"{prefix}_reward_mismatches"] = int(np.sum(p_rew != g_rew))
    out[f"{prefix}_terminated_mismatches"] = int(np.sum(p_term != g_term))
    out[f"{prefix}_truncated_mismatches"] = int(np.sum(p_trunc != g_trunc))
    out[f"{prefix}_is_last_mismatches"] = int(np.sum(p_last != (g_term | g_trunc)))
    out[f"{prefix}_ok"] = bool(
        err["max_rel"] <= OBS_RTOL and not any(
            out[f"{prefix}_{k}_mismatches"] for k in ("reward", "terminated", "truncated",
                                                      "is_last")))
    return out


def check_single_steps(n_states: int = 400, seed: int = 0) -> dict:
    """Single steps from ``n_states`` states inside the thresholds, plus ``n_states // 10``
    states just beyond one (reward 0 there), each with both actions.

    Returns a flat dict: ``single_states`` (inside), ``single_steps``,
    ``single_prev_terminal_steps``, ``single_truncations``,
    ``single_terminations``, ``single_obs_{max_abs, max_rel, max_ulp, max_scaled_ulp,
    frac_unequal}``, ``single_{reward,terminated,truncated,is_last}_mismatches``,
    ``single_ok``.
    """
    if n_states < 1:
        raise ValueError(f"n_states must be positive, got {n_states}")
    jax, jnp, _, _, _, step = _gymnax()
    s = sample_states(n_states, seed)
    # One extra state in ten starts beyond a threshold: gymnax's reward is then 0.
    outside = sample_states(n_states // 10, seed + 1)
    coord = np.arange(len(outside)) % 2 * 2           # x, theta, x, theta ...
    limit = np.where(coord == 0, PARAMS["x_threshold"], PARAMS["theta_threshold_radians"])
    outside[np.arange(len(outside)), coord] = (
        np.sign(outside[np.arange(len(outside)), coord]) * limit * np.float32(1.05))
    s = np.concatenate([s, outside]).astype(np.float32)
    n_all = len(s)
    rng = np.random.default_rng([seed, 0x71])
    t = rng.integers(0, PARAMS["max_steps_in_episode"] - 1, n_all)
    t[::10] = PARAMS["max_steps_in_episode"] - 1
    states = np.concatenate([s, s])
    times = np.concatenate([t, t]).astype(np.int32)
    actions = np.repeat(np.array([0, 1], np.int32), n_all)
    keys = jax.random.split(jax.random.PRNGKey(seed), 2 * n_all)
    ref = [np.asarray(v) for v in step(keys, jnp.asarray(states), jnp.asarray(times),
                                       jnp.asarray(actions))]
    ref[1] = ref[1].astype(np.float32)
    port = _port_rows(states, times, actions)
    out = {"single_states": n_states, "single_steps": 2 * n_all,
           "single_prev_terminal_steps": int(np.sum(ref[1] == 0)),
           "single_truncations": int(ref[3].sum()), "single_terminations": int(ref[2].sum())}
    out.update(_compare("single", states, port, ref))
    return out


def check_lockstep(steps: int = 4000, seed: int = 0) -> dict:
    """A gymnax random-action rollout of ``steps`` steps with the port stepped in lock-step.

    gymnax (``jax.lax.scan`` of the jitted six-value ``step`` with auto-reset) records
    the state before every step; the port is set to that state and time and steps with
    the same action.  Returns a flat dict: ``lockstep_steps``,
    ``lockstep_terminations``, ``lockstep_episodes``, the error figures and mismatch
    counts as :func:`check_single_steps` under the ``lockstep_`` prefix, and
    ``lockstep_ok`` (which also requires ``MIN_TERMINATIONS`` terminations).
    """
    if steps < 1:
        raise ValueError(f"steps must be positive, got {steps}")
    jax, jnp, env, params, _, _ = _gymnax()

    def body(carry, key):
        state = carry
        k_act, k_step = jax.random.split(key)
        a = jax.random.randint(k_act, (), 0, 2)
        pre = (jnp.stack([state.x, state.x_dot, state.theta, state.theta_dot]), state.time)
        _, state2, reward, terminated, truncated, info = env.step(k_step, state, a, params)
        return state2, (pre[0], pre[1], a, info["final_observation"], reward, terminated,
                        truncated)

    @jax.jit
    def rollout(key):
        k0, k1 = jax.random.split(key)
        _, state = env.reset(k0, params)
        return jax.lax.scan(body, state, jax.random.split(k1, steps))[1]

    pre_s, pre_t, acts, obs, rew, term, trunc = (
        np.asarray(v) for v in rollout(jax.random.PRNGKey(seed)))
    ref = (obs, rew.astype(np.float32), term, trunc)
    port = _port_rows(pre_s, pre_t, acts)
    out = {"lockstep_steps": int(steps), "lockstep_terminations": int(term.sum()),
           "lockstep_episodes": int((term | trunc).sum())}
    out.update(_compare("lockstep", pre_s, port, ref))
    out["lockstep_ok"] = bool(out["lockstep_ok"] and out["lockstep_terminations"]
                              >= MIN_TERMINATIONS)
    return out


def check_truncation() -> dict:
    """A live state at time 499 stepped once by both: truncated, not terminated.

    Returns ``{"truncation_gymnax_truncated", "truncation_gymnax_terminated",
    "truncation_port_is_last", "truncation_port_is_terminal", "truncation_ok"}``.
    """
    jax, jnp, _, _, _, step = _gymnax()
    s = np.array([[0.01, -0.02, 0.03, 0.01]], np.float32)
    t = np.array([PARAMS["max_steps_in_episode"] - 1], np.int32)
    a = np.array([1], np.int32)
    _, _, g_term, g_trunc = (np.asarray(v) for v in step(
        jax.random.split(jax.random.PRNGKey(0), 1), jnp.asarray(s), jnp.asarray(t),
        jnp.asarray(a)))
    port = CartPolePort(entropy=0)
    port.set_state(s[0], int(t[0]))
    row = port.step({"action": 1, "reset": False})
    out = {
        "truncation_gymnax_truncated": bool(g_trunc[0]),
        "truncation_gymnax_terminated": bool(g_term[0]),
        "truncation_port_is_last": bool(row["is_last"]),
        "truncation_port_is_terminal": bool(row["is_terminal"]),
    }
    out["truncation_ok"] = (out["truncation_gymnax_truncated"]
                            and not out["truncation_gymnax_terminated"]
                            and out["truncation_port_is_last"]
                            and not out["truncation_port_is_terminal"])
    return out


def check_resets(n_resets: int = 4000, seed: int = 0) -> dict:
    """Reset draws of the port against gymnax's ``reset``: KS test per coordinate.

    The port's draws come from 8 envs with the protocol's training entropy
    ``[seed, worker]``, ``n_resets / 8`` resets each; gymnax's from ``n_resets`` split
    keys.  Returns ``resets_n``, ``resets_ks_pvalue_min``, ``resets_ks_stat_max``,
    ``resets_port_abs_max`` (largest ``|draw|``) and ``resets_ok`` (every p-value above
    ``KS_ALPHA`` and every draw inside ``[-0.05, 0.05]``).
    """
    from scipy.stats import ks_2samp

    if n_resets < 8:
        raise ValueError(f"n_resets must be at least 8, got {n_resets}")
    jax, jnp, env, params, _, _ = _gymnax()
    per = n_resets // 8
    port = np.concatenate([_resets(seed, w, per) for w in range(8)])
    keys = jax.random.split(jax.random.PRNGKey(seed), len(port))
    ref = np.asarray(jax.jit(jax.vmap(lambda k: env.reset(k, params)[0]))(keys))
    tests = [ks_2samp(port[:, i], ref[:, i]) for i in range(4)]
    out = {
        "resets_n": int(len(port)),
        "resets_ks_pvalue_min": float(min(t.pvalue for t in tests)),
        "resets_ks_stat_max": float(max(t.statistic for t in tests)),
        "resets_port_abs_max": float(np.abs(port).max()),
    }
    out["resets_ok"] = bool(out["resets_ks_pvalue_min"] > KS_ALPHA
                            and out["resets_port_abs_max"] <= np.float32(0.05))
    return out


def _resets(seed, worker, n):
    env = CartPolePort(entropy=[seed, worker], worker=worker)
    return np.stack([env.reset()["vector"] for _ in range(n)])


_VENV_PROBE = """
import hashlib, sys
import numpy as np
from dreamer_parity.cartpole_port import CartPolePort, step_state
states = np.random.default_rng(11).uniform(-0.2, 0.2, (%d, 4)).astype(np.float32)
steps = np.array([step_state(s, a)[0] for s in states for a in (0, 1)])
env = CartPolePort(entropy=[3, 1])
resets = np.array([env.reset()["vector"] for _ in range(100)])
print(np.__version__, steps.dtype, hashlib.sha256(steps.tobytes() + resets.tobytes()).hexdigest())
"""


def check_reference_venv(python=None, n_states: int = 500) -> dict:
    """The port in the reference venv (numpy 1.x) against this process (numpy 2).

    Runs ``n_states`` random states with both actions and 100 resets in a fresh
    interpreter of each venv (``PYTHONPATH`` = this package's ``src``) and compares a
    SHA-256 of the float32 bytes.  ``python`` defaults to the reference venv of
    :mod:`dreamer_parity.reference.setup`.  Returns ``refvenv_present``,
    ``refvenv_numpy``, ``refvenv_identical`` (None when the venv is absent) and
    ``refvenv_ok`` (False only when present and different).
    """
    import subprocess

    if python is None:
        try:
            from dreamer_parity.reference.setup import default_root, venv_python
            python = venv_python(default_root())
        except ImportError:                          # same default layout as that module
            root = os.environ.get("DREAMER_PARITY_REF_ROOT") or Path(
                os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dreamer-parity"
            python = Path(root) / "refvenv" / "bin" / "python"
    python = Path(python)
    if not python.exists():
        return {"refvenv_present": False, "refvenv_numpy": None, "refvenv_identical": None,
                "refvenv_ok": True}
    src = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONPATH"] = str(src)
    outs = []
    for py in (sys.executable, python):
        r = subprocess.run([str(py), "-c", _VENV_PROBE % n_states], env=env,
                           capture_output=True, text=True, timeout=300)
        if r.returncode:
            raise RuntimeError(f"port probe failed in {Path(py).name}: "
                               f"{r.stderr.strip().splitlines()[-1:]}")
        outs.append(r.stdout.split())
    same = outs[0][1:] == outs[1][1:] and outs[0][1] == "float32"
    return {"refvenv_present": True, "refvenv_numpy": outs[1][0], "refvenv_identical": same,
            "refvenv_ok": same}


def run_all(n_states: int = 400, steps: int = 4000, n_resets: int = 4000,
            seed: int = 0) -> dict:
    """All checks; a flat dict of figures with ``passed`` and ``failures`` (names)."""
    out = {"seed": seed}
    for fn in (lambda: check_single_steps(n_states, seed), lambda: check_lockstep(steps, seed),
               check_truncation, lambda: check_resets(n_resets, seed),
               check_reference_venv):
        out.update(fn())
    failed = [k[:-3] for k, v in out.items() if k.endswith("_ok") and not v]
    out["failures"] = ",".join(failed)
    out["passed"] = not failed
    return out


#: The ranges of the command's numeric arguments, checked before anything is computed:
#: ``--resets`` at least 8 (one per worker of :func:`check_resets`); the upper bounds are
#: 25 times the defaults, so that a check stays within minutes and the arrays within memory.
ARG_RANGES = {"states": (1, 10_000), "steps": (1, 100_000), "resets": (8, 100_000),
              "seed": (0, 2 ** 31 - 1)}


def main(argv=None) -> int:
    """CLI: run every check, write ``--out`` atomically, exit 1 when one fails; exit 2
    with one line ``error: ...`` for an argument out of :data:`ARG_RANGES`, an ``--out``
    that is a directory (:func:`dreamer_parity.records.check_target`) or a refused
    params file, before anything is computed."""
    ap = records.ArgumentParser(prog="python -m dreamer_parity.port_check",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="metrics/port_check.json")
    ap.add_argument("--params", default="params.yaml",
                    help="the round's params file, validated first as at every entry point")
    ap.add_argument("--states", type=int, default=400)
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--resets", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    from dreamer_parity import params as params_mod
    try:
        for name, (low, high) in ARG_RANGES.items():
            records.check_range(getattr(args, name), f"--{name}", low, high)
        records.check_target(args.out, "--out", "file", inside=False)
        params_mod.load(args.params)
    except records.RecordError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except params_mod.ParamsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except FileNotFoundError:
        print(f"error: --params {args.params}: no such file", file=sys.stderr)
        return 2
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from dreamer_parity.records import write_json

    res = run_all(args.states, args.steps, args.resets, args.seed)
    write_json(Path(args.out), res)
    status = "passed" if res["passed"] else f"FAILED ({res['failures']})"
    print(f"port_check: {status}: {res['single_steps']} single steps (max rel err "
          f"{res['single_obs_max_rel']:.2e}, max {res['single_obs_max_scaled_ulp']:.0f} ulp of "
          f"scale), {res['lockstep_steps']} lock-step steps with "
          f"{res['lockstep_terminations']} terminations, KS p min "
          f"{res['resets_ks_pvalue_min']:.3g}, numpy 1 = numpy 2: {res['refvenv_identical']}")
    return 0 if res["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())

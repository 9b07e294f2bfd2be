"""A numpy float32 port of gymnax CartPole-v1, the reference side's environment.

Numpy only (works on numpy 1.26 and 2.x): the reference's virtual environment imports
it.  The arithmetic follows gymnax 1.0 ``CartPole.step_env``
(``gymnax/environments/classic_control/cartpole.py``, default ``EnvParams``) in the
same operation order with float32 constants; row semantics are PROTOCOL.md section 2:

* a reset row: the reset observation, reward 0, ``is_first``;
* one row per step carrying that step's reward (1.0 while the pole was up before the
  step), ``is_last = terminated or truncated`` (truncation when time reaches 500),
  ``is_terminal = terminated``;
* stepping past ``is_last`` without a reset raises :class:`StepAfterLastError`.

Resets draw ``uniform(-0.05, 0.05, 4)`` from ``numpy.random.default_rng(entropy)`` with a
caller-given entropy (the protocol uses ``[seed, worker]`` for training envs and
``[seed, 7_000_001, i]`` for evaluation envs).  An optional recorder receives one dict
per finished episode: ``worker``, ``row_last`` (0-based per-env row of the ``is_last``
row), ``length``, ``score``, ``terminal``.

Agreement with gymnax (``python -m dreamer_parity.port_check``, DVC stage ``port_check``):
reward, termination and truncation equal exactly; observations within 1e-6 of the
operands' scale (XLA fuses multiply-adds and its ``sin``/``cos`` differ in the last bit,
so bit equality is not reached); bit-identical results under numpy 1.26 (reference venv)
and numpy 2 (main venv).

The class is a plain object with the ``embodied.Env`` interface (``obs_space``,
``act_space``, ``step``); :func:`make_embodied_env` wraps it as a real ``embodied.Env``
inside the reference's environment.
"""

from __future__ import annotations

import numpy as np

__all__ = ["CartPolePort", "StepAfterLastError", "PARAMS", "step_state", "is_terminated"]

F = np.float32

PARAMS = dict(
    gravity=F(9.8),
    masscart=F(1.0),
    masspole=F(0.1),
    total_mass=F(1.0) + F(0.1),
    length=F(0.5),
    polemass_length=F(0.1) * F(0.5),
    force_mag=F(10.0),
    tau=F(0.02),
    theta_threshold_radians=F(12 * 2 * np.pi / 360),
    x_threshold=F(2.4),
    max_steps_in_episode=500,
)


class StepAfterLastError(RuntimeError):
    """Raised when an env is stepped after its ``is_last`` row without a reset."""


def is_terminated(state: np.ndarray) -> bool:
    """Whether a float32 state ``[x, x_dot, theta, theta_dot]`` is out of bounds.

    Strict inequalities on float32 values, as gymnax ``is_terminal`` (without the time
    condition, which is truncation).
    """
    x, _, theta, _ = (F(v) for v in state)
    p = PARAMS
    return bool(
        (x < -p["x_threshold"]) or (x > p["x_threshold"])
        or (theta < -p["theta_threshold_radians"]) or (theta > p["theta_threshold_radians"]))


def step_state(state: np.ndarray, action: int) -> tuple[np.ndarray, np.float32]:
    """One Euler step of the cart-pole dynamics in float32.

    Args:
      state: float32 array (4,) ``[x, x_dot, theta, theta_dot]`` (m, m/s, rad, rad/s).
      action: 0 (push left) or 1 (push right).

    Returns:
      ``(new_state float32 (4,), reward float32)`` where the reward is
      ``1 - terminated(previous state)``, as gymnax computes it.
    """
    p = PARAMS
    x, x_dot, theta, theta_dot = (F(v) for v in state)
    prev_terminal = is_terminated(state)
    a = F(action)
    force = p["force_mag"] * a - p["force_mag"] * (F(1.0) - a)
    costheta = F(np.cos(theta))
    sintheta = F(np.sin(theta))
    # x * x, not x ** 2: numpy 1.x returns float64 for ``float32_scalar ** 2`` (the
    # reference venv has numpy 1.26); jax lowers ``x ** 2`` to ``x * x``.
    temp = (force + p["polemass_length"] * (theta_dot * theta_dot) * sintheta) / p["total_mass"]
    thetaacc = (p["gravity"] * sintheta - costheta * temp) / (
        p["length"] * (F(4.0) / F(3.0)
                       - p["masspole"] * (costheta * costheta) / p["total_mass"]))
    xacc = temp - p["polemass_length"] * thetaacc * costheta / p["total_mass"]
    x = x + p["tau"] * x_dot
    x_dot = x_dot + p["tau"] * xacc
    theta = theta + p["tau"] * theta_dot
    theta_dot = theta_dot + p["tau"] * thetaacc
    reward = F(1.0) - F(prev_terminal)
    return np.array([x, x_dot, theta, theta_dot], dtype=F), reward


class CartPolePort:
    """CartPole-v1 with the protocol's row semantics (see module docstring).

    Args:
      entropy: the ``default_rng`` entropy of this env's reset draws (int or list of
        non-negative ints).
      worker: the env index written into episode records.
      recorder: a list (or any object with ``append``) receiving finished-episode
        dicts, or None.

    Raises:
      StepAfterLastError: ``step`` without ``reset`` after an ``is_last`` row, or before
        the first reset.
      ValueError: an action other than 0 or 1.
    """

    def __init__(self, entropy, worker: int = 0, recorder=None):
        self._rng = np.random.default_rng(entropy)
        self._worker = int(worker)
        self._recorder = recorder
        self._row = -1
        self._state = None
        self._time = 0
        self._done = True
        self._score = 0.0
        self._length = 0

    @property
    def obs_space(self):
        """``{key: (dtype, shape)}`` of an observation, the reference's CartPole keys."""
        return {
            "vector": ("float32", (4,)), "reward": ("float32", ()),
            "is_first": ("bool", ()), "is_last": ("bool", ()), "is_terminal": ("bool", ())}

    @property
    def act_space(self):
        """``{key: (dtype, shape[, low, high])}`` of an action: ``action`` in {0, 1}, and
        ``reset``."""
        return {"action": ("int32", (), 0, 2), "reset": ("bool", ())}

    @property
    def state(self):
        """Current float32 state (4,) and time, or None before the first reset."""
        return None if self._state is None else (self._state.copy(), self._time)

    def set_state(self, state, time: int) -> None:
        """Put the env into ``state`` (float32 (4,)) at ``time`` (used by the self-test)."""
        self._state = np.asarray(state, dtype=F).copy()
        self._time = int(time)
        self._done = False

    def reset(self) -> dict:
        """Start an episode; returns the reset row."""
        self._row += 1
        self._state = self._rng.uniform(-0.05, 0.05, 4).astype(F)
        self._time = 0
        self._done = False
        self._score = 0.0
        self._length = 0
        return self._obs(F(0.0), True, False, False)

    def step(self, action) -> dict:
        """Embodied-style step: ``action`` is a dict with ``action`` and ``reset``,
        or a bare action index.  Returns the row as a dict of numpy values."""
        if isinstance(action, dict):
            if bool(action.get("reset", False)):
                return self.reset()
            action = action["action"]
        if self._state is None or self._done:
            raise StepAfterLastError(
                f"env {self._worker}: step after is_last (or before the first reset) "
                "without reset")
        a = int(action)
        if a not in (0, 1):
            raise ValueError(f"action must be 0 or 1, got {action!r}")
        self._row += 1
        self._state, reward = step_state(self._state, a)
        self._time += 1
        term = is_terminated(self._state)
        trunc = self._time >= PARAMS["max_steps_in_episode"]
        self._score += float(reward)
        self._length += 1
        is_last = term or trunc
        if is_last:
            self._done = True
            if self._recorder is not None:
                self._recorder.append({
                    "worker": self._worker, "row_last": self._row, "length": self._length,
                    "score": self._score, "terminal": bool(term)})
        return self._obs(reward, False, is_last, term)

    def _obs(self, reward, is_first, is_last, is_terminal) -> dict:
        return {
            "vector": self._state.copy(), "reward": F(reward),
            "is_first": bool(is_first), "is_last": bool(is_last),
            "is_terminal": bool(is_terminal)}


def make_embodied_env(embodied, entropy, worker: int = 0, recorder=None):
    """Return the port as an ``embodied.Env`` subclass instance (reference venv only).

    Args:
      embodied: the reference's ``embodied`` module (passed in so that this module
        imports nothing from the reference checkout).
    """

    class CartPoleEnv(embodied.Env):
        def __init__(self):
            self._port = CartPolePort(entropy, worker, recorder)

        @property
        def obs_space(self):
            return {
                "vector": embodied.Space(np.float32, (4,)),
                "reward": embodied.Space(np.float32),
                "is_first": embodied.Space(bool),
                "is_last": embodied.Space(bool),
                "is_terminal": embodied.Space(bool)}

        @property
        def act_space(self):
            return {
                "action": embodied.Space(np.int32, (), 0, 2),
                "reset": embodied.Space(bool)}

        def step(self, action):
            return self._port.step(action)

    return CartPoleEnv()

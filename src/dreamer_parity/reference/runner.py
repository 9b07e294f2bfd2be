"""Run the unmodified reference (danijar/dreamerv3 at 29eb964) on CartPole for one seed.

Runs inside the reference venv (jax 0.4.26, or 0.10.2 or 0.11.2 as ``reference.jax`` names;
no PyYAML), with the checkout and this repository's ``src`` on ``PYTHONPATH`` (see
:mod:`dreamer_parity.reference.launch`, which is the normal entry point).  Command line::

    python -m dreamer_parity.reference.runner --json '{"seed": 0, "out": "DIR",
        "profile": "smoke", "rows": 1200, "eval_every": 400, "eval_episodes": 2,
        "decode": "ref", "sampler": "stock", "jax": "0.4.26", "platform": "cpu",
        "precision": "default"}'
    python -m dreamer_parity.reference.runner --seed 0 --out DIR --profile smoke ...

Before the reference is imported, jax is imported (on the platform the launcher put in
``JAX_PLATFORMS``), the environment's shims are applied
(:mod:`dreamer_parity.reference.shims`; none on jax 0.4.26), ``precision`` other than
``default`` is set as ``jax_default_matmul_precision``, and the backend must be
``platform`` (else exit 2 before anything is written).

What runs is the reference's own ``embodied.run.train`` (``embodied/run/train.py:9-128``)
with its Driver, Replay (the stock ``dreamerv3.main.make_replay``), Agent and the stock
``dreamerv3.main.wrap_env``, configured by the protocol's complete override set
(PROTOCOL.md section 1) with the profile widths of :data:`dreamer_parity.params.PROFILES`.
Everything added reaches the loop through what it receives or looks up:

* ``make_agent`` builds the stock ``dreamerv3.Agent`` from the port's spaces
  (``dreamerv3/main.py:136-144``) and returns an :class:`AgentProxy`: every attribute is
  the agent's; ``train`` also feeds the returned metrics to a stock ``embodied.Agg``
  (reads only); ``policy`` first runs the pending record when the step counter reached a
  multiple of ``eval_every`` (then all updates of that vector step have run: ``train_step``
  is a driver callback after the policy call of its vector step, ``driver.py:67-78``).
* ``make_logger`` returns a stock ``embodied.Logger`` (JSONL output only: TensorBoard
  needs tensorflow) whose ``close`` (called once after the loop, ``train.py:128``) first
  runs the last record and the flush step (PROTOCOL.md 3.2).
* ``embodied.Driver`` is replaced, for the duration of the run, by a subclass whose only
  addition is keeping a handle on the instance (for the flush step).
* The protocol patches (:mod:`dreamer_parity.reference.patches`) when asked for.

Each record (:mod:`dreamer_parity.records`): window means of every train metric since the
previous record (reference names, ``*/dist`` dropped, NaN skipped as ``Agg`` does; the
stock ``JAXAgent.train`` returns the metrics of the previous call, ``jaxagent.py:199-202``),
``updates = int(agent.updates)``, the return normaliser read from the parameters, and the
evaluation of PROTOCOL.md 4.2 (:func:`Instrument.evaluate`).

Outputs in ``out``: ``run.json`` (written first), ``records.jsonl`` (rewritten at every
record), ``episodes.jsonl``, ``timing.json``, ``params.npz`` (final agent parameters,
compressed, keys as ``agent.params``), ``logdir/`` (the stock ``config.yaml`` and
``metrics.jsonl``), and ``DONE.json`` last.  The stock loop also saves an initial
checkpoint, ``logdir/checkpoint.ckpt``, before its first step (``train.py:94-101``); the
runner deletes it once the loop has ended, since nothing can resume from it (deviation D6)
and the final parameters are in ``params.npz``.  A run that raises writes
``DONE.json`` with status ``failed`` and exits 1.  Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import sys
import time
import traceback
from functools import partial as bind
from pathlib import Path

import numpy as np

from dreamer_parity import params as params_mod
from dreamer_parity import provenance, records, schedule
from dreamer_parity.cartpole_port import make_embodied_env
from dreamer_parity.reference import patches, shims
from dreamer_parity.reference import setup as ref_setup

__all__ = ["overrides", "PARAM_ARGS", "RUN_PARAMS", "REFERENCE_PARAMS", "arguments", "RunArgs",
           "parse_args", "Instrument", "AgentProxy", "run", "main", "EVAL_ENTROPY",
           "EVAL_SEED_ENTROPY", "MAX_EVAL_STEPS", "prepare_jax", "PlatformError"]

#: Entropy of evaluation env i's resets: ``[seed, EVAL_ENTROPY, i]`` (PROTOCOL.md 4.2).
EVAL_ENTROPY = 7_000_001
#: Entropy of the evaluation policy seeds: ``[seed, EVAL_ENTROPY, EVAL_SEED_ENTROPY]``.
EVAL_SEED_ENTROPY = 1_000_000
MAX_EVAL_STEPS = 500
LOGDIR = "logdir"
#: The stock initial checkpoint in :data:`LOGDIR`, deleted when the loop has ended.
STOCK_CHECKPOINT = "checkpoint.ckpt"


def overrides(seed: int, profile: str, rows: int, logdir: str = LOGDIR,
              platform: str = "cpu") -> dict:
    """The complete override set of PROTOCOL.md section 1 for one run.

    Args:
      seed: run seed (non-negative int).
      profile: ``"full"`` or ``"smoke"`` (widths of ``params.PROFILES``).
      rows: ``run.steps``, rows over all 16 envs.
      logdir: the reference's logdir (relative to the working directory).
      platform: ``jax.platform`` (``reference.platform``; ``cpu`` as the protocol has it).

    Returns:
      ``{dotted reference key: value}``, applied with ``embodied.Config.update``.
    """
    w = params_mod.PROFILES[profile]
    return {
        "seed": int(seed), "task": "gymnax_cartpole", "logdir": logdir,
        "jax.platform": platform, "jax.compute_dtype": "float32", "jax.param_dtype": "float32",
        "jax.prealloc": False, "jax.transfer_guard": False,
        "dyn.rssm.deter": w["deter"], "dyn.rssm.hidden": w["hidden"],
        "dyn.rssm.classes": w["classes"], r".*\.units": w["units"],
        "run.train_ratio": 512.0, "run.steps": int(rows), "run.num_envs": params_mod.NUM_ENVS,
        "run.log_every": -1, "run.eval_every": -1, "run.save_every": -1,
        "run.driver_parallel": False,
    }


#: The runner's arguments: the keys of ``--json`` and, with ``-`` for ``_``, its flags
#: (``--eval-every``).  Every other list of them is derived from this one.
PARAM_ARGS = ("seed", "out", "profile", "rows", "eval_every", "eval_episodes", "decode",
              "sampler", "jax", "platform", "precision")
#: The arguments that are run parameters (params.yaml keys; all but ``seed`` and ``out``).
RUN_PARAMS = PARAM_ARGS[2:]
#: The run parameters that params.yaml nests under ``reference``.
REFERENCE_PARAMS = ("decode", "sampler", "jax", "platform", "precision")


def arguments(seed: int, out, p: dict) -> dict:
    """The runner's ``--json`` object for one seed of validated params ``p``.

    Args:
      seed: run seed.
      out: output directory (written as a string).
      p: params validated by :func:`dreamer_parity.params.validate` (``reference.*`` nested).

    Returns:
      ``{name: value}`` with the keys :data:`PARAM_ARGS`, in that order.
    """
    values = {"seed": seed, "out": str(out)}
    for k in RUN_PARAMS:
        values[k] = p["reference"][k] if k in REFERENCE_PARAMS else p[k]
    return values


class RunArgs:
    """Validated runner arguments (see :func:`parse_args`): one attribute per name of
    :data:`PARAM_ARGS` (``out`` a :class:`~pathlib.Path`).

    Raises:
      TypeError: a name of :data:`PARAM_ARGS` missing, or another name given.
    """

    def __init__(self, **values):
        if set(values) != set(PARAM_ARGS):
            raise TypeError(f"RunArgs needs exactly {list(PARAM_ARGS)}, got {sorted(values)}")
        for k in PARAM_ARGS:
            setattr(self, k, values[k])

    def params_subset(self) -> dict:
        """``{name: value}`` of the run parameters (:data:`RUN_PARAMS`)."""
        return {k: getattr(self, k) for k in RUN_PARAMS}


def parse_args(argv=None) -> RunArgs:
    """Parse ``--json`` and/or flags; validate with :func:`dreamer_parity.params.validate`.

    Raises:
      SystemExit(2): with a one-line message naming the bad parameter.
    """
    ap = argparse.ArgumentParser(prog="python -m dreamer_parity.reference.runner",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=None, help="all arguments as one JSON object")
    for name in PARAM_ARGS:
        ap.add_argument("--" + name.replace("_", "-"), default=None)
    a = ap.parse_args(argv)
    raw = json.loads(a.json) if a.json else {}
    if not isinstance(raw, dict):
        ap.error("--json must be a JSON object")
    for name in PARAM_ARGS:
        v = getattr(a, name)
        if v is not None:
            raw[name] = v
    unknown = set(raw) - set(PARAM_ARGS)
    if unknown:
        ap.error(f"unknown argument(s) {sorted(unknown)}")
    if "out" not in raw or not raw["out"]:
        ap.error("--out is required")
    seed = raw.get("seed")
    try:
        seed = params_mod._coerce_int("seed", seed)
        if seed < 0:
            raise params_mod.ParamsError("seed", f"must be a non-negative integer, got {seed}")
        nested = {k: raw[k] for k in RUN_PARAMS if k in raw and k not in REFERENCE_PARAMS}
        nested["reference"] = {k: raw[k] for k in REFERENCE_PARAMS if k in raw}
        # Only the run's own keys matter here; the statistics keys are set consistent.
        last = params_mod._coerce_int("rows", raw.get("rows", params_mod.SCHEMA["rows"].default))
        nested["stats"] = {"s1_rows": [last], "concordance_rows": [last],
                           "concordance_range": [], "late_rows": []}
        p = params_mod.validate(nested, where="runner arguments")
    except params_mod.ParamsError as e:
        ap.error(str(e))
    return RunArgs(**{**arguments(seed, raw["out"], p), "out": Path(raw["out"])})


def _to_plain(x):
    if isinstance(x, dict):
        return {str(k): _to_plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_to_plain(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x


class Instrument:
    """State and read-only hooks shared by the factories of one run (see module doc).

    Args:
      args: the run arguments.
      embodied: the reference's ``embodied`` module.
      refmain: ``dreamerv3.main`` (stock ``wrap_env``).
      config: the resolved ``embodied.Config``.
    """

    def __init__(self, args: RunArgs, embodied, refmain, config):
        self.args = args
        self.embodied = embodied
        self.refmain = refmain
        self.config = config
        self.episodes: list[dict] = []
        self.records: list[dict] = []
        self.recorded: set[int] = set()
        self.agent = None          # the JAXAgent (not the proxy)
        self.logger = None
        self.driver = None
        self.agg = embodied.Agg()
        self.finite_counts: dict[str, int] = {}
        self.t_start = time.time()
        self.build_s = None
        self.first_update_row = None
        self.update_ends: list[float] = []
        self.eval_intervals: list[tuple[float, float]] = []
        self.eval_first_s = None
        self.flush_episodes = None
        self.total_updates = schedule.updates_at(args.rows)
        self._last_print = (time.time(), 0, 0)

    # ---- factories -------------------------------------------------------------------
    def make_env(self, index: int, recorder=True):
        """Port env ``index`` wrapped with the stock ``wrap_env`` (resets from
        ``default_rng([seed, index])``; finished episodes go to :attr:`episodes`)."""
        env = make_embodied_env(self.embodied, [self.args.seed, int(index)], int(index),
                                self.episodes if recorder else None)
        return self.refmain.wrap_env(env, self.config)

    def make_agent(self):
        """The stock agent built from the port's spaces (``dreamerv3/main.py:136-144``),
        behind an :class:`AgentProxy`; times the build (param init + compile)."""
        from dreamerv3 import agent as agt

        t0 = time.time()
        env = self.make_env(0, recorder=False)
        agent = agt.Agent(env.obs_space, env.act_space, self.config)
        env.close()
        self.build_s = time.time() - t0
        self.agent = agent
        _progress(f"[reference s{self.args.seed}] agent built and compiled in "
                  f"{self.build_s:.1f} s")
        return AgentProxy(agent, self)

    def make_logger(self):
        """A stock ``embodied.Logger`` writing JSON lines only, closed through
        :meth:`on_loop_end` first."""
        embodied = self.embodied
        inst = self

        class RecordingLogger(embodied.Logger):
            def close(self):
                inst.on_loop_end()
                super().close()

        self.logger = RecordingLogger(
            embodied.Counter(), [embodied.logger.JSONLOutput(self.config.logdir,
                                                             "metrics.jsonl")], 1)
        return self.logger

    # ---- hooks -----------------------------------------------------------------------
    @property
    def step(self) -> int:
        """Environment rows so far, as the reference's logger counts them (0 before the
        logger exists)."""
        return int(self.logger.step) if self.logger is not None else 0

    def before_policy(self) -> None:
        """Called by the proxy before each training policy call (one per vector step)."""
        step = self.step
        if step > 0 and step % self.args.eval_every == 0 and step not in self.recorded:
            self.record(step)
        self.progress(step)

    def after_train(self, mets: dict) -> None:
        """Called with the metrics each ``agent.train`` returned (previous call's)."""
        self.update_ends.append(time.time())
        if self.first_update_row is None:
            self.first_update_row = self.step
        kept = {}
        for k, v in mets.items():
            if k.endswith("/dist"):
                continue
            arr = np.asarray(v)
            if arr.size != 1:
                continue
            kept[k] = v
            if np.isfinite(arr).all():
                self.finite_counts[k] = self.finite_counts.get(k, 0) + 1
            else:
                self.finite_counts.setdefault(k, 0)
        self.agg.add(kept)

    def on_loop_end(self) -> None:
        """Last record (if due) and the flush step; runs once, inside ``logger.close``."""
        step = self.step
        if step % self.args.eval_every == 0 and step not in self.recorded:
            self.record(step)
        self.flush()
        self.progress(step, force=True)

    def flush(self) -> None:
        """PROTOCOL.md 3.2: step every training env once with the driver's pending actions
        (no policy call, no replay add, no training, no callback)."""
        before = len(self.episodes)
        acts = self.driver.acts
        for i, env in enumerate(self.driver.envs):
            env.step({k: v[i] for k, v in acts.items()})
        self.flush_episodes = len(self.episodes) - before

    # ---- records ---------------------------------------------------------------------
    def retnorm(self) -> dict | None:
        """``{"lo", "hi", "scale"}`` of the return normaliser (``jaxutils.py:301-396``),
        read from the parameters; None before the first update."""
        if int(self.agent.updates) == 0:
            return None
        params = self.agent.params
        lo_key = [k for k in params if "/retnorm/low" in k]
        hi_key = [k for k in params if "/retnorm/high" in k]
        if len(lo_key) != 1 or len(hi_key) != 1:
            raise RuntimeError(f"return normaliser parameters not found: {lo_key} {hi_key}")
        lo = float(np.asarray(params[lo_key[0]]))
        hi = float(np.asarray(params[hi_key[0]]))
        limit = float(self.config.retnorm.limit)
        return {"lo": lo, "hi": hi, "scale": max(limit, hi - lo)}

    def record(self, step: int) -> None:
        """Write the record of evaluation point ``step`` (see module doc)."""
        self.recorded.add(step)
        result = self.agg.result()  # resets the window, as the stock log block would
        train = {}
        for k, v in sorted(result.items()):
            f = float(np.asarray(v, np.float64).reshape(()))
            train[k] = f if math.isfinite(f) else None
        counts = {k: int(self.finite_counts.get(k, 0)) for k in train}
        self.finite_counts = {}
        ev = self.evaluate()
        rec = {
            "side": "reference", "seed": self.args.seed, "rows": int(step),
            "updates": int(self.agent.updates),
            "eval_returns": ev["returns"], "eval_lengths": ev["lengths"],
            "eval_mean": float(np.mean(ev["returns"])),
            "eval_len_mean": float(np.mean(ev["lengths"])),
            "train": train, "train_counts": counts, "retnorm": self.retnorm(),
            "status": "ok",
        }
        self.records.append(rec)
        records.write_jsonl(self.args.out / "records.jsonl", self.records)
        self.write_episodes()
        self.logger.write()
        _progress(f"[reference s{self.args.seed}] record rows {step}: updates "
                  f"{rec['updates']}, eval mean {rec['eval_mean']:.1f} "
                  f"(returns {ev['returns']})")

    def write_episodes(self) -> None:
        """Rewrite ``<out>/episodes.jsonl`` with every finished training episode so far,
        each labelled with the run seed (atomic, :func:`dreamer_parity.records.write_jsonl`)."""
        eps = [{"seed": self.args.seed, **e} for e in self.episodes]
        records.write_jsonl(self.args.out / "episodes.jsonl", eps)

    def evaluate(self) -> dict:
        """PROTOCOL.md 4.2: ``eval_episodes`` fresh port envs (resets from
        ``default_rng([seed, 7_000_001, i])``), one episode each, sampled policy of the
        latest trained parameters (``agent.params`` policy keys, copied), zero carry
        (``_init_policy``), policy seeds uint32[2] from ``default_rng([seed, 7_000_001,
        1_000_000])``, all re-created at every evaluation.  Calls the jitted
        ``_init_policy`` / ``_policy`` directly: neither ``agent.rng`` nor the training
        actor's pending parameter swap is touched.

        Returns:
          ``{"returns": [float], "lengths": [int]}`` (one per env).
        """
        import jax

        t0 = time.time()
        agent = self.agent
        n = self.args.eval_episodes
        params = jax.device_put({k: agent.params[k].copy() for k in agent.policy_keys},
                                agent.policy_mirrored)
        rng = np.random.default_rng([self.args.seed, EVAL_ENTROPY, EVAL_SEED_ENTROPY])
        shape = [2 * x for x in agent.policy_sharded.mesh.devices.shape]

        def seed():
            return jax.device_put(rng.integers(0, np.iinfo(np.uint32).max, shape, np.uint32),
                                  agent.policy_sharded)

        envs = []
        for i in range(n):
            env = make_embodied_env(self.embodied, [self.args.seed, EVAL_ENTROPY, i], i, None)
            envs.append(self.refmain.wrap_env(env, self.config))
        carry = agent._init_policy(params, seed(), n)   # positional, as jaxagent.py:98
        obs = [env.step({"action": np.int32(0), "reset": np.bool_(True)}) for env in envs]
        returns = np.zeros(n, np.float64)
        lengths = np.zeros(n, np.int64)
        done = np.zeros(n, bool)
        for _ in range(MAX_EVAL_STEPS):
            batch = {k: np.stack([o[k] for o in obs]) for k in obs[0]}
            acts, _, carry = agent._policy(params, agent._filter_data(batch), carry, seed(),
                                           "eval")
            action = np.asarray(acts["action"])
            for i in range(n):
                if done[i]:
                    continue
                o = envs[i].step({"action": action[i], "reset": np.bool_(False)})
                obs[i] = o
                returns[i] += float(o["reward"])
                lengths[i] += 1
                done[i] = bool(o["is_last"])
            if done.all():
                break
        for env in envs:
            env.close()
        t1 = time.time()
        self.eval_intervals.append((t0, t1))
        if self.eval_first_s is None:
            self.eval_first_s = t1 - t0
        return {"returns": [float(r) for r in returns], "lengths": [int(x) for x in lengths]}

    # ---- progress and timing ----------------------------------------------------------
    def progress(self, step: int, force: bool = False) -> None:
        """One stderr line every ~20 s: rows, updates, updates per second, ETA."""
        now = time.time()
        t_prev, s_prev, u_prev = self._last_print
        if not force and now - t_prev < 20:
            return
        updates = int(self.agent.updates) if self.agent is not None else 0
        rate = (updates - u_prev) / max(now - t_prev, 1e-9)
        remaining = self.total_updates - updates
        if updates == 0:
            eta = "after the gate"
        elif remaining <= 0:
            eta = "0m00s"
        else:
            eta = schedule.format_duration(remaining / rate) if rate > 0 else "?"
        _progress(f"[reference s{self.args.seed}] rows {step}/{self.args.rows} updates "
                  f"{updates}/{self.total_updates} ({rate:.2f} upd/s) ETA {eta}")
        self._last_print = (now, step, updates)

    def timing(self, loop_s: float) -> dict:
        """Wall-clock figures (seconds) for ``timing.json``."""
        ends = self.update_ends
        updates = len(ends)
        s_per_update = None
        after_warmup = None
        if updates >= 2:
            span = ends[-1] - ends[0]
            span -= sum(b - a for a, b in self.eval_intervals if a >= ends[0] and b <= ends[-1])
            s_per_update = span / (updates - 1)
            warm = min(20, updates // 5)
            if updates - warm >= 2:
                span = ends[-1] - ends[warm]
                span -= sum(b - a for a, b in self.eval_intervals
                            if a >= ends[warm] and b <= ends[-1])
                after_warmup = span / (updates - 1 - warm)
        return {
            "build_compile_s": self.build_s,
            "first_update_row": self.first_update_row,
            "updates": updates,
            "s_per_update_loop": s_per_update,
            "s_per_update_loop_after_warmup": after_warmup,
            "eval_s_total": sum(b - a for a, b in self.eval_intervals),
            "eval_first_s": self.eval_first_s,
            "evaluations": len(self.eval_intervals),
            "flush_episodes": self.flush_episodes,
            "loop_s": loop_s,
            "total_s": time.time() - self.t_start,
        }


class AgentProxy:
    """The agent ``embodied.run.train`` receives: the stock agent with two read-only hooks.

    Every attribute is the wrapped agent's; ``policy`` runs
    :meth:`Instrument.before_policy` first and ``train`` passes its metrics to
    :meth:`Instrument.after_train` after; both return exactly what the agent returns.
    """

    def __init__(self, agent, inst: Instrument):
        object.__setattr__(self, "_agent", agent)
        object.__setattr__(self, "_inst", inst)

    def __getattr__(self, name):
        return getattr(self._agent, name)

    def policy(self, obs, carry, mode="train"):
        """:meth:`Instrument.before_policy`, then the agent's ``policy`` unchanged."""
        self._inst.before_policy()
        return self._agent.policy(obs, carry, mode=mode)

    def train(self, data, carry):
        """The agent's ``train``, then its metrics to :meth:`Instrument.after_train`."""
        outs, carry, mets = self._agent.train(data, carry)
        self._inst.after_train(mets)
        return outs, carry, mets


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _save_params(path: Path, agent) -> None:
    import jax

    arrays = {}
    for name, value in jax.device_get(agent.params).items():
        leaves = jax.tree_util.tree_flatten_with_path(value)[0]
        for keypath, leaf in leaves:
            arrays[name + jax.tree_util.keystr(keypath)] = np.asarray(leaf)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, path)


def _remove_stock_checkpoint(logdir: Path) -> None:
    """Delete :data:`STOCK_CHECKPOINT` (and its ``.tmp``) from ``logdir`` if present."""
    for name in (STOCK_CHECKPOINT, STOCK_CHECKPOINT + ".tmp"):
        (logdir / name).unlink(missing_ok=True)


class PlatformError(RuntimeError):
    """jax is not what the run asks for: another backend than ``platform``, or another
    version than the environment's shims are for; one-line message."""


def prepare_jax(args: RunArgs) -> dict:
    """Import jax, apply the environment's shims and the matmul precision, check the backend.

    Called before the reference (and tensorflow-probability) is imported.

    Returns:
      ``run.json``'s ``environment``: ``{"jax", "version_set", "lock", "interpreter",
      "off_lock", "shims", "threefry_partitionable", "platform", "precision", "backend",
      "device_kind", "matmul_precision"}``: the environment asked for (``jax``) with its
      version set and lock, ``venv`` or ``given`` (``$DREAMER_PARITY_REF_INTERPRETER``),
      the lock's packages whose installed versions differ from it, the shims applied,
      ``jax_threefry_partitionable``, the platform and precision asked for, and what jax
      reports: ``jax.default_backend()``, the first device's kind and
      ``jax_default_matmul_precision`` (None: jax's default).

    Raises:
      PlatformError: the backend is not ``args.platform``, or the environment's shims do
        not fit the installed jax.
    """
    import jax

    try:
        applied = shims.apply(args.jax)
    except ValueError as e:
        raise PlatformError(str(e)) from None
    if args.precision != "default":
        jax.config.update("jax_default_matmul_precision", args.precision)
    backend = jax.default_backend()
    if backend != args.platform:
        raise PlatformError(f"reference.platform {args.platform}: jax runs on {backend} "
                            f"(JAX_PLATFORMS={os.environ.get('JAX_PLATFORMS', '')!r})")
    env = ref_setup.environment(args.jax)
    pins = ref_setup.read_lock(ref_setup.lock_file(args.jax))
    diff = ref_setup.lock_differences(pins, ref_setup.installed_here(pins))
    precision = jax.config.jax_default_matmul_precision
    return {
        "jax": args.jax, "version_set": env["version_set"], "lock": env["lock"],
        "interpreter": "given" if os.environ.get(ref_setup.INTERPRETER_ENV) else "venv",
        "off_lock": diff["missing"] + diff["pinned"] + diff["off_lock"],
        "shims": applied, "threefry_partitionable": shims.threefry_partitionable(),
        "platform": args.platform, "precision": args.precision, "backend": backend,
        "device_kind": jax.devices()[0].device_kind,
        "matmul_precision": None if precision is None else str(precision),
    }


def run(args: RunArgs) -> int:
    """Run one seed (see module doc); returns the exit status (0 ok, 1 failed).

    Raises:
      FileExistsError: ``out`` already holds ``DONE.json`` or a ``logdir`` (the stock
        ``Checkpoint.load_or_save`` would resume from it).
      PlatformError: jax runs on another backend than ``platform``, or is another version
        than the environment's (nothing written).
    """
    out = args.out.resolve()
    args.out = out
    if (out / records.DONE).exists() or (out / LOGDIR).exists():
        raise FileExistsError(f"{out} already holds a run; the runner needs a fresh directory")
    environment = prepare_jax(args)
    out.mkdir(parents=True, exist_ok=True)
    os.chdir(out)

    import embodied
    import dreamerv3
    import dreamerv3.main as refmain
    from dreamerv3 import agent as agt

    checkout = Path(embodied.__file__).resolve().parents[1]
    replaced = patches.apply(args.decode, args.sampler, args.seed)

    ovr = overrides(args.seed, args.profile, args.rows, platform=args.platform)
    config = embodied.Config(agt.Agent.configs["defaults"]).update(ovr)
    # As dreamerv3/main.py:35-47 (stock replay lengths and loop arguments).
    config = config.update(
        replay_length=config.replay_length or config.batch_length,
        replay_length_eval=config.replay_length_eval or config.batch_length_eval)
    run_args = embodied.Config(
        **config.run, logdir=config.logdir, batch_size=config.batch_size,
        batch_length=config.batch_length, batch_length_eval=config.batch_length_eval,
        replay_length=config.replay_length, replay_length_eval=config.replay_length_eval,
        replay_context=config.replay_context)
    logdir = embodied.Path(run_args.logdir)
    logdir.mkdir()
    config.save(logdir / "config.yaml")
    embodied.timer.global_timer.enabled = run_args.timer  # as dreamerv3/main.py:56-59

    roots = {"reference-checkout": checkout, "repo": provenance.REPO_ROOT}
    run_json = {
        "side": "reference", "seed": args.seed,
        "config": {**args.params_subset(), "seed": args.seed,
                   "resolved": _to_plain(dict(config)), "overrides": ovr},
        "args": {**args.params_subset(), "seed": args.seed, "out": "."},
        "patches": {"decode": args.decode, "sampler": args.sampler, "replaced": replaced},
        "imported_from": {
            "embodied": provenance.relative_to_roots(embodied.__file__, roots),
            "dreamerv3.agent": provenance.relative_to_roots(agt.__file__, roots),
            "dreamerv3": provenance.relative_to_roots(dreamerv3.__file__, roots),
        },
        "environment": environment,
        "provenance": {**provenance.collect(),
                       "reference": ref_setup.checkout_state(checkout)},
    }
    records.write_json(out / "run.json", run_json)

    inst = Instrument(args, embodied, refmain, config)
    stock_driver = embodied.Driver

    class RecordingDriver(stock_driver):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            inst.driver = self

    embodied.Driver = RecordingDriver
    t0 = time.time()
    status, reason = "ok", None
    try:
        embodied.run.train(
            inst.make_agent, bind(refmain.make_replay, config, "replay"),
            lambda index: inst.make_env(index), inst.make_logger, run_args)
        problems = []
        if int(inst.agent.updates) != inst.total_updates:
            problems.append(f"updates {int(inst.agent.updates)} != schedule "
                            f"{inst.total_updates}")
        if [r["rows"] for r in inst.records] != params_mod.eval_points(
                {"rows": args.rows, "eval_every": args.eval_every}):
            problems.append(f"record rows {[r['rows'] for r in inst.records]}")
        if problems:
            status, reason = "failed", "; ".join(problems)
    except Exception as e:  # the run is recorded as failed, with the reason
        traceback.print_exc()
        status, reason = "failed", f"{type(e).__name__}: {e}"[:1000]
    finally:
        embodied.Driver = stock_driver
    loop_s = time.time() - t0
    _remove_stock_checkpoint(out / LOGDIR)
    inst.write_episodes()
    if inst.agent is not None:
        try:
            _save_params(out / "params.npz", inst.agent)
        except Exception as e:
            traceback.print_exc()
            if status == "ok":
                status, reason = "failed", f"saving params.npz: {type(e).__name__}: {e}"
    records.write_json(out / "timing.json", inst.timing(loop_s))
    records.write_done(out, status, reason)
    _progress(f"[reference s{args.seed}] {status}" + (f": {reason}" if reason else "")
              + f" ({schedule.format_duration(time.time() - inst.t_start)})")
    return 0 if status == "ok" else 1


def main(argv=None) -> None:
    args = parse_args(argv)
    try:
        code = run(args)
    except (FileExistsError, PlatformError) as e:
        print(f"reference runner: error: {e}", file=sys.stderr)
        code = 2
    sys.stdout.flush()
    sys.stderr.flush()
    # The stock prefetch threads never end (RUNNING.md section 4.5): leave at once.
    os._exit(code)


if __name__ == "__main__":
    main()

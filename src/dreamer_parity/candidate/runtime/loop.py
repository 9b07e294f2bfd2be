"""The candidate's synchronous training loop: all seeds in one jitted program.

Per seed the loop state (the *carry*) holds the agent's train state, the policy carry,
16 gymnax envs and their current rows, the replay, the PRNG key, running episode sums,
the metric window (sum and finite count per train metric) and health flags.

One vector step (PROTOCOL.md 2.1, ALGORITHM.md 16, deviation D3):

1. the policy filters the 16 current rows (``is_first`` resets its state) and samples
   actions with the latest parameters;
2. the 16 rows are added to the replay with that action (zeroed on ``is_last`` rows) and
   the policy's posterior latents;
3. each env steps with its action, or, when its row was ``is_last``, resets;
4. the updates of this vector step run (``dreamer_parity.schedule.per_vector_step``; a
   per-step count array fed to the scan, a ``fori_loop`` over the traced count): each
   samples 16 windows (online queue first, then uniform), trains, writes the posteriors
   back and adds the metrics to the window.

:func:`build` returns the jitted functions ``init``, ``chunk`` (a
``lax.scan`` of vector steps) and ``point`` (evaluation, health check and the metric
window read-out, which resets the window), each mapped over the seeds by
:func:`.seedmap.over_seeds`: ``jax.vmap`` over the seed axis when a program holds several
seeds (one device), the one-seed function itself, without ``vmap``, when it holds one
(a one-seed run, or each device of a :mod:`.seedmesh` mesh, the layout on CPU).  Carry
buffers are donated; chunk shapes are fixed, so nothing recompiles between chunks.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp

from ...schedule import Schedule
from . import env as envlib
from . import evaluate as evallib
from . import replay as replaylib
from . import seedmap, seedmesh

__all__ = ["Programs", "build", "update_step", "compiler_options", "seed_keys", "metric_shapes",
           "train_step_fn", "seed_programs", "is_loss_metric", "field", "resolve_seed_batch",
           "init_compiler_options", "INIT_CPU_OPTIONS"]

EVAL_KEY_SALT = 7_000_001   # the protocol's evaluation entropy constant (PROTOCOL.md 4.2)


def is_loss_metric(name: str) -> bool:
    """Whether a train metric is a loss whose non-finite value fails the seed."""
    return name.endswith("_loss") or name == "opt_loss"


def seed_keys(seed: int) -> dict:
    """The seed's root keys: ``init`` (parameters), ``run`` (training), ``eval`` (fixed).

    Returns uint32[2] keys derived from ``jax.random.PRNGKey(seed)``.
    """
    root = jax.random.PRNGKey(seed)
    k_init, k_run = jax.random.split(root)
    return {"init": k_init, "run": k_run, "eval": jax.random.fold_in(root, EVAL_KEY_SALT)}


def _dummy_batch(cfg, s: Schedule):
    b, l = s.batch_size, s.batch_length
    return {
        "vector": jnp.zeros((b, l, cfg.obs_dim), jnp.float32),
        "reward": jnp.zeros((b, l), jnp.float32),
        "is_first": jnp.zeros((b, l), bool), "is_last": jnp.zeros((b, l), bool),
        "is_terminal": jnp.zeros((b, l), bool), "action": jnp.zeros((b, l), jnp.int32),
        "deter": jnp.zeros((b, l, cfg.deter), jnp.float32),
        "stoch": jnp.zeros((b, l, cfg.stoch), jnp.int32),
    }


@functools.lru_cache(maxsize=None)
def train_step_fn(agent, cfg) -> Callable:
    """``agent.train_step`` with ``cfg`` bound, under one ``jax.jit`` (memoised per agent
    module and config).

    :func:`metric_shapes` and the chunk program both call this object, so jax traces the
    train step once per process and shape (jit's trace cache) instead of twice; inside the
    chunk it is a nested jit, which XLA inlines, so the compiled program does not change.
    Call as ``fn(state, batch, key=...)`` (the loop passes nothing else).
    """
    return jax.jit(functools.partial(agent.train_step, cfg))


def metric_shapes(agent, cfg, s: Schedule = Schedule()) -> dict:
    """The train metrics' names (sorted) -> ShapeDtypeStruct, from ``jax.eval_shape``.

    Raises ValueError when a metric is not a scalar.
    """
    def f(key):
        state = agent.init(key, cfg)
        _, _, metrics = train_step_fn(agent, cfg)(state, _dummy_batch(cfg, s), key=key)
        return metrics
    shapes = jax.eval_shape(f, jax.random.PRNGKey(0))
    bad = [k for k, v in shapes.items() if v.shape != ()]
    if bad:
        raise ValueError(f"train metrics must be scalars; not: {bad}")
    return dict(sorted(shapes.items()))


@dataclass
class Programs:
    """The jitted programs of one run and their static settings.

    ``init(keys)`` -> carry (keys: dict of uint32[seeds, 2] from :func:`seed_keys`);
    ``chunk(carry, counts)`` -> ``(carry, episodes)`` with ``counts`` i32[chunk_steps]
    (updates after each vector step) and ``episodes`` a dict of ``[seeds, chunk_steps,
    num_envs]`` arrays (``ended``, ``length``, ``score``, ``terminal``; the row index of
    an ended episode is the vector step's index + 1);
    ``point(carry)`` -> ``(carry, report)`` (see :func:`_point`).
    ``mesh``: None (one device), or the :func:`.seedmesh.seed_mesh` the programs are
    sharded over; then keys and carry are laid along its seed axis
    (:func:`.seedmesh.put_seeds`) and ``counts`` replicated
    (:func:`.seedmesh.put_replicated`).
    """

    init: Callable
    chunk: Callable
    point: Callable
    metric_names: tuple
    capacity: int
    chunk_steps: int
    mesh: object = None


def _init_seed(agent, cfg, s: Schedule, capacity: int, names, keys):
    state = agent.init(keys["init"], cfg)
    k_env, k_run = jax.random.split(keys["run"])
    env_state, row = envlib.reset_rows(jax.random.split(k_env, s.num_envs))
    n = s.num_envs
    return {
        "agent": state,
        "policy": agent.initial_carry(cfg, n),
        "env": env_state,
        "row": row,
        "ep_score": jnp.zeros((n,), jnp.float32),
        "ep_length": jnp.zeros((n,), jnp.int32),
        "replay": replaylib.init(n, capacity, cfg.deter, cfg.stoch, cfg.obs_dim),
        "step": jnp.zeros((), jnp.int32),
        "updates": jnp.zeros((), jnp.int32),
        "key": k_run,
        "eval_key": keys["eval"],
        "msum": {k: jnp.zeros((), jnp.float32) for k in names},
        "mcount": {k: jnp.zeros((), jnp.int32) for k in names},
        "health": {"loss_nonfinite": jnp.zeros((), jnp.int32),
                   "actions_ok": jnp.ones((), bool), "latents_finite": jnp.ones((), bool)},
    }


def update_step(agent, cfg, s: Schedule, state, replay, n, key, seed_batch=None):
    """One update of one seed: sample windows, train, write the posteriors back.

    Args:
      state: the agent's train state; replay: the replay (:mod:`.replay`);
      n: rows per env stored so far (int32, >= 65); key: PRNG key of this update;
      seed_batch: how the seed vmap runs the train step (:func:`.seedmap.per_seed`).

    Returns:
      ``(state, replay, metrics)``.
    """
    k_s, k_t = jax.random.split(key)
    replay, worker, start, _ = replaylib.sample_starts(replay, n, k_s, s.batch_size)
    batch = replaylib.gather(replay, worker, start)
    train = seedmap.per_seed(lambda st, b, k: train_step_fn(agent, cfg)(st, b, key=k),
                             seed_batch)
    state, outs, metrics = train(state, batch, k_t)
    replay = replaylib.write_back(replay, worker, start, outs)
    return state, replay, metrics


def _vector_step(agent, cfg, s: Schedule, seed_batch, carry, count):
    key, k_pol, k_reset, k_upd = jax.random.split(carry["key"], 4)
    row = carry["row"]
    state = carry["agent"]
    action, pcarry, latent = agent.policy_step(
        cfg, field(state, "params"), carry["policy"], row["vector"], row["is_first"], key=k_pol)
    action = action.astype(jnp.int32)
    health = dict(carry["health"])
    health["actions_ok"] &= jnp.all((action >= 0) & (action < cfg.num_actions))
    health["latents_finite"] &= jnp.all(jnp.isfinite(latent["deter"]))
    stored = dict(row, action=jnp.where(row["is_last"], 0, action),
                  deter=latent["deter"], stoch=latent["stoch"])
    replay = replaylib.add(carry["replay"], carry["step"], stored)
    env_state, nrow, stepped = envlib.step_rows(
        carry["env"], row, action, jax.random.split(k_reset, s.num_envs))
    score = jnp.where(stepped, carry["ep_score"] + nrow["reward"], 0.0)
    length = jnp.where(stepped, carry["ep_length"] + 1, 0)
    episodes = {"ended": stepped & nrow["is_last"], "length": length, "score": score,
                "terminal": nrow["is_terminal"]}
    n = carry["step"] + 1

    def update(i, c):
        state, replay, msum, mcount, bad, k = c
        k, k_u = jax.random.split(k)
        state, replay, metrics = update_step(agent, cfg, s, state, replay, n, k_u, seed_batch)
        msum, mcount = dict(msum), dict(mcount)
        loss_ok = jnp.ones((), bool)
        for name in msum:
            v = jnp.asarray(metrics[name], jnp.float32)
            fin = jnp.isfinite(v)
            msum[name] = msum[name] + jnp.where(fin, v, 0.0)
            mcount[name] = mcount[name] + fin.astype(jnp.int32)
            if is_loss_metric(name):
                loss_ok &= fin
        bad = bad + (~loss_ok).astype(jnp.int32)
        return state, replay, msum, mcount, bad, k

    c = (state, replay, carry["msum"], carry["mcount"], health["loss_nonfinite"], k_upd)
    state, replay, msum, mcount, bad, _ = jax.lax.fori_loop(0, count, update, c)
    health["loss_nonfinite"] = bad
    new = dict(carry, agent=state, policy=pcarry, env=env_state, row=nrow, ep_score=score,
               ep_length=length, replay=replay, step=n, updates=carry["updates"] + count,
               key=key, msum=msum, mcount=mcount, health=health)
    return new, episodes


def field(state, name):
    """``state[name]`` for a dict train state, else ``getattr(state, name)``."""
    return state[name] if isinstance(state, dict) else getattr(state, name)


def _all_finite(tree):
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
              if jnp.issubdtype(x.dtype, jnp.floating)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.ones((), bool)


def _point(agent, cfg, episodes: int, carry):
    """Evaluation point of one seed: evaluate, read and reset the metric window.

    Returns ``(carry, report)``; report: ``eval`` (see :func:`evaluate.evaluate`),
    ``msum``/``mcount`` (the window), ``retnorm`` {lo, hi}, ``updates``, ``step``,
    ``params_finite``, ``health`` (training flags since the start).
    """
    state = carry["agent"]
    ev = evallib.evaluate(agent, cfg, field(state, "params"), carry["eval_key"], episodes)
    retnorm = field(state, "retnorm")
    report = {
        "eval": ev,
        "msum": carry["msum"], "mcount": carry["mcount"],
        "retnorm": {"lo": jnp.asarray(retnorm["lo"], jnp.float32),
                    "hi": jnp.asarray(retnorm["hi"], jnp.float32)},
        "updates": carry["updates"], "step": carry["step"],
        "params_finite": _all_finite(field(state, "params")),
        "health": carry["health"],
    }
    new = dict(carry,
               msum=jax.tree.map(jnp.zeros_like, carry["msum"]),
               mcount=jax.tree.map(jnp.zeros_like, carry["mcount"]))
    return new, report


def compiler_options(agent, backend: str | None = None) -> dict | None:
    """The agent's XLA:CPU compiler options (``agent.XLA_CPU_OPTIONS``) on the CPU backend,
    else None (GPU, or an agent without them).  ``backend``: the backend the programs are
    compiled for (default ``jax.default_backend()``)."""
    opts = getattr(agent, "XLA_CPU_OPTIONS", None)
    return dict(opts) if opts and (backend or jax.default_backend()) == "cpu" else None


#: XLA:CPU options of the ``init`` program: LLVM -O0.  It runs once per run, and compiles
#: much faster at -O0 than at the default level (docs/PERFORMANCE.md, "Levers measured");
#: its values differ from an -O2 build by float32 rounding of the truncated-normal
#: transform only.
INIT_CPU_OPTIONS = {"xla_backend_optimization_level": 0}


def init_compiler_options(backend: str | None = None) -> dict | None:
    """:data:`INIT_CPU_OPTIONS` on the CPU backend (``backend``, default
    ``jax.default_backend()``), else None."""
    return dict(INIT_CPU_OPTIONS) if (backend or jax.default_backend()) == "cpu" else None


def seed_programs(agent, cfg, capacity: int, chunk_steps: int, eval_episodes: int,
                  s: Schedule = Schedule(), seed_batch="auto") -> tuple[dict, tuple]:
    """The functions of a run mapped over seeds, not yet jitted, and the metric names.

    Each is :func:`.seedmap.over_seeds` of the one-seed function: ``jax.vmap`` over the
    leading seed axis, or the one-seed function itself when that axis has size 1 (one
    seed per program, as on each device of a :mod:`.seedmesh` mesh).

    Returns ``({"init": f, "chunk": f, "point": f}, metric_names)``; the arguments are
    those of :func:`build`, which jits them.  :mod:`.program_store` exports them instead.
    """
    seed_batch = resolve_seed_batch(seed_batch)
    names = tuple(metric_shapes(agent, cfg, s))

    def init_seed(keys):
        return _init_seed(agent, cfg, s, capacity, names, keys)

    def chunk_seed(carry, counts):
        return jax.lax.scan(lambda c, n: _vector_step(agent, cfg, s, seed_batch, c, n), carry,
                            counts)

    def point_seed(carry):
        return _point(agent, cfg, eval_episodes, carry)

    fns = {"init": seedmap.over_seeds(init_seed),
           "chunk": seedmap.over_seeds(chunk_seed, in_axes=(0, None)),
           "point": seedmap.over_seeds(point_seed)}
    return fns, names


def resolve_seed_batch(seed_batch="auto", backend: str | None = None) -> int | None:
    """``"auto"`` -> :func:`.seedmap.default_seed_batch` of ``backend`` (default
    ``jax.default_backend()``: 1 on CPU, all seeds batched elsewhere); otherwise the value
    checked by :func:`.seedmap.check_seed_batch`."""
    if seed_batch == "auto":
        return seedmap.default_seed_batch(backend)
    return seedmap.check_seed_batch(seed_batch)


def build(agent, cfg, capacity: int, chunk_steps: int, eval_episodes: int,
          s: Schedule = Schedule(), seed_batch="auto", mesh=None) -> Programs:
    """Build the jitted programs of a run, mapped over seeds (:func:`seed_programs`).

    Args:
      agent: the agent module (``init``, ``initial_carry``, ``policy_step``,
        ``train_step``; docs/CANDIDATE_AGENT.md).
      cfg: its config (``deter``, ``stoch``, ``obs_dim``, ``num_actions`` are read).
      capacity: replay rows per env (``rows / num_envs`` of the run).
      chunk_steps: vector steps per ``chunk`` call (static).
      eval_episodes: evaluation envs per point (static).
      s: the replay/ratio settings.
      seed_batch: seeds whose train steps run batched together (:func:`resolve_seed_batch`;
        ``"auto"``: one seed at a time on CPU, all at once elsewhere).
      mesh: None, or a :func:`.seedmesh.seed_mesh`: the programs then run each seed on
        its own device (:func:`.seedmesh.shard_seeds`).

    Returns:
      :class:`Programs`.  ``chunk`` and ``point`` donate the carry and are compiled with
      :func:`compiler_options`; ``init`` with :func:`init_compiler_options`.
    """
    fns, names = seed_programs(agent, cfg, capacity, chunk_steps, eval_episodes, s, seed_batch)
    fns = seedmesh.shard_seeds(fns, mesh)
    opts = compiler_options(agent)
    return Programs(
        init=jax.jit(fns["init"], compiler_options=init_compiler_options()),
        chunk=jax.jit(fns["chunk"], donate_argnums=0, compiler_options=opts),
        point=jax.jit(fns["point"], donate_argnums=0, compiler_options=opts),
        metric_names=names, capacity=capacity, chunk_steps=chunk_steps, mesh=mesh)

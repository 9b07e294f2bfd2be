"""The candidate DreamerV3 agent: init, policy step and train step (pure JAX, float32).

Follows danijar/dreamerv3 at 29eb964 (ALGORITHM.md; agent.py:114-399 of the reference).
Everything is pure and jit/vmap-able; ``cfg`` (AgentConfig) is a static argument, e.g.
``jax.jit(train_step, static_argnums=0)`` and ``jax.vmap(partial(train_step, cfg))`` over
(state, batch, key) for several seeds.

Random draws.  Every draw can be supplied from outside as explicit one-hot samples
(``draws``), so a parity test can feed the reference's tfp draws; draws that are not
supplied are sampled from ``key`` (inverse-CDF sampling of uniforms).

TrainState (a dict):
    params       {enc, dyn, dec, rew, con, actor, critic} -> layer -> arrays
    opt_state    the optax state of :func:`optim.make` (one chain over all params)
    slow_critic  critic-shaped params (EMA copy; excluded from the gradient)
    retnorm      {"lo": f32[], "hi": f32[]} EMAs of the 5th/95th return percentiles
    updates      i32[] number of completed train steps (slow-critic counter)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from . import dists, heads, observe, optim, rssm, twohot
from .returns import lambda_return, replay_return, retnorm_update
from .rssm import kl_losses
from .config import LOSS_TERMS, AgentConfig, resolve
from .nets import symlog, with_transposes

__all__ = ["XLA_CPU_OPTIONS", "AgentConfig", "init", "initial_carry", "policy_step", "train_step", "param_count",
           "init_params"]

f32 = jnp.float32
i32 = jnp.int32
sg = jax.lax.stop_gradient

#: Optional XLA:CPU compiler options for jitting the train step on CPU (jax 0.10.2):
#: ``jax.jit(f, compiler_options=XLA_CPU_OPTIONS)``.  They turn off the YNNPACK fusions, which
#: fold matmuls together with softmax/SiLU chains and ran the imagination loop slower, and
#: compile with LLVM -O1, which both compiles and runs the run's chunk program faster than
#: the default -O2 (docs/PERFORMANCE.md, "Levers measured").  CPU only; do not pass them on
#: GPU.
XLA_CPU_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": "", "xla_backend_optimization_level": 1}
treemap = jax.tree_util.tree_map


# --------------------------------------------------------------------------- state

def init_params(key, cfg: AgentConfig):
    """All trained parameters: {enc, dyn, dec, rew, con, actor, critic} -> layer -> arrays."""
    k_dyn, k_heads = jax.random.split(key)
    params = heads.init_params(k_heads, cfg)
    params["dyn"] = rssm.init_params(k_dyn, cfg)
    return params


def init(key, cfg: AgentConfig):
    """Fresh TrainState (see module doc) from a PRNG key.  The slow critic gets its own
    random init, as in the reference; it is replaced by an exact copy of the critic at the
    end of the first train step (jaxutils.py:737-762)."""
    k_params, k_slow = jax.random.split(key)
    params = init_params(k_params, cfg)
    slow = heads.init_params(k_slow, cfg)["critic"]
    return {
        "params": params,
        "opt_state": optim.make(cfg).init(params),
        "slow_critic": slow,
        "retnorm": {"lo": jnp.zeros((), f32), "hi": jnp.zeros((), f32)},
        "updates": jnp.zeros((), i32),
    }


def param_count(params) -> int:
    """Number of scalars in a params pytree (637,381 at the full profile)."""
    return int(sum(np.prod(x.shape) for x in jax.tree_util.tree_leaves(params)))


def initial_carry(cfg: AgentConfig, n: int):
    """Zero policy carry for ``n`` envs: deter f32[n,D], stoch f32[n,S,K] (all zeros, not a
    valid one-hot, nets.py:39-45), prev_action i32[n] (agent.py:136-140)."""
    return {"deter": jnp.zeros((n, cfg.deter), f32),
            "stoch": jnp.zeros((n, cfg.stoch, cfg.classes), f32),
            "prev_action": jnp.zeros((n,), i32)}


# --------------------------------------------------------------------------- helpers

def _onehot_draw(logits, noise):
    """One-hot value f32[..., K] of a draw without straight-through gradient."""
    if noise.shape == logits.shape:
        return noise.astype(f32)
    return dists.sample_onehot(logits, noise)


def _tensorstats(x, prefix):
    """mean/std/mag/min/max of a float tensor (jaxutils.py:51-67; 'dist' omitted)."""
    x = x.astype(f32)
    return {f"{prefix}/mean": x.mean(), f"{prefix}/std": x.std(),
            f"{prefix}/mag": jnp.abs(x).mean(), f"{prefix}/min": x.min(),
            f"{prefix}/max": x.max()}


def _flat(stoch):
    return stoch.reshape(stoch.shape[:-2] + (-1,))


def _noise(name, shape_u, shape_onehot, key, draws):
    """Supplied one-hot draw (checked against ``shape_onehot``) or uniforms of ``shape_u``."""
    if draws is not None and name in draws:
        d = jnp.asarray(draws[name], f32)
        if d.shape != shape_onehot:
            raise ValueError(f"draws[{name!r}]: expected shape {shape_onehot}, got {d.shape}")
        return d
    if key is None:
        raise ValueError(f"draws[{name!r}] is missing and no key was given")
    return jax.random.uniform(key, shape_u, f32)


_BATCH_KEYS = ("vector", "reward", "is_first", "is_last", "is_terminal", "action", "deter", "stoch")


def _check_batch(cfg, batch):
    missing = [k for k in _BATCH_KEYS if k not in batch]
    if missing:
        raise ValueError(f"train_step: batch lacks keys {missing}")
    B, L = batch["reward"].shape
    if L < 3:
        raise ValueError(f"train_step: batch length {L} < 3 (1 context row + >= 2 trained rows)")
    want = {"vector": (B, L, cfg.obs_dim), "reward": (B, L), "is_first": (B, L),
            "is_last": (B, L), "is_terminal": (B, L), "action": (B, L),
            "deter": (B, L, cfg.deter), "stoch": (B, L, cfg.stoch)}
    for k, shape in want.items():
        if tuple(batch[k].shape) != shape:
            raise ValueError(f"train_step: batch[{k!r}] has shape {tuple(batch[k].shape)}, "
                             f"expected {shape}")
    return B, L


# --------------------------------------------------------------------------- policy

def policy_step(cfg: AgentConfig, params, carry, obs, is_first, key=None, draws=None):
    """One policy step for n envs (reference agent.py:142-164, jaxagent.py:117-174).

    obs f32[n, obs_dim], is_first bool[n], carry from :func:`initial_carry` or a previous
    call.  ``params`` is the full params dict (only enc, dyn, actor are read).
    draws (optional): {"post": f32[n,S,K] one-hot, "action": f32[n,A] one-hot}; missing
    ones are sampled from ``key``.
    Returns (action i32[n], new carry, latent {"deter": f32[n,D], "stoch": i32[n,S]}).
    Raises ValueError on a bad shape or when a draw is missing and key is None.
    """
    n = obs.shape[0]
    if obs.shape != (n, cfg.obs_dim) or is_first.shape != (n,):
        raise ValueError(f"policy_step: obs {obs.shape} / is_first {is_first.shape} do not fit "
                         f"(n, {cfg.obs_dim}) / (n,)")
    keys = jax.random.split(key) if key is not None else (None, None)
    S, K, A = cfg.stoch, cfg.classes, cfg.num_actions
    n_post = _noise("post", (n, S), (n, S, K), keys[0], draws)
    n_act = _noise("action", (n,), (n, A), keys[1], draws)
    embed = heads.encode(params["enc"], cfg, obs)
    prev = jax.nn.one_hot(carry["prev_action"], A, dtype=f32)
    xa, ea = rssm.observe_inputs(params["dyn"], cfg, prev, embed, is_first)
    deter, stoch, _ = rssm.observe_step(params["dyn"], cfg, carry["deter"], carry["stoch"], xa,
                                        ea, is_first, n_post)
    logits = heads.actor_logits(params["actor"], cfg, deter, _flat(stoch))
    act = _onehot_draw(logits, n_act)
    action = jnp.argmax(act, -1).astype(i32)
    stoch = sg(stoch)
    new_carry = {"deter": deter, "stoch": stoch, "prev_action": action}
    latent = {"deter": deter, "stoch": jnp.argmax(stoch, -1).astype(i32)}
    return action, new_carry, latent


# --------------------------------------------------------------------------- train

def _loss(params, cfg, slow, retnorm, batch, noise, bins, internals=False):
    """Total loss and aux (metrics, new retnorm, replay latents).  See train_step."""
    B, L = batch["reward"].shape
    T, H = L - 1, cfg.imag_length
    N = B * T
    D, S, K, A = cfg.deter, cfg.stoch, cfg.classes, cfg.num_actions
    lam = cfg.return_lambda
    scales = cfg.loss_scales
    index = twohot.index_form(cfg.twohot_index)   # how two-hot targets find their bins
    # The heads' kernels with their stored transposes, for faster data gradients
    # (nets.with_transposes; the values and gradients are the same products).
    params = {**params, **{k: with_transposes(params[k])
                           for k in ("enc", "dec", "rew", "con", "actor", "critic")}}

    # Replay context (agent.py:172-183): row 0 gives the previous latent and action.
    deter0 = batch["deter"][:, 0].astype(f32)
    stoch0 = jax.nn.one_hot(batch["stoch"][:, 0], K, dtype=f32)
    prevacts = jax.nn.one_hot(batch["action"][:, :T], A, dtype=f32)     # (B,T,A): a_{t-1}
    obs = batch["vector"][:, 1:].astype(f32)
    reward = batch["reward"][:, 1:].astype(f32)
    is_first = batch["is_first"][:, 1:]
    is_last = batch["is_last"][:, 1:]
    is_terminal = batch["is_terminal"][:, 1:]
    cont = 1 - is_terminal.astype(f32)

    # World model on replay (agent.py:225-249).
    embed = heads.encode(params["enc"], cfg, obs)                       # (B,T,E)

    # The terms that do not depend on the recurrent state (the previous action's and the
    # embedding's) are computed for all rows before the scan (rssm.observe_inputs).
    xa, ea = rssm.observe_inputs(params["dyn"], cfg, prevacts, embed, is_first)
    # The kernels' transposes, made once for the scan's backward pass (rssm.observe_transposes).
    wt = rssm.observe_transposes(params["dyn"], cfg)
    # The kernel slices the step multiplies by, also made once: their gradients are then
    # accumulated in the backward loop at the slices' size (rssm.observe_slices).
    pd = rssm.observe_slices(params["dyn"], cfg)

    tm = lambda x: jnp.swapaxes(x, 0, 1)
    deter, stoch, post = observe.observe(pd, cfg, deter0, stoch0, tm(xa), tm(ea), tm(is_first),
                                         noise["post"], wt)
    deter, stoch, post = tm(deter), tm(stoch), tm(post)                 # (B,T,...)
    stoch_flat = _flat(stoch)

    pred = heads.decode(params["dec"], cfg, deter, stoch_flat)
    dist2 = (pred - symlog(obs)) ** 2
    dist2 = jnp.where(dist2 < 1e-8, 0, dist2)
    losses = {"vector": dist2.sum(-1)}
    rew_l = heads.rew_logits(params["rew"], cfg, deter, stoch_flat)
    losses["reward"] = -twohot.log_prob(rew_l, reward, bins, index)
    con_l = heads.con_logit(params["con"], cfg, deter, stoch_flat)
    losses["cont"] = -dists.bernoulli_log_prob(con_l, cont * (1 - 1 / cfg.horizon))
    prior = rssm.prior_logits(params["dyn"], cfg, deter)
    losses["dyn"], losses["rep"] = kl_losses(post, prior, cfg.free_nats)

    # Imagination from every posterior state (agent.py:251-282) and its annotation
    # (agent.py:284-301).  No gradient flows into the world model here.  The 15 steps are
    # unrolled.  The actor runs on each imagined row as soon as it exists: its logits both
    # sample the row's action (through stop_gradient) and enter the actor loss.  The other
    # heads read the rows in groups of ``cfg.head_rows`` (a speed setting; the products are
    # the same, and the heads' weight gradients are summed over the groups, so another
    # value rounds them differently): on the 2-core CPU, stacking all H+1 rows (33 MB of deter alone) and passing
    # over (H+1, N, bins) arrays was slower (docs/PERFORMANCE.md; the cause was not measured).  The
    # first layers of the heads without gradient (reward, continue, slow critic) are one
    # matmul per group.
    sp = sg(params)
    mean = lambda logits: twohot.mean(logits, bins, cfg.decode)
    d = sg(deter).reshape(N, D)
    s = sg(stoch).reshape(N, S, K)
    ds, ss, actor_ls, acts = [], [], [], []
    for h in range(H + 1):
        ds.append(d)
        ss.append(_flat(s))
        actor_ls.append(heads.actor_logits(params["actor"], cfg, d, ss[-1]))   # (N, A)
        acts.append(_onehot_draw(sg(actor_ls[-1]), noise["imag_action"][h]))
        if h < H:
            d = rssm.gru(sp["dyn"], cfg, d, s, acts[-1])
            s = _onehot_draw(rssm.prior_logits(sp["dyn"], cfg, d), noise["imag_stoch"][h])
    rews, cons = [reward.reshape(1, N)], [cont.reshape(1, N)]
    vals, slowvals, critic_ls, rew_ls = [], [], [], []
    groups = [(lo, min(lo + cfg.head_rows, H + 1)) for lo in range(0, H + 1, cfg.head_rows)]
    for lo, hi in groups:
        gd, gs = jnp.stack(ds[lo:hi], 0), jnp.stack(ss[lo:hi], 0)      # (G, N, D), (G, N, S*K)
        r0 = 1 if lo == 0 else 0                   # the reward and continue of rows 1..H
        ns = min(hi, H) - lo                       # the slow critic of rows 0..H-1
        nograd = ([sp["rew"]["h0"], sp["con"]["h0"]] if hi - lo > r0 else []) + (
            [slow["h0"]] if ns > 0 else [])
        first = heads.first_layers(nograd, gd, gs)
        if hi - lo > r0:
            r_l = heads.out_logits(sp["rew"], heads.hidden_rest(
                sp["rew"], first[0][r0:], cfg.rew_layers))              # (G - r0, N, bins)
            rew_ls.append(r_l)
            rews.append(mean(r_l))
            cons.append(jax.nn.sigmoid(heads.out_logits(sp["con"], heads.hidden_rest(
                sp["con"], first[1][r0:], cfg.con_layers))[..., 0]))
        if ns > 0:
            slowvals.append(mean(heads.out_logits(slow, heads.hidden_rest(
                slow, first[-1][:ns], cfg.critic_layers))))
        critic_ls.append(heads.critic_logits(params["critic"], cfg, gd, gs))  # (G, N, bins)
        vals.append(sg(mean(critic_ls[-1])))
    rew = jnp.concatenate(rews, 0)                                      # (H+1, N)
    con = jnp.concatenate(cons, 0)
    val = jnp.concatenate(vals, 0)
    slowval = jnp.concatenate(slowvals, 0)                              # (H, N)
    acts = jnp.stack(acts, 0)                                           # (H+1, N, A)
    weight = jnp.cumprod(con, 0)
    ret = lambda_return(rew, con, val, lam)                            # (H, N)

    # Return normaliser (jaxutils.py:301-395, impl perc), updated before use.
    retnorm, roffset, rscale = retnorm_update(retnorm, ret, cfg)

    # Actor (agent.py:312-321).
    adv = (ret - val[:H]) / rscale
    actor_l = jnp.stack(actor_ls[:H], 0)                                # (H, N, A)
    logpi = dists.onehot_log_prob(actor_l, acts[:H])
    ent = dists.entropy(actor_l)
    losses["actor"] = sg(weight[:H]) * -(logpi * sg(adv) + cfg.actent * ent)

    # Critic (agent.py:323-329), group by group on the (G, N, bins) logits.
    losses["critic"] = sg(weight[:H]) * -jnp.concatenate([twohot.log_prob_pair(
        c_l[:min(hi, H) - lo], sg(ret[lo:min(hi, H)]), sg(slowval[lo:min(hi, H)]),
        cfg.slowreg, bins, index) for (lo, hi), c_l in zip(groups, critic_ls) if lo < H], 0)

    # Replay critic (agent.py:331-352): gradient into the world model.
    rc_l = heads.critic_logits(params["critic"], cfg, deter, stoch_flat)      # (B,T,bins)
    rc_slow = sg(mean(heads.critic_logits(slow, cfg, sg(deter), sg(stoch_flat))))
    boot = sg(ret[0].reshape(B, T))
    replay_ret = sg(replay_return(reward, is_terminal, is_last, boot, cfg))  # (B,T-1)
    losses["replay_critic"] = sg(1 - is_last.astype(f32))[:, :-1] * -twohot.log_prob_pair(
        rc_l[:, :-1], replay_ret, rc_slow[:, :-1], cfg.slowreg, bins, index)

    # Metrics (agent.py:354-390), means of the unscaled loss tensors.
    m = {}
    for k in LOSS_TERMS:
        m[f"{k}_loss"] = losses[k].mean()
        m[f"{k}_loss_std"] = losses[k].std()
    m.update(_tensorstats(adv, "adv"))
    m.update(_tensorstats(rew, "rew"))
    m.update(_tensorstats(weight, "weight"))
    m.update(_tensorstats(val, "val"))
    m.update(_tensorstats(ret, "ret"))
    m.update(_tensorstats((ret - roffset) / rscale, "ret_normed"))
    m.update(_tensorstats(replay_ret, "replay_ret"))
    m["td_error"] = jnp.abs(ret - val[:H]).mean()
    m["ret_rate"] = (jnp.abs(ret) > 1.0).astype(f32).mean()
    m.update(_tensorstats(jnp.argmax(acts, -1).astype(f32), "act/action"))
    m.update(_tensorstats(ent / np.log(A), "rand/action"))
    m.update(_tensorstats(ent, "ent/action"))
    m["data_rew/max"] = jnp.abs(reward).max()
    m["pred_rew/max"] = jnp.abs(rew).max()
    m["data_rew/mean"] = reward.mean()
    m["pred_rew/mean"] = rew.mean()
    m["data_rew/std"] = reward.std()
    m["pred_rew/std"] = rew.std()
    m["activation/embed"] = jnp.abs(embed).mean()
    m.update(_tensorstats(dists.entropy(prior).sum(-1), "prior_ent"))
    m.update(_tensorstats(dists.entropy(post).sum(-1), "post_ent"))

    total = sum(scales[k] * losses[k].mean() for k in LOSS_TERMS)
    outs = {"deter": deter, "stoch": jnp.argmax(stoch, -1).astype(i32)}
    if internals:
        kl_dyn, kl_rep = kl_losses(post, prior, 0.0)
        outs.update({"imag_rew": rew, "imag_val": val, "imag_rew_logits": jnp.concatenate(rew_ls, 0),
                     "imag_val_logits": jnp.concatenate(critic_ls, 0), "kl_dyn": kl_dyn, "kl_rep": kl_rep})
    return total, (m, retnorm, outs)


def train_step(cfg: AgentConfig, state, batch, key=None, draws=None, internals: bool = False):
    """One train update (reference agent.py:166-223 + jaxutils.py Optimizer/SlowUpdater).

    batch: B windows of L rows (row 0 = replay context; rows 1..L-1 = T trained rows):
        "vector" f32[B,L,obs_dim], "reward" f32[B,L], "is_first"/"is_last"/"is_terminal"
        bool[B,L], "action" i32[B,L] (action chosen after the row's obs), "deter" f32[B,L,D],
        "stoch" i32[B,L,S] (stored latents; only row 0 is read).
    draws (optional dict, any subset; the rest is sampled from ``key``):
        "post"        f32[B,T,S,K]   one-hot posterior samples of the replay rows;
        "imag_stoch"  f32[H,B*T,S,K] one-hot prior samples of imagination step 1..H;
        "imag_action" f32[H+1,B*T,A] one-hot actor samples, index 0 = start action.
        Imagination row r = b*T + t starts from the posterior of window b, trained row t.
    Returns (new state, outs, metrics): outs {"deter": f32[B,T,D], "stoch": i32[B,T,S]} are the
    posterior latents of the trained rows (replay write-back); metrics dict of f32 scalars
    under the reference's metric names (as its train step reports them).
    internals (static, default False): outs also holds "grads" (raw gradient pytree, the
    input of AGC), "imag_rew"/"imag_val" f32[H+1,B*T] (row 0 of imag_rew = replay reward),
    "imag_rew_logits" f32[H,B*T,bins], "imag_val_logits" f32[H+1,B*T,bins], and
    "kl_dyn"/"kl_rep" f32[B,T] (KL sums before the free-bits clamp), for parity tests.
    Raises ValueError (before any compute) on missing keys or wrong shapes.
    """
    B, L = _check_batch(cfg, batch)
    T, H = L - 1, cfg.imag_length
    N = B * T
    S, K, A = cfg.stoch, cfg.classes, cfg.num_actions
    keys = jax.random.split(key, 3) if key is not None else (None, None, None)
    noise = {
        "post": _noise("post", (B, T, S), (B, T, S, K), keys[0], draws),
        "imag_stoch": _noise("imag_stoch", (H, N, S), (H, N, S, K), keys[1], draws),
        "imag_action": _noise("imag_action", (H + 1, N), (H + 1, N, A), keys[2], draws),
    }
    noise["post"] = jnp.swapaxes(noise["post"], 0, 1)                  # time-major for scan
    bins = twohot.bins(cfg.bins, cfg.decode)

    def loss_fn(params):
        if internals:
            return _loss(params, cfg, state["slow_critic"], state["retnorm"], batch, noise, bins,
                         internals=True)
        return _loss(params, cfg, state["slow_critic"], state["retnorm"], batch, noise, bins)

    (loss, (metrics, retnorm, outs)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state["params"])
    norms = resolve("opt_norms", cfg.opt_norms)   # AGC's and the metrics' norms, one form
    tx = optim.make(cfg, norms)
    params, opt_state, opt_metrics = optim.apply(tx, grads, state["opt_state"], state["params"],
                                                 norms)
    metrics.update(opt_metrics)
    metrics["opt_loss"] = loss
    if internals:
        outs = {**outs, "grads": grads}

    # Slow critic (jaxutils.py:737-762): exact copy at the first update, then EMA 0.02.
    n = state["updates"]
    mix = jnp.clip(1.0 * (n == 0).astype(f32) + cfg.slow_rate * 1.0, 0, 1)
    slow = treemap(lambda s, d: mix * s + (1 - mix) * d, params["critic"], state["slow_critic"])
    new_state = {"params": params, "opt_state": opt_state, "slow_critic": slow,
                 "retnorm": retnorm, "updates": n + 1}
    return new_state, outs, metrics

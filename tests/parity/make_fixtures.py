"""Record the reference's train step for the parity tests (runs under the REFERENCE venv).

Usage (normally through ``make parity-fixtures``, i.e. ``python tests/parity/regen.py`` from
the main venv, which sets the paths and launches the reference interpreter)::

    PYTHONPATH=<checkout>:<repo>/src JAX_PLATFORMS=cpu \\
        <refvenv>/bin/python tests/parity/make_fixtures.py --out tests/fixtures/parity

What it does: builds ``dreamerv3.Agent`` (danijar/dreamerv3 at 29eb964, the checkout on
``sys.path``) with the protocol's config overrides (PROTOCOL.md section 1: float32, CPU) at
the small size :data:`SIZES` (every dimension pairwise distinct), on the CartPole port's
spaces (obs ``vector`` f32 (4,), action int32 with 2 classes), with ``opt.lr`` 1e-3 and
``opt.warmup`` 0 so that three updates move the parameters measurably.  It then calls the
compiled inner train function ``JAXAgent._train`` (jaxagent.py:222-226, 309-314) three times
on three recorded replay batches and stores, for each step, the outputs of THAT step (the
public ``JAXAgent.train`` returns the previous call's outputs, jaxagent.py:194-202, study
deviation D1; calling ``_train`` directly avoids that delay, so nothing is realigned).

Nothing in the checkout is edited.  Import-time replacements (each calls the original and
only adds a ``jax.debug.callback`` that copies a value to the host; the computation is the
same program plus host copies):

* ``jaxutils.OneHotDist.sample`` (jaxutils.py:109-113): stashes the actor's sample at the
  imagination start (``Agent.loss``, agent.py:272).
* ``jaxutils.scan`` (jaxutils.py:46-48): stashes the stacked outputs of the observe scan
  (posterior samples, nets.py:59-62) and of the imagination scan (prior and actor samples,
  agent.py:273-275).  (jax 0.4.26 drops ``jax.debug.callback`` inside ``lax.scan`` under
  ``value_and_grad``, so the draws are taken from the scans' outputs, which hold them: the
  straight-through value equals the one-hot sample exactly.)
* ``jaxutils.scale_by_agc`` (jaxutils.py:660-674): stashes the raw gradients it receives
  (the first transformation of the optimizer chain; globclip is 0).
* ``jaxutils.TwoHotDist.mean`` (jaxutils.py:226-250): stashes logits and the returned
  expectation of every call site (reward head and critics), so the tests can measure the
  pair-sum noise element-wise.
* ``nets.RSSM.loss`` (nets.py:97-110): called with the clamp disabled and the same
  ``jnp.maximum(kl, free)`` applied afterwards, stashing the raw KL values (to show that the
  fixture's KLs lie on both sides of the free-bits floor).

Stashes are only emitted for the live computation, not for ninjax's shape pre-runs
(``Context.ignore``).  The file layout is documented in :func:`write_npz` and in the
``README.md`` written next to the fixtures.

Two regimes (``--regime a|b|both``):

a. well-conditioned two-hot heads: the output layers of the reward head, critic and slow
   critic get a bias peaked on the middle bins (``max(-0.5 |j - 127|, -24)``) and a small
   random kernel, so the pair-sum expectation has no FMA noise and every tensor is compared.
b. the real start: the reference's own initial parameters (zero two-hot output layers).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import inspect
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

# Sizes of the fixture (pairwise distinct; deter divisible by blocks).
SIZES = dict(deter=48, hidden=20, stoch=6, classes=5, blocks=4, units=28,
             batch_size=3, batch_length=9, imag_length=10, bins=255)
LR = 1e-3
STEPS = 3
INIT_SEED = 0
TWOHOT_MODULES = ("rew", "critic", "slowcritic")
DRAW_SITES = ("post", "start_action", "imag_stoch", "imag_action")

_STASH: dict = collections.defaultdict(list)
_RECORD = {"on": False, "twohot": True}


# --------------------------------------------------------------------------------------
# Reference import and patches
# --------------------------------------------------------------------------------------

def _import_reference():
    """Import the reference modules (the checkout must be on sys.path)."""
    import warnings
    warnings.filterwarnings("ignore", ".*truncated to dtype int32.*")
    import embodied  # noqa: F401
    from dreamerv3 import agent as agt, jaxutils, nets, ninjax as nj
    return embodied, agt, jaxutils, nets, nj


def _live(nj) -> bool:
    """Trace-time test: inside a live ninjax computation (not a shape pre-run or init)."""
    try:
        return not nj.context().ignore
    except RuntimeError:
        return False


def _stash(site, tree):
    import jax

    def cb(value):
        if not _RECORD["on"]:
            return
        _STASH[site].append(jax.tree_util.tree_map(lambda x: np.array(x), value))
    jax.debug.callback(cb, jax.lax.stop_gradient(tree))


def _caller(names):
    for frame in inspect.stack()[2:40]:
        if frame.function in names:
            return frame
    return None


#: Source-line patterns of the TwoHotDist.mean call sites in agent.py (29eb964) -> site name.
_MEAN_SITES = (
    ("self.rew(outs).mean()", "imag_rew"),
    ("val = critic.mean()", "imag_val"),
    ("slowval = slowcritic.mean()", "imag_slowval"),
    ("replay_slowcritic.mean()", "replay_slowval"),
    ("critic.log_prob(sg(slowcritic.mean()))", "imag_slowval_reg"),
    ("critic=replay_critic.mean()", "replay_val"),
)


def install_patches():
    """Install the stashing wrappers (see module docstring); returns the reference modules."""
    import jax.numpy as jnp
    import optax
    embodied, agt, jaxutils, nets, nj = _import_reference()

    orig_sample = jaxutils.OneHotDist.sample

    def sample(self, sample_shape=(), seed=None):
        # Only the actor's draw at the imagination start (Agent.loss) is stashed here; the
        # draws inside scans are taken from the scans' stacked outputs (patched scan below),
        # because jax 0.4.26 drops debug callbacks inside lax.scan under value_and_grad.
        out = orig_sample(self, sample_shape, seed)
        if _live(nj):
            frame = _caller(("observe", "imagine", "imgstep", "loss", "policy"))
            if frame is not None and frame.function == "loss":
                _stash("start_action", out)
        return out
    jaxutils.OneHotDist.sample = sample

    orig_scan = jaxutils.scan

    def scan(fun, carry, xs, unroll=False, axis=0):
        carry, ys = orig_scan(fun, carry, xs, unroll, axis)
        if _live(nj):
            frame = _caller(("observe", "imagine", "loss"))
            if frame is not None and frame.function == "observe":
                _stash("scan_observe", ys["stoch"])          # [B, T, S, K] posterior draws
            elif frame is not None and frame.function == "loss":
                outs, acts = ys                               # [H, B*T, ...]
                _stash("scan_imagine", {"stoch": outs["stoch"], "action": acts["action"]})
        return carry, ys
    jaxutils.scan = scan

    orig_agc = jaxutils.scale_by_agc

    def scale_by_agc(clip=0.03, pmin=1e-3):
        inner = orig_agc(clip, pmin)

        def update_fn(updates, state, params=None):
            if _live(nj):
                _stash("grads", updates)
            return inner.update(updates, state, params)
        return optax.GradientTransformation(inner.init, update_fn)
    jaxutils.scale_by_agc = scale_by_agc

    orig_mean = jaxutils.TwoHotDist.mean

    def mean(self):
        out = orig_mean(self)
        if _live(nj) and _RECORD["twohot"]:
            frame = _caller(("loss", "balance_stats"))
            site = "rewstats"
            if frame is not None and frame.function == "loss":
                line = "".join(frame.code_context or [])
                site = next((s for pat, s in _MEAN_SITES if pat in line), "loss_other")
            _stash("twohot/" + site, {"logits": self.logits, "mean": out})
        return out
    jaxutils.TwoHotDist.mean = mean

    orig_loss = nets.RSSM.loss

    def rssm_loss(self, outs, free=1.0):
        losses, metrics = orig_loss(self, outs, free=0.0)
        if _live(nj):
            _stash("kl", {"dyn": losses["dyn"], "rep": losses["rep"]})
        if free:
            losses = {k: jnp.maximum(v, free) for k, v in losses.items()}
        return losses, metrics
    nets.RSSM.loss = rssm_loss
    return embodied, agt, jaxutils, nets, nj


# --------------------------------------------------------------------------------------
# Agent and data
# --------------------------------------------------------------------------------------

def make_config(embodied, agt, logdir):
    """The protocol's reference config (PROTOCOL.md section 1) at the fixture sizes."""
    s = SIZES
    overrides = {
        "seed": INIT_SEED, "task": "gymnax_cartpole", "logdir": str(logdir),
        "jax.platform": "cpu", "jax.compute_dtype": "float32", "jax.param_dtype": "float32",
        "jax.prealloc": False, "jax.transfer_guard": False,
        "dyn.rssm.deter": s["deter"], "dyn.rssm.hidden": s["hidden"],
        "dyn.rssm.stoch": s["stoch"], "dyn.rssm.classes": s["classes"],
        "dyn.rssm.blocks": s["blocks"], r".*\.units": s["units"],
        "rewhead.bins": s["bins"], "critic.bins": s["bins"],
        "batch_size": s["batch_size"], "batch_length": s["batch_length"],
        "imag_length": s["imag_length"],
        "opt.lr": LR, "opt.warmup": 0,
        "run.driver_parallel": False,
    }
    config = embodied.Config(agt.Agent.configs["defaults"]).update(overrides)
    config = config.update(replay_length=config.batch_length,
                           replay_length_eval=config.batch_length_eval)
    return config, overrides


def make_spaces(embodied):
    """The CartPole port's spaces (cartpole_port.make_embodied_env)."""
    from dreamer_parity.cartpole_port import make_embodied_env
    env = make_embodied_env(embodied, [0, 0])
    return env.obs_space, env.act_space


def make_batches(seed=1234):
    """STEPS replay batches of B windows of L rows from real CartPole-port episodes.

    Windows are chosen so that the trained rows contain an episode boundary by termination
    (batch row 0), no boundary (row 1) and a time-limit truncation (row 2, the env put at
    time 495).  Row 0 of every window is the context row (is_first forced True, as
    replay.py:302-317 does); ``deter``/``stoch`` hold random stored latents (only row 0 is
    read by the reference).  Returns a list of dicts of numpy arrays [B, L, ...].
    """
    from dreamer_parity.cartpole_port import CartPolePort
    B, L = SIZES["batch_size"], SIZES["batch_length"]
    D, S, K = SIZES["deter"], SIZES["stoch"], SIZES["classes"]
    rng = np.random.default_rng(seed)

    def stream(entropy, n, start_time=None):
        env = CartPolePort(entropy)
        rows, acts = [], []
        row = env.reset()
        if start_time is not None:
            env.set_state(row["vector"], start_time)
        for _ in range(n):
            a = int(rng.integers(0, 2))
            rows.append(row)
            acts.append(0 if row["is_last"] else a)
            row = env.reset() if row["is_last"] else env.step(a)
            if start_time is not None and row["is_first"]:
                env.set_state(row["vector"], start_time)
        return rows, acts

    batches = []
    for k in range(STEPS):
        windows = []
        for b in range(B):
            if b == 2:
                rows, acts = stream([seed, k, b], 40, start_time=495)
            else:
                rows, acts = stream([seed, k, b], 200)
            firsts = [i for i, r in enumerate(rows) if r["is_first"]]
            if b == 0:   # a terminal inside the trained rows: first at window row 4 + k
                cand = [i for i in firsts if i >= 12]
                start = cand[0] - (4 + k)
            elif b == 1:  # no boundary in the trained rows
                start = next(i for i in range(1, len(rows) - L)
                             if not any(r["is_first"] for r in rows[i + 1:i + L]))
            else:        # a truncation inside the trained rows
                cand = [i for i in firsts if i >= 6]
                start = cand[0] - (5 - k)
            windows.append((rows[start:start + L], acts[start:start + L]))
        batch = {
            "vector": np.stack([[r["vector"] for r in w] for w, _ in windows]).astype(np.float32),
            "reward": np.array([[r["reward"] for r in w] for w, _ in windows], np.float32),
            "is_first": np.array([[r["is_first"] for r in w] for w, _ in windows], bool),
            "is_last": np.array([[r["is_last"] for r in w] for w, _ in windows], bool),
            "is_terminal": np.array([[r["is_terminal"] for r in w] for w, _ in windows], bool),
            "action": np.array([a for _, a in windows], np.int32),
            "deter": np.tanh(rng.normal(0, 0.7, (B, L, D))).astype(np.float32),
            "stoch": rng.integers(0, K, (B, L, S)).astype(np.int32),
        }
        batch["is_first"][:, 0] = True
        # replay.py:311-315: is_last |= roll(is_first, -1), last column untouched.
        batch["is_last"][:, :-1] |= batch["is_first"][:, 1:]
        batches.append(batch)
    return batches


#: Regime (a) output-bias floor: deep enough that the outer bins carry sum p|b| ~ 0.06 (no
#: pair-sum noise), shallow enough that no output-kernel gradient is so small (< ~1e-16) that
#: its second moment 0.001 g^2 is flushed to zero (XLA:CPU flushes denormals) and the update
#: becomes g / eps = g * 1e20 on both sides, which would amplify rounding of tiny gradients.
BIAS_FLOOR = -24.0


def condition_twohot(params, rng):
    """Regime (a): peaked bias ``max(-0.5 |j - m|, BIAS_FLOOR)`` and small random kernel
    N(0, 0.3/sqrt(units)) for the two-hot output layers of rew, critic and slowcritic."""
    params = dict(params)
    n = SIZES["bins"]
    m = (n - 1) // 2
    bias = np.maximum(-0.5 * np.abs(np.arange(n + 1) - m), BIAS_FLOOR).astype(np.float32)
    bias[n] = 0.0  # the padding logit (dropped by nets.py:443)
    for mod in TWOHOT_MODULES:
        k = f"agent/{mod}/dist/out/kernel"
        shape = np.asarray(params[k]).shape
        kern = rng.normal(0.0, 0.3 / np.sqrt(shape[0]), shape).astype(np.float32)
        # The padding column stays zero, as in a real run (outscale 0, never updated): the
        # reference's per-tensor AGC norm includes it (jaxutils.py:664-668).
        kern[:, n] = 0.0
        params[k] = kern
        params[f"agent/{mod}/dist/out/bias"] = bias.copy()
    return params


def _flatten_optstate(state, names):
    """optax chain state (agc, rms, momentum, scale) -> dict of nu/mu/counts."""
    agc, rms, mom, _ = state
    (rms_step, nu), (mom_step, mu) = rms, mom
    assert set(nu) == set(names) == set(mu), "optimizer state keys differ from params"
    out = {f"nu/{k}": np.asarray(v) for k, v in nu.items()}
    out.update({f"mu/{k}": np.asarray(v) for k, v in mu.items()})
    out["count/rms"] = np.asarray(rms_step)
    out["count/momentum"] = np.asarray(mom_step)
    return out


def _model_keys(params):
    return sorted(k for k in params if k.split("/")[1] in (
        "enc", "dyn", "dec", "rew", "con", "actor", "critic"))


def _state_record(params):
    """Model params, slow critic, retnorm, counters of a reference state dict."""
    rec = {f"param/{k}": np.asarray(params[k]) for k in _model_keys(params)}
    rec.update({f"slowcritic/{k}": np.asarray(v) for k, v in params.items()
                if k.startswith("agent/slowcritic/")})
    rec["retnorm/lo"] = np.asarray(params["agent/retnorm/low/value"])
    rec["retnorm/hi"] = np.asarray(params["agent/retnorm/high/value"])
    rec["counter/opt_step"] = np.asarray(params["agent/opt/step/value"])
    rec["counter/slow_updates"] = np.asarray(params["agent/updater/updates/value"])
    return rec


def _collect_step():
    """Turn the stash of one train call into arrays (checks the expected call counts)."""
    T, H = SIZES["batch_length"] - 1, SIZES["imag_length"]
    B = SIZES["batch_size"]
    st = dict(_STASH)
    counts = {k: len(v) for k, v in st.items()}
    want = {"scan_observe": 1, "start_action": 1, "scan_imagine": 1, "grads": 1, "kl": 1}
    for k, n in want.items():
        if counts.get(k) != n:
            raise RuntimeError(f"stash {k}: expected {n} callbacks, got {counts.get(k)}")
    rec = {}
    rec["draws/post"] = st["scan_observe"][0].astype(np.float32)               # [B,T,S,K]
    rec["draws/start_action"] = st["start_action"][0].astype(np.float32)       # [B*T,A]
    rec["draws/imag_stoch"] = st["scan_imagine"][0]["stoch"].astype(np.float32)  # [H,BT,S,K]
    rec["draws/imag_action"] = st["scan_imagine"][0]["action"].astype(np.float32)  # [H,BT,A]
    for k in ("post", "start_action", "imag_stoch", "imag_action"):
        d = rec[f"draws/{k}"]
        if not (np.all((d == 0) | (d == 1)) and np.all(d.sum(-1) == 1)):
            raise RuntimeError(f"draws/{k} is not one-hot")
    assert rec["draws/imag_stoch"].shape[:2] == (H, B * T), rec["draws/imag_stoch"].shape
    assert rec["draws/post"].shape[:2] == (B, T), rec["draws/post"].shape
    rec.update({f"grad/{k}": v for k, v in st["grads"][0].items()})
    rec["kl/dyn_raw"] = st["kl"][0]["dyn"]
    rec["kl/rep_raw"] = st["kl"][0]["rep"]
    for k, v in st.items():
        if k.startswith("twohot/"):
            # Sites called once per step; several identical calls (XLA may CSE) keep the first.
            rec[f"{k}/logits"] = v[0]["logits"]
            rec[f"{k}/mean"] = v[0]["mean"]
            rec[f"{k}/ncalls"] = np.asarray(len(v))
    return rec


def build_agent(logdir):
    """The reference agent at the fixture config; its report function is not compiled."""
    embodied, agt, jaxutils, nets, nj = _PATCHED
    from dreamerv3 import jaxagent
    import types
    jaxagent.JAXAgent._lower_report = lambda self: setattr(
        self, "_report", types.SimpleNamespace(compile=lambda: None))
    config, overrides = make_config(embodied, agt, logdir)
    obs_space, act_space = make_spaces(embodied)
    _RECORD["on"] = False
    agent = agt.Agent(obs_space, act_space, config)
    return agent, config, overrides


def run_regime(agent, config, regime):
    """Run STEPS compiled train steps from the regime's initial state; returns arrays."""
    import jax
    params = jax.tree_util.tree_map(np.asarray, dict(agent.params))
    rng = np.random.default_rng(77)
    if regime == "a":
        params = condition_twohot(params, rng)
    names = _model_keys(params)
    arrays = {}
    for k, v in _state_record(params).items():
        arrays[f"init/{k}"] = v
    arrays.update({f"init/opt/{k}": v for k, v in _flatten_optstate(
        params["agent/opt/state"], names).items()})
    batches = make_batches()
    B = config.batch_size
    state = params
    for step, batch in enumerate(batches):
        for k, v in batch.items():
            arrays[f"batch{step}/{k}"] = v
        data = dict(batch)
        data["stepid"] = np.zeros((B, SIZES["batch_length"], 20), np.uint8)
        data = jax.device_put(data, agent.train_sharded)
        carry = agent.init_train(B)
        seed = jax.device_put(np.array([1000 + step, 17], np.uint32), agent.train_sharded)
        allo = {k: jax.tree_util.tree_map(jax.device_put, v) for k, v in state.items()
                if k in agent.policy_keys}
        dona = {k: jax.tree_util.tree_map(jax.device_put, v) for k, v in state.items()
                if k not in agent.policy_keys}
        _STASH.clear()
        _RECORD["on"] = True
        new, outs, _, mets = agent._train(allo, dona, data, carry, seed)
        jax.block_until_ready((new, outs, mets))
        jax.effects_barrier()
        _RECORD["on"] = False
        new = jax.tree_util.tree_map(np.asarray, new)
        rec = _collect_step()
        rec.update(_state_record(new))
        rec.update({f"opt/{k}": v for k, v in _flatten_optstate(
            new["agent/opt/state"], names).items()})
        rec.update({f"metric/{k}": np.asarray(v)[0] for k, v in mets.items()})
        rec["out/deter"] = np.asarray(outs["replay"]["deter"])
        rec["out/stoch"] = np.asarray(outs["replay"]["stoch"])
        if not np.array_equal(rec["draws/post"].argmax(-1), rec["out/stoch"]):
            raise RuntimeError("posterior draws differ from the replay write-back stoch")
        for k, v in rec.items():
            if keep(regime, k):
                arrays[f"step{step}/{k}"] = np.asarray(v)
        state = new
    return arrays


#: Two-hot sites whose logits are stored in regime (b) (their means are stored for every
#: site); regime (a) stores no two-hot stash (its heads are well-conditioned).
TWOHOT_LOGIT_SITES = ("imag_rew", "imag_val")


def keep(regime, key):
    """Whether a per-step record goes into the fixture (keeps it under 5 MB)."""
    if not key.startswith("twohot/"):
        return True
    if regime == "a":
        return False
    site, field = key.split("/")[1], key.split("/")[2]
    if site == "imag_slowval_reg":   # the same computation as imag_slowval
        return False
    return field == "mean" or (field == "logits" and site in TWOHOT_LOGIT_SITES)


_PATCHED = None


def _git_state(path):
    try:
        commit = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", str(path), "status", "--porcelain"],
                                    check=True, capture_output=True, text=True).stdout.strip())
        return commit, dirty
    except (OSError, subprocess.CalledProcessError):
        return None, None


def kept(regime: str, key: str) -> bool:
    """Whether array ``key`` of ``regime`` is written: every array of regime (a); of regime
    (b) what ``tests/test_parity.py`` reads: the start (``init/``), the batches and draws
    that drive the candidate's updates, the first update's metrics and every update's
    two-hot logits and expectations.  Regime (b)'s other per-update arrays (gradients,
    moments, parameters, ...) would repeat regime (a)'s kind of check and are not kept."""
    if regime != "b" or key.startswith(("init/", "batch")):
        return True
    _, _, rest = key.partition("/")
    return rest.startswith(("draws/", "twohot/")) or key.startswith("step0/metric/")


def write_npz(path, arrays):
    """Write ``arrays`` (name -> numpy array) to a compressed .npz atomically.

    Key layout: ``init/param/<ref name>``, ``init/slowcritic/<ref name>``,
    ``init/retnorm/{lo,hi}``, ``init/opt/{nu,mu}/<ref name>``; per step k in 0..2:
    ``batch<k>/<key>`` [B, L, ...] and ``step<k>/...``: ``draws/{post [B,T,S,K],
    start_action [B*T,A], imag_stoch [H,B*T,S,K], imag_action [H,B*T,A]}`` (one-hot float32),
    ``grad/<name>``, ``opt/{nu,mu}/<name>``, ``opt/count/{rms,momentum}``, ``param/<name>``
    (after the step), ``slowcritic/<name>``, ``retnorm/{lo,hi}``, ``metric/<name>``,
    ``kl/{dyn,rep}_raw`` [B,T] (before the free-bits clamp), ``out/{deter,stoch}`` (replay
    write-back), ``twohot/<site>/{logits,mean}`` (imag_rew, imag_val, ... as named in
    ``_MEAN_SITES``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".tmp-")
    os.close(fd)
    try:
        with open(tmp, "wb") as f:
            np.savez_compressed(f, **arrays)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_json(path, obj):
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".tmp-")
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def write_outputs(out, arrays_by_regime, overrides, commit, dirty):
    """Write regime_<r>.npz for each regime and meta.json (versions, sizes, overrides)."""
    import jax
    import jaxlib
    import tensorflow_probability as tfp
    out = Path(out)
    meta = {"regimes": {}}
    for regime, arrays in arrays_by_regime.items():
        arrays = {k: v for k, v in arrays.items() if kept(regime, k)}
        fname = f"regime_{regime}.npz"
        write_npz(out / fname, arrays)
        digest = hashlib.sha256((out / fname).read_bytes()).hexdigest()
        meta["regimes"][regime] = {"file": fname, "sha256": digest, "n_arrays": len(arrays)}
    overrides = {k: v for k, v in overrides.items() if k != "logdir"}
    meta.update({
        "reference_commit": commit, "reference_dirty": dirty,
        "jax": jax.__version__, "jaxlib": jaxlib.__version__, "numpy": np.__version__,
        "tensorflow_probability": tfp.__version__, "platform": jax.default_backend(),
        "sizes": SIZES, "steps": STEPS, "init_seed": INIT_SEED,
        "train_seeds": [[1000 + k, 17] for k in range(STEPS)],
        "config_overrides": overrides,
        "outputs_alignment": "each step's outputs captured at the step itself (compiled "
                             "JAXAgent._train called directly; no D1 realignment needed)",
        "regime_a_twohot_output_layers": f"bias max(-0.5|j-127|, {BIAS_FLOOR}) (padding 0), "
                                         "kernel N(0, 0.3/sqrt(units)) (numpy seed 77), for "
                                         "rew, critic, slowcritic",
    })
    write_json(out / "meta.json", meta)
    return meta


def reference_checkout():
    """(path, commit, dirty) of the imported reference checkout."""
    import dreamerv3
    ckpt = Path(dreamerv3.__file__).resolve().parents[1]
    commit, dirty = _git_state(ckpt)
    return ckpt, commit, dirty


def main(argv=None):
    global _PATCHED
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures/parity")
    ap.add_argument("--regime", choices=("a", "b", "both"), default="both")
    args = ap.parse_args(argv)
    _PATCHED = install_patches()
    ckpt, commit, dirty = reference_checkout()
    if dirty:
        raise SystemExit(f"reference checkout {ckpt} is dirty; refusing to record fixtures")
    regimes = ("a", "b") if args.regime == "both" else (args.regime,)
    with tempfile.TemporaryDirectory() as logdir:
        agent, config, overrides = build_agent(Path(logdir) / "ref")
        arrays = {r: run_regime(agent, config, r) for r in regimes}
    meta = write_outputs(args.out, arrays, overrides, commit, dirty)
    print(json.dumps({k: meta[k] for k in ("reference_commit", "jax", "regimes")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

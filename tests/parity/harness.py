"""Run the candidate on a recorded reference fixture and compare it step by step (main venv).

The fixture (``tests/fixtures/parity/regime_<a|b>.npz`` + ``meta.json``, written by
``tests/parity/make_fixtures.py`` under the reference venv) holds the reference's
initial state, three replay batches with every random draw of each train step, and each
step's losses, metrics, gradients, optimizer moments, updated parameters, slow critic and
return normaliser.  This module turns it into candidate inputs (:func:`initial_state`,
:func:`batch`, :func:`draws`), runs ``candidate.agent.train_step`` (:func:`run_steps`) and
compares (:func:`compare_step`).  Layout conversions:

* parameters: :mod:`parity.namemap` (padding column dropped);
* draws: reference ``start_action`` [B*T, A] and ``imag_action`` [H, B*T, A] are stacked to
  the candidate's ``imag_action`` [H+1, B*T, A]; ``post`` and ``imag_stoch`` are used as is;
* optimizer moments: the candidate's ``opt_state[1].nu`` / ``opt_state[2].mu``
  (``candidate/optim.py``) vs the reference's ``scale_by_rms`` / ``scale_by_momentum``
  states (jaxutils.py:677-713).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np

from . import namemap
from .compare import TOL_GRAD, TOL_MOMENT, TOL_STATE, check, check_param

__all__ = ["FIXTURE_DIR", "load", "candidate_config", "initial_state", "batch", "draws",
           "run_steps", "compare_step", "SKIPPED_METRICS"]

FIXTURE_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "parity"

#: Reference metrics the candidate does not produce, by design (docs/CANDIDATE_AGENT.md): the
#: subsample histograms, balance statistics of the reward and continue heads, and the
#: parameter count.
SKIPPED_PREFIXES = ("rewstats/", "constats/")
SKIPPED_SUFFIXES = ("/dist",)
SKIPPED_METRICS = ("opt_param_count",)


class Fixture(dict):
    """{array name: numpy array} with ``meta`` (dict) and ``regime`` attributes."""


def load(regime: str, directory=None) -> Fixture:
    """Load ``regime_<regime>.npz`` and meta.json from ``directory`` (default FIXTURE_DIR).

    Raises FileNotFoundError naming the file and the regeneration command when absent.
    """
    d = Path(directory) if directory else FIXTURE_DIR
    path = d / f"regime_{regime}.npz"
    if not path.exists() or not (d / "meta.json").exists():
        raise FileNotFoundError(
            f"{path} (or meta.json) missing; regenerate with `make parity-fixtures` "
            "(python tests/parity/regen.py)")
    with np.load(path) as z:
        fx = Fixture({k: z[k] for k in z.files})
    fx.meta = json.loads((d / "meta.json").read_text())
    fx.regime = regime
    return fx


def _group(fx, prefix):
    n = len(prefix)
    return {k[n:]: v for k, v in fx.items() if k.startswith(prefix)}


def candidate_config(fx, decode="exact", **overrides):
    """The candidate AgentConfig of the fixture's sizes, lr and warm-up."""
    from dreamer_parity.candidate.config import AgentConfig
    s = fx.meta["sizes"]
    ov = fx.meta["config_overrides"]
    return AgentConfig(
        deter=s["deter"], hidden=s["hidden"], stoch=s["stoch"], classes=s["classes"],
        blocks=s["blocks"], units=s["units"], bins=s["bins"], imag_length=s["imag_length"],
        lr=float(ov["opt.lr"]), warmup=int(ov["opt.warmup"]), decode=decode, **overrides)


def ref_params(fx, prefix):
    """{reference name: array} of the model parameters (and slow critic) under ``prefix``
    (e.g. "init/" or "step0/")."""
    out = _group(fx, prefix + "param/")
    out.update(_group(fx, prefix + "slowcritic/"))
    return out


def initial_state(fx, cfg):
    """Candidate TrainState holding the fixture's initial reference state."""
    import jax.numpy as jnp
    from dreamer_parity.candidate import optim
    tree = namemap.ref_tree(ref_params(fx, "init/"))
    params = _to_jnp(tree["params"])
    state = {
        "params": params,
        "opt_state": optim.make(cfg).init(params),
        "slow_critic": _to_jnp(tree["slow_critic"]),
        "retnorm": {"lo": jnp.asarray(fx["init/retnorm/lo"], jnp.float32),
                    "hi": jnp.asarray(fx["init/retnorm/hi"], jnp.float32)},
        "updates": jnp.asarray(fx["init/counter/slow_updates"], jnp.int32),
    }
    return state


def _to_jnp(tree):
    import jax
    import jax.numpy as jnp
    return jax.tree_util.tree_map(lambda x: jnp.asarray(x), tree)


def batch(fx, step):
    """Replay batch of ``step`` (dict of numpy arrays [B, L, ...])."""
    return _group(fx, f"batch{step}/")


def draws(fx, step):
    """Candidate draws dict of ``step`` (see module doc)."""
    d = _group(fx, f"step{step}/draws/")
    return {"post": d["post"], "imag_stoch": d["imag_stoch"],
            "imag_action": np.concatenate([d["start_action"][None], d["imag_action"]], 0)}


@contextlib.contextmanager
def capture_grads():
    """While active, ``candidate.optim.apply`` also returns the raw gradients it receives
    under the metric key ``"__grads__"`` (a test-only wrapper; ``agent.train_step``'s
    ``internals`` returns them too).  Takes effect in functions traced inside the block."""
    from dreamer_parity.candidate import optim
    orig = optim.apply

    def apply(tx, grads, opt_state, params, *args):
        new, state, metrics = orig(tx, grads, opt_state, params, *args)
        return new, state, {**metrics, "__grads__": grads}
    optim.apply = apply
    try:
        yield
    finally:
        optim.apply = orig


#: XLA options for programs whose numbers need not be the production program's (the
#: injected-bug tests only need to fail): LLVM at -O0 halves the compile time of the
#: fixture's train step (measured 15.6 s against 29-31 s at the default level).
FAST_COMPILE = {"xla_backend_optimization_level": 0}


def step_function(cfg, grads=True, compiler_options=None):
    """jit-compiled ``(state, batch, draws) -> (state, outs, metrics)`` of the candidate
    (traced at its first call; with ``grads`` the metrics hold ``"__grads__"``).
    ``compiler_options``: XLA options for ``jax.jit`` (default: none, the production
    program; :data:`FAST_COMPILE` where only a failure has to be seen)."""
    import jax
    from dreamer_parity.candidate import agent
    fn = jax.jit(lambda state, bt, dr: agent.train_step(cfg, state, bt, draws=dr),
                 compiler_options=compiler_options)
    if not grads:
        return fn

    def traced(state, bt, dr):
        with capture_grads():
            return fn(state, bt, dr)
    return traced


def run_steps(fx, cfg, steps=3, with_grads=True, step_fn=None, compiler_options=None):
    """Run ``steps`` candidate train steps on the fixture's batches and draws.

    Returns a list of dicts {"state", "outs", "metrics", "grads"} (numpy), one per step,
    each step starting from the candidate's own previous state (the reference's recorded
    state is NOT re-injected, so errors accumulate as they would in a run).
    """
    import jax
    step_fn = step_fn or step_function(cfg, with_grads, compiler_options)
    state = initial_state(fx, cfg)
    results = []
    for k in range(steps):
        state, outs, metrics = step_fn(state, batch(fx, k), draws(fx, k))
        metrics = dict(metrics)
        grads = metrics.pop("__grads__", None)
        results.append(jax.tree_util.tree_map(np.asarray, {
            "state": state, "outs": outs, "metrics": metrics, "grads": grads}))
    return results


def metric_scale(metrics, name):
    """Largest magnitude of the tensor a metric summarises (for the atol term).

    tensorstats families ``<p>/{mean,std,mag,min,max}``: max(|min|, |max|) of the family;
    loss terms ``<k>_loss`` / ``<k>_loss_std``: max(|mean|, std) (a lower bound of the loss
    tensor's largest magnitude); other metrics: None (the metric itself).
    """
    fam, _, stat = name.rpartition("/")
    if fam and stat in ("mean", "std", "mag", "min", "max"):
        vals = [abs(float(metrics[f"{fam}/{s}"])) for s in ("min", "max")
                if f"{fam}/{s}" in metrics]
        return max(vals) if vals else None
    base = name[:-4] if name.endswith("_loss_std") else (name if name.endswith("_loss") else None)
    if base and base in metrics and base + "_std" in metrics:
        return max(abs(float(metrics[base])), abs(float(metrics[base + "_std"])))
    return None


def compare_step(fx, res, step, parts=("metrics", "params", "moments", "grads", "slow",
                                       "retnorm", "outs")):
    """Checks (list of compare.Check) of candidate result ``res`` against reference ``step``.

    Metric names compared: every reference metric except :data:`SKIPPED_*`; a metric the
    candidate lacks raises KeyError naming it.
    """
    pre = f"step{step}/"
    checks = []
    if "metrics" in parts:
        refm = _group(fx, pre + "metric/")
        for name, ref in sorted(refm.items()):
            if (name.startswith(SKIPPED_PREFIXES) or name.endswith(SKIPPED_SUFFIXES)
                    or name in SKIPPED_METRICS):
                continue
            if name not in res["metrics"]:
                raise KeyError(f"candidate metrics lack {name!r}")
            checks.append(check(f"s{step} metric {name}", res["metrics"][name], ref, TOL_STATE,
                                scale=metric_scale(refm, name)))
    state = res["state"]
    cflat = namemap.flatten_tree({"params": state["params"],
                                  "slow_critic": state["slow_critic"]})
    if "params" in parts:
        for name, ref in sorted(_group(fx, pre + "param/").items()):
            checks.append(check_param(f"s{step} param {name}", cflat[namemap.cand_key(name)],
                                      namemap.drop_padding(name, ref),
                                      namemap.drop_padding(name, fx["init/param/" + name])))
    if "slow" in parts:
        for name, ref in sorted(_group(fx, pre + "slowcritic/").items()):
            checks.append(check(f"s{step} slow {name}", cflat[namemap.cand_key(name)],
                                namemap.drop_padding(name, ref), TOL_STATE))
    if "moments" in parts:
        opt = state["opt_state"]
        moments = {"nu": namemap.flatten_tree({"params": opt[1].nu}),
                   "mu": namemap.flatten_tree({"params": opt[2].mu})}
        for kind in ("nu", "mu"):
            for name, ref in sorted(_group(fx, pre + f"opt/{kind}/").items()):
                checks.append(check(f"s{step} {kind} {name}",
                                    moments[kind][namemap.cand_key(name)],
                                    namemap.drop_padding(name, ref), TOL_MOMENT))
        checks.append(check(f"s{step} opt count rms", opt[1].step, fx[pre + "opt/count/rms"]))
        checks.append(check(f"s{step} opt count momentum", opt[2].step,
                            fx[pre + "opt/count/momentum"]))
    if "grads" in parts and res.get("grads") is not None:
        gflat = namemap.flatten_tree({"params": res["grads"]})
        for name, ref in sorted(_group(fx, pre + "grad/").items()):
            checks.append(check(f"s{step} grad {name}", gflat[namemap.cand_key(name)],
                                namemap.drop_padding(name, ref), TOL_GRAD))
    if "retnorm" in parts:
        for k in ("lo", "hi"):
            checks.append(check(f"s{step} retnorm {k}", state["retnorm"][k],
                                fx[pre + f"retnorm/{k}"], TOL_STATE))
        checks.append(check(f"s{step} slow updates", state["updates"],
                            fx[pre + "counter/slow_updates"]))
    if "outs" in parts:
        checks.append(check(f"s{step} outs deter", res["outs"]["deter"], fx[pre + "out/deter"],
                            TOL_STATE))
        checks.append(check(f"s{step} outs stoch", res["outs"]["stoch"], fx[pre + "out/stoch"],
                            (0.0, 0.0)))
    return checks


@contextlib.contextmanager
def capture_twohot():
    """While active (at trace time), every ``candidate.twohot.mean`` call inside the
    candidate's loss is returned through the metrics as ``"__twohot<i>/logits"`` and
    ``"__twohot<i>/mean"`` (i in call order: 0 imagined reward, 1 value, 2 slow value,
    3 replay slow value; candidate/agent.py ``_loss``).  A test-only wrapper; it also
    captures the replay slow value, which ``agent.train_step``'s ``internals`` leaves out."""
    from dreamer_parity.candidate import agent, twohot
    captured = []
    orig_mean, orig_stats = twohot.mean, agent._tensorstats

    def mean(logits, b, decode):
        out = orig_mean(logits, b, decode)
        captured.append((logits, out))
        return out

    def stats(x, prefix):
        out = orig_stats(x, prefix)
        if captured:
            for i, (lg, m) in enumerate(captured):
                out[f"__twohot{i}/logits"] = lg
                out[f"__twohot{i}/mean"] = m
            captured.clear()
        return out
    twohot.mean, agent._tensorstats = mean, stats
    try:
        yield
    finally:
        twohot.mean, agent._tensorstats = orig_mean, orig_stats


def twohot_step_function(cfg):
    """Like :func:`step_function` (with gradients) plus :func:`capture_twohot`."""
    import jax
    from dreamer_parity.candidate import agent
    fn = jax.jit(lambda state, bt, dr: agent.train_step(cfg, state, bt, draws=dr))

    def traced(state, bt, dr):
        with capture_grads(), capture_twohot():
            return fn(state, bt, dr)
    return traced

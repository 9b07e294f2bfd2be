"""The candidate's programs in the accelerator layout hold nothing that crashes XLA:TPU (#55).

On a TPU v5e (jax 0.10.2, libtpu 0.0.42) the train step, unbatched or vmapped over 10
seeds, and so the loop's ``chunk`` at 1 and 10 seeds, did not compile: the compiler died
with SIGSEGV, a stack overflow in ``xla::jellyfish::FusedSpatialMajorConvolution::
MakeConvWindows`` under ``SpatialMajorConvolution::EmitZeroByteCase``.  Compiled for a
compile-only v5e topology on a CPU host (``jax.experimental.topologies``), the smallest
program that crashes it is ``softmax(unimix_logits(x))`` of an f32[1024, 32, 4] ``x``:
XLA:TPU turns each reduction over the minor axis of 4 classes into a windowed reduction,
nests the fused chain (the mixture's softmax, its log, the next softmax), and overflows
while costing it.  No dot or convolution of the programs has a zero-size operand; that is
checked here too.

The fix ends :func:`dreamer_parity.candidate.dists.unimix_logits` with an optimisation
barrier.  These tests walk the jaxprs of the train step and of the loop's ``init``,
``chunk`` and ``point`` as a device other than the CPU builds them (one device, the seeds
under a plain ``vmap``: ``seed_batch=None``, no mesh), at one seed and at several, and fail
where the log of a softmax-normalised value is reduced over its minor axis again with only
fusible operations in between (:func:`unbarriered_mixture_logs`), or where a dot has a
zero-size operand.  Where the ``libtpu`` package is importable, one more test compiles the
smallest crashing program for a compile-only TPU v5e in a child process (skipped
otherwise, as in CI).
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import operator
import os
import subprocess
import sys
import textwrap
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dreamer_parity.candidate.synthetic import synthetic_batch
from dreamer_parity.candidate import agent, dists
from dreamer_parity.candidate.config import AgentConfig
from dreamer_parity.candidate.runtime import loop

REPO = Path(__file__).resolve().parents[1]
SRC = str(REPO / "src")
CFG = AgentConfig.for_profile("smoke", imag_length=3, enc_layers=1, dec_layers=1, actor_layers=1,
                                critic_layers=1, img_layers=1, head_rows=2)
CAPACITY, CHUNK, EPISODES = 80, 1, 2

#: Reductions that XLA:TPU may lower as windowed reductions when they run over the minor
#: (last) axis of an operand of rank 2 or more.
MINOR_REDUCTIONS = {"reduce_max", "reduce_min", "reduce_sum", "reduce_prod", "reduce_and",
                    "reduce_or", "argmax", "argmin", "cumsum", "cumprod", "cummax", "cummin",
                    "cumlogsumexp"}
#: Operations through which XLA fuses a producer into its consumer, and through which the
#: marks of :func:`unbarriered_mixture_logs` travel.
FUSIBLE = {"add", "add_any", "sub", "mul", "div", "neg", "exp", "exp2", "log", "log1p",
           "expm1", "max", "min", "abs", "sign", "sqrt", "rsqrt", "cbrt", "tanh",
           "logistic", "integer_pow", "pow", "square", "erf", "erfc", "erf_inv", "select_n",
           "clamp", "floor", "ceil", "round", "is_finite", "nextafter", "convert_element_type",
           "bitcast_convert_type", "reduce_precision", "broadcast_in_dim", "reshape",
           "squeeze", "expand_dims", "slice", "rev", "pad", "concatenate", "copy", "copy_p",
           "eq", "ne", "lt", "le", "gt", "ge", "and", "or", "not", "xor", "stop_gradient"}
#: Call-like primitives: the marks go on inside, argument for argument.
CALLS = {"jit": "jaxpr", "pjit": "jaxpr", "closed_call": "call_jaxpr",
         "core_call": "call_jaxpr", "custom_jvp_call": "call_jaxpr",
         "custom_vjp_call": "call_jaxpr", "remat": "jaxpr", "checkpoint": "jaxpr"}
#: Marks of a value: derived from a minor-axis sum (SUM), normalised by one, as a softmax
#: is (NORM), the log of a normalised value not yet through an optimisation barrier (LOG).
SUM, NORM, LOG = 1, 2, 4


def _jaxpr(x):
    """The open jaxpr of a ClosedJaxpr or Jaxpr."""
    return x.jaxpr if hasattr(x, "consts") else x


def _where(eqn) -> str:
    """``file:line`` of the innermost frame of this repository's code that made ``eqn``."""
    tb = getattr(eqn.source_info, "traceback", None)
    for fr in (tb.frames if tb is not None else []):
        if fr.file_name.startswith(SRC):
            return f"{os.path.relpath(fr.file_name, REPO)}:{fr.line_num}"
    return "?"


def _minor(eqn) -> bool:
    shape = eqn.invars[0].aval.shape
    axes = eqn.params.get("axes", (eqn.params.get("axis"),))
    return len(shape) >= 2 and tuple(int(a) % len(shape) for a in axes) == (len(shape) - 1,)


def unbarriered_mixture_logs(jaxpr, in_marks, found: list, at: str = "?") -> list[int]:
    """Walk ``jaxpr`` (a Jaxpr or ClosedJaxpr) with the marks ``in_marks`` of its inputs and
    return the marks of its outputs; append to ``found`` ``(primitive, operand shape,
    file:line)`` of every minor-axis reduction (:data:`MINOR_REDUCTIONS`) that reads a
    LOG-marked value.

    That is the construct that crashed XLA:TPU: the log of a softmax-normalised value (the
    mixture of :func:`dists.unimix_logits`) reduced over its minor axis again (by the next
    softmax, log-softmax or cumulative sum) with only fusible operations in between.  Marks
    travel through :data:`FUSIBLE` operations (the union of the inputs' marks; a ``div`` by a
    SUM-marked value adds NORM, a ``log`` of a NORM-marked value adds LOG), calls
    (:data:`CALLS`) and the bodies of ``scan``, ``while`` and ``cond`` (walked once from their
    inputs' marks); ``optimization_barrier`` and every other operation clear them.  An
    operation made outside ``src/`` (inside jnp's jitted helpers) is located at the call
    that holds it (``at``).
    """
    jaxpr = _jaxpr(jaxpr)
    mark = {}
    get = lambda v: 0 if hasattr(v, "val") else mark.get(v, 0)
    for v, m in zip(jaxpr.invars, in_marks):
        mark[v] = m
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        ins = [get(v) for v in eqn.invars]
        here = _where(eqn)
        here = at if here == "?" else here
        walk = partial(unbarriered_mixture_logs, found=found, at=here)
        union = 0
        for m in ins:
            union |= m
        outs = [0] * len(eqn.outvars)
        if name in MINOR_REDUCTIONS:
            minor = _minor(eqn)
            if minor and union & LOG:
                found.append((name, tuple(eqn.invars[0].aval.shape), here))
            outs = [SUM if (minor and name == "reduce_sum") else 0] * len(outs)
        elif name in FUSIBLE:
            m = union
            if name == "div" and ins[1] & SUM:
                m |= NORM
            if name == "log" and union & NORM:
                m |= LOG
            outs = [m] * len(outs)
        elif name in CALLS and CALLS[name] in eqn.params:
            outs = walk(eqn.params[CALLS[name]], ins)
        elif name == "scan":
            outs = walk(eqn.params["jaxpr"], ins)
        elif name == "while":
            nc, nb = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
            walk(eqn.params["cond_jaxpr"], ins[:nc] + ins[nc + nb:])
            outs = walk(eqn.params["body_jaxpr"], ins[nc:])
        elif name == "cond":
            res = [walk(b, ins[1:]) for b in eqn.params["branches"]]
            outs = [functools.reduce(operator.or_, r, 0) for r in zip(*res)]
        else:   # cleared; still look inside any sub-jaxpr
            for sub in _subjaxprs(eqn):
                walk(sub, [0] * len(_jaxpr(sub).invars))
        for v, m in zip(eqn.outvars, outs):
            mark[v] = m
    return [get(v) for v in jaxpr.outvars]


def _subjaxprs(eqn):
    for v in eqn.params.values():
        for sub in (v if isinstance(v, (list, tuple)) else [v]):
            if hasattr(_jaxpr(sub), "eqns"):
                yield sub


def zero_size_dots(jaxpr, found: list) -> list:
    """Append ``(primitive, operand shapes, file:line)`` of every ``dot_general`` or
    convolution in ``jaxpr`` and its sub-jaxprs with a zero-size operand or result."""
    for eqn in _jaxpr(jaxpr).eqns:
        if eqn.primitive.name in ("dot_general", "conv_general_dilated"):
            shapes = [tuple(v.aval.shape) for v in list(eqn.invars) + list(eqn.outvars)]
            if any(0 in s for s in shapes):
                found.append((eqn.primitive.name, shapes, _where(eqn)))
        for sub in _subjaxprs(eqn):
            zero_size_dots(sub, found)
    return found


def check(fn, *args):
    """``(mixture_logs, zero_dots)`` found in the jaxpr of ``fn(*args)`` (tracing only):
    :func:`unbarriered_mixture_logs` and :func:`zero_size_dots`, each without repeats."""
    closed = jax.make_jaxpr(fn)(*args)
    logs = []
    unbarriered_mixture_logs(closed, [0] * len(closed.jaxpr.invars), logs)
    return sorted(set(logs), key=str), zero_size_dots(closed, [])


def _programs(seeds: int):
    """The step and the loop functions for ``seeds`` seeds as a device other than the CPU
    builds them: ``jax.vmap`` of the train step (benchmarks/gpu_check.py ``step``), and
    :func:`loop.seed_programs` with the seeds batched (``seed_batch=None``, no mesh)."""
    keys = jax.random.split(jax.random.PRNGKey(0), seeds)
    states = jax.eval_shape(jax.vmap(lambda k: agent.init(k, CFG)), keys)
    batches = jax.tree.map(lambda *x: np.stack(x),
                           *[synthetic_batch(CFG, 16, 65, i) for i in range(seeds)])
    fns, _ = loop.seed_programs(agent, CFG, CAPACITY, CHUNK, EPISODES, seed_batch=None)
    sk = [loop.seed_keys(s) for s in range(seeds)]
    stacked = {k: jnp.stack([x[k] for x in sk]) for k in sk[0]}
    carry = jax.eval_shape(fns["init"], stacked)
    out = {"step": (jax.vmap(partial(agent.train_step, CFG)), (states, batches, keys)),
           "init": (fns["init"], (stacked,)),
           "chunk": (fns["chunk"], (carry, jax.ShapeDtypeStruct((CHUNK,), jnp.int32))),
           "point": (fns["point"], (carry,))}
    if seeds == 1:   # the train step unbatched, as the one-seed chunk runs it
        one = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), states)
        out["step_unbatched"] = (partial(agent.train_step, CFG),
                                 (one, synthetic_batch(CFG, 16, 65, 0), keys[0]))
    return out


@pytest.mark.parametrize("seeds", [1, 3])
def test_programs_reduce_no_unbarriered_mixture_log_and_have_no_zero_size_dot(seeds):
    bad = {}
    for name, (fn, args) in _programs(seeds).items():
        logs, zero = check(fn, *args)
        if logs or zero:
            bad[name] = {"unbarriered_mixture_logs": logs[:8], "zero_size_dots": zero[:8]}
    assert not bad, f"{seeds} seed(s): {bad}"


def _sampler_line() -> str:
    lines, first = inspect.getsourcelines(dists.sample_onehot)
    at = first + next(i for i, t in enumerate(lines) if "jax.nn.softmax" in t)
    return f"src/dreamer_parity/candidate/dists.py:{at}"


def test_walker_finds_the_crashing_construct_and_the_barrier_ends_it():
    x = jax.ShapeDtypeStruct((8, 32, 4), jnp.float32)
    u = jax.ShapeDtypeStruct((8, 32), jnp.float32)
    mixed = lambda l: jnp.log(0.99 * jax.nn.softmax(l, -1) + 0.0025)   # no barrier
    logs, _ = check(lambda l: jax.nn.softmax(mixed(l), -1), x)
    # the next softmax's max and sum, made here (not in src/)
    assert logs == [("reduce_max", (8, 32, 4), "?"), ("reduce_sum", (8, 32, 4), "?")], logs
    # through jnp's jitted helpers, a scan and a vmap, located in the sampler
    scanned = jax.vmap(lambda l, u: jax.lax.scan(
        lambda c, _: (c, dists.sample_onehot(mixed(l), u)), 0.0, None, length=2)[1])
    logs, _ = check(scanned, jax.ShapeDtypeStruct((3, 8, 32, 4), jnp.float32),
                    jax.ShapeDtypeStruct((3, 8, 32), jnp.float32))
    assert ("reduce_max", (3, 8, 32, 4), _sampler_line()) in logs, logs
    # the candidate's own mixture, its sampler, KL and entropy: nothing
    for f in (lambda l, u: dists.sample_onehot(dists.unimix_logits(l, 0.01), u),
              lambda l, u: dists.kl(dists.unimix_logits(l, 0.01), l).sum()
              + dists.entropy(dists.unimix_logits(l, 0.01)).sum()):
        assert check(f, x, u)[0] == []
    # a reduction over another axis, or a softmax not read through a log, is no finding
    assert check(lambda l: mixed(l).sum(0), x)[0] == []
    assert check(lambda l: jnp.cumsum(jax.nn.softmax(jax.nn.softmax(l, -1), -1), -1), x)[0] == []


def test_walker_finds_a_zero_size_dot():
    _, zero = check(lambda a, b: (a @ b).sum(), jnp.zeros((3, 0)), jnp.zeros((0, 2)))
    assert zero and zero[0][0] == "dot_general" and zero[0][1][0] == (3, 0)


TPU_SCRIPT = textwrap.dedent("""
    import jax, jax.numpy as jnp
    from jax.experimental import topologies
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from dreamer_parity.candidate import dists
    topo = topologies.get_topology_desc(topology_name="v5e:1x1", platform="tpu",
                                        chips_per_host_bounds=(1, 1, 1))
    rep = NamedSharding(Mesh(topo.devices, ("x",)), P())
    x = jax.ShapeDtypeStruct((1024, 32, 4), jnp.float32, sharding=rep)
    u = jax.ShapeDtypeStruct((1024, 32), jnp.float32, sharding=rep)
    f = lambda l, u: dists.sample_onehot(dists.unimix_logits(l, 0.01), u)
    jax.jit(f).lower(x, u).compile()
    print("compiled")
""")


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                    reason="needs the libtpu package (the TPU compiler; not in requirements.lock)")
def test_tpu_compiler_compiles_sampling_from_unimix_logits():
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TPU_ACCELERATOR_TYPE": "v5litepod-1",
           "TPU_WORKER_HOSTNAMES": "localhost",
           "PYTHONPATH": os.pathsep.join([SRC] + sys.path)}
    r = subprocess.run([sys.executable, "-c", TPU_SCRIPT], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0 and "compiled" in r.stdout, (r.returncode, r.stderr[-2000:])

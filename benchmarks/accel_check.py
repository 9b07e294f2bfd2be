"""The candidate on an accelerator (TPU or GPU): one check of its speed, memory and numerics.

On the accelerator's machine, from the repository root (docs/CANDIDATE.md#accelerators;
a TPU machine with its own package index: ``. benchmarks/device_env.sh`` first)::

    PYTHONUNBUFFERED=1 python3 benchmarks/accel_check.py --out <dir> --budget-s 420

Before that, here: ``make accel-wheels`` (``python benchmarks/accel_check.py
--download-wheels``), which puts into the git-ignored ``.accel-wheels/`` the wheels that
machine lacks and its package index does not hold (:data:`ACCEL_WHEELS` at the versions of
``requirements.lock``, about 2 MiB); they go there with the checkout.  This script installs
those the interpreter lacks into a temporary directory (:mod:`dreamer_parity.wheels`;
nothing is installed into the interpreter's own environment).

What it measures, each part in a fresh child process (its own device, its own peak memory,
and an out-of-memory failure that ends that child only):

1. ``probe``: the jax backend (``--platform``, default ``tpu``), its devices, the device
   memory limit, the versions and the provenance (:func:`dreamer_parity.provenance.collect`).
2. For each seed count of ``--seeds`` (default 1, 10, 100), then counts growing by
   ``--grow`` until the device memory runs out, ``--max-seeds`` is reached or the budget
   ends: ``step``, the full-profile train step ``jit(vmap(train_step))`` over the seeds
   (``--step-updates`` timed updates after one untimed one), and ``loop``, the run's own
   chunk program (``loop.build``: envs, policy, replay for ``--rows`` rows, updates; the
   vector steps up to the gate at row 1,040, one untimed chunk, ``--loop-chunks`` timed
   chunks of ``--loop-steps`` vector steps, 8 updates each); ``--parts`` keeps one of the
   two.  Each prints seed-updates per
   second after compilation, compile seconds and peak device memory (``memory_stats`` of
   the device; on the CPU backend, which has none, the process's peak resident memory).
   The step and loop phases run at ``--precision`` (``jax_default_matmul_precision``,
   default: jax's own) and ``--seed-batch``: how the seed ``vmap`` runs the train step
   (:func:`dreamer_parity.candidate.runtime.seedmap.per_seed`).  ``N`` runs it in groups of
   N seeds, one group after another (the device holds one group's temporaries, not all
   seeds'), in both parts; ``all`` batches all seeds in both; ``auto`` (the default) is
   the run's own choice for the loop (``loop.resolve_seed_batch``: all seeds on a device,
   one at a time on the CPU) and plain ``vmap`` for the step.  Each phase records the
   seed batch it ran (``seed_batch``: null for all seeds batched).  ``--twohot-index``
   sets ``AgentConfig.twohot_index`` of the device phases (``auto``: the comparison form
   off the CPU, ``twohot.index_form``); each phase records the form it ran
   (``twohot_index``).  Both forms are exact (bitwise the same on XLA:CPU), so it is a
   speed A/B.  ``--head-rows`` sets ``AgentConfig.head_rows`` of the device phases (the
   imagined rows per pass of the heads: the same update up to float32 rounding, tests),
   each phase recording the value it ran (``head_rows``).
3. ``compare``: ``--compare-updates`` updates of one seed (fixed keys and batch) with the
   1-seed train step on the device and on the CPU backend of the same machine (the CPU
   side runs alongside the device phases on the upper half of the cores, unless
   ``--cpu-compare after``), and the largest difference of each training metric; on the
   device also at the other ``jax_default_matmul_precision`` values of
   ``--compare-precisions`` (at the default, XLA:TPU multiplies float32 in one bfloat16 pass
   and XLA:GPU in TF32); each of these also times ``--step-updates`` 1-seed updates, so
   every precision has its rate.

Every phase gets what is left of ``--budget-s``; one that is still running when the budget
ends is stopped, and one that does not fit is skipped; either is recorded with its reason.
``<out>/accel_check.json`` is rewritten (atomically) after every phase; the end prints a
Markdown table.  Exit status: 0 when every phase ran or was skipped or stopped for the budget
(a growing count that ran out of memory included), 1 when a phase failed otherwise, 2 on bad
arguments or a missing package.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# the checkout this script lies in, not an installed copy (the device machine has none)
sys.path.insert(0, str(REPO / "src"))

from dreamer_parity import provenance, records, wheels  # noqa: E402  (standard library only)
from dreamer_parity.candidate.config import TWOHOT_INDEX  # noqa: E402  (imports no jax)
from dreamer_parity.candidate.runtime.run import (  # noqa: E402  (imports no jax)
    RunParamsError, parse_seed_batch)

#: Distributions the device machines lack and the TPU machine's index does not hold at the
#: lock's version (docs/CANDIDATE.md#accelerators); their versions come from
#: requirements.lock.  gymnax imports gymnasium, which needs farama-notifications, and
#: seaborn; the index holds PyYAML 6.0.3 only (a CPython 3.11 x86-64 binary wheel).
ACCEL_WHEELS = ("gymnax", "gymnasium", "farama-notifications", "seaborn", "pyyaml")
#: Modules the candidate's programs import besides the standard library (gymnax imports
#: six, matplotlib and seaborn when it is imported).
NEEDED_MODULES = ("jax", "jaxlib", "numpy", "optax", "flax", "gymnax", "gymnasium", "six",
                  "matplotlib", "seaborn", "yaml")
WHEEL_DIR = ".accel-wheels"
JSON_NAME = "accel_check.json"
NUM_ENVS = 16
GATE_STEPS = 65            # vector steps up to and including the gate's row 1,040
RESERVE_S = 3.0            # kept back at the end for the last write and the table
MIN_PHASE_S = 5.0          # no child is started with less than this left
OOM_MARKERS = ("RESOURCE_EXHAUSTED", "Out of memory", "out of memory", "OOM when allocating")


# --------------------------------------------------------------------------- wheels

def plan_wheels(wheel_dir) -> list[dict]:
    """What to do with each wheel of ``wheel_dir``: ``{"wheel", "name", "version",
    "installed" (version or None), "action": "install" | "present"}``; a distribution
    already installed, at any version, is left alone (recorded)."""
    out = []
    for whl in sorted(Path(wheel_dir).glob("*.whl")) if Path(wheel_dir).is_dir() else []:
        name, version = wheels.wheel_name(whl)
        have = provenance.package_versions((name,))[name]
        out.append({"wheel": whl.name, "name": name, "version": version, "installed": have,
                    "action": "present" if have else "install"})
    return out


def install_wheels(wheel_dir, target) -> list[dict]:
    """Install the wheels of ``wheel_dir`` whose distributions are missing into ``target``
    (:func:`dreamer_parity.wheels.install`) and put ``target`` first on ``sys.path`` and
    ``$PYTHONPATH`` (for the children).  Returns :func:`plan_wheels`.

    Raises RuntimeError with pip's last line when pip fails.
    """
    plan = plan_wheels(wheel_dir)
    todo = [Path(wheel_dir) / p["wheel"] for p in plan if p["action"] == "install"]
    if todo:
        wheels.install(todo, target)
        sys.path.insert(0, str(target))
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [str(target)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    return plan


#: The wheels shipped to the GPU machine (``make gpu-wheels``): the lines of this lock marked
#: ``# shipped`` (what that machine's image lacks), for CPython 3.12, beside a wheel of this
#: project; the lock's other lines are the image's own packages (tests/test_gpu_cpu312.py).
GPU_LOCK = "requirements-gpu-cpu312.lock"
#: Per ``--versions`` value: which wheels ``--download-wheels`` fetches (``names``: None for
#: the lock's ``# shipped`` lines), from which lock, for which CPython, into which directory
#: (the default of ``--wheels``), and whether this project's own wheel goes with them.
WHEEL_SETS = {
    "none": {"lock": "requirements.lock", "names": ACCEL_WHEELS, "python": "3.11",
             "dir": WHEEL_DIR, "project": False, "make": "accel-wheels"},
    "gpu-h200": {"lock": GPU_LOCK, "names": None, "python": "3.12",
                 "dir": ".gpu-wheels",
                 "project": True, "make": "gpu-wheels"},
}


def shipped_names(lock) -> tuple[str, ...]:
    """The normalised names of the ``name==version  # shipped`` lines of ``lock``."""
    out = []
    for line in Path(lock).read_text().splitlines():
        body, _, mark = line.partition("#")
        if "==" in body and mark.strip() == "shipped":
            out.append(provenance.normalise(body.split("==", 1)[0].strip()))
    return tuple(out)


def build_project_wheel(dest) -> Path:
    """Build this project's wheel (pure Python, ``pip wheel --no-deps``) into ``dest`` from a
    copy of ``pyproject.toml`` and ``src/`` (the checkout gets no build files), replacing an
    earlier one; returns its path.

    Raises RuntimeError with pip's last line when the build fails.
    """
    dest = Path(dest)
    for old in dest.glob("dreamer_parity-*.whl"):
        old.unlink()
    import shutil
    with tempfile.TemporaryDirectory(prefix="project-wheel-") as tmp:
        shutil.copy2(REPO / "pyproject.toml", tmp)
        shutil.copytree(REPO / "src", Path(tmp) / "src",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                            "--disable-pip-version-check", "-w", str(dest), tmp],
                           capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"pip wheel of the project failed: {last}")
    return next(dest.glob("dreamer_parity-*.whl"))


def download_wheels(dest, lock=REPO / "requirements.lock", names=ACCEL_WHEELS,
                    python_version="3.11", project=False) -> list[Path]:
    """Download ``names`` (None: the lock's ``# shipped`` lines, :func:`shipped_names`) at
    their ``lock`` versions into ``dest`` (wheels for CPython ``python_version`` on x86-64
    Linux, pure Python or manylinux up to glibc 2.28: :data:`dreamer_parity.wheels.PLATFORMS`,
    no dependencies; :func:`dreamer_parity.wheels.download`), removing other wheels there;
    with ``project``, this project's wheel too (:func:`build_project_wheel`).

    Raises RuntimeError naming a package the lock does not pin, or pip's last line.
    """
    pins = provenance.read_pins(lock)
    names = shipped_names(lock) if names is None else names
    missing = [n for n in names if n not in pins]
    if missing:
        raise RuntimeError(f"{Path(lock).name} pins no version of {', '.join(missing)}")
    got = wheels.download({n: pins[n] for n in names}, dest, python_version=python_version)
    if project:
        build_project_wheel(dest)
        got = sorted(Path(dest).glob("*.whl"))
    return got


def travelling_bytes() -> int | None:
    """Bytes of the files copied to the accelerator's machine besides the wheel folder: the
    tracked and the untracked, not ignored files of this checkout (None without git)."""
    try:
        names = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached",
                                "--others", "--exclude-standard"], capture_output=True,
                               check=True).stdout.split(b"\0")
    except (OSError, subprocess.CalledProcessError):
        return None
    total = 0
    for n in names:
        f = REPO / os.fsdecode(n)
        if n and f.is_file() and not f.is_symlink():
            total += f.stat().st_size
    return total


# --------------------------------------------------------------------------- children

def _jax_memory(jax) -> dict:
    """Peak and limit of device 0's memory (bytes), or the process's peak resident memory
    where the backend keeps no statistics (the CPU backend)."""
    stats = None
    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:   # noqa: BLE001 - a backend without statistics
        stats = None
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if stats and "peak_bytes_in_use" in stats:
        return {"peak_bytes": int(stats["peak_bytes_in_use"]), "source": "memory_stats",
                "limit_bytes": int(stats.get("bytes_limit", 0)) or None, "peak_rss_bytes": rss}
    return {"peak_bytes": rss, "source": "ru_maxrss", "limit_bytes": None, "peak_rss_bytes": rss}


def _tree_bytes(jax, tree) -> int:
    return int(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree)))


def _child_probe(spec) -> dict:
    import jax
    devs = jax.devices()
    _agent(spec)   # a bad --agent stops the check here
    try:   # as a run starts: its provenance then names the version set that passed
        provenance.check_pins(REPO / "requirements.lock")
    except provenance.PinError:
        pass   # the parent has recorded the failed check
    prov = provenance.collect()
    return {"backend": provenance.backend(), "provenance": prov,
            "devices": [{"platform": d.platform, "kind": d.device_kind} for d in devs],
            "memory": _jax_memory(jax)}


def _agent(spec):
    """``(agent module, its config)``: ``spec["agent"]`` (the candidate's agent unless
    ``--agent`` names another module of its API), configured by its
    ``config_for_profile(profile)`` where it has one, else ``AgentConfig.for_profile``."""
    import importlib

    from dreamer_parity.candidate.config import AgentConfig

    agent = importlib.import_module(spec["agent"])
    make = getattr(agent, "config_for_profile", AgentConfig.for_profile)
    cfg = make(spec["profile"])
    if spec.get("twohot_index", "auto") != "auto":
        cfg = dataclasses.replace(cfg, twohot_index=spec["twohot_index"])
    if spec.get("head_rows") is not None:
        cfg = dataclasses.replace(cfg, head_rows=spec["head_rows"])
    return agent, cfg


def _twohot_form(cfg) -> str | None:
    """The two-hot bin search the phase's program uses (``twohot.index_form`` of the
    config's ``twohot_index``, resolved on this backend); None for an agent without it."""
    from dreamer_parity.candidate import twohot
    setting = getattr(cfg, "twohot_index", None)
    return None if setting is None else twohot.index_form(setting)


def _set_precision(jax, spec) -> None:
    """``jax_default_matmul_precision`` of the phase: ``spec["precision"]`` (``default``
    leaves jax's own default)."""
    p = spec.get("precision", "default")
    jax.config.update("jax_default_matmul_precision", None if p == "default" else p)


def step_seed_batch(spec) -> int | None:
    """The seed batch of a step phase: None (plain ``vmap``) for ``spec["seed_batch"]``
    ``"auto"`` or None and for the compare phases, else that int."""
    sb = spec.get("seed_batch", "auto")
    return None if sb == "auto" or spec.get("compare_updates", 0) > 0 else sb


def _step_program(spec):
    """``(jax, cfg, compiled jit(vmap(train_step)), states, batches, compile_s)`` for
    ``spec["seeds"]`` seeds, compiled with the run's options for this backend; the train
    step wrapped in :func:`.seedmap.per_seed` of :func:`step_seed_batch`."""
    import jax
    import numpy as np
    from functools import partial

    from dreamer_parity.candidate.runtime import loop, seedmap

    _set_precision(jax, spec)
    from dreamer_parity.candidate.synthetic import synthetic_batch
    agent, cfg = _agent(spec)
    n = spec["seeds"]
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    states = jax.vmap(lambda k: agent.init(k, cfg))(keys)
    # on the device once: a host batch would be copied to the device at every call
    batches = jax.device_put(jax.tree_util.tree_map(
        lambda *x: np.stack(x),
        *[synthetic_batch(cfg, spec["batch"], spec["length"], i) for i in range(n)]))
    step = jax.jit(jax.vmap(seedmap.per_seed(partial(agent.train_step, cfg),
                                             step_seed_batch(spec))),
                   compiler_options=loop.compiler_options(agent))
    t0 = time.perf_counter()
    compiled = step.lower(states, batches, keys).compile()
    return jax, cfg, compiled, states, batches, time.perf_counter() - t0


def _update_keys(jax, i: int, n: int):
    return jax.random.split(jax.random.fold_in(jax.random.PRNGKey(1), i), n)


def _child_step(spec) -> dict:
    jax, cfg, compiled, states, batches, compile_s = _step_program(spec)
    n = spec["seeds"]
    out = {"seeds": n, "compile_s": compile_s, "backend": provenance.backend(),
           "seed_batch": step_seed_batch(spec), "twohot_index": _twohot_form(cfg),
           "head_rows": getattr(cfg, "head_rows", None)}
    start = states
    if spec["updates"] > 0:
        times = []
        for i in range(spec["updates"] + 1):
            t0 = time.perf_counter()
            states, outs, metrics = compiled(states, batches, _update_keys(jax, i, n))
            jax.block_until_ready((states, outs, metrics))
            times.append(time.perf_counter() - t0)
        timed = sum(times[1:])
        out.update({"updates": spec["updates"], "times_s": times, "timed_s": timed,
                    "update_s": timed / spec["updates"],
                    "seed_updates_per_s": n * spec["updates"] / timed})
    if spec.get("compare_updates", 0) > 0:
        # the same program from the same start: fixed keys and batch, per-update metrics
        states, series = start, {}
        for i in range(spec["compare_updates"]):
            states, _, metrics = compiled(states, batches, _update_keys(jax, 10_000 + i, n))
            for k, v in jax.device_get(metrics).items():
                series.setdefault(k, []).append(float(v[0]))
        leaves = jax.tree.leaves(jax.device_get(states["params"]
                                                if isinstance(states, dict) else states.params))
        series["params_abs_sum"] = [float(sum(abs(x[0].astype("float64")).sum() for x in leaves))]
        out["metrics"] = series
    out["memory"] = _jax_memory(jax)
    out["state_bytes_per_seed"] = _tree_bytes(jax, states) // n
    return out


def _child_loop(spec) -> dict:
    import jax
    import jax.numpy as jnp

    from dreamer_parity.candidate.runtime import loop
    from dreamer_parity.schedule import per_vector_step

    _set_precision(jax, spec)
    agent, cfg = _agent(spec)
    n, cs, timed = spec["seeds"], spec["loop_steps"], spec["loop_chunks"]
    seed_batch = loop.resolve_seed_batch(spec.get("seed_batch", "auto"))
    progs = loop.build(agent, cfg, capacity=spec["rows"] // NUM_ENVS, chunk_steps=cs,
                       eval_episodes=10, seed_batch=seed_batch, mesh=None)
    keys = [loop.seed_keys(s) for s in range(n)]
    stacked = {k: jnp.stack([kk[k] for kk in keys]) for k in keys[0]}
    t0 = time.perf_counter()
    init = progs.init.lower(stacked).compile()
    t1 = time.perf_counter()
    shape = jax.eval_shape(progs.init, stacked)
    chunk = progs.chunk.lower(shape, jnp.zeros((cs,), jnp.int32)).compile()
    t2 = time.perf_counter()
    carry = init(stacked)
    state_bytes = _tree_bytes(jax, carry)
    gate_chunks = -(-GATE_STEPS // cs)
    counts = per_vector_step((gate_chunks + 1 + timed) * cs)
    t3 = time.perf_counter()
    for c in range(gate_chunks):
        carry, _ = chunk(carry, jnp.asarray(counts[c * cs:(c + 1) * cs], jnp.int32))
    jax.block_until_ready(carry)
    gate_s = time.perf_counter() - t3
    times, ups = [], []
    for c in range(gate_chunks, gate_chunks + 1 + timed):
        cnt = counts[c * cs:(c + 1) * cs]
        t0c = time.perf_counter()
        carry, ep = chunk(carry, jnp.asarray(cnt, jnp.int32))
        jax.block_until_ready((carry, ep))
        times.append(time.perf_counter() - t0c)
        ups.append(int(sum(cnt)))
    t, u = sum(times[1:]), sum(ups[1:])
    done = int(jax.device_get(carry["updates"])[0])
    return {"seeds": n, "compile_s": (t1 - t0) + (t2 - t1), "compile_init_s": t1 - t0,
            "compile_chunk_s": t2 - t1, "gate_s": gate_s, "warmup_chunk_s": times[0],
            "chunk_times_s": times[1:], "timed_updates": u, "timed_s": t,
            "update_s": t / u, "seed_updates_per_s": n * u / t, "updates_done": done,
            "state_bytes_per_seed": state_bytes // n, "memory": _jax_memory(jax),
            "backend": provenance.backend(), "precision": spec.get("precision", "default"),
            "seed_batch": seed_batch, "twohot_index": _twohot_form(cfg),
            "head_rows": getattr(cfg, "head_rows", None)}


_CHILDREN = {"probe": _child_probe, "step": _child_step, "loop": _child_loop}


def _child_main(spec: dict, t_start: float) -> int:
    if spec.get("cpus"):
        os.sched_setaffinity(0, set(spec["cpus"]))
    res = _CHILDREN[spec["kind"]](spec)
    res["child_wall_s"] = time.perf_counter() - t_start
    print("PHASE " + json.dumps(records.clean_json(res), allow_nan=False), flush=True)
    return 0


# --------------------------------------------------------------------------- parent

class Child:
    """A child process of one phase, its output in files under ``tmp`` (no pipe to fill)."""

    def __init__(self, phase: dict, spec: dict, env: dict, tmp: Path):
        self.phase, self.tmp = phase, tmp
        name = phase["name"]
        self.out, self.err = tmp / f"{name}.out", tmp / f"{name}.err"
        self.t0 = time.perf_counter()
        with open(self.out, "w") as o, open(self.err, "w") as e:
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--phase", json.dumps(spec)],
                stdout=o, stderr=e, env=env, cwd=str(REPO), start_new_session=True)

    def wait(self, deadline: float) -> dict:
        """Wait until the child ends or ``deadline`` (perf_counter); fill ``self.phase``."""
        try:
            self.proc.wait(timeout=max(0.0, deadline - time.perf_counter()))
            stopped = False
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            stopped = True
        ph = self.phase
        ph["seconds"] = time.perf_counter() - self.t0
        ph.update(classify(self.proc.returncode, self.out.read_text(errors="replace"),
                           _no_paths(self.err.read_text(errors="replace"), self.tmp),
                           stopped, ph["seconds"]))
        return ph


def _no_paths(text: str, tmp: Path) -> str:
    """``text`` with the repository, the temporary directory, the interpreter's prefix and
    the home directory written as ``<repo>``, ``<tmp>``, ``<python>``, ``~``."""
    for path, name in ((REPO, "<repo>"), (tmp, "<tmp>"), (Path(sys.prefix), "<python>"),
                       (Path(sys.base_prefix), "<python>"), (Path.home(), "~")):
        text = text.replace(str(path), name)
    return text


def classify(returncode: int, stdout: str, stderr: str, stopped: bool, seconds: float) -> dict:
    """A finished child's outcome: ``{"status": "ok", "result": {...}}`` (its last
    ``PHASE {json}`` line, exit 0), ``"stopped"`` (killed at the budget's end), ``"oom"``
    (stderr names an exhausted device memory, :data:`OOM_MARKERS`) or ``"error"``; the
    last two with ``reason`` (the last unindented stderr line, 300 characters at most)
    and ``stderr_tail`` (its last 20 non-empty lines)."""
    lines = [x for x in stdout.splitlines() if x.startswith("PHASE ")]
    if stopped:
        return {"status": "stopped", "reason": f"budget ended after {seconds:.0f} s of this phase"}
    if returncode == 0 and lines:
        return {"status": "ok", "result": json.loads(lines[-1][len("PHASE "):])}
    tail = [x for x in stderr.strip().splitlines() if x.strip()][-20:]
    last = next((x.strip() for x in reversed(tail) if not x.startswith(" ")),
                tail[-1].strip() if tail else f"exit {returncode}")
    return {"status": "oom" if any(m in stderr for m in OOM_MARKERS) else "error",
            "reason": last[:300], "stderr_tail": tail}


def _phases(a) -> list[dict]:
    """The planned phases in order: probe; per count of --seeds step and loop (and the
    1-seed compare on the device, then the CPU side when --cpu-compare after); the
    device's compare at the highest matmul precision; then the growing counts."""
    out = [{"name": "probe", "kind": "probe", "side": "device"}]
    compare_done = False
    for i, n in enumerate(a.seeds):
        if "step" in a.parts or (n == 1 and a.compare_updates):
            out.append({"name": f"step-{n}", "kind": "step", "side": "device", "seeds": n,
                        "compare": "default" if (n == 1 and a.compare_updates) else None,
                        "timing": "step" in a.parts})
            compare_done |= n == 1 and bool(a.compare_updates)
        if "loop" in a.parts:
            out.append({"name": f"loop-{n}", "kind": "loop", "side": "device", "seeds": n})
        if i == 0 and a.compare_updates and a.cpu_compare == "after":
            out.append(_cpu_compare_phase())
    if a.compare_updates:
        out += [{"name": f"compare-{p}", "kind": "step", "side": "device", "seeds": 1,
                 "compare": p, "timing": True} for p in a.compare_precisions
                if p != "default" or not compare_done]
    return out


def _cpu_compare_phase() -> dict:
    return {"name": "compare-cpu", "kind": "step", "side": "cpu", "seeds": 1,
            "compare": "default"}


def _spec(a, ph: dict, cpus=None) -> dict:
    spec = {"kind": ph["kind"], "profile": a.profile, "agent": a.agent,
            "seeds": ph.get("seeds", 1),
            "batch": 16, "length": 65, "rows": a.rows, "loop_steps": a.loop_steps,
            "loop_chunks": a.loop_chunks, "cpus": cpus,
            "precision": a.precision if ph["side"] == "device" else "default",
            "seed_batch": a.seed_batch_value if ph["side"] == "device" else "auto",
            "twohot_index": a.twohot_index if ph["side"] == "device" else "auto",
            "head_rows": a.head_rows if ph["side"] == "device" else None}
    if ph["kind"] == "step":
        spec.update(updates=0 if ph.get("timing") is False else a.step_updates,
                    compare_updates=a.compare_updates if ph.get("compare") else 0,
                    precision=ph.get("compare") or spec["precision"])
    return spec


def _env(a, side: str) -> dict:
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = a.platform if side == "device" else "cpu"
    env.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", a.mem_fraction)
    return env


def metric_differences(device: dict, cpu: dict) -> dict:
    """The largest differences between two ``{metric: [value per update]}`` series.

    Returns ``{"max_abs": float, "max_abs_metric": str, "max_abs_update": int, "max_rel":
    float, "max_rel_metric": str, "per_metric": {name: {"max_abs", "max_rel"}}, "metrics":
    int, "only_one_side": [names]}``; the relative difference is
    ``|a - b| / max(|a|, |b|)`` (0 where both are 0); the ``*_metric`` and ``*_update``
    fields are None where every difference is 0.  Non-finite values on either side count
    as an infinite difference unless both are the same non-finite value (NaN and NaN
    included).
    """
    per, best_abs, best_rel = {}, (0.0, None, None), (0.0, None)
    for name in sorted(set(device) & set(cpu)):
        ma = mr = 0.0
        for i, (x, y) in enumerate(zip(device[name], cpu[name])):
            x = float("nan") if x is None else float(x)
            y = float("nan") if y is None else float(y)
            if x == y or (x != x and y != y):
                d = r = 0.0
            elif not (abs(x) < float("inf") and abs(y) < float("inf")):
                d = r = float("inf")
            else:
                d = abs(x - y)
                r = d / max(abs(x), abs(y))
            ma, mr = max(ma, d), max(mr, r)
            if d > best_abs[0]:
                best_abs = (d, name, i)
        if mr > best_rel[0]:
            best_rel = (mr, name)
        per[name] = {"max_abs": ma, "max_rel": mr}
    return {"max_abs": best_abs[0], "max_abs_metric": best_abs[1],
            "max_abs_update": best_abs[2], "max_rel": best_rel[0],
            "max_rel_metric": best_rel[1], "per_metric": per, "metrics": len(per),
            "only_one_side": sorted(set(device) ^ set(cpu))}


def tree_digest(paths) -> str:
    """sha256 over the relative paths and bytes of the ``.py`` files under ``paths``
    (relative to the repository): the code that ran, where no git is at hand."""
    h = hashlib.sha256()
    files = []
    for p in paths:
        p = REPO / p
        files += [p] if p.is_file() else list(p.rglob("*.py"))
    for f in sorted(files):
        h.update(f.relative_to(REPO).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _argv_recorded(argv: list[str]) -> list[str]:
    """The command line with the value of ``--out`` written as ``<out>`` (no paths)."""
    out, skip = [], False
    for x in argv:
        if skip:
            out.append("<out>")
            skip = False
        elif x == "--out":
            out.append(x)
            skip = True
        else:
            out.append("--out=<out>" if x.startswith("--out=") else x)
    return out


class Check:
    """The parent: plans the phases, runs them inside the budget, writes the JSON."""

    def __init__(self, a, t_start: float):
        self.a, self.t_start = a, t_start
        self.deadline = t_start + a.budget_s - RESERVE_S
        self.out = Path(a.out) / JSON_NAME
        self.res = {"schema": "accel_check/1", "argv": _argv_recorded(sys.argv[1:]),
                    "date_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "budget_s": a.budget_s, "settings": {
                        k: getattr(a, k) for k in (
                            "platform", "profile", "agent", "seeds", "parts", "grow", "max_seeds", "step_updates",
                            "loop_steps", "loop_chunks", "rows", "compare_updates",
                            "compare_precisions", "cpu_compare", "versions", "mem_fraction",
                            "precision", "seed_batch", "twohot_index", "head_rows")},
                    "phases": []}
        self.res["settings"]["compilation_cache"] = bool(
            os.environ.get("JAX_COMPILATION_CACHE_DIR"))
        self.last = {}   # kind -> seconds of its last finished phase

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def write(self) -> None:
        self.res["elapsed_s"] = time.perf_counter() - self.t_start
        self.res["summary"] = summarise(self.res["phases"])
        records.write_json(self.out, self.res)

    def fits(self, ph: dict) -> bool:
        """Whether ``ph`` may start; records it as skipped when not."""
        left, est = self.left(), self.last.get(ph["kind"], 0.0)
        need = max(MIN_PHASE_S, 0.8 * est)
        if left < need:
            ph.update(status="skipped", reason=(
                f"budget: {max(left, 0):.0f} s left" + (
                    f", the last {ph['kind']} phase took {est:.0f} s" if est else "")))
            self.res["phases"].append(ph)
            print(f"accel_check: {ph['name']}: skipped ({ph['reason']})", file=sys.stderr)
            return False
        return True

    def run_phase(self, ph: dict, side_cpus=None) -> dict:
        if not self.fits(ph):
            return ph
        print(f"accel_check: {ph['name']} ...", file=sys.stderr, flush=True)
        child = Child(ph, _spec(self.a, ph, side_cpus), _env(self.a, ph["side"]), self.tmp)
        return self.finish(child)

    def finish(self, child: Child) -> dict:
        ph = child.wait(self.deadline)
        self.res["phases"].append(ph)
        if ph["status"] in ("ok", "oom"):
            self.last[ph["kind"]] = ph["seconds"]
        if ph["status"] == "ok" and ph["kind"] == "probe":
            self.res["device"] = ph["result"]
        print(f"accel_check: {ph['name']}: {ph['status']} in {ph['seconds']:.1f} s"
              + (f" ({ph['reason']})" if ph.get("reason") else "") + _brief(ph),
              file=sys.stderr, flush=True)
        self.write()
        return ph

    def collect(self, child: Child | None) -> Child | None:
        """Finish ``child`` (the CPU side run alongside) if it has ended; None then."""
        if child is not None and child.proc.poll() is not None:
            self.finish(child)
            return None
        return child

    def run(self, tmp: Path) -> int:
        self.tmp = tmp
        a = self.a
        probe = self.run_phase(_phases(a)[0])
        if probe["status"] != "ok":
            self.res["stopped_early"] = "the probe did not finish: nothing else was run"
            self.write()
            return 0 if probe["status"] in ("skipped", "stopped") else 1
        cpu_child = None
        if a.compare_updates and a.cpu_compare == "alongside":
            ph = _cpu_compare_phase()
            if self.fits(ph):
                cores = sorted(os.sched_getaffinity(0))
                cpus = cores[len(cores) // 2:] if len(cores) >= 4 else None
                ph["cpus"] = len(cpus) if cpus else len(cores)
                print("accel_check: compare-cpu started alongside ...", file=sys.stderr, flush=True)
                cpu_child = Child(ph, _spec(a, ph, cpus), _env(a, "cpu"), tmp)
        grow_ok, n = True, max(a.seeds)
        for ph in _phases(a)[1:]:
            r = self.run_phase(ph)
            if r["name"] in (f"step-{n}", f"loop-{n}") and r.get("timing", True):
                grow_ok &= r["status"] == "ok"
            cpu_child = self.collect(cpu_child)
        while grow_ok and self.left() > MIN_PHASE_S:
            n = max(n + 1, int(round(n * a.grow)))
            if a.max_seeds and n > a.max_seeds:
                break
            for kind in a.parts:
                r = self.run_phase({"name": f"{kind}-{n}", "kind": kind, "side": "device",
                                    "seeds": n, "grown": True})
                grow_ok &= r["status"] == "ok"
                cpu_child = self.collect(cpu_child)
        if cpu_child is not None:
            self.finish(cpu_child)
        self.write()
        failed = [p["name"] for p in self.res["phases"]
                  if p["status"] == "error" or (p["status"] == "oom" and not p.get("grown"))]
        return 1 if failed else 0


def _brief(ph: dict) -> str:
    r = ph.get("result") or {}
    bits = []
    if "seed_updates_per_s" in r:
        bits.append(f"{r['seed_updates_per_s']:.2f} seed-updates/s")
    if "compile_s" in r:
        bits.append(f"compile {r['compile_s']:.1f} s")
    mem = r.get("memory") or {}
    if mem.get("peak_bytes"):
        bits.append(f"peak {mem['peak_bytes'] / 2**20:.0f} MiB ({mem['source']})")
    return ": " + ", ".join(bits) if bits else ""


def summarise(phases: list[dict]) -> dict:
    """Per kind and seed count the figures; the largest count that ran per kind; the
    compare's differences per precision (device against the CPU backend)."""
    out = {"step": {}, "loop": {}, "largest_ok": {}, "compare": {}, "skipped": [],
           "failed": []}
    cpu = next((p for p in phases if p["name"] == "compare-cpu" and p["status"] == "ok"), None)
    for p in phases:
        r = p.get("result") or {}
        if p["status"] in ("skipped", "stopped"):
            out["skipped"].append(f"{p['name']}: {p['reason']}")
        elif p["status"] != "ok":
            out["failed"].append(f"{p['name']}: {p['status']}: {p.get('reason', '')}")
        if p["status"] != "ok" or p["kind"] not in ("step", "loop"):
            continue
        if p["side"] == "device" and "seed_updates_per_s" in r:
            out[p["kind"]][str(p["seeds"])] = {
                "seed_updates_per_s": r["seed_updates_per_s"], "update_s": r["update_s"],
                "compile_s": r["compile_s"], "peak_bytes": r["memory"]["peak_bytes"],
                "memory_source": r["memory"]["source"], "seed_batch": r.get("seed_batch")}
            out["largest_ok"][p["kind"]] = max(out["largest_ok"].get(p["kind"], 0), p["seeds"])
        if p["side"] == "device" and "metrics" in r and cpu is not None:
            d = metric_differences(r["metrics"], cpu["result"]["metrics"])
            d["device_platform"] = (r.get("backend") or {}).get("platform")
            d["cpu_platform"] = (cpu["result"].get("backend") or {}).get("platform")
            out["compare"][p["compare"]] = d
    if cpu is not None and "seed_updates_per_s" in cpu["result"]:
        out["cpu_step_1"] = {k: cpu["result"][k] for k in ("seed_updates_per_s", "compile_s")}
    return out


def print_table(res: dict) -> None:
    """The figures as a Markdown table on stdout."""
    s = res["summary"]
    dev = (res.get("device") or {}).get("backend") or {}
    print(f"\naccel_check: {dev.get('device_kind')} ({dev.get('platform')}), "
          f"{res['date_utc']}, {res['elapsed_s']:.0f} s of {res['budget_s']:.0f}, "
          f"--seed-batch {res['settings'].get('seed_batch', 'auto')}")
    print("\n| seeds | step: seed-updates/s | step compile s | step peak MiB "
          "| loop: seed-updates/s | loop compile s | loop peak MiB |")
    print("|---|---|---|---|---|---|---|")
    counts = sorted({int(k) for kind in ("step", "loop") for k in s[kind]})
    for n in counts:
        cells = []
        for kind in ("step", "loop"):
            f = s[kind].get(str(n))
            cells += ([f"{f['seed_updates_per_s']:.2f}", f"{f['compile_s']:.1f}",
                       f"{f['peak_bytes'] / 2**20:.0f}"] if f else ["-", "-", "-"])
        print(f"| {n} | " + " | ".join(cells) + " |")
    for prec, d in s["compare"].items():
        head = (f"\ncompare ({prec} precision, {d['device_platform']} against "
                f"{d['cpu_platform']}, {d['metrics']} metrics over the updates): ")
        if d["max_abs_metric"] is None:
            print(head + "every value equal")
        else:
            print(head + f"largest difference {d['max_abs']:.3g} ({d['max_abs_metric']}, "
                  f"update {d['max_abs_update']}), largest relative {d['max_rel']:.3g} "
                  f"({d['max_rel_metric']})")
    for line in s["skipped"] + s["failed"]:
        print(f"- {line}")


# --------------------------------------------------------------------------- main

def _positive(kind):
    def f(text):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind.__name__}") from None
        if v <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be positive")
        return v
    return f


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="See the module docstring (docs/CANDIDATE.md#accelerators).")
    ap.add_argument("--out", help="directory for accel_check.json (created)")
    ap.add_argument("--budget-s", type=_positive(float), default=420.0,
                    help="wall seconds for the whole check (default 420: inside 8 minutes)")
    ap.add_argument("--platform", default="tpu", help="JAX_PLATFORMS of the device phases "
                    "(tpu, cuda)")
    ap.add_argument("--profile", default="full", choices=("full", "smoke"))
    ap.add_argument("--agent", default="dreamer_parity.candidate.agent",
                    help="agent module of the candidate's API (the tests use a stand-in)")
    ap.add_argument("--seeds", type=_positive(int), nargs="+", default=[1, 10, 100])
    ap.add_argument("--parts", nargs="+", default=["step", "loop"], choices=("step", "loop"),
                    help="what is timed per seed count: the train step, the loop, or both")
    ap.add_argument("--grow", type=_positive(float), default=2.0,
                    help="factor of the growing counts after the last --seeds count")
    ap.add_argument("--max-seeds", type=int, default=0, help="largest growing count (0: none)")
    ap.add_argument("--step-updates", type=_positive(int), default=10)
    ap.add_argument("--loop-steps", type=_positive(int), default=4,
                    help="vector steps per chunk (8 updates each after the gate)")
    ap.add_argument("--loop-chunks", type=_positive(int), default=2, help="timed chunks")
    ap.add_argument("--rows", type=_positive(int), default=24000, help="replay sized for these rows")
    ap.add_argument("--compare-updates", type=int, default=3,
                    help="updates of the device-CPU comparison (0: none)")
    ap.add_argument("--seed-batch", default="auto", metavar="auto|all|N",
                    help="how the seed vmap runs the train step in the step and loop phases: "
                         "auto (the loop: the run's choice; the step: all), all, or N "
                         "(groups of N seeds, one after another: less device memory)")
    ap.add_argument("--precision", default="default", choices=("default", "high", "highest"),
                    help="jax_default_matmul_precision of the timed step and loop phases on "
                         "the device (the compare phases set their own)")
    ap.add_argument("--twohot-index", default="auto", choices=TWOHOT_INDEX,
                    help="AgentConfig.twohot_index of the device phases: how two-hot "
                         "targets find their bins (auto: compare off the CPU; both exact, "
                         "so a speed A/B)")
    ap.add_argument("--head-rows", type=_positive(int), default=None,
                    help="AgentConfig.head_rows of the device phases: imagined rows per pass "
                         "of the heads (default: the profile's; the same update up to float32 "
                         "rounding, so a speed A/B)")
    ap.add_argument("--compare-precisions", nargs="+", default=["default", "high", "highest"],
                    choices=("default", "high", "highest"))
    ap.add_argument("--cpu-compare", default="alongside", choices=("alongside", "after"),
                    help="run the CPU side of the comparison alongside the device phases "
                         "(upper half of the cores) or after the first count")
    ap.add_argument("--versions", default="none",
                    help=f"the version set allowed besides requirements.lock "
                         f"(provenance.VERSION_SETS; 'none': the lock only); "
                         f"${provenance.ALLOW_VERSIONS_ENV}, when set, wins")
    ap.add_argument("--mem-fraction", default="0.9",
                    help="XLA_PYTHON_CLIENT_MEM_FRACTION of the device phases unless set")
    ap.add_argument("--wheels", default=None,
                    help="wheel directory (relative to the repository; default: .accel-wheels, "
                         "or .gpu-wheels with --versions gpu-h200: WHEEL_SETS)")
    ap.add_argument("--download-wheels", action="store_true",
                    help="download the wheels of --versions' WHEEL_SETS entry into --wheels and "
                         "exit (make accel-wheels; make gpu-wheels: --versions gpu-h200)")
    ap.add_argument("--phase", default=None, help=argparse.SUPPRESS)
    return ap


def _validate(ap, a) -> None:
    if a.out is None:
        ap.error("--out is required")
    try:
        a.seed_batch_value = parse_seed_batch(a.seed_batch)
    except RunParamsError as e:
        ap.error(str(e))
    if a.max_seeds < 0:
        ap.error("--max-seeds must be >= 0")
    if a.compare_updates < 0:
        ap.error("--compare-updates must be >= 0")
    if a.compare_updates and "default" not in a.compare_precisions:
        ap.error("--compare-precisions must include default (the CPU side runs at default)")
    if a.grow <= 1.0:
        ap.error("--grow must be > 1")
    if a.rows % NUM_ENVS or a.rows < NUM_ENVS * (
            -(-GATE_STEPS // a.loop_steps) + 1 + a.loop_chunks) * a.loop_steps:
        ap.error(f"--rows must be a multiple of {NUM_ENVS} covering the gate and the timed chunks")
    if a.versions != "none" and a.versions not in provenance.VERSION_SETS:
        ap.error(f"--versions {a.versions!r} is not in provenance.VERSION_SETS "
                 f"({', '.join(sorted(provenance.VERSION_SETS))}) nor 'none'")
    out = Path(a.out)
    if out.exists() and not out.is_dir():
        ap.error(f"--out {a.out}: not a directory")


def main(argv=None) -> int:
    """Command line; returns the exit status (module docstring)."""
    t_start = time.perf_counter()
    ap = _parser()
    a = ap.parse_args(argv)
    if a.phase:
        return _child_main(json.loads(a.phase), t_start)
    if a.versions != "none" and a.versions not in provenance.VERSION_SETS:
        ap.error(f"--versions {a.versions!r} is not in provenance.VERSION_SETS "
                 f"({', '.join(sorted(provenance.VERSION_SETS))}) nor 'none'")
    wset = WHEEL_SETS.get(a.versions, WHEEL_SETS["none"])
    a.wheels = a.wheels or wset["dir"]
    wheel_dir = (REPO / a.wheels) if not Path(a.wheels).is_absolute() else Path(a.wheels)
    if a.download_wheels:
        try:
            got = download_wheels(wheel_dir, REPO / wset["lock"], wset["names"],
                                  wset["python"], wset["project"])
        except RuntimeError as e:
            print(f"accel_check: error: {e}", file=sys.stderr)
            return 2
        size = sum(p.stat().st_size for p in got)
        print(f"accel_check: {len(got)} wheels for CPython {wset['python']}, "
              f"{size / 2**20:.2f} MiB in {a.wheels}/ "
              f"(copy it with the working tree): " + ", ".join(p.name for p in got))
        tree = travelling_bytes()
        if tree is not None:
            print(f"accel_check: the working tree that travels with them: "
                  f"{(tree + size) / 2**20:.1f} MiB")
        return 0
    _validate(ap, a)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    check = Check(a, t_start)
    res = check.res
    with tempfile.TemporaryDirectory(prefix="accel-check-") as tmp:
        tmp = Path(tmp)
        try:
            res["wheels"] = install_wheels(wheel_dir, tmp / "site")
        except (RuntimeError, ValueError) as e:
            res["error"] = f"wheels: {e}"
            check.write()
            print(f"accel_check: error: wheels: {e}", file=sys.stderr)
            return 2
        import importlib.util
        missing = [m for m in NEEDED_MODULES if importlib.util.find_spec(m) is None]
        if missing:
            res["error"] = (f"not installed: {', '.join(missing)} (no wheel in {a.wheels}/: "
                            f"run `make {wset['make']}` and copy {a.wheels}/ with the "
                            f"working tree)")
            check.write()
            print(f"accel_check: error: {res['error']}", file=sys.stderr)
            return 2
        if a.versions != "none":
            os.environ.setdefault(provenance.ALLOW_VERSIONS_ENV, a.versions)
        try:
            res["versions"] = provenance.check_pins(REPO / "requirements.lock")
        except provenance.PinError as e:
            # a benchmark, not a round: it measures anyway and records why the check failed
            res["versions"] = {"checked": False, "error": str(e),
                               "versions": provenance.package_versions(provenance.PINNED_PACKAGES)}
            print(f"accel_check: warning: {e}; measuring anyway (recorded)", file=sys.stderr)
        res["code"] = {"git": provenance.git_state(REPO, ["src", "benchmarks"]),
                       "sha256_src_and_check": tree_digest(["src/dreamer_parity",
                                                             "benchmarks/accel_check.py"])}
        check.write()
        code = check.run(tmp)
    print_table(res)
    print(f"accel_check: wrote {Path(a.out) / JSON_NAME}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())

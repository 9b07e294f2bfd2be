"""Size the candidate's loop programs for a TPU v5e on a host without one: compile only.

    TPU_ACCELERATOR_TYPE=v5litepod-1 PYTHONPATH=<unpacked libtpu>:src \\
        python benchmarks/tpu_compile_only.py --seeds 1 10 20 --seed-batch all \\
        --out benchmarks/results/<date>-tpu-compile-only.json
    ... --seeds 100 --seed-batch 10 20 --out <the same file> --append

For each seed count of ``--seeds`` and each value of ``--seed-batch`` (``all``: plain
``jax.vmap`` over the seeds, ``seed_batch=None``; ``N``: groups of N seeds, one group after
another, :func:`dreamer_parity.candidate.runtime.seedmap.per_seed`; ``auto``: what a run on
a TPU takes, ``all``) it builds the run's three programs as
:mod:`dreamer_parity.candidate.runtime.program_store` exports them
(:func:`~dreamer_parity.candidate.runtime.loop.seed_programs`: ``init``, ``chunk`` and
``point`` over the seeds, no seed mesh, ``chunk`` and ``point`` donating the carry, no
compiler options: those of the loop are XLA:CPU's only), lowers them for the one chip of a
compile-only TPU v5e topology
(``jax.experimental.topologies.get_topology_desc("v5e:1x1", platform="tpu")``) and
compiles them with the TPU compiler of the ``libtpu`` package, on this host's CPU.
``program_store`` also serialises them with ``jax.export`` and reads them back; that
round trip hands XLA the same module and is left out.  Nothing runs.

Per program it records the compiler's ``memory_analysis()`` (argument, output, alias,
temporary and generated-code bytes), ``cost_analysis()`` (flops, bytes accessed; XLA
counts a loop body once, so these are per chunk program, not per update) and the seconds
to lower and to compile, and ``traffic``: the bytes the program moves in HBM and on chip,
estimated from its optimized HLO with every loop's trip count
(:func:`benchmarks.lib.hlo_traffic.traffic`; the run's fori_loop of updates has a traced
bound, so the chunk program counts one update per vector step there), with the
source lines that move the most HBM bytes and the most on-chip bytes; per entry the device memory a program needs, ``argument + output
- alias + temp`` bytes, its largest over the three programs, and whether that fits
``--hbm-bytes`` less ``--headroom`` (a fraction of it).  These are the compiler's
estimates, not device measurements.

The ``init`` and ``point`` programs do not run the train step, so ``--seed-batch`` does not
change them: they are compiled once per seed count and their figures repeated.  The
output JSON (rewritten after every entry, so an interrupted sizing keeps what it
finished) holds no absolute path and no host name; ``--append`` keeps the entries of an
existing file of the same settings (an entry of the same seeds and seed batch is
replaced), and each entry names the invocation (command line, date, commit) that made
it.  The end prints a Markdown table.

Needs the ``libtpu`` package (the TPU compiler; not in requirements.lock): a wheel
unpacked on ``PYTHONPATH``.  The script sets ``TPU_ACCELERATOR_TYPE=v5litepod-1``,
``TPU_WORKER_HOSTNAMES=localhost`` and ``JAX_PLATFORMS=cpu`` where they are unset.  Each
full-profile chunk compile takes minutes on 2 cores (docs/PERFORMANCE.md#tpu).

Exit status: 0, 2 on bad arguments or when libtpu cannot be imported (one line).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))   # benchmarks.lib

from benchmarks.lib.cli import positive_int  # noqa: E402  (standard library only)
from benchmarks.lib.hlo_traffic import traffic  # noqa: E402  (standard library only)
from dreamer_parity import provenance, records  # noqa: E402  (standard library only)
from dreamer_parity.candidate.config import TWOHOT_INDEX  # noqa: E402  (imports no jax)
from dreamer_parity.candidate.runtime.run import (  # noqa: E402  (imports no jax)
    RunParamsError, parse_seed_batch)

SCHEMA = "tpu_compile_only/1"
PROGRAMS = ("init", "chunk", "point")
NUM_ENVS = 16
#: HBM of the lent TPU v5e as its jax reports it (``memory_stats()["bytes_limit"]``,
#: benchmarks/results/2026-12-06-tpu-loop.json): 15.75 GiB.
V5E_HBM_BYTES = 16_909_336_064
#: Default headroom, a fraction of the HBM kept free (docs/PERFORMANCE.md#tpu says why).
HEADROOM = 0.10
#: Environment of a compile-only TPU topology on a CPU host (set where unset).
TPU_ENV = {"TPU_ACCELERATOR_TYPE": "v5litepod-1", "TPU_WORKER_HOSTNAMES": "localhost",
           "JAX_PLATFORMS": "cpu"}
#: Source lines kept per program in ``traffic.by_source``: the largest this many by HBM
#: bytes and by on-chip bytes (hlo_traffic.traffic's ``top``).
TRAFFIC_ROWS = 15
MEMORY_FIELDS = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
                 "temp_size_in_bytes", "generated_code_size_in_bytes")


def twohot_form_on_tpu(setting: str) -> str:
    """``AgentConfig.twohot_index`` ``setting`` as a run on the TPU resolves it
    (``twohot.index_form(setting, backend="tpu")``): ``window`` or ``compare``."""
    from dreamer_parity.candidate import twohot
    return twohot.index_form(setting, backend="tpu")


class SizingError(RuntimeError):
    """The sizing cannot start (one-line message): libtpu missing, no TPU topology."""


def resolve_seed_batch(text: str) -> int | None:
    """A ``--seed-batch`` word as the programs take it on a TPU.

    ``"all"`` and ``"auto"`` (a TPU run's default, :func:`.seedmap.default_seed_batch`)
    give None (plain ``vmap``); a positive whole number N gives N.

    Raises:
      argparse.ArgumentTypeError: any other text (the message names ``--seed-batch``).
    """
    try:
        value = parse_seed_batch(text)
    except RunParamsError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return None if value == "auto" else value


def plan(seeds: list[int], seed_batches: list[int | None]) -> list[tuple[int, int | None]]:
    """The ``(seeds, seed_batch)`` entries to compile, in order: every count with every
    seed batch, duplicates dropped.  A batch of at least the count stays as given: it is
    one group of every seed inside a one-trip loop, not the plain ``vmap`` program."""
    out = []
    for n in seeds:
        for sb in seed_batches:
            if (n, sb) not in out:
                out.append((n, sb))
    return out


def memory_figures(stats) -> dict:
    """``compiled.memory_analysis()`` as a dict of :data:`MEMORY_FIELDS` (bytes, ints),
    plus ``need_bytes``: argument + output - alias + temp, what the program holds on the
    device while it runs (its generated code aside).

    Raises:
      ValueError: ``stats`` lacks one of the fields (the analysis is not available).
    """
    out = {}
    for f in MEMORY_FIELDS:
        v = getattr(stats, f, None)
        if v is None:
            raise ValueError(f"memory analysis without {f}: {stats!r}"[:300])
        out[f.replace("_size_in_bytes", "_bytes")] = int(v)
    out["need_bytes"] = (out["argument_bytes"] + out["output_bytes"] - out["alias_bytes"]
                         + out["temp_bytes"])
    return out


def cost_figures(cost) -> dict:
    """``compiled.cost_analysis()`` (a dict, or a list of one dict) as ``{"flops",
    "bytes_accessed", "transcendentals"}`` (floats; None where the analysis has none)."""
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    cost = cost or {}
    get = lambda k: None if cost.get(k) is None else float(cost[k])  # noqa: E731
    return {"flops": get("flops"), "bytes_accessed": get("bytes accessed"),
            "transcendentals": get("transcendentals")}


def verdict(programs: dict, hbm_bytes: int, headroom: float) -> dict:
    """Whether an entry's programs fit one chip.

    Args:
      programs: ``{name: {"memory": memory_figures(...)}}`` of the compiled programs.
      hbm_bytes: the chip's memory; headroom: the fraction of it kept free, in [0, 1).

    Returns:
      ``{"need_bytes": the largest need_bytes of the programs, "need_program": its name,
      "budget_bytes": hbm_bytes * (1 - headroom), "fits": need <= budget}``.
    """
    name = max(programs, key=lambda p: programs[p]["memory"]["need_bytes"])
    need = programs[name]["memory"]["need_bytes"]
    budget = int(hbm_bytes * (1.0 - headroom))
    return {"need_bytes": need, "need_program": name, "budget_bytes": budget,
            "fits": need <= budget}


def entry_key(entry: dict) -> tuple:
    """``(seeds, seed_batch)`` of a result entry (None sorts before every number)."""
    sb = entry["seed_batch"]
    return entry["seeds"], -1 if sb is None else sb


def merge(old: list[dict], new: list[dict]) -> list[dict]:
    """``old`` entries with those of ``new`` added, an entry of the same seeds and seed
    batch replaced by the new one; sorted by seeds, then seed batch (all first)."""
    by = {entry_key(e): e for e in old}
    by.update({entry_key(e): e for e in new})
    return [by[k] for k in sorted(by)]


def previous(prev: dict, settings: dict) -> tuple[list[dict], list[dict]]:
    """The invocations and entries of an earlier result file that ``--append`` keeps.

    Args:
      prev: the file's JSON object; settings: this invocation's ``settings`` (without
        ``device_kind``).

    Returns:
      ``(invocations, results)``.  A file of one invocation without an ``invocations``
      list (its ``argv``, ``date_utc`` and ``code`` at the top) gives that one, and its
      entries point at it (``"invocation": 0``).

    Raises:
      ValueError: another schema, or settings that differ from ``settings`` (the figures
        of other settings are not comparable; the message names the keys).
    """
    if prev.get("schema") != SCHEMA:
        raise ValueError(f"schema {prev.get('schema')!r}, not {SCHEMA!r}")
    theirs = {k: v for k, v in prev.get("settings", {}).items() if k != "device_kind"}
    differ = sorted(k for k in set(theirs) | set(settings) if theirs.get(k) != settings.get(k))
    if differ:
        raise ValueError(f"its settings differ in {', '.join(differ)}")
    invocations = prev.get("invocations")
    results = [dict(e) for e in prev.get("results", [])]
    if invocations is None:
        invocations = [{k: prev.get(k) for k in ("argv", "date_utc", "code")}]
        for e in results:
            e.setdefault("invocation", 0)
    return list(invocations), results


def table(entries: list[dict]) -> str:
    """The entries as a Markdown table: seeds, seed batch, the chunk program's argument,
    temporary and needed GiB, GFLOP and GB accessed, compile seconds, and the largest
    need of the three programs against the budget."""
    gib = lambda b: f"{b / 2**30:.2f}"  # noqa: E731
    lines = ["| seeds | seed batch | chunk: arguments GiB | chunk: temporaries GiB "
             "| chunk: needs GiB | chunk: GFLOP | chunk: GB accessed "
             "| chunk: HBM GB, padded (est.) | chunk compile s "
             "| largest need GiB (program) | fits |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in entries:
        c = e["programs"].get("chunk")
        cells = ["-"] * 7
        if c:
            m, k = c["memory"], c["cost"]
            hbm = c.get("traffic", {}).get("hbm", {}).get("padded_bytes")
            cells = [gib(m["argument_bytes"]), gib(m["temp_bytes"]), gib(m["need_bytes"]),
                     "-" if k["flops"] is None else f"{k['flops'] / 1e9:.1f}",
                     "-" if k["bytes_accessed"] is None else f"{k['bytes_accessed'] / 1e9:.1f}",
                     "-" if hbm is None else f"{hbm / 1e9:.2f}",
                     f"{c['compile_s']:.0f}"]
        v = e["verdict"]
        lines.append(f"| {e['seeds']} | {'all' if e['seed_batch'] is None else e['seed_batch']}"
                     f" | " + " | ".join(cells) + f" | {gib(v['need_bytes'])} "
                     f"({v['need_program']}) | {'yes' if v['fits'] else 'no'} |")
    return "\n".join(lines)


def _argv_recorded(argv: list[str]) -> list[str]:
    """The command line with the value of ``--out`` written as its file name only."""
    out, after_out = [], False
    for x in argv:
        if after_out:
            out.append(Path(x).name)
            after_out = False
        elif x == "--out":
            out.append(x)
            after_out = True
        else:
            out.append(f"--out={Path(x[6:]).name}" if x.startswith("--out=") else x)
    return out


# --------------------------------------------------------------------------- compiling

def check_libtpu() -> str:
    """The installed libtpu version (``"unknown"`` when it has no metadata).

    Raises:
      SizingError: the ``libtpu`` package cannot be found.
    """
    if importlib.util.find_spec("libtpu") is None:
        raise SizingError("the libtpu package (the TPU compiler, not in requirements.lock) is "
                          "not importable: put an unpacked libtpu wheel (0.0.42.1 was used) "
                          "on PYTHONPATH")
    from importlib import metadata
    try:
        return metadata.version("libtpu")
    except metadata.PackageNotFoundError:
        return "unknown"


def chip(topology: str):
    """``(topology description, sharding on its first chip)`` of a compile-only TPU topology
    (``jax.experimental.topologies.get_topology_desc``; imports jax).

    Raises:
      SizingError: the topology cannot be made (the message of jax's error, one line).
    """
    from jax.experimental import topologies
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    try:
        topo = topologies.get_topology_desc(topology_name=topology, platform="tpu",
                                            chips_per_host_bounds=(1, 1, 1))
    except Exception as e:  # noqa: BLE001 - one line for the user
        raise SizingError(f"no TPU topology {topology!r}: {type(e).__name__}: "
                          f"{str(e).splitlines()[0][:200] if str(e) else ''}") from e
    return topo, NamedSharding(Mesh(topo.devices[:1], ("chip",)), PartitionSpec())


class Compiler:
    """Compiles the loop programs of one agent configuration for a TPU topology.

    Args:
      profile: the agent profile (``full``, ``smoke``).
      topology: a ``get_topology_desc`` topology name (``v5e:1x1``).
      rows, chunk_steps, eval_episodes: the loop's settings (replay capacity
        ``rows // 16`` per env).
      precision: ``jax_default_matmul_precision`` (``default`` keeps jax's own).
      twohot_index: ``AgentConfig.twohot_index`` resolved for the TPU (``window`` or
        ``compare``, ``twohot.index_form(setting, backend="tpu")``).
      head_rows: ``AgentConfig.head_rows`` (None: the profile's default).
      log: ``callable(str)`` for progress lines.

    Raises:
      SizingError: the topology cannot be made (the message of jax's error, one line).
    """

    def __init__(self, profile: str, topology: str, rows: int, chunk_steps: int,
                 eval_episodes: int, precision: str, twohot_index: str = "compare", log=print,
                 head_rows: int | None = None):
        import jax

        from dreamer_parity.candidate import agent
        from dreamer_parity.candidate.config import AgentConfig

        jax.config.update("jax_default_matmul_precision",
                          None if precision == "default" else precision)
        topo, self.sharding = chip(topology)
        self.jax, self.agent = jax, agent
        self.cfg = AgentConfig.for_profile(profile, twohot_index=twohot_index,
                                           **({} if head_rows is None else
                                              {"head_rows": head_rows}))
        self.device_kind = topo.devices[0].device_kind
        self.capacity, self.chunk_steps = rows // NUM_ENVS, chunk_steps
        self.eval_episodes, self.log = eval_episodes, log
        self._same: dict = {}   # seeds -> figures of init and point (no train step in them)

    def _sds(self, tree):
        jax = self.jax
        return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype,
                                                           sharding=self.sharding), tree)

    def _one(self, name: str, fn, args) -> dict:
        t0 = time.perf_counter()
        lowered = fn.lower(*args)
        t1 = time.perf_counter()
        compiled = lowered.compile()
        t2 = time.perf_counter()
        out = {"lower_s": t1 - t0, "compile_s": t2 - t1,
               "memory": memory_figures(compiled.memory_analysis()),
               "cost": cost_figures(compiled.cost_analysis()),
               "traffic": traffic(compiled.as_text(), top=TRAFFIC_ROWS)}
        self.log(f"  {name}: compiled in {t2 - t1:.1f} s, needs "
                 f"{out['memory']['need_bytes'] / 2**30:.2f} GiB (temporaries "
                 f"{out['memory']['temp_bytes'] / 2**30:.2f})")
        return out

    def compile(self, seeds: int, seed_batch: int | None, programs=PROGRAMS) -> dict:
        """Figures of ``programs`` at ``seeds`` seeds and ``seed_batch``:
        ``{"seeds", "seed_batch", "programs": {name: {"lower_s", "compile_s", "memory",
        "cost", "reused"?}}}`` (``reused``: init and point figures taken from the same
        seed count's earlier entry)."""
        jax = self.jax
        import jax.numpy as jnp

        from dreamer_parity.candidate.runtime import loop
        from dreamer_parity.schedule import Schedule

        fns, _ = loop.seed_programs(self.agent, self.cfg, self.capacity, self.chunk_steps,
                                    self.eval_episodes, Schedule(), seed_batch)
        one = loop.seed_keys(0)
        keys = {k: jax.ShapeDtypeStruct((seeds,) + tuple(v.shape), v.dtype)
                for k, v in one.items()}
        carry = jax.eval_shape(fns["init"], keys)
        jitted = {"init": (jax.jit(fns["init"]), (keys,)),
                  "chunk": (jax.jit(fns["chunk"], donate_argnums=0),
                            (carry, jax.ShapeDtypeStruct((self.chunk_steps,), jnp.int32))),
                  "point": (jax.jit(fns["point"], donate_argnums=0), (carry,))}
        out = {}
        same = self._same.setdefault(seeds, {})
        for name in programs:
            if name in same:
                out[name] = dict(same[name], reused=True)
                continue
            fn, args = jitted[name]
            out[name] = self._one(name, fn, self._sds(args))
            if name != "chunk":
                same[name] = out[name]
        return {"seeds": seeds, "seed_batch": seed_batch, "programs": out}


# --------------------------------------------------------------------------- main

def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= v < 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} must lie in [0, 1)")
    return v


def parser() -> argparse.ArgumentParser:
    """The command line (module docstring)."""
    from dreamer_parity import records as records_cli

    ap = records_cli.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="See the module docstring and docs/PERFORMANCE.md#tpu.")
    ap.add_argument("--out", required=True, help="the result JSON file (rewritten after every "
                                                 "entry)")
    ap.add_argument("--append", action="store_true",
                    help="keep the entries of an existing --out (same seeds and batch: replaced)")
    ap.add_argument("--seeds", type=positive_int, nargs="+", required=True,
                    help="seed counts to compile for")
    ap.add_argument("--seed-batch", type=resolve_seed_batch, nargs="+", default=[None],
                    metavar="all|auto|N", help="seed batches (default all: plain vmap)")
    ap.add_argument("--programs", nargs="+", default=list(PROGRAMS), choices=PROGRAMS)
    ap.add_argument("--profile", default="full", choices=("full", "smoke"))
    ap.add_argument("--topology", default="v5e:1x1", help="compile-only TPU topology name")
    ap.add_argument("--rows", type=positive_int, default=24000,
                    help="replay sized for these rows (a multiple of 16)")
    ap.add_argument("--chunk-steps", type=positive_int, default=4,
                    help="vector steps per chunk (4: accel_check's loop phase; a run takes "
                         "the largest divisor of eval_every / 16 up to 25)")
    ap.add_argument("--eval-episodes", type=positive_int, default=10)
    ap.add_argument("--precision", default="highest", choices=("default", "high", "highest"),
                    help="jax_default_matmul_precision (highest: the candidate's TPU runs)")
    ap.add_argument("--twohot-index", default="auto", choices=TWOHOT_INDEX,
                    help="AgentConfig.twohot_index (auto: what a run on the TPU uses, "
                         "compare)")
    ap.add_argument("--head-rows", type=positive_int, default=None,
                    help="AgentConfig.head_rows, imagined rows per pass of the heads (default: "
                         "the profile's; a speed setting: the same update up to float32 rounding)")
    ap.add_argument("--hbm-bytes", type=positive_int, default=V5E_HBM_BYTES,
                    help="the chip's memory (default: the lent v5e's 15.75 GiB)")
    ap.add_argument("--headroom", type=_fraction, default=HEADROOM,
                    help="fraction of the chip's memory kept free (default 0.10)")
    return ap


def main(argv=None) -> int:
    """Command line; returns the exit status (module docstring)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = parser()
    a = ap.parse_args(argv)
    from dreamer_parity import records as _records
    try:      # every argument before anything is computed (one line, exit 2)
        _records.check_target(a.out, "--out", "file", inside=False)
        for s in a.seeds:
            _records.check_range(s, "--seeds", 1, 4096)
        _records.check_range(a.rows, "--rows", NUM_ENVS, 1_000_000)
        _records.check_range(a.chunk_steps, "--chunk-steps", 1, 1000)
        _records.check_range(a.eval_episodes, "--eval-episodes", 1, 1000)
    except _records.RecordError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.rows % NUM_ENVS:
        ap.error(f"--rows {a.rows} is not a multiple of {NUM_ENVS}")
    out = Path(a.out)
    for k, v in TPU_ENV.items():
        os.environ.setdefault(k, v)
    settings = {"topology": a.topology, "profile": a.profile, "rows": a.rows,
                "capacity": a.rows // NUM_ENVS, "chunk_steps": a.chunk_steps,
                "eval_episodes": a.eval_episodes, "precision": a.precision,
                "hbm_bytes": a.hbm_bytes, "headroom": a.headroom,
                # what a run on the TPU resolves (this host's own backend is the CPU)
                "twohot_index": twohot_form_on_tpu(a.twohot_index),
                "head_rows": a.head_rows}
    invocations, old = [], []
    if a.append and out.exists():
        try:
            invocations, old = previous(records.read_json(out, out.name), settings)
        except (OSError, ValueError) as e:
            print(f"tpu_compile_only: error: --append {out.name}: {e}", file=sys.stderr)
            return 2
    log = lambda m: print(f"[tpu_compile_only] {m}", file=sys.stderr, flush=True)  # noqa: E731
    try:
        libtpu = check_libtpu()
        compiler = Compiler(a.profile, a.topology, a.rows, a.chunk_steps, a.eval_episodes,
                            a.precision, settings["twohot_index"], log, a.head_rows)
    except SizingError as e:
        print(f"tpu_compile_only: error: {e}", file=sys.stderr)
        return 2
    import jax
    import jaxlib
    invocations.append({"argv": _argv_recorded(argv),
                        "date_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                        "code": provenance.git_state(REPO, ["src", "benchmarks"])})
    res = {"schema": SCHEMA,
           "note": "the TPU compiler's estimates for a compile-only topology, not device "
                   "measurements",
           "settings": {**settings, "device_kind": compiler.device_kind},
           "host": {"cpu": provenance.cpu_model(), "cpu_count": os.cpu_count()},
           "versions": {"jax": jax.__version__, "jaxlib": jaxlib.__version__,
                        "libtpu": libtpu},
           "invocations": invocations, "results": old}
    for n, sb in plan(a.seeds, a.seed_batch):
        log(f"{n} seeds, seed batch {'all' if sb is None else sb} ...")
        t0 = time.perf_counter()
        entry = compiler.compile(n, sb, a.programs)
        entry["verdict"] = verdict(entry["programs"], a.hbm_bytes, a.headroom)
        entry["seconds"] = time.perf_counter() - t0
        entry["invocation"] = len(invocations) - 1
        res["results"] = merge(res["results"], [entry])
        records.write_json(out, res)
        v = entry["verdict"]
        log(f"{n} seeds, seed batch {'all' if sb is None else sb}: needs "
            f"{v['need_bytes'] / 2**30:.2f} GiB ({v['need_program']}) of "
            f"{v['budget_bytes'] / 2**30:.2f}: {'fits' if v['fits'] else 'does not fit'}")
    print(table(res["results"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

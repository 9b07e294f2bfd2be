"""The run's three programs, exported once and reloaded: a warm start does not trace again.

Tracing the agent and lowering the chunk program (the train step inside a scan of vector
steps, mapped over seeds by :func:`.seedmap.over_seeds`) is Python work that JAX's
persistent compilation cache does not save, and at the full profile it takes longer than
loading the compiled executable from that cache (docs/PERFORMANCE.md, "Current figures":
the cold compile's program part against the warm compile).  :func:`load_or_build` therefore exports ``init``, ``chunk`` and ``point``
with :mod:`jax.export` (serialised StableHLO) the first time, keeps them under
``<root>/<key>/`` and later deserialises them.  Wrapped in ``jax.jit`` with the loop's
donation and compiler options they lower in well under a second, and their XLA compile is
a hit in the persistent compilation cache when that cache is warm.

Both paths execute the *deserialised* program (a fresh export is serialised and read back
before use), so a run computes the same numbers whether its programs came from the store or
were just built.

The key hashes everything the programs depend on: the package's code
(:func:`.checkpoint.code_hash`, plus the agent's file when it lies outside the package),
the agent module's name, the agent config, the loop's static settings (replay capacity,
vector steps per chunk, evaluation episodes, number of seeds, the replay/ratio schedule,
how many seeds the train step batches, :mod:`.seedmap`),
jax and jaxlib versions, the backend, the compiler options and the matrix precision
(``jax_default_matmul_precision``, which the traced dots carry).  :func:`key_for` computes
it without tracing anything, for a backend other than this process's too (a program
compiled here for a GPU: :mod:`dreamer_parity.accel.precompile`).  An entry is a directory
with ``init.bin``, ``chunk.bin``, ``point.bin`` (``Exported.serialize`` of each program
with its pytree arguments and results flattened to leaves), ``trees.pkl`` (the pickled
``PyTreeDef`` of each program's arguments and results: the carry holds optax states and
gymnax env states, which ``jax.export`` cannot serialise itself) and ``meta.json`` (format,
metric names); it is written into a temporary directory and renamed into place, so a
half-written entry is never read.  An entry that fails to load is rebuilt (and replaced).
The store is a per-user cache: only this code writes it, so unpickling its trees is safe.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax
import jaxlib
from jax import export

from ...schedule import Schedule
from . import checkpoint as ckptlib
from . import loop as looplib
from . import seedmesh

__all__ = ["default_root", "program_key", "key_for", "load_or_build", "compile_all",
           "use_compilation_cache", "ProgramStoreError", "PROGRAMS"]

#: The programs of a run, in the order they are stored.
PROGRAMS = ("init", "chunk", "point")
_META = "meta.json"
_TREES = "trees.pkl"
_FORMAT = 1
#: ``jax.export`` platform of a backend name where the two differ.
_EXPORT_PLATFORM = {"gpu": "cuda"}


class ProgramStoreError(RuntimeError):
    """A store entry exists but cannot be used (unreadable, or written by other code)."""


def default_root() -> Path:
    """``$DREAMER_PARITY_PROGRAMS`` if set, else
    ``${XDG_CACHE_HOME:-~/.cache}/dreamer-parity/candidate-programs`` (per user, outside the
    repository; never a DVC output)."""
    env = os.environ.get("DREAMER_PARITY_PROGRAMS")
    if env:
        return Path(env)
    from .checkpoint import user_cache_root
    return user_cache_root() / "candidate-programs"


def use_compilation_cache() -> str:
    """Turn on JAX's persistent compilation cache unless it is configured already.

    Leaves ``$JAX_COMPILATION_CACHE_DIR`` (or an explicit ``jax_compilation_cache_dir``)
    alone; otherwise uses ``${XDG_CACHE_HOME:-~/.cache}/dreamer-parity/jaxcache-candidate``
    (not the reference set-up's ``jaxcache``, which its own jax version fills).  Returns the
    directory in use.
    """
    current = jax.config.jax_compilation_cache_dir
    if current:
        return current
    from .checkpoint import user_cache_root
    path = str(user_cache_root() / "jaxcache-candidate")
    jax.config.update("jax_compilation_cache_dir", path)
    return path


def program_key(agent, cfg_dict: dict, capacity: int, chunk_steps: int, eval_episodes: int,
                n_seeds: int, s: Schedule, compiler_options: dict | None,
                seed_batch: int | None = None, seed_devices: int = 1,
                backend: str | None = None) -> str:
    """16 hex digits identifying the programs (see the module docstring); ``backend``
    defaults to ``jax.default_backend()``, the matrix precision is this process's."""
    agent_file = getattr(agent, "__file__", None)
    precision = jax.config.jax_default_matmul_precision
    blob = json.dumps({
        "format": _FORMAT,
        "code": ckptlib.code_hash(extra_files=[agent_file] if agent_file else []),
        "agent": getattr(agent, "__name__", str(agent)), "agent_config": cfg_dict,
        "capacity": capacity, "chunk_steps": chunk_steps, "eval_episodes": eval_episodes,
        "seeds": n_seeds, "schedule": dataclasses.asdict(s),
        "jax": jax.__version__, "jaxlib": jaxlib.__version__,
        "backend": backend or jax.default_backend(),
        "compiler_options": compiler_options or {}, "seed_batch": seed_batch,
        "seed_devices": seed_devices,
        # the default precision adds nothing, so that keys made before it was part stay valid
        **({} if precision is None else {"matmul_precision": str(precision)}),
    }, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def key_for(agent, cfg_dict: dict, capacity: int, chunk_steps: int, eval_episodes: int,
            n_seeds: int, s: Schedule = Schedule(), seed_batch="auto", mesh=None,
            backend: str | None = None) -> tuple[str, int | None, dict | None]:
    """The store key of a run's programs, decided here for :func:`load_or_build` and for the
    compiled programs of :mod:`.executables`; nothing is traced.

    Args:
      agent, cfg_dict, capacity, chunk_steps, eval_episodes, s: as :func:`load_or_build`.
      n_seeds: seeds of the run.
      seed_batch: ``"auto"``, None or a positive int (:func:`.loop.resolve_seed_batch`,
        resolved for ``backend``).
      mesh: None, or the run's :func:`.seedmesh.seed_mesh` (one device per seed).
      backend: the backend the programs are for (default ``jax.default_backend()``).

    Returns:
      ``(key, resolved seed_batch, compiler options of chunk and point)``.

    Raises:
      ValueError: a bad ``seed_batch``, or a mesh whose device count is not ``n_seeds``.
    """
    opts = looplib.compiler_options(agent, backend)
    seed_batch = looplib.resolve_seed_batch(seed_batch, backend)
    devices = 1 if mesh is None else int(mesh.devices.size)
    if mesh is not None and devices != n_seeds:
        raise ValueError(f"programs: the mesh has {devices} devices for {n_seeds} seeds "
                         f"(one device per seed)")
    key = program_key(agent, cfg_dict, capacity, chunk_steps, eval_episodes, n_seeds, s,
                      {**(opts or {}), "init": looplib.init_compiler_options(backend)},
                      seed_batch, seed_devices=devices, backend=backend)
    return key, seed_batch, opts


def _flat(fn, in_tree, out_trees: dict, name: str):
    """``fn`` taking and returning leaves; records its result tree in ``out_trees[name]``."""
    def f(*leaves):
        out = fn(*jax.tree.unflatten(in_tree, leaves))
        out_leaves, out_trees[name] = jax.tree.flatten(out)
        return out_leaves
    return f


def _tree_call(exported, in_tree, out_tree, name: str):
    """A function of the program's pytree arguments calling the flat exported program."""
    def f(*args):
        leaves, tree = jax.tree.flatten(args)
        if tree != in_tree:
            raise ValueError(f"program {name}: arguments {tree} do not match the stored "
                             f"{in_tree}")
        return jax.tree.unflatten(out_tree, exported.call(*leaves))
    return f


def _wrap(exported: dict, trees: dict, opts, mesh=None, backend=None) -> dict:
    call = seedmesh.shard_seeds({p: _tree_call(exported[p], *trees[p], p) for p in PROGRAMS},
                                mesh)
    return {"init": jax.jit(call["init"],
                            compiler_options=looplib.init_compiler_options(backend)),
            "chunk": jax.jit(call["chunk"], donate_argnums=0, compiler_options=opts),
            "point": jax.jit(call["point"], donate_argnums=0, compiler_options=opts)}


def _load(entry: Path) -> tuple[dict, dict, dict]:
    try:
        meta = json.loads((entry / _META).read_text())
        if meta.get("format") != _FORMAT:
            raise ProgramStoreError(f"{entry.name}/{_META}: format {meta.get('format')}, "
                                    f"expected {_FORMAT}")
        trees = pickle.loads((entry / _TREES).read_bytes())
        exported = {p: export.deserialize(bytearray((entry / f"{p}.bin").read_bytes()))
                    for p in PROGRAMS}
    except ProgramStoreError:
        raise
    except Exception as e:  # noqa: BLE001 - any unreadable entry is rebuilt
        raise ProgramStoreError(f"{entry.name}: {type(e).__name__}: {e}") from e
    return exported, trees, meta


def _shapes(tree, avals, mesh=None):
    """The pytree ``tree`` of ShapeDtypeStructs of ``avals``; with a mesh, the avals are
    one device's block (one seed) and the result is the whole seed axis, laid along it."""
    n = 1 if mesh is None else mesh.devices.size
    structs = [jax.ShapeDtypeStruct((a.shape[0] * n,) + tuple(a.shape[1:]), a.dtype)
               for a in avals]
    out = jax.tree.unflatten(tree, structs)
    return out if mesh is None else seedmesh.put_seeds(out, mesh)


def _export(agent, cfg, capacity, chunk_steps, eval_episodes, s, example_keys, seed_batch,
            platforms=None):
    fns, names = looplib.seed_programs(agent, cfg, capacity, chunk_steps, eval_episodes, s,
                                       seed_batch)
    out_trees: dict = {}
    exported, trees = {}, {}

    def run_export(name, args):
        leaves, in_tree = jax.tree.flatten(args)
        exported[name] = export.export(jax.jit(_flat(fns[name], in_tree, out_trees, name)),
                                       platforms=platforms)(
            *[jax.ShapeDtypeStruct(x.shape, x.dtype) for x in leaves])
        trees[name] = (in_tree, out_trees[name])

    run_export("init", (example_keys,))
    carry = _shapes(trees["init"][1], exported["init"].out_avals)
    run_export("chunk", (carry, jax.ShapeDtypeStruct((chunk_steps,), jax.numpy.int32)))
    run_export("point", (carry,))
    meta = {"format": _FORMAT, "metric_names": list(names)}
    return exported, trees, meta


def _save(root: Path, key: str, exported: dict, trees: dict, meta: dict) -> dict:
    """Serialise into a temporary directory, rename it to ``root/key``; returns the
    serialised bytes per program."""
    root.mkdir(parents=True, exist_ok=True)
    blobs = {p: bytes(exported[p].serialize()) for p in PROGRAMS}
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root))
    try:
        for p in PROGRAMS:
            (tmp / f"{p}.bin").write_bytes(blobs[p])
        (tmp / _TREES).write_bytes(pickle.dumps(trees))
        (tmp / _META).write_text(json.dumps(meta, indent=1, sort_keys=True))
        dest = root / key
        if dest.exists():
            shutil.rmtree(dest, ignore_errors=True)
        try:
            os.replace(tmp, dest)
        except OSError:   # another process put the same entry in place first
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return blobs


def load_or_build(agent, cfg, cfg_dict: dict, capacity: int, chunk_steps: int,
                  eval_episodes: int, example_keys: dict, s: Schedule = Schedule(),
                  root: Path | None = None, log=None, seed_batch="auto", mesh=None,
                  backend: str | None = None):
    """The run's jitted programs, from the store when it holds them, else exported now.

    Args:
      agent, cfg: the agent module and its config (:func:`.loop.build`).
      cfg_dict: the config as a JSON-able dict (part of the key).
      capacity, chunk_steps, eval_episodes, s: as :func:`.loop.build`.
      example_keys: the stacked seed keys ``{name: uint32[seeds, 2]}`` (or their
        ShapeDtypeStructs) the ``init`` program takes; their leading size is the seed count.
      root: store directory (default :func:`default_root`).
      log: optional ``callable(str)`` for one line saying where the programs came from.
      seed_batch: as :func:`.loop.build` (resolved before it enters the key).
      mesh: None, or a :func:`.seedmesh.seed_mesh` with one device per seed: the store
        then holds the one-seed programs, and the returned ones run them on every device
        (:func:`.seedmesh.shard_seeds`).
      backend: the backend the programs are for (default ``jax.default_backend()``; ``"gpu"``
        in a process without one exports for ``cuda``, to be compiled for a GPU that is only
        described, :func:`compile_all` with a device).

    Returns:
      ``(programs, carry_shape, info)``: a :class:`.loop.Programs` whose ``init``, ``chunk``
      and ``point`` are ``jax.jit`` wrappers of the deserialised programs (``chunk`` and
      ``point`` donate the carry and carry :func:`.loop.compiler_options`); the carry's
      pytree of ``jax.ShapeDtypeStruct`` (laid along the mesh's seed axis when there is
      one); and ``{"key", "source": "store" | "built",
      "seconds", "seed_batch"}`` (seconds to load or to trace, export and store; the
      resolved ``seed_batch`` the programs were built with).

    Raises:
      ValueError: ``seed_batch`` is neither ``"auto"``, None nor a positive integer, or
        ``mesh`` has another device count than there are seeds (before anything is
        traced); a returned program called with arguments whose pytree differs from the
        stored one (``program <name>: arguments ...``).
      Whatever tracing the agent raises; an unusable store entry is rebuilt, not raised.
    """
    t0 = time.perf_counter()
    root = Path(root) if root is not None else default_root()
    n_seeds = int(jax.tree.leaves(example_keys)[0].shape[0])
    key, seed_batch, opts = key_for(agent, cfg_dict, capacity, chunk_steps, eval_episodes,
                                    n_seeds, s, seed_batch, mesh, backend)
    entry = root / key
    exported = trees = meta = None
    source = "built"
    if entry.is_dir():
        try:
            exported, trees, meta = _load(entry)
            source = "store"
        except ProgramStoreError as e:
            if log:
                log(f"program store entry unusable, rebuilding: {e}")
    if exported is None:
        # with a mesh, each device runs the program of one seed
        local_keys = example_keys if mesh is None else jax.tree.map(
            lambda x: jax.ShapeDtypeStruct((1,) + tuple(x.shape[1:]), x.dtype), example_keys)
        platforms = None if backend is None else (_EXPORT_PLATFORM.get(backend, backend),)
        exported, trees, meta = _export(agent, cfg, capacity, chunk_steps, eval_episodes, s,
                                        local_keys, seed_batch, platforms)
        blobs = _save(root, key, exported, trees, meta)
        # Run what a later start will load: the serialised programs, read back.
        exported = {p: export.deserialize(bytearray(blobs[p])) for p in PROGRAMS}
    fns = _wrap(exported, trees, opts, mesh, backend)
    progs = looplib.Programs(init=fns["init"], chunk=fns["chunk"], point=fns["point"],
                             metric_names=tuple(meta["metric_names"]), capacity=capacity,
                             chunk_steps=chunk_steps, mesh=mesh)
    carry_shape = _shapes(trees["init"][1], exported["init"].out_avals, mesh)
    seconds = time.perf_counter() - t0
    if log:
        log(f"programs {'loaded from the store' if source == 'store' else 'traced and stored'}"
            f" in {seconds:.1f} s (program key {key})")
    return progs, carry_shape, {"key": key, "source": source, "seconds": seconds,
                                "seed_batch": seed_batch}


def compile_all(progs, example_keys, carry_shape, device=None) -> looplib.Programs:
    """Lower the three programs of ``progs`` and XLA-compile them at the same time.

    XLA:CPU compiles the chunk program mostly on one thread, so compiling ``init`` and
    ``point`` in threads beside it shortens a cold compile (docs/PERFORMANCE.md, "Levers
    measured").
    Lowering runs first, in the calling thread (for a program from :func:`load_or_build`
    it traces only the wrapper around the exported module, not the agent).

    Args:
      progs: :class:`.loop.Programs` from :func:`load_or_build` (or :func:`.loop.build`).
      example_keys: the stacked seed keys ``init`` takes (arrays or ShapeDtypeStructs).
      carry_shape: the carry's pytree of ``jax.ShapeDtypeStruct`` (from
        :func:`load_or_build`; laid along ``progs.mesh`` when it has one).
      device: None (this process's default device, or the mesh), or one device to compile
        for, such as a GPU of ``jax.experimental.topologies`` that this machine only
        describes (:mod:`dreamer_parity.accel.precompile`); the programs need no mesh then.

    Returns:
      A :class:`.loop.Programs` with the same static settings whose ``init``, ``chunk`` and
      ``point`` are the compiled executables (``jax.stages.Compiled``; they accept only
      arguments of the lowered shapes and keep the jit wrappers' donation).

    Raises:
      ValueError: ``device`` given for programs with a seed mesh.
      Whatever lowering or compiling raises, for the first program that failed.
    """
    if device is not None and progs.mesh is not None:
        raise ValueError("compile_all: a device and a seed mesh exclude each other")
    counts = seedmesh.put_replicated(
        jax.ShapeDtypeStruct((progs.chunk_steps,), jax.numpy.int32), progs.mesh)
    example_keys = seedmesh.put_seeds(
        jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), example_keys), progs.mesh)
    if device is not None:
        on = jax.sharding.SingleDeviceSharding(device)
        counts, example_keys, carry_shape = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=on),
            (counts, example_keys, carry_shape))
    lowered = {"init": progs.init.lower(example_keys),
               "chunk": progs.chunk.lower(carry_shape, counts),
               "point": progs.point.lower(carry_shape)}
    # the chunk first: it takes longest, the other two fill the idle core beside it
    with ThreadPoolExecutor(max_workers=len(PROGRAMS)) as pool:
        futures = {p: pool.submit(lowered[p].compile) for p in ("chunk", "init", "point")}
        compiled = {p: futures[p].result() for p in PROGRAMS}
    return dataclasses.replace(progs, **compiled)

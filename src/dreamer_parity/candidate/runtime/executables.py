"""A run's three programs compiled in advance, stored as executables, loaded instead of compiled.

XLA:GPU compiles the candidate's chunk program in minutes; a GPU machine held for a few
minutes at a time should spend them running seeds.  The programs can be compiled on another
machine for a GPU it only describes (:mod:`dreamer_parity.accel.precompile`:
``jax.experimental.topologies``), serialised here, copied to the GPU machine with the tree and
loaded there instead of compiled (``jax.experimental.serialize_executable``; on XLA:CPU a
load takes seconds, on a GPU it is yet to be measured).

An entry is the directory ``<root>/<program key>/`` (:func:`.program_store.key_for`: the code,
the agent config, the loop's settings, the seed count, jax and jaxlib, the backend, the
compiler options and the matrix precision) holding ``init.xla``, ``chunk.xla``, ``point.xla``
(the serialised executables), ``trees.pkl`` (each program's argument and result trees, and
the carry's shapes) and ``meta.json`` (:data:`FORMAT`, the key, the metric names, the
target it was compiled for, jax, jaxlib and plugin versions, ``XLA_FLAGS``, the bytes).
It is written into a temporary directory and renamed into place, so a half-written entry is
never read.  Only this project's own builder writes entries: unpickling them runs their
code, so an entry directory from anyone else must never be loaded.

:func:`load` refuses (:class:`ExecutableStoreError`, one line naming the reason) an entry that
is missing, of another format or key, made for another platform, GPU generation (compute
capability), plugin version or ``XLA_FLAGS``, or that the backend cannot load; the caller then
compiles (:func:`dreamer_parity.candidate.runtime.run`, ``--executables``).  Numbers: an
executable compiled without its GPU has no autotuning (XLA's kernel choices without
measurements), so its float32 rounding can differ from one compiled on the GPU; a run records
which it ran (``run.json`` ``config.programs``) and the checkpoint key separates the two.

Command line (the GPU call's ``programs`` phase: does every entry load here?)::

    python -m dreamer_parity.candidate.runtime.executables check DIR

prints one JSON object ``{"entries": {key: {"seeds", "settings", "ok", "load_s", "why"}}}``
(:func:`check_all`); exit 0, or
2 when ``DIR`` is not a directory.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import pickle
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["FORMAT", "PROGRAMS", "ExecutableStoreError", "save", "load", "check_all",
           "plugin_version", "xla_flags", "fresh_compiles"]

#: Layout of an entry; another value is refused.
FORMAT = 1
#: The programs of a run, as :mod:`.program_store` names them.
PROGRAMS = ("init", "chunk", "point")
_META, _TREES = "meta.json", "trees.pkl"
#: The XLA flag that only sets how many host devices the CPU exposes: not part of a program.
_HOST_DEVICES = re.compile(r"--xla_force_host_platform_device_count=\d+")


class ExecutableStoreError(RuntimeError):
    """An entry cannot be used here (one line: which entry, and why)."""


def plugin_version() -> str | None:
    """The installed XLA:GPU plugin's version (``jax-cuda13-plugin`` or ``jax-cuda12-plugin``),
    or None without one."""
    for dist in ("jax-cuda13-plugin", "jax-cuda12-plugin"):
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def xla_flags(environ=None) -> str:
    """``XLA_FLAGS`` of ``environ`` (default ``os.environ``) as it bears on a compiled
    program: the host device count left out, blanks normalised."""
    flags = (os.environ if environ is None else environ).get("XLA_FLAGS", "")
    return " ".join(_HOST_DEVICES.sub("", flags).split())


@contextlib.contextmanager
def fresh_compiles():
    """JAX's persistent compilation cache off inside the block (and as it was after).

    Programs to :func:`save` must be compiled in this process: an executable that XLA:CPU
    read back from that cache serialises without its kernels (jax 0.10.2: the loaded copy
    fails with ``Function ... not found``)."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    was = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()   # jax decides whether to use the cache once, until reset
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", was)
        compilation_cache.reset_cache()


def save(root, key: str, compiled, carry_shape, target: dict, seeds: int,
         compile_s: float | None = None, settings: dict | None = None) -> Path:
    """Serialise a run's compiled programs as the entry ``root/key``, atomically.

    Args:
      root: the entry directory's parent (created).
      key: the programs' key (:func:`.program_store.key_for`, for the target's backend).
      compiled: a :class:`.loop.Programs` whose ``init``, ``chunk`` and ``point`` are
        ``jax.stages.Compiled`` of one device (:func:`.program_store.compile_all`), compiled
        inside :func:`fresh_compiles`.
      carry_shape: the carry's pytree of ``jax.ShapeDtypeStruct`` (shardings dropped).
      target: what the programs were compiled for: ``platform`` (``"gpu"``, ``"cpu"``),
        ``device_kind``, ``compute_capability`` (a GPU's, e.g. ``"9.0"``, or None) and
        ``described`` (True when the device was only described, not present).
      seeds: the seed count of the programs.
      compile_s: seconds the compile took (recorded).
      settings: what the programs were built from, in readable form (the run's
        ``PROGRAM_PARAMS`` and the precision; recorded for :func:`check_all`'s readers: the
        key already covers them).

    Returns:
      The entry directory.

    Raises:
      ValueError: ``target`` lacks ``platform``, or ``compiled`` has a seed mesh.
      Whatever serialising raises (an executable of a backend that cannot serialise).
    """
    import jax
    import jaxlib
    from jax.experimental import serialize_executable

    if "platform" not in target:
        raise ValueError("executables.save: target needs a 'platform'")
    if compiled.mesh is not None:
        raise ValueError("executables.save: programs of one device only (this run has a "
                         "seed mesh)")
    blobs, trees = {}, {}
    for p in PROGRAMS:
        blobs[p], in_tree, out_tree = serialize_executable.serialize(getattr(compiled, p))
        trees[p] = (in_tree, out_tree)
    carry = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), carry_shape)
    meta = {"format": FORMAT, "key": key, "seeds": int(seeds),
            "metric_names": list(compiled.metric_names), "capacity": compiled.capacity,
            "chunk_steps": compiled.chunk_steps, "target": dict(target),
            "jax": jax.__version__, "jaxlib": jaxlib.__version__, "plugin": plugin_version(),
            "xla_flags": xla_flags(), "compile_s": compile_s, "settings": settings or {},
            "bytes": {p: len(blobs[p]) for p in PROGRAMS}}
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root))
    try:
        for p in PROGRAMS:
            (tmp / f"{p}.xla").write_bytes(blobs[p])
        (tmp / _TREES).write_bytes(pickle.dumps({"programs": trees, "carry": carry}))
        (tmp / _META).write_text(json.dumps(meta, indent=1, sort_keys=True))
        dest = root / key
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def _read_meta(entry: Path, key: str) -> dict:
    if not entry.is_dir():
        raise ExecutableStoreError(f"{entry.name}: no compiled programs for this run's key")
    try:
        meta = json.loads((entry / _META).read_text())
    except (OSError, ValueError) as e:
        raise ExecutableStoreError(f"{entry.name}/{_META}: unreadable ({type(e).__name__})") \
            from e
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ExecutableStoreError(f"{entry.name}/{_META}: format "
                                   f"{meta.get('format') if isinstance(meta, dict) else None},"
                                   f" expected {FORMAT}")
    if meta.get("key") != key:
        raise ExecutableStoreError(f"{entry.name}/{_META}: made for key {meta.get('key')}")
    return meta


def _mismatch(meta: dict, device) -> str | None:
    """Why the entry does not fit this process and ``device``, or None."""
    import jax
    import jaxlib

    target = meta.get("target") or {}
    if target.get("platform") != device.platform:
        return f"compiled for platform {target.get('platform')}, this device is {device.platform}"
    cc = target.get("compute_capability")
    have = getattr(device, "compute_capability", None)
    if cc is not None and str(cc) != str(have):
        return f"compiled for compute capability {cc}, this GPU has {have}"
    for name, here in (("jax", jax.__version__), ("jaxlib", jaxlib.__version__),
                       ("plugin", plugin_version() if device.platform == "gpu" else
                        meta.get("plugin"))):
        if meta.get(name) != here:
            return f"compiled with {name} {meta.get(name)}, this process has {here}"
    if meta.get("xla_flags", "") != xla_flags():
        return (f"compiled with XLA_FLAGS {meta.get('xla_flags')!r}, this process has "
                f"{xla_flags()!r}")
    return None


def load(root, key: str, programs_cls=None):
    """The run's programs from the entry ``root/key``, loaded on this process's device.

    Args:
      root: the directory of entries (``--executables``).
      key: the run's program key (:func:`.program_store.key_for`).
      programs_cls: the class to build (default :class:`.loop.Programs`).

    Returns:
      ``(programs, carry_shape, info)``: programs whose ``init``, ``chunk`` and ``point`` are
      the loaded ``jax.stages.Compiled`` (``chunk`` and ``point`` donate the carry, as
      compiled); the carry's pytree of ``jax.ShapeDtypeStruct``; ``{"source":
      "precompiled", "key", "target", "load_s", "compile_s"}`` (``compile_s``: the seconds
      the compile took where it ran).

    Raises:
      ExecutableStoreError: the entry is missing, made for something else (see the module
        docstring), or does not load; the message names the entry and the reason.
    """
    import jax
    from jax.experimental import serialize_executable

    t0 = time.perf_counter()
    entry = Path(root) / key
    meta = _read_meta(entry, key)
    device = jax.devices()[0]
    why = _mismatch(meta, device)
    if why:
        raise ExecutableStoreError(f"{key}: {why}")
    try:
        trees = pickle.loads((entry / _TREES).read_bytes())
        loaded = {p: serialize_executable.deserialize_and_load(
                      (entry / f"{p}.xla").read_bytes(), *trees["programs"][p],
                      execution_devices=[device])
                  for p in PROGRAMS}
    except Exception as e:   # noqa: BLE001 - whatever the backend says, the run compiles
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise ExecutableStoreError(f"{key}: does not load ({type(e).__name__}: {first})") from e
    if programs_cls is None:
        from .loop import Programs as programs_cls
    progs = programs_cls(init=loaded["init"], chunk=loaded["chunk"], point=loaded["point"],
                         metric_names=tuple(meta["metric_names"]), capacity=meta["capacity"],
                         chunk_steps=meta["chunk_steps"], mesh=None)
    info = {"source": "precompiled", "key": key, "target": meta["target"],
            "load_s": time.perf_counter() - t0, "compile_s": meta.get("compile_s")}
    return progs, trees["carry"], info


def check_all(root) -> dict:
    """Load every entry of ``root`` on this process's device: ``{key: {"seeds", "settings",
    "ok", "load_s", "why"}}`` (``settings`` as :func:`save` recorded them; ``why`` None when
    it loads).  Never raises for an entry."""
    out = {}
    for entry in sorted(p for p in Path(root).iterdir()
                        if p.is_dir() and not p.name.startswith(".")):
        seeds, settings = None, None
        try:
            meta = json.loads((entry / _META).read_text())
            seeds, settings = meta.get("seeds"), meta.get("settings")
        except (OSError, ValueError, AttributeError):
            pass
        t0 = time.perf_counter()
        try:
            load(root, entry.name)
            why = None
        except ExecutableStoreError as e:
            why = str(e)
        out[entry.name] = {"seeds": seeds, "settings": settings, "ok": why is None,
                           "load_s": round(time.perf_counter() - t0, 2), "why": why}
    return out


def main(argv=None) -> int:
    """``check DIR`` (module docstring); returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] != "check":
        print("usage: python -m dreamer_parity.candidate.runtime.executables check DIR",
              file=sys.stderr)
        return 2
    if not Path(argv[1]).is_dir():
        print(f"error: {argv[1]}: not a directory", file=sys.stderr)
        return 2
    print(json.dumps({"entries": check_all(argv[1])}, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

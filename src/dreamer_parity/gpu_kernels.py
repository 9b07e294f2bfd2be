"""The candidate's train update compiled for an NVIDIA H200 without a GPU, and its kernels.

XLA:GPU compiles for a GPU it is only told about: with the CUDA plugin installed
(``jax-cuda13-plugin`` and ``jax-cuda13-pjrt``, the versions of jaxlib),
``jax.experimental.topologies.get_topology_desc(platform="cuda", target_config=...)`` takes a
``GpuTargetConfigProto`` in text form and gives a device to lower and compile against.
:func:`h200_target_config` writes that text from NVIDIA's published figures for the H200
(:data:`H200`); :func:`compile_update` compiles one train update of the candidate for it
(the run's own seed mapping: :func:`.seedmap.over_seeds` of the train step, all seeds in
one batch, and the two-hot form, as a run on a GPU traces them) and returns the optimized
HLO text, which :func:`dreamer_parity.hlo_cost.kernel_counts` turns into kernels per update.
:func:`project_update_ms` turns counts into a time per update for an assumed time per kernel.

Nothing here runs on a GPU; jax is imported by the functions that need it, so the module
imports without jax.
"""

from __future__ import annotations

import glob
import os
import tempfile
import time

__all__ = ["H200", "h200_target_config", "h200_device", "compile_update", "count_update",
           "read_thunk_dump",
           "project_update_ms", "BATCH", "LENGTH"]

#: The H200 SXM (Hopper GH100, compute capability 9.0), from NVIDIA's public documents: the
#: H200 product brief and datasheet (141 GB HBM3e, 4.8 TB/s, 132 SMs, 1.98 GHz boost clock),
#: the NVIDIA Hopper architecture in-depth page and white paper (L2 cache of the GH100 die:
#: 60 MB, of which the white paper gives 50 MB to the H100 SXM5 product; XLA reads the size
#: in its cost heuristics only; 128 FP32 units per SM) and the CUDA C++ Programming Guide's
#: table of technical specifications per compute capability (9.0: 2,048 resident threads,
#: 64 K 32-bit registers per SM and at most 64 K per block, 1,024 threads per block, 228 KB
#: shared memory per SM, 48 KB per block without opt-in and 227 KB with it, warps of 32,
#: grid limits 2^31-1 x 65,535 x 65,535).  Units: bytes, bytes per second, GHz.
H200 = {
    "name": "NVIDIA H200",
    "compute_capability": (9, 0),
    "sm_count": 132,
    "fp32_units_per_sm": 128,
    "clock_ghz": 1.98,
    "memory_bytes": 141 * 10**9,
    "memory_bandwidth_bytes_per_s": 4_800_000_000_000,
    "l2_bytes": 60 * 2**20,
    "shared_memory_per_sm_bytes": 228 * 1024,
    "shared_memory_per_block_bytes": 48 * 1024,
    "shared_memory_per_block_optin_bytes": 227 * 1024,
    "threads_per_sm": 2048,
    "threads_per_block": 1024,
    "threads_per_warp": 32,
    "registers_per_sm": 64 * 1024,
    "registers_per_block": 64 * 1024,
    "grid_limits": (2**31 - 1, 65535, 65535),
}

#: The train batch of one update: windows of 65 rows (one context row), 16 per seed
#: (:class:`dreamer_parity.schedule.Schedule`).
BATCH, LENGTH = 16, 65


#: ``gpu_device_info`` fields of the proto and the :data:`H200` keys that give them.
_PROTO_FIELDS = (
    ("threads_per_block_limit", "threads_per_block"), ("threads_per_warp", "threads_per_warp"),
    ("shared_memory_per_block", "shared_memory_per_block_bytes"),
    ("shared_memory_per_core", "shared_memory_per_sm_bytes"),
    ("threads_per_core_limit", "threads_per_sm"), ("core_count", "sm_count"),
    ("fpus_per_core", "fp32_units_per_sm"),
    ("memory_bandwidth", "memory_bandwidth_bytes_per_s"), ("l2_cache_size", "l2_bytes"),
    ("clock_rate_ghz", "clock_ghz"), ("device_memory_size", "memory_bytes"),
    ("shared_memory_per_block_optin", "shared_memory_per_block_optin_bytes"),
    ("registers_per_core_limit", "registers_per_sm"),
    ("registers_per_block_limit", "registers_per_block"),
)


def h200_target_config(spec: dict = H200) -> str:
    """``GpuTargetConfigProto`` text (XLA's ``stream_executor`` proto) describing ``spec``.

    Args:
      spec: a dict with the keys of :data:`H200`.

    Returns:
      The proto in text format: ``gpu_device_info`` (SM count, shared memory, registers,
      limits, memory size and bandwidth, L2, clock, compute capability), ``platform_name``
      ``"CUDA"`` and ``device_description_str``.

    Raises:
      KeyError: ``spec`` lacks a key of :data:`H200`.
    """
    major, minor = spec["compute_capability"]
    info = [(field, spec[key]) for field, key in _PROTO_FIELDS]
    info += list(zip(("block_dim_limit_x", "block_dim_limit_y", "block_dim_limit_z"),
                     spec["grid_limits"]))
    lines = ["gpu_device_info {"] + [f"  {k}: {v}" for k, v in info]
    lines += [f"  cuda_compute_capability {{ major: {major} minor: {minor} }}", "}",
              'platform_name: "CUDA"', f'device_description_str: "{spec["name"]}"']
    return "\n".join(lines) + "\n"


def h200_device():
    """The H200 of :data:`H200` as a device to lower and compile against, without a GPU (the
    one device of a ``cuda`` topology described by :func:`h200_target_config`).

    Raises:
      RuntimeError: the CUDA plugin is missing (no ``cuda`` topology).
    """
    import jax
    from jax.experimental import topologies
    try:
        topo = topologies.get_topology_desc(platform="cuda", target_config=h200_target_config(),
                                            topology="1x1x1")
    except Exception as e:   # jax raises several types for a missing plugin
        raise RuntimeError(f"no XLA:GPU compiler (install jax-cuda13-plugin and "
                           f"jax-cuda13-pjrt {jax.__version__}): {str(e).splitlines()[0]}") from e
    return topo.devices[0]


def compile_update(seeds: int, profile: str = "full", precision: str = "highest",
                   options: dict | None = None, agent_options: dict | None = None) -> dict:
    """Compile one train update of ``seeds`` seeds for the H200 (no GPU needed).

    Args:
      seeds: seeds batched in the update (1 to :data:`dreamer_parity.params.MAX_SEEDS`).
      profile: the agent's widths (``"full"`` or ``"smoke"``).
      precision: ``jax_default_matmul_precision`` (``"default"`` leaves jax's own).
      options: XLA compiler options of this compile (``compiler_options`` of
        ``Lowered.compile``: debug options such as ``xla_gpu_enable_command_buffer``), or None.
      agent_options: :class:`AgentConfig` fields to set (``{"observe_grad": "scan"}``), or
        None; ``auto`` settings resolve as on a GPU.

    Returns:
      ``{"hlo": optimized HLO text, "compile_s": seconds of lower + compile (wall),
      "memory": bytes of ``memory_analysis()`` (argument, output, temp, generated code) or
      None}``.

    Raises:
      ValueError: ``seeds`` out of range, an unknown profile or precision, or a bad
        ``agent_options`` field (``AgentConfig``'s own message).
      RuntimeError: the CUDA plugin is missing (no ``cuda`` topology).
    """
    from dreamer_parity import params as P
    if not isinstance(seeds, int) or not 1 <= seeds <= P.MAX_SEEDS:
        raise ValueError(f"compile_update: seeds must be 1..{P.MAX_SEEDS}, got {seeds!r}")
    if profile not in P.PROFILES:
        raise ValueError(f"compile_update: profile {profile!r} not in {sorted(P.PROFILES)}")
    if precision not in P.PRECISIONS:
        raise ValueError(f"compile_update: precision {precision!r} not in {P.PRECISIONS}")
    from functools import partial

    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from dreamer_parity.candidate import agent
    from dreamer_parity.candidate.config import AgentConfig
    from dreamer_parity.candidate.runtime import seedmap
    from dreamer_parity.candidate.synthetic import synthetic_batch

    device = h200_device()
    jax.config.update("jax_default_matmul_precision", None if precision == "default" else precision)
    rep = NamedSharding(Mesh(np.array([device]), ("x",)), PartitionSpec())
    # the forms a GPU run traces (this process's own backend is the CPU)
    cfg = AgentConfig.for_profile(profile, **(agent_options or {})).resolved("gpu")

    def spec(x):
        return jax.ShapeDtypeStruct((seeds,) + tuple(x.shape), x.dtype, sharding=rep)

    state = jax.eval_shape(partial(agent.init, cfg=cfg), jax.random.PRNGKey(0))
    batch = {k: np.asarray(v) for k, v in synthetic_batch(cfg, BATCH, LENGTH).items()}
    key = jax.random.PRNGKey(0)
    args = [jax.tree.map(spec, t) for t in (state, batch, key)]
    step = jax.jit(seedmap.over_seeds(seedmap.per_seed(partial(agent.train_step, cfg), None)))
    t0 = time.perf_counter()
    compiled = step.lower(*args).compile(compiler_options=options or None)
    compile_s = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    memory = None if mem is None else {
        k: int(getattr(mem, k + "_size_in_bytes")) for k in
        ("argument", "output", "temp", "generated_code")}
    return {"hlo": compiled.as_text(), "compile_s": compile_s, "memory": memory}


def project_update_ms(kernels: int, kernel_us: float, traffic_bytes: float = 0.0,
                      bandwidth_bytes_per_s: float = H200["memory_bandwidth_bytes_per_s"]
                      ) -> float:
    """Time of one update in milliseconds: ``kernels * kernel_us`` (a fixed time per kernel:
    launch and latency) plus ``traffic_bytes / bandwidth`` (memory traffic at full bandwidth).
    A model, not a measurement.

    Raises:
      ValueError: a negative count, time, traffic or a bandwidth <= 0.
    """
    if kernels < 0 or kernel_us < 0 or traffic_bytes < 0 or bandwidth_bytes_per_s <= 0:
        raise ValueError("project_update_ms: counts, times and traffic must be >= 0, "
                         "bandwidth > 0")
    return kernels * kernel_us / 1e3 + traffic_bytes / bandwidth_bytes_per_s * 1e3


def read_thunk_dump(directory) -> dict | None:
    """The XLA:GPU module of an ``xla_dump_to`` directory: ``{"hlo", "sequence",
    "metadata"}`` texts (the thunk sequence after the thunk passes where XLA wrote one, else
    before them) of the module whose optimized HLO is the largest, or None when the
    directory holds no XLA:GPU module."""
    hlos = glob.glob(os.path.join(str(directory), "*gpu_after_optimizations.txt"))
    if not hlos:
        return None
    hlo = max(hlos, key=os.path.getsize)
    stem = os.path.basename(hlo).split(".sm_")[0]

    def read(suffix):
        path = os.path.join(str(directory), stem + suffix)
        if not os.path.exists(path):
            return None
        with open(path, encoding="utf-8") as f:
            return f.read()

    with open(hlo, encoding="utf-8") as f:
        text = f.read()
    seq = read(".thunk_sequence_after_thunk_passes.txt") or read(".thunk_sequence.txt")
    return {"hlo": text, "sequence": seq, "metadata": read(".thunk_metadata.txt") or ""}


def count_update(seeds: int, profile: str = "full", precision: str = "highest",
                 options: dict | None = None, thunks: bool = True,
                 agent_options: dict | None = None) -> dict:
    """:func:`compile_update`, then its kernels per update.

    Args:
      seeds, profile, precision, options, agent_options: as :func:`compile_update`.
      thunks: also dump the compile (``xla_dump_to``, a temporary directory) and count its
        thunk sequence (:func:`dreamer_parity.hlo_cost.thunk_counts`): the launches after
        XLA's command-buffer conversion, which the HLO text does not show.

    Returns:
      ``{"seeds", "compile_s", "memory", "hlo": kernel_counts of the optimized HLO,
      "thunks": thunk_counts or None}``.

    Raises:
      as :func:`compile_update`.
    """
    from dreamer_parity.hlo_cost import kernel_counts, thunk_counts
    with tempfile.TemporaryDirectory(prefix="gpu-kernels-") as tmp:
        opts = dict(options or {})
        if thunks:
            opts["xla_dump_to"] = tmp
        r = compile_update(seeds, profile, precision, opts, agent_options)
        dump = read_thunk_dump(tmp) if thunks else None
    counted = None
    if dump and dump["sequence"]:
        counted = thunk_counts(dump["sequence"], dump["metadata"], dump["hlo"])
    return {"seeds": seeds, "compile_s": r["compile_s"], "memory": r["memory"],
            "hlo": kernel_counts(r["hlo"]), "thunks": counted}

"""The reference runner, stopped at its first update to compile the train step for a TPU.

Never a run: it answers whether XLA:TPU's code for the reference's whole train step (not a
program of its own) holds any fused multiply-add (docs/DEVIATIONS.md, T4).  Everything up
to the first update is :mod:`dreamer_parity.reference.runner`'s (same arguments: the
agent built from the port's spaces with the protocol's overrides, the environment's shims
and precision, the protocol patches).  Then, instead of the first update:

1. the function the reference jits as its train step (``dreamerv3/jaxagent.py:358-359``
   at 29eb964: ``jax.jit(train, ..., donate_argnums=[1])``), recorded when the agent
   built it, is lowered for the one chip of a compile-only TPU v5e topology
   (``jax.experimental.topologies``) with the shapes and dtypes of the first update's real
   arguments, and compiled by the ``libtpu`` package on this host's CPU, nothing run;
2. ``compile.json`` is written into the output directory (lower and compile seconds, the
   device kind, the number of fusions in the optimized HLO), atomically;
3. the process exits 0 at once.  The directory holds the runner's ``run.json`` and no
   ``DONE.json``: it is never mistaken for a finished run.

The compiler's low-level dumps go where ``$LIBTPU_INIT_ARGS`` says (the caller,
``benchmarks/reference_tpu_opcodes.py``, sets ``--xla_jf_dump_to`` and reads them).
``$DREAMER_PARITY_LIBTPU`` names a folder holding the unpacked ``libtpu`` package; it is
put at the end of ``sys.path`` (the launcher gives the reference venv only ``src`` and the
checkout).  Missing: exit 2 with one line, before anything runs.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

from dreamer_parity import records
from dreamer_parity.reference import patches, runner

__all__ = ["ENV_LIBTPU", "TOPOLOGY", "main"]

#: The environment variable naming the folder that holds the unpacked libtpu package.
ENV_LIBTPU = "DREAMER_PARITY_LIBTPU"
#: The compile-only topology: one TPU v5e chip, as lent.
TOPOLOGY = "v5e:1x1"
#: What the TPU compiler needs to make a compile-only topology on a host without a TPU.
TPU_ENV = {"TPU_ACCELERATOR_TYPE": "v5litepod-1", "TPU_WORKER_HOSTNAMES": "localhost"}


def _record_jits(jax, recorded: list):
    """Wrap ``jax.jit`` (after the shims) so that every jitted function is recorded."""
    original = jax.jit

    def jit(fn, *args, **kwargs):
        recorded.append((fn, kwargs))
        return original(fn, *args, **kwargs)

    jax.jit = jit
    return original


def _compile_for_tpu(jit, fn, args) -> dict:
    """Lower and compile ``fn`` for :data:`TOPOLOGY` with ``args``' shapes; the figures."""
    import jax
    from jax.experimental import topologies
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    topo = topologies.get_topology_desc(topology_name=TOPOLOGY, platform="tpu",
                                        chips_per_host_bounds=(1, 1, 1))
    sharding = NamedSharding(Mesh(topo.devices[:1], ("chip",)), PartitionSpec())
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
                            args)
    t0 = time.perf_counter()
    lowered = jit(fn, donate_argnums=[1]).lower(*abstract)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    t2 = time.perf_counter()
    hlo = compiled.as_text()
    return {"topology": TOPOLOGY, "device_kind": topo.devices[0].device_kind,
            "lower_s": t1 - t0, "compile_s": t2 - t1,
            "fusions": sum(1 for line in hlo.splitlines() if " fusion(" in line),
            "matmul_precision": str(jax.config.jax_default_matmul_precision)}


def main(argv=None) -> None:
    """Run the runner (same arguments) up to its first update, then compile (module doc)."""
    folder = os.environ.get(ENV_LIBTPU)
    if folder:
        sys.path.append(folder)
    if importlib.util.find_spec("libtpu") is None:
        print(f"reference compile runner: error: the libtpu package is not importable; set "
              f"${ENV_LIBTPU} to a folder holding it unpacked", file=sys.stderr)
        sys.exit(2)
    for k, v in TPU_ENV.items():
        os.environ.setdefault(k, v)
    recorded: list = []
    state: dict = {}
    stock_apply = patches.apply

    def apply(*args, **kwargs):            # jax is imported and shimmed by now
        import jax
        state["jit"] = _record_jits(jax, recorded)
        return stock_apply(*args, **kwargs)

    patches.apply = apply
    stock_make_agent = runner.Instrument.make_agent

    def make_agent(self):
        proxy = stock_make_agent(self)
        train_fns = [fn for fn, kw in recorded if kw.get("donate_argnums") == [1]]
        if len(train_fns) != 1:
            raise RuntimeError(f"expected one jitted train step, found {len(train_fns)}")

        def first_update(*args):
            out = Path(self.args.out)
            figures = _compile_for_tpu(state["jit"], train_fns[0], args)
            records.write_json(out / "compile.json", figures)
            print(f"[reference s{self.args.seed}] train step compiled for {TOPOLOGY} in "
                  f"{figures['compile_s']:.1f} s", file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(0)

        self.agent._train = first_update
        return proxy

    runner.Instrument.make_agent = make_agent
    runner.main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])

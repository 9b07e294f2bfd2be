"""Kernels per train update of the candidate compiled for an NVIDIA H200, without a GPU.

In a Python 3.12 environment with jax 0.11.2 and its CUDA plugin (``jax-cuda13-plugin`` and
``jax-cuda13-pjrt`` 0.11.2; no GPU needed), from the repository root::

    JAX_PLATFORMS=cpu python benchmarks/gpu_kernels.py [--seeds 1 32] [--kernel-us 2 5]
        [--xla-option xla_gpu_graph_min_graph_size=1 ...]
        [--observe-grad auto|scan|remat|batched] [--opt-norms auto|tensor|chunked]

The update is the one a GPU run traces: ``auto`` settings resolve as on a GPU
(``AgentConfig.resolved("gpu")``: ``batched``, ``chunked``); ``--observe-grad scan
--opt-norms tensor`` gives the CPU's forms.

For each seed count: the compile seconds, the kernels per update from the optimized HLO by
kind and by loop (``dreamer_parity.hlo_cost.kernel_counts``), the launches the host submits
after XLA's command-buffer conversion, read from the compile's thunk sequence
(``thunk_counts``), and a modelled time per update for each ``--kernel-us``: kernels times
that time plus the estimated memory traffic at the H200's bandwidth
(``gpu_kernels.project_update_ms``).  The last line is ``RESULT <json>``.

Exit status 2 (one line) on a bad argument or without the CUDA plugin.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from benchmarks.lib.cli import bench_params, positive_int  # noqa: E402
from dreamer_parity import params as P  # noqa: E402
from dreamer_parity import records  # noqa: E402
from dreamer_parity.candidate.config import OBSERVE_GRADS, OPT_NORMS  # noqa: E402


def _option(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.startswith("xla_gpu_") or not value:
        raise argparse.ArgumentTypeError(f"{text!r} is not xla_gpu_<name>=<value>")
    return key, value


def main(argv=None) -> int:
    ap = records.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=positive_int, nargs="+", default=[1, 32])
    ap.add_argument("--profile", default="full")
    ap.add_argument("--precision", default="highest", choices=P.PRECISIONS)
    ap.add_argument("--kernel-us", type=float, nargs="+", default=[2.0, 5.0],
                    help="assumed microseconds per kernel (launch and latency)")
    ap.add_argument("--observe-grad", default="auto", choices=OBSERVE_GRADS,
                    help="AgentConfig.observe_grad: how the observe scan's gradient is taken "
                         "(auto: as on a GPU, batched)")
    ap.add_argument("--opt-norms", default="auto", choices=OPT_NORMS,
                    help="AgentConfig.opt_norms: how the optimizer's norms are reduced "
                         "(auto: as on a GPU, chunked)")
    ap.add_argument("--xla-option", type=_option, action="append", default=[],
                    help="an XLA:GPU compiler option of the compile (repeatable)")
    a = ap.parse_args(argv)
    try:   # every argument before anything is compiled
        p = bench_params({"profile": a.profile})
        for n in a.seeds:
            records.check_range(n, "--seeds", 1, P.MAX_SEEDS)
        for us in a.kernel_us:
            records.check_range(us, "--kernel-us", 0.0, 1000.0)
    except (P.ParamsError, records.RecordError) as e:
        print(f"error: gpu_kernels: {e}", file=sys.stderr)
        return 2
    if importlib.util.find_spec("jax_plugins") is None \
            or importlib.util.find_spec("jax_plugins.xla_cuda13") is None:
        print("error: gpu_kernels: no CUDA plugin (pip install jax-cuda13-plugin==<jax's "
              "version> jax-cuda13-pjrt==<jax's version>, Python 3.12)", file=sys.stderr)
        return 2
    from dreamer_parity import gpu_kernels as gk

    out = []
    for n in a.seeds:
        print(f"compiling the update at {n} seed(s) for the H200 ...", file=sys.stderr,
              flush=True)
        r = gk.count_update(n, p["profile"], a.precision, dict(a.xla_option),
                            agent_options={"observe_grad": a.observe_grad,
                                           "opt_norms": a.opt_norms})
        h, t = r["hlo"], r["thunks"] or {}
        print(f"\n## {n} seed(s), profile {p['profile']}, precision {a.precision}: "
              f"compile {r['compile_s']:.0f} s")
        print(f"kernels per update {h['kernels']:,} (HLO); thunks: {t.get('kernels', 0):,} "
              f"launches on the GPU, {t.get('host_launches', 0):,} from the host "
              f"({t.get('command_buffer_launches', 0):,} of them command buffers)")
        for kind, c in h["by_kind"].items():
            print(f"  {c:7,}  {kind}")
        for lp in sorted(h["loops"], key=lambda lp: -lp["kernels"])[:5]:
            print(f"  loop {lp['name']} ({lp['op_name']}): {lp['trips']} x "
                  f"{lp['kernels_per_trip']} kernels, {lp['kernels']:,} per update")
        gb = h["traffic_bytes"] / 1e9
        for us in a.kernel_us:
            ms = gk.project_update_ms(h["kernels"], us, h["traffic_bytes"])
            print(f"  at {us:g} us per kernel + {gb:.2f} GB at "
                  f"{gk.H200['memory_bandwidth_bytes_per_s'] / 1e12:g} TB/s: {ms:.1f} ms "
                  f"per update")
        out.append({**r, "hlo": {k: v for k, v in h.items() if k != "loops"},
                    "loops": h["loops"]})
    print("RESULT " + json.dumps({"options": dict(a.xla_option),
                                  "observe_grad": a.observe_grad, "opt_norms": a.opt_norms,
                                  "runs": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

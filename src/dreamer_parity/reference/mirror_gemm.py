"""Do a platform's matrix products keep mirror-equal columns bitwise equal?

A probe for docs/DEVIATIONS.md, T4: the reference's decoded rewards and values stay exact
only while each two-hot head's logit ``j`` equals logit ``254 - j`` bit for bit wherever
the weights are mirror-equal.  This module builds the products of those heads' output
layer in isolation, with mirror-equal operands, and counts the mirror pairs whose results
differ in any bit.  Pure jax: no reference import, any environment with jax runs it.

The output layer (``dreamerv3/nets.py:433-443`` ``Dist.inner``, ``nets.py:625-640``
``Linear._layer`` at 29eb964): ``x @ kernel + bias`` with ``kernel`` f32[units, 256]
(``bins: 255``, ``dreamerv3/configs.yaml:122,129``, plus one padding column that is
dropped), ``units`` round 3's 64 (:data:`dreamer_parity.params.PROFILES` ``full``), the
runner's compute dtype float32, ``x`` of shape [B, T, units] as the heads receive it.
Two row counts (:data:`ROWS`): the replay batch (16 x 64: the reward head, the replay
critic) and imagination (1,024 starts x 16 steps: the reward head, the critics).  For each:

``forward``
    ``x @ W + b`` with column ``j`` of ``W`` and ``b`` equal to column ``254 - j``
    (``j < 127``; the padding column 255 random), ``x`` random;
``gradient``
    the kernel's gradient ``x^T g`` as jax transposes the forward product
    (:func:`jax.vjp`), with the cotangent ``g`` mirror-equal in the same way.

Operands are drawn by numpy from a fixed seed (standard normal float32), so every platform
multiplies the same numbers.  A pair *differs* when any element of column ``j`` differs
from column ``254 - j`` in any bit; ``max_ulp`` is the largest distance in float32 steps
between the two over all pairs.

**On the CPU** (XLA:CPU, jax 0.10.2 and 0.11.2, x86-64) no pair differs, in either
product, at either precision: 0 of 127 everywhere (``tests/test_reference_mirror_gemm.py``
asserts it).  The same products on one TPU v5e chip (jax 0.10.2, 2026-12-07) give 0 of 127
as well, although the reference's TPU runs behave as if their mirror logits differ: a 0
clears the bare products at these shapes, not the train step that fuses them with their
neighbours.  A GPU may answer otherwise: its autotuner chooses among GEMM kernels per
shape, and a kernel that splits the sum over K differently in different output tiles
(pairs ``j`` and ``254 - j`` always fall in different 128-wide tiles) leaves mirror columns
a last bit apart.  :func:`autotune_pair` runs the probe twice, in fresh processes: with
``--xla_gpu_autotune_level=0`` in ``XLA_FLAGS`` and without.  The CPU has no such
autotuner: there, neither run gets the flag (an XLA flag the build does not know stops
every jax process), so the two are one probe run twice.

Command line (one JSON line on stdout; exit 2 with one line on bad input or when jax runs
on another backend)::

    python -m dreamer_parity.reference.mirror_gemm --platform cpu|cuda|tpu
        [--precision default|highest] [--autotune-pair]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys

__all__ = ["BINS", "PADDED", "UNITS", "ROWS", "PLATFORMS", "PRECISIONS", "BACKENDS",
           "AUTOTUNE_OFF", "SEED", "mirror_operands", "mirror_diff", "probe", "autotune_pair",
           "main"]

#: Bins of the two-hot heads and the output layer's width with its padding column.
BINS = 255
PADDED = 256
#: Hidden width of round 3's heads (``params.PROFILES["full"]["units"]``).
UNITS = 64
#: ``{name: leading shape of x}``: replay 16 sequences x 64 steps; imagination 1,024 starts
#: x 16 steps (start plus ``imag_length`` 15).
ROWS = {"replay": (16, 64), "imagination": (1024, 16)}
#: ``--platform`` values and the ``jax.default_backend()`` each must give.
PLATFORMS = ("cpu", "cuda", "tpu")
BACKENDS = {"cpu": "cpu", "cuda": "gpu", "tpu": "tpu"}
#: ``--precision``: ``default`` sets nothing; ``highest`` is set as
#: ``jax_default_matmul_precision`` (as the reference runner sets ``reference.precision``).
#: The command line drops ``$JAX_DEFAULT_MATMUL_PRECISION``: ``default`` is jax's own.
PRECISIONS = ("default", "highest")
#: The XLA flag of the autotuning-off run (:func:`autotune_pair`, GPU only).
AUTOTUNE_OFF = "--xla_gpu_autotune_level=0"
#: The numpy seed of the operands.
SEED = 0


def mirror_operands(lead: tuple[int, ...], units: int = UNITS, seed: int = SEED) -> dict:
    """The probe's operands, numpy float32, mirror-equal over the first :data:`BINS` columns.

    Args:
      lead: the leading shape of ``x`` (e.g. ``(16, 64)``); units: K, the input width.

    Returns:
      ``{"x": f32[*lead, units], "w": f32[units, 256], "b": f32[256], "g": f32[*lead, 256]}``
      with ``w[:, j] == w[:, 254 - j]``, ``b[j] == b[254 - j]`` and ``g[..., j] ==
      g[..., 254 - j]`` for ``j < 127``; column 255 (padding) free.

    Raises:
      ValueError: a non-positive dimension.
    """
    import numpy as np

    if units < 1 or not lead or any(int(n) < 1 for n in lead):
        raise ValueError(f"mirror_operands: dimensions must be positive, got lead {lead}, "
                         f"units {units}")
    rng = np.random.default_rng(seed)

    def mirrored(shape):
        a = rng.standard_normal(shape, dtype=np.float32)
        half = (BINS - 1) // 2
        a[..., BINS - 1 - np.arange(half)] = a[..., :half]
        return a

    return {"x": rng.standard_normal((*lead, units), dtype=np.float32),
            "w": mirrored((units, PADDED)), "b": mirrored((PADDED,)),
            "g": mirrored((*lead, PADDED))}


def mirror_diff(out) -> dict:
    """How far a result's mirror columns are apart.

    Args:
      out: float32 array ``[..., n]`` with ``n >= 255``; columns ``j`` and ``254 - j`` of
        the last axis are compared (``j < 127``), elementwise over the other axes.

    Returns:
      ``{"pairs": 127, "differ": pairs with any element differing in any bit, "max_ulp":
      the largest distance in float32 steps between mirror elements (int; 0 when none
      differ), "first": the smallest differing j or None}``.

    Raises:
      ValueError: not float32, or fewer than 255 columns.
    """
    import numpy as np

    out = np.asarray(out)
    if out.dtype != np.float32 or out.ndim < 1 or out.shape[-1] < BINS:
        raise ValueError(f"mirror_diff: expected float32 [..., >={BINS}], got {out.dtype} "
                         f"{out.shape}")
    half = (BINS - 1) // 2
    lo = out[..., :half].reshape(-1, half)
    hi = out[..., BINS - 1 - np.arange(half)].reshape(-1, half)

    def ordered(v):   # float32 bits as integers that count float32 steps
        i = v.view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)

    ulp = np.abs(ordered(lo) - ordered(hi))
    bad = np.flatnonzero((lo.view(np.int32) != hi.view(np.int32)).any(axis=0))
    return {"pairs": half, "differ": int(bad.size), "max_ulp": int(ulp.max(initial=0)),
            "first": int(bad[0]) if bad.size else None}


def _gemm_kinds(hlo: str) -> dict:
    """``{custom call target or "triton fusion": count}`` in optimized HLO text."""
    kinds: dict[str, int] = {}
    for target in re.findall(r'custom_call_target="([^"]+)"', hlo):
        kinds[target] = kinds.get(target, 0) + 1
    n = len(re.findall(r'"kind":"__triton_gemm"|kind=kCustom.*triton', hlo))
    if n:
        kinds["triton gemm fusion"] = n
    return kinds


def probe(precision: str = "default", rows: dict | None = None, units: int = UNITS) -> dict:
    """Run both products at each row count on jax's default backend (this process).

    Args:
      precision: ``default`` (nothing set) or ``highest`` (``jax.default_matmul_precision``
        around the compilation).
      rows: ``{name: leading shape}`` (default :data:`ROWS`); units: K of the forward
        product.

    Returns:
      ``{"backend", "device_kind", "jax", "precision", "process_precision", "xla_flags",
      "results": {name: {"forward": ..., "gradient": ...}}}`` (``process_precision``: the
      process's ``jax_default_matmul_precision`` outside the probe, None for jax's own
      default, which ``default`` runs at), each product :func:`mirror_diff`'s dict plus
      ``"shape"`` (the result's) and ``"gemm"`` (:func:`_gemm_kinds` of its compiled
      program: which GEMM implementation the compiler chose).

    Raises:
      ValueError: an unknown precision (before jax is imported).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"--precision: unknown value {precision!r}; expected one of "
                         f"{', '.join(PRECISIONS)}")
    import contextlib

    import jax
    import numpy as np

    ctx = (jax.default_matmul_precision(precision) if precision != "default"
           else contextlib.nullcontext())
    process_precision = jax.config.jax_default_matmul_precision

    def forward(x, w, b):
        return x @ w + b

    def gradient(x, w, b, g):
        _, vjp = jax.vjp(lambda w_: forward(x, w_, b), w)
        return vjp(g)[0]

    results = {}
    with ctx:
        for name, lead in (rows or ROWS).items():
            ops = {k: jax.device_put(v) for k, v in mirror_operands(lead, units).items()}
            one = {}
            for what, fn, args in (("forward", forward, (ops["x"], ops["w"], ops["b"])),
                                   ("gradient", gradient,
                                    (ops["x"], ops["w"], ops["b"], ops["g"]))):
                compiled = jax.jit(fn).lower(*args).compile()
                out = np.asarray(compiled(*args))
                one[what] = {**mirror_diff(out), "shape": list(out.shape),
                             "gemm": _gemm_kinds(compiled.as_text() or "")}
            results[name] = one
    dev = jax.devices()[0]
    return {"backend": jax.default_backend(), "device_kind": dev.device_kind,
            "jax": jax.__version__, "precision": precision,
            "process_precision": None if process_precision is None else str(process_precision),
            "xla_flags": os.environ.get("XLA_FLAGS", ""), "results": results}


def autotune_pair(platform: str = "cuda", precision: str = "default",
                  python: str | None = None, timeout: float = 600) -> dict:
    """The probe in two fresh processes: autotuning off (:data:`AUTOTUNE_OFF` appended to
    ``XLA_FLAGS``) and on (``XLA_FLAGS`` as given).  On ``cpu`` and ``tpu`` the flag is
    not passed: both runs are the same probe (module doc).

    Args:
      platform: one of :data:`PLATFORMS` (``JAX_PLATFORMS`` of both processes);
        precision: one of :data:`PRECISIONS`; python: the interpreter (default this one;
        ``dreamer_parity`` must be importable there); timeout: seconds per process.

    Returns:
      ``{"platform", "precision", "flag_passed": bool, "autotune_off": probe dict,
      "autotune_on": probe dict}``.

    Raises:
      ValueError: an unknown platform or precision (before anything runs).
      RuntimeError: a process failed or printed no result (its last stderr line).
    """
    if platform not in PLATFORMS:
        raise ValueError(f"--platform: unknown value {platform!r}; expected one of "
                         f"{', '.join(PLATFORMS)}")
    if precision not in PRECISIONS:
        raise ValueError(f"--precision: unknown value {precision!r}; expected one of "
                         f"{', '.join(PRECISIONS)}")
    base = os.environ.get("XLA_FLAGS", "").strip()
    flag = platform == "cuda"
    out = {"platform": platform, "precision": precision, "flag_passed": flag}
    for key, flags in (("autotune_off", f"{base} {AUTOTUNE_OFF}".strip() if flag else base),
                       ("autotune_on", base)):
        env = {**os.environ, "XLA_FLAGS": flags}
        if not flags:
            env.pop("XLA_FLAGS")
        r = subprocess.run([python or sys.executable, "-m", "dreamer_parity.reference.mirror_gemm",
                            "--platform", platform, "--precision", precision],
                           capture_output=True, text=True, env=env, timeout=timeout, check=False)
        lines = r.stdout.strip().splitlines()
        if r.returncode != 0 or not lines:
            last = (r.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"mirror_gemm {key}: exit {r.returncode}: {last}")
        out[key] = json.loads(lines[-1])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dreamer_parity.reference.mirror_gemm",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--platform", required=True,
                    help="JAX_PLATFORMS: cpu, cuda or tpu (jax must run there)")
    ap.add_argument("--precision", default="default",
                    help="default (nothing set) or highest (jax_default_matmul_precision)")
    ap.add_argument("--autotune-pair", action="store_true",
                    help="run the probe twice in fresh processes, autotuning off (GPU: "
                         f"{AUTOTUNE_OFF}) and on, and print both")
    a = ap.parse_args(argv)
    try:
        if a.platform not in PLATFORMS:
            raise ValueError(f"--platform: unknown value {a.platform!r}; expected one of "
                             f"{', '.join(PLATFORMS)}")
        if a.precision not in PRECISIONS:
            raise ValueError(f"--precision: unknown value {a.precision!r}; expected one of "
                             f"{', '.join(PRECISIONS)}")
        if a.autotune_pair:
            print(json.dumps(autotune_pair(a.platform, a.precision), sort_keys=True))
            return 0
        os.environ["JAX_PLATFORMS"] = a.platform
        # the precision is --precision's alone: an inherited setting would make "default" another
        os.environ.pop("JAX_DEFAULT_MATMUL_PRECISION", None)
        import jax

        try:
            backend = jax.default_backend()
        except Exception as e:   # RuntimeError, or an AssertionError without a plugin
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
            raise ValueError(f"--platform {a.platform}: jax cannot run there ({first})") from None
        if backend != BACKENDS[a.platform]:
            raise ValueError(f"--platform {a.platform}: jax runs on {backend}")
        print(json.dumps(probe(a.precision), sort_keys=True))
    except (ValueError, RuntimeError) as e:
        print(f"mirror_gemm: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

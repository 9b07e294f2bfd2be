#!/usr/bin/env python3
"""Which vector instructions XLA:TPU emits for small float32 programs: compile only.

    PYTHONPATH=<unpacked libtpu>:src python benchmarks/tpu_vector_ops.py \\
        --out benchmarks/results/<date>-tpu-vector-ops.json

Each program of :data:`PROGRAMS` is lowered for the one chip of a compile-only TPU v5e
topology and compiled by the ``libtpu`` package's TPU compiler on this host's CPU (as
``benchmarks/tpu_compile_only.py`` does; nothing runs), with the compiler's low-level
(LLO) dumps switched on (``--xla_jf_dump_to``, ``--xla_jf_dump_llo_text``).  From the final
instruction bundles of each program it counts the vector instructions by opcode, and says
whether any of them is a fused multiply-add (an opcode containing ``fma``).

What it is for: the platform check's diagnosis (docs/DEVIATIONS.md, T4).  The ``exact``
two-hot expectation is exact only if a mirror pair with bitwise-equal logits contributes
exactly 0; a compiler that contracts ``p_hi - p_lo`` (each ``p = e * (1/Z)``) into a fused
multiply-add leaves a rounding residual that the outer bins (4.85e8) amplify.  The
programs are that expectation as the protocol patch computes it
(:func:`dreamer_parity.reference.patches.exact_mean`'s arithmetic on a ``[1024, 255]``
batch of logits, softmax included) and the two smallest forms a compiler could contract,
``a * b + c`` and ``a * b - c * d``.

The output JSON (no absolute path, no host name) names its invocation (command line, date,
commit, libtpu version); the end prints a Markdown table.

Exit status: 0; 2 when libtpu cannot be imported or the topology cannot be made (one line).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))   # benchmarks.tpu_compile_only

from benchmarks.tpu_compile_only import TPU_ENV, SizingError, check_libtpu, chip  # noqa: E402
from dreamer_parity import provenance, records  # noqa: E402  (standard library only)

SCHEMA = "tpu_vector_ops/1"
#: An LLO instruction in a bundle dump: ``%name = opcode operands``.
OPCODE = re.compile(r"=\s+(v[a-z0-9_]+(?:\.[a-z0-9_]+)*)")
#: The final bundles of one HLO instruction's code (not the program's prologue/epilogue).
FINAL = re.compile(r"^\d+-(?!TLP-)(?P<op>[^<].*?)-\d+-final_bundles\.txt$")


def count_ops(text: str) -> Counter:
    """Vector opcodes (``v...``) of an LLO bundle dump, counted.

    Args:
      text: the content of a ``*-final_bundles.txt`` dump.

    Returns:
      Counter of opcode -> occurrences.
    """
    return Counter(m.group(1) for m in OPCODE.finditer(text))


def fused_multiply_adds(ops: Counter) -> dict:
    """The fused multiply-add opcodes among ``ops`` (an opcode containing ``fma``)."""
    return {k: v for k, v in ops.items() if "fma" in k}


def dump_ops(dump_dir: Path) -> tuple[Counter, int]:
    """Vector opcodes over every final-bundle dump in ``dump_dir`` (each HLO instruction's
    code and the program's own), counted; and the number of files read."""
    total, n = Counter(), 0
    for path in sorted(Path(dump_dir).iterdir()):
        if path.name.endswith("-final_bundles.txt") and "schedule-analysis" not in path.name:
            total += count_ops(path.read_text(errors="replace"))
            n += 1
    return total, n


def program_ops(dump_dir: Path, files: set[str]) -> dict:
    """``{HLO instruction: Counter}`` of the final-bundle dumps named in ``files``."""
    out = {}
    for name in sorted(files):
        m = FINAL.match(name)
        if m:
            out[m.group("op")] = out.get(m.group("op"), Counter()) + count_ops(
                (dump_dir / name).read_text(errors="replace"))
    return out


def _programs():
    import jax
    import jax.numpy as jnp

    def exact_mean(logits, b):
        # dreamer_parity.reference.patches.exact_mean's arithmetic, as TwoHotDist feeds it
        p = jax.nn.softmax(logits)
        m = (logits.shape[-1] - 1) // 2
        lower, upper = p[..., :m][..., ::-1], p[..., m + 1:]
        return ((upper - lower) * b[..., m + 1:]).sum(-1) + p[..., m] * b[..., m]

    f32 = jnp.float32
    return {
        "a*b+c": (lambda a, b, c: a * b + c, [(8, 128)] * 3, f32),
        "a*b-c*d": (lambda a, b, c, d: a * b - c * d, [(8, 128)] * 4, f32),
        "exact_mean[1024,255]": (exact_mean, [(1024, 255), (255,)], f32),
    }


def measure(topology: str) -> list[dict]:
    """Compile each program of :func:`_programs` for ``topology``; its opcode counts.

    Raises:
      SizingError: the topology cannot be made.
    """
    dump = Path(tempfile.mkdtemp(prefix="tpu-vector-ops-"))
    os.environ["LIBTPU_INIT_ARGS"] = (os.environ.get("LIBTPU_INIT_ARGS", "") +
                                      f" --xla_jf_dump_to={dump} --xla_jf_dump_llo_text=true")
    import jax

    topo, sharding = chip(topology)
    rows = []
    for name, (fn, shapes, dtype) in _programs().items():
        before = set(os.listdir(dump))
        args = [jax.ShapeDtypeStruct(s, dtype, sharding=sharding) for s in shapes]
        jax.jit(fn).lower(*args).compile()
        by_op = program_ops(dump, set(os.listdir(dump)) - before)
        total = sum(by_op.values(), Counter())
        rows.append({"program": name, "shapes": [list(s) for s in shapes],
                     "device_kind": topo.devices[0].device_kind,
                     "float_ops": {k: v for k, v in sorted(total.items()) if ".f32" in k},
                     "fused_multiply_adds": fused_multiply_adds(total),
                     "by_instruction": {k: dict(sorted(v.items())) for k, v in by_op.items()}})
    return rows


def table(rows: list[dict]) -> str:
    """Markdown: per program, its float32 vector opcodes and its fused multiply-adds."""
    out = ["| program | float32 vector instructions | fused multiply-adds |", "|---|---|---|"]
    for r in rows:
        ops = ", ".join(f"{k} {v}" for k, v in r["float_ops"].items())
        fma = ", ".join(f"{k} {v}" for k, v in r["fused_multiply_adds"].items()) or "none"
        out.append(f"| `{r['program']}` | {ops} | {fma} |")
    return "\n".join(out)


def main(argv=None) -> int:
    from dreamer_parity import records as records_cli

    ap = records_cli.ArgumentParser(prog="benchmarks/tpu_vector_ops.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topology", default="v5e:1x1", help="compile-only TPU topology name")
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    a = ap.parse_args(argv)
    from dreamer_parity import records as _records
    try:      # every argument before anything is computed (one line, exit 2)
        if a.out is not None:
            _records.check_target(a.out, "--out", "file", inside=False)
    except _records.RecordError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for k, v in TPU_ENV.items():
        os.environ.setdefault(k, v)
    try:
        libtpu = check_libtpu()
        rows = measure(a.topology)
    except SizingError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    doc = {"schema": SCHEMA, "topology": a.topology, "libtpu": libtpu,
           "invocation": {"argv": ["benchmarks/tpu_vector_ops.py", *(argv or sys.argv[1:])],
                          "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
                          "provenance": provenance.collect()},
           "note": "the TPU compiler's output for a compile-only topology; nothing ran",
           "programs": rows}
    if a.out:
        records.write_json(Path(a.out), doc)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

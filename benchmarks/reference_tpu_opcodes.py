#!/usr/bin/env python3
"""The reference's whole train step compiled for a TPU v5e (compile only): its vector opcodes.

    python benchmarks/reference_tpu_opcodes.py --params P --seed S --out DIR \\
        --libtpu <folder holding the unpacked libtpu package> [--json FILE] [--set KEY=VALUE ...]

Launches seed ``S`` of the params in ``P`` as the pipeline's reference stage does
(:func:`dreamer_parity.reference.launch.launch`: the same set-up checks, venv, shims,
precision and patches), but through :mod:`dreamer_parity.reference.compile_runner`: at the
first update the reference's jitted train step is compiled for a compile-only TPU v5e by
the ``libtpu`` package on this host's CPU, with the TPU compiler's final instruction
bundles dumped into a temporary folder, and the run stops (``DIR`` keeps ``run.json``,
``compile.json`` and no ``DONE.json``: never a finished run).  This script then counts the
vector opcodes over every dump (``benchmarks/tpu_vector_ops.py``'s reading), says whether
any is a fused multiply-add, prints the float32 ones and, with ``--json``, writes the
figures (no absolute path, no host name).  The dumps (about 170 MiB) are deleted.

What it is for: docs/DEVIATIONS.md, T4.  ``benchmarks/tpu_vector_ops.py`` shows that the
``exact`` expectation compiled alone gets no fused multiply-add; this shows it for the
reference's train step as the TPU runs compiled it (up to the libtpu version).

Exit status: 0; 1 the compile did not finish (the runner's reason in ``DIR``); 2 bad input
or a set-up failure (one line), nothing run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))   # benchmarks.tpu_vector_ops

from benchmarks.lib.cli import add_reference_seed_arguments  # noqa: E402
from benchmarks.tpu_vector_ops import dump_ops, fused_multiply_adds  # noqa: E402
from dreamer_parity import keep, provenance, records  # noqa: E402  (standard library only)
from dreamer_parity.reference import compile_runner, launch  # noqa: E402  (imports no jax)

SCHEMA = "reference_tpu_opcodes/1"
MODULE = "dreamer_parity.reference.compile_runner"


def main(argv=None) -> int:
    from dreamer_parity import records as records_cli

    ap = records_cli.ArgumentParser(prog="benchmarks/reference_tpu_opcodes.py",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_reference_seed_arguments(ap, "a new directory for the stopped run")
    ap.add_argument("--libtpu", required=True,
                    help="a folder holding the unpacked libtpu package (libtpu/__init__.py)")
    ap.add_argument("--json", default=None, help="write the figures as JSON here")
    a = ap.parse_args(argv)
    from dreamer_parity import records as _records
    try:      # every argument before anything is computed (one line, exit 2)
        _records.check_source(a.libtpu, "--libtpu", "dir")
        if a.json is not None:
            _records.check_target(a.json, "--json", "file", inside=False)
    except _records.RecordError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        p = keep.load_params(a.params, a.set)
        seed = launch.parse_seed(a.seed)
        libtpu = Path(a.libtpu).resolve()
        if not (libtpu / "libtpu" / "__init__.py").is_file():
            raise launch.LaunchError(f"--libtpu {a.libtpu}: no libtpu/__init__.py there "
                                     f"(unpack a libtpu wheel into it)")
    except (keep.KeepError, launch.LaunchError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    dump = Path(tempfile.mkdtemp(prefix="reference-tpu-llo-"))
    os.environ[compile_runner.ENV_LIBTPU] = str(libtpu)
    os.environ["LIBTPU_INIT_ARGS"] = (
        os.environ.get("LIBTPU_INIT_ARGS", "") + f" --xla_jf_dump_to={dump}"
        " --xla_jf_dump_llo_text=true --xla_jf_dump_llo_pass_label_regex=final_bundles")
    try:
        code = launch.launch(p, seed, a.out, a.root, module=MODULE)
        out = Path(a.out)
        if code != 0 or not (out / "compile.json").exists():
            print(f"reference tpu opcodes: the compile did not finish (exit {code}); see {out}",
                  file=sys.stderr)
            return code or 1
        figures = json.loads((out / "compile.json").read_text())
        ops, files = dump_ops(dump)
    finally:
        shutil.rmtree(dump, ignore_errors=True)
    fma = fused_multiply_adds(ops)
    doc = {"schema": SCHEMA, "seed": seed, "compile": figures, "dump_files": files,
           "instructions": sum(ops.values()), "opcodes": dict(sorted(ops.items())),
           "fused_multiply_adds": fma,
           "invocation": {"argv": ["benchmarks/reference_tpu_opcodes.py",
                                   *(argv if argv is not None else sys.argv[1:])],
                          "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
                          "provenance": provenance.collect()}}
    doc["invocation"]["argv"] = [x if not os.path.isabs(x) else "<path>"
                                 for x in doc["invocation"]["argv"]]
    if a.json:
        records.write_json(Path(a.json), doc)
    f32 = ", ".join(f"{k} {v}" for k, v in sorted(ops.items(), key=lambda kv: -kv[1])
                    if ".f32" in k and not k.startswith(("vpop", "vmatmul")))
    print(f"train step for {figures['topology']} ({figures['device_kind']}), compiled in "
          f"{figures['compile_s']:.1f} s, {figures['fusions']} fusions; {files} dumps, "
          f"{doc['instructions']} vector instructions, {len(ops)} opcodes")
    print(f"float32 vector arithmetic: {f32}")
    print(f"fused multiply-adds: {', '.join(f'{k} {v}' for k, v in fma.items()) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

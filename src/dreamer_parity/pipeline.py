"""The entry points the DVC stages of ``dvc.yaml`` call; each loads params.yaml once and
calls its component.

Subcommands (working directory: the repository root, or a temporary experiment clone)::

    python -m dreamer_parity.pipeline preflight --out results/preflight.ok
    python -m dreamer_parity.pipeline reference --seed S --out results/reference/sS
    python -m dreamer_parity.pipeline compare

``preflight``
    :func:`dreamer_parity.preflight.check`: params.yaml, the round's pre-registration,
    both sides' sources (:func:`dreamer_parity.sides.resolve`) and, when a reference seed
    runs here, the reference set-up.  On success it writes a file whose content never
    changes (:data:`dreamer_parity.preflight.GATE_TEXT`): every other stage depends on it,
    so DVC runs this check first, and it never makes another stage rerun.
    On failure: one line ``error: ...`` on stderr, exit status 2, nothing written or
    removed.

Every output path is checked before anything is computed
(:func:`dreamer_parity.records.check_target`: inside the repository, a file where a file
goes, a directory where a directory goes), and ``--seed`` is read only after params.yaml
is validated, so a seed written ``1.0`` there is refused naming params.yaml.

``reference``
    A seed whose reference source is ``run``: :func:`dreamer_parity.reference.launch.launch`.
    Any other source: the runs stand in for the seed, nothing runs, and the stage writes
    ``DIR/STAND_IN.json`` (:func:`dreamer_parity.sides.write_stand_in`; no ``DONE.json``)
    naming the runs :func:`dreamer_parity.sides.resolve` reads for the seed.

``compare``
    :func:`dreamer_parity.analysis.compare.run_round` on the sides that
    :func:`dreamer_parity.sides.resolve` names (every manifest of a directory source
    verified), with the pre-registration ``docs/rounds/<round>.md``
    (:func:`dreamer_parity.preflight.check_prereg`).  Before the analysis starts, every
    finished run of the records schema is checked against itself and the round
    (:func:`dreamer_parity.preflight.check_runs`); a refused input (exit 2) leaves every
    output as it was (``metrics/train_last_window.json`` is replaced only after the
    analysis wrote its outputs).  Exit status: the analysis's.

The candidate stage runs :mod:`dreamer_parity.candidate.runtime.run`, which writes the
candidate's stand-in markers the same way.  Errors: one line ``error: ...`` on stderr,
exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from dreamer_parity import params as P
from dreamer_parity import preflight as pf
from dreamer_parity import records, sides

__all__ = ["main"]


def _target(path, where: str, kind: str) -> Path:
    """:func:`dreamer_parity.records.check_target` as a PreflightError (inside the
    repository: every stage output is)."""
    try:
        return records.check_target(path, where, kind)
    except records.RecordError as e:
        raise pf.PreflightError(str(e)) from None


def _cmd_preflight(a) -> int:
    out = _target(a.out, "--out", "file")
    pf.check(pf.load(a.params))   # refused: nothing written or removed (DVC removes outs)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
    tmp.write_text(pf.GATE_TEXT)
    os.replace(tmp, out)
    print(f"{a.params}: ok")
    return 0


def _cmd_reference(a) -> int:
    round_ = pf.load(a.params)     # first: a seed written 1.0 in params.yaml is named there
    if not (a.seed.isascii() and a.seed.isdigit()) or len(a.seed) > 10 or (
            len(a.seed) > 1 and a.seed[0] == "0"):
        raise pf.PreflightError(f"--seed {a.seed[:40]!r}: not a seed (a whole number written "
                                f"as an integer, e.g. 3)")
    a.seed = int(a.seed)
    _target(a.out, "--out", "dir")
    where = round_.reference.origins()
    if a.seed not in where:
        raise pf.PreflightError(f"params: seeds: seed {a.seed} is not a reference seed "
                                f"{list(round_.reference.seeds)}")
    if where[a.seed] == "run":
        from dreamer_parity.reference import launch
        return launch.launch(round_, a.seed, a.out)
    try:        # the runs sides.resolve reads for this seed (the one decision)
        entry = sides.stand_ins(round_, "reference")[a.seed]
    except (sides.SideError, P.ParamsError, records.RecordError) as e:
        raise pf.PreflightError(str(e)) from None
    sides.write_stand_in(a.out, "reference", a.seed, entry.source, where[a.seed])
    print(sides.stand_in_line("reference", entry, where[a.seed]))
    return 0


def _cmd_compare(a) -> int:
    round_ = pf.load(a.params)
    prereg = pf.check_prereg(round_.name)
    # Each run's files against each other and the round (their manifests verified first),
    # standard library only, before the analysis imports anything heavy or writes anything.
    try:
        resolved = sides.resolve(round_)
    except (sides.SideError, P.ParamsError, records.RecordError) as e:
        raise pf.PreflightError(str(e)) from None
    pf.check_runs(round_, resolved, every_seed=True)
    from dreamer_parity.analysis import compare

    return compare.run_round(round_, ".", "metrics", "metrics/plots", "results/report.md",
                             prereg=str(prereg))


def main(argv=None) -> int:
    ap = records.ArgumentParser(prog="python -m dreamer_parity.pipeline", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params.yaml")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("preflight", help="validate the round before any stage runs")
    p.add_argument("--out", default="results/preflight.ok")
    r = sub.add_parser("reference", help="run one reference seed, or note the stand-in")
    r.add_argument("--seed", required=True, help="a reference seed of params.yaml (checked "
                                                 "after params.yaml is validated)")
    r.add_argument("--out", required=True)
    sub.add_parser("compare", help="run the analysis on the sides this round names")
    a = ap.parse_args(argv)
    try:
        return {"preflight": _cmd_preflight, "reference": _cmd_reference,
                "compare": _cmd_compare}[a.cmd](a)
    except pf.PreflightError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

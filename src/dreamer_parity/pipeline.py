"""The glue the DVC stages of ``dvc.yaml`` call around the components.

Three subcommands, each run by one stage (working directory: the repository root, or a
temporary experiment clone of it)::

    python -m dreamer_parity.pipeline preflight --out results/preflight.ok
    python -m dreamer_parity.pipeline reference --seed S --out results/reference/sS
    python -m dreamer_parity.pipeline compare

``preflight``
    Validates params.yaml (:func:`dreamer_parity.params.load`), the round's
    pre-registration ``docs/rounds/<round>.md``, and the reference side: the reference
    set-up (:func:`dreamer_parity.reference.setup.check_setup`) when
    ``reference.source`` is ``run``, else the published directory it names (relative
    path, one ``ref_s<S>/evals.jsonl`` per seed).  On success it writes a file whose
    content never changes: every other stage depends on it, so DVC runs this check
    first, and because its hash stays the same it never makes another stage rerun.
    On failure: one line ``error: ...`` on stderr, exit status 2, no file.

``reference``
    ``reference.source: run``: replaces itself with
    ``python -m dreamer_parity.reference.launch --params params.yaml --seed S --out DIR``.
    A published directory: the published runs stand in for the reference, so nothing is
    run; the stage writes ``DIR/STAND_IN.json`` naming the source.  That directory has no
    ``DONE.json``, so no reader takes it for a run.

``compare``
    Runs ``python -m dreamer_parity.analysis.compare`` with ``--reference`` set to
    ``results/reference`` (source ``run``) or to the published directory, and
    ``--prereg docs/rounds/<round>.md``; then writes ``metrics/train_last_window.json``
    (:func:`last_window_metrics`): the last-window means of the training metrics that
    the two-hot decode moves (:data:`DECODE_METRICS`), per side and seed, so that
    ``dvc metrics diff`` shows a decode change even where the evaluation returns do not
    move (smoke size).  Exit status: the analysis's.

Errors are one line naming the parameter or file; nothing here computes anything.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import params as P
from .records import write_json

__all__ = ["PreflightError", "preflight", "prereg_path", "reference_dir", "GATE_TEXT",
           "RESULTS_REFERENCE", "RESULTS_CANDIDATE", "DECODE_METRICS", "last_window_metrics"]

#: Content of the preflight gate file (constant on purpose, see the module doc).
GATE_TEXT = "params.yaml, pre-registration and reference side checked\n"
RESULTS_REFERENCE = "results/reference"
RESULTS_CANDIDATE = "results/candidate"
TRAIN_METRICS_FILE = "metrics/train_last_window.json"

#: Training metrics (reference names, records.py ``train``) whose window means follow the
#: two-hot expectation: value and return spreads and the reward prediction (published
#: study, DIAGNOSIS: the reference formula adds noise to every reward and value prediction).
DECODE_METRICS = ("val/std", "val/mean", "ret/std", "ret/mean", "rew/std", "adv/std")


class PreflightError(ValueError):
    """A round cannot start; the message is one line naming the parameter or file."""


def prereg_path(params: dict, root: Path = Path(".")) -> Path:
    """``docs/rounds/<round>.md`` under ``root`` (the round's pre-registration)."""
    return Path(root) / "docs" / "rounds" / f"{params['round']}.md"


def _check_published(params: dict, root: Path) -> Path:
    src = params["reference"]["source"]   # relative: params.validate refuses an absolute one
    d = Path(root) / src
    if not d.is_dir():
        raise PreflightError(
            f"params: reference.source: {src} is not a directory; the published rounds are "
            f"data/published/round1, round2 and round3 (git-tracked), or set "
            f"reference.source: run")
    missing = [s for s in params["seeds"] if not (d / f"ref_s{s}" / "evals.jsonl").is_file()]
    if missing:
        raise PreflightError(
            f"params: reference.source: {src} has no published run for seeds {missing} "
            f"(expected {src}/ref_s<S>/evals.jsonl)")
    return d


def _check_reference_setup() -> None:
    from .reference import setup as ref_setup

    try:
        ref_setup.check_setup(check_packages=False)
    except ref_setup.SetupError as e:
        raise PreflightError(f"reference set-up: {e}") from None


def preflight(params_file: str | Path = "params.yaml", root: str | Path = ".",
              check_reference: bool = True) -> dict:
    """Check that a round can start; return the validated parameters.

    Args:
      params_file: the params file (validated by :func:`dreamer_parity.params.load`).
      root: the repository root (paths in params are relative to it).
      check_reference: verify the reference set-up when ``reference.source`` is ``run``
        (checkout at 29eb964 and venv present; package versions are the launcher's check).

    Raises:
      PreflightError: one line naming the parameter or file; a ``params.ParamsError`` or
        a missing params file is re-raised as this type with the same message.
    """
    root = Path(root)
    try:
        params = P.load(root / params_file)
    except P.ParamsError as e:
        raise PreflightError(str(e)) from None
    except FileNotFoundError:
        raise PreflightError(f"{params_file}: missing") from None
    pre = prereg_path(params, root)
    if not pre.is_file():
        raise PreflightError(
            f"params: round: no pre-registration {pre.relative_to(root)}; write and commit "
            f"it before the round runs (docs/rounds/README.md)")
    if params["reference"]["source"] != "run":
        _check_published(params, root)
    elif check_reference:
        _check_reference_setup()
    return params


def reference_dir(params: dict) -> str:
    """The directory compare reads the reference side from (relative to the root)."""
    src = params["reference"]["source"]
    return RESULTS_REFERENCE if src == "run" else src


def _exec(module: str, args: list[str]) -> None:
    argv = [sys.executable, "-m", module, *args]
    print("> python -m " + " ".join([module, *args]), flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)


def _cmd_preflight(a) -> int:
    out = Path(a.out)
    if out.exists():
        out.unlink()
    preflight(a.params)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
    tmp.write_text(GATE_TEXT)
    os.replace(tmp, out)
    print(f"{a.params}: ok")
    return 0


def _cmd_reference(a) -> int:
    params = preflight(a.params, check_reference=False)
    if a.seed not in params["seeds"]:
        raise PreflightError(f"params: seeds: seed {a.seed} is not in {params['seeds']}")
    src = params["reference"]["source"]
    if src == "run":
        _exec("dreamer_parity.reference.launch",
              ["--params", str(a.params), "--seed", str(a.seed), "--out", str(a.out)])
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "STAND_IN.json", {
        "seed": a.seed, "source": src,
        "note": "reference.source names published runs: they stand in for the reference "
                "side and nothing was run here (no DONE.json: this is not a run)"})
    print(f"reference.source is {src}: seed {a.seed} is not run; compare reads {src}")
    return 0


def _side_run_dir(directory: Path, side: str, seed: int) -> Path:
    """``<dir>/s<seed>``, or ``<dir>/<side>/s<seed>`` where a writer nests the side."""
    flat = Path(directory) / f"s{int(seed)}"
    return flat if flat.is_dir() else Path(directory) / side / f"s{int(seed)}"


def last_window_metrics(params: dict, sides: dict, names=DECODE_METRICS) -> dict:
    """Last-window means of training metrics, per side and seed, as flat metric keys.

    Args:
      params: validated params (``seeds``, ``rows``).
      sides: ``{"reference": dir or None, "candidate": dir}``; None (a published stand-in,
        which has no training metrics) gives a ``<side>.reason`` key instead.
      names: metric names of the records' ``train`` dict.

    Returns:
      ``{"<name>.<side>.s<seed>": float | None, "<name>.<side>.mean": float | None,
      "rows": int}``: the window ending at the last evaluation point (``params rows``);
      None where the seed has no record there (a failed seed) or no finite value.

    Raises:
      records.RecordError: a run directory without its completion marker, or malformed.
    """
    import math

    from . import records

    out: dict = {"rows": params["rows"]}
    for side, directory in sides.items():
        if directory is None:
            out[f"{side}.reason"] = "published runs carry no training-metric windows"
            continue
        last = {}
        for seed in params["seeds"]:
            recs = records.read_records(_side_run_dir(directory, side, seed))
            last[seed] = next((r["train"] for r in recs if r["rows"] == params["rows"]), {})
        for name in names:
            vals = []
            for seed in params["seeds"]:
                v = last[seed].get(name)
                v = float(v) if v is not None and math.isfinite(v) else None
                out[f"{name}.{side}.s{seed}"] = v
                if v is not None:
                    vals.append(v)
            out[f"{name}.{side}.mean"] = (sum(vals) / len(vals)
                                          if len(vals) == len(params["seeds"]) else None)
    return out


def _cmd_compare(a) -> int:
    import subprocess

    params = preflight(a.params, check_reference=False)
    args = ["--params", str(a.params), "--reference", reference_dir(params),
            "--candidate", RESULTS_CANDIDATE, "--metrics-dir", "metrics",
            "--plots-dir", "metrics/plots", "--report", "results/report.md",
            "--prereg", str(prereg_path(params))]
    print("> python -m dreamer_parity.analysis.compare " + " ".join(args), flush=True)
    out = Path(TRAIN_METRICS_FILE)
    if out.exists():
        out.unlink()
    rc = subprocess.call([sys.executable, "-m", "dreamer_parity.analysis.compare", *args])
    if rc not in (0, 1):   # 2: bad input, nothing written
        return rc
    ref = RESULTS_REFERENCE if params["reference"]["source"] == "run" else None
    write_json(out, last_window_metrics(params, {"reference": ref,
                                                 "candidate": RESULTS_CANDIDATE}))
    return rc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dreamer_parity.pipeline", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params.yaml")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("preflight", help="validate the round before any stage runs")
    p.add_argument("--out", default="results/preflight.ok")
    r = sub.add_parser("reference", help="run one reference seed, or note the stand-in")
    r.add_argument("--seed", type=int, required=True)
    r.add_argument("--out", required=True)
    sub.add_parser("compare", help="run the analysis on the sides this round names")
    a = ap.parse_args(argv)
    try:
        return {"preflight": _cmd_preflight, "reference": _cmd_reference,
                "compare": _cmd_compare}[a.cmd](a)
    except PreflightError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""Argument types, options and parameters shared by the benchmark scripts.  Standard library
and the package only."""

from __future__ import annotations

import argparse

from dreamer_parity import params as P

__all__ = ["positive_int", "add_reference_seed_arguments", "bench_params"]


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1, written in ASCII digits.

    Raises:
      argparse.ArgumentTypeError: any other text (argparse names the option).
    """
    if not (text.isascii() and text.isdecimal()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(text)


def add_reference_seed_arguments(ap: argparse.ArgumentParser, out_help: str) -> None:
    """The options of a script that launches one reference seed of a round's params
    (``--params``, ``--set``, ``--seed``, ``--out``, ``--root``), as
    ``benchmarks/reference_mirror_probe.py`` takes them; the values are validated by their
    readers (``keep.load_params``, ``launch.parse_seed``)."""
    ap.add_argument("--params", required=True, help="a round's params file")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="change one parameter (repeatable)")
    ap.add_argument("--seed", required=True, help="the seed, a non-negative integer")
    ap.add_argument("--out", required=True, help=out_help)
    ap.add_argument("--root", default=None, help="reference set-up root (default as "
                                                 "`python -m dreamer_parity.reference.setup`)")


def bench_params(raw: dict, sets=(), where: str = "benchmark") -> dict:
    """The validated parameters of a benchmark run: ``raw`` (a partial params dict,
    :func:`dreamer_parity.params.validate`'s defaults for the rest) with the ``KEY=VALUE``
    assignments ``sets`` applied (:func:`dreamer_parity.params.apply_set`) and the statistics
    keys, which no benchmark reads, set to the smallest valid ones (the last evaluation
    point).  The same validation as the pipeline's, so a schema change reaches every script.

    Raises:
      ParamsError: a bad value (the one-line message every entry point prints).
    """
    raw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    for s in sets:
        P.apply_set(raw, s)
    rows = raw.get("rows", P.SCHEMA["rows"].default)
    raw["stats"] = {**raw.get("stats", {}), "s1_rows": [rows], "late_rows": [],
                    "concordance_rows": [rows], "concordance_range": [],
                    "signature_rows": [], "persistence_rows": []}
    return P.validate(raw, where=where)

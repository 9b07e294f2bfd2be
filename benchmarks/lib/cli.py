"""Argument types and options shared by the benchmark scripts' command lines.  Standard library
only."""

from __future__ import annotations

import argparse

__all__ = ["positive_int", "add_reference_seed_arguments"]


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
    ``benchmarks/reference_mirror_probe.py`` and ``benchmarks/reference_tpu_opcodes.py``
    take them; the values are validated by their readers (``keep.load_params``,
    ``launch.parse_seed``)."""
    ap.add_argument("--params", required=True, help="a round's params file")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="change one parameter (repeatable)")
    ap.add_argument("--seed", required=True, help="the seed, a non-negative integer")
    ap.add_argument("--out", required=True, help=out_help)
    ap.add_argument("--root", default=None, help="reference set-up root (default as "
                                                 "`python -m dreamer_parity.reference.setup`)")

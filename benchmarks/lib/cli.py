"""Argument types shared by the benchmark scripts' command lines.  Standard library only."""

from __future__ import annotations

import argparse

__all__ = ["positive_int"]


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1, written in ASCII digits.

    Raises:
      argparse.ArgumentTypeError: any other text (argparse names the option).
    """
    if not (text.isascii() and text.isdecimal()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(text)

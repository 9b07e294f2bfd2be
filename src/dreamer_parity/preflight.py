"""Checks that a round can start, before any stage computes (the DVC stage ``preflight``).

:func:`preflight` validates params.yaml (:func:`dreamer_parity.params.load`), the round's
pre-registration ``docs/rounds/<round>.md``, both sides' sources
(:func:`dreamer_parity.sides.resolve`: every seed of a directory source is there) and,
when this repository runs a reference seed, the reference set-up
(:func:`dreamer_parity.reference.setup.check_setup`).
"""

from __future__ import annotations

from pathlib import Path

from dreamer_parity import params as P
from dreamer_parity import records, sides

__all__ = ["PreflightError", "preflight", "prereg_path", "check", "GATE_TEXT"]

#: Content of the preflight gate file: constant on purpose, so that every stage can depend
#: on it (it runs first) without it ever making them rerun (the text never changes, even
#: where it names fewer checks than the stage makes).
GATE_TEXT = "params.yaml, pre-registration and reference side checked\n"


class PreflightError(ValueError):
    """A round cannot start; the message is one line naming the parameter or file."""


def prereg_path(params: dict, root: str | Path = ".") -> Path:
    """``docs/rounds/<round>.md`` under ``root`` (the round's pre-registration)."""
    return Path(root) / "docs" / "rounds" / f"{params['round']}.md"


def _check_reference_setup() -> None:
    from dreamer_parity.reference import setup as ref_setup

    try:
        ref_setup.check_setup(check_packages=False)
    except ref_setup.SetupError as e:
        raise PreflightError(f"reference set-up: {e}") from None


def load(params_file: str | Path = "params.yaml", root: str | Path = ".") -> dict:
    """Load and validate params (once per stage); errors as :class:`PreflightError`.

    Raises:
      PreflightError: the ``params.ParamsError`` line, or ``<file>: missing``.
    """
    try:
        return P.load(Path(root) / params_file)
    except P.ParamsError as e:
        raise PreflightError(str(e)) from None
    except FileNotFoundError:
        raise PreflightError(f"{params_file}: missing") from None


def check(params: dict, root: str | Path = ".", check_reference: bool = True) -> dict:
    """Check a validated round; return ``sides.resolve(params, root)``.

    Raises:
      PreflightError: no pre-registration, a side source that cannot be used, or (with
        ``check_reference`` and a reference seed of source ``run``) no reference set-up.
    """
    root = Path(root)
    pre = prereg_path(params, root)
    if not pre.is_file():
        raise PreflightError(
            f"params: round: no pre-registration {pre.relative_to(root)}; write and commit "
            f"it before the round runs (docs/rounds/README.md)")
    try:
        resolved = sides.resolve(params, root)
    except (sides.SideError, P.ParamsError, records.RecordError) as e:
        raise PreflightError(str(e)) from None
    if check_reference and sides.runs_here(params, "reference"):
        _check_reference_setup()
    return resolved


def preflight(params_file: str | Path = "params.yaml", root: str | Path = ".",
              check_reference: bool = True) -> dict:
    """Check that a round can start; return the validated parameters.

    Args:
      params_file: the params file, relative to ``root``.
      root: the repository root (paths in params are relative to it).
      check_reference: verify the reference set-up when a reference seed's source is
        ``run`` (checkout at 29eb964 and venv present; package versions are the
        launcher's check).

    Raises:
      PreflightError: one line naming the parameter or file.
    """
    params = load(params_file, root)
    check(params, root, check_reference)
    return params

"""Checks that a round can start, before any stage computes (the DVC stage ``preflight``).

:func:`preflight` validates params.yaml into the round
(:func:`dreamer_parity.params.load_round`), the round's
pre-registration ``docs/rounds/<round>.md``, both sides' sources
(:func:`dreamer_parity.sides.resolve`: every seed of a directory source is there, and
each of its runs in the records schema agrees with itself and the round,
:func:`check_runs`) and, when this repository runs a reference seed, the reference set-up
(:func:`dreamer_parity.reference.setup.check_setup`).
"""

from __future__ import annotations

from pathlib import Path

from dreamer_parity import params as P
from dreamer_parity import records, sides
from dreamer_parity.round_spec import Round

__all__ = ["PreflightError", "preflight", "prereg_path", "check", "check_runs", "GATE_TEXT",
           "check_prereg"]

#: Content of the preflight gate file: constant on purpose, so that every stage can depend
#: on it (it runs first) without it ever making them rerun (the text never changes, even
#: where it names fewer checks than the stage makes).
GATE_TEXT = "params.yaml, pre-registration and reference side checked\n"


class PreflightError(ValueError):
    """A round cannot start; the message is one line naming the parameter or file."""


def prereg_path(name: str, root: str | Path = ".") -> Path:
    """``docs/rounds/<name>.md`` under ``root`` (the pre-registration of the round called
    ``name``, :attr:`dreamer_parity.round_spec.Round.name`)."""
    return Path(root) / "docs" / "rounds" / f"{name}.md"


def check_prereg(name: str, root: str | Path = ".") -> Path:
    """Require the pre-registration ``docs/rounds/<name>.md`` of the round called ``name``
    (a reserved name
    such as ``README`` never gets here: :func:`dreamer_parity.params.validate` refuses it).

    The file must pass the guarded reader's checks
    (:func:`dreamer_parity.records.check_file`): a regular file inside the repository, at
    most ``records.MAX_BYTES["text"]`` bytes; the report links it.

    Returns:
      Its path.

    Raises:
      PreflightError: ``params: round: ...`` naming the file.
    """
    root = Path(root)
    pre = prereg_path(name, root)
    rel = pre.relative_to(root).as_posix()
    try:
        records.check_file(pre, rel)
    except FileNotFoundError:
        raise PreflightError(
            f"params: round: no pre-registration {rel}; write and commit it before the "
            f"round runs (docs/rounds/README.md)") from None
    except records.RecordError as e:
        raise PreflightError(f"params: round: {e}") from None
    return pre


def _check_reference_setup(jax: str) -> None:
    from dreamer_parity.reference import setup as ref_setup

    try:
        ref_setup.check_setup(check_packages=False, jax=jax)
    except ref_setup.SetupError as e:
        raise PreflightError(f"reference set-up: {e}") from None


def load(params_file: str | Path = "params.yaml", root: str | Path = ".") -> Round:
    """The round of a params file (:func:`dreamer_parity.params.load_round`, once per
    stage); errors as :class:`PreflightError`.

    Raises:
      PreflightError: the ``params.ParamsError`` line, or ``<file>: missing``.
    """
    try:
        return P.load_round(Path(root) / params_file)
    except P.ParamsError as e:
        raise PreflightError(str(e)) from None
    except FileNotFoundError:
        raise PreflightError(f"{params_file}: missing") from None


def check(round_: Round, root: str | Path = ".", check_reference: bool = True) -> dict:
    """Check a round; return ``sides.resolve(round_, root)``.

    Raises:
      PreflightError: no pre-registration (:func:`check_prereg`), a side source that
        cannot be used (a run of a directory source whose files disagree, or whose
        manifest does not verify, included: :func:`check_runs`,
        :func:`dreamer_parity.sides.resolve`), or (with ``check_reference`` and a
        reference seed of source ``run``) no reference set-up.
    """
    root = Path(root)
    check_prereg(round_.name, root)
    try:
        resolved = sides.resolve(round_, root)
    except (sides.SideError, P.ParamsError, records.RecordError) as e:
        raise PreflightError(str(e)) from None
    check_runs(round_, resolved, root)
    if check_reference and round_.reference.runs_here():
        _check_reference_setup(round_.reference_run.jax)
    return resolved


def check_runs(round_: Round, resolved: dict, root: str | Path = ".",
               every_seed: bool = False) -> None:
    """Require every finished run of the records schema to agree with itself and the round.

    :func:`dreamer_parity.records.check_run_agrees` for each seed of layout ``records``,
    judged by the implementation that made it (``made_by``): ``DONE.json`` names its run,
    ``run.json`` records the round's protocol.  Standard library only, so an entry point
    refuses before it imports the analysis or writes anything.

    Args:
      round_: the round; resolved: :func:`dreamer_parity.sides.resolve`'s result.
      root: the repository root (``run_dir`` values are relative to it).
      every_seed: also the seeds this repository runs (source ``run``: the compare stage,
        after they ran); False checks only runs that a directory source names (the
        preflight stage, before anything ran).

    Raises:
      PreflightError: the one line of :class:`dreamer_parity.records.RecordError` naming
        the file and what disagrees.
    """
    for side, sd in resolved.items():
        for e in sd.seeds:
            if e.layout != "records" or (e.source == "run" and not every_seed):
                continue
            try:
                records.check_run_agrees(Path(root) / e.run_dir, round_, side, e.seed,
                                         made_by=e.made_by)
            except records.RecordError as err:
                hint = ""
                if e.source != "run" and str(err).endswith("other parameters than the round's"):
                    seeds_ = [x.seed for x in sd.seeds if x.source == e.source]
                    hint = "; " + sides.kept_runs_hint(round_, side, seeds_, root, e.source)
                raise PreflightError(f"{err}{hint}") from None


def preflight(params_file: str | Path = "params.yaml", root: str | Path = ".",
              check_reference: bool = True) -> Round:
    """Check that a round can start; return the round.

    Args:
      params_file: the params file, relative to ``root``.
      root: the repository root (paths in params are relative to it).
      check_reference: verify the reference set-up when a reference seed's source is
        ``run`` (checkout at 29eb964 and venv present; package versions are the
        launcher's check).

    Raises:
      PreflightError: one line naming the parameter or file.
    """
    round_ = load(params_file, root)
    check(round_, root, check_reference)
    return round_

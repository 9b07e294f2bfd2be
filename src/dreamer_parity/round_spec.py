"""The round: validated params.yaml as one frozen object, built once at each entry point.

:func:`dreamer_parity.params.load_round` reads params.yaml, validates it
(:func:`dreamer_parity.params.validate`) and builds a :class:`Round` with
:meth:`Round.from_params`; ``compare``, the sides' resolver, the preflight checks and the
run checks receive that object (or the part they need of it) and never look back into the
dict.  Two rules of the protocol live here, and nowhere else:

* a side's seeds (:func:`own_seeds`): the round's ``seeds`` for the reference side (one
  ``reference@<seed>`` stage each in dvc.yaml), ``candidate.seeds`` for the candidate
  where it names the candidate's own list (``null``: the round's ``seeds``; docs/SIDES.md,
  "Sides of unequal size");
* the evaluation points (:func:`eval_points`): ``eval_every, 2 eval_every, ..., rows``.

:func:`dreamer_parity.params.validate` asks the same two rules while it checks a file.
The dict stays where a raw mapping is needed: writing parameters out (a run's
``run.json``, the reference runner's arguments, the report's parameter table, a kept
round's params.yaml): :meth:`Round.to_params`.

Standard library only (the reference venv imports :mod:`dreamer_parity.records`, which
names this module's types).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

__all__ = ["Round", "RoundSide", "SourcePart", "Protocol", "ReferenceRun", "Stats", "Gate",
           "own_seeds", "eval_points", "SIDE_NAMES"]

#: The two sides of a round, in the order every output lists them (``params.SIDES``).
SIDE_NAMES = ("reference", "candidate")


def own_seeds(round_seeds, listed) -> tuple[int, ...]:
    """A side's seeds: ``listed`` (the side's own list, ``candidate.seeds``) where it is
    not None, else ``round_seeds`` (the round's ``seeds``); in the order given (validated
    lists are ascending).  The one statement of the rule (module docstring)."""
    return tuple(round_seeds if listed is None else listed)


def eval_points(rows: int, eval_every: int) -> tuple[int, ...]:
    """Rows of the evaluation points: ``eval_every, 2 eval_every, ..., rows`` (rows, int;
    the protocol evaluates after every ``eval_every`` rows of all 16 envs together)."""
    return tuple(range(eval_every, rows + 1, eval_every))


@dataclass(frozen=True)
class SourcePart:
    """Some seeds of one side and where their runs come from (a ``{from, seeds}`` entry of
    a list-form ``<side>.source``; a plain ``<side>.source`` is one part for every seed).

    Attributes:
      origin: ``"run"`` (this repository runs them, ``results/<side>/s<S>``) or a directory
        of runs relative to the repository root, as params.yaml writes it (``from``).
      seeds: its seeds, ascending.
    """

    origin: str
    seeds: tuple[int, ...]


@dataclass(frozen=True)
class RoundSide:
    """One side of the round as params.yaml sets it (docs/SIDES.md).

    Attributes:
      name: ``"reference"`` or ``"candidate"``.
      seeds: the side's seeds, ascending (:func:`own_seeds`).
      parts: where they come from (``<side>.source``), ordered by first seed; each seed of
        the side in exactly one part.
      listed: True when params.yaml writes ``<side>.source`` as a list of ``{from,
        seeds}``, False for one value (``run`` or a directory) for every seed.
      decode: the side's two-hot expectation, ``exact`` or ``ref`` (params ``decode`` for
        the candidate, ``reference.decode`` for the reference).
    """

    name: str
    seeds: tuple[int, ...]
    parts: tuple[SourcePart, ...]
    listed: bool
    decode: str

    def origins(self) -> dict[int, str]:
        """``{seed: origin}`` for every seed of the side, ascending (``"run"`` or the
        directory as params.yaml writes it)."""
        where = {s: part.origin for part in self.parts for s in part.seeds}
        return {s: where[s] for s in self.seeds}

    def runs_here(self) -> tuple[int, ...]:
        """The seeds this repository runs (origin ``run``: the side's stage trains them),
        ascending."""
        return tuple(s for s, origin in self.origins().items() if origin == "run")


@dataclass(frozen=True)
class Protocol:
    """The training and evaluation protocol both sides follow (params.yaml's top-level
    keys; the published study's PROTOCOL.md: a row is one env step, 16 envs step together
    (2.1), an evaluation point runs fresh envs (4.1, 4.2)).

    Attributes:
      profile: network widths, ``full`` or ``smoke`` (``params.PROFILES``).
      rows: rows per env set (all 16 envs together), the last evaluation point.
      eval_every: rows between evaluation points, a multiple of 16 dividing ``rows``.
      eval_episodes: evaluation episodes (fresh envs) per point.
      points: the evaluation points, :func:`eval_points` (rows, ascending).
    """

    profile: str
    rows: int
    eval_every: int
    eval_episodes: int
    points: tuple[int, ...]


@dataclass(frozen=True)
class ReferenceRun:
    """How the reference's own runs are made (params.yaml ``reference.*``; a run standing on
    the reference side must have been made so, :func:`dreamer_parity.sides.disagreements`).

    Attributes:
      sampler: replay uniform selector seeding, ``stock`` (seed 0) or ``per_run``.
      jax: the reference environment's jax version (``params.REFERENCE_JAX``).
      platform: where its programs run, ``cpu`` or ``tpu`` (``JAX_PLATFORMS``).
      precision: ``jax_default_matmul_precision``, ``default`` (not set), ``high`` or
        ``highest``.
    """

    sampler: str
    jax: str
    platform: str
    precision: str


@dataclass(frozen=True)
class Stats:
    """The pre-registered statistics' settings (params.yaml ``stats.*``, written by the
    round's pre-registration ``docs/rounds/<round>.md``; S1, S2, LATE and the decision rule
    are the study's PROTOCOL.md 5.2, the concordance its PREREG3.md;
    :mod:`dreamer_parity.analysis.stats`).  Rows are evaluation points.

    Attributes:
      s1_rows: the rows whose mean return per seed is S1.
      late_rows: ``(first, last)`` rows of LATE, ``()`` when not pre-registered.
      good_return: the concordance threshold on evaluation return (return units).
      concordance_rows: rows at which runs with evaluation >= ``good_return`` are counted.
      concordance_range: ``(first, last)`` rows of the per-side rate, or ``()``.
      equivalence_margin: the TOST margin, a fraction in (0, 1) of the reference's mean.
      signature_rows: window ends tested one by one (``analysis/window_tests.py``), or ``()``.
      persistence_rows: ``(first, last)`` window ends of the persistence test, or ``()``.
      failed_rule: ``zero``: a failed seed's missing points count as return 0.
    """

    s1_rows: tuple[int, ...]
    late_rows: tuple[int, ...]
    good_return: float
    concordance_rows: tuple[int, ...]
    concordance_range: tuple[int, ...]
    equivalence_margin: float
    signature_rows: tuple[int, ...]
    persistence_rows: tuple[int, ...]
    failed_rule: str


@dataclass(frozen=True)
class Gate:
    """The round's gate (params.yaml ``gate.*``, written by its pre-registration
    ``docs/rounds/<round>.md``; :func:`dreamer_parity.analysis.gate.evaluate`).

    Attributes:
      statistic: ``none`` (no gate), ``s1`` or ``late``: the statistic the gate reads.
      learns: the part "candidate mean >= the lowest reference seed".
      mean_min: the part "candidate mean >= this bar" (return units), or None.
      welch_p_min: the part "Welch's two-sided p >= this", or None.
      entropy_overlap_rows: the part "the sides' actor-entropy seed ranges overlap in the
        training window ending at these rows", or None.
    """

    statistic: str
    learns: bool
    mean_min: float | None
    welch_p_min: float | None
    entropy_overlap_rows: int | None


@dataclass(frozen=True)
class Round:
    """One round, as validated params.yaml sets it; frozen (every field is immutable).

    Build it with :meth:`from_params` from validated params
    (:func:`dreamer_parity.params.validate`), or read a file with
    :func:`dreamer_parity.params.load_round`.

    Attributes:
      name: the round's name (``round``): its pre-registration ``docs/rounds/<name>.md``
        and the report's title.
      protocol: :class:`Protocol` (``profile``, ``rows``, ``eval_every``,
        ``eval_episodes``).
      reference, candidate: the two :class:`RoundSide` (seeds, sources, decode).
      reference_run: :class:`ReferenceRun`, how the reference's own runs are made.
      stats: :class:`Stats` (``stats.*``).
      gate: :class:`Gate` (``gate.*``).
      params_json: the validated params as JSON text, read back by :meth:`to_params`.
    """

    name: str
    protocol: Protocol
    reference: RoundSide
    candidate: RoundSide
    reference_run: ReferenceRun
    stats: Stats
    gate: Gate
    params_json: str = field(repr=False)

    @classmethod
    def from_params(cls, params: dict) -> "Round":
        """The round of validated ``params`` (the nested dict that
        :func:`dreamer_parity.params.validate` or :func:`~dreamer_parity.params.load`
        returns: every key of the schema, typed, seed lists ascending).

        Each side's seeds are decided here (:func:`own_seeds`), once; a plain
        ``<side>.source`` becomes one :class:`SourcePart` for all of them.

        Raises:
          KeyError: ``params`` lacks a key of the schema (it was not validated).
        """
        sides = {}
        for name in SIDE_NAMES:
            sec = params[name]
            seeds = own_seeds(params["seeds"], sec.get("seeds"))
            src = sec["source"]
            listed = not isinstance(src, str)
            parts = tuple(SourcePart(p["from"], tuple(p["seeds"])) for p in src) if listed \
                else (SourcePart(src, seeds),)
            decode = params["decode"] if name == "candidate" else sec["decode"]
            sides[name] = RoundSide(name, seeds, parts, listed, decode)
        ref, st, g = params["reference"], params["stats"], params["gate"]
        return cls(
            name=params["round"],
            protocol=Protocol(params["profile"], params["rows"], params["eval_every"],
                              params["eval_episodes"],
                              eval_points(params["rows"], params["eval_every"])),
            reference=sides["reference"], candidate=sides["candidate"],
            reference_run=ReferenceRun(ref["sampler"], ref["jax"], ref["platform"],
                                       ref["precision"]),
            stats=Stats(tuple(st["s1_rows"]), tuple(st["late_rows"]), st["good_return"],
                        tuple(st["concordance_rows"]), tuple(st["concordance_range"]),
                        st["equivalence_margin"], tuple(st["signature_rows"]),
                        tuple(st["persistence_rows"]), st["failed_rule"]),
            gate=Gate(g["statistic"], g["learns"], g["mean_min"], g["welch_p_min"],
                      g["entropy_overlap_rows"]),
            params_json=json.dumps(params))

    def side(self, name: str) -> RoundSide:
        """The :class:`RoundSide` called ``name``.

        Raises:
          ValueError: ``name`` is not one of :data:`SIDE_NAMES`.
        """
        if name not in SIDE_NAMES:
            raise ValueError(f"side must be one of {SIDE_NAMES}, got {name!r}")
        return self.reference if name == "reference" else self.candidate

    def seeds(self) -> dict[str, list[int]]:
        """``{side: [seed, ...]}``, each side's seeds ascending, in :data:`SIDE_NAMES`
        order (a new dict each call)."""
        return {name: list(self.side(name).seeds) for name in SIDE_NAMES}

    def to_params(self) -> dict:
        """The validated params this round was built from, as a new nested dict (lists, not
        tuples), for writing them out; changing it changes nothing here."""
        return json.loads(self.params_json)

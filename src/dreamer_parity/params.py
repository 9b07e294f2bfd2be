"""The params.yaml schema: one definition, validated before any compute.

Every stage reads its parameters through :func:`load_round` (main venv: :func:`load`,
then the frozen :class:`dreamer_parity.round_spec.Round`) or receives the validated subset
as JSON (reference venv).  The file stays block-style and free of
``${}`` interpolation because ``dvc exp run -S`` re-serialises it; values written back
by DVC (for example ``3e-05``, which PyYAML reads as a string) are coerced to the
declared type here.

Defaults: a params **file** names every parameter of :data:`SCHEMA` (every one of them is
declared by a stage of dvc.yaml: ``preflight`` declares the whole file); :func:`load`
refuses an empty file and one that lacks a key, and never fills one in.  The defaults of
:data:`SCHEMA` apply only to an in-memory dict given to :func:`validate` (the library and
the tests, which write the keys they change).

Canonical order: :func:`validate` returns ``seeds`` and ``candidate.seeds`` sorted (and
each list-form source's seeds), so that every statistic, resampling and output of a round
is keyed by seed and the same seeds in another order give byte-identical outputs.

Seeds of the two sides: ``seeds`` is the round's seed list, the reference side's (one
``reference@<seed>`` stage each in dvc.yaml) and the candidate's unless ``candidate.seeds``
names the candidate's own list (``null``: the round's ``seeds``), so the sides may differ
in size (110 candidate seeds against 10 reference seeds).  Which seeds a side has is
decided once, when :func:`load_round` builds the round
(:class:`dreamer_parity.round_spec.Round`, frozen); every stage and the analysis read it
there.

Command line::

    python -m dreamer_parity.params check [--file params.yaml]
    python -m dreamer_parity.params smoke-overrides     # the -S flags of the smoke round
    python -m dreamer_parity.params show [--file params.yaml] [--key reference]

Kept rounds older than a key: a round kept before the schema gained a key has no such key
in its ``params.yaml``.  :data:`ADDED_KEYS` names every key added after the first kept
round with the value those rounds ran with, and :func:`migrate` fills them in: the one
migration of an older round's parameters (``python -m dreamer_parity.rounds switch``).

Only the standard library is needed for validation (PyYAML is imported by
:func:`load` only).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dreamer_parity import round_spec

__all__ = ["ParamsError", "SCHEMA", "validate", "load", "smoke_overrides", "SMOKE",
           "eval_points", "PROFILES", "NUM_ENVS", "DECODES", "SAMPLERS", "repo_path",
           "quote", "MAX_FILE_BYTES", "MAX_DEPTH", "ROUND_PATTERN", "SOURCE_RUN",
           "MAX_PATH_CHARS", "parse_yaml", "strict_yaml", "YamlRefusal", "RESERVED_ROUNDS",
           "MAX_ROWS", "MAX_EVAL_EPISODES", "MAX_SEEDS", "MAX_SEED", "REFERENCE_JAX", "PLATFORMS",
           "PLATFORM_JAX", "PRECISIONS", "SIDES", "ADDED_KEYS", "migrate", "load_round"]

#: Environments stepped together by both sides (16 rows per vector step).
NUM_ENVS = 16
#: Two-hot expectation of either side: ``exact`` (mirror difference) | ``ref`` (the
#: reference's pair sum).  The one definition of the allowed values.
DECODES = ("exact", "ref")
#: The reference replay's uniform selector seeding: ``stock`` (seed 0) | ``per_run``.
SAMPLERS = ("stock", "per_run")
#: The jax version of the reference's environment (``reference.jax``): ``0.4.26`` (its own
#: venv from requirements-reference.lock, the default) | ``0.10.2`` (the venv from
#: requirements-reference-jax010.lock, with the outside shims of ``reference/shims.py``) |
#: ``0.11.2`` (the GPU machine's version: requirements-reference-jax011.lock, Python 3.12,
#: the same shims).
REFERENCE_JAX = ("0.4.26", "0.10.2", "0.11.2")
#: Where a side's jax programs run (``<side>.platform``): the value of ``JAX_PLATFORMS``'s
#: first entry, set before jax is imported, and checked against ``jax.default_backend()``
#: (``gpu``: ``JAX_PLATFORMS=cuda``, an NVIDIA GPU through jax's CUDA plugin).
PLATFORMS = ("cpu", "tpu", "gpu")
#: The environments (``reference.jax``) that hold a jaxlib for each accelerator platform:
#: the TPU machine's jax 0.10.2 and the GPU machine's 0.11.2 (with its CUDA 13 plugin).
PLATFORM_JAX = {"tpu": ("0.10.2", "0.11.2"), "gpu": ("0.11.2",)}
#: Matmul precision of a side (``<side>.precision``): ``default`` leaves jax's own (nothing
#: set), the others are set as ``jax_default_matmul_precision`` before anything compiles.
PRECISIONS = ("default", "high", "highest")

#: Largest params file :func:`load` reads (bytes); the round's file is about 1 KiB.
MAX_FILE_BYTES = 64 * 1024
#: Deepest nesting of YAML nodes :func:`load` accepts (the schema needs 3: the root
#: mapping, a section such as ``stats``, and a list value inside it).
MAX_DEPTH = 8
#: ``round``: a plain name, so ``docs/rounds/<round>.md`` is one file of that directory.
ROUND_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: Names of files in docs/rounds/ that are not pre-registrations (``README.md``, the
#: index ``index.yaml``): refused as a ``round``, in any case (a case-insensitive file
#: system would open them).
RESERVED_ROUNDS = ("readme", "index")
#: The protocol's largest round (round 3: 24,000 rows); a larger ``rows`` is refused
#: before anything is allocated (a larger round raises this number in a reviewed commit).
MAX_ROWS = 24_000
#: Most evaluation episodes per point (the protocol runs 10, the smoke round 2).
MAX_EVAL_EPISODES = 100
#: Most seeds of a side (``seeds``, ``candidate.seeds``; round3-tpu's candidate side has 110),
#: and the largest seed.
MAX_SEEDS = 128
MAX_SEED = 2 ** 31 - 1
#: The two sides of a round, in the order every output lists them.
SIDES = round_spec.SIDE_NAMES
#: The value of a ``*.source`` key that means "run this side here" (not a path).
SOURCE_RUN = "run"
#: Longest value quoted in an error line, and longest error line (characters).
QUOTE_CHARS = 80
MESSAGE_CHARS = 400
#: Longest path value of a ``*.source`` key (characters), well under the OS limits.
MAX_PATH_CHARS = 255

#: Network widths of the two profiles (Candidate and Reference issues).
PROFILES = {
    "full": {"deter": 512, "hidden": 64, "classes": 4, "units": 64, "stoch": 32, "blocks": 8},
    "smoke": {"deter": 64, "hidden": 16, "classes": 4, "units": 16, "stoch": 32, "blocks": 8},
}


class ParamsError(ValueError):
    """A parameter is missing, unknown, of the wrong type or inconsistent.

    The message is one line of at most :data:`MESSAGE_CHARS` characters and starts with
    ``params: <dotted key>:``; values inside it are quoted by :func:`quote`.
    """

    def __init__(self, key: str, message: str):
        self.key = key
        key = quote(key, 60, plain=True)
        text = f"params: {key}: {message}".replace("\n", " ").replace("\r", " ")
        if len(text) > MESSAGE_CHARS:
            text = text[:MESSAGE_CHARS - 3] + "..."
        super().__init__(text)


def quote(value, limit: int = QUOTE_CHARS, plain: bool = False) -> str:
    """``repr(value)`` (``str(value)`` when ``plain``) cut to ``limit`` characters.

    A value quoted in an error line never makes that line long: a longer text ends in
    ``...(N chars)``.  The repr of a container is built from at most ``limit`` of its
    items, so quoting never costs more than the cut text.
    """
    if isinstance(value, (list, tuple)) and len(value) > limit:
        text = repr(list(value[:limit]))[:-1] + ", ...]"
    elif isinstance(value, dict) and len(value) > limit:
        text = "{...%d keys}" % len(value)
    else:
        text = str(value) if plain else repr(value)
    if len(text) > limit:
        return text[:limit] + f"...({len(text)} chars)"
    return text


@dataclass(frozen=True)
class Field:
    """One declared key of params.yaml: its type, default, allowed values (empty: any) and meaning."""

    type: str            # int, float, str, bool, int_list, int_pair_or_empty, source
    default: Any
    choices: tuple = ()
    doc: str = ""


#: Declared keys (dotted) with their type, default and meaning.
SCHEMA: dict[str, Field] = {
    "round": Field("str", "round1", doc="name of the round: its pre-registration docs/rounds/<round>.md and the report title (run outputs keep fixed paths)"),
    "decode": Field("str", "exact", DECODES,
                    "candidate's two-hot expectation: exact mirror difference | reference pair sum"),
    "profile": Field("str", "full", ("full", "smoke"), "network widths (PROFILES)"),
    "seeds": Field("int_list", [0, 1, 2],
                   doc="the round's seeds, unique non-negative integers written as integers "
                       "(1, never 1.0, '1' or true): the reference side's "
                       "(a reference@<seed> stage each) and the candidate's unless "
                       "candidate.seeds names its own"),
    "rows": Field("int", 20000, doc="rows per env set (all 16 envs together)"),
    "eval_every": Field("int", 2000,
                        doc="rows between evaluation points; multiple of 16 dividing rows"),
    "eval_episodes": Field("int", 10, doc="evaluation episodes (fresh envs) per point"),
    "reference.decode": Field("str", "ref", DECODES,
                              "reference two-hot mean: stock formula | exact replacement"),
    "reference.sampler": Field("str", "stock", SAMPLERS,
                               "replay uniform selector: stock seed 0 | [seed, 0x5EED]"),
    "reference.jax": Field("str", "0.4.26", REFERENCE_JAX,
                           "the reference's environment: jax 0.4.26 (its own lock) | jax "
                           "0.10.2 (requirements-reference-jax010.lock, outside shims) | jax "
                           "0.11.2 (requirements-reference-jax011.lock, the same shims)"),
    "reference.platform": Field("str", "cpu", PLATFORMS,
                                "where the reference's programs run (JAX_PLATFORMS); tpu needs "
                                "reference.jax 0.10.2 or 0.11.2, gpu 0.11.2"),
    "reference.precision": Field("str", "default", PRECISIONS,
                                 "the reference's jax_default_matmul_precision (default: not set)"),
    "reference.source": Field("source", "run",
                              doc="where the reference side's runs come from: 'run', a "
                                  "directory of runs, or [{from, seeds}] (docs/SIDES.md)"),
    "candidate.source": Field("source", "run",
                              doc="where the candidate side's runs come from: 'run', a "
                                  "directory of runs, or [{from, seeds}] (docs/SIDES.md)"),
    "candidate.seeds": Field("int_list_or_null", None,
                             doc="the candidate side's own seeds, unique non-negative integers "
                                 "written as integers; "
                                 "null: the round's seeds (docs/SIDES.md)"),
    "stats.s1_rows": Field("int_list", [16000, 18000, 20000],
                           doc="pre-registered S1 rows (evaluation points)"),
    "stats.late_rows": Field("int_pair_or_empty", [],
                             doc="[first, last] rows of LATE, empty when not pre-registered"),
    "stats.good_return": Field("float", 400.0, doc="concordance threshold on evaluation return"),
    "stats.concordance_rows": Field("int_list", [20000],
                                    doc="rows at which runs with eval >= good_return are counted"),
    "stats.concordance_range": Field("int_pair_or_empty", [16000, 20000],
                                     doc="row range of the per-side rate of eval >= good_return"),
    "stats.equivalence_margin": Field(
        "float", 0.10,
        doc="equivalence (TOST) margin on the primary statistic, as a fraction of the "
            "reference side's mean of it (a labelled addition, never the round's gate)"),
    "stats.signature_rows": Field(
        "int_list", [],
        doc="window ends (rows) where the two sides' windows are tested one by one and the "
            "early D22 signature is read (analysis/window_tests.py); empty: none"),
    "stats.persistence_rows": Field(
        "int_pair_or_empty", [],
        doc="[first, last] window ends over which each seed's mean of every window metric "
            "is compared between the sides (analysis/window_tests.py); empty: none"),
    "gate.statistic": Field("str", "none", ("none", "s1", "late"),
                            "the statistic the round's gate reads (none: the round has no gate)"),
    "gate.learns": Field("bool", False,
                         doc="gate part: candidate mean >= the lowest reference seed (LEARNS)"),
    "gate.mean_min": Field("float_or_null", None,
                           doc="gate part: candidate mean >= this bar (return units); null: none"),
    "gate.welch_p_min": Field("float_or_null", None,
                              doc="gate part: Welch's two-sided p >= this; null: none"),
    "gate.entropy_overlap_rows": Field(
        "int_or_null", None,
        doc="gate part: the sides' actor-entropy seed ranges overlap in the training window "
            "ending at these rows; null: none"),
    "stats.failed_rule": Field("str", "zero", ("zero",),
                               "missing evaluation points of a failed seed count as return 0"),
}

#: Keys :data:`SCHEMA` gained after rounds were kept, each with the value that every round
#: kept before it ran with (the value that reproduces such a round): the candidate ran here
#: (``candidate.source``) on the round's seeds (``candidate.seeds``); the reference in its
#: jax 0.4.26 environment on the CPU at jax's default matmul precision; no window tests.
#: :func:`migrate` fills exactly these; any other missing key stays an error.
ADDED_KEYS: dict[str, Any] = {
    "candidate.source": SOURCE_RUN,
    "candidate.seeds": None,
    "reference.jax": "0.4.26",
    "reference.platform": "cpu",
    "reference.precision": "default",
    "stats.signature_rows": [],
    "stats.persistence_rows": [],
}


def migrate(raw: dict) -> tuple[dict, list[str]]:
    """An older round's parsed params.yaml with the keys added since filled in.

    Args:
      raw: the parsed (unvalidated) params file of a kept round: nested dicts.

    Returns:
      ``(params, filled)``: a new nested dict holding ``raw``'s keys as given and every key
      of :data:`ADDED_KEYS` it lacks with that key's value, and the dotted names filled (in
      :data:`ADDED_KEYS` order).  Validate the result with :func:`validate`
      (``complete=True``): a key missing that is not in :data:`ADDED_KEYS` is refused there.

    Raises:
      ParamsError: ``raw`` is not a mapping, or a section an added key belongs to is not one.
    """
    if not isinstance(raw, dict):
        raise ParamsError("<root>", f"expected a mapping, got {type(raw).__name__}")
    out = copy.deepcopy(raw)
    filled = []
    for key, value in ADDED_KEYS.items():
        *parents, last = key.split(".")
        d = out
        for k in parents:
            d = d.setdefault(k, {})
            if not isinstance(d, dict):
                raise ParamsError(k, f"expected a mapping, got {quote(d)}")
        if last not in d:
            d[last] = copy.deepcopy(value)
            filled.append(key)
    return out, filled


#: The smoke round: round 1's design at tiny widths (1200 rows, evaluation every 400,
#: 2 episodes), whatever round params.yaml holds; both sides run (no published run has
#: 1200 rows).
SMOKE = {
    "round": "smoke",
    "decode": "exact",
    "reference.decode": "ref",
    "reference.sampler": "stock",
    "reference.source": "run",
    "candidate.source": "run",
    "candidate.seeds": None,
    "profile": "smoke",
    "seeds": [0, 1],
    "rows": 1200,
    "eval_every": 400,
    "eval_episodes": 2,
    "stats.s1_rows": [400, 800, 1200],
    "stats.late_rows": [],
    "stats.concordance_rows": [1200],
    "stats.concordance_range": [400, 1200],
    "stats.signature_rows": [],
    "stats.persistence_rows": [],
    "gate.statistic": "none",
    "gate.learns": False,
    "gate.mean_min": None,
    "gate.welch_p_min": None,
    "gate.entropy_overlap_rows": None,
}


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _coerce_int(key, v):
    if isinstance(v, bool):
        raise ParamsError(key, f"expected an integer, got {quote(v)}")
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        if v.is_integer():
            return int(v)
        raise ParamsError(key, f"expected an integer, got {quote(v)}")
    if isinstance(v, str):
        s = v.strip()
        try:
            return int(s)
        except ValueError:
            pass
        try:
            f = float(s)
        except ValueError:
            raise ParamsError(key, f"expected an integer, got {quote(v)}") from None
        if f.is_integer():
            return int(f)
        raise ParamsError(key, f"expected an integer, got {quote(v)}")
    raise ParamsError(key, f"expected an integer, got {quote(v)}")


def _coerce_seed(key, i, v):
    """A seed as params.yaml writes it: a whole number in integer form (``1``), never
    ``1.0``, ``"1"`` or ``true``.  DVC reads the file too: its ``foreach`` names a stage
    ``reference@1.0`` after the value as written, and compares ``1.0`` equal to ``1``, so
    any other form is refused here rather than coerced."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    raise ParamsError(key, f"item {i}: a seed is a whole number written as an integer "
                           f"(e.g. 1), got {quote(v)} ({type(v).__name__})")


def _coerce_float(key, v):
    if isinstance(v, bool):
        raise ParamsError(key, f"expected a number, got {quote(v)}")
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip())
        except ValueError:
            pass
    raise ParamsError(key, f"expected a number, got {quote(v)}")


def _coerce(key: str, field: Field, v):
    t = field.type
    if t == "int":
        return _coerce_int(key, v)
    if t == "float":
        return _coerce_float(key, v)
    if t == "str":
        if not isinstance(v, (str, int, float)) or isinstance(v, bool):
            raise ParamsError(key, f"expected a string, got {quote(v)}")
        v = str(v)
        if field.choices and v not in field.choices:
            raise ParamsError(key, f"unknown value {quote(v)}; expected one of {', '.join(field.choices)}")
        return v
    if t == "int_list_or_null":
        if v is None or (isinstance(v, str) and v.strip().lower() in ("null", "none", "")):
            return None
        return _coerce(key, Field("int_list", []), v)
    if t in ("int_list", "int_pair_or_empty"):
        if v is None:
            v = []
        if isinstance(v, str):
            try:
                v = json.loads(v)
            except ValueError:
                raise ParamsError(key, f"expected a list of integers, got {quote(v)}") from None
        if not isinstance(v, (list, tuple)):
            raise ParamsError(key, f"expected a list of integers, got {quote(v)}")
        if key in _SEED_KEYS or key.endswith(".source"):
            out = [_coerce_seed(key, i, x) for i, x in enumerate(v)]
        else:
            out = [_coerce_int(key, x) for x in v]
        if t == "int_pair_or_empty" and len(out) not in (0, 2):
            raise ParamsError(key, f"expected [first, last] or [], got {out}")
        if t == "int_pair_or_empty" and out and out[0] > out[1]:
            raise ParamsError(key, f"first row {out[0]} is after last row {out[1]}")
        return out
    if t == "source":
        return _coerce_source(key, v)
    if t in ("float_or_null", "int_or_null"):
        if v is None or (isinstance(v, str) and v.strip().lower() in ("null", "none", "")):
            return None
        return _coerce_float(key, v) if t == "float_or_null" else _coerce_int(key, v)
    if t == "bool":
        if isinstance(v, bool):
            return v
        if isinstance(v, str) and v.strip().lower() in ("true", "false"):
            return v.strip().lower() == "true"
        raise ParamsError(key, f"expected true or false, got {quote(v)}")
    raise AssertionError(t)


def _check_rel_path(key: str, value) -> str:
    """The text checks of a path parameter (:func:`repo_path` without a root).

    Raises:
      ParamsError: naming ``key``, for a value that is not a non-empty string, is longer
        than :data:`MAX_PATH_CHARS`, holds a control character or a backslash, is absolute
        (``/...``, ``~...``) or has a ``..`` component.
    """
    if not isinstance(value, str) or not value:
        raise ParamsError(key, f"expected a relative path, got {quote(value)}")
    if len(value) > MAX_PATH_CHARS:
        raise ParamsError(key, f"path of {len(value)} characters (at most {MAX_PATH_CHARS}): "
                               f"{quote(value)}")
    if any(ord(c) < 32 or c in "\x7f\\" for c in value):
        raise ParamsError(key, f"{quote(value)} holds a control character or a backslash")
    if value.startswith(("/", "~")) or Path(value).is_absolute():
        raise ParamsError(key, f"{quote(value)} is absolute; use a path relative to the "
                               f"repository, e.g. data/published/round3 (absolute paths must "
                               f"not be committed)")
    if ".." in Path(value).parts:
        raise ParamsError(key, f"{quote(value)} leaves the repository through '..'; paths "
                               f"resolve inside it (DVC tracks nothing outside)")
    return value


def _coerce_source(key: str, v):
    """``run``, a relative directory, or ``[{from: run | dir, seeds: [..]}, ...]``."""
    if isinstance(v, str):
        if not v.strip():
            raise ParamsError(key, "must be 'run', a directory of runs or a list of "
                                   "{from, seeds} (docs/SIDES.md)")
        return v if v == "run" else _check_rel_path(key, v)
    if isinstance(v, (list, tuple)) and v:
        out = []
        for i, part in enumerate(v):
            if not isinstance(part, dict) or set(part) != {"from", "seeds"}:
                raise ParamsError(key, f"entry {i}: expected {{from: run | <dir>, seeds: [..]}}, "
                                       f"got {part!r}")
            frm = part["from"]
            if not isinstance(frm, str) or not frm.strip():
                raise ParamsError(key, f"entry {i}: from: expected 'run' or a directory, got {frm!r}")
            seeds = _coerce(key, Field("int_list", []), part["seeds"])
            if not seeds:
                raise ParamsError(key, f"entry {i}: seeds: needs at least one seed")
            out.append({"from": frm if frm == "run" else _check_rel_path(key, frm),
                        "seeds": seeds})
        return out
    raise ParamsError(key, f"expected 'run', a directory or a list of {{from, seeds}}, got {v!r}")


#: The seed lists of :data:`SCHEMA`, each checked alike by :func:`validate`.
_SEED_KEYS = ("seeds", "candidate.seeds")


def _nest(flat: dict) -> dict:
    out: dict = {}
    for key, v in flat.items():
        parts = key.split(".")
        d = out
        for p in parts[:-1]:
            d = d.setdefault(p, {})
        d[parts[-1]] = v
    return out


def eval_points(params: dict) -> list[int]:
    """Rows of the evaluation points of a params dict: ``eval_every, 2 eval_every, ...,
    rows`` (:func:`dreamer_parity.round_spec.eval_points`)."""
    return list(round_spec.eval_points(params["rows"], params["eval_every"]))


def validate(raw: dict, where: str = "params.yaml", complete: bool = False) -> dict:
    """Validate and coerce a parameter dict; return the nested, typed dict.

    Args:
      raw: the parsed params.yaml (nested dicts); with ``complete`` False possibly
        partial: missing keys take their :data:`SCHEMA` default (the library's and the
        tests' in-memory dicts).
      where: the file name used in messages.
      complete: require every key of :data:`SCHEMA` (a params file, :func:`load`): an
        empty dict is refused as ``<where>: empty``, a missing key by its name.

    Returns:
      A nested dict with every declared key, typed as declared; ``seeds``,
      ``candidate.seeds`` (None: the round's seeds,
      :func:`~dreamer_parity.round_spec.own_seeds`) and the seeds of each list-form
      source sorted ascending, the list-form sources ordered by their
      first seed: one canonical order, whatever order the file gives.

    Raises:
      ParamsError: one-line message naming the key, for an empty dict or a missing key
        (``complete``), an unknown key or value, a wrong type, a negative or
        non-integer row count, ``rows`` over :data:`MAX_ROWS`, ``eval_episodes`` over
        :data:`MAX_EVAL_EPISODES`, more than :data:`MAX_SEEDS` seeds or a seed over
        :data:`MAX_SEED` in ``seeds`` or ``candidate.seeds`` (all checked before anything
        is allocated from them), an evaluation interval that is not a positive multiple
        of 16 or does not divide ``rows``, duplicate or negative seeds or an empty list in
        either, a list-form ``*.source`` that does not give each of its side's seeds
        (:func:`~dreamer_parity.round_spec.own_seeds`) exactly one source, S1 /
        concordance rows that are not evaluation points or repeat, a LATE or concordance range holding no evaluation
        point, a non-finite good_return or equivalence margin outside (0, 1), a gate
        whose statistic and parts disagree, a key holding a dot at any level, a
        ``round`` that is not a plain name (:data:`ROUND_PATTERN`) or is a reserved name
        (:data:`RESERVED_ROUNDS`), or a ``*.source`` path refused by :func:`repo_path`.
    """
    if complete and (raw is None or raw == {}):
        raise ParamsError("<root>", f"{where}: empty; see README (a params file names every "
                                    f"parameter; none is taken from a default)")
    if not isinstance(raw, dict):
        raise ParamsError("<root>", f"{where} must hold a mapping, got {type(raw).__name__}")
    _check_key_names(raw, where)
    # A declared dict key given as a scalar (e.g. "reference: 3") is caught first.
    for key in raw:
        if key in ("reference", "candidate", "stats", "gate") and not isinstance(raw[key], dict):
            raise ParamsError(key, f"expected a mapping, got {quote(raw[key])}")
    flat = _flatten(raw)
    for key in flat:
        if key not in SCHEMA:
            raise ParamsError(key, f"unknown key in {where}; known keys: {', '.join(SCHEMA)}")
    if complete:
        missing = [k for k in SCHEMA if k not in flat]
        if missing:
            raise ParamsError(missing[0], f"missing from {where}; a params file names every "
                                          f"parameter, none is taken from a default (see "
                                          f"README; {len(missing)} missing)")
    typed = {}
    for key, field in SCHEMA.items():
        v = flat.get(key, copy.deepcopy(field.default))
        typed[key] = _coerce(key, field, v)

    _check_sizes(typed)
    _check_stats_and_gate(typed)
    _check_seed_lists(typed)
    _check_rows(typed)
    _check_sources(typed)
    _check_environment_and_round(typed)
    return _nest(typed)


def _check_sizes(typed: dict) -> None:
    """Positive row counts and the bounds on the work a round implies, checked before
    anything is computed from them."""
    for key in ("rows", "eval_every", "eval_episodes"):
        if typed[key] <= 0:
            raise ParamsError(key, f"must be a positive integer, got {typed[key]}")
    # the work a round implies, bounded before anything is computed from it
    if typed["rows"] > MAX_ROWS:
        raise ParamsError("rows", f"{typed['rows']} is over {MAX_ROWS}, the protocol's "
                                  f"largest round")
    if typed["eval_episodes"] > MAX_EVAL_EPISODES:
        raise ParamsError("eval_episodes", f"{typed['eval_episodes']} is over "
                                           f"{MAX_EVAL_EPISODES} episodes per evaluation point")
    for key in _SEED_KEYS:
        listed = typed[key] or []
        if len(listed) > MAX_SEEDS:
            raise ParamsError(key, f"{len(listed)} seeds, more than {MAX_SEEDS}")
        big = [s for s in listed if s > MAX_SEED]
        if big:
            raise ParamsError(key, f"seed {quote(big[0])} is over {MAX_SEED}")
    if typed["eval_every"] % NUM_ENVS:
        raise ParamsError("eval_every", f"{typed['eval_every']} is not a multiple of {NUM_ENVS}")
    if typed["rows"] % typed["eval_every"]:
        raise ParamsError(
            "eval_every", f"{typed['eval_every']} does not divide rows={typed['rows']}")


def _check_stats_and_gate(typed: dict) -> None:
    """The statistics' constants and the gate's parts."""
    if not math.isfinite(typed["stats.good_return"]):
        raise ParamsError("stats.good_return", f"must be finite, got {typed['stats.good_return']}")
    m = typed["stats.equivalence_margin"]
    if not (math.isfinite(m) and 0 < m < 1):
        raise ParamsError("stats.equivalence_margin",
                          f"must be a fraction in (0, 1) of the reference mean, got {m}")
    gate_parts = ("gate.learns", "gate.mean_min", "gate.welch_p_min", "gate.entropy_overlap_rows")
    on = [k for k in gate_parts if typed[k] not in (None, False)]
    if typed["gate.statistic"] == "none" and on:
        raise ParamsError(on[0], "is a gate part, but gate.statistic is none")
    if typed["gate.statistic"] != "none" and not on:
        raise ParamsError("gate.statistic", f"{typed['gate.statistic']} names no gate part "
                                            f"({', '.join(gate_parts)})")
    if typed["gate.statistic"] == "late" and not typed["stats.late_rows"]:
        raise ParamsError("gate.statistic", "late needs stats.late_rows")
    pmin = typed["gate.welch_p_min"]
    if pmin is not None and not (0 < pmin < 1):
        raise ParamsError("gate.welch_p_min", f"must lie in (0, 1), got {pmin}")
    if typed["gate.mean_min"] is not None and not math.isfinite(typed["gate.mean_min"]):
        raise ParamsError("gate.mean_min", f"must be finite, got {typed['gate.mean_min']}")


def _check_seed_lists(typed: dict) -> None:
    """Each seed list non-empty, non-negative and without duplicates; sorted in place."""
    for key in _SEED_KEYS:
        listed = typed[key]
        if listed is None:      # candidate.seeds null: the round's seeds
            continue
        if not listed:
            raise ParamsError(key, "needs at least one seed")
        if any(s < 0 for s in listed):
            raise ParamsError(key, f"seeds must be non-negative, got {listed}")
        if len(set(listed)) != len(listed):
            dup = sorted({s for s in listed if listed.count(s) > 1})
            raise ParamsError(key, f"duplicate seeds {dup}")
        typed[key] = sorted(listed)   # the canonical order (module docstring)


def _check_rows(typed: dict) -> None:
    """The statistics' rows and ranges against the evaluation points."""
    points = set(eval_points(typed))
    erows = typed["gate.entropy_overlap_rows"]
    if erows is not None and erows not in points:
        raise ParamsError("gate.entropy_overlap_rows", f"{erows} is not an evaluation point")
    for key in ("stats.s1_rows", "stats.concordance_rows", "stats.signature_rows"):
        missing = [r for r in typed[key] if r not in points]
        if missing:
            raise ParamsError(key, f"rows {missing} are not evaluation points "
                                   f"(multiples of eval_every={typed['eval_every']} up to rows={typed['rows']})")
    if not typed["stats.s1_rows"]:
        raise ParamsError("stats.s1_rows", "needs at least one row")
    for key in ("stats.s1_rows", "stats.concordance_rows", "stats.signature_rows"):
        if len(set(typed[key])) != len(typed[key]):
            raise ParamsError(key, f"duplicate rows in {typed[key]}")
    for key in ("stats.late_rows", "stats.concordance_range", "stats.persistence_rows"):
        rng = typed[key]
        if rng:
            inside = [p for p in points if rng[0] <= p <= rng[1]]
            if not inside:
                raise ParamsError(key, f"range {rng} holds no evaluation point")
            if rng[1] > typed["rows"]:
                raise ParamsError(key, f"range {rng} ends after rows={typed['rows']}")


def _check_sources(typed: dict) -> None:
    """A list-form ``*.source`` gives each of its side's seeds exactly one source;
    canonical order in place."""
    for side in SIDES:
        key = f"{side}.source"
        src = typed[key]
        if isinstance(src, list):
            # the list form covers the side's own seeds, each exactly once
            own = typed.get(f"{side}.seeds")
            seeds = list(round_spec.own_seeds(typed["seeds"], own))
            listed = [s for part in src for s in part["seeds"]]
            dup = sorted({s for s in listed if listed.count(s) > 1})
            if dup:
                raise ParamsError(key, f"seeds {dup} listed more than once (each seed exactly once)")
            extra = [s for s in listed if s not in seeds]
            if extra:
                raise ParamsError(key, f"seeds {extra} are not round seeds {seeds}" if own is None
                                  else f"seeds {extra} are not in {side}.seeds {seeds}")
            missing = [s for s in seeds if s not in listed]
            if missing:
                raise ParamsError(key, f"round seeds {missing} have no source" if own is None
                                  else f"{side}.seeds {missing} have no source")
            typed[key] = sorted(({"from": part["from"], "seeds": sorted(part["seeds"])}
                                 for part in src), key=lambda part: part["seeds"][0])


def _check_environment_and_round(typed: dict) -> None:
    """The reference's platform against its jax, and the round's name."""
    platform, jax = typed["reference.platform"], typed["reference.jax"]
    if platform != "cpu" and jax not in PLATFORM_JAX[platform]:
        raise ParamsError("reference.platform", f"{platform} needs reference.jax "
                                                f"{' or '.join(PLATFORM_JAX[platform])} (the "
                                                f"{jax} environment holds no {platform} jaxlib)")
    if not ROUND_PATTERN.fullmatch(typed["round"]):
        raise ParamsError("round", f"{quote(typed['round'])} is not a plain name: 1 to 64 "
                                   f"letters, digits, '-' or '_' (its pre-registration is "
                                   f"docs/rounds/<round>.md)")
    if typed["round"].lower() in RESERVED_ROUNDS:
        raise ParamsError("round", f"{quote(typed['round'])} names no pre-registration: "
                                   f"docs/rounds/README.md and docs/rounds/index.yaml are not "
                                   f"rounds (reserved: {', '.join(RESERVED_ROUNDS)})")


def _check_key_names(raw: dict, where: str, prefix: str = "") -> None:
    """Refuse a key holding a dot at any level: ``stats.s1_rows`` has one spelling, the
    nested one (a dotted key beside the ``stats`` block would replace its value)."""
    for k, v in raw.items():
        if isinstance(k, str) and "." in k:
            raise ParamsError(prefix + k, f"a dotted key in {where}; write it nested "
                                          f"({' > '.join((prefix + k).split('.'))}), the one "
                                          f"spelling of each parameter")
        if isinstance(v, dict):
            _check_key_names(v, where, f"{prefix}{k}.")


def repo_path(key: str, value, root: str | os.PathLike | None = ".") -> Path:
    """Resolve the path value of parameter ``key`` inside the repository.

    The one check of every ``*.source`` directory (docs/SIDES.md): :func:`validate`
    checks the text of each (:func:`_check_rel_path`, what this does without ``root``),
    and every place that opens one (:func:`dreamer_parity.sides.resolve`) comes here with
    the repository root, so symbolic links are followed.

    Args:
      key: the dotted parameter name, for the message.
      value: the parameter's value: a relative path with ``/`` separators.
      root: the repository root (default the working directory), or None to check the
        text only.

    Returns:
      ``Path(value)`` when ``root`` is None, else ``Path(root) / value``, whose resolved
      form lies inside the resolved root.

    Raises:
      ParamsError: naming ``key``, for a value that is not a non-empty string, is longer
        than :data:`MAX_PATH_CHARS`, holds a control character or a backslash, is absolute
        (``/...``, ``~...``), has a ``..`` component, or (with ``root``) cannot be
        resolved or resolves outside the root through a symbolic link.
    """
    _check_rel_path(key, value)
    if root is None:
        return Path(value)
    base = Path(root).resolve()
    try:
        full = (base / value).resolve()
    except (OSError, RuntimeError) as e:   # a symlink loop, a name too long
        raise ParamsError(key, f"{quote(value)} cannot be resolved ({type(e).__name__})") \
            from None
    if full != base and base not in full.parents:
        raise ParamsError(key, f"{quote(value)} resolves outside the repository through a "
                               f"symbolic link; name a directory inside it (DVC tracks "
                               f"nothing outside)")
    return Path(root) / value


class YamlRefusal(ValueError):
    """A refusal of :func:`strict_yaml`: ``key`` (dotted path, ``<root>`` when none),
    ``line`` (1-based, 0 when unknown) and ``message``; ``str()`` is
    ``<name>:<line>: <key>: <message>``, one line."""

    def __init__(self, key: str, line: int, message: str, name: str = "<yaml>"):
        self.key, self.line, self.message, self.name = key, line, message, name
        where = f"{name}:{line}" if line else name
        super().__init__(f"{where}: {quote(key, 60, plain=True)}: {message}"
                         .replace("\n", " ")[:MESSAGE_CHARS])


_LOADER = None


def _strict_loader():
    """The PyYAML ``SafeLoader`` subclass :func:`parse_yaml` reads with (built once).

    It refuses, while composing and before anything is constructed or expanded: an
    anchor or alias, nesting deeper than :data:`MAX_DEPTH`; and on the composed node
    tree (a tree: without aliases no node is shared): a key that is not a plain scalar, a
    merge key (``<<``), a key holding a dot, a key given twice in one mapping.
    """
    global _LOADER
    if _LOADER is not None:
        return _LOADER
    import yaml
    from yaml.events import AliasEvent

    class StrictLoader(yaml.SafeLoader):
        _depth = 0

        def compose_node(self, parent, index):
            event = self.peek_event()
            line = event.start_mark.line + 1
            if isinstance(event, AliasEvent):
                raise YamlRefusal("<root>", line, f"alias *{quote(event.anchor, 40, True)}: "
                                               f"aliases and anchors are not accepted")
            if getattr(event, "anchor", None) is not None:
                raise YamlRefusal("<root>", line, f"anchor &{quote(event.anchor, 40, True)}: "
                                               f"aliases and anchors are not accepted")
            self._depth += 1
            try:
                if self._depth > MAX_DEPTH:
                    raise YamlRefusal("<root>", line, f"nested deeper than {MAX_DEPTH} levels")
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

    _LOADER = StrictLoader
    return _LOADER


def _check_nodes(node, path: str = "") -> None:
    """Keys of every mapping of a composed YAML tree: plain, not ``<<``, each once."""
    import yaml

    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _check_nodes(item, path)
        return
    if not isinstance(node, yaml.MappingNode):
        return
    seen: dict = {}
    for knode, vnode in node.value:
        line = knode.start_mark.line + 1
        if not isinstance(knode, yaml.ScalarNode):
            raise YamlRefusal(path.rstrip(".") or "<root>", line,
                           "a key that is a list or mapping; keys are plain names")
        key = path + knode.value
        if knode.tag == "tag:yaml.org,2002:merge":
            raise YamlRefusal(path.rstrip(".") or "<root>", line,
                           "merge key '<<': write every key out once")
        if "." in knode.value:
            raise YamlRefusal(key, line, f"a dotted key; write it nested "
                                      f"({' > '.join(key.split('.'))}), the one spelling of "
                                      f"each parameter")
        if knode.value in seen:
            raise YamlRefusal(key, line, f"given twice (first at line {seen[knode.value]})")
        seen[knode.value] = line
        _check_nodes(vnode, key + ".")


def strict_yaml(text: str, name: str = "<yaml>"):
    """Parse YAML text with the structural refusals of :func:`_strict_loader` (the one
    strict YAML reader: params.yaml here, the index of kept rounds in
    :mod:`dreamer_parity.rounds`; PyYAML alone keeps the last of two equal keys silently).

    Returns:
      The parsed document (None for an empty one).

    Raises:
      YamlRefusal: naming ``name``, the line and the key path, for an anchor, alias,
        merge key, non-scalar, dotted or repeated key (with the line of the first),
        nesting deeper than :data:`MAX_DEPTH`, a character YAML does not allow, or a
        YAML syntax error (key ``<root>``).
    """
    import yaml

    loader = None
    try:
        loader = _strict_loader()(text)   # its reader refuses non-printable characters
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(node)
        return loader.construct_document(node)
    except YamlRefusal as e:
        raise YamlRefusal(e.key, e.line, e.message, name) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 0
        if isinstance(e, yaml.reader.ReaderError):
            line = text[:e.position].count(chr(10)) + 1
            problem = f"character #x{e.character:04x} is not allowed"
        else:
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise YamlRefusal("<root>", line, f"invalid YAML: {quote(problem, 120, True)}",
                          name) from None
    except RecursionError:
        raise YamlRefusal("<root>", 0, "nested too deeply", name) from None
    finally:
        if loader is not None:
            loader.dispose()


def parse_yaml(text: str, name: str = "params.yaml"):
    """Parse params.yaml text with the structural refusals of :func:`strict_yaml`.

    Returns:
      The parsed document (None for an empty one).

    Raises:
      ParamsError: ``params: <key>: <name>:<line>: <what>`` for an anchor, alias, merge
        key, non-scalar, dotted or repeated key, nesting deeper than :data:`MAX_DEPTH`, or a YAML
        syntax error (key ``<root>``).
    """
    try:
        return strict_yaml(text, name)
    except YamlRefusal as e:
        where = f"{name}:{e.line}" if e.line else name
        tail = "; one spelling per parameter" if e.message.startswith("given twice") else ""
        raise ParamsError(e.key, f"{where}: {e.message}{tail}") from None


def apply_set(raw: dict, assignment: str) -> None:
    """Apply one ``KEY=VALUE`` to ``raw`` (unvalidated params) in place, as ``dvc exp run
    -S`` would: a dotted key names a nested entry (sections are created), and the value is
    read as YAML (:func:`parse_yaml`; an empty value stays the empty string).

    Raises:
      ParamsError: ``--set``: not ``KEY=VALUE``, or a part of the key that is not a section.
    """
    key, sep, value = assignment.partition("=")
    if not sep or not key:
        raise ParamsError("--set", f"{quote(assignment)}: expected KEY=VALUE")
    *parents, last = key.split(".")
    d = raw
    for k in parents:
        d = d.setdefault(k, {})
        if not isinstance(d, dict):
            raise ParamsError("--set", f"{quote(key)}: {quote(k)} is not a section")
    d[last] = parse_yaml(value, "--set") if value else value


def load(path: str | Path = "params.yaml", sets=()) -> dict:
    """Read and validate a params file (main venv: uses PyYAML), with the ``KEY=VALUE``
    assignments ``sets`` applied first (:func:`apply_set`).

    Every reader of params.yaml goes through here.  The file is read by the guarded
    reader (:func:`dreamer_parity.records.read_text`: a regular file, inside the working
    directory when given inside it, at most :data:`MAX_FILE_BYTES`, UTF-8); its YAML is
    parsed by :func:`parse_yaml` (anchors, aliases, merge keys, repeated or non-scalar
    keys and deep nesting refused before anything is expanded), then :func:`validate`
    with ``complete=True``: an empty file, or one that lacks a key, is refused.

    Raises:
      FileNotFoundError: no such file.
      ParamsError: see :func:`validate` and :func:`parse_yaml`; a file refused by the
        guarded reader (over the size bound, not a regular file, not UTF-8), YAML syntax
        errors, an empty file and a missing key are reported in one line naming the file
        (and line or key).
    """
    from dreamer_parity import records

    path = Path(path)
    try:
        text = records.read_text(path, path.name, cap=MAX_FILE_BYTES)
    except records.RecordError as e:
        raise ParamsError("<root>", str(e)) from None
    raw = parse_yaml(text, path.name)
    if raw is None or raw == {}:
        return validate(raw, where=path.name, complete=True)   # the file is empty: refused
    for assignment in sets:
        if not isinstance(raw, dict):
            break   # validate names the malformed file
        apply_set(raw, assignment)
    return validate(raw, where=path.name, complete=True)


def load_round(path: str | Path = "params.yaml", sets=()) -> round_spec.Round:
    """The round of a params file: :func:`load` (read, ``sets`` applied, validated), then
    :meth:`dreamer_parity.round_spec.Round.from_params`, once per entry point.

    Raises:
      FileNotFoundError, ParamsError: as :func:`load`.
    """
    return round_spec.Round.from_params(load(path, sets))


def smoke_overrides() -> list[str]:
    """The ``-S ++key=value`` overrides that turn params.yaml into the smoke round
    (``++``: set the key whether or not the file holds it)."""
    out = []
    for key, v in SMOKE.items():
        if isinstance(v, list):
            v = "[" + ",".join(str(x) for x in v) + "]"
        elif v is None:
            v = "null"
        elif isinstance(v, bool):
            v = str(v).lower()
        out += ["-S", f"++{key}={v}"]
    return out


def one_seed_smoke_sets(extra=()) -> list[str]:
    """The ``--set KEY=VALUE`` assignments (as the candidate's runner takes them) of one
    smoke seed: :data:`SMOKE` but ``seeds``, then ``seeds=[0]``, then ``extra``.  The GPU
    call's smoke run and its programs compiled beforehand
    (:mod:`dreamer_parity.accel.precompile` ``--smoke``) both use them."""
    return [*(f"{k}={json.dumps(v) if v is not None else 'null'}"
              for k, v in SMOKE.items() if k != "seeds"), "seeds=[0]", *extra]


def smoke_params(base: dict | None = None) -> dict:
    """The validated smoke parameter set (base: the defaults, or a validated dict)."""
    flat = _flatten(base) if base else {}
    flat.update(SMOKE)
    return validate(_nest(flat))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dreamer_parity.params", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="validate a params file")
    c.add_argument("--file", default="params.yaml")
    s = sub.add_parser("show", help="print the validated parameters as JSON")
    s.add_argument("--file", default="params.yaml")
    s.add_argument("--key", default=None, help="a top-level key to print alone")
    sub.add_parser("smoke-overrides", help="print the -S flags of the smoke round")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "smoke-overrides":
            print(" ".join(smoke_overrides()))
            return 0
        p = load(args.file)
    except (ParamsError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.cmd == "check":
        print(f"{args.file}: ok")
    else:
        print(json.dumps(p if args.key is None else p[args.key], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

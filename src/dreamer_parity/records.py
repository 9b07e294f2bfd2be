"""The files both sides write for one run of one seed, their writers and readers.

Standard library only: the reference's virtual environment imports this module.

Layout: ``results/<round>/<side>/s<seed>/`` holding

``records.jsonl``
    One JSON object per evaluation point, in increasing ``rows``:

    ========================  =============================================================
    ``side``                  ``"reference"`` or ``"candidate"``
    ``seed``                  run seed (int)
    ``rows``                  rows so far over all 16 envs (int; 16 per vector step)
    ``updates``               train updates so far (int; :mod:`dreamer_parity.schedule`)
    ``eval_returns``          list of floats: undiscounted return of each evaluation
                              episode (CartPole: steps survived, at most 500)
    ``eval_lengths``          list of ints: steps of each evaluation episode
    ``eval_mean``             mean of ``eval_returns`` (float)
    ``eval_len_mean``         mean of ``eval_lengths`` (float)
    ``train``                 ``{name: float | null}``: mean of each training metric over
                              the updates since the previous record, under the reference's
                              metric names (``vector_loss``, ``ent/action/mean`` ...);
                              NaN values are skipped as the reference's ``Agg`` does, and
                              a window without a finite value is ``null``
    ``train_counts``          ``{name: int}``: finite values averaged per metric
    ``retnorm``               ``{"lo", "hi", "scale"}`` of the return normaliser after the
                              last update (return units), or null before any update
    ``status``                ``"ok"``, or ``"failed"`` when the seed failed a finiteness
                              check at this point (its later points are absent)
    ========================  =============================================================

``episodes.jsonl``
    One object per finished training episode: ``seed``, ``worker`` (env index),
    ``row_last`` (0-based per-env row of the ``is_last`` row), ``length`` (steps),
    ``score`` (sum of rewards), ``terminal`` (bool: ended by termination).

``run.json``
    ``side``, ``seed``, ``config`` (the resolved configuration the run used), ``args``
    (the runner's arguments), ``provenance`` (:mod:`dreamer_parity.provenance`).

``timing.json``
    Wall-clock figures in seconds (build/compile, first update row, seconds per update,
    total).  Kept apart from the records so two runs' records compare for equality.

``DONE.json``
    The completion marker, written last (:func:`write_done`, after ``run.json``):
    ``status`` (``"ok"`` or ``"failed"``), ``reason`` (a failed run's), and the run it
    closes: ``side``, ``seed`` and ``run_sha256`` (the SHA-256 of ``run.json``'s bytes).
    A directory without it is an unfinished run and every reader refuses it; a marker
    whose ``side`` / ``seed`` / ``run_sha256`` disagree with the directory's ``run.json``
    is refused (:func:`done_agrees`).  A marker holding only ``status`` (and ``reason``),
    as runs written before the marker named its run have, is read as such
    (``legacy``: the analysis flags it, :mod:`dreamer_parity.analysis.checks`).

All writers are atomic: they write ``<name>.tmp-<pid>`` and rename it.

The two JSON-lines files may also be stored gzip-compressed, as ``records.jsonl.gz`` and
``episodes.jsonl.gz`` (:data:`JSONL_FILES`): runs kept under ``data/`` are
(:mod:`dreamer_parity.keep`, :func:`gzip_bytes`), runs a stage writes are not.
:func:`jsonl_path` finds either form (a directory holding both is refused), and
:func:`read_text`, hence every reader here, decompresses a ``.gz`` file, at most
:data:`MAX_DECOMPRESSED` bytes of it.

The guarded reader: every file a stage reads (a run's files, the study's published files
and their auxiliary files, params.yaml, the index of kept rounds, a pre-registration) is
read by :func:`read_raw` and the functions built on it (:func:`read_bytes`,
:func:`read_text`, :func:`read_json`, :func:`read_lines`).  Before a byte is read, it
refuses a path that is not a regular file (a directory, a device, a fifo, a socket; a
symbolic link is followed, so a link to ``/dev/zero`` is a device), one inside the
working directory (the repository root a stage runs in) that resolves outside it through
a symbolic link, and one larger than the cap of its kind (:data:`MAX_BYTES`, by the name's
suffix, :func:`file_kind`).  Text is UTF-8 (a byte that is not is named with its line and
offset), JSON errors name ``file:line``, an object naming a key twice is refused naming
both lines (Python's json would keep the last silently), and every number read lies within
``+-MAX_MAGNITUDE`` (so that no sum, square or fourth power of what was read overflows).
Every refusal is a :class:`RecordError` of one line naming the file.

The argument checks of every command (:func:`check_target`, :func:`check_source`,
:func:`check_range`, :class:`ArgumentParser`): a command checks its numbers, its inputs and
its outputs before it reads or computes anything, and refuses in one line (exit 2).

Evaluation returns and lengths and training-episode scores and lengths are checked
against the environment's ranges (:mod:`dreamer_parity.environment`) by
:func:`read_records` and :func:`read_episodes`.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import math
import os
import re
import stat
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

from dreamer_parity import environment

if TYPE_CHECKING:
    from dreamer_parity.round_spec import Round

__all__ = [
    "RecordError", "RECORD_FIELDS", "EPISODE_FIELDS", "SIDES", "run_dir", "PATCH_TARGETS",
    "write_json", "write_jsonl", "read_json", "read_records", "read_episodes",
    "read_done", "write_done", "read_run", "clean_json", "DONE", "loads_finite",
    "mean_matches", "MEAN_RTOL", "MAX_INT", "read_run_info", "read_lines", "read_text",
    "write_text", "file_sha256", "done_agrees", "DONE_RUN_KEYS", "recorded_value",
    "protocol_expected", "protocol_disagreements", "check_run_agrees",
    "JSONL_FILES", "GZ", "MAX_DECOMPRESSED", "jsonl_path", "gzip_bytes", "read_bytes",
    "read_raw", "MAX_BYTES", "MAX_MAGNITUDE", "file_kind", "check_file", "bound_problem",
    "check_target", "check_source", "check_range", "MAX_ARG_PATH", "repeated_problem",
    "ArgumentParser",
]

SIDES = ("reference", "candidate")
DONE = "DONE.json"
#: The JSON-lines files of a run; each is stored as ``<name>`` or, compressed, ``<name>.gz``.
JSONL_FILES = ("records.jsonl", "episodes.jsonl")
#: Suffix of a gzip-compressed file (:func:`gzip_bytes`).
GZ = ".gz"
_MIB = 2 ** 20
#: Largest file of each kind any reader accepts, in bytes as stored (the kind is the
#: name's suffix, :func:`file_kind`; a caller may name a smaller cap).  Measured: a
#: full-size run's records.jsonl is about 0.35 MiB, its episodes.jsonl about 0.15 MiB,
#: its run.json about 10 KiB; a published evals.jsonl 15 KiB, data/published/tables.csv
#: 0.32 MiB, docs/rounds/index.yaml 2 KiB, a pre-registration at most 30 KiB.
MAX_BYTES = {"jsonl": 4 * _MIB, "json": 1 * _MIB, "csv": 4 * _MIB, "yaml": 256 * 1024,
             "text": 1 * _MIB}
#: Largest decompressed size of a ``.gz`` file any reader accepts (bytes): the cap of a
#: JSON-lines file, the only kind stored compressed.
MAX_DECOMPRESSED = 4 * _MIB
#: Largest magnitude of any number a JSON reader accepts: a count is at most 2**53
#: (:data:`MAX_INT`), a timestamp about 2e9; at 1e30 the fourth power of a value (Welch's
#: degrees of freedom square variances) is still finite in float64.
MAX_MAGNITUDE = 1e30

#: field -> accepted Python types (None means JSON null is accepted)
RECORD_FIELDS = {
    "side": (str,),
    "seed": (int,),
    "rows": (int,),
    "updates": (int,),
    "eval_returns": (list,),
    "eval_lengths": (list,),
    "eval_mean": (float, int),
    "eval_len_mean": (float, int),
    "train": (dict,),
    "train_counts": (dict,),
    "retnorm": (dict, type(None)),
    "status": (str,),
}

EPISODE_FIELDS = {
    "seed": (int,),
    "worker": (int,),
    "row_last": (int,),
    "length": (int,),
    "score": (float, int),
    "terminal": (bool,),
}


class RecordError(ValueError):
    """A run's file is missing, truncated or malformed; the message names file and line."""


#: Relative tolerance of a logged mean against the mean of its list (both writers compute
#: ``float(np.mean(list_of_python_floats))`` in float64; measured: 0 on every published
#: evals.jsonl, so 1e-9 of ``max(1, |mean|)`` only absorbs summation order).
MEAN_RTOL = 1e-9
#: Largest integer a count field may hold (exact in float64, fits int64).
MAX_INT = 2 ** 53


class _NonFinite(ValueError):
    """A number JSON may hold but the project does not read; ``token`` is its text."""

    def __init__(self, message: str, token: str):
        super().__init__(message)
        self.token = token


class _Repeated(ValueError):
    """A JSON object that names one key twice; ``key`` is the key."""

    def __init__(self, key: str):
        super().__init__(f"key {key[:60]!r} given twice in one object")
        self.key = key


def _unique_pairs(pairs):
    """``object_pairs_hook`` of every JSON read: a repeated key is refused (Python's json
    would keep the last one silently), as :func:`dreamer_parity.params.parse_yaml` refuses
    one in YAML."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        for k, _ in pairs:
            if k in seen:
                raise _Repeated(k)
            seen.add(k)
    return out


def _key_lines(text: str, key: str) -> list[int]:
    """1-based lines of ``text`` where ``key`` stands as an object key (``"key":``)."""
    pat = re.compile(re.escape(json.dumps(key)) + r"\s*:")
    return [text.count("\n", 0, m.start()) + 1 for m in pat.finditer(text)]


def repeated_problem(text: str, key: str, where: str) -> str:
    """The one-line refusal of a repeated JSON key, naming both places
    (``<where>:<line>: key 'k' given twice (lines a and b)``)."""
    lines = _key_lines(text, key)
    both = f"lines {lines[0]} and {lines[1]}" if len(lines) >= 2 else "one object"
    return (f"{where}:{lines[1] if len(lines) >= 2 else 1}: key {key[:60]!r} given twice "
            f"({both}); a file names each thing once")


def _parse_constant(name):
    raise _NonFinite(f"{name} is not a finite number (JSON has no NaN/Infinity)", name)


def _parse_float(text):
    v = float(text)
    if not math.isfinite(v):
        raise _NonFinite(f"{text[:40]} is not a finite number", text)
    return v


def bound_problem(obj, path: str = "") -> str | None:
    """The first number inside a parsed JSON value that lies outside
    ``+-MAX_MAGNITUDE``, as ``field '<path>' holds <value>, outside +-1e+30 (...)``
    (``path`` dotted for keys, ``[i]`` for list items); None when every number is
    within.  Iterative, so that nesting depth costs no recursion."""
    stack = [(path, obj)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, dict):
            stack += [(f"{where}.{k}" if where else str(k), x) for k, x in
                      reversed(list(v.items()))]
        elif isinstance(v, list):
            stack += [(f"{where}[{i}]", x) for i, x in reversed(list(enumerate(v)))]
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) > MAX_MAGNITUDE:
            shown = repr(v) if isinstance(v, float) else f"an integer of {len(str(abs(v)))} digits"
            return (f"field {where[:80]!r} holds {shown}, outside +-{MAX_MAGNITUDE:g} (the "
                    f"bound of every number read)")
    return None


def loads_finite(text: str):
    """``json.loads`` refusing NaN, Infinity, overflowing floats, any number outside
    ``+-MAX_MAGNITUDE`` (ValueError; for the bound, naming the field, :func:`bound_problem`)
    and an object that names a key twice (ValueError ``_Repeated``; :func:`read_json` and
    :func:`read_lines` name both lines).

    Every file the project reads was written with ``allow_nan=False``; Python's json would
    otherwise read ``NaN`` / ``Infinity`` silently.
    """
    first = []

    def bounded(convert):
        def parse(token):
            v = convert(token)
            if not first and abs(v) > MAX_MAGNITUDE:
                first.append(token)
            return v
        return parse

    obj = json.loads(text, parse_constant=_parse_constant, object_pairs_hook=_unique_pairs,
                     parse_float=bounded(_parse_float), parse_int=bounded(int))
    if first:
        raise _NonFinite(bound_problem(obj) or f"{first[0][:40]} lies outside "
                                                f"+-{MAX_MAGNITUDE:g}", first[0])
    return obj


def _line_of(text: str, token: str) -> int:
    """1-based line of the first ``token`` in ``text`` (1 when absent)."""
    i = text.find(token)
    return text.count("\n", 0, i) + 1 if i >= 0 else 1


def mean_matches(mean, values) -> bool:
    """Whether ``mean`` equals the mean of the non-empty list ``values`` (:data:`MEAN_RTOL`)."""
    want = math.fsum(values) / len(values)
    return abs(float(mean) - want) <= MEAN_RTOL * max(1.0, abs(want))


def file_kind(path) -> str:
    """The kind of a file by its name (a ``.gz`` suffix set aside): ``jsonl``, ``json``,
    ``csv``, ``yaml`` (``.yaml``, ``.yml``) or ``text`` (anything else); the key of its
    cap in :data:`MAX_BYTES`."""
    name = Path(path).name
    if name.endswith(GZ):
        name = name[:-len(GZ)]
    suffix = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    return {"jsonl": "jsonl", "json": "json", "csv": "csv", "yaml": "yaml",
            "yml": "yaml"}.get(suffix, "text")


_TYPES = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a fifo"),
          (stat.S_ISSOCK, "a socket"))


def _inside_working_directory(path: Path, where: str) -> None:
    """Refuse a path that lies inside the working directory but resolves outside it."""
    cwd = os.getcwd()
    lexical = os.path.abspath(path)
    if lexical != cwd and not lexical.startswith(cwd.rstrip(os.sep) + os.sep):
        return      # given outside the repository (a command line's directory, a test)
    real, base = os.path.realpath(path), os.path.realpath(cwd)
    if real != base and not real.startswith(base.rstrip(os.sep) + os.sep):
        raise RecordError(f"{where}: resolves outside the repository through a symbolic "
                          f"link; a file the round reads lies inside it")


def check_file(path, where: str | None = None, cap: int | None = None) -> os.stat_result:
    """Check, before reading, that ``path`` may be read: the guarded reader's refusals.

    Args:
      path: the file (a symbolic link is followed).
      where: the name used in messages (default: the path).
      cap: the largest size accepted, in bytes (default: :data:`MAX_BYTES` of
        :func:`file_kind`).

    Returns:
      The ``os.stat`` result of the file.

    Raises:
      FileNotFoundError: no such file (a dangling link included).
      RecordError: one line naming ``where``: not a regular file (a directory, a device,
        a fifo, a socket), a path inside the working directory that resolves outside it,
        a file over the cap, or one that cannot be stat'ed (a link loop, no permission).
    """
    path = Path(path)
    where = str(path) if where is None else where
    cap = MAX_BYTES[file_kind(path)] if cap is None else cap
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise RecordError(f"{where}: cannot be read ({e.strerror or type(e).__name__})") \
            from None
    if not stat.S_ISREG(st.st_mode):
        what = next((name for test, name in _TYPES if test(st.st_mode)), "not a plain file")
        raise RecordError(f"{where}: not a regular file but {what}; a round reads regular "
                          f"files only")
    _inside_working_directory(path, where)
    if st.st_size > cap:
        raise RecordError(f"{where}: larger than {cap} bytes ({st.st_size} bytes; the cap "
                          f"of a {file_kind(path)} file)")
    return st


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose refusals are one line on stderr,
    ``error: <prog>: <message>`` (at most 500 characters), exit status 2, as every other
    refusal of the project's commands; ``--help`` is unchanged.  Subcommands' parsers are
    of this class too (``add_subparsers`` uses the parent's class)."""

    def error(self, message):
        """Exit 2 with the one-line refusal (never returns)."""
        line = " ".join(f"{self.prog}: {message}".split())
        self.exit(2, f"error: {line[:480]}\n")


#: Longest path a command line may name (characters).
MAX_ARG_PATH = 1024


def _inside(path, base) -> bool:
    real, root = os.path.realpath(path), os.path.realpath(base)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def _arg_path(path, where: str) -> tuple[Path, str]:
    """A path argument as a Path and as shown in a message (its first 80 characters);
    RecordError naming ``where`` when it is empty, longer than :data:`MAX_ARG_PATH` or
    holds a control character."""
    text = str(path)
    shown = text[:80] + ("..." if len(text) > 80 else "")
    if not text or len(text) > MAX_ARG_PATH or any(ord(c) < 32 or c == "\x7f" for c in text):
        raise RecordError(f"{where} {shown!r}: not a path (empty, over {MAX_ARG_PATH} "
                          f"characters, or a control character)")
    return Path(text), shown


def check_target(path, where: str, kind: str = "file", inside: bool = True,
                 suffixes: tuple[str, ...] = ()) -> Path:
    """Check a command's output path before anything is computed: the one check of every
    ``--out`` / destination argument.

    Args:
      path: the path as given.
      where: the argument as messages name it (``--out``).
      kind: ``"file"`` (an existing directory, device or fifo there is refused; an
        existing regular file is replaced atomically by the writer) or ``"dir"`` (an
        existing file there is refused).
      inside: the path must lie inside the working directory (the repository root),
        symbolic links resolved: outputs that are the project's artifacts.
      suffixes: the accepted name endings, lower case (``(".png", ".svg")``; the name is
        compared lower-cased), empty for any.

    Returns:
      ``Path(path)``.

    Raises:
      RecordError: one line naming ``where`` and the path: empty or longer than
        :data:`MAX_ARG_PATH`, a control character, outside the repository (with
        ``inside``), another suffix, a directory where a file goes (or a file where a
        directory goes), a parent that is a file.
    """
    p, shown = _arg_path(path, where)
    if inside and not _inside(p, os.getcwd()):
        raise RecordError(f"{where} {shown}: outside the repository; outputs are written "
                          f"inside it (a relative path such as results/...)")
    if suffixes and not p.name.lower().endswith(suffixes):
        raise RecordError(f"{where} {shown}: must end in {' or '.join(suffixes)}")
    if kind == "file":
        if p.is_dir():
            raise RecordError(f"{where} {shown}: an existing directory; name a file")
        if p.exists() and not p.is_file():
            raise RecordError(f"{where} {shown}: exists and is not a regular file")
        if p.is_symlink() and not p.exists():
            raise RecordError(f"{where} {shown}: a dangling symbolic link")
    elif kind == "dir":
        if p.exists() and not p.is_dir():
            raise RecordError(f"{where} {shown}: exists and is not a directory; name a "
                              f"directory")
    else:
        raise ValueError(f"kind must be file or dir, got {kind!r}")
    for parent in p.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise RecordError(f"{where} {shown}: {parent.name} in its path is a file, "
                                  f"not a directory")
            break
    return p


def check_source(path, where: str, kind: str = "file") -> Path:
    """Check an input path argument before anything is computed: it exists and is a
    ``kind`` (``"file"``: a regular file; ``"dir"``: a directory).

    Raises:
      RecordError: one line naming ``where``: not a path, missing, or of the other kind.
    """
    p, shown = _arg_path(path, where)
    if not p.exists():
        raise RecordError(f"{where} {shown}: not found")
    if kind == "dir" and not p.is_dir():
        raise RecordError(f"{where} {shown}: not a directory")
    if kind == "file" and not p.is_file():
        raise RecordError(f"{where} {shown}: not a regular file")
    return p


def check_range(value, where: str, low, high):
    """``value`` when ``low <= value <= high``; RecordError naming ``where`` otherwise
    (a bool is not a number here)."""
    if isinstance(value, bool) or not low <= value <= high:
        raise RecordError(f"{where} {str(value)[:40]}: must lie in {low}..{high}")
    return value


def read_raw(path, where: str | None = None, cap: int | None = None) -> bytes:
    """The bytes of ``path`` as stored (a ``.gz`` not decompressed): the one place a file
    the project reads is opened.  :func:`check_file` first, then at most ``cap`` bytes are
    read from the file it checked (a file that grows or is replaced meanwhile is refused).

    Raises:
      FileNotFoundError: no such file.
      RecordError: :func:`check_file`'s refusals, naming ``where``.
    """
    path = Path(path)
    where = str(path) if where is None else where
    cap = MAX_BYTES[file_kind(path)] if cap is None else cap
    st = check_file(path, where, cap)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise RecordError(f"{where}: cannot be read ({e.strerror or type(e).__name__})") \
            from None
    with os.fdopen(fd, "rb") as f:
        now = os.fstat(f.fileno())
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(now.st_mode):
            raise RecordError(f"{where}: replaced while it was read")
        data = f.read(cap + 1)
    if len(data) > cap:
        raise RecordError(f"{where}: larger than {cap} bytes (it grew while it was read)")
    return data


def read_bytes(path, where: str | None = None, cap: int | None = None) -> bytes:
    """The bytes of ``path`` (:func:`read_raw`), decompressed when its name ends in
    :data:`GZ` (at most :data:`MAX_DECOMPRESSED` bytes of it).

    Raises:
      RecordError: :func:`read_raw`'s refusals, ``<where>: not a complete gzip file
        (...)`` (a truncated or corrupt ``.gz``) or ``<where>: decompresses to more than
        MAX_DECOMPRESSED bytes`` (``where`` defaults to the path).
      FileNotFoundError: no such file.
    """
    path = Path(path)
    where = str(path) if where is None else where
    raw = read_raw(path, where, cap)
    if not path.name.endswith(GZ):
        return raw
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw), mode="rb") as f:
            data = f.read(MAX_DECOMPRESSED + 1)
    except (OSError, EOFError, ValueError, zlib.error) as e:   # BadGzipFile is an OSError
        raise RecordError(f"{where}: not a complete gzip file ({type(e).__name__}: "
                          f"{str(e)[:80]})") from None
    if len(data) > MAX_DECOMPRESSED:
        raise RecordError(f"{where}: decompresses to more than {MAX_DECOMPRESSED} bytes")
    return data


def read_text(path, where: str | None = None, cap: int | None = None) -> str:
    """The UTF-8 text of ``path`` (decompressed first when it is a ``.gz``,
    :func:`read_bytes`): the one decoding check of every file the project reads.

    Raises:
      RecordError: ``<where>:<line>: not UTF-8 text (byte N)`` (``where`` defaults to the
        path; N counts decompressed bytes), or :func:`read_bytes`' errors.
      FileNotFoundError: no such file.
    """
    path = Path(path)
    where = str(path) if where is None else where
    data = read_bytes(path, where, cap)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise RecordError(f"{where}:{line}: not UTF-8 text (byte {e.start})") from None


def jsonl_path(directory, name: str) -> Path | None:
    """The file that holds ``name`` (one of :data:`JSONL_FILES`) in a run directory:
    ``<directory>/<name>`` or ``<directory>/<name>.gz``; None when neither exists.

    Raises:
      RecordError: both exist (which one is the run's is not decidable), naming them.
      ValueError: ``name`` is not one of :data:`JSONL_FILES`.
    """
    if name not in JSONL_FILES:
        raise ValueError(f"name must be one of {JSONL_FILES}, got {name!r}")
    plain, packed = Path(directory) / name, Path(directory) / (name + GZ)
    if plain.exists() and packed.exists():
        raise RecordError(f"{directory}: holds both {name} and {name + GZ}: keep one")
    if packed.exists():
        return packed
    return plain if plain.exists() else None


def gzip_bytes(data: bytes) -> bytes:
    """``data`` gzip-compressed the same way every time (level 9, no name, mtime 0), so that
    the same run kept twice gives the same bytes (with the same zlib)."""
    return gzip.compress(data, compresslevel=9, mtime=0)


def run_dir(root: str | os.PathLike, side: str, seed: int) -> Path:
    """``<root>/<side>/s<seed>`` (raises ValueError for an unknown side)."""
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}, got {side!r}")
    return Path(root) / side / f"s{int(seed)}"


def clean_json(x):
    """Replace non-finite floats by None recursively (JSON has no NaN/Infinity)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: clean_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean_json(v) for v in x]
    if hasattr(x, "item") and callable(x.item) and getattr(x, "shape", None) == ():
        return clean_json(x.item())
    return x


def write_text(path, text: str) -> None:
    """Write ``text`` to ``path`` atomically: ``<name>.tmp-<pid>``, fsync, rename (the one
    atomic text writer; parent directories are created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json(path, obj) -> None:
    """Atomically write one JSON object (non-finite floats become null)."""
    write_text(Path(path), json.dumps(clean_json(obj), indent=1, sort_keys=True,
                                         allow_nan=False) + "\n")


def write_jsonl(path, rows) -> None:
    """Atomically write a list of JSON objects, one per line."""
    lines = [json.dumps(clean_json(r), sort_keys=True, allow_nan=False) for r in rows]
    write_text(Path(path), "".join(line + "\n" for line in lines))


#: The reference function each protocol patch replaces, by (parameter, value)
#: (:mod:`dreamer_parity.reference.patches`; recorded in a run's ``run.json`` as
#: ``patches.replaced``).  A run that replaced anything else is a diagnostic run
#: (:func:`check_run_agrees` refuses it).
PATCH_TARGETS = {("decode", "exact"): "dreamerv3.jaxutils.TwoHotDist.mean",
                 ("sampler", "per_run"): "embodied.replay.selectors.Uniform.__init__"}

#: Keys of ``DONE.json`` that name the run it closes (all present, or none: legacy).
DONE_RUN_KEYS = ("side", "seed", "run_sha256")


def file_sha256(path) -> str:
    """Hex SHA-256 of a file's bytes as stored (:func:`read_raw`: its refusals apply)."""
    return hashlib.sha256(read_raw(path)).hexdigest()


def write_done(directory, status: str = "ok", reason: str | None = None) -> None:
    """Write the completion marker last (``status`` ``ok`` or ``failed``).

    The marker names the run it closes: ``side`` and ``seed`` of the directory's
    ``run.json`` and that file's SHA-256, so ``run.json`` is written first.

    Raises:
      ValueError: an unknown status.
      RecordError: ``run.json`` is missing, malformed, or has no ``side`` / ``seed``.
    """
    if status not in ("ok", "failed"):
        raise ValueError(f"status must be 'ok' or 'failed', got {status!r}")
    run_path = Path(directory) / "run.json"
    info = read_run_info(run_path)
    for key in ("side", "seed"):
        if key not in info:
            raise RecordError(f"{run_path}: field {key!r} missing; DONE.json names the run "
                              f"it closes by it")
    obj = {"status": status, "side": info["side"], "seed": info["seed"],
           "run_sha256": file_sha256(run_path)}
    if reason is not None:
        obj["reason"] = str(reason)
    write_json(Path(directory) / DONE, obj)


def done_agrees(directory, done: dict, side: str | None = None,
                seed: int | None = None) -> bool:
    """Whether a completion marker names the run of its directory.

    Args:
      directory: the run directory (holding ``run.json``).
      done: its :func:`read_done` marker.
      side, seed: what the reader expects (None: not checked).

    Returns:
      True when the marker names its run; False for a legacy marker (no
      :data:`DONE_RUN_KEYS`), which the caller judges.

    Raises:
      RecordError: naming ``DONE.json`` and the field, when the marker names another side,
        seed or ``run.json`` (its SHA-256), or holds only part of :data:`DONE_RUN_KEYS`.
    """
    path = Path(directory) / DONE
    have = [k for k in DONE_RUN_KEYS if k in done]
    if not have:
        return False
    if len(have) != len(DONE_RUN_KEYS):
        missing = [k for k in DONE_RUN_KEYS if k not in done]
        raise RecordError(f"{path}: names its run only in part (no {', '.join(missing)})")
    if side is not None and done["side"] != side:
        raise RecordError(f"{path}: side {str(done['side'])[:40]!r}, expected {side!r}")
    if seed is not None and done["seed"] != seed:
        raise RecordError(f"{path}: seed {str(done['seed'])[:40]}, expected {seed}")
    run_path = Path(directory) / "run.json"
    if not run_path.is_file():
        raise RecordError(f"{path}: closes a run whose run.json is missing")
    if done["run_sha256"] != file_sha256(run_path):
        raise RecordError(f"{path}: run_sha256 is not the SHA-256 of {run_path.name}: the "
                          f"marker closes another run.json than the one beside it")
    return True


def read_json(path, where: str | None = None, cap: int | None = None) -> dict:
    """Read one JSON object through the guarded reader (:func:`read_text`,
    :func:`loads_finite`).

    Raises:
      RecordError: one line naming ``where`` (default: the path): ``missing``, the reader's
        refusals, ``<where>:<line>: invalid JSON (...)``, ``<where>:<line>: <number> is
        not a finite number`` or outside ``+-MAX_MAGNITUDE``, ``expected a JSON object``.
    """
    path = Path(path)
    where = str(path) if where is None else where
    try:
        text = read_text(path, where, cap)
    except FileNotFoundError:
        raise RecordError(f"{where}: missing") from None
    try:
        obj = loads_finite(text)
    except _NonFinite as e:
        raise RecordError(f"{where}:{_line_of(text, e.token)}: {e}") from None
    except _Repeated as e:
        raise RecordError(repeated_problem(text, e.key, where)) from None
    except json.JSONDecodeError as e:
        raise RecordError(f"{where}:{e.lineno}: invalid JSON ({e.msg}, column "
                          f"{e.colno})") from None
    except (ValueError, RecursionError) as e:
        raise RecordError(f"{where}: invalid JSON ({type(e).__name__}: "
                          f"{str(e)[:80]})") from None
    if not isinstance(obj, dict):
        raise RecordError(f"{where}: expected a JSON object")
    return obj


def read_done(directory) -> dict:
    """Return the completion marker of a run directory.

    Raises:
      RecordError: no marker (an unfinished or killed run), or a malformed one.
    """
    path = Path(directory) / DONE
    if not path.exists() and not path.is_symlink():
        raise RecordError(f"{path}: missing completion marker: the run did not finish")
    obj = read_json(path)
    if obj.get("status") not in ("ok", "failed"):
        raise RecordError(f"{path}: status must be 'ok' or 'failed', got "
                          f"{str(obj.get('status'))[:40]!r}")
    if "reason" in obj and not isinstance(obj["reason"], str):
        raise RecordError(f"{path}: reason must be a string, got {type(obj['reason']).__name__}")
    if "side" in obj and obj["side"] not in SIDES:
        raise RecordError(f"{path}: field 'side' must be one of {SIDES}")
    if "seed" in obj and (isinstance(obj["seed"], bool) or not isinstance(obj["seed"], int)):
        raise RecordError(f"{path}: field 'seed' must be an integer")
    if "run_sha256" in obj and not (isinstance(obj["run_sha256"], str) and len(
            obj["run_sha256"]) == 64 and all(c in "0123456789abcdef" for c in obj["run_sha256"])):
        raise RecordError(f"{path}: field 'run_sha256' must be 64 lowercase hex digits")
    unknown = sorted(set(obj) - {"status", "reason", *DONE_RUN_KEYS})
    if unknown:
        raise RecordError(f"{path}: unknown field {str(unknown[0])[:40]!r}")
    return obj


def _check_types(path, lineno, obj, fields):
    for name, types in fields.items():
        if name not in obj:
            raise RecordError(f"{path}:{lineno}: missing field {name!r}")
        v = obj[name]
        if isinstance(v, bool) and bool not in types:
            raise RecordError(f"{path}:{lineno}: field {name!r} has type bool")
        if not isinstance(v, types):
            names = "/".join("null" if t is type(None) else t.__name__ for t in types)
            raise RecordError(
                f"{path}:{lineno}: field {name!r} should be {names}, got {type(v).__name__}")


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_record_values(path, lineno, obj):
    """Element types of the list and dict fields, and the status value."""
    if obj["status"] not in ("ok", "failed"):
        raise RecordError(f"{path}:{lineno}: field 'status' must be 'ok' or 'failed', "
                          f"got {obj['status']!r}")
    _check_counts(path, lineno, obj, ("seed", "rows", "updates"))
    for name, ok, what in (("eval_returns", _is_number, "numbers"),
                           ("eval_lengths", lambda v: isinstance(v, int)
                            and not isinstance(v, bool), "integers")):
        bad = [v for v in obj[name] if not ok(v)]
        if bad:
            raise RecordError(f"{path}:{lineno}: field {name!r} must hold {what}, got {bad[0]!r}")
    if len(obj["eval_returns"]) != len(obj["eval_lengths"]):
        raise RecordError(f"{path}:{lineno}: eval_returns and eval_lengths differ in length")
    for mean_key, list_key, kind in (("eval_mean", "eval_returns", "return"),
                                     ("eval_len_mean", "eval_lengths", "length")):
        values = obj[list_key]
        if not values:
            raise RecordError(f"{path}:{lineno}: field {list_key!r} is empty")
        problem = environment.values_problem(kind, values)   # before any sum of them
        if problem:
            raise RecordError(f"{path}:{lineno}: field {list_key!r} {problem}")
        if not mean_matches(obj[mean_key], values):
            raise RecordError(
                f"{path}:{lineno}: field {mean_key!r} {obj[mean_key]!r} is not the mean of "
                f"{list_key!r} ({math.fsum(values) / len(values)!r})")
        problem = environment.mean_problem(kind, obj[mean_key], values, MEAN_RTOL)
        if problem:
            raise RecordError(f"{path}:{lineno}: field {mean_key!r} {problem}")
    for name, ok, what in (("train", lambda v: v is None or _is_number(v), "numbers or null"),
                           ("train_counts", lambda v: isinstance(v, int)
                            and not isinstance(v, bool), "integers")):
        bad = [k for k, v in obj[name].items() if not ok(v)]
        if bad:
            raise RecordError(f"{path}:{lineno}: field '{name}.{bad[0]}' must be {what}, "
                              f"got {obj[name][bad[0]]!r}")


def _check_counts(path, lineno, obj, names):
    """Integer fields that count something: 0 <= value <= 2**53 (types checked before)."""
    for name in names:
        if not 0 <= obj[name] <= MAX_INT:
            raise RecordError(f"{path}:{lineno}: field {name!r} must lie in 0..2**53, "
                              f"got {obj[name]}")


def read_lines(path, where: str | None = None) -> list[tuple[int, dict]]:
    """Read a JSON-lines file: the one JSONL reader (records, episodes, published evals).

    Args:
      path: the file.
      where: the name used in messages (default: the path).

    Returns:
      ``[(line_number, object), ...]`` (1-based line numbers), one JSON object per line.

    Raises:
      RecordError: ``<where>:<line>: ...``: missing file, the guarded reader's refusals
        (:func:`read_raw`), not UTF-8, a last line without its newline (truncated), an
        empty line, invalid JSON, NaN / Infinity or a number outside
        ``+-MAX_MAGNITUDE``, or a line that is not an object.
    """
    path = Path(path)
    where = str(path) if where is None else where
    try:
        text = read_text(path, where)
    except FileNotFoundError:
        raise RecordError(f"{where}: missing") from None
    if text and not text.endswith("\n"):
        n = text.count("\n") + 1
        raise RecordError(f"{where}:{n}: truncated line (no final newline)")
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            raise RecordError(f"{where}:{i}: empty line")
        try:
            obj = loads_finite(line)
        except _NonFinite as e:
            raise RecordError(f"{where}:{i}: {e}") from None
        except _Repeated as e:
            raise RecordError(f"{where}:{i}: key {e.key[:60]!r} given twice in the line's "
                              f"object; a file names each thing once") from None
        except (ValueError, RecursionError) as e:
            raise RecordError(f"{where}:{i}: truncated or invalid JSON "
                              f"({str(e)[:120]})") from None
        if not isinstance(obj, dict):
            raise RecordError(f"{where}:{i}: expected a JSON object")
        out.append((i, obj))
    return out


def read_records(directory, require_done: bool = True) -> list[dict]:
    """Read and validate ``records.jsonl`` (or ``records.jsonl.gz``) of a run directory.

    Checks every field's presence and type (list and dict elements included), the
    status value, rows strictly increasing, equal-length return and length lists, every
    evaluation return and length a value the environment can produce and each mean
    within its list (:mod:`dreamer_parity.environment`), each mean equal to its list's,
    and (by default) the completion marker, which is read first.

    Raises:
      RecordError: naming the file, the line and the field.
    """
    directory = Path(directory)
    if require_done:
        read_done(directory)
    path = jsonl_path(directory, "records.jsonl") or directory / "records.jsonl"
    recs = []
    prev = None
    for i, obj in read_lines(path):
        _check_types(path, i, obj, RECORD_FIELDS)
        _check_record_values(path, i, obj)
        if obj["side"] not in SIDES:
            raise RecordError(f"{path}:{i}: field 'side' must be one of {SIDES}")
        if len(obj["eval_returns"]) != len(obj["eval_lengths"]):
            raise RecordError(f"{path}:{i}: eval_returns and eval_lengths differ in length")
        if prev is not None and obj["rows"] <= prev:
            raise RecordError(f"{path}:{i}: field 'rows' out of order: {obj['rows']} "
                                  f"after {prev}")
        prev = obj["rows"]
        recs.append(obj)
    return recs


def read_episodes(directory, require_done: bool = True) -> list[dict]:
    """Read and validate ``episodes.jsonl`` (or ``episodes.jsonl.gz``): every field's
    type, counts within 0..2**53, and ``length`` and ``score`` values the environment can
    produce (:mod:`dreamer_parity.environment`).

    Raises:
      RecordError: naming the file, the line and the field.
    """
    directory = Path(directory)
    if require_done:
        read_done(directory)
    path = jsonl_path(directory, "episodes.jsonl") or directory / "episodes.jsonl"
    eps = []
    for i, obj in read_lines(path):
        _check_types(path, i, obj, EPISODE_FIELDS)
        _check_counts(path, i, obj, ("seed", "worker", "row_last", "length"))
        for name, kind in (("length", "length"), ("score", "return")):
            problem = environment.value_problem(kind, obj[name])
            if problem:
                raise RecordError(f"{path}:{i}: field {name!r} {problem}")
        eps.append(obj)
    return eps


#: A run directory named by its seed (``s<S>``), as every layout names it.
_SEED_DIR_NAME = re.compile(r"s(0|[1-9][0-9]*)")


#: run.json keys whose value, when present, must be a JSON object
_RUN_OBJECTS = ("args", "config", "provenance")
#: provenance keys that name a git tree: ``{"commit": str | null, "dirty": bool | null}``
_TREES = ("repo", "reference", "reference_checkout")


def read_run_info(path) -> dict:
    """Read ``run.json``: ``side`` / ``seed`` when present of their types, ``args``,
    ``config``, ``provenance`` objects, its trees ``{commit: str|null, dirty: bool|null}``
    and ``versions`` ``{name: str|null}`` (RecordError naming the file and field)."""
    obj = read_json(path)
    for key in _RUN_OBJECTS:
        if key in obj and not isinstance(obj[key], dict):
            raise RecordError(f"{path}: field {key!r} must be an object, got "
                              f"{type(obj[key]).__name__}")
    if "side" in obj and obj["side"] not in SIDES:
        raise RecordError(f"{path}: field 'side' must be one of {SIDES}, got {obj['side']!r}")
    if "seed" in obj and (isinstance(obj["seed"], bool) or not isinstance(obj["seed"], int)):
        raise RecordError(f"{path}: field 'seed' must be an integer, got {obj['seed']!r}")
    prov = obj.get("provenance", {})
    for tree in _TREES:
        if tree not in prov:
            continue
        t = prov[tree]
        if not isinstance(t, dict):
            raise RecordError(f"{path}: field 'provenance.{tree}' must be an object")
        if not isinstance(t.get("commit"), (str, type(None))):
            raise RecordError(f"{path}: field 'provenance.{tree}.commit' must be a string or null")
        if not isinstance(t.get("dirty"), (bool, type(None))):
            raise RecordError(f"{path}: field 'provenance.{tree}.dirty' must be true, false or null")
    versions = prov.get("versions", {})
    if not isinstance(versions, dict) or not all(
            isinstance(v, (str, type(None))) for v in versions.values()):
        raise RecordError(f"{path}: field 'provenance.versions' must map names to strings or null")
    return obj


def read_run(directory) -> dict:
    """Read a finished run: ``{"done", "run", "records", "episodes", "timing"}``.

    ``timing`` is None when absent.  Raises RecordError as the single readers.
    """
    directory = Path(directory)
    done = read_done(directory)
    timing_path = directory / "timing.json"
    timing = read_json(timing_path) if timing_path.exists() or timing_path.is_symlink() \
        else None
    return {
        "done": done,
        "run": read_run_info(directory / "run.json"),
        "records": read_records(directory, require_done=False),
        "episodes": read_episodes(directory, require_done=False),
        "timing": timing,
    }


def recorded_value(run_info: dict | None, names: tuple[str, ...]):
    """First value found for any of ``names`` (dotted or bare) in run.json ``args``, then
    ``config``, then ``config["params"]`` (the candidate records the validated params
    there), then the top level (``seed``).  Returns ``(found, value)``."""
    if not run_info:
        return False, None
    config = run_info.get("config") if isinstance(run_info.get("config"), dict) else {}
    sources = [run_info.get("args"), config, config.get("params"), run_info]
    for d in sources:
        if not isinstance(d, dict):
            continue
        for name in names:
            node, ok = d, True
            for key in name.split("."):
                if isinstance(node, dict) and key in node:
                    node = node[key]
                else:
                    ok = False
                    break
            if ok and not isinstance(node, dict):
                return True, node
    return False, None


def protocol_expected(round_: Round, side: str, seed: int,
                      made_by: str | None = None) -> dict:
    """What a run standing on ``side`` for ``seed`` must record: ``{(name, alias...): value}``.

    The protocol parameters of the round: seed, profile, rows, eval_every,
    eval_episodes, and the two-hot decode; the names are those of the implementation that
    made the run (``made_by``: ``decode`` for the candidate, ``reference.decode`` for the
    reference), the decode value that of the side it stands on
    (:attr:`dreamer_parity.round_spec.RoundSide.decode`); the replay ``sampler`` only for
    a reference-made run on the reference side.

    Args:
      round_: the round (:class:`dreamer_parity.round_spec.Round`); side: the side the run
      stands on; seed: its seed; made_by: the implementation that made it (None: ``side``).
    """
    made_by = side if made_by is None else made_by
    pr = round_.protocol
    exp = {("seed",): seed, ("profile",): pr.profile, ("rows",): pr.rows,
           ("eval_every",): pr.eval_every, ("eval_episodes",): pr.eval_episodes}
    decode = round_.side(side).decode
    if made_by == "candidate":
        exp[("decode",)] = decode
    else:
        exp[("reference.decode", "decode")] = decode
        if side == "reference":
            exp[("reference.sampler", "sampler")] = round_.reference_run.sampler
    return exp


def protocol_disagreements(round_: Round, side: str, seed: int, run_info: dict | None,
                           made_by: str | None = None) -> tuple[list[str], list[str]]:
    """A run's recorded protocol parameters against what the round expects of it.

    Returns:
      ``(wrong, absent)``: one ``"<name> <recorded> != <expected>"`` per parameter
      recorded with another value (the recorded value cut to 40 characters), and the
      names recorded nowhere (:func:`recorded_value`); the expectations are
      :func:`protocol_expected`'s for ``side`` and ``made_by``.
    """
    wrong, absent = [], []
    for names, want in protocol_expected(round_, side, seed, made_by).items():
        found, got = recorded_value(run_info, names)
        if not found:
            absent.append(names[0])
        elif got != want or isinstance(got, bool) != isinstance(want, bool):
            wrong.append(f"{names[0]} {repr(got)[:40]} != {want!r}")
    return wrong, absent


def check_run_agrees(directory, round_: Round | None, side: str, seed: int,
                     data: dict | None = None, made_by: str | None = None) -> bool:
    """Require a finished run's files to agree with each other and with the round.

    The one place that decides whether a run of this schema is the run it claims to be:

    * ``run.json`` ``side`` (when recorded) is ``made_by``, the implementation that made
      the run (a run judged by what produced it, not by the side it stands on), every
      record of ``records.jsonl`` has that side, and ``run.json`` ``seed`` (when
      recorded), the seed of every record and every episode and the directory's name
      (when it has the form ``s<S>``) are ``seed``;
    * ``DONE.json`` names this run (:func:`done_agrees`), or is a legacy marker;
    * every function ``run.json`` says the run replaced (``patches.replaced``, when
      recorded) is a protocol patch's (:data:`PATCH_TARGETS`): a
      diagnostic run (:mod:`dreamer_parity.reference.probe_runner`) is never taken for a
      protocol run;
    * with ``round_``: no protocol parameter recorded in ``run.json`` differs from the
      round's (:func:`protocol_disagreements`; parameters recorded nowhere are the
      analysis's config check, a FAIL), and a ``DONE.json`` that says ``failed`` is not
      beside records holding every evaluation point of the round, all ``ok``.

    Args:
      directory: the run directory.
      round_: the round (:class:`dreamer_parity.round_spec.Round`), or None (files
        against each other only).
      side, seed: the side the run stands on and its seed.
      data: :func:`read_run`'s dict when already read (else ``DONE.json``, ``run.json``,
        ``records.jsonl`` and ``episodes.jsonl`` are read here, standard library only, so that an entry point
        can refuse before it imports anything heavy).
      made_by: the implementation that made the run
        (:attr:`dreamer_parity.sides.SeedSource.made_by`); None: ``side``.

    Returns:
      True when ``DONE.json`` is a legacy marker (status only), False when it names its run.

    Raises:
      RecordError: one line naming the file and what disagrees.
    """
    directory = Path(directory)
    if data is None:
        data = {"done": read_done(directory), "run": read_run_info(directory / "run.json"),
                "records": read_records(directory, require_done=False)}
    info, done = data["run"], data["done"]
    made_by = side if made_by is None else made_by
    run_path = directory / "run.json"
    if info.get("side", made_by) != made_by:
        raise RecordError(f"{run_path}: side {str(info['side'])[:40]!r}, expected {made_by!r}: "
                          f"the run directory holds another side's run")
    if info.get("seed", seed) != seed:
        raise RecordError(f"{run_path}: seed {str(info['seed'])[:40]}, expected {seed}: the run "
                          f"directory holds another seed's run")
    other = [r["side"] for r in data["records"] if r.get("side") != info.get("side", made_by)]
    if other:
        raise RecordError(f"{run_path}: side {str(info.get('side', made_by))[:40]!r}, but "
                          f"records.jsonl holds records of side {str(other[0])[:40]!r}: the "
                          f"run's files disagree about who made it")
    replaced = info.get("patches", {}).get("replaced", []) \
        if isinstance(info.get("patches"), dict) else []
    foreign = [str(n) for n in (replaced if isinstance(replaced, list) else [replaced])
               if n not in PATCH_TARGETS.values()]
    if foreign:
        raise RecordError(f"{run_path}: patches.replaced names {foreign[0][:60]!r}, which no "
                          f"protocol patch replaces: a diagnostic run, not a protocol run")
    legacy = not done_agrees(directory, done, made_by, seed)
    named = _SEED_DIR_NAME.fullmatch(directory.name)
    if named and int(named.group(1)) != seed:
        raise RecordError(f"{run_path}: seed {seed}, but its directory is named "
                          f"{directory.name}: a run's directory names its own seed")
    if "episodes" not in data:      # a missing file is read_run's refusal, not this one's
        data = {**data, "episodes": read_episodes(directory, require_done=False)
                if jsonl_path(directory, "episodes.jsonl") is not None else []}
    for name, rows in (("records.jsonl", data["records"]), ("episodes.jsonl", data["episodes"])):
        bad = next((i for i, r in enumerate(rows, 1) if r.get("seed") != seed), None)
        if bad is not None:
            raise RecordError(f"{run_path}: seed {seed}, but {name} line {bad} says seed "
                              f"{str(rows[bad - 1].get('seed'))[:40]}: the run's files "
                              f"disagree about its seed")
    if round_ is None:
        return legacy
    wrong, _ = protocol_disagreements(round_, side, seed, info, made_by)
    if wrong:
        raise RecordError(f"{run_path}: {'; '.join(wrong)[:200]}: the run was made with other "
                          f"parameters than the round's")
    points = list(round_.protocol.points)
    recs = data["records"]
    if (done["status"] == "failed" and [r["rows"] for r in recs] == points
            and all(r["status"] == "ok" for r in recs)):
        raise RecordError(f"{directory / DONE}: says failed ({str(done.get('reason'))[:80]}) "
                          f"beside a complete run (records.jsonl holds every evaluation point, "
                          f"all ok): the run's files disagree")
    return legacy

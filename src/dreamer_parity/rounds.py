"""Kept rounds by name: the committed index ``docs/rounds/index.yaml`` and its command.

A kept round is a commit that holds the round's ``params.yaml`` (its ``round`` is the
name), ``dvc.lock``, metrics and report, and whose cached outputs its own ``store/`` (the
git-tracked default DVC remote as that commit has it) restores: ``git checkout <round>``
then ``dvc pull``.  The store at HEAD holds only what HEAD's ``dvc.lock`` names.  The index maps each name to that commit; git tags of the same names are made
from it (``make round-tags``), so ``dvc metrics diff round3-candidate <name>`` works where
the tags exist, and ``dvc metrics diff $(python -m dreamer_parity.rounds rev
round3-candidate) HEAD`` where they do not (a clone or an archive that dropped tags)::

    python -m dreamer_parity.rounds list            # name, commit, tag state, what it is
    python -m dreamer_parity.rounds rev NAME        # the commit of a kept round (40 hex)
    python -m dreamer_parity.rounds check [NAME..]  # each entry restorable and consistent
    python -m dreamer_parity.rounds tag [--force]   # a git tag per entry (make round-tags)
    python -m dreamer_parity.rounds latest NAME     # the rule below, for NAME
    python -m dreamer_parity.rounds pin NAME        # set NAME's commit to `latest NAME`
    python -m dreamer_parity.rounds table           # every kept round's headline numbers
    python -m dreamer_parity.rounds switch NAME     # the round's params.yaml into the workspace
    python -m dreamer_parity.rounds back            # the workspace's round files back to HEAD

``switch`` (``make round ROUND=NAME``, which then runs ``dvc repro``) writes the kept
round's ``params.yaml``, read from its commit through the one migration of older
parameter files (:func:`dreamer_parity.params.migrate`: the keys the schema gained since,
with the values the round ran with), validated and its sides resolved first; ``dvc repro``
then recomputes the round from its kept runs with HEAD's code.  A side that ran here in
the round (``<side>.source: run``) reads its runs as kept: the one directory of
``data/runs/`` whose runs were made with the round's parameters
(:func:`dreamer_parity.sides.matching_kept_runs`); none or several: refused in one line.
``back`` (``make head``, which then runs ``dvc pull``) restores ``params.yaml``,
``dvc.lock`` and the git-tracked files of ``metrics/`` and ``results/`` (the report, the
``.gitignore`` files DVC writes) from HEAD, and removes what a round left that HEAD does
not have (files under ``metrics/``, run outputs of seeds HEAD has no stage for); ``dvc
pull`` then restores HEAD's outputs.

The index file (YAML; a mapping, comments allowed)::

    <name>:                 # letters, digits, '-', '_' (the round's `round` value)
      commit: '<40 hex>'    # the commit that holds the round (quoted: YAML reads
                            # a hash of digits only as a number)
      about: <one line>     # what the round is

``table`` prints one line per kept round (at most 120 characters), read from the round's
committed ``metrics/summary.json`` and ``params.yaml`` through git (the workspace is not
read): round, the candidate's ``decode``, the primary statistic, each side's number of
seeds, each side's mean, the difference (candidate - reference) with its 90% interval,
Welch's p, the gate's verdict and the reading of the interval
(:func:`dreamer_parity.analysis.metrics_out.headline`).

``check`` verifies per entry: the commit exists and is an ancestor of HEAD; its
``params.yaml`` names the round; it holds ``dvc.lock`` and ``docs/rounds/<name>.md``;
every output ``dvc.lock`` records is either in the commit's git tree or in the store of
that commit (its default DVC remote, a directory inside the repository, as git holds it
at the commit; a directory output with every file of its listing); a tag of that name, where one exists, points at the commit.  It also
applies the rule: **the newest commit in HEAD's history that changed
``metrics/summary.json`` while ``params.yaml`` named the round** (``latest``); when that
commit's summary differs from the entry's, the entry is stale and ``check`` says which
commit ``pin`` would take.  Exit status: 0 all good, 1 a problem (one line each), 2 bad
input (the index or a name), with one line naming the file or name.
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import posixpath
import re
import subprocess
import sys
from pathlib import Path

import yaml

from dreamer_parity import records

__all__ = ["RoundsError", "INDEX", "NAME_RE", "load_index", "rev", "latest", "check",
           "make_tags", "pin", "table", "round_params", "switch", "back", "ROUND_FILES", "main"]

#: The index, relative to the repository root.
INDEX = "docs/rounds/index.yaml"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_FIELDS = {"commit", "about"}
SUMMARY = "metrics/summary.json"


class RoundsError(ValueError):
    """Bad index or name; the message is one line naming the file or the name."""


def _git(root, *args, check: bool = True) -> str:
    r = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RoundsError(f"git {' '.join(args)}: {r.stderr.strip() or 'failed'}")
    return r.stdout.strip() if r.returncode == 0 else ""


def _exists(root, spec: str) -> bool:
    """Whether git knows the object ``spec`` (``<commit>:<path>``, ``<hash>^{commit}``)."""
    return subprocess.run(["git", "cat-file", "-e", spec], cwd=root,
                          capture_output=True).returncode == 0


def repo_root(start=".") -> Path:
    """The git work tree that holds ``start``.

    Raises:
      RoundsError: ``start`` is not inside a git work tree.
    """
    out = _git(start, "rev-parse", "--show-toplevel", check=False)
    if not out:
        raise RoundsError(f"{start}: not inside a git work tree")
    return Path(out)


def load_index(root, path: str = INDEX) -> dict[str, dict]:
    """The index as ``{name: {"commit": str (40 hex), "about": str}}`` in file order.

    The file is read through the guarded reader (:func:`dreamer_parity.records.read_text`)
    and parsed by the strict YAML reader (:func:`dreamer_parity.params.strict_yaml`),
    which refuses a name given twice (PyYAML alone keeps the last silently), naming the
    line of each entry.

    Raises:
      RoundsError: one line naming the file (and line): missing, refused by the guarded
      reader, not YAML, a name given twice, not a mapping of names to entries with
      exactly ``commit`` and ``about``, a name that is not a plain name or is reserved
      (:data:`dreamer_parity.params.RESERVED_ROUNDS`), or a malformed commit.
    """
    from dreamer_parity import params as P
    from dreamer_parity import records

    p = Path(root) / path
    if not p.exists() and not p.is_symlink():
        raise RoundsError(f"{path}: not found")
    try:
        data = P.strict_yaml(records.read_text(p, path), path)
    except FileNotFoundError:
        raise RoundsError(f"{path}: not found") from None
    except records.RecordError as e:
        raise RoundsError(str(e)) from None
    except P.YamlRefusal as e:
        if e.message.startswith("given twice"):
            raise RoundsError(f"{path}:{e.line}: round {e.key[:80]!r} {e.message}: a kept "
                              f"round has one entry") from None
        raise RoundsError(str(e)) from None
    if not isinstance(data, dict) or not data:
        raise RoundsError(f"{path}: must be a mapping of round names to entries")
    out = {}
    for name, entry in data.items():
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise RoundsError(f"{path}: round name {str(name)[:80]!r} is not a plain name "
                              f"(letters, digits, '-', '_')")
        if name.lower() in P.RESERVED_ROUNDS:
            raise RoundsError(f"{path}: round name {name!r} is reserved (docs/rounds/"
                              f"README.md and index.yaml are not rounds)")
        if not isinstance(entry, dict) or set(entry) != _FIELDS:
            got = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
            raise RoundsError(f"{path}: {name}: needs exactly the keys {sorted(_FIELDS)}, got {got}")
        c = entry["commit"]
        if not isinstance(c, str) or not _HEX40.match(c):
            raise RoundsError(f"{path}: {name}.commit: must be 40 lower-case hex digits, "
                              f"got {str(c)[:60]!r}")
        if not isinstance(entry["about"], str) or not entry["about"].strip():
            raise RoundsError(f"{path}: {name}.about: must be a non-empty line")
        twin = next((n for n in out if n.lower() == name.lower()), None)
        if twin is not None:
            raise RoundsError(f"{path}: round {name!r} and round {twin!r} differ only in case "
                              f"(docs/rounds/<round>.md would be one file on a case-blind "
                              f"file system): a kept round has one name")
        out[name] = {"commit": c, "about": entry["about"].strip()}
    return out


def rev(root, name: str, path: str = INDEX) -> str:
    """The commit of the kept round ``name``.

    Raises:
      RoundsError: ``name`` is not in the index (the message lists the kept names).
    """
    idx = load_index(root, path)
    if name not in idx:
        raise RoundsError(f"{str(name)[:80]!r} is not a kept round in {path} "
                          f"(kept: {', '.join(idx)})")
    return idx[name]["commit"]


def _round_at(root, commit: str) -> str | None:
    text = _git(root, "show", f"{commit}:params.yaml", check=False)
    if not text:
        return None
    try:
        p = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    return p.get("round") if isinstance(p, dict) else None


def latest(root, name: str) -> str | None:
    """The rule: the newest commit in HEAD's history (first parents and merged branches,
    ``git log`` order) that changed ``metrics/summary.json`` while its ``params.yaml``
    named ``name``; None when there is none."""
    for c in _git(root, "log", "--format=%H", "HEAD", "--", SUMMARY).split():
        if _round_at(root, c) == name:
            return c
    return None


def _store_at(root, commit: str) -> str | None:
    """The default DVC remote of ``commit`` as a path inside the repository (POSIX,
    relative to the root), read from that commit's ``.dvc/config``; None when it names no
    remote, a URL, or a directory outside the repository."""
    cfg = configparser.ConfigParser()
    try:
        cfg.read_string(_git(root, "show", f"{commit}:.dvc/config", check=False))
    except configparser.Error:
        return None
    name = cfg.get("core", "remote", fallback=None)
    secs = [s for s in (f'remote "{name}"', f"'remote \"{name}\"'") if cfg.has_section(s)]
    if name is None or not secs:
        return None
    url = cfg.get(secs[0], "url", fallback="")
    if not url or "://" in url or os.path.isabs(url):
        return None
    rel = posixpath.normpath(posixpath.join(".dvc", url))
    return None if rel == ".." or rel.startswith("../") else rel


def _out_problems(root, commit: str) -> list[str]:
    """Outputs of ``dvc.lock`` at ``commit`` that neither git nor that commit's store holds."""
    text = _git(root, "show", f"{commit}:dvc.lock", check=False)
    if not text:
        return ["no dvc.lock in the commit"]
    lock = yaml.safe_load(text) or {}
    store = _store_at(root, commit)
    held = set()
    if store is not None:
        prefix = f"{store}/files/md5/"
        held = {p[len(prefix):] for p in _git(root, "ls-tree", "-r", "--name-only", commit,
                                              "--", store).splitlines() if p.startswith(prefix)}

    def key(md5):
        return f"{md5[:2]}/{md5[2:]}"
    bad = []
    for stage, st in (lock.get("stages") or {}).items():
        for out in st.get("outs") or []:
            path, md5 = out["path"], out.get("md5")
            if _exists(root, f"{commit}:{path}"):
                continue   # git-tracked output (cache: false)
            if md5 is None:
                bad.append(f"{stage}: {path}: no md5 in dvc.lock")
            elif store is None:
                bad.append(f"{stage}: {path}: the default DVC remote is not a directory "
                           f"inside the repository")
            elif key(md5) not in held:
                bad.append(f"{stage}: {path}: {md5} not in the store")
            elif md5.endswith(".dir"):
                listing = json.loads(_git(root, "show", f"{commit}:{store}/files/md5/{key(md5)}"))
                missing = [e["relpath"] for e in listing if key(e["md5"]) not in held]
                if missing:
                    bad.append(f"{stage}: {path}: {len(missing)} file(s) not in the store, "
                               f"first {missing[0]}")
    return bad


def check(root, names=None, path: str = INDEX) -> list[str]:
    """Problems of the index entries (all, or ``names``), one line each; [] when none.

    Raises:
      RoundsError: the index is malformed or a name is not in it.
    """
    idx = load_index(root, path)
    for n in names or []:
        rev(root, n, path)
    problems = []
    for name, e in idx.items():
        if names and name not in names:
            continue
        c = e["commit"]
        where = f"{name} ({c[:12]})"
        if not _exists(root, f"{c}^{{commit}}"):
            problems.append(f"{where}: no such commit in this repository")
            continue
        if subprocess.run(["git", "merge-base", "--is-ancestor", c, "HEAD"], cwd=root,
                          capture_output=True).returncode != 0:
            problems.append(f"{where}: not in HEAD's history (after a rebase: "
                            f"python -m dreamer_parity.rounds pin {name})")
        r = _round_at(root, c)
        if r != name:
            problems.append(f"{where}: params.yaml there names round {r!r}")
        if not _exists(root, f"{c}:docs/rounds/{name}.md"):
            problems.append(f"{where}: no docs/rounds/{name}.md (pre-registration) in the commit")
        problems += [f"{where}: {p}" for p in _out_problems(root, c)]
        tag = _git(root, "rev-parse", "-q", "--verify", f"refs/tags/{name}^{{commit}}", check=False)
        if tag and tag != c:
            problems.append(f"{where}: tag {name} points at {tag[:12]} (make round-tags FORCE=1)")
        new = latest(root, name)
        if new and new != c and _git(root, "rev-parse", f"{new}:{SUMMARY}", check=False) != \
                _git(root, "rev-parse", f"{c}:{SUMMARY}", check=False):
            problems.append(f"{where}: newer metrics for this round at {new[:12]} "
                            f"(python -m dreamer_parity.rounds pin {name})")
    return problems


def make_tags(root, force: bool = False, path: str = INDEX,
              available: bool = False) -> list[str]:
    """Create a lightweight git tag per index entry; returns one line per tag.

    Args:
      available: tag only the entries whose commit this clone holds, and pass over the
        others (a clone without the history; ``make venv``), instead of failing on them.

    Raises:
      RoundsError: a tag of that name points elsewhere and ``force`` is False, or git fails.
    """
    lines = []
    for name, e in load_index(root, path).items():
        if available and not _exists(root, f"{e['commit']}^{{commit}}"):
            continue
        cur = _git(root, "rev-parse", "-q", "--verify", f"refs/tags/{name}^{{commit}}", check=False)
        if cur == e["commit"]:
            lines.append(f"{name}: tag already at {cur[:12]}")
            continue
        if cur and not force:
            raise RoundsError(f"tag {name} points at {cur[:12]}, the index at {e['commit'][:12]} "
                              f"(FORCE=1 moves it)")
        _git(root, "tag", *(["-f"] if cur else []), name, e["commit"])
        lines.append(f"{name}: tag {'moved to' if cur else 'made at'} {e['commit'][:12]}")
    return lines


def pin(root, name: str, path: str = INDEX) -> str:
    """Set ``name``'s commit in the index to :func:`latest` (the file rewritten in place,
    comments kept, atomically); returns the commit.

    Raises:
      RoundsError: ``name`` is not in the index, or no commit satisfies the rule.
    """
    old = rev(root, name, path)
    new = latest(root, name)
    if new is None:
        raise RoundsError(f"{name}: no commit in HEAD's history changed {SUMMARY} with "
                          f"params.yaml round {name}")
    p = Path(root) / path
    try:
        text = records.read_text(p, path)      # the guarded reader, as load_index reads it
    except records.RecordError as e:
        raise RoundsError(str(e)) from None
    pat = re.compile(rf"(^{re.escape(name)}:\s*\n(?:[ \t]+.*\n|\s*\n|#.*\n)*?[ \t]+commit:\s*"
                     rf"[\'\"]?){old}", re.M)
    text, n = pat.subn(lambda m: m.group(1) + new, text, count=1)
    if n != 1:
        raise RoundsError(f"{path}: {name}: its commit line was not found to rewrite")
    tmp = p.with_name(f"{p.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, p)
    load_index(root, path)
    return new


def check_args(a) -> None:
    """The command's arguments before anything is read: ``--index`` a relative path
    inside the repository ending in ``.yaml`` (no ``..``), every round name a plain name
    (:data:`NAME_RE`).

    Raises:
      RoundsError: one line naming the argument.
    """
    idx = a.index
    if (not idx or len(idx) > 200 or idx.startswith(("/", "~")) or ".." in idx.split("/")
            or "\\" in idx or any(ord(c) < 32 for c in idx) or not idx.endswith(".yaml")):
        raise RoundsError(f"--index {idx[:80]!r}: a .yaml file relative to the repository "
                          f"root, without '..'")
    names = [a.name] if getattr(a, "name", None) is not None else list(getattr(a, "names", []))
    bad = [n for n in names if not NAME_RE.match(n)]
    if bad:
        raise RoundsError(f"round name {bad[0][:80]!r}: not a plain name (letters, digits, "
                          f"'-', '_'; at most 64)")

_TABLE_HEAD = ("round", "decode", "stat", "n c/r", "cand", "ref", "diff", "90% interval",
               "Welch p", "gate", "reading")


def table(root, path: str = INDEX) -> list[str]:
    """Every kept round's headline numbers, one line each after a header line (at most
    120 characters a line; numbers in evaluation-return units to one decimal, p to three;
    ``-`` where the round has no value, e.g. no Welch test with one seed a side).

    Raises:
      RoundsError: the index is malformed, or an entry's commit lacks
      ``metrics/summary.json`` or ``params.yaml`` (one line naming the round).
    """
    from dreamer_parity.analysis.metrics_out import headline

    def num(v, fmt):
        return "-" if v is None else format(v, fmt)
    rows = [_TABLE_HEAD]
    for name, e in load_index(root, path).items():
        text = _git(root, "show", f"{e['commit']}:{SUMMARY}", check=False)
        ptext = _git(root, "show", f"{e['commit']}:params.yaml", check=False)
        if not text or not ptext:
            raise RoundsError(f"{name} ({e['commit'][:12]}): no {SUMMARY} or params.yaml "
                              f"in the commit")
        h = headline(json.loads(text))
        decode = (yaml.safe_load(ptext) or {}).get("decode", "-")
        ci = ("-" if h["ci90.lo"] is None else
              f"[{h['ci90.lo']:.1f}, {h['ci90.hi']:.1f}]")
        rows.append((name, str(decode), h["statistic"],
                     f"{h['candidate.n']}/{h['reference.n']}", num(h["candidate.mean"], ".1f"),
                     num(h["reference.mean"], ".1f"), num(h["diff"], "+.1f"), ci,
                     num(h["welch_p"], ".3f"), h["gate"], h["reading"] or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(_TABLE_HEAD))]
    right = {3, 4, 5, 6, 8}
    return [" ".join(c.rjust(w) if i in right else c.ljust(w)
                      for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in rows]

#: What a round's ``dvc repro`` changes in git-tracked files (``results/``: the report and the
#: ``.gitignore`` files DVC writes for outputs), restored by
#: :func:`back` (the git-tracked part; ``dvc pull`` restores the cached outputs).
ROUND_FILES = ("params.yaml", "dvc.lock", "metrics", "results")


def round_params(root, name: str, path: str = INDEX) -> tuple[str, dict, list[str]]:
    """The kept round ``name``'s parameters as HEAD's schema reads them.

    Returns:
      ``(commit, raw, filled)``: the round's commit, its ``params.yaml`` parsed and
      migrated (:func:`dreamer_parity.params.migrate`; nested, unvalidated) and the keys
      the migration filled.

    Raises:
      RoundsError: ``name`` is not a kept round, its commit has no ``params.yaml``, or the
      migrated parameters do not validate (the line names the round and the key).
    """
    from dreamer_parity import params as P

    commit = rev(root, name, path)
    text = _git(root, "show", f"{commit}:params.yaml", check=False)
    if not text:
        raise RoundsError(f"{name}: commit {commit[:12]} holds no params.yaml")
    try:
        raw, filled = P.migrate(P.parse_yaml(text, f"{name}:params.yaml"))
        P.validate(raw, where=f"{name}:params.yaml", complete=True)
    except P.ParamsError as e:
        raise RoundsError(f"{name}: {e}") from None
    return commit, raw, filled


def switch(root, name: str, path: str = INDEX) -> str:
    """Write the kept round ``name``'s migrated ``params.yaml`` into the workspace
    (atomically, :func:`dreamer_parity.records.write_text`), after validating it and
    resolving its sides (:func:`dreamer_parity.sides.resolve`, manifests verified), so that
    a refused switch leaves every file as it was.  Returns a one-line summary.

    A side whose source in the round is ``run`` (it ran here) gets the one directory of
    :data:`dreamer_parity.sides.KEPT_RUNS` holding its runs made with the round's
    parameters (:func:`dreamer_parity.sides.matching_kept_runs`), written into the
    file's header and source.

    Raises:
      RoundsError: see :func:`round_params`; a side of the round ran here (``run``) and
      not exactly one kept-runs directory holds its runs, or its sources do not resolve
      (one line naming the round).
    """
    import yaml

    from dreamer_parity import params as P
    from dreamer_parity import records, sides
    from dreamer_parity.round_spec import Round

    commit, raw, filled = round_params(root, name, path)
    round_ = Round.from_params(P.validate(raw, where=f"{name}:params.yaml", complete=True))
    kept = []
    for side in P.SIDES:
        # seeds that ran here in the round: its runs as kept under data/runs/ (the kept runs
        # made with the round's parameters, sides.matching_kept_runs), or a refusal
        src = raw[side]["source"]
        parts = [{"from": src, "seeds": list(round_.side(side).seeds)}] \
            if isinstance(src, str) else src
        for part in parts:
            if part["from"] != P.SOURCE_RUN:
                continue
            found = sides.matching_kept_runs(round_, side, part["seeds"], root)
            if len(found) != 1:
                raise RoundsError(
                    f"{name}: its {side} side ran here ({side}.source: run) and "
                    f"{'no' if not found else 'more than one'} directory of "
                    f"{sides.KEPT_RUNS}/ holds its runs{': ' + ', '.join(found) if found else ''}"
                    f"; keep them (python -m dreamer_parity.keep), or restore the round with "
                    f"its own code: git checkout {name} && dvc pull")
            part["from"] = found[0]
            kept.append(f"{side}.source {found[0]}")
        raw[side]["source"] = parts[0]["from"] if isinstance(src, str) else parts
    if kept:
        round_ = Round.from_params(P.validate(raw, where=f"{name}:params.yaml", complete=True))
    try:
        sides.resolve(round_, root)
    except (sides.SideError, P.ParamsError, records.RecordError) as e:
        raise RoundsError(f"{name}: {e}") from None
    head = (f"# The kept round {name} (docs/rounds/index.yaml, commit {commit[:12]}),\n"
            f"# read through dreamer_parity.params.migrate"
            f"{' (filled: ' + ', '.join(filled) + ')' if filled else ''}.\n"
            + "".join(f"# It ran here; its runs as kept: {k}\n" for k in kept)
            + "# Back to the committed round: make head\n")
    body = yaml.safe_dump(raw, sort_keys=False, default_flow_style=False)
    records.write_text(Path(root) / "params.yaml", head + body)
    return (f"params.yaml: round {name} from {commit[:12]}"
            f"{'; filled ' + ', '.join(filled) if filled else ''}"
            f"{'; ' + ', '.join(kept) if kept else ''}; now `dvc repro`")


def back(root) -> str:
    """Restore :data:`ROUND_FILES` from HEAD and remove the files under ``metrics/`` that
    HEAD does not track (a round's window CSVs) and the run outputs ``results/<side>/s<S>``
    of stages HEAD's ``dvc.lock`` does not have (a round with other seeds; they stay in
    the DVC cache), so that ``dvc pull`` then leaves ``dvc status`` clean.  Returns a
    one-line summary.

    Raises:
      RoundsError: git fails (the message is git's).
    """
    import shutil

    root = Path(root)
    _git(root, "checkout", "HEAD", "--", *ROUND_FILES)
    removed = _git(root, "clean", "-fd", "--", "metrics").splitlines()
    # a round with other seeds left results/<side>/s<S> of stages HEAD does not have
    lock = yaml.safe_load((root / "dvc.lock").read_text(encoding="utf-8")) or {}
    outs = {o["path"] for st in (lock.get("stages") or {}).values()
            for o in st.get("outs", []) if isinstance(o, dict) and "path" in o}
    stale = [d for d in sorted((root / "results").glob("*/s*")) if d.is_dir()
             and not any(posixpath.commonpath([d.relative_to(root).as_posix(), o]) == o
                         for o in outs)]
    for d in stale:
        shutil.rmtree(d)
    return (f"{', '.join(ROUND_FILES)}: as at HEAD"
            f"{f'; removed {len(removed)} untracked file(s) under metrics' if removed else ''}"
            f"{f'; removed {len(stale)} run output(s) HEAD has no stage for' if stale else ''}"
            f"; now `dvc pull`")


def main(argv=None) -> int:
    """CLI entry point (see the module docstring); returns the exit status."""
    ap = records.ArgumentParser(prog="python -m dreamer_parity.rounds", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", default=INDEX, help="the index, relative to the repository root")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="the kept rounds")
    sub.add_parser("table", help="every kept round's headline numbers")
    for cmd, text in (("rev", "print a kept round's commit"), ("latest", "the rule's commit"),
                      ("pin", "set a round's commit to the rule's")):
        sub.add_parser(cmd, help=text).add_argument("name")
    sub.add_parser("check", help="verify entries").add_argument("names", nargs="*")
    t = sub.add_parser("tag", help="a git tag per entry")
    t.add_argument("--force", action="store_true")
    t.add_argument("--available", action="store_true",
                   help="only entries whose commit this clone holds (make venv)")
    sub.add_parser("switch", help="a kept round's params.yaml into the workspace"
                   ).add_argument("name")
    sub.add_parser("back", help="the round's files back to HEAD")
    a = ap.parse_args(argv)
    try:
        check_args(a)
        root = repo_root()
        if a.cmd == "rev":
            print(rev(root, a.name, a.index))
        elif a.cmd == "list":
            for name, e in load_index(root, a.index).items():
                tag = _git(root, "rev-parse", "-q", "--verify", f"refs/tags/{name}^{{commit}}",
                           check=False)
                state = "tag ok" if tag == e["commit"] else ("tag differs" if tag else "no tag")
                print(f"{name}\t{e['commit'][:12]}\t{state}\t{e['about']}")
        elif a.cmd == "latest":
            rev(root, a.name, a.index)
            c = latest(root, a.name)
            if c is None:
                raise RoundsError(f"{a.name}: no commit in HEAD's history changed {SUMMARY}")
            print(c)
        elif a.cmd == "table":
            print("\n".join(table(root, a.index)))
        elif a.cmd == "pin":
            print(pin(root, a.name, a.index))
        elif a.cmd == "tag":
            print("\n".join(make_tags(root, a.force, a.index, a.available)))
        elif a.cmd == "switch":
            print(switch(root, a.name, a.index))
        elif a.cmd == "back":
            print(back(root))
        else:
            problems = check(root, a.names, a.index)
            for p in problems:
                print(p)
            if problems:
                return 1
            print(f"{len(a.names) or len(load_index(root, a.index))} kept round(s) ok")
    except RoundsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Checks on the runs of a round (PROTOCOL.md 5.3, adapted to this repository's records).

Each check yields a :class:`Check` with status

* ``PASS``;
* ``FAIL``: the stage fails (``compare`` exits 1 after writing its outputs);
* ``FLAG``: a result that needs attention but is not an error (a seed whose run
  failed; it is scored by ``stats.failed_rule``);
* ``N/A``: the data needed are not in this layout (published runs carry no episodes
  or training metrics), with the reason.  Never counted as a pass.

The evaluation rows themselves are required before any check runs
(:func:`dreamer_parity.analysis.load.check_eval_rows` raises on a mismatch).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from dreamer_parity.params import NUM_ENVS
from dreamer_parity import records, schedule
from dreamer_parity.analysis.runs import Run
from dreamer_parity.round_spec import Round

__all__ = ["Check", "run_checks", "REFERENCE_COMMIT", "MAX_LENGTH", "version_flags",
           "LOCKS", "VERSION_PACKAGES", "config_disagreements"]

#: The reference commit (danijar/dreamerv3).
REFERENCE_COMMIT = "29eb964e2918a3f4db04086f7f51b60388e97f3d"
#: CartPole-v1 episode cap (steps).
MAX_LENGTH = 500


@dataclass(frozen=True)
class Check:
    """One check result: ``name``, ``status`` (PASS/FAIL/FLAG/N/A), ``detail``, and the
    ``side`` / ``seed`` it concerns (None for round-level checks)."""

    name: str
    status: str
    detail: str
    side: str | None = None
    seed: int | None = None

    def line(self) -> str:
        """The check as one report line: ``<status>  [<side> s<seed>: ]<name>: <detail>``."""
        who = f"{self.side} s{self.seed}: " if self.side is not None and self.seed is not None else (
            f"{self.side}: " if self.side else "")
        return f"{self.status:<4}  {who}{self.name}: {self.detail}"


def config_disagreements(round_: Round, run: Run) -> tuple[list[str], list[str]]:
    """:func:`dreamer_parity.records.protocol_disagreements` of a loaded run: the names
    those of the implementation that made it (``run.made_by``), the decode value that of
    the side it stands on."""
    return records.protocol_disagreements(round_, run.side, run.seed, run.run_info,
                                          run.made_by)


def _config_check(round_: Round, run: Run) -> Check:
    wrong, absent = config_disagreements(round_, run)
    if wrong:
        return Check("config equals the round's parameters", "FAIL", "; ".join(wrong), run.side, run.seed)
    if absent and run.source == "published":
        where = "patched at run time: " + run.run_info["patch"] if run.run_info.get("patch") else \
            "not recorded in the published files"
        return Check("config equals the round's parameters", "N/A",
                     f"recorded values match; {', '.join(absent)} {where}", run.side, run.seed)
    if absent:
        return Check("config equals the round's parameters", "FAIL",
                     f"run.json records no {', '.join(absent)} (args or config)", run.side, run.seed)
    return Check("config equals the round's parameters", "PASS",
                 "profile, rows, eval_every, eval_episodes, seed, decode" +
                 (", sampler" if run.made_by == "reference" and run.side == "reference" else ""),
                 run.side, run.seed)


def _provenance_check(run: Run) -> Check:
    prov = (run.run_info or {}).get("provenance") or {}
    name = "provenance"
    if run.made_by == "reference":
        tree = prov.get("reference") or prov.get("reference_checkout") or {}
        commit, dirty = tree.get("commit"), tree.get("dirty")
        if not commit:
            return Check(name, "FAIL", "no reference commit recorded", run.side, run.seed)
        if len(commit) < 7 or not REFERENCE_COMMIT.startswith(commit):
            return Check(name, "FAIL", f"reference at {commit[:12]}, expected 29eb964", run.side, run.seed)
        if dirty is True:
            return Check(name, "FAIL", "reference checkout at 29eb964 is dirty", run.side, run.seed)
        if dirty is None:
            if run.source == "published":
                return Check(name, "PASS", "reference at 29eb964 (launch_info.txt; its dirty flag is "
                             "not recorded there)", run.side, run.seed)
            return Check(name, "FAIL", "reference at 29eb964 but its dirty flag is not recorded",
                         run.side, run.seed)
        return Check(name, "PASS", "reference at 29eb964, clean", run.side, run.seed)
    tree = prov.get("repo") or {}
    commit, dirty = tree.get("commit"), tree.get("dirty")
    if not commit:
        return Check(name, "FAIL", "no candidate commit recorded", run.side, run.seed)
    return Check(name, "PASS", f"candidate at {commit[:12]}, dirty {dirty}", run.side, run.seed)


def _completion_check(round_: Round, run: Run) -> Check:
    name = "completion marker"
    if run.source == "published":
        if run.made_by == "reference" and run.timing and "t_end" in run.timing:
            return Check(name, "PASS", "published: timing.json has t_end (written after the flush step)",
                         run.side, run.seed)
        return Check(name, "N/A", "published layout has no completion marker", run.side, run.seed)
    legacy = (" DONE.json names no run (status only, the older marker): read as its "
              "status, not tied to its run.json" if run.done_legacy else "")
    if run.status == "failed":
        return Check(name, "FLAG", f"run failed ({run.reason}); evaluation points from row "
                     f"{run.failed_row} count as return 0 (failed_rule {round_.stats.failed_rule})"
                     + (";" + legacy if legacy else ""), run.side, run.seed)
    if legacy:
        return Check(name, "FLAG", "DONE.json status ok;" + legacy, run.side, run.seed)
    return Check(name, "PASS", "DONE.json status ok, names this run (side, seed, run.json "
                 "SHA-256)", run.side, run.seed)


@lru_cache(maxsize=16)
def _schedule(rows: tuple) -> list[int]:
    return schedule.updates_at(list(rows))


def _updates_check(run: Run) -> Check:
    rows = run.evals["rows"].tolist()
    want = _schedule(tuple(rows))
    got = run.evals["updates"].tolist()
    bad = [f"{r}: {g} != {w}" for r, g, w in zip(rows, got, want) if g != w]
    if bad:
        return Check("updates equal the schedule", "FAIL", "; ".join(bad[:5]) +
                     (f" (+{len(bad) - 5} more)" if len(bad) > 5 else ""), run.side, run.seed)
    return Check("updates equal the schedule", "PASS",
                 f"{len(rows)} records, {got[-1] if got else 0} updates at row {rows[-1] if rows else 0}",
                 run.side, run.seed)


def _eval_episodes_check(round_: Round, run: Run) -> Check:
    episodes = round_.protocol.eval_episodes
    name = f"every evaluation holds {episodes} episodes"
    n = run.evals["n_episodes"].to_numpy()
    ok = run.evals["status"].to_numpy() == "ok"
    if np.isnan(n).all():
        return Check(name, "N/A", "per-episode evaluation returns not logged (published)", run.side, run.seed)
    bad = [int(r) for r, k, o in zip(run.evals["rows"], n, ok) if o and k != episodes]
    if bad:
        return Check(name, "FAIL", f"rows {bad} hold another number of episodes", run.side, run.seed)
    return Check(name, "PASS", f"{int(ok.sum())} evaluations", run.side, run.seed)


def _episode_checks(round_: Round, run: Run) -> list[Check]:
    if run.episodes is None:
        reason = run.unavailable.get("episodes", "no episode log")
        return [Check("episodes consistent (length == score <= 500, terminal, tiling)", "N/A", reason,
                      run.side, run.seed),
                Check("flush step and unfinished tail", "N/A", reason, run.side, run.seed)]
    ep = run.episodes
    out = []
    problems = []
    if len(ep):
        if ((ep["worker"] < 0) | (ep["worker"] >= NUM_ENVS)).any():
            problems.append(f"worker outside 0..{NUM_ENVS - 1}")
        if (ep["length"].astype(np.float64) != ep["score"]).any():
            i = int(np.nonzero((ep["length"].astype(np.float64) != ep["score"]).to_numpy())[0][0])
            problems.append(f"length != score (episodes.jsonl line {i + 1})")
        bad_len = ((ep["length"] < 1) | (ep["length"] > MAX_LENGTH)).to_numpy()
        if bad_len.any():
            problems.append(f"length outside 1..{MAX_LENGTH} (line {int(np.nonzero(bad_len)[0][0]) + 1})")
        nonterm = ((~ep["terminal"]) & (ep["length"] != MAX_LENGTH)).to_numpy()
        if nonterm.any():
            problems.append(f"non-terminal episode shorter than {MAX_LENGTH} (line "
                            f"{int(np.nonzero(nonterm)[0][0]) + 1})")
    tiling = []
    last_end = {}
    worker = ep["worker"].to_numpy(dtype=np.int64)
    row_last = ep["row_last"].to_numpy(dtype=np.int64)
    length = ep["length"].to_numpy(dtype=np.int64)
    order = np.lexsort((row_last, worker))
    worker, row_last, length = worker[order], row_last[order], length[order]
    bounds = np.searchsorted(worker, np.arange(NUM_ENVS + 1))
    for w in range(NUM_ENVS):
        rl, ln = row_last[bounds[w]:bounds[w + 1]], length[bounds[w]:bounds[w + 1]]
        if len(rl):
            starts = np.concatenate([[-1], rl[:-1]])
            gaps = rl - starts - 1  # rows of the episode beyond its reset row
            if (gaps != ln).any():
                k = int(np.nonzero(gaps != ln)[0][0])
                tiling.append(f"env {w}: episode ending at row {int(rl[k])} has length {int(ln[k])}, "
                              f"spans {int(gaps[k]) + 1} rows")
            last_end[w] = int(rl[-1])
    problems += tiling[:3]
    status = "FAIL" if problems else "PASS"
    out.append(Check("episodes consistent (length == score <= 500, terminal, tiling)", status,
                     "; ".join(problems) if problems else f"{len(ep)} episodes tile each env's rows "
                     "(L + 1 rows each)", run.side, run.seed))

    name = "flush step and unfinished tail"
    if run.status == "failed":
        out.append(Check(name, "N/A", "run failed before its last row", run.side, run.seed))
        return out
    last_row = round_.protocol.rows // NUM_ENVS
    bad = []
    for w in range(NUM_ENVS):
        end = last_end.get(w, -1)
        tail = last_row - end  # rows after the env's last finished episode, up to row rows/16
        if end > last_row:
            bad.append(f"env {w} has an episode ending at row {end} > {last_row}")
        elif tail > MAX_LENGTH:
            bad.append(f"env {w}: {tail} rows after its last episode end (at most {MAX_LENGTH})")
    flush_n = int((ep["row_last"] == last_row).sum()) if len(ep) else 0
    detail = f"every env's last episode ends at or before row {last_row}; {flush_n} end at it"
    if run.timing and "flush_episodes" in run.timing:
        if run.timing["flush_episodes"] != flush_n:
            bad.append(f"timing.json flush_episodes {run.timing['flush_episodes']} != {flush_n} "
                       f"episodes with row_last {last_row}")
        else:
            detail += " (= timing.json flush_episodes)"
    out.append(Check(name, "FAIL" if bad else "PASS", "; ".join(bad[:3]) if bad else detail,
                     run.side, run.seed))
    return out


def run_checks(round_: Round, ref_runs: list[Run], cand_runs: list[Run]) -> list[Check]:
    """All checks of a round, in a stable order (round-level first, then per run).

    Args:
      round_: the round (:func:`dreamer_parity.params.load_round`).
      ref_runs, cand_runs: the loaded runs (rows already checked by ``check_eval_rows``).

    Returns:
      A list of :class:`Check`.
    """
    pts = round_.protocol.points
    out = [Check("same evaluation rows on both sides", "PASS",
                 f"{len(pts)} points {pts[0]}..{pts[-1]} every {round_.protocol.eval_every}")]
    for run in list(ref_runs) + list(cand_runs):
        out.append(_completion_check(round_, run))
        out.append(_config_check(round_, run))
        out.append(_provenance_check(run))
        out.append(_updates_check(run))
        out.append(_eval_episodes_check(round_, run))
        out.extend(_episode_checks(round_, run))
    return out


#: The lock each side's venv is installed from (repository root).
LOCKS = {"candidate": "requirements.lock", "reference": "requirements-reference.lock"}
#: Packages whose versions a run records and the round compares.
VERSION_PACKAGES = ("jax", "jaxlib")


def version_flags(ref_runs: list[Run], cand_runs: list[Run], pins: dict | None = None,
                  packages: tuple[str, ...] = VERSION_PACKAGES) -> dict:
    """Which jax / jaxlib versions the runs of a round imported, and whether that needs a flag.

    Args:
      ref_runs, cand_runs: the loaded runs; versions come from run.json
        ``provenance.versions`` (published runs record none).
      pins: ``{side or version set: {package: version}}``; default: the pins of
        :data:`LOCKS` and of the lock of every ``environment`` version set
        (:data:`dreamer_parity.provenance.VERSION_SETS`,
        :func:`dreamer_parity.provenance.read_pins`), absent locks giving no pins.  A run
        is judged against the lock of the ``environment`` set its provenance names
        (``version_set``, checked against that set's own lock: the reference on jax
        0.10.2), else against its maker's.
      packages: the packages compared.

    Returns:
      ``{"status": "PASS" | "FLAG" | "N/A", "detail": str (one line),
      "versions": {side: {"s<seed>": {package: str | None}}},
      "mixed": {side: bool} (runs of one side imported different versions),
      "sides_differ": bool (the two sides imported different versions; by design, as the
      two locks differ, so not a flag by itself), "off_pin": {side: ["s<seed> jax X != pin Y",
      ...]}, "overrides": ["<side> s<seed>[ (version set <name>)]", ...] (runs recorded
      versions_override),
      "unrecorded": ["<side> s<seed>", ...]}``.  FLAG: a side mixes versions, a run departs
      from its side's pin, or a run was started with the override; N/A: no run records
      versions; else PASS.
    """
    from dreamer_parity import provenance
    environments = {k for k, v in provenance.VERSION_SETS.items()
                    if v.get("kind") == "environment"}
    if pins is None:
        pins = {}
        locks = {**LOCKS, **{k: provenance.VERSION_SETS[k]["lock"] for k in environments}}
        for name, lock in locks.items():
            path = provenance.REPO_ROOT / lock
            pins[name] = provenance.read_pins(path) if path.exists() else {}
    out = {"versions": {}, "mixed": {}, "off_pin": {}, "overrides": [], "unrecorded": []}
    seen = {}
    for side, runs in (("reference", ref_runs), ("candidate", cand_runs)):
        out["versions"][side] = {}
        out["off_pin"][side] = []
        seen[side] = set()
        for run in runs:
            prov = (run.run_info or {}).get("provenance") or {}
            versions = prov.get("versions") if isinstance(prov.get("versions"), dict) else {}
            key = f"s{run.seed}"
            if not any(versions.get(p) for p in packages):
                out["unrecorded"].append(f"{side} {key}")
                continue
            v = {p: versions.get(p) for p in packages}
            out["versions"][side][key] = v
            seen[side].add(tuple(v[p] for p in packages))
            if prov.get("versions_override") is True:
                vset = prov.get("version_set")
                out["overrides"].append(f"{side} {key}" + (f" (version set {vset})"
                                                           if isinstance(vset, str) else ""))
            vset = prov.get("version_set")
            lock = (vset if vset in environments and prov.get("versions_override") is not True
                    else run.made_by)    # the lock its environment was checked against
            for p in packages:
                want = (pins.get(lock) or {}).get(p)
                if want is not None and v[p] != want:
                    out["off_pin"][side].append(f"{key} {p} {v[p]} != pin {want}")
        out["mixed"][side] = len(seen[side]) > 1
    out["sides_differ"] = bool(seen["reference"] and seen["candidate"]
                               and seen["reference"] != seen["candidate"])
    problems = [f"{side} runs imported different versions "
                f"({'; '.join(sorted(' '.join(map(str, t)) for t in seen[side]))})"
                for side in ("reference", "candidate") if out["mixed"][side]]
    problems += [f"{side} {x}" for side in ("reference", "candidate") for x in out["off_pin"][side]]
    if out["overrides"]:
        problems.append(f"started with DREAMER_PARITY_ALLOW_VERSIONS: "
                        f"{', '.join(out['overrides'])}")
    if problems:
        out["status"], out["detail"] = "FLAG", "; ".join(problems)
    elif not any(seen.values()):
        out["status"], out["detail"] = "N/A", "no run records its jax/jaxlib versions (published)"
    else:
        per_side = [f"{side} " + ", ".join(f"{p} {v}" for p, v in zip(packages, next(iter(seen[side]))))
                    for side in ("reference", "candidate") if seen[side]]
        out["status"], out["detail"] = "PASS", "; ".join(per_side) + " (each side at its pins)"
    return out

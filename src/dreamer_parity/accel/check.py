"""The accelerator check's parent process: the phases in order, each in a child process
(:mod:`dreamer_parity.accel.phases`), inside a budget of wall seconds; ``accel_check.json``
rewritten (atomically) after every phase.

The plan (:func:`plan_phases`): the probe; per seed count of ``--seeds`` the step and the
loop (and the 1-seed comparison on the device); the device's comparisons at the other matmul
precisions; then counts growing by ``--grow`` while every phase of the last count ran, up to
``--max-seeds``.  The CPU side of the comparison runs alongside on the upper half of the
cores, or after the first count.  A phase still running when the budget ends is stopped, one
that does not fit is skipped; either is recorded with its reason.  Standard library and the
package only.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from dreamer_parity import provenance, records
from dreamer_parity.accel import outcome

REPO = provenance.REPO_ROOT
#: Where ``dreamer_parity`` is imported from: first on the children's ``$PYTHONPATH``.
SRC = Path(__file__).resolve().parents[2]
JSON_NAME = "accel_check.json"
RESERVE_S = 3.0            # kept back at the end for the last write and the table
MIN_PHASE_S = 5.0          # no child is started with less than this left
#: The settings recorded in ``accel_check.json`` (attributes of the parsed options).
SETTINGS = ("platform", "profile", "agent", "seeds", "parts", "grow", "max_seeds",
            "step_updates", "loop_steps", "loop_chunks", "rows", "compare_updates",
            "compare_precisions", "cpu_compare", "versions", "mem_fraction", "precision",
            "seed_batch", "twohot_index", "head_rows")


def plan_phases(a) -> list[dict]:
    """The planned phases of the options ``a`` (:mod:`dreamer_parity.accel.options`) in
    order, each ``{"name", "kind", "side", "seeds", ...}``: probe; per count of ``a.seeds``
    step and loop (and the 1-seed compare on the device, then the CPU side when
    ``a.cpu_compare`` is ``after``); the device's compares at the other precisions."""
    out = [{"name": "probe", "kind": "probe", "side": "device"}]
    compare_done = False
    for i, n in enumerate(a.seeds):
        if "step" in a.parts or (n == 1 and a.compare_updates):
            out.append({"name": f"step-{n}", "kind": "step", "side": "device", "seeds": n,
                        "compare": "default" if (n == 1 and a.compare_updates) else None,
                        "timing": "step" in a.parts})
            compare_done |= n == 1 and bool(a.compare_updates)
        if "loop" in a.parts:
            out.append({"name": f"loop-{n}", "kind": "loop", "side": "device", "seeds": n})
        if i == 0 and a.compare_updates and a.cpu_compare == "after":
            out.append(cpu_compare_phase())
    if a.compare_updates:
        out += [{"name": f"compare-{p}", "kind": "step", "side": "device", "seeds": 1,
                 "compare": p, "timing": True} for p in a.compare_precisions
                if p != "default" or not compare_done]
    return out


def cpu_compare_phase() -> dict:
    """The CPU side of the comparison: one seed's train step at the default precision."""
    return {"name": "compare-cpu", "kind": "step", "side": "cpu", "seeds": 1,
            "compare": "default"}


def phase_spec(a, ph: dict, cpus=None) -> dict:
    """The JSON-ready spec of the phase ``ph`` under the options ``a`` (what its child
    reads, :mod:`dreamer_parity.accel.phases`), run on the CPU numbers ``cpus`` (None: any).
    The device side gets ``a``'s precision, seed batch, two-hot form and head rows; the CPU
    side the defaults; a step phase its timed and compared update counts."""
    dev = ph["side"] == "device"
    spec = {"kind": ph["kind"], "profile": a.profile, "agent": a.agent,
            "seeds": ph.get("seeds", 1), "batch": 16, "length": 65, "rows": a.rows,
            "loop_steps": a.loop_steps, "loop_chunks": a.loop_chunks, "cpus": cpus,
            "precision": a.precision if dev else "default",
            "seed_batch": a.seed_batch_value if dev else "auto",
            "twohot_index": a.twohot_index if dev else "auto",
            "head_rows": a.head_rows if dev else None}
    if ph["kind"] == "step":
        spec.update(updates=0 if ph.get("timing") is False else a.step_updates,
                    compare_updates=a.compare_updates if ph.get("compare") else 0,
                    precision=ph.get("compare") or spec["precision"])
    return spec


def phase_env(a, side: str) -> dict:
    """The environment of a child on ``side`` (``device``: ``a.platform``; ``cpu``): this
    process's, with :data:`SRC` first on ``$PYTHONPATH`` and ``JAX_PLATFORMS`` set."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(SRC)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["JAX_PLATFORMS"] = a.platform if side == "device" else "cpu"
    env.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", a.mem_fraction)
    return env


def tree_digest(paths) -> str:
    """sha256 (hex) over the relative paths and bytes of the ``.py`` files under ``paths``
    (relative to the repository): the code that ran, where no git is at hand."""
    h = hashlib.sha256()
    files = []
    for p in paths:
        p = REPO / p
        files += [p] if p.is_file() else list(p.rglob("*.py"))
    for f in sorted(files):
        h.update(f.relative_to(REPO).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def argv_recorded(argv: list[str]) -> list[str]:
    """The command line ``argv`` with the value of ``--out`` written as ``<out>``."""
    out, skip = [], False
    for x in argv:
        if skip:
            out.append("<out>")
            skip = False
        elif x == "--out":
            out.append(x)
            skip = True
        else:
            out.append("--out=<out>" if x.startswith("--out=") else x)
    return out


def _no_paths(text: str, tmp: Path) -> str:
    """``text`` with the repository, the temporary directory, the interpreter's prefix and
    the home directory written as ``<repo>``, ``<tmp>``, ``<python>``, ``~``."""
    for path, name in ((REPO, "<repo>"), (tmp, "<tmp>"), (Path(sys.prefix), "<python>"),
                       (Path(sys.base_prefix), "<python>"), (Path.home(), "~")):
        text = text.replace(str(path), name)
    return text


class Child:
    """A child process of one phase, its output in files under ``tmp`` (no pipe to fill)."""

    def __init__(self, phase: dict, spec: dict, env: dict, tmp: Path):
        self.phase, self.tmp = phase, tmp
        name = phase["name"]
        self.out, self.err = tmp / f"{name}.out", tmp / f"{name}.err"
        self.t0 = time.perf_counter()
        with open(self.out, "w") as o, open(self.err, "w") as e:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "dreamer_parity.accel.phases", json.dumps(spec)],
                stdout=o, stderr=e, env=env, cwd=str(REPO), start_new_session=True)

    def wait(self, deadline: float) -> dict:
        """Wait until the child ends or ``deadline`` (perf_counter); fill ``self.phase``."""
        try:
            self.proc.wait(timeout=max(0.0, deadline - time.perf_counter()))
            stopped = False
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            stopped = True
        ph = self.phase
        ph["seconds"] = time.perf_counter() - self.t0
        ph.update(outcome.classify(self.proc.returncode, self.out.read_text(errors="replace"),
                                   _no_paths(self.err.read_text(errors="replace"), self.tmp),
                                   stopped, ph["seconds"]))
        return ph


class Check:
    """The parent: plans the phases, runs them inside the budget, writes the JSON.

    Args:
      a: the validated options (:mod:`dreamer_parity.accel.options`).
      t_start: ``time.perf_counter()`` at the command's start; the budget counts from it.
      argv: the command line, recorded with ``--out``'s value hidden.
    """

    def __init__(self, a, t_start: float, argv: list[str]):
        self.a, self.t_start = a, t_start
        self.deadline = t_start + a.budget_s - RESERVE_S
        self.out = Path(a.out) / JSON_NAME
        self.res = {"schema": "accel_check/1", "argv": argv_recorded(argv),
                    "date_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "budget_s": a.budget_s, "settings": {k: getattr(a, k) for k in SETTINGS},
                    "phases": []}
        self.res["settings"]["compilation_cache"] = bool(
            os.environ.get("JAX_COMPILATION_CACHE_DIR"))
        self.last = {}   # kind -> seconds of its last finished phase

    def left(self) -> float:
        """Seconds left before the deadline (the budget less the reserve); negative past it."""
        return self.deadline - time.perf_counter()

    def write(self) -> None:
        """Write the results so far, with their summary, to ``<out>/accel_check.json``."""
        self.res["elapsed_s"] = time.perf_counter() - self.t_start
        self.res["summary"] = outcome.summarise(self.res["phases"])
        records.write_json(self.out, self.res)

    def fits(self, ph: dict) -> bool:
        """Whether ``ph`` may start; records it as skipped when not."""
        left, est = self.left(), self.last.get(ph["kind"], 0.0)
        need = max(MIN_PHASE_S, 0.8 * est)
        if left < need:
            ph.update(status="skipped", reason=(
                f"budget: {max(left, 0):.0f} s left" + (
                    f", the last {ph['kind']} phase took {est:.0f} s" if est else "")))
            self.res["phases"].append(ph)
            print(f"accel_check: {ph['name']}: skipped ({ph['reason']})", file=sys.stderr)
            return False
        return True

    def run_phase(self, ph: dict) -> dict:
        """Run phase ``ph`` in a child process when it fits the time left; the phase
        record (status, seconds, result or reason)."""
        if not self.fits(ph):
            return ph
        print(f"accel_check: {ph['name']} ...", file=sys.stderr, flush=True)
        child = Child(ph, phase_spec(self.a, ph), phase_env(self.a, ph["side"]), self.tmp)
        return self.finish(child)

    def finish(self, child: Child) -> dict:
        """Wait for ``child`` until the deadline, record its phase, print one line, write
        the results; the phase record."""
        ph = child.wait(self.deadline)
        self.res["phases"].append(ph)
        if ph["status"] in ("ok", "oom"):
            self.last[ph["kind"]] = ph["seconds"]
        if ph["status"] == "ok" and ph["kind"] == "probe":
            self.res["device"] = ph["result"]
        print(f"accel_check: {ph['name']}: {ph['status']} in {ph['seconds']:.1f} s"
              + (f" ({ph['reason']})" if ph.get("reason") else "") + outcome.brief(ph),
              file=sys.stderr, flush=True)
        self.write()
        return ph

    def collect(self, child: Child | None) -> Child | None:
        """Finish ``child`` (the CPU side run alongside) if it has ended; None then."""
        if child is not None and child.proc.poll() is not None:
            self.finish(child)
            return None
        return child

    def run(self, tmp: Path) -> int:
        """Every phase, the children's output files under ``tmp``.  Returns the exit status:
        0 when every phase ran, was skipped or stopped for the budget (a growing count that
        ran out of memory included), 1 when one failed otherwise."""
        self.tmp = tmp
        a = self.a
        probe = self.run_phase(plan_phases(a)[0])
        if probe["status"] != "ok":
            self.res["stopped_early"] = "the probe did not finish: nothing else was run"
            self.write()
            return 0 if probe["status"] in ("skipped", "stopped") else 1
        cpu_child = None
        if a.compare_updates and a.cpu_compare == "alongside":
            ph = cpu_compare_phase()
            if self.fits(ph):
                cores = sorted(os.sched_getaffinity(0))
                cpus = cores[len(cores) // 2:] if len(cores) >= 4 else None
                ph["cpus"] = len(cpus) if cpus else len(cores)
                print("accel_check: compare-cpu started alongside ...", file=sys.stderr, flush=True)
                cpu_child = Child(ph, phase_spec(a, ph, cpus), phase_env(a, "cpu"), tmp)
        grow_ok, n = True, max(a.seeds)
        for ph in plan_phases(a)[1:]:
            r = self.run_phase(ph)
            if r["name"] in (f"step-{n}", f"loop-{n}") and r.get("timing", True):
                grow_ok &= r["status"] == "ok"
            cpu_child = self.collect(cpu_child)
        while grow_ok and self.left() > MIN_PHASE_S:
            n = max(n + 1, int(round(n * a.grow)))
            if a.max_seeds and n > a.max_seeds:
                break
            for kind in a.parts:
                r = self.run_phase({"name": f"{kind}-{n}", "kind": kind, "side": "device",
                                    "seeds": n, "grown": True})
                grow_ok &= r["status"] == "ok"
                cpu_child = self.collect(cpu_child)
        if cpu_child is not None:
            self.finish(cpu_child)
        self.write()
        failed = [p["name"] for p in self.res["phases"]
                  if p["status"] == "error" or (p["status"] == "oom" and not p.get("grown"))]
        return 1 if failed else 0

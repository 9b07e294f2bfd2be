"""The candidate's seeds on an NVIDIA GPU in one call: set-up, smoke, measure, batch, pack.

On the GPU machine (Python 3.12 with jax 0.11.2 and its CUDA 13 plugin: version set
``gpu-h200``), from the repository root, with ``.gpu-wheels/`` (``make gpu-wheels`` here) and
``.gpu-programs/`` (``make gpu-programs`` here: the run's programs compiled for the H200)
copied there beside the working tree (docs/CANDIDATE.md#gpu)::

    python3 benchmarks/gpu_call.py --out <output dir> --deadline-s 540

The phases, in order; ``<out>/gpu_call.json`` is rewritten (atomically) after each, and each
runs in a child process (one process at a time holds the GPU):

1. ``install``: the wheels of ``.gpu-wheels/`` whose distributions are missing, with ``pip
   --no-index --no-deps`` into a temporary directory (``dreamer_parity.accel.wheelsets``);
   every module the candidate imports must then be importable (exit 2 otherwise).
2. ``probe``: the versions, the jax backend and its devices, the device memory, the GPU model,
   driver and memory (``provenance.gpu``), printed and recorded; then ``programs``: every
   entry of ``--programs`` loaded once on the GPU
   (``python -m dreamer_parity.candidate.runtime.executables check``): ``gpu_call.json``'s
   ``programs`` says, per seed count, whether it loads, in how many seconds, or why not.  The
   runs below load their programs from there where they can and compile them otherwise
   (``run.json`` ``config.programs`` says which).
3. ``smoke``: one seed of the smoke profile (tiny widths, 1,200 rows: seconds after its
   compile, its programs loaded from ``--programs`` where they are there; ``--smoke-set``
   changes it) through ``python -m dreamer_parity.candidate.runtime.run``, then packed with
   ``python -m dreamer_parity.archive pack`` (the archive is checked and thrown away); then
   ``mirror``: the reference heads' mirror-column probe (``dreamer_parity.accel.mirror``) at
   precisions ``default`` and ``highest``, each with GEMM autotuning off
   (``--xla_gpu_autotune_level=0``) and on, within ``mirror.BUDGET_S`` (less when the
   deadline is near; skipped below ``mirror.MIN_BUDGET_S``); ``gpu_call.json``'s ``mirror``
   holds the pairs that differ of 127 (``differ``) and the full results, or the error (the
   call goes on).  The later phases' time is what is left after it.
4. ``measure``: the run's own programs at ``--measure-seeds`` seeds, loaded or compiled,
   timed over ``--measure-chunks`` chunks past the gate (``python -m
   dreamer_parity.accel.rate``: seconds to load or compile, seconds per update,
   seed-updates per second).
5. ``batch``: ``dreamer_parity.accel.deadline.plan_batch`` sizes the batch from that
   measurement so that it finishes inside ``--deadline-s`` (counted from this script's
   start): a seed count whose programs loaded (built from this call's parameters and
   precision) costs its load seconds, any other the
   measured compile, and when the measurement itself loaded its programs (no compile
   measured), only the counts that loaded are taken.  The seeds ``--first-seed`` upward
   (default: the first number above every candidate seed kept under ``data/runs``,
   :func:`dreamer_parity.sides.kept_seeds`; a lower one is refused) then run in one program (``run --deadline-s``, ``--checkpoint deadline``: a seed cut by
   the deadline is checkpointed under ``--runs``, never packed).
6. ``pack``: the finished seeds into ``<out>/candidate-s<first>-s<last>.tar.gz`` with ``python
   -m dreamer_parity.archive pack`` (one archive, at most 16 MiB, checked), to be kept here with
   ``python -m dreamer_parity.keep``.

Every run goes at ``--precision`` (``JAX_DEFAULT_MATMUL_PRECISION``, default ``highest``; the
mirror probe sets its own);
``run.json`` records the precision, ``XLA_FLAGS``, the autotuning level, the GPU model and the
driver (``provenance.collect``: ``backend``, ``gpu``).  ``<out>`` gets ``gpu_call.json`` and the
archive only (the runs, the smoke and the measurement stay under ``--runs``).

Exit status: 0 when every phase ran (a batch that does not fit is recorded and skipped), 1 when
a phase failed, 2 on bad arguments or a missing package, before anything runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from dreamer_parity import provenance, records  # noqa: E402  (standard library only)
from dreamer_parity.accel import mirror, wheelsets  # noqa: E402
from dreamer_parity.accel.deadline import plan_batch, updates_per_seed  # noqa: E402

JSON_NAME = "gpu_call.json"
#: What the pack and the last write need after the batch (seconds).
PACK_RESERVE_S = 20.0
#: The largest archive a call brings back.
ARCHIVE_MAX_BYTES = 16 * 2**20


def _seed_sets(params: dict, seeds: list[int]) -> list[str]:
    """The ``--set`` assignments that make the candidate run ``seeds`` itself: the candidate's
    own seed list where the params name one, else the round's (docs/CANDIDATE.md)."""
    key = "candidate.seeds" if params["candidate"].get("seeds") is not None else "seeds"
    return ["candidate.source=run", f"{key}=[{', '.join(str(s) for s in seeds)}]"]


_PROBE = """
import json, sys
import jax
from dreamer_parity import provenance
devs = jax.devices()
stats = None
try:
    stats = devs[0].memory_stats()
except Exception:
    stats = None
print(json.dumps({"python": sys.version.split()[0], "backend": provenance.backend(),
                  "devices": [d.device_kind for d in devs],
                  "memory_limit_bytes": (stats or {}).get("bytes_limit"),
                  "packages": provenance.package_versions(), "gpu": provenance.gpu()}))
"""


class Call:
    """The phases of one call (module docstring); ``res`` is what ``gpu_call.json`` holds."""

    def __init__(self, a, t0: float):
        self.a, self.t0 = a, t0
        self.out, self.runs = Path(a.out), Path(a.runs)
        self.res = {"date_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "deadline_s": a.deadline_s, "precision": a.precision,
                    "platform": a.platform, "versions": a.versions, "phases": []}

    def left(self) -> float:
        return self.a.deadline_s - (time.perf_counter() - self.t0)

    def write(self) -> None:
        self.res["elapsed_s"] = round(time.perf_counter() - self.t0, 1)
        records.write_json(self.out / JSON_NAME, self.res)

    def env(self) -> dict:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO / "src")] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env["JAX_PLATFORMS"] = self.a.platform
        env["JAX_DEFAULT_MATMUL_PRECISION"] = self.a.precision
        env["PYTHONUNBUFFERED"] = "1"
        if self.a.versions != "none":
            env[provenance.ALLOW_VERSIONS_ENV] = self.a.versions
        return env

    def child(self, name: str, cmd: list[str], timeout: float) -> dict:
        """Run one phase's child; record its status, seconds and last lines."""
        t = time.perf_counter()
        print(f"gpu_call: {name} ...", file=sys.stderr, flush=True)
        try:
            r = subprocess.run(cmd, cwd=REPO, env=self.env(), capture_output=True, text=True,
                               timeout=max(1.0, timeout))
            rc, text = r.returncode, (r.stdout, r.stderr)
        except subprocess.TimeoutExpired as e:
            rc, text = None, (e.stdout or "", e.stderr or "")
            text = tuple(x.decode() if isinstance(x, bytes) else x for x in text)
        ph = {"name": name, "rc": rc, "seconds": round(time.perf_counter() - t, 1),
              "tail": "\n".join((text[0] + text[1]).strip().splitlines()[-8:])}
        self.res["phases"].append(ph)
        self.write()
        ph["_stdout"] = text[0]
        return ph

    def run_cmd(self, params_sets: list[str], out: Path, deadline_s: float | None,
                extra=()) -> list[str]:
        cmd = [sys.executable, "-m", "dreamer_parity.candidate.runtime.run", "--params",
               self.a.params, "--out", str(out), "--work-dir", str(self.runs / "work"), *extra]
        for s in [*self.a.set, *params_sets]:
            cmd += ["--set", s]
        if deadline_s is not None:
            cmd += ["--deadline-s", f"{deadline_s:.0f}", "--checkpoint", "deadline"]
        return cmd

    def executables_arg(self) -> list[str]:
        """``--executables DIR`` when ``--programs`` names a directory, else nothing."""
        d = Path(self.a.programs)
        return ["--executables", str(d.resolve())] if d.is_dir() else []

    def programs(self) -> None:
        """The ``programs`` phase: load every entry of ``--programs`` on the GPU once;
        ``res["programs"]`` holds each entry's result (or why there are none).  A failure
        does not stop the call: the runs compile."""
        d = Path(self.a.programs)
        if not d.is_dir():
            self.res["programs"] = {"none": f"{self.a.programs} is not a directory: every "
                                            f"program is compiled here"}
            self.write()
            return
        ph = self.child("programs", [sys.executable, "-m",
                                     "dreamer_parity.candidate.runtime.executables", "check",
                                     str(d.resolve())], min(self.left(), 300))
        try:
            entries = json.loads(ph.pop("_stdout").strip().splitlines()[-1])["entries"]
        except (IndexError, ValueError, KeyError):
            entries = {}
            self.res["programs"] = {"error": f"exit {ph['rc']}: {ph['tail'][-300:]}"}
        else:
            self.res["programs"] = {"entries": entries}
        ok = {v["seeds"]: v["load_s"] for v in entries.values() if v["ok"]}
        print(f"gpu_call: programs compiled beforehand that load here (seeds: seconds): {ok}",
              file=sys.stderr, flush=True)
        self.write()

    def ready(self, params: dict) -> dict:
        """``{seeds: load seconds}`` of the entries that loaded in the ``programs`` phase and
        were built from ``params`` at this call's precision (the smoke's are not)."""
        from dreamer_parity.candidate.runtime.run import PROGRAM_PARAMS
        want = {**{k: params[k] for k in PROGRAM_PARAMS}, "precision": self.a.precision}
        entries = self.res.get("programs", {}).get("entries", {})
        return {int(v["seeds"]): float(v["load_s"]) for v in entries.values()
                if v["ok"] and v["seeds"] and v.get("settings") == want}

    def pack(self, root: Path, dest: Path, name: str) -> dict:
        ph = self.child(name, [sys.executable, "-m", "dreamer_parity.archive", "pack",
                               str(root), str(dest)], self.left())
        if ph["rc"] == 0 and dest.exists():
            ph["archive_bytes"] = dest.stat().st_size
            if ph["archive_bytes"] > ARCHIVE_MAX_BYTES:
                ph["rc"], ph["reason"] = 1, f"{dest.name} is over 16 MiB"
        return ph

    def run(self) -> int:
        a = self.a
        # probe
        ph = self.child("probe", [sys.executable, "-c", _PROBE], min(self.left(), 300))
        if ph["rc"] != 0:
            return self.fail("probe")
        probe = json.loads(ph.pop("_stdout").strip().splitlines()[-1])
        self.res["probe"] = probe
        g = probe["gpu"]
        print(f"gpu_call: python {probe['python']}, jax {probe['packages'].get('jax')}, "
              f"jaxlib {probe['packages'].get('jaxlib')}, backend "
              f"{(probe['backend'] or {}).get('platform')} {probe['devices']}, memory limit "
              f"{probe['memory_limit_bytes']}; GPUs {g['gpus']}", file=sys.stderr, flush=True)
        self.write()
        self.programs()
        # smoke: one tiny seed, run and packed
        from dreamer_parity import params as paramslib
        smoke_out = self.runs / "smoke"
        ph = self.child("smoke", self.run_cmd(paramslib.one_seed_smoke_sets(a.smoke_set),
                                              smoke_out, None, self.executables_arg()),
                        min(self.left(), a.smoke_timeout_s))
        ph.pop("_stdout", None)
        if ph["rc"] != 0:
            return self.fail("smoke")
        with tempfile.TemporaryDirectory(prefix="gpu-call-smoke-") as tmp:
            ph = self.pack(smoke_out, Path(tmp) / "smoke.tar.gz", "smoke-pack")
            ph.pop("_stdout", None)
        if ph["rc"] != 0:
            return self.fail("smoke-pack")
        self.mirror()
        # measure: the run's own programs at --measure-seeds seeds
        params = paramslib.load(REPO / a.params if not Path(a.params).is_absolute()
                                else a.params, a.set)
        cmd = [sys.executable, "-m", "dreamer_parity.accel.rate", "--params", a.params,
               "--seeds", str(a.measure_seeds), "--timed-chunks", str(a.measure_chunks),
               *(f"--set={x}" for x in a.set), *self.executables_arg()]
        ph = self.child("measure", cmd, self.left() - PACK_RESERVE_S)
        try:
            lines = [x for x in ph.pop("_stdout").splitlines() if x.startswith("RATE ")]
            loop = json.loads(lines[-1][len("RATE "):])
        except (IndexError, ValueError):
            return self.fail("measure", "no rate in the measurement")
        ph["loop"] = loop
        self.write()
        # batch: a count whose programs loaded costs its load time; others a compile, known
        # only when the measurement compiled
        measured_compile = loop["compile_s"] if loop["programs"]["source"] == "compiled" \
            else None
        plan = plan_batch(self.left() - PACK_RESERVE_S, updates_per_seed(params["rows"]),
                          a.measure_seeds, loop["seed_updates_per_s"], measured_compile,
                          a.max_seeds, ready=self.ready(params))
        seeds = list(range(a.first_seed, a.first_seed + plan["seeds"]))
        self.res["plan"] = {**plan, "seed_list": seeds,
                            "updates_per_seed": updates_per_seed(params["rows"])}
        self.write()
        if not seeds:
            self.res["batch"] = "skipped: no seed fits before the deadline"
            self.write()
            return 0
        batch_out = self.runs / "batch"
        ph = self.child("batch", self.run_cmd(_seed_sets(params, seeds), batch_out,
                                              self.left() - PACK_RESERVE_S,
                                              self.executables_arg()), self.left())
        ph.pop("_stdout", None)
        if ph["rc"] not in (0, 3):   # 3: stopped at the deadline, checkpointed
            return self.fail("batch")
        done, cut = finished_seeds(batch_out)
        self.res["finished"], self.res["cut"] = done, cut
        if not done:
            self.write()
            return 0
        dest = self.out / f"candidate-s{done[0]}-s{done[-1]}.tar.gz"
        ph = self.pack(batch_out, dest, "pack")
        ph.pop("_stdout", None)
        if ph["rc"] != 0:
            return self.fail("pack")
        self.write()
        return 0

    def mirror(self) -> None:
        """The smoke's mirror probe (:mod:`dreamer_parity.accel.mirror`): ``res["mirror"]``
        holds its result, or why it did not run; a failure does not stop the call."""
        budget = min(mirror.BUDGET_S, self.left() - PACK_RESERVE_S)
        if budget < mirror.MIN_BUDGET_S:
            self.res["mirror"] = {"skipped": f"{budget:.0f} s left before the deadline"}
            self.write()
            return
        ph = self.child("mirror", [sys.executable, "-m", "dreamer_parity.accel.mirror",
                                   "--platform", self.a.platform, "--budget-s", f"{budget:.0f}"],
                        budget + 30)   # each probe process is killed at its share
        try:
            self.res["mirror"] = json.loads(ph.pop("_stdout").strip().splitlines()[-1])
        except (IndexError, ValueError):
            self.res["mirror"] = {"error": f"exit {ph['rc']}, no result: {ph['tail'][-300:]}"}
        print(f"gpu_call: mirror pairs that differ: {self.res['mirror'].get('differ')}",
              file=sys.stderr, flush=True)
        self.write()

    def fail(self, name: str, why: str | None = None) -> int:
        self.res["failed"] = f"{name}: {why}" if why else name
        self.write()
        print(f"gpu_call: {name} failed{': ' + why if why else ''}", file=sys.stderr)
        return 1


def finished_seeds(root: Path) -> tuple[list[int], list[str]]:
    """The seeds of ``root`` that finished (``archive.finished_runs``) and what was cut."""
    from dreamer_parity import archive
    done, left = archive.finished_runs(root, "candidate")
    return sorted(int(d.name[1:]) for d in done), list(left)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="See the module docstring (docs/CANDIDATE.md#gpu).")
    ap.add_argument("--out", required=True, help="directory for gpu_call.json and the archive")
    ap.add_argument("--runs", default=None, help="directory for the runs, their checkpoints, "
                    "the smoke and the measurement, not inside --out (default: "
                    "${XDG_CACHE_HOME:-~/.cache}/dreamer-parity/gpu-call)")
    ap.add_argument("--deadline-s", type=float, required=True,
                    help="seconds from the start by which the archive is written")
    ap.add_argument("--first-seed", type=int, default=None,
                    help="the batch's first seed (default and least: one above every "
                         "candidate seed kept under data/runs)")
    ap.add_argument("--max-seeds", type=int, default=32, help="the largest batch")
    ap.add_argument("--measure-seeds", type=int, default=8,
                    help="seeds of the measured chunk program")
    ap.add_argument("--measure-chunks", type=int, default=2,
                    help="chunks timed in the measurement, after one untimed")
    ap.add_argument("--programs", default=".gpu-programs",
                    help="the run's programs compiled beforehand (make gpu-programs); "
                         "missing: every program is compiled here")
    ap.add_argument("--smoke-timeout-s", type=float, default=300.0)
    ap.add_argument("--smoke-set", action="append", default=[], metavar="KEY=VALUE",
                    help="change a parameter of the smoke run, after the smoke profile's "
                         "(params.SMOKE) and --set")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="change a parameter of --params for every run (as the runner's --set)")
    ap.add_argument("--platform", default="cuda", help="JAX_PLATFORMS of every phase")
    ap.add_argument("--precision", default="highest", choices=("default", "high", "highest"))
    ap.add_argument("--versions", default="gpu-h200",
                    help="the version set allowed besides requirements.lock ('none': the lock)")
    ap.add_argument("--wheels", default=None, help="wheel directory (default: --versions' "
                    "accel.wheelsets.WHEEL_SETS entry: .gpu-wheels for gpu-h200)")
    return ap


def main(argv=None) -> int:
    """Command line; returns the exit status (module docstring)."""
    t0 = time.perf_counter()
    ap = _parser()
    a = ap.parse_args(argv)
    # everything checked before anything is written or run
    if not 0 < a.deadline_s < 1e6:
        ap.error(f"--deadline-s {a.deadline_s}: must be a positive number of seconds")
    for name in ("first_seed", "max_seeds", "measure_seeds", "measure_chunks"):
        v = getattr(a, name)
        if v is not None and v < (0 if name == "first_seed" else 1):
            ap.error(f"--{name.replace('_', '-')} {v}: must be "
                     f"{'>= 0' if name == 'first_seed' else 'positive'}")
    try:
        a.wheels = a.wheels or wheelsets.wheel_set(a.versions)["dir"]
        mirror.probe_platform(a.platform)
    except ValueError as e:
        ap.error(str(e))
    from dreamer_parity import params as paramslib
    try:
        path = REPO / a.params if not Path(a.params).is_absolute() else a.params
        paramslib.load(path, a.set)
        paramslib.load(path, [*a.set, *paramslib.one_seed_smoke_sets(a.smoke_set)])
    except FileNotFoundError as e:
        ap.error(f"--params: file not found: {e.filename}")
    except paramslib.ParamsError as e:
        ap.error(str(e))
    from dreamer_parity import sides
    try:       # a seed number is used once across platforms (docs/rounds/round3-final.md)
        kept = sides.kept_seeds("candidate", REPO)
    except sides.SideError as e:
        ap.error(str(e))
    free = kept[-1] + 1 if kept else 0
    if a.first_seed is None:
        a.first_seed = free
    elif a.first_seed < free:
        ap.error(f"--first-seed {a.first_seed}: candidate seeds up to {free - 1} are kept under "
                 f"{sides.KEPT_RUNS}; a new seed takes a new number, from {free}")
    out = Path(a.out)
    if out.exists() and not out.is_dir():
        ap.error(f"--out {a.out}: not a directory")
    if a.runs is None:
        base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        a.runs = str(base / "dreamer-parity" / "gpu-call")
    runs = Path(a.runs).resolve()
    if runs == out.resolve() or out.resolve() in runs.parents:
        ap.error(f"--runs {a.runs} must not lie inside --out {a.out} (only the archive goes back)")
    out.mkdir(parents=True, exist_ok=True)
    call = Call(a, t0)
    with tempfile.TemporaryDirectory(prefix="gpu-call-") as tmp:
        call.res["wheels"], why = wheelsets.prepare(REPO / a.wheels, Path(tmp) / "site",
                                                    a.versions)
        if why:
            return _refuse(call, why)
        call.write()
        code = call.run()
    print(f"gpu_call: wrote {out / JSON_NAME}", file=sys.stderr)
    return code


def _refuse(call: Call, why: str) -> int:
    call.res["error"] = why
    call.write()
    print(f"gpu_call: error: {why}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

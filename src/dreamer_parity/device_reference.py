#!/usr/bin/env python3
"""One reference seed on an accelerator's machine in one command, and what that machine needs.

Two machines (``--machine``, :data:`MACHINES`, the one place each is described): ``tpu-v5e``
(the default: one TPU v5e chip, CPython 3.11, jax and jaxlib 0.10.2 preinstalled; the
reference on ``reference.jax: 0.10.2``) and ``gpu-h200`` (one NVIDIA H200, CPython 3.12, jax
0.11.2 with its CUDA 13 plugin, optax, chex, flax, PyYAML preinstalled; ``reference.jax:
0.11.2``).

**Here** (main venv, with network; ``make tpu-reference``, ``make gpu-reference``)::

    python -m dreamer_parity.device_reference [--machine M] --prepare DIR

fills ``DIR`` (the git-ignored ``.tpu-ref/`` or ``.gpu-ref/``) with what machine ``M``
lacks for the reference:

* ``wheels/``: one wheel per package of the machine's reference lock
  (``requirements-reference-jax010.lock``, ``-jax011.lock``) and of PyYAML
  (``requirements.lock``'s version; the pipeline reads params.yaml with it) that the machine's
  image does not hold (:func:`preinstalled`), for its CPython on x86-64 Linux, the oldest
  manylinux tag first;
* ``dreamerv3-29eb964.tar.gz``: the export of the reference checkout
  (``python -m dreamer_parity.reference.setup --export``), which proves its commit without
  git.

**There** (the machine's own ``python3``)::

    PYTHONPATH=src python3 -m dreamer_parity.device_reference [--machine M] --seed S --name NAME --out-dir DIR

in one command, with the prepared folder beside the checkout:

1. installs the wheels into ``--site`` (``site`` in the temporary directory; ``pip --no-index --no-deps
   --target``), put at the end of ``PYTHONPATH`` so that the machine's own jax stays first
   (skipped when that folder already holds them from an earlier seed on the same machine);
2. sets the reference up under ``--root`` (default as ``reference.setup``: the per-user
   cache in ``$HOME``, so its compilation cache serves the next seed on the same machine) from
   the export, with this interpreter as the reference's (``DREAMER_PARITY_REF_INTERPRETER``):
   no venv is made;
3. writes the round's parameters (:func:`device_params`: round 3's protocol, 24,000 rows,
   an evaluation every 400 rows with 10 episodes, decode exact, sampler per_run, and the
   machine's ``reference.jax`` and ``platform``, ``precision: highest``; ``--set KEY=VALUE``
   changes one) and runs the seed through the pipeline's reference stage
   (``python -m dreamer_parity.pipeline --params P reference --seed S --out RUN``);
   ``run.json`` records ``XLA_FLAGS`` (``provenance.xla_flags``), the device kind
   (``environment.device_kind``) and on a GPU its model, driver and autotuning level
   (``provenance.gpu``);
4. on success (``DONE.json`` status ok) writes ``NAME.tar.gz`` into ``--out-dir``
   (:func:`dreamer_parity.archive.pack`: ``reference/s<S>/`` with ``records.jsonl``,
   ``episodes.jsonl``, ``run.json``, ``timing.json`` and ``DONE.json``; no ``params.npz``),
   written under a temporary name and renamed when complete: a command cut before that leaves
   no archive, and an unfinished run never has a ``DONE.json``.  ``NAME.log`` there holds
   this script's output in every case;
5. with ``--with-heads``, also ``NAME.heads.npz`` there, the two-hot heads' output layers
   of the finished run's final parameters (:func:`save_heads`), for a diagnosis only.

Back here: ``python -m dreamer_parity.keep NAME.tar.gz data/runs/<name> --params
params.yaml`` (docs/REFERENCE_RUN.md).

Exit status: 0 archived; 1 the run failed (no archive); 2 bad input or a set-up failure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dreamer_parity import archive  # standard library only
from dreamer_parity import params as P
from dreamer_parity import provenance, records
from dreamer_parity import wheels as wheel_helper  # standard library only
from dreamer_parity.accel import wheelsets
from dreamer_parity.reference import setup as ref_setup

REPO = Path(__file__).resolve().parents[2]
#: The machine's temporary directory: where the wheels and the run go by default.
TMP = Path(tempfile.gettempdir())

#: The machines a seed runs on, each described here alone: ``jax`` (``reference.jax``, whose
#: lock the wheels come from), ``python`` (the CPython of its wheels), ``platform``
#: (``reference.platform``), what its image holds (``preinstalled``: names, at
#: ``image_lock``'s versions; None: the lines of ``image_lock`` without a mark, the image's
#: own packages), ``prepared`` (the prepared folder, relative to the repository) and ``make``
#: (the target that prepares it).  The TPU machine's set was measured there
#: (docs/REFERENCE_RUN.md); the GPU machine's is ``requirements-gpu-cpu312.lock``'s image.
MACHINES = {
    "tpu-v5e": {"jax": "0.10.2", "python": "3.11", "platform": "tpu",
                "preinstalled": ("jax", "jaxlib", "numpy", "scipy", "ml-dtypes", "opt-einsum"),
                "image_lock": "requirements.lock", "prepared": ".tpu-ref", "make": "tpu-reference"},
    "gpu-h200": {"jax": "0.11.2", "python": "3.12", "platform": "gpu", "preinstalled": None,
                 "image_lock": wheelsets.GPU_LOCK, "prepared": ".gpu-ref", "make": "gpu-reference"},
}
DEFAULT_MACHINE = "tpu-v5e"
#: Besides the reference's lock: what the pipeline's own side needs there (params.load), at
#: requirements.lock's version.
ALSO = ("PyYAML",)
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def machine(name: str) -> dict:
    """The :data:`MACHINES` entry of ``name``.

    Raises:
      ValueError: one line naming the machines, for another name.
    """
    if name not in MACHINES:
        raise ValueError(f"--machine: unknown value {name!r}; expected one of "
                         f"{', '.join(MACHINES)}")
    return MACHINES[name]


def preinstalled(name: str = DEFAULT_MACHINE) -> dict[str, str]:
    """``{normalised name: version}`` of what machine ``name``'s image holds that the
    reference or the pipeline may use, at its ``image_lock``'s versions (:data:`MACHINES`).

    Raises:
      ValueError: an unknown machine; RuntimeError: a preinstalled name the image lock does
        not pin.
    """
    m = machine(name)
    lock = REPO / m["image_lock"]
    pins = provenance.read_pins(lock)
    names = (wheelsets.marked_names(lock, "") if m["preinstalled"] is None
             else tuple(provenance.normalise(n) for n in m["preinstalled"]))
    missing = [n for n in names if n not in pins]
    if missing:
        raise RuntimeError(f"{lock.name} pins no version of {', '.join(missing)}")
    return {n: pins[n] for n in names}


def _needed(name: str) -> dict[str, str]:
    """``{normalised name: version}``: the machine's reference lock and :data:`ALSO`."""
    out = dict(ref_setup.read_lock(ref_setup.lock_file(machine(name)["jax"])))
    main = provenance.read_pins(REPO / "requirements.lock")
    for n in map(provenance.normalise, ALSO):
        if n not in main:
            raise RuntimeError(f"requirements.lock pins no version of {n}")
        out[n] = main[n]
    return out


def wanted_wheels(name: str = DEFAULT_MACHINE) -> dict[str, str]:
    """``{name: version}`` of the wheels copied to machine ``name`` (module doc): what the
    reference's lock and :data:`ALSO` need and its image (:func:`preinstalled`) lacks.

    Raises:
      ValueError: an unknown machine; RuntimeError: a lock without a needed pin.
    """
    held = preinstalled(name)
    return dict(sorted((n, v) for n, v in _needed(name).items() if n not in held))


def image_differences(name: str = DEFAULT_MACHINE) -> dict[str, dict[str, str]]:
    """``{name: {"lock": version, "image": version}}``: the packages machine ``name``'s image
    holds at another version than the reference's lock (or requirements.lock, for
    :data:`ALSO`) pins; the machine's own is the one imported there (the wheels go last on
    ``PYTHONPATH``), and the run records it (``run.json`` ``environment.off_lock``)."""
    held, need = preinstalled(name), _needed(name)
    return {n: {"lock": need[n], "image": held[n]} for n in sorted(held)
            if n in need and need[n] != held[n]}


def prepare(folder, source=None, name: str = DEFAULT_MACHINE) -> dict:
    """Fill ``folder`` for machine ``name`` (module doc: the wheels of :func:`wanted_wheels`
    for its CPython, then the export).

    Returns:
      ``{"machine", "wheels": [file names], "wheels_mib", "export_mib" (MiB, 2 decimals),
      "image_differs": image_differences(name)}``.

    Raises:
      ValueError: an unknown machine; RuntimeError: pip's last line;
      reference.setup.SetupError: the export failed.
    """
    folder, m = Path(folder), machine(name)
    wheels = wheel_helper.download(wanted_wheels(name), folder / "wheels",
                                   python_version=m["python"])
    exported = ref_setup.export(folder, source, log=lambda msg: None)
    mib = lambda n: round(n / 2**20, 2)  # noqa: E731
    return {"machine": name, "wheels": [w.name for w in wheels],
            "wheels_mib": mib(sum(w.stat().st_size for w in wheels)),
            "export_mib": mib(exported.stat().st_size), "image_differs": image_differences(name)}


def device_params(seed: int, sets=(), name: str = DEFAULT_MACHINE) -> dict:
    """The parameters of one seed on machine ``name``: round 3's protocol with its
    ``reference.jax`` and ``reference.platform`` (:data:`MACHINES`) and precision
    ``highest``, ``sets`` (``KEY=VALUE``, :func:`dreamer_parity.params.apply_set`) applied,
    validated.  The statistics keys, which the reference stage does not read, are set to the
    smallest valid ones.

    Raises:
      ValueError: an unknown machine.
      ParamsError: a bad value (the one-line message every entry point prints).
    """
    m = machine(name)
    raw = {"round": "device-reference", "profile": "full", "seeds": [seed], "rows": 24000,
           "eval_every": 400, "eval_episodes": 10,
           "reference": {"decode": "exact", "sampler": "per_run", "jax": m["jax"],
                         "platform": m["platform"], "precision": "highest", "source": "run"}}
    for s in sets:
        P.apply_set(raw, s)
    if raw.get("seeds") != [seed]:
        raise P.ParamsError("seeds", f"the device runs seed {seed} alone (--seed)")
    rows = raw.get("rows")
    raw["stats"] = {**raw.get("stats", {}), "s1_rows": [rows], "late_rows": [],
                    "concordance_rows": [rows], "concordance_range": []}
    return P.validate(raw, where="--set")


def archive_run(run_dir, out_dir, name: str) -> Path | None:
    """``out_dir/name.tar.gz`` of a finished reference run (``DONE.json`` status ok, naming
    its ``run.json``), :func:`dreamer_parity.archive.pack`: written under a temporary name
    and renamed when complete.  None (nothing written) for a run without ``DONE.json``, a
    failed one, or one whose files disagree."""
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    try:
        done = records.read_done(run_dir)
        seed = records.read_run_info(run_dir / "run.json")["seed"]
        if done.get("status") != "ok" or not records.done_agrees(run_dir, done, "reference",
                                                                 seed):
            return None
        return archive.pack([run_dir], out_dir / f"{name}.tar.gz", "reference")
    except (records.RecordError, archive.ArchiveError, KeyError):
        return None


#: The two-hot heads' output layers in a reference ``params.npz`` (``--with-heads``).
HEAD_KEYS = tuple(f"agent/{h}/dist/out/{p}" for h in ("rew", "critic", "slowcritic")
                  for p in ("kernel", "bias"))


def save_heads(run_dir, out_dir, name: str) -> Path:
    """``out_dir/name.heads.npz``: the two-hot heads' output layers (:data:`HEAD_KEYS`) of a
    finished run's final parameters (``params.npz``, which the archive leaves out; 0.4 MiB
    of its 7 MiB at the full profile), for ``measurements/2026-12-07-reference-cpu-mirror/twohot_mirror.py``; never kept.
    Written under a temporary name and renamed when complete.

    Raises:
      FileNotFoundError: the run left no ``params.npz``.
      KeyError: a head's key is missing from it (naming the key).
    """
    import numpy as np
    with np.load(Path(run_dir) / "params.npz") as d:
        missing = [k for k in HEAD_KEYS if k not in d.files]
        if missing:
            raise KeyError(f"{run_dir}/params.npz: no {missing[0]}")
        arrays = {k: d[k] for k in HEAD_KEYS}
    target = Path(out_dir) / f"{name}.heads.npz"
    tmp = target.with_name(target.name + ".part")
    with open(tmp, "wb") as f:
        np.savez(f, **arrays)
    os.replace(tmp, target)
    return target


class _Log:
    """Lines to stdout and to ``path``."""

    def __init__(self, path: Path | None):
        self.f = open(path, "a") if path else None

    def __call__(self, msg: str) -> None:
        print(msg, flush=True)
        if self.f:
            self.f.write(msg + "\n")
            self.f.flush()


def _run(cmd, env, log, cwd=REPO) -> int:
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        log(line.rstrip("\n"))
    return proc.wait()


def _install(wheels: Path, site: Path, make: str) -> str:
    files = sorted(wheels.glob("*.whl")) if wheels.is_dir() else []
    return (wheel_helper.install(files, site) if files
            else f"no wheels in {wheels} (`make {make}` prepares them)")


def _log_run(run_dir: Path, log) -> None:
    """One log line each for the finished run's GPU (when ``run.json`` names one), backend,
    precision, shims and timing (``timing.json``); nothing when either file is unreadable."""
    try:
        timing = records.read_json(run_dir / "timing.json")
        run_json = records.read_json(run_dir / "run.json")
        env_rec = run_json.get("environment", {})
        gpus = ((run_json.get("provenance") or {}).get("gpu") or {}).get("gpus") or []
        if gpus:
            log(f"[device] GPU {gpus[0].get('name')}, driver {gpus[0].get('driver')}")
        log(f"[device] {env_rec.get('backend')} ({env_rec.get('device_kind')}), precision "
            f"{env_rec.get('matmul_precision')}, shims {env_rec.get('shims')}; build and compile "
            f"{timing.get('build_compile_s', 0):.1f} s, {timing.get('updates')} updates at "
            f"{1000 * (timing.get('s_per_update_loop') or 0):.1f} ms, evaluations "
            f"{timing.get('eval_s_total', 0):.1f} s, loop {timing.get('loop_s', 0):.1f} s")
    except (records.RecordError, TypeError, ValueError):
        pass


def _parser() -> argparse.ArgumentParser:
    """The command line of :func:`main`."""
    ap = argparse.ArgumentParser(prog="python -m dreamer_parity.device_reference", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--machine", choices=tuple(MACHINES), default=DEFAULT_MACHINE,
                    help=f"the machine prepared for or run on (default {DEFAULT_MACHINE})")
    ap.add_argument("--prepare", metavar="DIR", default=None,
                    help="here: fill DIR with the wheels and the export, and exit")
    ap.add_argument("--source", default=None,
                    help="--prepare: a local git directory holding the reference commit "
                         "(default: $DREAMER_PARITY_REF_SOURCE or the set-up checkout)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--name", default=None, help="the archive's name: NAME.tar.gz in --out-dir")
    ap.add_argument("--prepared", default=None,
                    help="the prepared folder (wheels/ and the export; default the machine's: "
                         + ", ".join(f"{m['prepared']} for {n}" for n, m in MACHINES.items()) + ")")
    ap.add_argument("--site", default=str(TMP / "site"),
                    help="where the wheels are installed (default: site in the temporary directory)")
    ap.add_argument("--root", default=None, help="reference set-up root (default as "
                                                 "python -m dreamer_parity.reference.setup)")
    ap.add_argument("--work", default=None,
                    help="where the run is made (default: device-reference/NAME in the "
                         "temporary directory)")
    ap.add_argument("--out-dir", default=None,
                    help="where the archive and the log go (made if missing)")
    ap.add_argument("--interpreter", default=sys.executable,
                    help="the reference's interpreter (default this one)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="change a parameter (e.g. reference.platform=cpu, profile=smoke)")
    ap.add_argument("--with-heads", action="store_true",
                    help="also write the two-hot heads' output layers of the final "
                         "parameters as NAME.heads.npz in --out-dir (for measurements/2026-12-07-reference-cpu-mirror/twohot_mirror.py)")
    return ap


def main(argv=None) -> int:
    a = _parser().parse_args(argv)
    if a.prepare:
        try:
            got = prepare(a.prepare, a.source, a.machine)
        except (RuntimeError, ref_setup.SetupError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        differs = ", ".join(f"{n} {v['image']} (lock {v['lock']})"
                            for n, v in got["image_differs"].items()) or "none"
        print(f"{a.prepare}: {a.machine}: {len(got['wheels'])} wheels, {got['wheels_mib']} MiB; "
              f"export {got['export_mib']} MiB; the image's versions that differ from the "
              f"lock: {differs}; copy {Path(a.prepare).name}/ with the working tree")
        return 0
    if a.seed is None or a.name is None or not a.out_dir:
        print("error: --seed, --name and --out-dir are needed", file=sys.stderr)
        return 2
    if a.seed < 0 or not NAME_PATTERN.fullmatch(a.name):
        print(f"error: --seed must be non-negative and --name letters, digits, '.', '_', '-' "
              f"(got {a.seed}, {a.name!r})", file=sys.stderr)
        return 2
    try:
        p = device_params(a.seed, a.set, a.machine)
    except P.ParamsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    log = _Log(out_dir / f"{a.name}.log")
    work = Path(a.work) if a.work else TMP / "device-reference" / a.name
    run_dir = records.run_dir(work / "results", "reference", a.seed)
    prepared = Path(a.prepared) if a.prepared else REPO / MACHINES[a.machine]["prepared"]
    site = Path(a.site)
    t0 = time.time()
    env = dict(os.environ)
    try:
        did = _install(prepared / "wheels", site, MACHINES[a.machine]["make"])
        log(f"[device] {did} ({time.time() - t0:.1f} s)")
    except RuntimeError as e:
        log(f"[device] error: {e}")
        return 2
    path = [str(REPO / "src")] + [x for x in env.get("PYTHONPATH", "").split(os.pathsep) if x]
    if (prepared / "wheels").is_dir():
        path.append(str(site))          # last: the machine's own jax stays first
    env.update({"PYTHONPATH": os.pathsep.join(path), "PYTHONUNBUFFERED": "1",
                "DREAMER_PARITY_REF_SOURCE": str(prepared),
                ref_setup.INTERPRETER_ENV: a.interpreter})
    if a.root:
        env["DREAMER_PARITY_REF_ROOT"] = a.root
    t1 = time.time()
    code = _run([sys.executable, "-m", "dreamer_parity.reference.setup", "--jax",
                 p["reference"]["jax"]], env, log)
    log(f"[device] set-up exit {code} ({time.time() - t1:.1f} s)")
    if code != 0:
        return 2
    work.mkdir(parents=True, exist_ok=True)
    pfile = work / "params.yaml"
    pfile.write_text(json.dumps(p, indent=1) + "\n")   # JSON is YAML
    r = p["reference"]
    log(f"[device] {a.machine}: XLA_FLAGS {os.environ.get('XLA_FLAGS', '')!r}")
    log(f"[device] seed {a.seed}: profile {p['profile']}, rows {p['rows']}, eval every "
        f"{p['eval_every']} ({p['eval_episodes']} episodes), decode {r['decode']}, sampler "
        f"{r['sampler']}, jax {r['jax']}, platform {r['platform']}, precision {r['precision']}")
    t2 = time.time()
    if run_dir.exists() and (run_dir / records.DONE).exists():
        log(f"[device] {run_dir} already holds a finished run: archived as it is")
        code = 0
    else:
        # the pipeline writes inside its working directory only: it runs in the work folder
        code = _run([sys.executable, "-m", "dreamer_parity.pipeline", "--params", str(pfile),
                     "reference", "--seed", str(a.seed),
                     "--out", run_dir.relative_to(work).as_posix()], env, log, cwd=work)
    log(f"[device] run exit {code} ({time.time() - t2:.1f} s)")
    target = archive_run(run_dir, out_dir, a.name) if code == 0 else None
    if target is None:
        log(f"[device] no archive: the run did not finish ok")
        return 1
    _log_run(run_dir, log)
    log(f"[device] archived {target.name} ({target.stat().st_size / 2**10:.0f} KiB) "
        f"in {time.time() - t0:.1f} s")
    if a.with_heads:
        try:
            got = save_heads(run_dir, out_dir, a.name)
        except (OSError, KeyError, ValueError) as e:
            log(f"[device] error: --with-heads: {e}")
            return 1
        log(f"[device] two-hot heads {got.name} ({got.stat().st_size / 2**10:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Launch one reference seed from the main venv.

Command line::

    python -m dreamer_parity.reference.launch --params params.yaml --seed S \\
        --out results/<round>/reference/s<S> [--root DIR]

Steps, each failing with one line (exit status 2) before any compute:

1. read the round from ``--params`` (:func:`dreamer_parity.params.load_round`) and the
   seed (a non-negative integer) (which seeds run here is the round's,
   :meth:`dreamer_parity.round_spec.RoundSide.runs_here`);
2. check the set-up of the environment ``reference.jax`` names
   (:func:`dreamer_parity.reference.setup.check_setup`): the checkout at 29eb964, clean,
   and the venv matching its lock (``requirements-reference.lock``, or
   ``requirements-reference-jax010.lock`` for 0.10.2); else name the set-up command;
   jax, jaxlib and numpy of the venv first, one line naming the package, installed and
   pinned version (:func:`dreamer_parity.provenance.check_pins`, for 0.10.2 against the
   version set ``reference-jax010``'s own lock; with ``DREAMER_PARITY_ALLOW_VERSIONS=1``
   the launch goes on and the run records the override);
3. the output directory: refuse one that holds a completed run (``DONE.json``), never
   resuming or overwriting it; remove an incomplete one (a killed run) and say so, because
   a reference run cannot be resumed faithfully (deviation D6: no checkpoint of the
   ratio state, the online queue or the sampler RNG), so the seed starts from scratch;
4. run :mod:`dreamer_parity.reference.runner` under the reference venv's python with the
   arguments as JSON, ``JAX_PLATFORMS`` of ``reference.platform`` (:data:`JAX_PLATFORMS`),
   the environment's persistent compilation cache (``<root>/jaxcache``,
   ``<root>/jaxcache-jax010``), ``PYTHONDONTWRITEBYTECODE=1`` (nothing written into the
   checkout), this repository's ``src`` and the checkout on ``PYTHONPATH`` (before the
   caller's ``PYTHONPATH`` when the interpreter is a given one,
   ``$DREAMER_PARITY_REF_INTERPRETER``: that machine's jax lives there; in place of it
   otherwise).  The runner's stdout (the reference's own prints) goes to
   ``<out>/stdout.log``; progress comes on stderr.

Exit status: the runner's (0 ok, 1 the run failed and says why in ``DONE.json``), 2 for
bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from dreamer_parity import params as params_mod
from dreamer_parity import provenance, records
from dreamer_parity.round_spec import Round
from dreamer_parity.reference import runner
from dreamer_parity.reference import setup as ref_setup

__all__ = ["LaunchError", "parse_seed", "prepare_out_dir", "runner_command", "main",
           "RUN_FILES", "RUNNER"]

#: The module a protocol run executes in the reference venv.
RUNNER = "dreamer_parity.reference.runner"

#: Names a run directory may hold (anything else makes an incomplete directory suspect).
RUN_FILES = {"logdir", "run.json", "records.jsonl", "episodes.jsonl", "timing.json",
             "params.npz", "stdout.log", records.DONE}

D6_MESSAGE = ("a reference run cannot be resumed (deviation D6: no checkpoint of the ratio "
              "state, online queue or sampler RNG); starting this seed from scratch")


#: The reference venv's lock (its jax, jaxlib and numpy are checked before a launch); the
#: lock of environment ``reference.jax`` is :func:`dreamer_parity.reference.setup.lock_file`.
REFERENCE_LOCK = provenance.REPO_ROOT / "requirements-reference.lock"
#: ``JAX_PLATFORMS`` of each ``reference.platform``: the chip first, the CPU beside it (the
#: runner checks that the backend is the platform asked for).
JAX_PLATFORMS = {"cpu": "cpu", "tpu": "tpu,cpu", "gpu": "cuda,cpu"}


class LaunchError(RuntimeError):
    """Bad input for a launch; one-line message."""


def parse_seed(text) -> int:
    """A non-negative integer seed from a command-line string (LaunchError otherwise)."""
    s = str(text).strip()
    if not s.isdigit():
        raise LaunchError(f"--seed must be a non-negative integer, got {text!r}")
    return int(s)


def prepare_out_dir(out, log=print) -> str:
    """Make ``out`` ready for a fresh run.

    Returns:
      ``"new"`` (absent or empty) or ``"removed"`` (an incomplete run was deleted, with the
      D6 message logged).

    Raises:
      LaunchError: ``out`` holds a completed run (``DONE.json``), is not a directory, or
        holds files a run never writes (refused rather than deleted).
    """
    out = Path(out)
    if not out.exists():
        return "new"
    if not out.is_dir():
        raise LaunchError(f"--out {out} exists and is not a directory")
    if (out / records.DONE).exists():
        try:
            status = records.read_done(out)["status"]
        except records.RecordError:
            status = "unreadable"
        raise LaunchError(
            f"--out {out} already holds a completed reference run (DONE.json status "
            f"{status}); refusing to overwrite or resume it: remove the directory to rerun")
    entries = [p.name for p in out.iterdir()]
    if not entries:
        return "new"
    strange = [e for e in entries if e not in RUN_FILES and ".tmp-" not in e]
    if strange:
        raise LaunchError(
            f"--out {out} holds files no reference run writes ({', '.join(sorted(strange)[:5])}); "
            "refusing to delete them: choose another directory or remove it")
    log(f"{out}: incomplete run found (no DONE.json); {D6_MESSAGE}")
    shutil.rmtree(out)
    return "removed"


def runner_command(info: dict, seed: int, out: Path, p: dict,
                   module: str = RUNNER) -> tuple[list[str], dict]:
    """The runner's argv and environment for one seed.

    Args:
      info: :func:`dreamer_parity.reference.setup.check_setup` result.
      seed: run seed.
      out: absolute output directory.
      p: validated params (written out as the runner's arguments,
        :func:`dreamer_parity.reference.runner.arguments`).
      module: the module run with ``-m``: the runner, or a diagnostic wrapper of it that
        takes the same arguments (:mod:`dreamer_parity.reference.probe_runner`).

    Returns:
      ``(argv, env)``.
    """
    args = runner.arguments(seed, out, p)
    src = Path(__file__).resolve().parents[2]
    env = dict(os.environ)
    for k in ("PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP"):
        env.pop(k, None)
    path = [str(src), str(info["checkout"])]
    if info.get("interpreter") == "given" and env.get("PYTHONPATH"):
        path.append(env["PYTHONPATH"])     # that machine's jax and the carried wheels
    env.update({
        "PYTHONPATH": os.pathsep.join(path),
        "PYTHONDONTWRITEBYTECODE": "1",
        "JAX_PLATFORMS": JAX_PLATFORMS[p["reference"]["platform"]],
        "JAX_COMPILATION_CACHE_DIR": str(info["jaxcache"]),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    })
    argv = [str(info["python"]), "-m", module, "--json",
            json.dumps(args)]
    return argv, env


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dreamer_parity.reference.launch",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params.yaml", help="params file (default params.yaml)")
    ap.add_argument("--seed", required=True, help="run seed, a non-negative integer")
    ap.add_argument("--out", required=True, help="output directory of this seed's run")
    ap.add_argument("--root", default=None, help="reference set-up root (default as "
                                                 "`python -m dreamer_parity.reference.setup`)")
    a = ap.parse_args(argv)
    try:
        round_ = params_mod.load_round(a.params)
    except params_mod.ParamsError as e:
        print(f"error: {e}", file=sys.stderr)   # the same line at every entry point
        return 2
    except FileNotFoundError:
        round_ = None
    try:
        seed = parse_seed(a.seed)
        if round_ is None:
            raise LaunchError(f"--params {a.params}: no such file")
        if seed not in round_.reference.runs_here():
            raise LaunchError(
                f"params: reference.source: seed {seed} comes from "
                f"{round_.reference.origins().get(seed, 'no source (not a round seed)')}"
                f", not 'run'; this round does not run it")
    except LaunchError as e:
        print(f"reference launch: error: {e}", file=sys.stderr)
        return 2
    return launch(round_, seed, a.out, a.root)


def launch(round_: Round, seed: int, out_dir, root=None, module: str = RUNNER) -> int:
    """Run one reference seed of ``round_`` (:class:`dreamer_parity.round_spec.Round`)
    into ``out_dir``; the runner receives the round's params
    (:meth:`~dreamer_parity.round_spec.Round.to_params`, :func:`runner_command`).

    Checks the output directory (a completed run is refused), the reference set-up under
    ``root`` (default: as ``python -m dreamer_parity.reference.setup``) and the reference
    venv's package pins, then runs the runner in the reference venv.  Which seeds run here
    is the round's (:meth:`dreamer_parity.round_spec.RoundSide.runs_here`), not this one's.

    ``module`` is the runner module (:func:`runner_command`); the pipeline always runs the
    runner itself.

    Returns:
      The runner's exit status; 2 (one line on stderr) when a check refuses.
    """
    try:
        out = Path(out_dir).resolve()
        if (out / records.DONE).exists():
            prepare_out_dir(out)  # refuses a completed run, whatever the set-up
        jax = round_.reference_run.jax
        try:
            info = ref_setup.check_setup(root, check_packages=False, jax=jax)
            # jax, jaxlib, numpy of the reference venv against its environment's lock
            # (one line naming the package), then every other package (unless overridden)
            pins = provenance.check_pins(ref_setup.lock_file(jax), python=info["python"],
                                         version_set=info["version_set"])
            if not pins["override"]:
                ref_setup.check_setup(root, jax=jax)
        except ref_setup.SetupError as e:
            raise LaunchError(str(e)) from None
        prepare_out_dir(out)
    except provenance.PinError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except LaunchError as e:
        print(f"reference launch: error: {e}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    info["jaxcache"].mkdir(parents=True, exist_ok=True)
    cmd, env = runner_command(info, seed, out, round_.to_params(), module)
    env.pop(provenance.CHECKED_ENV, None)
    env.pop(provenance.VERSION_SET_ENV, None)
    if pins["checked"]:
        env[provenance.CHECKED_ENV] = "1"   # the runner's run.json records versions_checked
        if info["version_set"] and not pins["override"]:
            env[provenance.VERSION_SET_ENV] = info["version_set"]   # ... and its version set
    r = round_.reference_run
    print(f"reference launch: seed {seed}, profile {round_.protocol.profile}, rows "
          f"{round_.protocol.rows}, decode {round_.reference.decode}, sampler {r.sampler}, "
          f"jax {r.jax}, platform {r.platform}, precision {r.precision}", file=sys.stderr,
          flush=True)
    with open(out / "stdout.log", "w") as log:
        code = subprocess.call(cmd, env=env, cwd=str(out), stdout=log)
    if code != 0:
        reason = ""
        try:
            reason = records.read_done(out).get("reason", "")
        except records.RecordError:
            pass
        print(f"reference launch: seed {seed} failed (exit {code})"
              + (f": {reason}" if reason else ""), file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())

"""Helpers of the pipeline tests: temporary clones of this repository and DVC calls.

A clone is ``<tmp>/main`` holding the working tree's tracked and untracked (not ignored)
files, committed once (data/published is among them: it is git-tracked).  DVC runs with this repository's .venv first on PATH (stage commands
call ``python``), as ``make run`` does.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
ROUND1_PARAMS = REPO / "tests" / "fixtures" / "params_round1.yaml"
VENV_BIN = REPO / ".venv" / "bin"


def env(extra: dict | None = None) -> dict:
    """Environment for DVC in a clone: .venv first on PATH, no analytics, a git identity."""
    e = dict(os.environ)
    e["PATH"] = f"{VENV_BIN}{os.pathsep}{e.get('PATH', '')}"
    e["DVC_NO_ANALYTICS"] = "1"
    e.setdefault("JAX_PLATFORMS", "cpu")
    for k, v in (("GIT_AUTHOR_NAME", "pipeline-test"), ("GIT_COMMITTER_NAME", "pipeline-test"),
                 ("GIT_AUTHOR_EMAIL", "pipeline-test@example.invalid"),
                 ("GIT_COMMITTER_EMAIL", "pipeline-test@example.invalid")):
        e.setdefault(k, v)
    e.pop("PYTHONPATH", None)
    e.update(extra or {})
    return e


def run(cwd, *cmd, check=True, extra_env=None, timeout=900) -> subprocess.CompletedProcess:
    """Run a command; stdout+stderr together in ``.stdout``; AssertionError on failure."""
    p = subprocess.run(cmd, cwd=cwd, env=env(extra_env), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {p.returncode}:\n{p.stdout[-6000:]}")
    return p


def dvc(cwd, *args, **kw) -> subprocess.CompletedProcess:
    return run(cwd, str(VENV_BIN / "dvc"), *args, **kw)


def git(cwd, *args, **kw) -> subprocess.CompletedProcess:
    return run(cwd, "git", *args, **kw)


def ran_stages(output: str) -> list[str]:
    """Names of the stages DVC ran (``Running stage 'X'``), in order."""
    return re.findall(r"Running stage '([^']+)'", output)


def make_clone(tmp: Path, overlay: dict[str, str] | None = None) -> Path:
    """Copy the working tree into ``tmp/main``, commit it (no ``../shared`` beside it).

    Args:
      overlay: ``{relative path: text}`` written over the copy before the commit.

    Returns:
      The clone's root (data/published comes with the working tree: it is git-tracked).
      It has no dvc.lock, store/ or results/, and params.yaml holds round 1
      (tests/fixtures/params_round1.yaml).
    """
    tmp = Path(tmp)
    dest = tmp / "main"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                           stdout=subprocess.PIPE, check=True).stdout.decode().split("\0")
    for f in files:
        src = REPO / f
        # a new repository: no committed round (dvc.lock, store/, results/), and round 1's
        # parameters (both sides run) in params.yaml
        if f == "dvc.lock" or f.startswith(("store/", "results/")):
            continue
        if f and src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)
    shutil.copy2(ROUND1_PARAMS, dest / "params.yaml")
    for rel, text in (overlay or {}).items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(text)
    git(dest, "init", "-q")
    git(dest, "add", "-A")
    git(dest, "commit", "-qm", "clone of the working tree")
    return dest


def set_params(clone: Path, **flat) -> None:
    """Overwrite dotted keys of the clone's params.yaml (block style, as DVC writes it)."""
    path = clone / "params.yaml"
    d = yaml.safe_load(path.read_text())
    for key, v in flat.items():
        node = d
        parts = key.split(".")
        for p in parts[:-1]:
            node = node[p]
        node[parts[-1]] = v
    path.write_text(yaml.safe_dump(d, default_flow_style=False, sort_keys=False))


def smoke_overrides() -> dict:
    """The smoke round as dotted keys (dreamer_parity.params.SMOKE)."""
    from dreamer_parity.params import SMOKE

    return dict(SMOKE)


def lock_stage(clone: Path, name: str) -> dict:
    """The dvc.lock entry of one stage."""
    return yaml.safe_load((clone / "dvc.lock").read_text())["stages"][name]


def tree_digest(root: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under ``root``."""
    import hashlib

    out = {}
    for p in sorted(Path(root).rglob("*")):
        if p.is_file():
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out

"""Resumable checkpoints of a candidate run, kept outside the stage's DVC outputs.

A checkpoint is one ``.npz`` file holding every leaf of the loop carry (each with a
leading seed axis) plus the host state (records, episodes, failures, next chunk) as JSON
bytes.  It is written atomically (temporary file + rename), so a killed run leaves either
the previous checkpoint or the new one.

Its directory is ``<work_dir>/<key>/``; the default ``work_dir`` is :func:`default_root`,
a per-user cache outside the repository, so that a run started from one checkout is
resumed by the next start on the same machine even when the checkout is laid anew.  The
``key`` ``key`` hashes everything that determines
the run's numbers: the resolved run parameters, the agent config, the content of the
run's source files (:data:`CODE_FILES`: the code identity that the repository commit plus
the dirty diff of ``src/`` stand for, without depending on unrelated commits), the agent
module's name, the jax / jaxlib versions, the backend (cpu, gpu, tpu) and the matmul
precision where one is set (``jax_default_matmul_precision``).  Other parameters
or code give another key, hence a clean start.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

__all__ = ["user_cache_root", "default_root", "code_hash", "run_key", "save", "load", "CKPT_NAME", "CheckpointMismatch"]

CKPT_NAME = "checkpoint.npz"
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


class CheckpointMismatch(RuntimeError):
    """A checkpoint exists under the key but does not fit the current program."""


def user_cache_root() -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/dreamer-parity``: this project's per-user cache."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "dreamer-parity"


def default_root() -> Path:
    """The default checkpoint root: ``$DREAMER_PARITY_WORK_DIR`` if set, else
    ``<user cache>/candidate-runs`` (:func:`user_cache_root`).  Never inside a DVC output."""
    env = os.environ.get("DREAMER_PARITY_WORK_DIR")
    return Path(env) if env else user_cache_root() / "candidate-runs"


#: The code that determines a candidate run's numbers and files, relative to the package.
CODE_FILES = ("candidate/**/*.py", "schedule.py", "params.py", "records.py")


def code_hash(root: Path = PACKAGE_ROOT, extra_files=()) -> str:
    """sha256 over the relative paths and bytes of the run's code.

    Covers :data:`CODE_FILES` under ``root`` (the candidate package, the schedule, the
    params schema, the record writers) plus ``extra_files`` (e.g. an agent module kept
    outside the package).  Other modules of the repository (analysis, reference side) do
    not invalidate a checkpoint.
    """
    h = hashlib.sha256()
    files = sorted({p for pat in CODE_FILES for p in root.glob(pat)
                    if "__pycache__" not in p.parts})
    for p in files:
        h.update(p.relative_to(root).as_posix().encode() + b"\0")
        h.update(p.read_bytes() + b"\0")
    for p in extra_files:
        p = Path(p)
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def run_key(run_params: dict, agent_config: dict, agent_module: str,
            extra: dict | None = None, agent_file=None) -> str:
    """The 16-hex-digit key of a run (see the module docstring).

    ``agent_file``: the agent module's source file, hashed too when it lies outside the
    package (a stand-in agent of the tests).
    """
    import jax
    import jaxlib

    precision = jax.config.jax_default_matmul_precision
    blob = json.dumps({
        "params": run_params, "agent_config": agent_config, "agent": agent_module,
        "code": code_hash(extra_files=[agent_file] if agent_file else []), "jax": jax.__version__, "jaxlib": jaxlib.__version__,
        "backend": jax.default_backend(),
        "extra": extra or {},
        # the default precision adds nothing, so that keys made before it was part stay valid
        **({} if precision is None else {"matmul_precision": str(precision)}),
    }, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _treedef_str(tree) -> str:
    import jax
    return str(jax.tree_util.tree_structure(tree))


def save(directory, carry, host: dict) -> Path:
    """Write ``carry`` (a pytree of arrays) and ``host`` (JSON-able) atomically.

    Returns the checkpoint path ``<directory>/checkpoint.npz``.
    """
    import jax

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    leaves = jax.tree_util.tree_leaves(carry)
    arrays = {f"leaf_{i:05d}": np.asarray(x) for i, x in enumerate(leaves)}
    arrays["host_json"] = np.frombuffer(json.dumps(host, sort_keys=True).encode(), np.uint8)
    arrays["treedef"] = np.frombuffer(_treedef_str(carry).encode(), np.uint8)
    path = directory / CKPT_NAME
    tmp = directory / f"{CKPT_NAME}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        np.savez(f, **arrays)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def load(directory, like):
    """Read a checkpoint written by :func:`save` into the structure of ``like``.

    Args:
      directory: the checkpoint directory.
      like: a pytree (arrays or ShapeDtypeStructs) with the expected structure.

    Returns:
      ``(carry, host)`` with numpy leaves, or None when there is no checkpoint.

    Raises:
      CheckpointMismatch: the structure, a shape or a dtype differs.
    """
    import jax

    path = Path(directory) / CKPT_NAME
    if not path.exists():
        return None
    with np.load(path) as z:
        treedef = bytes(z["treedef"]).decode()
        if treedef != _treedef_str(like):
            raise CheckpointMismatch(f"{path}: carry structure differs from the program's")
        host = json.loads(bytes(z["host_json"]).decode())
        ref = jax.tree_util.tree_leaves(like)
        leaves = []
        for i, r in enumerate(ref):
            a = z[f"leaf_{i:05d}"]
            if tuple(a.shape) != tuple(r.shape) or np.dtype(a.dtype) != np.dtype(r.dtype):
                raise CheckpointMismatch(
                    f"{path}: leaf {i} is {a.dtype}{list(a.shape)}, expected "
                    f"{np.dtype(r.dtype)}{list(r.shape)}")
            leaves.append(a)
    carry = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(like), leaves)
    return carry, host

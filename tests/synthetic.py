"""Synthetic run directories in the records schema, for the tests.

:func:`write_run` writes one consistent run (records, episodes that tile every env's
rows, run.json with the round's parameters and provenance, timing.json, DONE.json) with
the writers of :mod:`dreamer_parity.records`, and with ``manifest=True`` its
``MANIFEST.json`` (:mod:`dreamer_parity.manifest`, as a kept run has: a directory source
of params.yaml must have one); :func:`reseal` rewrites a manifest after a test changed a
file on purpose.  Evaluation returns come from a caller's function so a test knows every
statistic's exact value.  No JAX.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from dreamer_parity import manifest as manifest_mod
from dreamer_parity import records, schedule
from dreamer_parity.analysis.checks import REFERENCE_COMMIT
from dreamer_parity.params import eval_points, validate
from dreamer_parity.round_spec import Round

__all__ = ["write_run", "write_round", "episodes_for", "METRICS", "reseal", "write_params",
           "params_text", "ROUND1_PARAMS"]

NUM_ENVS = 16
#: Training metrics written in every record (reference names).
METRICS = ("ent/action/mean", "activation/embed", "vector_loss", "reward_loss")


def episodes_for(seed: int, last_row: int, rng: np.random.Generator, max_len: int = 500,
                 mean_len: float = 40.0) -> list[dict]:
    """Episodes tiling rows ``0..last_row`` of each of 16 envs (reset row + L steps each).

    Lengths are geometric-like draws in 1..max_len; an episode of ``max_len`` steps is
    truncated (``terminal`` False).  The unfinished tail after each env's last episode is
    shorter than ``max_len + 1`` rows by construction.  Returned in completion order.
    """
    eps = []
    for w in range(NUM_ENVS):
        start = 0  # reset row of the current episode
        while True:
            length = int(min(max_len, 1 + rng.geometric(1.0 / mean_len)))
            end = start + length
            if end > last_row:
                break
            eps.append({"seed": seed, "worker": w, "row_last": end, "length": length,
                        "score": float(length), "terminal": length < max_len})
            start = end + 1
    eps.sort(key=lambda e: (e["row_last"], e["worker"]))
    return eps


def write_run(root, side: str, seed: int, params: dict,
              eval_fn: Callable[[int, int], list[float]] | None = None,
              fail_at: int | None = None, rng_seed: int | None = None,
              train_fn: Callable[[int, int], dict] | None = None,
              manifest: bool = False) -> Path:
    """Write one synthetic run ``<root>/s<seed>/`` and return its directory.

    Args:
      root: the side directory.
      side: ``"reference"`` or ``"candidate"``.
      seed: run seed.
      params: validated params (rows, eval_every, eval_episodes, profile, decode ...).
      eval_fn: ``(rows, seed) -> list of eval_episodes returns``; default a learning curve.
      fail_at: row of a failing evaluation point (record status ``failed``, no later
        records, DONE.json failed) or None.
      rng_seed: seed of the episode draws (default derived from side and seed).
      train_fn: ``(rows, seed) -> {metric: value}``; default smooth curves.
      manifest: write the run's ``MANIFEST.json`` last (a kept run's).
    """
    d = Path(root) / f"s{seed}"
    rng = np.random.default_rng(rng_seed if rng_seed is not None else
                                [seed, 1 if side == "reference" else 2])
    n_ep = params["eval_episodes"]
    if eval_fn is None:
        def eval_fn(rows, s):
            base = min(500.0, 20.0 + 480.0 * rows / params["rows"])
            return [float(np.clip(round(base + 10 * (k - n_ep / 2)), 1, 500)) for k in range(n_ep)]
    if train_fn is None:
        def train_fn(rows, s):
            x = rows / params["rows"]
            off = 0.01 * s + (0.0 if side == "reference" else 0.005)
            return {"ent/action/mean": 0.69 - 0.5 * x + off, "activation/embed": 0.4 + off - 0.02 * x,
                    "vector_loss": 0.4 * (1 - x) + 0.02 + off, "reward_loss": None if rows == params["eval_every"] else 0.66 + off}
    recs = []
    stop_row = params["rows"]
    points = eval_points(params)
    updates = dict(zip(points, schedule.updates_at(points)))
    for n in points:
        failed = fail_at is not None and n >= fail_at
        rets = eval_fn(n, seed)
        train = train_fn(n, seed)
        recs.append({"side": side, "seed": seed, "rows": n, "updates": updates[n],
                     "eval_returns": [float(r) for r in rets], "eval_lengths": [int(r) for r in rets],
                     "eval_mean": float(np.mean(rets)), "eval_len_mean": float(np.mean(rets)),
                     "train": train, "train_counts": {k: 1 for k in train},
                     "retnorm": {"lo": 0.0, "hi": 1.0, "scale": 1.0},
                     "status": "failed" if failed else "ok"})
        if failed:
            stop_row = n
            break
    episodes = episodes_for(seed, stop_row // NUM_ENVS, rng)
    args = {"seed": seed, "profile": params["profile"], "rows": params["rows"],
            "eval_every": params["eval_every"], "eval_episodes": params["eval_episodes"]}
    prov = {"repo": {"commit": "0" * 40, "dirty": False}}
    if side == "candidate":
        args["decode"] = params["decode"]
    else:
        args["reference"] = {"decode": params["reference"]["decode"],
                             "sampler": params["reference"]["sampler"]}
        prov["reference"] = {"commit": REFERENCE_COMMIT, "dirty": False}
    records.write_jsonl(d / "records.jsonl", recs)
    records.write_jsonl(d / "episodes.jsonl", episodes)
    records.write_json(d / "run.json", {"side": side, "seed": seed, "config": {}, "args": args,
                                        "provenance": prov})
    flush = sum(e["row_last"] == stop_row // NUM_ENVS for e in episodes)
    records.write_json(d / "timing.json", {"total_s": 1.0, "flush_episodes": flush})
    if fail_at is not None:
        records.write_done(d, "failed", f"non-finite loss at row {stop_row}")
    else:
        records.write_done(d, "ok")
    if manifest:
        manifest_mod.write(d)
    return d


def reseal(directory) -> Path:
    """Rewrite ``<directory>/MANIFEST.json`` for the files it holds now (a test that
    changes a kept file on purpose, to reach the readers behind the manifest)."""
    d = Path(directory)
    (d / manifest_mod.NAME).unlink(missing_ok=True)
    return manifest_mod.write(d)


def write_round(root, params: dict, eval_fns: dict | None = None, fail: dict | None = None,
                manifest: bool = False) -> dict:
    """Write both sides of a round under ``root/reference`` and ``root/candidate``, each
    with its own seeds (:attr:`dreamer_parity.round_spec.RoundSide.seeds` of the round of
    ``params``: ``candidate.seeds`` where the params name the candidate's own list, else
    ``seeds``).

    Args:
      eval_fns: ``{side: eval_fn}`` (see :func:`write_run`).
      fail: ``{(side, seed): row}`` seeds that fail at a row.
      manifest: each run with its ``MANIFEST.json`` (see :func:`write_run`).

    Returns:
      ``{"reference": Path, "candidate": Path}``.
    """
    out = {}
    round_ = Round.from_params(validate(params))
    for side in records.SIDES:
        for s in round_.side(side).seeds:
            write_run(Path(root) / side, side, s, params, (eval_fns or {}).get(side),
                      (fail or {}).get((side, s)), manifest=manifest)
        out[side] = Path(root) / side
    return out


def write_params(path, raw: dict) -> Path:
    """Write a complete params file for the (possibly partial) dict ``raw``: every key of
    the schema, the library's defaults written out (a params file never takes a default,
    :func:`dreamer_parity.params.load`)."""
    import yaml

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(validate(raw), sort_keys=False))
    return path


#: Round 1's complete params file (every key written out), the base of edited files.
ROUND1_PARAMS = Path(__file__).resolve().parent / "fixtures" / "params_round1.yaml"


def with_key(raw: dict, dotted: str, value) -> dict:
    """A deep copy of params ``raw`` with the entry ``dotted`` (``a.b``) set to ``value`` as
    given (not validated: a test may set a bad value on purpose)."""
    import copy

    out = copy.deepcopy(raw)
    node = out
    *parents, last = dotted.split(".")
    for k in parents:
        node = node[k]
    node[last] = value
    return out


def params_text(overrides: dict | None = None) -> str:
    """Round 1's complete params file with ``{dotted key: raw value}`` set (a value may be
    invalid on purpose: it is written as given, not validated), as YAML text."""
    import yaml

    d = yaml.safe_load(ROUND1_PARAMS.read_text())
    for key, v in (overrides or {}).items():
        node = d
        *parents, last = key.split(".")
        for k in parents:
            node = node.setdefault(k, {})
        node[last] = v
    return yaml.safe_dump(d, sort_keys=False)

#!/usr/bin/env python3
"""Are the two-hot heads' output layers still mirror-symmetric in a reference run's weights?

The reference's two-hot heads (``rew``, ``critic``, ``slowcritic``: 255 bins plus one
padding output dropped, ``dreamerv3/nets.py:436-442``) start from a zero output layer, and
their bins are symmetric (``b[254 - j] == -b[j]``, ``nets.py:466-473``). While a column
``j`` of the output kernel and its bias equal those of column ``254 - j`` bit for bit, the
two logits are equal for every input, and the exact two-hot expectation (``decode:
exact``, ``dreamer_parity.reference.patches.exact_mean``) cancels that pair's ±b
exactly. Once they differ, the pair adds ``(p[254-j] - p[j]) * b[254-j]`` with ``|b|`` up
to 4.85e8. This prints, per head and parameter file, how many of the 127 mirror pairs are
still bitwise equal, the outermost pair that is not (the smaller ``j``, the larger its
bin), and the largest difference within a pair::

    python measurements/2026-12-07-reference-cpu-mirror/twohot_mirror.py cpu=<run>/params.npz tpu=<NAME>.heads.npz

``params.npz`` is what the reference runner writes at the end of a run
(``dreamer_parity.reference.runner``); ``<NAME>.heads.npz`` holds only those layers
(``python -m dreamer_parity.device_reference --with-heads``, how a device run brings them back).
Exit status 2 on a file that is neither (naming it and the missing key).
"""

from __future__ import annotations

import argparse
import io
import sys

import numpy as np

HEADS = ("rew", "critic", "slowcritic")
BINS = 255


def mirror(kernel: np.ndarray, bias: np.ndarray, bins: int = BINS) -> dict:
    """Mirror symmetry of one two-hot output layer.

    Args:
      kernel: f32[units, bins + padding] (the padding column, if any, is the last one and
        is ignored); bias: f32[bins + padding].
      bins: the number of bins (odd).

    Returns:
      ``{"pairs": (bins - 1) // 2, "equal": pairs whose kernel column and bias are bitwise
      equal to their mirror's, "outermost_unequal": the smallest j of an unequal pair or
      None, "max_abs_diff": the largest |w[:, j] - w[:, bins-1-j]| or |b[j] - b[bins-1-j]|
      over all pairs (0.0 when all are equal), "max_abs_weight": the largest |w| of the
      kernel's bins}``.

    Raises:
      ValueError: shapes that do not hold ``bins`` outputs, or an even ``bins``.
    """
    if bins % 2 != 1:
        raise ValueError(f"bins must be odd, got {bins}")
    if kernel.ndim != 2 or kernel.shape[1] < bins or bias.shape != (kernel.shape[1],):
        raise ValueError(f"kernel {kernel.shape} and bias {bias.shape} do not hold {bins} "
                         f"outputs")
    w, b = kernel[:, :bins], bias[:bins]
    pairs = (bins - 1) // 2
    j = np.arange(pairs)
    wl, wu = w[:, j], w[:, bins - 1 - j]
    bl, bu = b[j], b[bins - 1 - j]
    equal = np.all(wl.view(np.uint32) == wu.view(np.uint32), axis=0) & (
        bl.view(np.uint32) == bu.view(np.uint32))
    unequal = np.flatnonzero(~equal)
    diff = max(float(np.max(np.abs(wl - wu))), float(np.max(np.abs(bl - bu))))
    return {"pairs": pairs, "equal": int(equal.sum()),
            "outermost_unequal": int(unequal[0]) if unequal.size else None,
            "max_abs_diff": diff, "max_abs_weight": float(np.max(np.abs(w)))}


#: Largest params.npz read (bytes): a full-size reference's is about 0.4 MiB.
MAX_NPZ_BYTES = 64 * 2 ** 20


def heads(path) -> dict:
    """``{head: mirror(...)}`` for the heads of a reference ``params.npz``.

    Raises:
      KeyError: a head's ``agent/<head>/dist/out/kernel`` or ``bias`` is missing (the
        message names the file and the key); OSError/ValueError: not an npz file;
      records.RecordError (a ValueError): the guarded reader's refusals (not a regular
        file, over MAX_NPZ_BYTES); FileNotFoundError: no such file.
    """
    from dreamer_parity import records

    data = records.read_raw(path, str(path), cap=MAX_NPZ_BYTES)   # the guarded reader
    with np.load(io.BytesIO(data), allow_pickle=False) as d:
        out = {}
        for h in HEADS:
            k, b = f"agent/{h}/dist/out/kernel", f"agent/{h}/dist/out/bias"
            for key in (k, b):
                if key not in d.files:
                    raise KeyError(f"{path}: no {key}")
            out[h] = mirror(np.asarray(d[k], np.float32), np.asarray(d[b], np.float32))
    return out


def main(argv=None) -> int:
    from dreamer_parity import records as records_cli

    ap = records_cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", metavar="LABEL=PARAMS.npz")
    a = ap.parse_args(argv)
    got = []
    for item in a.files:          # every file read before anything prints
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            print(f"error: {item!r}: expected LABEL=PARAMS.npz", file=sys.stderr)
            return 2
        try:
            got.append((label, heads(path)))
        except FileNotFoundError:
            print(f"error: {label}: {path[:200]}: not found", file=sys.stderr)
            return 2
        except (KeyError, OSError, ValueError) as e:
            print(f"error: {label}: {e}", file=sys.stderr)
            return 2
    print("| run | head | mirror pairs bitwise equal | outermost unequal pair j "
          "| largest difference in a pair | largest weight |")
    print("|---|---|---|---|---|---|")
    for label, hs in got:
        for h, m in hs.items():
            print(f"| {label} | {h} | {m['equal']} of {m['pairs']} | "
                  f"{'-' if m['outermost_unequal'] is None else m['outermost_unequal']} | "
                  f"{m['max_abs_diff']:.3g} | {m['max_abs_weight']:.3g} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

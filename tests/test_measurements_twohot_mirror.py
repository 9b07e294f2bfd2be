"""measurements/2026-12-07-reference-cpu-mirror/twohot_mirror.py, run as its readers run
it: mirror symmetry of the two-hot output layers."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SET = REPO / "measurements" / "2026-12-07-reference-cpu-mirror"
SCRIPT = SET / "twohot_mirror.py"
HEADS = ("rew", "critic", "slowcritic")


def _run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)],
                          capture_output=True, text=True, cwd=REPO)


def _rows(out: str) -> dict:
    """``{(label, head): (equal, outermost, largest difference)}`` of the printed table."""
    got = {}
    for line in out.splitlines()[2:]:
        cells = line.strip("| ").split(" | ")
        got[(cells[0], cells[1])] = (int(cells[2].split(" of ")[0]), cells[3], cells[4])
    return got


def _layer(rng, units=4, bins=255):
    """A kernel and bias with 256 outputs whose 127 mirror pairs are bitwise equal, the
    middle bin and the padding column free."""
    half = rng.standard_normal((units, (bins - 1) // 2)).astype(np.float32)
    k = np.concatenate([half, rng.standard_normal((units, 1)).astype(np.float32),
                        half[:, ::-1], np.full((units, 1), 9.0, np.float32)], 1)
    hb = rng.standard_normal((bins - 1) // 2).astype(np.float32)
    b = np.concatenate([hb, [0.5], hb[::-1], [-7.0]]).astype(np.float32)
    return k, b


def test_counts_equal_pairs_names_the_outermost_unequal_one_and_refuses_bad_files(tmp_path):
    rng = np.random.default_rng(1)
    arrays = {}
    for h in HEADS:
        arrays[f"agent/{h}/dist/out/kernel"], arrays[f"agent/{h}/dist/out/bias"] = _layer(rng)
    k = arrays["agent/rew/dist/out/kernel"]
    k[1, 254 - 40] = np.nextafter(k[1, 254 - 40], np.float32(np.inf))   # one ulp, pair 40
    arrays["agent/rew/dist/out/bias"][120] += np.float32(0.25)           # pair 120
    arrays["agent/critic/dist/out/bias"][3] = 1e3                        # critic pair 3
    good = tmp_path / "p.npz"
    np.savez(good, **arrays)
    r = _run(f"x={good}")
    assert r.returncode == 0, r.stderr
    got = _rows(r.stdout)
    assert got[("x", "rew")] == (125, "40", "0.25")
    assert got[("x", "critic")][:2] == (126, "3")
    assert got[("x", "slowcritic")] == (127, "-", "0")
    del arrays["agent/slowcritic/dist/out/bias"]
    bad = tmp_path / "bad.npz"
    np.savez(bad, **arrays)
    r = _run(f"x={good}", f"y={bad}")
    assert r.returncode == 2 and r.stdout == ""
    assert "no agent/slowcritic/dist/out/bias" in r.stderr
    assert _run("nolabel").returncode == 2


def test_the_kept_cpu_run_keeps_its_outer_mirror_pairs():
    # the figures docs/REFERENCE_RUN.md and DEVIATIONS T4 quote: seed 5, jax 0.10.2 on
    # XLA:CPU, 681 updates
    r = _run(f"cpu={SET / 's5-2400' / 'heads.npz'}")
    assert r.returncode == 0, r.stderr
    got = {h: v[:2] for (_, h), v in _rows(r.stdout).items()}
    assert got == {"rew": (125, "122"), "critic": (108, "108"), "slowcritic": (108, "108")}


@pytest.mark.parametrize("probe", ["mirror-ulp", "mirror-ulp-gradient"])
def test_the_one_ulp_probes_leave_no_mirror_pair_equal(probe):
    # docs/REFERENCE_RUN.md: after 681 updates with the upper-half logits (or their
    # gradient) one ulp apart, no head keeps any of its 127 pairs
    r = _run(f"p={SET / f's5-2400-{probe}' / 'heads.npz'}")
    assert r.returncode == 0, r.stderr
    got = {h: v[:2] for (_, h), v in _rows(r.stdout).items()}
    assert got == {"rew": (0, "0"), "critic": (0, "0"), "slowcritic": (0, "0")}

"""benchmarks/twohot_mirror.py: mirror symmetry of the two-hot output layers."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("twohot_mirror",
                                               REPO / "benchmarks" / "twohot_mirror.py")
tm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tm)


def _layer(rng, units=4, bins=255):
    """A kernel and bias with 256 outputs whose 127 mirror pairs are bitwise equal, the
    middle bin and the padding column free."""
    half = rng.standard_normal((units, (bins - 1) // 2)).astype(np.float32)
    k = np.concatenate([half, rng.standard_normal((units, 1)).astype(np.float32),
                        half[:, ::-1], np.full((units, 1), 9.0, np.float32)], 1)
    hb = rng.standard_normal((bins - 1) // 2).astype(np.float32)
    b = np.concatenate([hb, [0.5], hb[::-1], [-7.0]]).astype(np.float32)
    return k, b


def test_mirror_counts_equal_pairs_and_names_the_outermost_unequal_one():
    rng = np.random.default_rng(0)
    k, b = _layer(rng)
    m = tm.mirror(k, b)
    assert m == {"pairs": 127, "equal": 127, "outermost_unequal": None, "max_abs_diff": 0.0,
                 "max_abs_weight": float(np.abs(k[:, :255]).max())}
    k2 = k.copy()
    k2[1, 254 - 40] = np.nextafter(k2[1, 254 - 40], np.float32(np.inf))   # one ulp, pair 40
    b2 = b.copy()
    b2[120] += np.float32(0.25)                                            # pair 120
    m2 = tm.mirror(k2, b2)
    assert (m2["equal"], m2["outermost_unequal"]) == (125, 40)
    assert m2["max_abs_diff"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="odd"):
        tm.mirror(k, b, bins=254)
    with pytest.raises(ValueError, match="do not hold 255"):
        tm.mirror(k[:, :200], b[:200])


def test_heads_and_cli_read_a_reference_params_file(tmp_path, capsys):
    rng = np.random.default_rng(1)
    arrays = {}
    for h in tm.HEADS:
        arrays[f"agent/{h}/dist/out/kernel"], arrays[f"agent/{h}/dist/out/bias"] = _layer(rng)
    arrays["agent/critic/dist/out/bias"][3] = 1e3          # critic pair 3 broken
    good = tmp_path / "p.npz"
    np.savez(good, **arrays)
    hs = tm.heads(good)
    assert [hs[h]["equal"] for h in tm.HEADS] == [127, 126, 127]
    assert tm.main([f"x={good}"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[3].startswith("| x | critic | 126 of 127 | 3 | ")
    del arrays["agent/slowcritic/dist/out/bias"]
    bad = tmp_path / "bad.npz"
    np.savez(bad, **arrays)
    assert tm.main([f"x={good}", f"y={bad}"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "no agent/slowcritic/dist/out/bias" in captured.err
    assert tm.main(["nolabel"]) == 2


def test_the_kept_cpu_run_keeps_its_outer_mirror_pairs(capsys):
    # the figures docs/REFERENCE_RUN.md and DEVIATIONS T4 quote: seed 5, jax 0.10.2 on
    # XLA:CPU, 681 updates (benchmarks/results/2026-12-06-reference-cpu-jax010-s5-2400)
    path = REPO / "benchmarks/results/2026-12-06-reference-cpu-jax010-s5-2400/heads.npz"
    hs = tm.heads(path)
    assert {h: (m["equal"], m["outermost_unequal"]) for h, m in hs.items()} == {
        "rew": (125, 122), "critic": (108, 108), "slowcritic": (108, 108)}


@pytest.mark.parametrize("probe", ["mirror-ulp", "mirror-ulp-gradient"])
def test_the_one_ulp_probes_leave_no_mirror_pair_equal(probe):
    # docs/REFERENCE_RUN.md: after 681 updates with the upper-half logits (or their gradient)
    # one ulp apart, no head keeps any of its 127 pairs (benchmarks/results/...-PROBE/heads.npz)
    path = REPO / f"benchmarks/results/2026-12-07-reference-cpu-jax010-s5-2400-{probe}/heads.npz"
    hs = tm.heads(path)
    assert {h: (m["equal"], m["outermost_unequal"]) for h, m in hs.items()} == {
        "rew": (0, 0), "critic": (0, 0), "slowcritic": (0, 0)}

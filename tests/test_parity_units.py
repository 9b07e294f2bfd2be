"""Unit tests of the parity harness pieces (name map, tolerance check, float64 decode,
float64 optimizer); numpy only, no fixture needed."""

from __future__ import annotations

import numpy as np
import pytest

from parity import compare, decode, namemap, optref


@pytest.mark.parametrize("name,want", [
    ("agent/dyn/dyn0/kernel", ("params", "dyn", "dyn0", "kernel")),
    ("agent/dyn/dyn0/norm/scale", ("params", "dyn", "dyn0", "scale")),
    ("agent/enc/mlp2/bias", ("params", "enc", "mlp2", "bias")),
    ("agent/dec/out_vector/out/kernel", ("params", "dec", "out", "kernel")),
    ("agent/rew/dist/out/bias", ("params", "rew", "out", "bias")),
    ("agent/con/dist/out/kernel", ("params", "con", "out", "kernel")),
    ("agent/actor/action/out/kernel", ("params", "actor", "out", "kernel")),
    ("agent/critic/h1/norm/scale", ("params", "critic", "h1", "scale")),
    ("agent/slowcritic/dist/out/kernel", ("slow_critic", None, "out", "kernel")),
])
def test_ref_to_cand(name, want):
    assert namemap.ref_to_cand(name) == want


@pytest.mark.parametrize("name", ["agent/opt/step/value", "agent/retnorm/low/value",
                                  "agent/dyn/dyn0/weird/kernel", "enc/mlp0/kernel"])
def test_ref_to_cand_rejects(name):
    with pytest.raises(KeyError):
        namemap.ref_to_cand(name)


def test_padding_dropped_only_for_twohot_outputs():
    k = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(namemap.drop_padding("agent/critic/dist/out/kernel", k),
                                  k[:, :3])
    np.testing.assert_array_equal(namemap.drop_padding("agent/con/dist/out/kernel", k), k)
    np.testing.assert_array_equal(namemap.padding_of("agent/rew/dist/out/kernel", k), k[:, 3])
    with pytest.raises(ValueError):
        namemap.padding_of("agent/actor/action/out/kernel", k)


def test_check_coverage_finds_gaps():
    ref = {"agent/rew/dist/out/kernel": (4, 6), "agent/rew/h0/norm/scale": (4,)}
    cand = {"params": {"rew": {"out": {"kernel": np.zeros((4, 5))},
                               "h0": {"scale": np.zeros(4)}}}, "slow_critic": {}}
    assert namemap.check_coverage(ref, cand) == {
        "agent/rew/dist/out/kernel": "params/rew/out/kernel",
        "agent/rew/h0/norm/scale": "params/rew/h0/scale"}
    cand["params"]["rew"]["out"]["kernel"] = np.zeros((4, 6))
    with pytest.raises(ValueError, match="shape"):
        namemap.check_coverage(ref, cand)
    cand["params"]["rew"]["out"]["kernel"] = np.zeros((4, 5))
    cand["params"]["rew"]["out"]["bias"] = np.zeros(5)
    with pytest.raises(ValueError, match="without a reference name"):
        namemap.check_coverage(ref, cand)


def test_check_tolerance_arithmetic():
    ref = np.array([10.0, 1.0, 0.0])
    ok = compare.check("x", ref + np.array([1e-4, 1.9e-5, 0.9e-5]), ref)  # atol 1e-5
    assert ok.ok and ok.ratio <= 1
    bad = compare.check("x", ref + np.array([0, 0, 2e-5]), ref)
    assert not bad.ok and bad.where == (2,) and bad.ratio == pytest.approx(2.0)
    assert not compare.check("x", np.array([np.nan]), np.array([1.0])).ok
    assert compare.check("x", np.array([np.nan]), np.array([np.nan])).ok
    assert compare.check("s", 1.0 + 5e-6, 1.0, scale=10.0).ok
    with pytest.raises(ValueError):
        compare.check("x", np.zeros(2), np.zeros(3))


def test_expectation64_and_bound():
    rng = np.random.default_rng(0)
    assert np.all(decode.expectation64(np.zeros((3, 255), np.float32)) == 0)
    assert np.all(decode.rounding_bound(np.zeros((2, 255), np.float32)) <= 1e-29)
    lg = rng.normal(size=(4, 255)).astype(np.float32)
    b = np.concatenate([-decode.bins64()[::-1], [0.0], decode.bins64()])
    np.testing.assert_allclose(decode.expectation64(lg), (decode.softmax64(lg) * b).sum(-1),
                               rtol=1e-9, atol=1e-6)
    with pytest.raises(ValueError):
        decode.bins64(256)


def test_optref_first_update_is_sign_times_lr():
    p = np.array([1.0, -2.0, 0.5])
    g = np.array([0.3, -1e-3, 0.0])
    new, nu, mu = optref.step(p, g, np.zeros(3), np.zeros(3), 0, lr=1e-3)
    np.testing.assert_allclose(new - p, -1e-3 * np.sign(g), rtol=1e-12)
    # a gradient so small that 0.001 g^2 is a float32 denormal: nu flushed, update g / eps
    new, nu, mu = optref.step(np.ones(1), np.array([1e-18]), np.zeros(1), np.zeros(1), 0, 1e-3)
    assert nu[0] == 0 and (1 - new[0]) == pytest.approx(1e-3 * 1e-18 / 1e-20)


def test_check_param_value_or_displacement():
    init = np.array([0.0, 0.0])
    ref = np.array([1e-3, 2e-3])      # zero-initialised biases after a few updates
    # 2e-8 on a displacement of 1e-3 (2e-5 relative): outside the value tolerance
    # (1e-6 * 2e-3 + 1e-5 * 1e-3 = 1.2e-8) but inside the displacement tolerance
    # (1e-4 * 2e-3 + 1e-4 * 1e-3 = 3e-7).
    c = compare.check_param("p", ref + np.array([2e-8, 0.0]), ref, init)
    assert c.ok and not compare.check("p", ref + np.array([2e-8, 0.0]), ref).ok
    c = compare.check_param("p", ref + np.array([1e-6, 0.0]), ref, init)
    assert not c.ok and c.where == (0,)

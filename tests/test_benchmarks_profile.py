"""The profile script's op-to-source attribution (benchmarks/profile_candidate.py)."""

import importlib.util
import inspect
import re
import zlib
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from dreamer_parity.candidate import nets

_SPEC = importlib.util.spec_from_file_location(
    "profile_candidate", Path(__file__).resolve().parents[1] / "benchmarks" / "profile_candidate.py")
profile_candidate = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(profile_candidate)


def test_source_of_ops_maps_dots_to_the_matmul_line_and_marks_the_backward_pass():
    p = {"kernel": jnp.ones((8, 4)), "bias": jnp.zeros(4), "scale": jnp.ones(4)}
    # The persistent compilation cache keys on the program without its source locations, so
    # an entry compiled from an earlier nets.py would answer with that file's line numbers.
    # A constant from nets.py's text, in the gradient's graph, makes the program (and the
    # key) differ per version of that file.
    salt = float(zlib.crc32(inspect.getsource(nets).encode()) % 65521)
    loss = lambda p, x: nets.dense(p, x).sum() * (1.0 + 0.0 * (x[0, 0] + salt))
    text = jax.jit(jax.grad(loss)).lower(p, jnp.ones((3, 8))).compile().as_text()
    src = profile_candidate.source_of_ops(text)
    # dense multiplies through nets.matmul -> nets._mm (the innermost candidate frame)
    lines, first = inspect.getsourcelines(nets._mm)
    matmul_line = first + next(i for i, l in enumerate(lines) if "x @ w" in l)
    dots = [name for name in src if re.fullmatch(r"dot(_general)?(\.\d+)?", name)]
    assert dots, "the compiled gradient has no dot"
    where = {src[d] for d in dots}
    # the forward dot and the backward (weight-gradient) dot both come from that matmul line
    assert where == {(f"nets.py:{matmul_line} _mm", False), (f"nets.py:{matmul_line} _mm", True)}


def test_source_of_ops_refuses_text_without_stack_frames():
    with pytest.raises(ValueError, match="StackFrames"):
        profile_candidate.source_of_ops("HloModule m\nENTRY e {\n}\n")

"""What an XLA profile says per op (dreamer_parity.xla_profile, read by
benchmarks/profile_candidate.py): op events of a trace, op-to-source attribution."""

import inspect
import re
import zlib

import jax
import jax.numpy as jnp
import pytest

from dreamer_parity import xla_profile as profile_candidate
from dreamer_parity.candidate import nets


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


def _write_trace(tmp_path, events):
    import gzip
    import json
    d = tmp_path / "plugins" / "profile" / "run"
    d.mkdir(parents=True)
    with gzip.open(d / "host.trace.json.gz", "wt") as f:
        json.dump({"traceEvents": events}, f)
    return str(tmp_path)


def _meta(pid, name, tid=None):
    if tid is None:
        return {"ph": "M", "pid": pid, "name": "process_name", "args": {"name": name}}
    return {"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}}


def _op(pid, tid, name, dur_us, ts_us):
    return {"ph": "X", "pid": pid, "tid": tid, "name": name, "dur": dur_us, "ts": ts_us}


def test_op_events_on_a_device_trace_keep_only_the_device_xla_ops_line(tmp_path):
    events = [
        _meta(1, "/host:CPU"), _meta(1, "python", tid=7),
        _meta(2, "/device:TPU:0"), _meta(2, "XLA Modules", tid=1), _meta(2, "XLA Ops", tid=2),
        _op(1, 7, "PjitFunction(call)", 900, 0),          # host: dropped on a device trace
        _op(2, 1, "jit_call(123)", 800, 10),              # the module line: dropped
        _op(2, 2, "fusion.1", 300, 10), _op(2, 2, "convolution.2", 500, 310),
        {"ph": "i", "pid": 2, "tid": 2, "name": "marker", "ts": 5},   # not a complete event
    ]
    trace = _write_trace(tmp_path, events)
    got = profile_candidate.op_events(trace, device=True)
    assert [(n, tid) for n, _, tid, _ in got] == [("fusion.1", 2), ("convolution.2", 2)]
    assert [d for _, d, _, _ in got] == pytest.approx([300e-6, 500e-6])
    assert [ts for _, _, _, ts in got] == pytest.approx([10e-6, 310e-6])
    # without the device filter every complete event counts (the CPU's host threads)
    assert [e[0] for e in profile_candidate.op_events(trace)] == [
        "PjitFunction(call)", "jit_call(123)", "fusion.1", "convolution.2"]


def test_op_events_take_every_line_of_a_device_without_an_xla_ops_line(tmp_path):
    events = [_meta(3, "/device:GPU:0"), _meta(3, "stream 7", tid=4),
              _op(3, 4, "gemm.1", 40, 0), _op(9, 1, "host_op", 10, 0)]
    got = profile_candidate.op_events(_write_trace(tmp_path, events), device=True)
    assert [(n, tid) for n, _, tid, _ in got] == [("gemm.1", 4)]
    assert got[0][1] == pytest.approx(40e-6)


def test_op_events_refuse_a_cpu_trace_read_as_a_device_trace(tmp_path):
    trace = _write_trace(tmp_path, [_meta(1, "/host:CPU"), _op(1, 7, "dot.1", 5, 0)])
    with pytest.raises(ValueError, match="no /device: process"):
        profile_candidate.op_events(trace, device=True)
    with pytest.raises(FileNotFoundError):
        profile_candidate.op_events(str(tmp_path / "empty"))

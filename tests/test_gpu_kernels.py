"""Kernels per update of an XLA:GPU program (dreamer_parity.hlo_cost.kernel_counts,
thunk_counts) on small hand-written HLO and thunk texts, and the H200 target description
(dreamer_parity.gpu_kernels).  No GPU and no CUDA plugin needed."""

import pytest

from dreamer_parity import gpu_kernels
from dreamer_parity.hlo_cost import kernel_counts, thunk_counts

# A loop of 64 known trips holding a loop of 3 trips bounded only by its condition, a
# Triton GEMM, a reduction, an asynchronous in-place update, a copy, a cuBLAS call and a
# command buffer of two fusions.
HLO = """HloModule fixture, is_scheduled=true

%fused_add (p0: f32[16,512], p1: f32[16,512]) -> f32[16,512] {
  %p0 = f32[16,512]{1,0} parameter(0)
  %p1 = f32[16,512]{1,0} parameter(1)
  ROOT %add = f32[16,512]{1,0} add(%p0, %p1)
}

%fused_dus (p0: f32[64,16], p1: f32[16], p2: s32[]) -> f32[64,16] {
  %p0 = f32[64,16]{1,0} parameter(0)
  %p1 = f32[16]{0} parameter(1)
  %p2 = s32[] parameter(2)
  %b = f32[1,16]{1,0} bitcast(%p1)
  %z = s32[] constant(0)
  ROOT %dus = f32[64,16]{1,0} dynamic-update-slice(%p0, %b, %p2, %z)
}

%fused_ds (p0: f32[64,16], p1: s32[]) -> f32[1,16] {
  %p0 = f32[64,16]{1,0} parameter(0)
  %v = f32[64,1,16]{2,1,0} bitcast(%p0)
  %p1 = s32[] parameter(1)
  %z = s32[] constant(0)
  %ds = f32[1,1,16]{2,1,0} dynamic-slice(%v, %p1, %z, %z), dynamic_slice_sizes={1,1,16}
  ROOT %row = f32[1,16]{1,0} bitcast(%ds)
}

%region_add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%fused_reduce (p0: f32[16,512]) -> f32[16] {
  %p0 = f32[16,512]{1,0} parameter(0)
  %c = f32[] constant(0)
  ROOT %r = f32[16]{0} reduce(%p0, %c), dimensions={1}, to_apply=%region_add
}

%gemm (p0: f32[16,512], p1: f32[16,512]) -> f32[16,16] {
  %p0 = f32[16,512]{1,0} parameter(0)
  %p1 = f32[16,512]{1,0} parameter(1)
  ROOT %d = f32[16,16]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={1}
}

%inner_body (t: (s32[], f32[16,512])) -> (s32[], f32[16,512]) {
  %t = (s32[], f32[16,512]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %x = f32[16,512]{1,0} get-tuple-element(%t), index=1
  %f = f32[16,512]{1,0} fusion(%x, %x), kind=kLoop, calls=%fused_add
  %one = s32[] constant(1)
  %i1 = s32[] add(%i, %one)
  ROOT %r = (s32[], f32[16,512]{1,0}) tuple(%i1, %f)
}

%inner_cond (t: (s32[], f32[16,512])) -> pred[] {
  %t = (s32[], f32[16,512]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%outer_body (t: (s32[], f32[16,512], f32[64,16])) -> (s32[], f32[16,512], f32[64,16]) {
  %t = (s32[], f32[16,512]{1,0}, f32[64,16]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %x = f32[16,512]{1,0} get-tuple-element(%t), index=1
  %buf = f32[64,16]{1,0} get-tuple-element(%t), index=2
  %g = f32[16,16]{1,0} fusion(%x, %x), kind=kCustom, calls=%gemm, backend_config={"fusion_backend_config":{"kind":"__triton_nested_gemm_fusion"}}
  %zero = s32[] constant(0)
  %it = (s32[], f32[16,512]{1,0}) tuple(%zero, %x)
  %inner = (s32[], f32[16,512]{1,0}) while(%it), condition=%inner_cond, body=%inner_body, metadata={op_name="jit(f)/inner/while"}
  %x2 = f32[16,512]{1,0} get-tuple-element(%inner), index=1
  %red = f32[16]{0} fusion(%x2), kind=kInput, calls=%fused_reduce
  %fs = ((f32[64,16]{1,0}, f32[16]{0}, s32[]), f32[64,16]{1,0}, u32[]) fusion-start(%buf, %red, %i), kind=kLoop, calls=%fused_dus
  %fd = f32[64,16]{1,0} fusion-done(%fs)
  %one = s32[] constant(1)
  %i1 = s32[] add(%i, %one)
  ROOT %r = (s32[], f32[16,512]{1,0}, f32[64,16]{1,0}) tuple(%i1, %x2, %fd)
}

%outer_cond (t: (s32[], f32[16,512], f32[64,16])) -> pred[] {
  %t = (s32[], f32[16,512]{1,0}, f32[64,16]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %n = s32[] constant(64)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%command_buffer (p0: f32[16,512]) -> f32[16,512] {
  %p0 = f32[16,512]{1,0} parameter(0)
  %a = f32[16,512]{1,0} fusion(%p0, %p0), kind=kLoop, calls=%fused_add
  ROOT %b = f32[16,512]{1,0} fusion(%a, %p0), kind=kLoop, calls=%fused_add
}

ENTRY %main (x: f32[16,512], buf: f32[64,16]) -> (f32[1,16], f32[16,16], f32[16,512]) {
  %x = f32[16,512]{1,0} parameter(0)
  %buf = f32[64,16]{1,0} parameter(1)
  %cp = f32[16,512]{1,0} copy(%x)
  %cb = f32[16,16]{1,0} custom-call(%x, %x), custom_call_target="__cublas$gemm"
  %graph = f32[16,512]{1,0} call(%x), to_apply=%command_buffer
  %zero = s32[] constant(0)
  %init = (s32[], f32[16,512]{1,0}, f32[64,16]{1,0}) tuple(%zero, %cp, %buf)
  %loop = (s32[], f32[16,512]{1,0}, f32[64,16]{1,0}) while(%init), condition=%outer_cond, body=%outer_body, metadata={op_name="jit(f)/outer/while"}, backend_config={"known_trip_count":{"n":"64"}}
  %res = f32[64,16]{1,0} get-tuple-element(%loop), index=2
  %ds = f32[1,16]{1,0} fusion(%res, %zero), kind=kLoop, calls=%fused_ds
  ROOT %out = (f32[1,16]{1,0}, f32[16,16]{1,0}, f32[16,512]{1,0}) tuple(%ds, %cb, %graph)
}
"""


def test_kernel_counts_multiply_loops_and_sort_kinds():
    r = kernel_counts(HLO)
    # entry: copy, cuBLAS, 2 in the command buffer, the slice = 5; each of the 64 outer
    # trips: GEMM, reduction, async update, counter = 4, plus the inner loop: 3 trips of
    # (fusion + counter) and its condition 3 + 1 times = 10
    assert r["kernels"] == 5 + 64 * (4 + 10) == 901
    assert r["host_launches"] == 901 - 2 + 1
    assert r["command_buffer_launches"] == 1
    assert r["by_kind"] == {"add": 64 * 3 + 64, "compare": 64 * 4,
                            "loop fusion": 64 * 3 + 2 + 1,
                            "async loop fusion": 64,
                            "custom fusion __triton_nested_gemm_fusion": 64,
                            "input fusion": 64, "copy": 1, "custom-call __cublas$gemm": 1}
    outer, inner = r["loops"]
    assert (outer["name"], outer["trips"], outer["kernels_per_trip"], outer["kernels"]) \
        == ("loop", 64, 14, 896)
    assert outer["op_name"] == "jit(f)/outer/while"
    assert (inner["name"], inner["trips"], inner["executions"], inner["kernels_per_trip"],
            inner["kernels"]) == ("inner", 3, 64, 2, 64 * 10)


def test_kernel_counts_traffic_counts_slices_at_their_size():
    r = kernel_counts(HLO)
    x = 16 * 512 * 4
    entry = (2 * x) + (2 * x + 16 * 16 * 4) + 2 * (3 * x) + (64 + 4 + 64)   # the slice: its
    # row, though the fusion reaches the buffer through a bitcast
    per_trip = ((2 * x + 16 * 16 * 4)            # GEMM
                + 3 * (3 * x + 12) + 4 * 9       # inner loop and its condition
                + (x + 64)                       # reduction
                + (64 + 4 + 64)                  # in-place update: the row, not the buffer
                + 12)                            # counter
    assert r["traffic_bytes"] == entry + 64 * per_trip


def test_kernel_counts_refuses_text_without_entry():
    with pytest.raises(ValueError, match="no ENTRY"):
        kernel_counts("HloModule m\n")


THUNKS = """001: kCopy         [source       | next=002 (1)] kCopy
002: kWhile        [prev=001 (1) | next=000 (1)]
condition:
    003: kCustomKernel [source | sink] loop_compare_fusion grid: [1, 1, 1] threads: [1, 1, 1]
  body:
    000: kCommandBuffer [source       | next=006 (1)]
        004: kCustomKernel [source       | next=005 (1)] gemm_fusion grid: [32, 1, 1]
        005: kCustomKernel [prev=004 (1) | sink        ] input_reduce_fusion grid: [1, 1, 1]
    006: kAsyncStart    [prev=000 (1) | sink        ] stream=computation_stream[0], async_id=6
        008: kDynamicSliceFusion [source | sink] params=1, results=1
            007: kCopy [source | sink] kCopy
    009: kAsyncDone     [source       | sink        ] async_id=6
    010: kCustomKernel [source | sink] loop_add_fusion grid: [1, 1, 1]
000: kCommandBuffer [prev=002 (1) | sink        ]
    011: kCustomKernel [source       | next=012 (1)] input_reduce_fusion_1 grid: [1, 1, 1]
    012: kGemm [prev=011 (1) | sink        ]
"""
METADATA = """thunk_metadata {
  thunk_info {
    profile_annotation: "copy.1"
    thunk_id: 1
  }
}
thunk_metadata {
  thunk_info {
    profile_annotation: "while.7"
    thunk_id: 2
  }
}
"""


def _loop_hlo(backend_config: str) -> str:
    return ("HloModule m\n\n%c (t: s32[]) -> pred[] {\n  %t = s32[] parameter(0)\n"
            "  %n = s32[] constant(5)\n  ROOT %lt = pred[] compare(%t, %n), direction=LT\n}\n\n"
            "%b (t: s32[]) -> s32[] {\n  ROOT %t = s32[] parameter(0)\n}\n\n"
            "ENTRY %e (a: s32[]) -> s32[] {\n  %a = s32[] parameter(0)\n"
            f"  ROOT %while.7 = s32[] while(%a), condition=%c, body=%b{backend_config}\n}}\n")


def test_thunk_counts_command_buffers_are_one_host_launch():
    hlo = _loop_hlo(', backend_config={"known_trip_count":{"n":"5"}}')
    r = thunk_counts(THUNKS, METADATA, hlo)
    assert r["kernels"] == 1 + 5 * 4 + 2 == 23
    assert r["host_launches"] == 1 + 5 * 3 + 1 == 17
    assert r["command_buffer_launches"] == 5 + 1
    assert r["by_kind"] == {"kCustomKernel": 16, "kCopy": 6, "kGemm": 1}


def test_thunk_counts_condition_runs_without_known_trip_count():
    r = thunk_counts(THUNKS, METADATA, _loop_hlo(""))
    assert r["kernels"] == 23 + 6          # the condition, trips + 1 times
    with pytest.warns(UserWarning, match="no HLO while loop"):
        bare = thunk_counts(THUNKS)
    assert bare["kernels"] == 1 + 4 + 2
    with pytest.raises(ValueError, match="no thunk"):
        thunk_counts("nothing here\n")


def test_h200_target_config_states_the_published_figures():
    text = gpu_kernels.h200_target_config()
    for line in ("core_count: 132", "cuda_compute_capability { major: 9 minor: 0 }",
                 "memory_bandwidth: 4800000000000", "device_memory_size: 141000000000",
                 "l2_cache_size: 62914560", "shared_memory_per_block_optin: 232448",
                 'device_description_str: "NVIDIA H200"', 'platform_name: "CUDA"'):
        assert line in text
    assert text.count("{") == text.count("}") == 2


def test_projection_adds_launch_and_traffic_terms():
    assert gpu_kernels.project_update_ms(10_000, 2.0) == 20.0
    assert gpu_kernels.project_update_ms(1000, 5.0, 4.8e9) == pytest.approx(5.0 + 1.0)
    with pytest.raises(ValueError, match="bandwidth > 0"):
        gpu_kernels.project_update_ms(1, 1.0, bandwidth_bytes_per_s=0)


@pytest.mark.parametrize("kw,msg", [({"seeds": 0}, "seeds must be"),
                                    ({"seeds": 1, "profile": "huge"}, "profile"),
                                    ({"seeds": 1, "precision": "fast"}, "precision")])
def test_compile_update_refuses_bad_arguments_before_compiling(kw, msg):
    with pytest.raises(ValueError, match=msg):
        gpu_kernels.compile_update(**kw)

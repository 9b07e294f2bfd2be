"""The traffic estimate of the benchmarks (benchmarks/lib/hlo_traffic.py) on hand-written
TPU HLO: padding by the layout's tile, HBM against on chip, loop trips, in-place updates,
sliced reads, async copies and source lines."""

import pytest

from benchmarks.lib.hlo_traffic import array_bytes, stack_sources, traffic

F = 4  # bytes of f32


def test_array_bytes_pads_the_minor_two_dims_of_the_layout_to_its_tile():
    # physical order (minor-to-major 0,2,1): [32, 4, 16]; 16 minor -> 128, 4 fits the tile's 4
    assert array_bytes("f32[16,32,4]{0,2,1:T(4,128)S(1)}") == [(16 * 32 * 4 * F, 32 * 4 * 128 * F,
                                                                 True)]
    assert array_bytes("f32[64,8,16,64]{3,2,1,0:T(8,128)}") == [(64 * 8 * 16 * 64 * F,
                                                                  64 * 8 * 16 * 128 * F, False)]
    # second-minor 3 -> 8 and minor 5 -> 128; s32 and a tuple give one entry per array
    assert array_bytes("(s32[3,5]{1,0:T(8,128)}, f32[7]{0})") == [(15 * 4, 8 * 128 * 4, False),
                                                                 (28, 28, False)]
    # no tile or no layout: the logical size; memory space 0 is not on chip
    assert array_bytes("f32[10,3]") == [(120, 120, False)]
    assert array_bytes("bf16[4,256]{1,0:T(8,128)(2,1)S(0)}") == [(2048, 8 * 256 * 2, False)]


HLO = """HloModule m, is_scheduled=true

FileNames
1 "/some/where/agent.py"
2 "/some/where/replay.py"

FunctionNames
1 "loss"
2 "gather"

FileLocations
1 {file_name_id=1 function_name_id=1 line=222 end_line=222 column=1 end_column=2}
2 {file_name_id=2 function_name_id=2 line=125 end_line=125 column=1 end_column=2}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=1}

%dus_body (p0: f32[64,8,128], p1: f32[8,128], p2: s32[]) -> f32[64,8,128] {
  %p0 = f32[64,8,128]{2,1,0:T(8,128)} parameter(0)
  %p1 = f32[8,128]{1,0:T(8,128)S(1)} parameter(1)
  %p2 = s32[]{:T(128)} parameter(2)
  %b = f32[1,8,128]{2,1,0:T(8,128)} bitcast(%p1)
  %z = s32[]{:T(128)} constant(0)
  ROOT %d = f32[64,8,128]{2,1,0:T(8,128)} dynamic-update-slice(%p0, %b, %p2, %z, %z)
}

%inner_slice (q0: f32[64,8,128], q1: s32[]) -> f32[8,128] {
  %q0 = f32[64,8,128]{2,1,0:T(8,128)} parameter(0)
  %q1 = s32[]{:T(128)} parameter(1)
  %z = s32[]{:T(128)} constant(0)
  %s = f32[1,8,128]{2,1,0:T(8,128)} dynamic-slice(%q0, %q1, %z, %z), dynamic_slice_sizes={1,8,128}
  ROOT %r = f32[8,128]{1,0:T(8,128)} bitcast(%s)
}

%read_body (r0: f32[64,8,128], r1: s32[], r2: f32[8,128]) -> f32[8,128] {
  %r0 = f32[64,8,128]{2,1,0:T(8,128)} parameter(0)
  %r1 = s32[]{:T(128)} parameter(1)
  %r2 = f32[8,128]{1,0:T(8,128)S(1)} parameter(2)
  %n = f32[8,128]{1,0:T(8,128)} fusion(%r0, %r1), kind=kLoop, calls=%inner_slice
  ROOT %a = f32[8,128]{1,0:T(8,128)S(1)} add(%n, %r2)
}

%cond (c: (s32[], f32[64,8,128], f32[8,128])) -> pred[] {
  %c = (s32[]{:T(128)}, f32[64,8,128]{2,1,0:T(8,128)}, f32[8,128]{1,0:T(8,128)S(1)}) parameter(0)
  %i = s32[]{:T(128)} get-tuple-element(%c), index=0
  %k = s32[]{:T(128)} constant(5)
  ROOT %lt = pred[]{:T(512)} compare(%i, %k), direction=LT
}

%body (t: (s32[], f32[64,8,128], f32[8,128])) -> (s32[], f32[64,8,128], f32[8,128]) {
  %t = (s32[]{:T(128)}, f32[64,8,128]{2,1,0:T(8,128)}, f32[8,128]{1,0:T(8,128)S(1)}) parameter(0)
  %i = s32[]{:T(128)} get-tuple-element(%t), index=0
  %buf = f32[64,8,128]{2,1,0:T(8,128)} get-tuple-element(%t), index=1
  %x = f32[8,128]{1,0:T(8,128)S(1)} get-tuple-element(%t), index=2
  %y = f32[8,128]{1,0:T(8,128)S(1)} fusion(%buf, %i, /*index=2*/%x), kind=kLoop, calls=%read_body, metadata={op_name="jit(f)/transpose(jvp())/mul" stack_frame_id=1}
  %w = f32[64,8,128]{2,1,0:T(8,128)} fusion(%buf, %y, %i), kind=kLoop, calls=%dus_body, metadata={op_name="jit(f)/dus" stack_frame_id=1}
  %one = s32[]{:T(128)} constant(1)
  %j = s32[]{:T(128)} add(%i, %one)
  ROOT %o = (s32[]{:T(128)}, f32[64,8,128]{2,1,0:T(8,128)}, f32[8,128]{1,0:T(8,128)S(1)}) tuple(%j, %w, %y)
}

%dcond (c: (s32[], s32[], f32[16,128])) -> pred[] {
  %c = (s32[]{:T(128)}, s32[]{:T(128)}, f32[16,128]{1,0:T(8,128)}) parameter(0)
  %i = s32[]{:T(128)} get-tuple-element(%c), index=0
  %n = s32[]{:T(128)} get-tuple-element(%c), index=1
  ROOT %lt = pred[]{:T(512)} compare(%i, %n), direction=LT
}

%dbody (t: (s32[], s32[], f32[16,128])) -> (s32[], s32[], f32[16,128]) {
  %t = (s32[]{:T(128)}, s32[]{:T(128)}, f32[16,128]{1,0:T(8,128)}) parameter(0)
  %i = s32[]{:T(128)} get-tuple-element(%t), index=0
  %n = s32[]{:T(128)} get-tuple-element(%t), index=1
  %v = f32[16,128]{1,0:T(8,128)} get-tuple-element(%t), index=2
  %e = f32[16,128]{1,0:T(8,128)} exponential(%v), metadata={op_name="jit(f)/exp" stack_frame_id=2}
  ROOT %o = (s32[]{:T(128)}, s32[]{:T(128)}, f32[16,128]{1,0:T(8,128)}) tuple(%i, %n, %e)
}

ENTRY %main (a: f32[64,8,128], b: f32[8,128], n: s32[], v: f32[16,128]) -> f32[16,128] {
  %a = f32[64,8,128]{2,1,0:T(8,128)} parameter(0)
  %b = f32[8,128]{1,0:T(8,128)S(1)} parameter(1)
  %n = s32[]{:T(128)} parameter(2)
  %v = f32[16,128]{1,0:T(8,128)} parameter(3)
  %zero = s32[]{:T(128)} constant(0)
  %init = (s32[]{:T(128)}, f32[64,8,128]{2,1,0:T(8,128)}, f32[8,128]{1,0:T(8,128)S(1)}) tuple(%zero, %a, %b)
  %loop = (s32[]{:T(128)}, f32[64,8,128]{2,1,0:T(8,128)}, f32[8,128]{1,0:T(8,128)S(1)}) while(%init), condition=%cond, body=%body
  %cs = (f32[16,128]{1,0:T(8,128)S(1)}, f32[16,128]{1,0:T(8,128)}, u32[]{:S(2)}) copy-start(%v)
  %cd = f32[16,128]{1,0:T(8,128)S(1)} copy-done(%cs)
  %dinit = (s32[]{:T(128)}, s32[]{:T(128)}, f32[16,128]{1,0:T(8,128)}) tuple(%zero, %n, %v)
  %dl = (s32[]{:T(128)}, s32[]{:T(128)}, f32[16,128]{1,0:T(8,128)}) while(%dinit), condition=%dcond, body=%dbody
  ROOT %r = f32[16,128]{1,0:T(8,128)} get-tuple-element(%dl), index=2
}
"""

ROW = 8 * 128 * F          # one f32[8,128] slice: no padding, 4 KiB


def test_traffic_counts_trips_in_place_updates_sliced_reads_copies_and_sources():
    t = traffic(HLO)
    # the loop of 5 trips: the read fusion takes one row of the HBM buffer (a dynamic-slice in
    # a nested fusion, not the whole buffer), the counter and the on-chip x, and writes y on
    # chip; the DUS fusion reads y (on chip) and the counter and writes one row into the HBM
    # buffer in place (not 64); add(i, 1) moves three scalars (s32[]: 4 bytes, in HBM)
    scalar = 4
    per_trip_hbm = (ROW + scalar) + (ROW + scalar) + 3 * scalar
    per_trip_chip = 2 * ROW + ROW                           # x and y; y again in the DUS fusion
    copy = 16 * 128 * F      # copy-start: the destination on chip, the source in HBM
    exp = 2 * 16 * 128 * F   # the loop with a traced bound counts once: exp reads and writes
    assert t["hbm"] == {"logical_bytes": 5 * per_trip_hbm + copy + exp,
                        "padded_bytes": 5 * per_trip_hbm + copy + exp}    # no padding here
    assert t["on_chip"] == {"logical_bytes": 5 * per_trip_chip + copy,
                            "padded_bytes": 5 * per_trip_chip + copy}
    assert t["dynamic_loops"] == 1
    rows = {r["source"]: r for r in t["by_source"]}
    assert rows["bwd agent.py:222"]["events"] == 5                  # the read fusion (transpose)
    assert rows["bwd agent.py:222"]["hbm_logical_bytes"] == 5 * (ROW + scalar)
    assert rows["fwd agent.py:222"]["hbm_logical_bytes"] == 5 * (ROW + scalar)
    assert rows["fwd replay.py:125"] == {"source": "fwd replay.py:125", "events": 1,
                                         "hbm_logical_bytes": exp, "hbm_padded_bytes": exp,
                                         "on_chip_padded_bytes": 0}
    assert not any("/" in r["source"] for r in t["by_source"])      # no directory leaves


def test_traffic_keeps_the_largest_sources_by_hbm_and_by_on_chip_bytes():
    # HBM bytes rank the agent lines, then replay.py:125 (16 KiB, nothing on chip), then the
    # unattributed counter adds and copy; on-chip bytes rank the agent lines, then those
    # (8 KiB: the copy's destination).  top=3 keeps the union, largest HBM bytes first
    rows = traffic(HLO, top=3)["by_source"]
    assert [r["source"] for r in rows] == ["bwd agent.py:222", "fwd agent.py:222",
                                           "fwd replay.py:125", "fwd ?"]
    assert rows[3]["on_chip_padded_bytes"] == 16 * 128 * F
    assert [r["source"] for r in traffic(HLO, top=2)["by_source"]] == [
        "bwd agent.py:222", "fwd agent.py:222"]


HLO2 = """HloModule m2

%slice_of (q0: f32[64,8,128], q1: s32[]) -> f32[1,8,128] {
  %q0 = f32[64,8,128]{2,1,0:T(8,128)} parameter(0)
  %q1 = s32[]{:T(128)} parameter(1)
  %z = s32[]{:T(128)} constant(0)
  ROOT %s = f32[1,8,128]{2,1,0:T(8,128)} dynamic-slice(%q0, %q1, %z, %z), dynamic_slice_sizes={1,8,128}
}

%dus_and_read (p0: f32[64,8,128], p1: f32[1,8,128], p2: s32[]) -> (f32[64,8,128], f32[8,128]) {
  %p0 = f32[64,8,128]{2,1,0:T(8,128)} parameter(0)
  %p1 = f32[1,8,128]{2,1,0:T(8,128)} parameter(1)
  %p2 = s32[]{:T(128)} parameter(2)
  %z = s32[]{:T(128)} constant(0)
  %d = f32[64,8,128]{2,1,0:T(8,128)} dynamic-update-slice(%p0, %p1, %p2, %z, %z)
  %r = f32[8,128]{1,0:T(8,128)} reduce(%p0, %z), dimensions={0}, to_apply=%slice_of
  ROOT %t = (f32[64,8,128]{2,1,0:T(8,128)}, f32[8,128]{1,0:T(8,128)}) tuple(%d, %r)
}

%small (b0: f32[8,128]) -> f32[8,128] {
  %b0 = f32[8,128]{1,0:T(8,128)} parameter(0)
  ROOT %e = f32[8,128]{1,0:T(8,128)} exponential(%b0)
}

%big (c0: f32[8,128]) -> f32[8,128] {
  %c0 = f32[8,128]{1,0:T(8,128)} parameter(0)
  %e = f32[8,128]{1,0:T(8,128)} exponential(%c0)
  ROOT %l = f32[8,128]{1,0:T(8,128)} log(%e)
}

ENTRY %main (a: f32[64,8,128], u: f32[1,8,128], i: s32[], x: f32[8,128], pr: pred[], f: s32[]) -> f32[8,128] {
  %a = f32[64,8,128]{2,1,0:T(8,128)S(1)} parameter(0)
  %u = f32[1,8,128]{2,1,0:T(8,128)S(1)} parameter(1)
  %i = s32[]{:T(128)S(6)} parameter(2)
  %x = f32[8,128]{1,0:T(8,128)} parameter(3)
  %pr = pred[]{:T(512)S(6)} parameter(4)
  %sl = f32[1,8,128]{2,1,0:T(8,128)} fusion(%a, %i), kind=kLoop, calls=%slice_of
  %both = (f32[64,8,128]{2,1,0:T(8,128)S(1)}, f32[8,128]{1,0:T(8,128)}) fusion(%a, %u, %i), kind=kLoop, calls=%dus_and_read
  ROOT %c = f32[8,128]{1,0:T(8,128)} conditional(%pr, %x, %x), true_computation=%small, false_computation=%big
}
"""


def test_traffic_files_fused_bytes_by_the_call_and_takes_the_largest_branch():
    t = traffic(HLO2)
    stacked = 64 * ROW
    # the sliced read of the on-chip buffer is one row on chip (the fused slice's own layout
    # names no memory space), its result one row in HBM; the scalar index is in scalar
    # memory (S(6)): neither
    sliced = (ROW, ROW)                                   # (HBM, on chip)
    # the buffer is also reduced whole inside the second fusion: not updated in place, so
    # read whole (on chip) and written whole (on chip), plus the update (on chip) and the
    # reduced row (HBM)
    both = (ROW, stacked + stacked + ROW)
    # the conditional: the larger branch (exp and log: 4 rows in HBM), not both branches
    branch = (4 * ROW, 0)
    assert t["hbm"]["padded_bytes"] == sliced[0] + both[0] + branch[0]
    assert t["on_chip"]["padded_bytes"] == sliced[1] + both[1] + branch[1]
    assert t["dynamic_loops"] == 0


def test_array_bytes_count_neither_for_flags_host_and_scalar_memory():
    assert array_bytes("u32[]{:S(2)}") == [(0, 0, False)]
    assert array_bytes("f32[8,128]{1,0:T(8,128)S(5)}") == [(0, 0, False)]
    assert array_bytes("s32[]{:T(128)S(6)}") == [(0, 0, False)]


def test_stack_sources_name_files_without_directories():
    assert stack_sources(HLO) == {1: "agent.py:222", 2: "replay.py:125"}


def test_traffic_refuses_text_without_an_entry():
    with pytest.raises(ValueError, match="ENTRY"):
        traffic("HloModule m\n")

"""Estimated memory traffic of a compiled XLA:TPU program, counted from its optimized HLO.

XLA's ``cost_analysis()`` gives one "bytes accessed" figure that counts a ``while`` body
once, counts a whole buffer where an op reads a slice of it or updates it in place, and
does not say which memory the bytes move in.  :func:`traffic` walks the optimized HLO text
of a TPU program instead (``jax.jit(f).lower(...).compile().as_text()``, compiled for a TPU
topology) and, per top-level instruction of every computation the entry reaches:

- counts the arrays it reads (operands) and writes (outputs), each at its **logical** size
  and at its **padded** size: the minor two dimensions of its layout rounded up to the
  layout's first tile, ``T(8,128)`` and the like (``{1,0:T(8,128)}``);
- files each array under **HBM** (a layout without a memory space, or ``S(0)``) or **on
  chip** (``S(1)``: XLA:TPU's vector memory, VMEM on a v5e); arrays in other memory
  spaces (``S(2)`` synchronisation flags, ``S(5)`` host memory, ``S(6)`` scalar memory)
  count in neither;
- multiplies by the trip counts of the ``while`` loops around it (XLA's
  ``known_trip_count``, else the constant bound of the loop's condition;
  :func:`hlo_cost.trip_count`).  A loop whose bound is not a constant (a ``fori_loop``
  over a traced count: the candidate's updates per vector step) counts once and is
  reported in ``dynamic_loops``.

What an op touches rather than what its operands hold:

- an in-place update (``dynamic-update-slice``, ``scatter``, top-level or as a fusion's
  root or root tuple element, its buffer a fusion parameter used by nothing else) reads
  and writes the update, not the buffer;
- a fusion operand read only through ``dynamic-slice`` (directly, or through a nested
  fusion's parameter) counts the slices read;
- the bytes a fusion moves in place of an operand or output are filed in the memory
  space of that operand or output;
- ``slice``, ``dynamic-slice`` and ``slice-start`` move the slice; ``copy-start`` reads its
  source and writes its destination, and the matching ``*-done`` counts nothing;
- ``parameter``, ``get-tuple-element``, ``tuple``, ``constant``, ``bitcast`` and control
  ops move nothing; ``call``, ``async-start`` and ``conditional`` count what their
  computations do (a conditional its largest branch).

These are estimates from the program text, not measurements: the runtime may keep an
array where the text does not say, a fusion may read an operand more than once, and
on-chip traffic is not bounded by HBM bandwidth.  Each row of ``by_source`` names the
innermost source line of the instruction's stack frame and its pass (``bwd`` when its
``op_name`` has ``transpose(``).  Standard library only.
"""

from __future__ import annotations

import re
from collections import defaultdict

from benchmarks.lib.hlo_cost import called, parse_computations, trip_count

__all__ = ["array_bytes", "stack_sources", "traffic"]

#: Bytes per element of the XLA element types (others count zero: tokens, opaque).
ELEMENT_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
                 "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8,
                 "c128": 16}
_ARRAY = re.compile(r"\b([a-z]+\d*)\[([\d,]*)\](?:\{([^}]*)\})?")
_MOVES_NOTHING = {"parameter", "get-tuple-element", "tuple", "constant", "bitcast", "while",
                  "conditional", "call", "after-all", "partition-id", "replica-id",
                  "copy-done", "slice-done", "async-start", "async-update", "async-done",
                  "opt-barrier"}
_SLICES = {"slice", "dynamic-slice"}


def _one_array(dtype: str, dims_text: str, layout: str | None) -> tuple[int, int, bool]:
    dims = [int(d) for d in dims_text.split(",") if d]
    size = ELEMENT_BYTES.get(dtype, 0)
    logical = size
    for d in dims:
        logical *= d
    space = re.search(r"S\((\d+)\)", layout) if layout else None
    space = int(space.group(1)) if space else 0
    if space not in (0, 1):                     # flags, host, scalar memory: neither
        return 0, 0, False
    on_chip = space == 1
    if not dims or not layout or ":" not in layout:
        return logical, logical, on_chip
    order_text, tiling = layout.split(":", 1)
    order = [int(x) for x in order_text.split(",") if x.strip()]
    tile = re.search(r"T\(([\d,]+)\)", tiling)
    if tile is None or sorted(order) != list(range(len(dims))):
        return logical, logical, on_chip
    phys = [dims[i] for i in reversed(order)]          # major .. minor
    t = [int(x) for x in tile.group(1).split(",")][-len(phys):]
    for k in range(1, len(t) + 1):
        phys[-k] = -(-phys[-k] // t[-k]) * t[-k]
    padded = size
    for d in phys:
        padded *= d
    return logical, padded, on_chip


def array_bytes(type_text: str) -> list[tuple[int, int, bool]]:
    """``(logical bytes, padded bytes, on chip)`` of each array in an HLO type text.

    ``"f32[16,32,4]{0,2,1:T(4,128)S(1)}"`` gives ``[(8192, 65536, True)]``: the layout's
    minor-to-major order ``0,2,1`` puts the 16 minor (padded to 128) and the 4 second-minor
    (a multiple of the tile's 4); ``S(1)`` is on chip.  A tuple type gives one entry per
    array; an array without a layout or a tile counts its logical size; an array in a
    memory space other than 0 and 1 counts ``(0, 0, False)``.
    """
    return [_one_array(m.group(1), m.group(2), m.group(3)) for m in _ARRAY.finditer(type_text)]


def _sum(arrays) -> list[int]:
    """``[hbm logical, hbm padded, chip logical, chip padded]`` of arrays."""
    out = [0, 0, 0, 0]
    for lo, pa, chip in arrays:
        out[2 * chip] += lo
        out[2 * chip + 1] += pa
    return out


def _add(a: list[int], b: list[int], sign: int = 1) -> list[int]:
    return [x + sign * y for x, y in zip(a, b)]


def _any_space(type_text: str) -> tuple[int, int]:
    """``(logical, padded)`` bytes of a type's arrays whatever their memory space (inside a
    fusion the layouts rarely name one: the caller files them)."""
    arrays = array_bytes(re.sub(r"S\(\d+\)", "", type_text))
    return sum(a for a, _, _ in arrays), sum(b for _, b, _ in arrays)


def stack_sources(hlo: str) -> dict[int, str]:
    """``{stack_frame_id: "file.py:line"}`` of the module's stack-frame tables (the file
    name without its directory: no path leaves this function)."""
    files, locs, frames = {}, {}, {}
    section = None
    for line in hlo.splitlines():
        s = line.strip()
        if s in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            section = s
            continue
        if line.startswith(("%", "ENTRY")):
            break
        if section == "FileNames":
            m = re.match(r'(\d+) "(.*)"$', s)
            if m:
                files[int(m.group(1))] = m.group(2).replace("\\", "/").rsplit("/", 1)[-1]
        elif section == "FileLocations":
            m = re.match(r"(\d+) \{file_name_id=(\d+) function_name_id=\d+ line=(\d+)", s)
            if m:
                locs[int(m.group(1))] = (int(m.group(2)), int(m.group(3)))
        elif section == "StackFrames":
            m = re.match(r"(\d+) \{file_location_id=(\d+)", s)
            if m:
                frames[int(m.group(1))] = int(m.group(2))
    out = {}
    for fid, loc in frames.items():
        if loc in locs:
            f, ln = locs[loc]
            out[fid] = f"{files.get(f, '?')}:{ln}"
    return out


def _name(operand: str) -> str:
    """The instruction name an operand text refers to (``/*index=5*/%x`` -> ``x``)."""
    m = re.search(r"%([\w.\-]+)\s*$", re.sub(r"/\*.*?\*/", "", operand))
    return m.group(1) if m else ""


class _Module:
    def __init__(self, hlo: str):
        self.comps = parse_computations(hlo)
        if "__entry__" not in self.comps:
            raise ValueError("no ENTRY computation in the HLO text")
        self.types = {c: {i["name"]: i["type"] for i in insts} for c, insts in self.comps.items()}
        self.sources = stack_sources(hlo)
        self._fusion_memo: dict[str, tuple[dict, list[int]]] = {}

    def operand_type(self, comp: str, operand: str) -> str:
        inline = re.sub(r"/\*.*?\*/", "", operand).split("%")[0]
        if _ARRAY.search(inline):
            return inline
        return self.types[comp].get(_name(operand), "")

    def _uses(self, comp: str, name: str) -> list[tuple[dict, int]]:
        """``(instruction, operand index)`` of every use of ``name`` in ``comp``."""
        return [(i, k) for i in self.comps.get(comp, [])
                for k, o in enumerate(i["operands"]) if _name(o) == name]

    def _sliced_read(self, comp: str, param: str) -> tuple[int, int] | None:
        """``(logical, padded)`` bytes read of ``param`` in fused ``comp`` if every use is
        a dynamic-slice of it (directly or through nested fusions), else None."""
        uses = self._uses(comp, param)
        if not uses:
            return None
        lo = pa = 0
        for inst, k in uses:
            if inst["op"] == "dynamic-slice" and k == 0:
                got = [_any_space(inst["type"])]
            elif inst["op"] == "fusion":
                sub = called(inst["attrs"], "calls")
                sub_param = self._param_name(sub[0], k) if sub else None
                r = None if sub_param is None else self._sliced_read(sub[0], sub_param)
                if r is None:
                    return None
                got = [r]
            else:
                return None
            lo += sum(a for a, _ in got)
            pa += sum(b for _, b in got)
        return lo, pa

    def _param_name(self, comp: str, index: int) -> str | None:
        for i in self.comps.get(comp, []):
            if i["op"] == "parameter" and i["operands"] == [str(index)]:
                return i["name"]
        return None

    def fusion_rules(self, comp: str) -> tuple[dict, dict]:
        """For fused computation ``comp``: ``{operand index: (logical, padded) bytes
        counted instead of the operand}`` and ``{output index: (logical, padded) bytes
        taken off that output}`` (an in-place buffer written as its update)."""
        if comp in self._fusion_memo:
            return self._fusion_memo[comp]
        insts = self.comps.get(comp, [])
        params = {i["name"]: int(i["operands"][0]) for i in insts if i["op"] == "parameter"}
        by_name = {i["name"]: i for i in insts}
        root = next((i for i in insts if i.get("root")), insts[-1] if insts else None)
        outs = [] if root is None else (
            [_name(o) for o in root["operands"]] if root["op"] == "tuple" else [root["name"]])
        replace, off = {}, {}
        for idx, o in enumerate(outs):
            i = by_name.get(o)
            if i is None or i["op"] not in ("dynamic-update-slice", "scatter") or \
                    len(i["operands"]) < 2:
                continue
            buf = _name(i["operands"][0])
            if buf not in params or len(self._uses(comp, buf)) != 1:
                continue
            upd = i["operands"][1] if i["op"] == "dynamic-update-slice" else i["operands"][-1]
            (wlo, wpa), (ulo, upa) = _any_space(i["type"]), _any_space(
                self.operand_type(comp, upd))
            replace[params[buf]] = (0, 0)
            off[idx] = (wlo - ulo, wpa - upa)
        for p, k in params.items():
            if k not in replace:
                r = self._sliced_read(comp, p)
                if r is not None:
                    replace[k] = r
        self._fusion_memo[comp] = (replace, off)
        return replace, off

    def inst_bytes(self, comp: str, inst: dict) -> list[int]:
        op = inst["op"]
        if op in _MOVES_NOTHING:
            return [0, 0, 0, 0]
        out = array_bytes(inst["type"])
        if op in _SLICES:
            src = array_bytes(self.operand_type(comp, inst["operands"][0]))
            chip = bool(src) and src[0][2]
            return _add(_sum(out), _sum([(lo, pa, chip) for lo, pa, _ in out]))
        if op == "slice-start":                  # ((operand), slice, context)
            if len(out) < 2:
                return _sum(out)
            lo, pa, _ = out[1]
            return _add(_sum([out[1]]), _sum([(lo, pa, out[0][2])]))
        if op == "copy-start":                   # (destination, source, context)
            return _sum(out[:2])
        replace, off = {}, {}
        if op == "fusion":
            sub = called(inst["attrs"], "calls")
            if sub:
                replace, off = self.fusion_rules(sub[0])
        elif op in ("dynamic-update-slice", "scatter") and len(inst["operands"]) >= 2:
            upd = inst["operands"][1] if op == "dynamic-update-slice" else inst["operands"][-1]
            u = _sum(array_bytes(self.operand_type(comp, upd)))
            whole = _sum(out)
            replace = {0: (0, 0)}
            off = {0: (whole[0] + whole[2] - u[0] - u[2], whole[1] + whole[3] - u[1] - u[3])}
        total = _sum(out)
        for idx, (lo, pa) in off.items():
            if idx < len(out):
                total = _add(total, _sum([(lo, pa, out[idx][2])]), -1)
        for k, operand in enumerate(inst["operands"]):
            arrays = array_bytes(self.operand_type(comp, operand))
            if k in replace:
                if arrays and arrays[0][:2] != (0, 0):
                    total = _add(total, _sum([(*replace[k], arrays[0][2])]))
            else:
                total = _add(total, _sum(arrays))
        return total

    def source(self, inst: dict) -> str:
        m = re.search(r"stack_frame_id=(\d+)", inst["attrs"])
        where = self.sources.get(int(m.group(1)), "?") if m else "?"
        name = re.search(r'op_name="([^"]*)"', inst["attrs"])
        return ("bwd " if name and "transpose(" in name.group(1) else "fwd ") + where


def traffic(hlo: str, top: int = 40) -> dict:
    """Estimated bytes one execution of the module's entry computation moves.

    Args:
      hlo: optimized HLO module text of a TPU program (module docstring for the rules).
      top: how many source lines ``by_source`` keeps: the ``top`` largest by HBM padded
        bytes and the ``top`` largest by on-chip padded bytes (their union, largest HBM
        bytes first).

    Returns:
      ``{"hbm": {"logical_bytes", "padded_bytes"}, "on_chip": {...}, "dynamic_loops":
      number of while loops counted once for want of a constant bound, "by_source":
      [{"source", "hbm_padded_bytes", "hbm_logical_bytes", "on_chip_padded_bytes",
      "events"}, ...]}`` (ints; ``events``: instruction executions).

    Raises:
      ValueError: the text has no entry computation.
    """
    mod = _Module(hlo)
    dynamic = [0]

    def walk(comp: str, mult: int, seen: tuple) -> tuple[list[int], dict]:
        """Bytes of one pass of ``comp`` times ``mult``: totals and per source line."""
        totals, rows = [0, 0, 0, 0], defaultdict(lambda: [0, 0, 0, 0])

        def merge(part):
            nonlocal totals
            totals = _add(totals, part[0])
            for src, r in part[1].items():
                rows[src] = _add(rows[src], r)

        for inst in mod.comps.get(comp, []):
            a = inst["attrs"]
            if inst["op"] == "while":
                n = trip_count(inst, mod.comps, warn=False, default=None)
                dynamic[0] += n is None
                for c in called(a, "body"):
                    if c not in seen:
                        merge(walk(c, mult * (n or 1), seen + (c,)))
                continue
            if inst["op"] == "conditional":
                branches = [walk(c, mult, seen + (c,))
                            for k in ("branch_computations", "true_computation",
                                      "false_computation")
                            for c in called(a, k) if c in mod.comps and c not in seen]
                if branches:
                    merge(max(branches, key=lambda br: br[0][1] + br[0][3]))
                continue
            if inst["op"] in ("call", "async-start"):
                for c in [c for k in ("to_apply", "calls") for c in called(a, k)]:
                    if c in mod.comps and c not in seen:
                        merge(walk(c, mult, seen + (c,)))
            b = mod.inst_bytes(comp, inst)
            if not any(b):
                continue
            totals = _add(totals, [x * mult for x in b])
            row = rows[mod.source(inst)]
            for j, x in enumerate((b[0], b[1], b[3])):
                row[j] += x * mult
            row[3] += mult
        return totals, rows

    totals, per_source = walk("__entry__", 1, ("__entry__",))
    by_hbm = sorted(per_source.items(), key=lambda kv: -kv[1][1])
    keep = {s for s, _ in by_hbm[:top]} | {
        s for s, _ in sorted(per_source.items(), key=lambda kv: -kv[1][2])[:top]}
    rows = [(s, r) for s, r in by_hbm if s in keep]
    return {"hbm": {"logical_bytes": totals[0], "padded_bytes": totals[1]},
            "on_chip": {"logical_bytes": totals[2], "padded_bytes": totals[3]},
            "dynamic_loops": dynamic[0],
            "by_source": [{"source": s, "hbm_logical_bytes": r[0], "hbm_padded_bytes": r[1],
                           "on_chip_padded_bytes": r[2], "events": r[3]}
                          for s, r in rows]}

"""Matmul FLOPs and GPU kernels of a compiled XLA program, counted from its optimized HLO text.

XLA's ``cost_analysis()`` counts a ``while`` body once and gives oneDNN custom calls zero
FLOPs.  :func:`matmul_flops` walks the
optimized HLO instead: every ``dot`` (``2 * prod(output) * prod(contracted lhs dims)``),
every ``convolution`` (``2 * prod(output) * prod(kernel) / output features``), every
``__onednn$matmul`` custom call (``2 * prod(output) * K``), recursing into fusions, calls
and conditionals (the largest branch), and multiplying each ``while`` body by its trip
count (XLA's ``known_trip_count`` backend config, else the constant bound of the loop
condition's compare; 1 with a warning when neither exists).  Elementwise work is not
counted.

:func:`kernel_counts` counts the GPU kernels of one execution of an XLA:GPU program from the
same text: the top-level instructions of the entry computation, of ``while`` bodies (times
their trip counts) and of called computations that launch work, by kind and by loop, with
the host launches that remain when XLA records sequences of them into command buffers (CUDA
graphs), and an estimate of their memory traffic.  :func:`thunk_counts` counts the same from
XLA:GPU's thunk-sequence dump, where this XLA forms its command buffers after the HLO
stage (the host launches ``benchmarks/gpu_kernels.py`` reports).  Standard library only.
"""

from __future__ import annotations

import json
import math
import re
import warnings

__all__ = ["called", "kernel_counts", "kernel_kind", "matmul_flops", "parse_computations",
           "thunk_counts", "trip_count"]

_HEADER = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*(\(.*\))?\s*->\s*.*\{\s*$")
_SHAPE = re.compile(r"\b([a-z]+\d*)\[([\d,]*)\]")


def _dims(shape_text: str) -> list[int]:
    m = _SHAPE.search(shape_text)
    if not m:
        return []
    return [int(d) for d in m.group(2).split(",") if d]


def _split_type(rest: str) -> tuple[str, str]:
    """Split ``"<type> <op>(...)..."`` into the type text and the remainder."""
    rest = rest.strip()
    if rest.startswith("("):
        depth = 0
        for i, ch in enumerate(rest):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0:
                return rest[:i + 1], rest[i + 1:].strip()
    i = rest.find(" ")
    return rest[:i], rest[i + 1:].strip()


def _operands(text: str) -> tuple[list[str], str]:
    """Operand texts of ``op(...)`` and the attribute text after it."""
    start = text.index("(")
    depth, i, parts, cur = 0, start, [], []
    for i in range(start, len(text)):
        ch = text[i]
        if ch in "([{":
            depth += 1
            if depth == 1:
                continue
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                break
        if ch == "," and depth == 1:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if cur:
        parts.append("".join(cur).strip())
    return parts, text[i + 1:]


def parse_computations(hlo: str) -> dict[str, list[dict]]:
    """Computations of an HLO module text: name -> list of instructions.

    Each instruction: ``{"name", "type", "op", "operands" (texts), "attrs" (text), "root"
    (bool: the computation's ROOT)}``.
    The entry computation is also stored under ``"__entry__"``.
    """
    comps: dict[str, list[dict]] = {}
    cur = None
    for line in hlo.splitlines():
        if cur is None:
            m = _HEADER.match(line.strip())
            if m:
                cur = comps.setdefault(m.group(2), [])
                if m.group(1):
                    comps["__entry__"] = cur
            continue
        s = line.strip()
        if s == "}":
            cur = None
            continue
        if " = " not in s:
            continue
        lhs, rest = s.split(" = ", 1)
        name = lhs.replace("ROOT", "").strip().lstrip("%")
        root = lhs.strip().startswith("ROOT")
        typ, rest = _split_type(rest)
        m = re.match(r"([\w\-$]+)\(", rest)
        if not m:
            continue
        ops, attrs = _operands(rest)
        cur.append({"name": name, "type": typ, "op": m.group(1), "operands": ops,
                    "attrs": attrs, "root": root})
    return comps


def _attr_list(attrs: str, key: str) -> list[int]:
    m = re.search(key + r"=\{([\d,]*)\}", attrs)
    return [int(x) for x in m.group(1).split(",") if x] if m else []


def called(attrs: str, key: str) -> list[str]:
    """Names of the computations an instruction's attribute ``key`` names (``body=%b``,
    ``branch_computations={%a, %b}``)."""
    m = re.search(key + r"=\{([^}]*)\}", attrs)
    if m:
        return [x.strip().lstrip("%") for x in m.group(1).split(",") if x.strip()]
    m = re.search(key + r"=%?([\w.\-]+)", attrs)
    return [m.group(1)] if m else []


def trip_count(inst: dict, comps: dict, warn: bool = True, default: int | None = 1):
    """Trip count of a ``while`` instruction: XLA's ``known_trip_count``, else the largest
    integer constant of its condition computation, else ``default`` (1, with a warning
    when ``warn``; None tells a loop without a constant bound)."""
    m = re.search(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)"?', inst["attrs"])
    if m:
        return int(m.group(1))
    cond = called(inst["attrs"], "condition")
    consts = []
    for c in cond:
        for i in comps.get(c, []):
            if i["op"] == "constant":
                mm = re.match(r"constant\((-?\d+)\)", "constant(" + ",".join(i["operands"]) + ")")
                if mm:
                    consts.append(int(mm.group(1)))
    if consts:
        return max(consts)
    if warn and default is not None:
        warnings.warn(f"while {inst['name']}: no trip count found; counting its body once")
    return default


def _operand_dims(text: str, symbols: dict) -> list[int]:
    """Dims of an operand: its inline shape, else its defining instruction's type."""
    if _SHAPE.search(text):
        return _dims(text)
    name = text.split()[-1].lstrip("%") if text.split() else ""
    return _dims(symbols.get(name, ""))


def _inst_flops(inst: dict, symbols: dict) -> float:
    op = inst["op"]
    out = _dims(inst["type"])
    if op == "dot":
        lhs = _operand_dims(inst["operands"][0], symbols)
        k = math.prod(lhs[d] for d in _attr_list(inst["attrs"], "lhs_contracting_dims"))
        return 2.0 * math.prod(out) * k
    if op == "convolution":
        kernel = _operand_dims(inst["operands"][1], symbols)
        feat = out[-1] if out else 1
        return 2.0 * math.prod(out) * math.prod(kernel) / max(feat, 1)
    if op == "custom-call" and "onednn$matmul" in inst["attrs"]:
        lhs = _operand_dims(inst["operands"][0], symbols)
        transpose_a = re.search(r'"transpose_a"\s*:\s*true', inst["attrs"]) is not None
        k = lhs[-2] if transpose_a and len(lhs) >= 2 else lhs[-1]
        return 2.0 * math.prod(out) * k
    return 0.0


def matmul_flops(hlo: str) -> float:
    """Matmul FLOPs of one execution of the module's entry computation.

    Args:
      hlo: optimized HLO module text (``jax.jit(f).lower(...).compile().as_text()``).

    Returns:
      FLOPs (float), while bodies multiplied by their trip counts.

    Raises:
      ValueError: the text has no entry computation.
    """
    comps = parse_computations(hlo)
    if "__entry__" not in comps:
        raise ValueError("no ENTRY computation in the HLO text")
    memo: dict[int, float] = {}

    def count(insts) -> float:
        key = id(insts)
        if key in memo:
            return memo[key]
        memo[key] = 0.0   # guards recursion
        total = 0.0
        symbols = {i["name"]: i["type"] for i in insts}
        for inst in insts:
            total += _inst_flops(inst, symbols)
            a = inst["attrs"]
            if inst["op"] == "while":
                n = trip_count(inst, comps)
                total += n * sum(count(comps[c]) for c in called(a, "body") if c in comps)
            elif inst["op"] == "conditional":
                branches = [count(comps[c]) for c in called(a, "branch_computations")
                            if c in comps]
                branches += [count(comps[c]) for k in ("true_computation", "false_computation")
                             for c in called(a, k) if c in comps]
                total += max(branches, default=0.0)
            elif inst["op"] in ("fusion", "call", "async-start", "custom-call"):
                for k in ("calls", "to_apply", "called_computations"):
                    total += sum(count(comps[c]) for c in called(a, k) if c in comps)
        memo[key] = total
        return total

    return count(comps["__entry__"])


#: Top-level operations that launch no kernel of their own on XLA:GPU (buffer aliasing,
#: tuples, control flow whose bodies are counted, the ends of asynchronous pairs).
NO_KERNEL_OPS = frozenset({
    "parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all",
    "add-dependency", "opt-barrier", "partition-id", "replica-id", "domain", "while",
    "conditional", "call", "async-start", "async-update", "async-done", "fusion-done",
    "copy-done",
    "send-done", "recv-done", "all-reduce-done", "all-gather-done",
    "collective-permute-done"})

_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4,
          "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}


def _type_bytes(type_text: str) -> int:
    """Bytes of every array of a type text (a tuple: the sum of its elements)."""
    return sum(_BYTES.get(m.group(1), 4) * math.prod(int(d) for d in m.group(2).split(",") if d)
               for m in _SHAPE.finditer(type_text) if m.group(1) in _BYTES)


def _ref(text: str) -> str:
    parts = text.split()
    return parts[-1].lstrip("%") if parts else ""


def kernel_kind(inst: dict, comps: dict | None = None) -> str:
    """The kind of a kernel-launching instruction: ``loop fusion``, ``input fusion``
    (reductions and scatters), ``output fusion``, ``custom fusion <backend kind>`` (Triton
    GEMMs: ``custom fusion __triton_nested_gemm_fusion`` and the like; without a backend
    kind, which XLA prints for none of the fusions that reuse another's kernel, ``custom
    fusion gemm`` or ``sort`` when its computation in ``comps`` holds a ``dot`` or a
    ``sort``, else ``custom fusion ?``), ``custom-call <target>``
    (``__cublas$gemm``, ...), else the operation's name (``copy``, ``sort``...).  A fusion
    launched asynchronously (``fusion-start``) gets the prefix ``async ``."""
    op, a = inst["op"], inst["attrs"]
    if op in ("fusion", "fusion-start"):
        pre = "async " if op == "fusion-start" else ""
        k = re.search(r"\bkind=k(\w+)", a)
        k = k.group(1) if k else "Unknown"
        if k == "Custom":
            b = re.search(r'"fusion_backend_config"\s*:\s*\{\s*"kind"\s*:\s*"([^"]+)"', a)
            if b:
                return pre + "custom fusion " + b.group(1)
            ops = {i["op"] for i in (comps or {}).get(next(iter(called(a, "calls")), ""), [])}
            return pre + "custom fusion " + ("gemm" if "dot" in ops else
                                              "sort" if "sort" in ops else "?")
        return pre + k.lower() + " fusion"
    if op == "custom-call":
        t = re.search(r'custom_call_target="([^"]+)"', a)
        return "custom-call " + (t.group(1) if t else "?")
    return "copy" if op == "copy-start" else op


def _kernel_bytes(inst: dict, types: dict, comps: dict) -> int:
    """Bytes a kernel reads and writes in device memory, as its operands and result: an
    operand a fusion only slices (``dynamic-slice``, also through ``bitcast``s) counts at the
    slices' size, one it only updates in place (operand 0 of ``dynamic-update-slice``) at
    nothing, and a result made by ``dynamic-update-slice`` at the update's size.  L2 reuse
    is ignored."""
    fused = comps.get(next(iter(called(inst["attrs"], "calls")), ""), None) \
        if inst["op"] in ("fusion", "fusion-start") else None
    if fused is None:
        return _type_bytes(inst["type"]) + sum(_type_bytes(types.get(_ref(o), ""))
                                               for o in inst["operands"])
    ftypes = {i["name"]: i["type"] for i in fused}
    users: dict[str, list] = {}
    for i in fused:
        for pos, o in enumerate(i["operands"]):
            users.setdefault(_ref(o), []).append((i, pos))

    def uses(name):   # the users of ``name``, looking through bitcasts (no data moved)
        out = []
        for u, pos in users.get(name, []):
            out += uses(u["name"]) if u["op"] == "bitcast" else [(u, pos)]
        return out

    total = 0
    for i in fused:
        if i["op"] != "parameter":
            continue
        idx = int(i["operands"][0]) if i["operands"] and i["operands"][0].isdigit() else -1
        outer = types.get(_ref(inst["operands"][idx]), i["type"]) \
            if 0 <= idx < len(inst["operands"]) else i["type"]
        us = uses(i["name"])
        if us and all(u["op"] == "dynamic-slice" and pos == 0 for u, pos in us):
            total += sum(_type_bytes(u["type"]) for u, _ in us)
        elif us and all(u["op"] == "dynamic-update-slice" and pos == 0 for u, pos in us):
            pass
        else:
            total += _type_bytes(outer)
    root = next((i for i in fused if i["root"]), None)
    outs = [root] if root is not None else []
    if root is not None and root["op"] == "tuple":
        by_name = {i["name"]: i for i in fused}
        outs = [by_name.get(_ref(o)) for o in root["operands"]]
    for o in outs:
        if o is None:
            continue
        if o["op"] == "dynamic-update-slice" and len(o["operands"]) > 1:
            total += _type_bytes(ftypes.get(_ref(o["operands"][1]), ""))
        else:
            total += _type_bytes(o["type"])
    return total


def kernel_counts(hlo: str) -> dict:
    """GPU kernels of one execution of an XLA:GPU program, from its optimized HLO text.

    A kernel is a top-level instruction of the entry computation, of a ``while`` body, of a
    ``call``-ed computation (command buffers included) or of an asynchronous computation
    (``async-start``) that is not in :data:`NO_KERNEL_OPS`: fusions (one kernel each, Triton
    GEMMs included), custom calls (cuBLAS GEMMs...), copies, sorts and any other unfused
    operation.  A ``while`` body counts its trip count times (:func:`trip_count`); a loop
    without XLA's ``known_trip_count`` also runs its condition ``trips + 1`` times; a
    ``conditional`` counts its largest branch.  Not visible in HLO and not counted: memsets
    XLA adds for atomics, and the extra kernels of a library call (a split-K reduction of
    cuBLAS).

    ``host_launches`` counts what the host submits: one per kernel, except that a call of a
    command buffer computation (name starting ``command_buffer``: a CUDA graph) is one launch
    however many kernels, loops included, it holds.

    Args:
      hlo: optimized HLO module text (``Compiled.as_text()`` of an XLA:GPU compile).

    Returns:
      ``{"kernels": int, "host_launches": int, "command_buffer_launches": int,
      "by_kind": {kind (:func:`kernel_kind`): kernels}, "loops": [{"name", "op_name",
      "depth" (0: in the entry), "trips", "executions" (times the loop runs per execution of
      the program), "kernels_per_trip", "kernels" (all its trips, all executions)}],
      "traffic_bytes": estimated device-memory bytes read and written by the kernels
      (:func:`_kernel_bytes`; float)}``.

    Raises:
      ValueError: the text has no entry computation.
    """
    comps = parse_computations(hlo)
    if "__entry__" not in comps:
        raise ValueError("no ENTRY computation in the HLO text")
    t = _walk_kernels(comps, comps["__entry__"], False, 0, ())
    return {"kernels": t["kernels"], "host_launches": t["host"],
            "command_buffer_launches": t["cb"],
            "by_kind": dict(sorted(t["by_kind"].items(), key=lambda kv: (-kv[1], kv[0]))),
            "loops": t["loops"], "traffic_bytes": float(t["bytes"])}


def _tally() -> dict:
    return {"kernels": 0, "host": 0, "cb": 0, "bytes": 0.0, "by_kind": {}, "loops": []}


def _add(into: dict, t: dict, times: int) -> None:
    """``into += times * t`` (loop records: their executions times ``times``)."""
    for k in ("kernels", "host", "cb", "bytes"):
        into[k] += times * t[k]
    for k, v in t["by_kind"].items():
        into["by_kind"][k] = into["by_kind"].get(k, 0) + times * v
    into["loops"] += [{**lp, "executions": lp["executions"] * times,
                       "kernels": lp["kernels"] * times} for lp in t["loops"]]


def _walk_kernels(comps: dict, insts: list, in_cb: bool, depth: int, stack: tuple,
                  prefix: str = "") -> dict:
    """The kernels of one execution of the computation ``insts`` (:func:`kernel_counts`);
    ``prefix`` goes before each kind (``"async "`` inside an ``async-start``)."""
    out = _tally()
    types = {i["name"]: i["type"] for i in insts}

    def sub(name, cb=in_cb, pre=prefix):
        return _walk_kernels(comps, comps[name], cb, depth + 1, stack + (name,), pre)

    for inst in insts:
        op, a = inst["op"], inst["attrs"]
        if op == "while":
            trips = trip_count(inst, comps)
            loop = _tally()
            for b in called(a, "body"):
                if b in comps and b not in stack:
                    _add(loop, sub(b), 1)
            per_trip = loop["kernels"]
            body = loop
            loop = _tally()
            _add(loop, body, trips)
            if '"known_trip_count"' not in a:
                for c in called(a, "condition"):
                    if c in comps and c not in stack:
                        _add(loop, sub(c), trips + 1)
            m = re.search(r'op_name="([^"]*)"', a)
            loop["loops"].insert(0, {"name": inst["name"], "op_name": m.group(1) if m else "",
                                     "depth": depth, "trips": trips, "executions": 1,
                                     "kernels_per_trip": per_trip,
                                     "kernels": loop["kernels"]})
            _add(out, loop, 1)
        elif op == "conditional":
            names = called(a, "branch_computations") + called(a, "true_computation") \
                + called(a, "false_computation")
            branches = [sub(b) for b in names if b in comps and b not in stack]
            if branches:
                _add(out, max(branches, key=lambda t: t["kernels"]), 1)
        elif op in ("call", "async-start"):
            for c in called(a, "to_apply") + called(a, "calls"):
                if c not in comps or c in stack:
                    continue
                cb = op == "call" and c.startswith("command_buffer")
                t = sub(c, in_cb or cb, "async " if op == "async-start" else prefix)
                if cb and not in_cb:
                    t["host"] += 1
                    t["cb"] += 1
                _add(out, t, 1)
        elif op not in NO_KERNEL_OPS:
            kind = prefix + kernel_kind(inst, comps)
            kind = kind.replace("async async ", "async ")
            out["by_kind"][kind] = out["by_kind"].get(kind, 0) + 1
            out["kernels"] += 1
            out["bytes"] += _kernel_bytes(inst, types, comps)
            out["host"] += 0 if in_cb else 1
    return out


#: Thunks that launch nothing themselves: containers (their contents are counted) and the
#: ends of asynchronous pairs.
THUNK_CONTAINERS = frozenset({"kCommandBuffer", "kWhile", "kConditional", "kSequential",
                              "kAsyncStart", "kAsyncDone", "kWaitForStreams",
                              "kDynamicSliceFusion"})
_THUNK = re.compile(r"^(\s*)(\d+):\s+(k\w+)")
_LABEL = re.compile(r"^(\s*)([A-Za-z][\w ]*):\s*$")


def _thunk_tree(lines: list[tuple[int, str]], start: int, end: int) -> list[dict]:
    """Thunks of ``lines[start:end]`` (``(indent, text)``) at the smallest indent there,
    each ``{"id", "kind", "sections": [(label, children)]}``."""
    out, i = [], start
    while i < end:
        ind, text = lines[i]
        m = _THUNK.match(text)
        if not m:
            i += 1
            continue
        j = i + 1
        while j < end and (lines[j][0] > ind or (_LABEL.match(lines[j][1]) is not None
                                                 and lines[j][0] <= ind + 2)):
            j += 1
        sections, label, k0 = [], "", i + 1
        for k in range(i + 1, j + 1):
            lab = _LABEL.match(lines[k][1]) if k < j else None
            if k == j or (lab and lines[k][0] <= ind + 2):
                if k > k0:
                    sections.append((label, _thunk_tree(lines, k0, k)))
                if lab:
                    label, k0 = lab.group(2).strip(), k + 1
        out.append({"id": int(m.group(2)), "kind": m.group(3), "text": text.strip(),
                    "sections": sections})
        i = j
    return out


def _thunk_names(metadata: str) -> dict[int, str]:
    """``thunk_id -> profile_annotation`` of a ``*.thunk_metadata.txt`` dump."""
    names = {}
    for m in re.finditer(r'profile_annotation:\s*"([^"]*)"\s*thunk_id:\s*(\d+)', metadata):
        names[int(m.group(2))] = m.group(1)
    return names


def thunk_counts(sequence: str, metadata: str = "", hlo: str = "") -> dict:
    """Kernel launches and host launches of one execution, from XLA:GPU's thunk sequence.

    XLA:GPU dumps (``xla_dump_to``) the executable's thunks as ``*.thunk_sequence.txt`` and,
    when a thunk pass changed them (command buffers: CUDA graphs), as
    ``*.thunk_sequence_after_thunk_passes.txt``; ``*.thunk_metadata.txt`` names each thunk
    by its HLO instruction.  Every thunk that is not in :data:`THUNK_CONTAINERS` is one
    launch on the GPU (a kernel, a memcpy, a memset, a library call).  ``kWhile`` runs its
    ``body`` section ``trips`` times (:func:`trip_count` of the HLO ``while`` the metadata
    names, 1 with a warning when the HLO is not given or has none) and its ``condition``
    ``trips + 1`` times unless the HLO loop has XLA's ``known_trip_count``; ``kConditional``
    counts its largest section.

    Returns:
      ``{"kernels": launches on the GPU, "host_launches": what the host submits (a
      ``kCommandBuffer`` is one, whatever it holds, loops included), "command_buffer_launches":
      how many of those are command buffers, "by_kind": {thunk kind: launches}}`` (ints).

    Raises:
      ValueError: the text holds no thunk line.
    """
    lines = [(len(t) - len(t.lstrip(" ")), t) for t in sequence.splitlines() if t.strip()]
    tree = _thunk_tree(lines, 0, len(lines))
    if not tree:
        raise ValueError("no thunk in the thunk sequence text")
    names = _thunk_names(metadata)
    comps = parse_computations(hlo) if hlo else {}
    whiles = {i["name"]: i for insts in comps.values() for i in insts if i["op"] == "while"}

    def walk(nodes, in_cb: bool) -> dict:
        t = {"kernels": 0, "host": 0, "cb": 0, "by_kind": {}}

        def add(u, times):
            for k in ("kernels", "host", "cb"):
                t[k] += times * u[k]
            for k, v in u["by_kind"].items():
                t["by_kind"][k] = t["by_kind"].get(k, 0) + times * v

        for n in nodes:
            kind, secs = n["kind"], n["sections"]
            if kind == "kWhile":
                inst = whiles.get(names.get(n["id"], ""))
                if inst is None:
                    warnings.warn(f"thunk {n['id']}: no HLO while loop; counting its body once")
                trips = trip_count(inst, comps) if inst is not None else 1
                known = inst is None or '"known_trip_count"' in inst["attrs"]
                for label, kids in secs:
                    if label == "body":
                        add(walk(kids, in_cb), trips)
                    elif label == "condition" and not known:
                        add(walk(kids, in_cb), trips + 1)
            elif kind == "kConditional":
                branches = [walk(kids, in_cb) for _, kids in secs]
                if branches:
                    add(max(branches, key=lambda u: u["kernels"]), 1)
            elif kind == "kCommandBuffer":
                for _, kids in secs:
                    add(walk(kids, True), 1)
                if not in_cb:
                    t["host"] += 1
                    t["cb"] += 1
            elif kind in THUNK_CONTAINERS:
                for _, kids in secs:
                    add(walk(kids, in_cb), 1)
            else:
                t["kernels"] += 1
                t["host"] += 0 if in_cb else 1
                t["by_kind"][kind] = t["by_kind"].get(kind, 0) + 1
        return t

    t = walk(tree, False)
    return {"kernels": t["kernels"], "host_launches": t["host"],
            "command_buffer_launches": t["cb"],
            "by_kind": dict(sorted(t["by_kind"].items(), key=lambda kv: (-kv[1], kv[0])))}


def _main():  # pragma: no cover - manual use
    import sys
    print(json.dumps({"matmul_flops": matmul_flops(open(sys.argv[1]).read())}))


if __name__ == "__main__":  # pragma: no cover
    _main()

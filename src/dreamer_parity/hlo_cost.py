"""Matmul FLOPs of a compiled XLA program, counted from its optimized HLO text.

XLA's ``cost_analysis()`` counts a ``while`` body once and gives oneDNN custom calls zero
FLOPs.  :func:`matmul_flops` walks the
optimized HLO instead: every ``dot`` (``2 * prod(output) * prod(contracted lhs dims)``),
every ``convolution`` (``2 * prod(output) * prod(kernel) / output features``), every
``__onednn$matmul`` custom call (``2 * prod(output) * K``), recursing into fusions, calls
and conditionals (the largest branch), and multiplying each ``while`` body by its trip
count (XLA's ``known_trip_count`` backend config, else the constant bound of the loop
condition's compare; 1 with a warning when neither exists).  Elementwise work is not
counted.  Standard library only.
"""

from __future__ import annotations

import json
import math
import re
import warnings

__all__ = ["called", "matmul_flops", "parse_computations", "trip_count"]

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


def _main():  # pragma: no cover - manual use
    import sys
    print(json.dumps({"matmul_flops": matmul_flops(open(sys.argv[1]).read())}))


if __name__ == "__main__":  # pragma: no cover
    _main()

"""The package's import graph has no circle, counting imports inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = "dreamer_parity"


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / PKG).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict) -> set[str]:
    """Modules of the package that ``name`` imports anywhere in its file."""
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = here[:len(here) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for t in targets:
            # the longest prefix of t that is a module of the package
            parts = t.split(".")
            for k in range(len(parts), 0, -1):
                cand = ".".join(parts[:k])
                if cand in modules:
                    if cand != name and cand != PKG:
                        found.add(cand)
                    break
    return found


def import_graph() -> nx.DiGraph:
    modules = _modules()
    g = nx.DiGraph()
    for name, path in modules.items():
        g.add_node(name)
        for dep in _imports(name, path, modules):
            g.add_edge(name, dep)
    return g


def test_graph_sees_imports_inside_functions():
    g = import_graph()
    # pipeline imports analysis.compare inside _cmd_compare, sides at the top
    assert g.has_edge("dreamer_parity.pipeline", "dreamer_parity.analysis.compare")
    assert g.has_edge("dreamer_parity.pipeline", "dreamer_parity.sides")
    assert g.number_of_edges() > 50


def test_no_import_circle():
    g = import_graph()
    cycles = list(nx.simple_cycles(g))
    # a package importing its own submodule (``__init__`` re-exports) is not a circle
    cycles = [c for c in cycles if len(c) > 1]
    assert not cycles, "import circles: " + "; ".join(" -> ".join(c + [c[0]]) for c in cycles[:5])


def test_detects_a_circle(tmp_path):
    pkg = tmp_path / PKG
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("def f():\n    from . import b\n")
    (pkg / "sub" / "b.py").write_text("from dreamer_parity.sub.a import f\n")
    global SRC
    old, SRC = SRC, tmp_path
    try:
        cycles = [c for c in nx.simple_cycles(import_graph()) if len(c) > 1]
    finally:
        SRC = old
    assert sorted(cycles[0]) == ["dreamer_parity.sub.a", "dreamer_parity.sub.b"]

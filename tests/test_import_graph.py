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


# --- tests/ and benchmarks/ import the package, never each other ----------------------------

REPO = SRC.parent


def _reaches(path: Path, other: str, names: set[str]) -> bool:
    """Whether the Python file ``path`` imports from the folder ``other`` of the repository:
    ``import other...``/``from other...``, one of its module ``names``, or a path given to
    ``sys.path`` or ``spec_from_file_location`` in a file that names the folder."""
    source = path.read_text(encoding="utf-8")
    names_other = any(f"{q}{other}{end}" in source for q in "\"'/" for end in "\"'/")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            mods = [node.module or ""]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("insert", "append", "spec_from_file_location"):
            # a path built elsewhere in the file counts when the file names the folder
            if (node.func.attr == "spec_from_file_location" or "sys.path" in ast.unparse(node)) \
                    and names_other:
                return True
            continue
        else:
            continue
        if any(m.split(".")[0] in {other} | names for m in mods):
            return True
    return False


def test_tests_and_benchmarks_do_not_import_each_other():
    test_mods = {p.stem for p in (REPO / "tests").glob("*.py")}
    bench_mods = {p.stem for p in (REPO / "benchmarks").glob("*.py")}
    bench_files = sorted((REPO / "benchmarks").rglob("*.py")) + sorted(
        (REPO / "measurements").rglob("*.py"))
    wrong = [str(p.relative_to(REPO)) for p in bench_files if _reaches(p, "tests", test_mods)]
    assert not wrong, f"benchmarks importing tests: {wrong}"
    loading = sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("*.py")
                     if _reaches(p, "benchmarks", bench_mods))
    assert not loading, f"tests loading a benchmark script: {loading}"


def test_the_import_check_sees_each_form(tmp_path):
    cases = {"from benchmarks.lib.cli import x\n": True,
             "import device_reference\n": True,
             "sys.path.insert(0, str(REPO / 'benchmarks'))\n": True,
             "S = REPO / 'benchmarks' / 'm.py'\nimportlib.util.spec_from_file_location('m', S)\n": True,
             "T = 'benchmarks/m.py'\nimportlib.util.spec_from_file_location('m', REPO / T)\n": True,
             "S = REPO / 'benchmarks' / 'm.py'\nsubprocess.run([sys.executable, str(S)])\n": False,
             "from dreamer_parity import params\n": False,
             "subprocess.run([sys.executable, 'benchmarks/x.py'])\n": False}
    for i, (text, want) in enumerate(cases.items()):
        f = tmp_path / f"t{i}.py"
        f.write_text(text)
        assert _reaches(f, "benchmarks", {"device_reference"}) is want, text

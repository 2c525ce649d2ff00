"""No import circles among worldtune's modules, read statically from the source (nothing is imported).

Two graphs are checked. Module-level imports (statements that run when a module is imported, outside
`if TYPE_CHECKING:`) must form no cycle at all: a cycle there makes the import order matter. Function-level
(lazy) imports count too, as one-way dependencies: a lazy import from A to B next to any import from B back
to A is a circle that only deferring hides (a base class that imports its own subclasses, say), so the graph
of all imports together must be acyclic as well.
"""

from __future__ import annotations

import ast
from pathlib import Path

import worldtune

SRC = Path(worldtune.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.Module, module: str, is_package: bool, modules: set[str]) -> tuple[set[str], set[str]]:
    """(module-level, function-level) worldtune modules this one imports. `from a.b import c` names module a.b.c
    where that is a module, else a name defined in a.b (so a.b itself)."""
    top: set[str] = set()
    lazy: set[str] = set()

    def targets(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        base = node.module or ""
        if node.level:
            anchor = module.split(".") if is_package else module.split(".")[:-1]
            anchor = anchor[:len(anchor) - (node.level - 1)]
            base = ".".join(anchor + ([base] if base else []))
        return [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                children = child.orelse  # the TYPE_CHECKING branch never runs
                for sub in children:
                    visit_one(sub, in_function)
            else:
                visit_one(child, in_function)

    def visit_one(child: ast.AST, in_function: bool) -> None:
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            (lazy if in_function else top).update(t for t in targets(child) if t in modules and t != module)
        visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return top, lazy - top


def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module-level edges, function-level edges) between worldtune modules, by module name."""
    files = {_module_name(p): p for p in SRC.rglob("*.py")}
    top: dict[str, set[str]] = {}
    lazy: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top[name], lazy[name] = _imports(tree, name, path.name == "__init__.py", set(files))
    return top, lazy


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return sorted(found)


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_imports():
    top, lazy = import_graph()
    assert "worldtune.errors" in top["worldtune.cli"] or "worldtune.errors" in lazy["worldtune.cli"]
    assert sum(len(v) for v in top.values()) > 100


def _say(found: list[list[str]]) -> str:
    return "import circles among: " + "; ".join(", ".join(c) for c in found)


def test_no_module_level_import_cycle():
    top, _ = import_graph()
    found = cycles(top)
    assert not found, _say(found)


def test_no_import_cycle_counting_function_level_imports():
    top, lazy = import_graph()
    found = cycles({m: top[m] | lazy[m] for m in top})
    assert not found, _say(found)

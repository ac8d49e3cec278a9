"""No import cycle among the package's modules.

Every import counts: module level, inside a function, and under `if TYPE_CHECKING:` (a
cycle hidden behind a lazy or annotation-only import is still two modules that need
each other). A package's `__init__` is not a node of its own: importing `a.b` names the
module `a.b`, and `from a import b` names `a.b` when `b` is a module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import jobledger

ROOT = Path(jobledger.__file__).parent


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_names(tree: ast.Module, name: str, is_package: bool) -> set[str]:
    """Every dotted name an import in `tree` may refer to (the module itself, and for
    `from m import x` also `m.x`, which is a module when `x` is one)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module → the package's modules it imports (packages' `__init__` left out)."""
    files = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    modules = {n for n, p in files.items() if p.name != "__init__.py"}
    graph: dict[str, set[str]] = {}
    for name in sorted(modules):
        path = files[name]
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        graph[name] = (imported_names(tree, name, is_package=False) & modules) - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterable[str]]] = []
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        work.append((start, iter(sorted(graph[start]))))
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def test_the_detector_finds_a_cycle_behind_type_checking_and_in_a_function(
    tmp_path: Path,
) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    for init in (package / "__init__.py", package / "sub" / "__init__.py"):
        init.write_text("from pkg.sub import b\n")  # a re-export is not a node
    (package / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub.b import B\n"
    )
    (package / "sub" / "b.py").write_text("def f():\n    from .. import a\n")
    (package / "c.py").write_text("import pkg.a\n")
    graph = import_graph(package)
    assert graph == {"pkg.a": {"pkg.sub.b"}, "pkg.sub.b": {"pkg.a"}, "pkg.c": {"pkg.a"}}
    assert cycles(graph) == [["pkg.a", "pkg.sub.b"]]


def test_the_package_has_no_import_cycle() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)

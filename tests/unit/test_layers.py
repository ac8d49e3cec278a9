"""The package's layers import downwards only (docs/architecture.md, "The parts").

Imports under `if TYPE_CHECKING:` are annotations, not dependencies, and are ignored.
The wiring at the top (`app`, `pod`, `cli`, `testing`) may import anything. Inside a
part, the subpackages keep their own order (`INSIDE`): the HTTP layer's reads below its
routes, the schedule domain above the job domain, the two target kinds apart.
"""

from __future__ import annotations

import ast
from pathlib import Path

import jobledger

ROOT = Path(jobledger.__file__).parent

#: each part and the parts it may import at run time
ALLOWED: dict[str, set[str]] = {
    "domain": set(),
    "core": {"domain"},
    "config": {"domain"},
    "storage": {"core", "domain"},
    "observability": {"config", "core", "domain"},
    "engine": {"config", "core", "domain", "observability", "storage"},
    "admin": {"core", "domain", "storage"},
    "projections": {"config", "core", "domain", "observability", "storage"},
    "reactors": {"admin", "config", "core", "domain", "observability", "storage"},
    "targets": {"config", "core", "domain", "observability", "storage"},
    "http": {"admin", "config", "core", "domain", "observability", "projections", "storage"},
    "integrations": {"core", "domain", "engine", "storage"},
}


#: modules under a prefix (left) and the prefixes they must not import at run time
INSIDE: dict[str, set[str]] = {
    "domain.jobs": {"domain.schedules"},
    "domain.job_commands": {"domain.schedules"},
    "domain.job_outcomes": {"domain.schedules"},
    "http.queries": {"http.routes", "http.app", "http.openapi", "http.openapi_html"},
    "admin.jobs": {"admin.schedules"},
    "admin.schedules": {"admin.jobs"},
    "targets.kafka": {"targets.lossy"},
    "targets.lossy": {"targets.kafka"},
}


def part_of(path: Path) -> str:
    rel = path.relative_to(ROOT).parts
    return rel[0] if len(rel) > 1 else rel[0].removesuffix(".py")


def runtime_imports(tree: ast.Module) -> set[str]:
    """The jobledger parts a module imports, outside `if TYPE_CHECKING:` blocks."""
    return {name.split(".")[0] for name in runtime_modules(tree)}


def runtime_modules(tree: ast.Module) -> set[str]:
    """The jobledger modules a module imports (dotted, without `jobledger.`; for `from m
    import x` also `m.x`), outside `if TYPE_CHECKING:` blocks."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "jobledger" and len(parts) > 1:
                found.add(".".join(parts[1:]))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def test_parts_import_downwards_only() -> None:
    wrong = []
    for path in sorted(ROOT.rglob("*.py")):
        part = part_of(path)
        if part not in ALLOWED:
            continue
        imported = runtime_imports(ast.parse(path.read_text(encoding="utf-8"))) - {part}
        for target in sorted(imported - ALLOWED[part]):
            wrong.append(f"{path.relative_to(ROOT)} imports jobledger.{target}")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_subpackages_keep_their_order() -> None:
    wrong = []
    for path in sorted(ROOT.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        imported = runtime_modules(ast.parse(path.read_text(encoding="utf-8")))
        for prefix, forbidden in INSIDE.items():
            if not within(module, prefix):
                continue
            for name in sorted(imported):
                if any(within(name, bad) for bad in forbidden):
                    wrong.append(f"{path.relative_to(ROOT)} imports jobledger.{name}")
    assert not wrong, "imports against the order inside a part:\n" + "\n".join(wrong)


def test_every_inside_rule_names_modules_that_exist() -> None:
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts) for p in ROOT.rglob("*.py")}
    named = set(INSIDE) | set().union(*INSIDE.values())
    assert {n for n in named if not any(within(m, n) for m in modules)} == set()


def test_every_part_has_a_rule() -> None:
    wiring = {"__init__", "__main__", "app", "pod", "cli", "testing"}
    parts = {part_of(p) for p in ROOT.rglob("*.py")}
    assert parts - wiring <= set(ALLOWED)


def test_type_checking_imports_do_not_count() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "import jobledger.domain\n"
        "if TYPE_CHECKING:\n    from jobledger.engine import Engine\n"
        "def f():\n    from jobledger.http import app\n"
    )
    assert runtime_imports(tree) == {"domain", "http"}

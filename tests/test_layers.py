"""The house's layering, read from the installed package's source: the library never
imports the daemon or the web app, and no two modules import each other, even only
for type checking (the entry points' lazy imports inside a command are allowed)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import jobq
import web

pytestmark = pytest.mark.unit

# The entry points may start the daemon (lazily, inside the command that needs it).
ENTRY_POINTS = {"jobq.cli", "jobq.__main__", "jobq.dev"}


def modules() -> dict[str, Path]:
    found = {}
    for package in (jobq, web):
        root = Path(package.__file__).parent
        for path in root.rglob("*.py"):
            parts = path.relative_to(root.parent).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports(path: Path, name: str, known: set[str], *, outside_functions: bool = False) -> set[str]:
    """The project modules ``name`` imports (``from a import b`` counts a.b when it is a
    module); with ``outside_functions``, not those a function imports when it runs."""
    tree = ast.parse(path.read_text())
    nodes = list(_outside_functions(tree) if outside_functions else ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.rsplit(".", node.level)[0] if path.name != "__init__.py" else name
                base = f"{package}.{base}" if base else package
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return {m for m in found if m in known}


def _outside_functions(node: ast.AST):
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield child
            yield from _outside_functions(child)


def test_the_library_never_imports_the_daemon_and_jobq_never_imports_web():
    known = modules()
    for name, path in known.items():
        if not name.startswith("jobq"):
            continue
        found = imports(path, name, set(known))
        assert not {m for m in found if m.startswith("web")}, f"{name} imports the web app"
        if name.startswith("jobq.daemon") or name in ENTRY_POINTS:
            continue
        assert not {m for m in found if m.startswith("jobq.daemon")}, f"library module {name} imports the daemon"


def test_no_import_cycle_among_the_modules_not_even_for_type_checking():
    known = modules()
    graph = {name: imports(path, name, set(known), outside_functions=True) - {name} for name, path in known.items()}
    for name, deps in graph.items():  # a package is imported with its module: not a cycle
        graph[name] = {d for d in deps if not name.startswith(d + ".")}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            cycle = path[path.index(name):] + [name]
            raise AssertionError("import cycle: " + " -> ".join(cycle))
        if name in done:
            return
        for dep in sorted(graph[name]):
            visit(dep, [*path, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])

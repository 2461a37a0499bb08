"""The house's layering, read from the installed package's source: the library never
imports the daemon or the web app (only the CLI starts the daemon), no import cycle
anywhere, counting the imports a function makes when it runs and a module importing
its own package's ``__init__``; and the shape of the house (rooms, not a flat folder;
no module too long to read in one sitting)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import jobq
import web

pytestmark = pytest.mark.unit

# The one module of the library that may import the daemon: `jobq worker` starts it.
STARTS_THE_DAEMON = {"jobq.cli.main"}
MAX_TOP_LEVEL_MODULES = 12
MIN_SUBPACKAGES = 5
MAX_LINES = 400


def modules() -> dict[str, Path]:
    """Every module of jobq and web, by dotted name (a package by its own name)."""
    found = {}
    for package in (jobq, web):
        root = Path(package.__file__).parent
        for path in root.rglob("*.py"):
            parts = path.relative_to(root.parent).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The project modules ``name`` imports, at load time or inside a function.
    ``from a import b`` is an import of the module ``a.b`` when there is one, else of
    ``a`` itself (its ``__init__``, where ``b`` is defined or re-exported)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {m for m in found if m in known} - {name}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(path, name, set(known)) for name, path in known.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``edges`` (its modules in order, the first repeated last), or None."""
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str] | None:
        if name in path:
            return path[path.index(name):] + [name]
        if name in done:
            return None
        for dep in sorted(edges.get(name, ())):
            cycle = visit(dep, [*path, name])
            if cycle:
                return cycle
        done.add(name)
        return None

    for name in sorted(edges):
        cycle = visit(name, [])
        if cycle:
            return cycle
    return None


def test_the_library_never_imports_the_daemon_and_jobq_never_imports_web():
    for name, deps in graph().items():
        if not name.startswith("jobq"):
            continue
        assert not {m for m in deps if m.startswith("web")}, f"{name} imports the web app"
        if name.startswith("jobq.daemon") or name in STARTS_THE_DAEMON:
            continue
        assert not {m for m in deps if m.startswith("jobq.daemon")}, f"library module {name} imports the daemon"


def test_no_import_cycle_counting_function_level_imports_and_package_inits():
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_sees_a_cycle_through_a_function_level_import_and_a_package_init(tmp_path):
    """The two ways a cycle hid before: ``import`` inside a function, and a submodule
    importing a name from its own package's ``__init__``, which imports it back."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from pkg.cli import main\n")
    (tmp_path / "pkg" / "cli.py").write_text("def main():\n    from pkg.sub import helper\n")
    (tmp_path / "pkg" / "sub.py").write_text("from pkg import main\n\ndef helper(): ...\n")
    known = {"pkg": tmp_path / "pkg" / "__init__.py", "pkg.cli": tmp_path / "pkg" / "cli.py",
             "pkg.sub": tmp_path / "pkg" / "sub.py"}
    edges = {name: imports(path, name, set(known)) for name, path in known.items()}
    assert edges == {"pkg": {"pkg.cli"}, "pkg.cli": {"pkg.sub"}, "pkg.sub": {"pkg"}}
    assert find_cycle(edges) == ["pkg", "pkg.cli", "pkg.sub", "pkg"]
    edges["pkg.sub"] = set()
    assert find_cycle(edges) is None


def test_package_inits_only_re_export_from_below():
    """An ``__init__`` holds a docstring and re-exports of its own submodules' names."""
    for name, path in modules().items():
        if path.name != "__init__.py":
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                continue
            if isinstance(node, ast.ImportFrom):
                assert (node.module or "").startswith(name + "."), f"{name}/__init__ imports {node.module}"
            elif isinstance(node, ast.Import):
                assert all(a.name.startswith(name + ".") for a in node.names), f"{name}/__init__ imports upward"
            else:
                assert isinstance(node, (ast.Expr, ast.Assign)), f"{name}/__init__ holds code ({type(node).__name__})"


def test_the_library_is_rooms_not_a_flat_folder():
    root = Path(jobq.__file__).parent
    top = sorted(p.name for p in root.glob("*.py"))
    packages = sorted(p.name for p in root.iterdir() if (p / "__init__.py").exists())
    assert len(top) <= MAX_TOP_LEVEL_MODULES, f"{len(top)} modules directly in jobq/: {top}"
    assert len(packages) >= MIN_SUBPACKAGES, packages


def test_no_module_too_long_to_read_in_one_sitting():
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"

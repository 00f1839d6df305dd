"""No import circle in kb_cli, at any level: the module graph read from the source with
`ast`, counting what import-linter's contracts (pyproject.toml) do not see together: an
import inside a function (kept there so a command does not pay for a module it never
uses), a package's __init__ importing its own modules, and
`importlib.import_module(f"kb_cli.parsers.{...}")`, which may load any module the
prefix names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Every module of `package` under `root` by its dotted name; a package by its own."""
    names = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of `package` it imports, wherever in the module it does."""
    modules = module_names(root, package)
    return {
        name: {target for target in _imports(path, name, modules) if target != name}
        for name, path in modules.items()
    }


def _imports(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {_nearest(alias.name, modules) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, name, is_package)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in modules else _nearest(base, modules))
        elif isinstance(node, ast.Call) and _calls_import_module(node) and node.args:
            found |= _loaded_by(node.args[0], modules)
    return found - {""}


def _absolute(node: ast.ImportFrom, name: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    here = name.split(".") if is_package else name.split(".")[:-1]
    anchor = here[: len(here) - node.level + 1]
    return ".".join([*anchor, node.module] if node.module else anchor)


def _nearest(dotted: str, modules: dict[str, Path]) -> str:
    """The module a dotted name loads, or "" for one outside the package."""
    parts = dotted.split(".")
    while parts and ".".join(parts) not in modules:
        parts.pop()
    return ".".join(parts)


def _calls_import_module(node: ast.Call) -> bool:
    function = node.func
    return (isinstance(function, ast.Attribute) and function.attr == "import_module") or (
        isinstance(function, ast.Name) and function.id == "import_module"
    )


def _loaded_by(argument: ast.expr, modules: dict[str, Path]) -> set[str]:
    """What an import_module call may load: the module a literal names, or every module
    an f-string's literal start names (`f"kb_cli.parsers.{kind}"`)."""
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        return {_nearest(argument.value, modules)}
    if isinstance(argument, ast.JoinedStr) and argument.values:
        first = argument.values[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return {module for module in modules if module.startswith(first.value)}
    return set()


def find_circle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle as the modules round it (the first again at the end), or []."""
    state: dict[str, str] = {}  # "open" while on the current path, then "done"
    path: list[str] = []

    def visit(module: str) -> list[str]:
        state[module] = "open"
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                return [*path[path.index(target) :], target]
            if target not in state and (circle := visit(target)):
                return circle
        state[module] = "done"
        path.pop()
        return []

    for module in sorted(graph):
        if module not in state and (circle := visit(module)):
            return circle
    return []


@pytest.fixture(scope="module")
def kb_cli_graph() -> dict[str, set[str]]:
    return import_graph(ROOT, "kb_cli")


def test_kb_cli_has_no_import_circle(kb_cli_graph):
    circle = find_circle(kb_cli_graph)
    assert not circle, "import circle: " + " -> ".join(circle)


def test_the_graph_holds_imports_inside_functions_and_by_import_module(kb_cli_graph):
    graph = kb_cli_graph
    assert len(graph) > 90
    assert "kb_cli.engines.sqlite" in graph["kb_cli.db"]  # inside engine_for
    assert {"kb_cli.parsers.pdf", "kb_cli.parsers.mail"} <= graph["kb_cli.parsers"]


def test_a_circle_closed_by_an_import_inside_a_function_is_found(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text(
        "import importlib\n\n"
        "def load(name):\n"
        "    return importlib.import_module(f'pkg.sub.{name}')\n"
    )
    (package / "sub" / "plugin.py").write_text("from . import helper\n")
    (package / "sub" / "helper.py").write_text("def go():\n    from pkg import sub\n")
    (package / "alone.py").write_text("from pkg.sub.helper import go\n")

    graph = import_graph(tmp_path, "pkg")

    assert graph["pkg.sub.plugin"] == {"pkg.sub.helper"}
    assert graph["pkg.alone"] == {"pkg.sub.helper"}
    assert graph["pkg.sub"] == {"pkg.sub.helper", "pkg.sub.plugin"}
    assert find_circle(graph) == ["pkg.sub.helper", "pkg.sub", "pkg.sub.helper"]
    (package / "sub" / "helper.py").write_text("def go():\n    return 1\n")
    assert find_circle(import_graph(tmp_path, "pkg")) == []

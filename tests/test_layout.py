"""The package's shape: few top-level modules, no module over 1,000 lines, no import cycle, and
layers that import only downwards (protocol/ from nothing else of acp-proxy; store/ from no layer
that records or reads).

The import graph is built from the source with ``ast``, every ``import`` counted wherever it is
(a function-level import is a dependency too, only a later one; so is one under
``TYPE_CHECKING``, which a cycle would still make a tangle for a reader)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "acp_proxy"
MAX_TOP_MODULES = 8
MAX_LINES = 1000
# Directories that hold no code of ours (caches, virtual environments, other tools' checkouts).
SKIPPED_DIRS = {".git", "__pycache__", ".venv", "venv", "node_modules", ".mypy_cache", ".ruff_cache", "build", "dist"}
# What a layer may import besides itself: the top-level modules (errors, limits, locations).
LOWER_LAYERS = {
    "protocol": set(),
    "store": {"protocol"},
}


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports, anywhere in its body."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.add(full if full in known else base)
    found = set()
    for target in targets:
        while target and target not in known:  # acp_proxy.x.y.Name -> acp_proxy.x.y
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


@functools.cache
def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    known = modules(package)
    return {name: imports(name, path, known) for name, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def layer(name: str) -> str | None:
    """``acp_proxy.protocol.wire`` -> ``protocol``; None for a top-level module."""
    parts = name.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()) else None


def upward_imports(graph: dict[str, set[str]], name_of_layer: str, allowed: set[str]) -> list[str]:
    """``module -> module`` for each import from ``name_of_layer`` into a layer not ``allowed``."""
    wrong = []
    for module, targets in sorted(graph.items()):
        if layer(module) != name_of_layer:
            continue
        for target in sorted(targets):
            other = layer(target)
            upward = other is not None and other != name_of_layer and other not in allowed
            if upward or target == "acp_proxy.__main__":
                wrong.append(f"{module} -> {target}")
    return wrong


def test_the_package_top_holds_few_modules() -> None:
    top = sorted(path.name for path in PACKAGE.glob("*.py") if path.name != "__init__.py")
    assert len(top) <= MAX_TOP_MODULES, top


def python_files(root: Path = REPO) -> list[Path]:
    """Every ``.py`` file of the repository: the package, benchmarks/, scripts/, examples/, tests/."""
    return sorted(path for path in root.rglob("*.py") if not SKIPPED_DIRS.intersection(path.relative_to(root).parts))


def test_no_module_is_over_1000_lines() -> None:
    long = {
        name: lines
        for path in python_files()
        if (lines := len(path.read_text().splitlines())) > MAX_LINES and (name := path.relative_to(REPO).as_posix())
    }
    assert long == {}


def test_the_line_limit_sees_every_python_file_of_the_repository() -> None:
    names = {path.relative_to(REPO).as_posix() for path in python_files()}
    assert {"acp_proxy/relay/launch.py", "benchmarks/relay_bench.py", "tests/test_layout.py"} <= names
    assert any(name.startswith("scripts/") for name in names)
    assert any(name.startswith("examples/") for name in names)


def test_no_import_cycle_between_modules() -> None:
    assert cycles(import_graph()) == []


@pytest.mark.parametrize("name_of_layer", sorted(LOWER_LAYERS))
def test_lower_layers_import_nothing_above_them(name_of_layer: str) -> None:
    assert upward_imports(import_graph(), name_of_layer, LOWER_LAYERS[name_of_layer]) == []


def test_the_graph_sees_function_level_and_relative_imports(tmp_path: Path) -> None:
    # The checks above are only as good as the graph: a late import and a relative one count.
    package = tmp_path / "acp_proxy"
    (package / "a").mkdir(parents=True)
    for name, text in {
        "__init__.py": "",
        "a/__init__.py": "",
        "a/x.py": "def f():\n    from acp_proxy.a import y\n",
        "a/y.py": "from .x import f\n",
        "z.py": "import acp_proxy.a.x\n",
    }.items():
        (package / name).write_text(text)
    graph = import_graph(package)
    assert graph["acp_proxy.a.x"] == {"acp_proxy.a.y"}
    assert graph["acp_proxy.a.y"] == {"acp_proxy.a.x"}
    assert graph["acp_proxy.z"] == {"acp_proxy.a.x"}
    assert cycles(graph) == [["acp_proxy.a.x", "acp_proxy.a.y"]]

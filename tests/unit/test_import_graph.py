"""The package's import graph, read from the source with ``ast``: no cycle, no import of the root.

Every ``import`` and ``from ... import`` in every module counts, wherever it is written: at the
top, under ``if TYPE_CHECKING:`` (a cycle a type checker follows is one a reader follows), and
inside a function (a lazy import hides a cycle from the interpreter at import time, not from a
reader or from the next refactor that moves it to the top). A module depends on the module it
names, not on the packages above it: ``from statewright.engine.steps import Run`` is an edge to
``statewright.engine.steps`` only (importing it runs ``statewright/__init__.py`` too, but that
file is lazy and imports nothing at run time).
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from pathlib import Path

import statewright.errors

ROOT = "statewright"
PACKAGE = Path(statewright.errors.__file__).resolve().parent


def modules(folder: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for path in sorted(folder.rglob("*.py")):
        parts = (ROOT, *path.relative_to(folder).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """The package's modules that ``name`` imports, with the line of each import."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            for alias in node.names:
                # `from pkg import mod` names the submodule; `from pkg import Name` the package.
                target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                if target in known:
                    yield target, node.lineno


def graph() -> dict[str, dict[str, int]]:
    """Each module's imports of the package's modules: {importer: {imported: line}}."""
    known = modules()
    edges: dict[str, dict[str, int]] = {}
    for name, path in known.items():
        edges[name] = {}
        for target, line in imported(name, path, known):
            if target != name:
                edges[name].setdefault(target, line)
    return edges


def cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component: list[str] = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def one_loop(component: list[str], edges: dict[str, dict[str, int]]) -> str:
    """One closed path through a component, each step with the line that imports: a place to
    start cutting."""
    members = set(component)
    start = component[0]
    path, seen = [start], {start}
    while True:
        nxt = sorted(w for w in edges[path[-1]] if w in members)
        back = [w for w in nxt if w in seen]
        step = back[0] if back else nxt[0]
        path.append(step)
        if step in seen:
            path = path[path.index(step) :]
            break
        seen.add(step)
    return (
        " -> ".join(f"{a} (line {edges[a][b]})" for a, b in itertools.pairwise(path))
        + f" -> {path[-1]}"
    )


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The reader finds imports at the top, under TYPE_CHECKING, inside a function, relative
    ones, and tells a submodule from a name, so a cycle cannot hide behind any of them."""
    pkg = tmp_path / ROOT
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from statewright.b import X\n"
    )
    (pkg / "b.py").write_text("def f():\n    from .sub import c\n")
    (pkg / "sub" / "__init__.py").write_text("from ..a import Y\n")
    (pkg / "sub" / "c.py").write_text("import statewright.a\nfrom statewright import sub\n")
    known = modules(pkg)
    edges = {n: dict(imported(n, p, known)) for n, p in known.items()}
    assert edges == {
        "statewright": {},
        "statewright.a": {"statewright.b": 3},
        "statewright.b": {"statewright.sub.c": 2},
        "statewright.sub": {"statewright.a": 1},
        "statewright.sub.c": {"statewright.a": 1, "statewright.sub": 2},
    }
    loop = ["statewright.a", "statewright.b", "statewright.sub", "statewright.sub.c"]
    assert cycles(edges) == [loop]
    assert one_loop(loop, edges) == (
        "statewright.a (line 3) -> statewright.b (line 2) -> statewright.sub.c (line 1)"
        " -> statewright.a"
    )


def test_no_import_cycle() -> None:
    edges = graph()
    assert len(edges) > 100  # the reader found the package
    found = [f"{len(c)} modules: {one_loop(c, edges)}" for c in cycles(edges)]
    assert found == [], "import cycles (TYPE_CHECKING and function-level imports count):\n" + (
        "\n".join(found)
    )


def test_no_module_imports_the_package_root() -> None:
    """``statewright/__init__.py`` is the users' front door: the package's own modules import
    what they use from where it is defined (``__version__`` from ``statewright._version``), so
    the root can re-export anything without making a cycle."""
    importers = sorted(
        f"{name} (line {targets[ROOT]})"
        for name, targets in graph().items()
        if ROOT in targets and name != ROOT
    )
    assert importers == []


# The layers, lowest first: a module may import its own layer and the ones below, never one
# above (definition -> store -> engine -> access -> agents -> surfaces). The engine's own
# observability (metrics, alert rules, delivery) and the views sit between the engine and the
# access layer that uses them.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset(
        {"_lazy", "_version", "clock", "errors", "ids", "jsonvalue", "offload", "paging",
         "redaction", "types"}
    ),
    frozenset({"definition"}),
    frozenset({"store"}),
    frozenset({"engine"}),
    frozenset({"observability", "views"}),
    frozenset({"access"}),
    frozenset({"agents"}),
    frozenset({"cli", "http", "mcp_server", "sync", "testing"}),
)  # fmt: skip


def layer_of(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return len(LAYERS)  # the root: lazy names of every layer
    for rank, names in enumerate(LAYERS):
        if parts[1] in names:
            return rank
    raise AssertionError(f"{module}: {parts[1]!r} is in no layer (add it to LAYERS)")


def test_layers_point_one_way() -> None:
    upward = [
        f"{importer} (line {line}) imports {target}"
        for importer, targets in graph().items()
        for target, line in targets.items()
        if layer_of(target) > layer_of(importer)
    ]
    assert not upward, "imports of a higher layer:\n" + "\n".join(upward)

"""The import structure the design asks for, checked by parsing zabby's sources (no imports run).

* The protocol-neutral session layer, the statistics snapshot, the four-letter words and the
  client codecs never reach the engine's trio driver (``zabby.server.node``) or the
  connection's I/O (``zabby.server.clients.client_conn``), even through other modules or under
  ``TYPE_CHECKING``.
* The engine knows clients only as its ``ClientSink``: it never reaches the session layer,
  the connection, the four-letter words or the driver.
* Nothing they reach imports itself back: no import cycle.
* ``zabby.wire`` is sans-I/O: no sockets, clocks, threads, randomness, files or event loop;
  ``zabby.core`` and ``zabby.tree`` import no trio, socket, os, time or threading either.
* Layers (errors/opcodes/membership < tree, wire < core, storage < engine < server): no
  module imports a layer above its own.
* The product (``zabby``) never imports the repository's tooling (``harness``: the fault
  harness, the differential runs, the benchmarks, ZooKeeper's processes, link proxies), nor
  kazoo or pytest (test dependencies; pytest only in ``zabby.testing.pytest_plugin``, which
  pytest loads).  ``zabby.testing`` (real servers for tests) is imported by no product module
  but the demo's throw-away ensemble (``TESTING_USERS``): the tests, the harness, the scripts
  and the demo start servers with it, the service never does.
* No import cycle anywhere in ``zabby`` or ``harness``, and the harness sits above the product:
  no product module reaches it.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "zabby"
TOOLING = ROOT / "harness"

LAYERED = ("zabby.server.clients.session", "zabby.server.adminport.statistics", "zabby.server.adminport.fourletter", "zabby.server.clients.reads")
FORBIDDEN = ("zabby.server.node", "zabby.server.clients.client_conn")
ENGINE_FORBIDDEN = (*LAYERED, *FORBIDDEN)
WIRE_FORBIDDEN = ("trio", "socket", "time", "random", "threading", "os", "io")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for folder in (PACKAGE, TOOLING) for path in folder.rglob("*.py")}


def _absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = importer.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every module ``name`` imports, anywhere in the file (TYPE_CHECKING blocks included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, name, path.name == "__init__.py")
            submodules = {f"{module}.{alias.name}" for alias in node.names if f"{module}.{alias.name}" in modules}
            found.update(submodules)
            if len(submodules) < len(node.names):  # names of the module itself, not only its submodules
                found.add(module)
    return found


@functools.cache
def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: {m for m in imports_of(name, path, modules) if m in modules} for name, path in modules.items()}


def _reachable(graph: dict[str, set[str]], start: str) -> dict[str, str]:
    """Every module ``start`` reaches, each mapped to the module that imports it on the way."""
    via: dict[str, str] = {}
    stack = [start]
    while stack:
        current = stack.pop()
        for target in graph[current]:
            if target not in via and target != start:
                via[target] = current
                stack.append(target)
    return via


def _cycle_from(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """An import chain from ``start`` back to itself, if there is one."""
    via: dict[str, str] = {}
    stack = [start]
    while stack:
        current = stack.pop()
        for target in graph[current]:
            if target == start:
                return [*_path_to(via, start, current), start]
            if target not in via:
                via[target] = current
                stack.append(target)
    return None


def _path_to(via: dict[str, str], start: str, target: str) -> list[str]:
    chain = [target]
    while chain[-1] != start:
        chain.append(via[chain[-1]])
    return chain[::-1]


@pytest.mark.parametrize("layered", LAYERED)
def test_the_session_layer_never_reaches_the_core_or_the_connection(layered: str) -> None:
    graph = _graph()
    via = _reachable(graph, layered)
    for forbidden in FORBIDDEN:
        assert forbidden not in via, " -> ".join(_path_to(via, layered, forbidden))


def test_the_engine_knows_clients_only_as_sinks() -> None:
    graph = _graph()
    for name in (m for m in graph if m == "zabby.engine" or m.startswith("zabby.engine.")):
        via = _reachable(graph, name)
        for forbidden in ENGINE_FORBIDDEN:
            assert forbidden not in via, " -> ".join(_path_to(via, name, forbidden))


def test_the_client_codecs_never_reach_the_server() -> None:
    graph = _graph()
    for name in (m for m in graph if m.startswith("zabby.wire")):
        reached = _reachable(graph, name)
        assert not [m for m in reached if m.startswith("zabby.server")], (name, sorted(reached))


@pytest.mark.parametrize("layered", (*LAYERED, "zabby.wire.codec", "zabby.wire.jute_codec"))
def test_no_import_cycle_through_the_session_layer_or_the_codecs(layered: str) -> None:
    graph = _graph()
    for module in [layered, *_reachable(graph, layered)]:
        cycle = _cycle_from(graph, module)
        assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


def test_wire_is_sans_io() -> None:
    modules = _modules()
    for name, path in modules.items():
        if not name.startswith("zabby.wire"):
            continue
        for imported in imports_of(name, path, modules):
            assert not any(imported == bad or imported.startswith(bad + ".") for bad in WIRE_FORBIDDEN), (name, imported)


PURE_PACKAGES = ("zabby.core", "zabby.tree", "zabby.wire")
PURE_FORBIDDEN = ("trio", "socket", "os", "time", "threading")
# Lower layers first; a module may import its own layer and those below, never one above.
LAYERS = (
    ("zabby.errors", "zabby.opcodes", "zabby.membership", "zabby.records"),
    ("zabby.tree", "zabby.wire"),
    ("zabby.core", "zabby.storage"),
    ("zabby.engine",),
    ("zabby.shell",),
    ("zabby.server", "zabby.sim"),
)


def _layer(module: str) -> int | None:
    for rank, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    return None


def test_the_pure_layers_do_no_io() -> None:
    """``zabby.core``, ``zabby.tree`` and ``zabby.wire``: no event loop, sockets, files, clocks or threads."""
    modules = _modules()
    for name, path in modules.items():
        if not name.startswith(PURE_PACKAGES):
            continue
        for imported in imports_of(name, path, modules):
            assert not any(imported == bad or imported.startswith(bad + ".") for bad in PURE_FORBIDDEN), (name, imported)


def test_the_shell_reaches_the_world_only_through_its_io() -> None:
    """The effect executor is the same code in the server and the simulator: it imports no
    event loop, sockets, clock or threads, and neither of its two I/O implementations."""
    modules = _modules()
    shell = [name for name in modules if name == "zabby.shell" or name.startswith("zabby.shell.")]
    assert "zabby.shell.executor" in shell
    for name in shell:
        for imported in imports_of(name, modules[name], modules):
            assert not any(imported == bad or imported.startswith(bad + ".") for bad in PURE_FORBIDDEN), (name, imported)
            assert not imported.startswith(("zabby.server", "zabby.sim")), (name, imported)


def test_no_module_imports_a_layer_above_it() -> None:
    graph = _graph()
    for name, targets in graph.items():
        rank = _layer(name)
        if rank is None:
            continue
        for target in targets:
            target_rank = _layer(target)
            assert target_rank is None or target_rank <= rank, f"{name} imports {target}, a layer above it"


TESTING = ("zabby.testing",)
# The demo's local ensemble (``zabby-demo``, the main job) starts real servers as subprocesses,
# as the tests do: with ``zabby.testing`` rather than a copy of its launch, probes and stop.
TESTING_USERS = ("zabby.spark.local_ensemble",)
PRODUCT_NEVER_IMPORTS = ("harness", "kazoo", "pytest", "_pytest")


def _in(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _product() -> dict[str, Path]:
    return {name: path for name, path in _modules().items() if _in(name, ("zabby",))}


def test_the_product_imports_no_tooling_kazoo_or_pytest() -> None:
    modules = _modules()
    for name, path in _product().items():
        if name == "zabby.testing.pytest_plugin":
            continue
        bad = [m for m in imports_of(name, path, modules) if _in(m, PRODUCT_NEVER_IMPORTS)]
        assert not bad, f"{name} imports {bad}"


def test_only_the_demo_reaches_zabby_testing() -> None:
    graph = {name: set() if _in(name, TESTING_USERS) else targets for name, targets in _graph().items()}
    for name in (m for m in _product() if not _in(m, TESTING)):
        via = _reachable(graph, name)
        reached = [m for m in via if _in(m, TESTING)]
        assert not reached, " -> ".join(_path_to(via, name, reached[0]))


def test_no_import_cycle_anywhere() -> None:
    """Every module of the product and the tooling, TYPE_CHECKING imports included; a module's
    own packages are not counted (importing a module runs its packages' ``__init__`` first
    whatever it names)."""
    graph = {name: {t for t in targets if not name.startswith(t + ".")} for name, targets in _graph().items()}
    for module in sorted(graph):
        cycle = _cycle_from(graph, module)
        assert cycle is None, "import cycle: " + " -> ".join(cycle or ())

"""The layers' import rules, read from the source with ``ast`` (every import counts, deferred or typing-only too).

* The worker service and the HTTP API beside it never import each other:
  they meet in ``pulse_trio.serve``, through ``pulse_trio.live_instance``.
* The service's composition (``pulse_trio.server.service``) is imported by
  ``pulse_trio.serve`` alone: its parts get what they use through their
  constructors and never reach back into the whole.
* The store imports Trio in one module only, its bridge, so importing a
  transaction function costs no event loop (checked in a fresh interpreter too).
* The contract's error codes reach the store through one mapping module
  (its grammar and limits are the project's one vocabulary, read directly).
* The charts package never imports the store (the store registers against
  the charts; the renderer is handed the registrations by the CLI).
* The worker SDK (and ``pulse_trio.testing`` on top of it) imports only the
  bottom layers, the contract and the charts (declarations: the SDK's own
  lease lifecycle is a chart), like any third-party worker would, and never
  Trio: it is written against AnyIO, and an asyncio worker loads no Trio at
  all (checked in a fresh interpreter that runs a handler too).
* No module imports one that imports it back, however deferred: the tree
  reads from the bottom up.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pulse_trio

PACKAGE = pathlib.Path(pulse_trio.__file__).parent
#: The one store module that may import Trio: ``await store.run(...)``.
STORE_BRIDGE = "pulse_trio.store.engine.trio_bridge"
#: The one store module that maps the contract's error codes.
STORE_CODES = "pulse_trio.store.engine.codes"
CONTRACT_ERRORS = "pulse_trio.contract.errors"
#: The module that builds the worker service from its parts, and the one module that runs it.
SERVICE = "pulse_trio.server.service"
SERVE = "pulse_trio.serve"


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path) -> set[str]:
    """Every module ``path`` imports, relative imports resolved; ``from a import b`` counts ``a.b`` too."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


GRAPH = {_module_name(p): _imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _offenders(importers: str, imported: str, *, allowed: frozenset[str] = frozenset()) -> list[str]:
    return sorted(f"{module} imports {name}" for module, names in GRAPH.items()
                  if _within(module, importers) and module not in allowed
                  for name in names if _within(name, imported))


def test_the_graph_sees_the_package():
    assert "pulse_trio.server.service" in GRAPH and "pulse_trio.http.app" in GRAPH
    assert "pulse_trio.store.engine.trio_bridge" in GRAPH["pulse_trio.server.service"]


def test_the_server_does_not_import_the_http_api():
    assert _offenders("pulse_trio.server", "pulse_trio.http") == []


def test_the_http_api_does_not_import_the_server():
    assert _offenders("pulse_trio.http", "pulse_trio.server") == []


def test_only_serve_imports_the_service_composition():
    assert _offenders("pulse_trio", SERVICE, allowed=frozenset({SERVICE, SERVE})) == []
    assert SERVICE in GRAPH[SERVE]


def test_only_the_bridge_of_the_store_imports_trio():
    assert _offenders("pulse_trio.store", "trio", allowed=frozenset({STORE_BRIDGE})) == []
    assert "trio" in GRAPH[STORE_BRIDGE]


def test_the_store_reaches_the_contract_error_codes_through_one_module():
    assert _offenders("pulse_trio.store", CONTRACT_ERRORS, allowed=frozenset({STORE_CODES})) == []
    assert CONTRACT_ERRORS in GRAPH[STORE_CODES]


def test_importing_a_transaction_function_does_not_import_trio():
    done = subprocess.run(
        [sys.executable, "-c", "import pulse_trio.store.lease.leases, sys; assert 'trio' not in sys.modules"],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


#: What the worker SDK and its test helpers may import from this package.
SDK_MAY_IMPORT = ("pulse_trio.contract", "pulse_trio.charts", "pulse_trio.sdk", "pulse_trio.testing")


def test_the_sdk_imports_the_contract_layer_only_and_never_trio():
    for package in ("pulse_trio.sdk", "pulse_trio.testing"):
        inside = sorted(f"{module} imports {name}" for module, names in GRAPH.items() if _within(module, package)
                        for name in names if _within(name, "pulse_trio") and name not in ("pulse_trio", "pulse_trio.__version__")
                        and not any(_within(name, allowed) for allowed in SDK_MAY_IMPORT))
        assert inside == [], inside
        assert _offenders(package, "trio") == [] and _offenders(package, "trio_websocket") == []
    assert "pulse_trio.contract.messages" in GRAPH["pulse_trio.sdk.lease"]
    assert "pulse_trio.charts" in GRAPH["pulse_trio.sdk.lifecycle"]


def test_an_asyncio_worker_and_its_handler_tests_load_no_trio():
    probe = """
import asyncio, sys
import pulse_trio.sdk, pulse_trio.testing
from pulse_trio.sdk import Registry
registry = Registry()
@registry.handler("billing", "invoice.send")
async def send(task, payload: dict) -> dict:
    await asyncio.sleep(0)
    return payload
outcome = asyncio.run(pulse_trio.testing.HandlerEnvironment(registry).run("billing", "invoice.send", {"n": 1}))
assert outcome.status == "SUCCEEDED" and outcome.result == {"n": 1}, outcome
assert "trio" not in sys.modules, sorted(m for m in sys.modules if "trio" in m and "pulse_trio" not in m)
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_charts_do_not_import_the_store():
    """The charts are below the store: the store registers against them, and the renderer is handed what it shows."""
    assert _offenders("pulse_trio.charts", "pulse_trio.store") == []


def test_the_database_url_module_is_the_bottom_layer():
    """``dburl`` imports nothing of the package but its connection class (``driver``) and its TLS options
    (``dbtls``), which import nothing of it, so the three and the store's writer choice above them form no cycle."""
    assert sorted(n for n in GRAPH["pulse_trio.driver"] if _within(n, "pulse_trio")) == []
    assert sorted(n for n in GRAPH["pulse_trio.dbtls"] if _within(n, "pulse_trio")) == []
    assert [n for n in GRAPH["pulse_trio.dburl"] if _within(n, "pulse_trio")
            and not _within(n, "pulse_trio.driver") and not _within(n, "pulse_trio.dbtls")] == []
    assert "pulse_trio.dbwriter" not in GRAPH
    assert "pulse_trio.dburl" in GRAPH["pulse_trio.store.engine.writer"]


def test_nothing_in_the_package_imports_trio_websocket():
    """trio-websocket is a test dependency (the suite's independent client), not one the package installs."""
    assert _offenders("pulse_trio", "trio_websocket") == []


def test_the_http_producer_clients_stand_apart_from_the_service():
    """An application imports the producer clients without the server, the HTTP API or Trio."""
    assert _offenders("pulse_trio.producer", "pulse_trio.server") == []
    assert _offenders("pulse_trio.producer", "pulse_trio.http") == []
    done = subprocess.run(
        [sys.executable, "-c", "import pulse_trio.producer, sys; assert 'trio' not in sys.modules"],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def _targets(names: set[str]) -> set[str]:
    """The modules of this package among ``names``: ``from pkg import mod`` counts ``pkg.mod``, not ``pkg``."""
    return {name for name in names if name in GRAPH
            and not any(other.startswith(name + ".") for other in names if other in GRAPH)}


def _cycles() -> list[list[str]]:
    """Every strongly connected group of two or more modules (Tarjan), typing-only imports counted."""
    edges = {module: sorted(_targets(names) - {module}) for module, names in GRAPH.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for name in edges[module]:
            if name not in index:
                visit(name)
                low[module] = min(low[module], low[name])
            elif name in on_stack:
                low[module] = min(low[module], index[name])
        if low[module] == index[module]:
            group = []
            while True:
                name = stack.pop()
                on_stack.discard(name)
                group.append(name)
                if name == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return found


def test_no_module_imports_itself_back():
    """No import cycle, however deferred: a reader can take the modules from the bottom up."""
    assert _cycles() == []


def test_the_cycle_finder_sees_a_cycle():
    """The check itself: a made-up import back from the bottom layer to the service is found."""
    GRAPH["pulse_trio.contract.limits"].add("pulse_trio.server.service")
    try:
        assert any("pulse_trio.contract.limits" in group for group in _cycles())
    finally:
        GRAPH["pulse_trio.contract.limits"].discard("pulse_trio.server.service")

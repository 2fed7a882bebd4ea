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
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pulse_trio

PACKAGE = pathlib.Path(pulse_trio.__file__).parent
#: The one store module that may import Trio: ``await store.run(...)``.
STORE_BRIDGE = "pulse_trio.store.trio_bridge"
#: The one store module that maps the contract's error codes.
STORE_CODES = "pulse_trio.store.codes"
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
    assert "pulse_trio.store.trio_bridge" in GRAPH["pulse_trio.server.service"]


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
        [sys.executable, "-c", "import pulse_trio.store.leases, sys; assert 'trio' not in sys.modules"],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_http_producer_clients_stand_apart_from_the_service():
    """An application imports the producer clients without the server, the HTTP API or Trio."""
    assert _offenders("pulse_trio.producer", "pulse_trio.server") == []
    assert _offenders("pulse_trio.producer", "pulse_trio.http") == []
    done = subprocess.run(
        [sys.executable, "-c", "import pulse_trio.producer, sys; assert 'trio' not in sys.modules"],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr

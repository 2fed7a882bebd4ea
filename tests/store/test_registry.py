"""The statecharts and the transaction functions map one to one."""

from __future__ import annotations

import contextlib

import pytest

import pulse_trio.store as store_pkg
from pulse_trio.charts import CHARTS, ChartError, persistent_charts
from pulse_trio.dburl import connect
from pulse_trio.store import REGISTRY, Tx
from pulse_trio.store.engine.trio_bridge import Store
from pulse_trio.store.engine.registry import GUARDS, decide, guard, transition
from pulse_trio.store.engine.results import Refusal
from pulse_trio.store.engine.tx import UnregisteredWrite


def test_every_persistent_transition_has_exactly_one_function():
    declared = {(c.name, t) for c in persistent_charts() for t in c.spec.triggers}
    assert declared == set(REGISTRY), (declared ^ set(REGISTRY))
    functions = [r.function for r in REGISTRY.values()]
    assert len(functions) == len(set(map(id, functions))), "a function is registered twice"
    for (chart, trigger), registration in REGISTRY.items():
        assert registration.function.__pulse_transition__ is registration
        assert (registration.chart, registration.trigger) == (chart, trigger)
        assert registration.function.__module__.startswith("pulse_trio.store.")


def test_every_function_in_the_store_belongs_to_one_transition():
    """No public callable that takes a Tx and writes escapes the registry."""
    import importlib
    import pkgutil

    modules = [importlib.import_module(info.name)
               for info in pkgutil.walk_packages(store_pkg.__path__, store_pkg.__name__ + ".")]
    assert "pulse_trio.store.queue.fairness" in {m.__name__ for m in modules}  # the walk reaches the sub-packages
    for module in modules:
        for name, value in vars(module).items():
            registration = getattr(value, "__pulse_transition__", None)
            if registration is not None:
                assert REGISTRY[(registration.chart, registration.trigger)] is registration


def test_in_memory_chart_has_no_functions_and_cannot_get_one():
    assert not [k for k in REGISTRY if k[0] == "session"]
    with pytest.raises(ChartError):
        transition("session", "hello")


def test_registering_twice_or_an_undeclared_trigger_fails():
    with pytest.raises(ChartError):
        transition("lease", "start")(lambda tx: None)
    with pytest.raises(ChartError):
        transition("lease", "teleport")
    with pytest.raises(ChartError):
        guard("lease", "not_a_guard")


def test_every_named_guard_is_implemented_and_every_guard_is_named():
    named = {(c.name, g) for c in persistent_charts() for g in c.spec.guard_names}
    assert named == set(GUARDS)
    for g in GUARDS.values():
        assert g.doc, f"guard {g.chart}.{g.name} needs a docstring (it is rendered into the docs)"


def test_refusal_codes_are_spec_codes():
    from pulse_trio.store.engine.results import INTERNAL_CODES, WIRE_CODES

    for g in GUARDS.values():
        assert g.code is None or g.code in WIRE_CODES | INTERNAL_CODES, g


def test_steps_cannot_run_as_transactions_and_plain_functions_are_refused(db):
    s = Store(db, pool_size=1)
    try:
        with pytest.raises(TypeError, match="step"):
            s.run_sync(REGISTRY[("task", "offer")].function, tasks=[], now=None)
        with pytest.raises(TypeError, match="neither"):
            s.run_sync(lambda tx: None)
    finally:
        s.close()


@contextlib.contextmanager
def _bare_tx(db):
    """A Tx and its cursor on a connection of their own, outside any transition; rolled back after."""
    conn = connect(db)
    try:
        with conn.cursor() as cur:
            yield Tx(cur), cur
    finally:
        conn.rollback()
        conn.close()


def test_writes_outside_a_transition_are_refused(db):
    with _bare_tx(db) as (tx, _):
        with pytest.raises(UnregisteredWrite):
            tx.write("UPDATE tasks SET state = 'READY'")


def test_a_multi_row_insert_that_would_go_row_by_row_is_refused(db):
    """write_many refuses VALUES with a literal: PyMySQL would send one INSERT per row."""
    with _bare_tx(db) as (tx, cur):
        tx.enter("test.write_many")
        with pytest.raises(ValueError, match="placeholders only"):
            tx.write_many("INSERT INTO key_counters (concurrency_key, last_token, outstanding)"
                          " VALUES (%s, 0, 0)", [("a",), ("b",)])
        assert tx.write_many("INSERT INTO key_counters (concurrency_key, last_token, outstanding)"
                             " VALUES (%s, %s, %s)", [("a", 0, 0), ("b", 0, 0)]) == 2
        cur.execute("SELECT COUNT(*) FROM key_counters")
        assert cur.fetchone() == (2,)


def test_decide_checks_refusing_guards_before_the_source_state():
    from types import SimpleNamespace

    lapsed = SimpleNamespace(state="LAPSED", task_id="tsk_1", secret_digest=None)
    from pulse_trio.store.engine.guard_context import LeaseContext

    ctx = LeaseContext(lease=lapsed, task_id="tsk_1", lease_secret="x", session_id="s", revision=1, now=None)
    # wrong secret first: lease_not_found, even on a lapsed lease
    assert decide("lease", "start", "LAPSED", ctx) == Refusal("lease_not_found", decide(
        "lease", "start", "LAPSED", ctx).message)


def test_decide_picks_the_first_transition_whose_selectors_hold():
    from types import SimpleNamespace

    from pulse_trio.store.engine.guard_context import TaskContext
    from pulse_trio.store.engine.inputs import FinishReport

    lease = SimpleNamespace(attempt=1, cancel_requested_at=None)
    task = SimpleNamespace(max_attempts=3)
    failed = FinishReport("FAILED", "{}", "x", None, True)
    assert decide("task", "finish", "OFFERED", TaskContext(report=failed, lease=lease, task=task)) == "SCHEDULED"
    final = FinishReport("FAILED", "{}", "x", None, False)
    assert decide("task", "finish", "OFFERED", TaskContext(report=final, lease=lease, task=task)) == "FAILED"
    assert isinstance(decide("task", "finish", "READY", TaskContext(report=final, lease=lease, task=task)),
                      Refusal)


def test_charts_are_loaded_once():
    assert set(CHARTS) == {"session", "task", "lease", "cancellation", "key_permit", "instance", "node",
                           "cluster_setting", "schedule", "queue", "fair_share", "fairness_weight",
                           "worker_lease", "worker_command"}

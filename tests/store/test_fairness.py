"""Weighted fairness keys (docs/priority-and-fairness.md §5): tasks placed on their key's virtual clock.

Shares are measured from the rows: the order in which one session is
offered the tasks (a claim offers in pick-up order) and the tasks'
``fairness_key``.
"""

from __future__ import annotations

import datetime as dt
from fractions import Fraction

import pytest

from pulse_trio.store import NewTask, submit
from pulse_trio.store.queue.fairness import set_weight, share_id

QUANTUM_MS = 1_000  # the default fairness_quantum
STEP_MS = 30_000  # the default priority_step


def _submit(world, count: int, **fields) -> list[str]:
    return [r.task_id for r in world.run(submit, tasks=[NewTask("q", "k", **fields) for _ in range(count)])]


def _keys_in_offer_order(world, w, count: int) -> list[str | None]:
    offers = world.assign(w, count)
    keys = dict(world.sql("SELECT task_id, fairness_key FROM tasks WHERE task_id IN %s",
                          (tuple(o.task.task_id for o in offers),)))
    return [keys[o.task.task_id] for o in offers]


def _worst_gap(order: list[str | None], a: str, b: str, wa: int, wb: int) -> Fraction:
    """max over prefixes of |n_a / w_a - n_b / w_b|, exactly."""
    na = nb = 0
    worst = Fraction(0)
    for key in order:
        na += key == a
        nb += key == b
        worst = max(worst, abs(Fraction(na, wa) - Fraction(nb, wb)))
    return worst


def test_a_flood_and_a_later_flood_share_offers_by_weight_within_the_stated_bound(world):
    world.run(set_weight, fairness_key="small", weight=3, updated_by="test")
    _submit(world, 400, fairness_key="big")  # weight 1, first
    world.advance(1)
    _submit(world, 150, fairness_key="small")
    w = world.worker("q", capacity=200)
    order = _keys_in_offer_order(world, w, 200)
    assert order[0] == "big"  # it was due first
    window = order[1:]  # from the moment both have work waiting
    assert _worst_gap(window, "big", "small", 1, 3) <= 1 + Fraction(1, 3)
    assert window.count("small") == 150 and window.count("big") in (49, 50, 51)


def test_a_key_with_little_work_is_not_held_back_by_a_flood(world):
    _submit(world, 1000, fairness_key="flood")
    w = world.worker("q", capacity=1000)
    world.assign(w, 10)
    world.advance(5_000)
    (late,) = _submit(world, 1, fairness_key="trickle")
    (first,) = world.assign(w, 1)
    assert first.task.task_id == late  # placed at its due time, ahead of the flood spread past it


def test_one_key_alone_is_placed_exactly_as_without_fairness_when_it_keeps_up(world):
    for _ in range(3):
        (task_id,) = _submit(world, 1, fairness_key="solo", priority=2)
        ((due, effective),) = world.sql("SELECT due_at, effective_at FROM tasks WHERE task_id = %s", (task_id,))
        assert effective == due - dt.timedelta(milliseconds=2 * STEP_MS)
        world.advance(QUANTUM_MS)


def test_tasks_without_a_key_pay_nothing_and_keep_their_order(world):
    ids = _submit(world, 5)
    rows = world.sql("SELECT due_at, effective_at FROM tasks WHERE task_id IN %s", (tuple(ids),))
    assert all(due == eff for due, eff in rows)
    assert world.sql("SELECT COUNT(*) FROM fair_shares") == [(0,)]


def test_priority_still_comes_first_within_a_key_and_across_keys(world):
    _submit(world, 100, fairness_key="a")  # spread over 100 s of due time
    (urgent,) = _submit(world, 1, fairness_key="a", priority=9)  # 270 s ahead: before a's own backlog
    (other,) = _submit(world, 1, fairness_key="b", priority=9)
    w = world.worker("q", capacity=10)
    first_two = {o.task.task_id for o in world.assign(w, 2)}
    assert first_two == {urgent, other}


def test_the_clock_is_per_queue_and_kept_in_the_database(world):
    _submit(world, 10, fairness_key="t")
    world.run(submit, tasks=[NewTask("other", "k", fairness_key="t")])
    rows = dict(world.sql("SELECT share_id, placed FROM fair_shares"))
    assert rows == {share_id("q", "t"): 10, share_id("other", "t"): 1}
    ((clock,),) = world.sql("SELECT virtual_at FROM fair_shares WHERE share_id = %s", (share_id("q", "t"),))
    assert clock == world.now.replace(tzinfo=None) + dt.timedelta(milliseconds=10 * QUANTUM_MS)


def test_a_weight_changed_at_run_time_applies_to_tasks_placed_after_it(world):
    _submit(world, 2, fairness_key="t")
    world.run(set_weight, fairness_key="t", weight=4, updated_by="test")
    _submit(world, 2, fairness_key="t")
    rows = [r[0] for r in world.sql("SELECT effective_at FROM tasks ORDER BY effective_at")]
    gaps = [(b - a).total_seconds() for a, b in zip(rows, rows[1:])]
    assert gaps == [1.0, 1.0, 0.25]
    assert world.run(set_weight, fairness_key="t", weight=4, updated_by="test") == 4


def test_a_scheduled_task_is_placed_when_it_becomes_ready(world):
    from pulse_trio.store import promote

    later = world.now + dt.timedelta(seconds=60)
    (scheduled,) = _submit(world, 1, fairness_key="t", due_at=later)
    assert world.sql("SELECT COUNT(*) FROM fair_shares") == [(0,)]
    world.advance(61_000)
    _submit(world, 3, fairness_key="t")  # placed now, before the promotion
    world.run(promote)
    ((effective,),) = world.sql("SELECT effective_at FROM tasks WHERE task_id = %s", (scheduled,))
    # the three due at 61 s took 61, 62 and 63 s: the promoted one comes after them
    assert effective == later.replace(tzinfo=None) + dt.timedelta(seconds=4)


@pytest.mark.parametrize("key", ["", "x" * 129, "tab\there", "é"])
def test_a_fairness_key_is_spelled_like_a_concurrency_key(key):
    with pytest.raises(ValueError, match="fairness_key"):
        NewTask("q", "k", fairness_key=key)


def test_a_weight_outside_its_range_is_refused(world):
    with pytest.raises(ValueError):
        world.run(set_weight, fairness_key="t", weight=0, updated_by="test")


def test_key_figures_name_the_keys_with_the_most_ready_work_then_other(world):
    from pulse_trio.store.queue.fairness import OTHER, key_figures

    _submit(world, 2, fairness_key="zz")
    w = world.worker("q", capacity=5)
    for offer in world.assign(w, 2):
        world.start(w, offer)
        world.finish(w, offer, 2)
    for i in range(13):
        _submit(world, 13 - i, fairness_key=f"k{i:02}")
    _submit(world, 4)  # no key: not in the figures
    rows = world.store.run_sync(key_figures, since=world.now, top=10)["q"]
    assert [r["fairness_key"] for r in rows] == [f"k{i:02}" for i in range(10)] + [OTHER]
    assert rows[0] == {"fairness_key": "k00", "ready": 13, "recent_finished": 0, "recent_share": 0.0}
    assert rows[-1] == {"fairness_key": OTHER, "ready": 3 + 2 + 1, "recent_finished": 2, "recent_share": 1.0,
                        "keys": 4}
    assert world.store.run_sync(key_figures, since=world.now, queues=["elsewhere"]) == {}


def test_the_worked_example_of_the_docs(world):
    """docs/priority-and-fairness.md §5, placement table and pick-up order."""
    world.run(set_weight, fairness_key="B", weight=3, updated_by="test")
    a = _submit(world, 6, fairness_key="A")
    world.advance(500)
    b = _submit(world, 6, fairness_key="B")
    world.advance(100)
    (u,) = _submit(world, 1, fairness_key="A", priority=1)
    names = {**{t: f"a{i + 1}" for i, t in enumerate(a)}, **{t: f"b{i + 1}" for i, t in enumerate(b)}, u: "u"}
    w = world.worker("q", capacity=20)
    order = [names[o.task.task_id] for o in world.assign(w, 13)]
    # within one submit the tasks are placed in the order given, a quantum / weight apart
    assert order == ["u", "a1", "b1", "b2", "a2", "b3", "b4", "b5", "a3", "b6", "a4", "a5", "a6"]


def test_racing_placers_put_one_keys_tasks_on_one_clock(world, db):
    """Four processes submit to one key at the same instant: each task gets its own slot, a quantum apart.

    The first round creates the key's row (four first inserts race); the
    second finds it, and each placer's compare-and-set on the clock it read
    loses to the others' but one, which then read it again under its lock.
    """
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from pulse_trio.store.engine.trio_bridge import Store

    stores = [Store(db, pool_size=2) for _ in range(4)]
    barrier = threading.Barrier(4)

    def go(i: int) -> None:
        barrier.wait()
        stores[i].run_sync(submit, tasks=[NewTask("q", "k", fairness_key="t") for _ in range(25)], now=world.now)

    try:
        for _ in range(2):
            with ThreadPoolExecutor(4) as pool:
                list(pool.map(go, range(4)))
    finally:
        for s in stores:
            s.close()
    placed = sorted(r[0] for r in world.sql("SELECT effective_at FROM tasks WHERE fairness_key = 't'"))
    assert len(placed) == 200
    assert {b - a for a, b in zip(placed, placed[1:])} == {dt.timedelta(milliseconds=QUANTUM_MS)}
    assert placed[0] == world.now.replace(tzinfo=None)
    assert world.sql("SELECT placed, virtual_at FROM fair_shares") == [
        (200, placed[-1] + dt.timedelta(milliseconds=QUANTUM_MS))]


@pytest.mark.parametrize("row_exists", [True, False], ids=["clock-moved", "row-inserted"])
def test_a_placer_that_meets_another_on_its_key_places_after_it(world, row_exists):
    """One placer holds the key's row, uncommitted; another reads the clock meanwhile, then waits for the row.

    With the row there, the second one's compare-and-set finds the clock
    moved and places again under the lock; without it, its insert finds the
    first one's row. Either way its tasks come after the first one's, a
    quantum apart, as if the two had run one after the other.
    """
    import time
    from concurrent.futures import ThreadPoolExecutor

    from pulse_trio.dburl import connect
    from pulse_trio.store.engine.tx import Tx

    if row_exists:
        _submit(world, 1, fairness_key="t")
    conn = connect(world.db)
    try:
        with conn.cursor() as cur, ThreadPoolExecutor(1) as pool:
            first = submit(Tx(cur), tasks=[NewTask("q", "k", fairness_key="t") for _ in range(3)], now=world.now)
            second = pool.submit(world.run, submit, tasks=[NewTask("q", "k", fairness_key="t") for _ in range(3)])
            time.sleep(0.5)  # it reads the clock this transaction has not moved yet, then waits for the row
            conn.commit()
            later = second.result(timeout=30)
    finally:
        conn.close()
    at = dict(world.sql("SELECT task_id, effective_at FROM tasks WHERE fairness_key = 't'"))
    order = sorted(at, key=at.get)
    assert order[-6:] == [s.task_id for s in first] + [s.task_id for s in later]
    assert {at[b] - at[a] for a, b in zip(order, order[1:])} == {dt.timedelta(milliseconds=QUANTUM_MS)}
    assert world.sql("SELECT placed FROM fair_shares") == [(len(order),)]


def test_placing_a_batch_costs_a_read_and_one_statement_per_key(world):
    """The clocks and weights in one read, each key's clock moved by one statement; the quantum is read
    with the priority step, so a batch of one key costs the submit two statements more than an unkeyed one."""
    from pulse_trio.dburl import connect
    from pulse_trio.store.engine.tx import Tx

    def statements(tasks) -> int:
        conn = connect(world.db)
        try:
            with conn.cursor() as cur:
                counts = "SHOW SESSION STATUS WHERE Variable_name IN ('Com_select', 'Com_insert', 'Com_update')"
                cur.execute(counts)
                before = sum(int(v) for _, v in cur.fetchall())
                submit(Tx(cur), tasks=tasks, now=world.now)
                cur.execute(counts)
                after = sum(int(v) for _, v in cur.fetchall())
            conn.commit()
        finally:
            conn.close()
        return after - before - 1  # the first SHOW counts as a select

    _submit(world, 1, fairness_key="t")  # the key's row exists
    plain = statements([NewTask("q", "k") for _ in range(50)])
    keyed = statements([NewTask("q", "k", fairness_key="t") for _ in range(50)])
    assert keyed - plain == 2
    # Fifty keys new to the queue: their rows go in one INSERT, already past their tasks (no UPDATE),
    # plus the read of the clocks and one of the weights.
    many = statements([NewTask("q", "k", fairness_key=f"n{i}") for i in range(50)])
    assert many - plain == 3
    assert world.sql("SELECT COUNT(*), SUM(placed) FROM fair_shares WHERE fairness_key LIKE 'n%%'") == [(50, 50)]


def test_ready_counts_by_key_are_an_index_only_read_and_count_every_ready_range(world):
    """tasks_pickup carries fairness_key: no index of its own moves at the offer of a keyed task."""
    from pulse_trio.dburl import connect
    from pulse_trio.store.queue.fairness import key_figures
    from pulse_trio.store.queue.sql import READY_BY_KEY
    from pulse_trio.store.engine.rows import READY_PICKS

    _submit(world, 4, fairness_key="f")
    _submit(world, 3, fairness_key="f", concurrency_key="c")  # READY, in the KEYED range
    _submit(world, 5)  # no fairness key
    _submit(world, 1, fairness_key="g")
    w = world.worker("q", capacity=5)
    offered = _keys_in_offer_order(world, w, 3)  # out of READY: no longer counted
    assert len(offered) == 3 and offered.count("f") >= 1  # the ones of f placed first come first
    rows = {r["fairness_key"]: r["ready"] for r in world.store.run_sync(key_figures, since=world.now)["q"]}
    left = {"f": 7 - offered.count("f"), "g": 1 - offered.count("g")}
    assert rows == {key: n for key, n in left.items() if n}  # a key with nothing READY and no finish is not listed
    conn = connect(world.db)
    try:
        with conn.cursor() as cur:
            cur.execute("EXPLAIN " + READY_BY_KEY, (("q",), tuple(READY_PICKS)))
            names = [d[0] for d in cur.description]
            (plan,) = [dict(zip(names, r)) for r in cur.fetchall()]
    finally:
        conn.close()
    assert plan["key"] == "tasks_pickup" and "Using index" in (plan["Extra"] or ""), plan

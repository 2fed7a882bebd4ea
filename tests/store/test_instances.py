"""Chart `instance`: registration, epochs, capacity sequence and drain, disconnect."""

from __future__ import annotations

from pulse_trio.dburl import connect
from pulse_trio.store import NewInstance, Refusal, SubscribedQueue, disconnect, register, set_capacity
from pulse_trio.store.engine.ids import secret_digest
from pulse_trio.store.engine.tx import Tx
from pulse_trio.store.instance.instances import QUEUES_ALLOWED, TOKEN_LIVE


def test_register_gives_new_ids_a_secret_digest_and_increasing_epochs(world):
    a = world.worker("q", capacity=0)
    b = world.worker("q", capacity=0)
    assert a.instance_id != b.instance_id and a.session_id != b.session_id
    assert b.epoch == a.epoch + 1
    assert a.registered.instance.capacity == 0 and a.registered.instance.sequence is None
    ((digest,),) = world.sql("SELECT secret_digest FROM worker_instances WHERE instance_id = %s", (a.instance_id,))
    assert bytes(digest) == secret_digest(a.secret)
    assert len(a.secret) == 43 and a.secret[-1] in "AEIMQUYcgkosw048"
    stored = world.sql("SELECT COUNT(*) FROM worker_instances WHERE secret_digest = %s", (a.secret.encode(),))
    assert stored == [(0,)], "the secret itself is never stored"


def test_register_refuses_a_queue_the_token_does_not_allow(world):
    instance = NewInstance("w", (SubscribedQueue("billing"), SubscribedQueue("other")))
    result = world.run(register, instance=instance, allowed_queues={"billing"})
    assert isinstance(result, Refusal) and result.code == "permission_denied"
    assert result.guard == QUEUES_ALLOWED  # what the live session words the refusal from
    assert world.sql("SELECT COUNT(*) FROM worker_instances") == [(0,)]
    before = world.worker("q", capacity=0)
    world.run(register, instance=instance, allowed_queues={"billing"})
    after = world.worker("q", capacity=0)
    assert after.epoch == before.epoch + 1, "a refusal consumes no epoch"


def test_register_refuses_a_token_revoked_since_the_handshake(world, db, token_factory):
    from pulse_trio.store.engine.writer import connect as db_connect
    from pulse_trio.store.token.tokens import authenticate
    from token_support import revoke_token

    token = token_factory("worker", ["q"])
    conn = db_connect(db)
    try:
        token_id = authenticate(conn, token).token_id
    finally:
        conn.close()
    live = world.run(register, instance=NewInstance("w", (SubscribedQueue("q"),), token_id=token_id))
    assert not isinstance(live, Refusal), live
    revoke_token(db, token)
    result = world.run(register, instance=NewInstance("w", (SubscribedQueue("q"),), token_id=token_id))
    assert isinstance(result, Refusal) and result.code == "permission_denied" and result.guard == TOKEN_LIVE
    assert world.sql("SELECT COUNT(*) FROM worker_instances") == [(1,)]


def test_capacity_sequence_must_increase_stale_frames_change_nothing(world):
    w = world.worker("q", capacity=0)
    first = world.run(set_capacity, session_id=w.session_id, sequence=5, capacity=8, drain=False)
    assert first.applied and first.instance.capacity == 8 and first.instance.sequence == 5
    stale = world.run(set_capacity, session_id=w.session_id, sequence=5, capacity=1, drain=True)
    assert not stale.applied and stale.instance.capacity == 8 and not stale.instance.drain
    older = world.run(set_capacity, session_id=w.session_id, sequence=4, capacity=1, drain=False)
    assert not older.applied and older.instance.sequence == 5


def test_drain_and_undrain(world):
    w = world.worker("q", capacity=0)
    drained = world.run(set_capacity, session_id=w.session_id, sequence=1, capacity=3, drain=True)
    assert drained.instance.state == "DRAINING" and drained.instance.drain
    still = world.run(set_capacity, session_id=w.session_id, sequence=2, capacity=4, drain=True)
    assert still.instance.state == "DRAINING" and still.instance.capacity == 4
    back = world.run(set_capacity, session_id=w.session_id, sequence=3, capacity=4, drain=False)
    assert back.instance.state == "ACTIVE" and not back.instance.drain


def test_disconnect_keeps_leases_and_refuses_later_capacity(world):
    w = world.worker("q")
    offer = world.running(w)
    gone = world.run(disconnect, session_id=w.session_id)
    assert gone.state == "DISCONNECTED" and gone.active_leases == 1
    assert world.sql("SELECT state FROM leases WHERE lease_id = %s", (offer.lease.lease_id,)) == [("RUNNING",)]
    again = world.run(disconnect, session_id=w.session_id)
    assert isinstance(again, Refusal) and again.code == "invalid_transition"
    late = world.run(set_capacity, session_id=w.session_id, sequence=99, capacity=1, drain=False)
    assert isinstance(late, Refusal) and late.code == "invalid_transition"
    unknown = world.run(disconnect, session_id="ses_NOPE")
    assert isinstance(unknown, Refusal) and unknown.code == "session_not_found"


def test_register_is_idempotent_when_a_commit_was_cut_off(world):
    from pulse_trio.dburl import connect
    from pulse_trio.store.engine.tx import Tx

    instance = NewInstance("w", (SubscribedQueue("q"),))
    first = world.run(register, instance=instance)
    conn = connect(world.db)
    try:
        with conn.cursor() as cur:
            again = register(Tx(cur, recovering=True), instance=instance, now=world.now)
        conn.rollback()
    finally:
        conn.close()
    assert again.instance.epoch == first.instance.epoch
    assert world.sql("SELECT COUNT(*) FROM worker_instances") == [(1,)]


def test_registrations_in_open_transactions_do_not_wait_for_each_other(world):
    """The epoch comes from the insert (AUTO_INCREMENT), not a counter row locked until commit.

    Two registrations, each left open in its own transaction on its own
    connection, both complete at once (a lock wait would fail the second
    within a second); the one allocated first has the smaller epoch.
    """
    conns = [connect(world.db) for _ in range(2)]
    try:
        results = []
        for conn in conns:
            conn.autocommit(False)
            cur = conn.cursor()
            cur.execute("SET SESSION innodb_lock_wait_timeout = 1")
            results.append(register(Tx(cur), instance=NewInstance("w", (SubscribedQueue("q"),)), now=world.now))
        first, second = (r.instance.epoch for r in results)
        assert second > first
        for conn in reversed(conns):  # commit order need not follow allocation order
            conn.commit()
        assert world.sql("SELECT epoch FROM worker_instances ORDER BY epoch") == [(first,), (second,)]
    finally:
        for conn in conns:
            conn.close()

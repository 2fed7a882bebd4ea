"""The producer client against the real database: submit, get, cancel, retry, list, dedup."""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import threading

import pytest

from pulse_trio.client import Client, ClientError, TaskNotFound
from pulse_trio.client.producer import InvalidRequest


def test_submit_and_get(client: Client):
    task = client.submit("billing", "invoice.send", {"invoice": 991, "amount": 12.50}, priority=3)
    assert task["created"] is True and task["state"] == "READY"
    shown = client.get(task["task_id"])
    assert shown["task_id"] == task["task_id"] and (shown["queue"], shown["kind"]) == ("billing", "invoice.send")
    assert shown["payload"] == {"invoice": 991, "amount": 12.50} and shown["priority"] == 3
    assert shown["idempotency_key"] == task["task_id"]  # defaults to the task id
    assert shown["attempt"] == 0  # no attempt has started yet
    assert shown["outcome"] is None


def test_payload_json_text_is_kept_digit_for_digit(client: Client):
    task = client.submit("billing", "invoice.send", payload_json='{"amount": 10.10, "big": 12345678901234567890123}')
    text = client.get_json_text(task["task_id"])
    assert '"amount":10.10' in text and '"big":12345678901234567890123' in text


def test_same_idempotency_key_returns_the_existing_task(client: Client):
    first = client.submit("billing", "invoice.send", {"invoice": 1}, idempotency_key="invoice-1")
    again = client.submit("billing", "invoice.send", {"invoice": 1}, idempotency_key="invoice-1")
    assert again["task_id"] == first["task_id"] and again["created"] is False
    other_queue = client.submit("refunds", "invoice.send", {"invoice": 1}, idempotency_key="invoice-1")
    assert other_queue["task_id"] != first["task_id"]  # dedup is per queue
    assert len(client.list(queue="billing")["tasks"]) == 1


def test_a_repeat_submit_racing_the_purge_answers_a_task_never_task_not_found(client: Client, db):
    """docs/tasks.md §4, §8: a known key answers its task, and once the purge deleted that task the key
    submits a new one; the answer is read in the submit's own transaction, so it is never TaskNotFound."""
    stop = threading.Event()

    def purge_until_stopped() -> None:
        with Client(db) as purger:
            while not stop.is_set():
                purger.purge(older_than=0, queue="billing")

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        purging = pool.submit(purge_until_stopped)
        try:
            for i in range(300):
                first = client.submit("billing", "invoice.send", {}, idempotency_key=f"invoice-{i}")
                client.cancel(first["task_id"])  # terminal: the purge may take it from now on
                again = client.submit("billing", "invoice.send", {}, idempotency_key=f"invoice-{i}")
                assert again["created"] is (again["task_id"] != first["task_id"])
        finally:
            stop.set()
        purging.result()


def test_delay_schedules_the_task(client: Client):
    task = client.submit("billing", "invoice.send", {}, delay=3600)
    assert client.get(task["task_id"])["state"] == "SCHEDULED"


def test_cancel_of_a_waiting_task_and_of_a_terminal_one(client: Client):
    task = client.submit("billing", "invoice.send", {})
    cancelled = client.cancel(task["task_id"], reason="duplicate order", requested_by="test")
    assert cancelled["state"] == "CANCELLED" and cancelled["cancel_changed"] is True
    again = client.cancel(task["task_id"])  # terminal: a no-op that reports the final state
    assert again["state"] == "CANCELLED" and again["cancel_changed"] is False


def test_retry_makes_a_linked_task_once(client: Client):
    source = client.submit("billing", "invoice.send", {"invoice": 7}, idempotency_key="invoice-7")
    client.cancel(source["task_id"])
    retry = client.retry(source["task_id"])
    assert retry["created"] is True and retry["task_id"] != source["task_id"]
    assert retry["retry_of"] == source["task_id"] and retry["state"] == "READY"
    assert retry["idempotency_key"] == "invoice-7" and retry["payload"] == {"invoice": 7}
    assert client.get(source["task_id"])["retried_by"] == retry["task_id"]  # the lineage, both ways
    same = client.retry(source["task_id"])  # idempotent per source
    assert same["task_id"] == retry["task_id"] and same["created"] is False


def test_a_manual_retry_keeps_the_backoff(client: Client):
    source = client.submit("billing", "invoice.send", {}, backoff_initial=2.5, backoff_factor=4, backoff_max=100)
    client.cancel(source["task_id"])
    retry = client.retry(source["task_id"])
    assert (retry["backoff_initial"], retry["backoff_factor"], retry["backoff_max"]) == (2.5, 4.0, 100.0)


def test_retry_of_a_task_that_is_not_terminal_is_refused(client: Client):
    task = client.submit("billing", "invoice.send", {})
    with pytest.raises(ClientError) as refused:
        client.retry(task["task_id"])
    assert refused.value.code == "not_retryable"


def test_unknown_task(client: Client):
    for call in (client.get, client.cancel, client.retry):
        with pytest.raises(TaskNotFound):
            call("tsk_01J00000000000000000000000")


def test_list_filters_and_pages(client: Client):
    ids = [client.submit("billing", "invoice.send", {"n": n})["task_id"] for n in range(5)]
    client.submit("refunds", "refund.issue", {})
    client.cancel(ids[0])
    assert [t["task_id"] for t in client.list(queue="billing")["tasks"]] == ids  # oldest first
    assert [t["task_id"] for t in client.list(state="CANCELLED")["tasks"]] == [ids[0]]
    assert [t["kind"] for t in client.list(kind="refund.issue")["tasks"]] == ["refund.issue"]
    page = client.list(queue="billing", limit=2)
    seen = [t["task_id"] for t in page["tasks"]]
    while page["next"] is not None:
        page = client.list(queue="billing", limit=2, cursor=page["next"])
        seen += [t["task_id"] for t in page["tasks"]]
    assert seen == ids


def test_invalid_submissions_are_refused_before_writing(client: Client):
    with pytest.raises(ClientError):
        client.submit("Billing!", "invoice.send", {})
    with pytest.raises(ClientError):
        client.submit("billing", "invoice.send", payload_json="{not json")
    for unreadable in ('{"amount": 1e400}', '{"amount": 1' + "0" * 4300 + "}"):  # valid JSON no worker reads
        with pytest.raises(ClientError, match="payload: number"):
            client.submit("billing", "invoice.send", payload_json=unreadable)
    with pytest.raises(ClientError):
        client.submit("billing", "invoice.send", {}, priority=10)
    for bad in (dict(backoff_initial=-1), dict(backoff_initial=float("nan")), dict(backoff_factor=float("inf")),
                dict(backoff_factor=0.9), dict(backoff_initial=5, backoff_max=1), dict(backoff_max=10**7)):
        with pytest.raises(ClientError):
            client.submit("billing", "invoice.send", {}, **bad)
    assert client.list()["tasks"] == []


BAD_OPTIONS = [
    {"due_at": "2030-01-01T00:00:00Z"},  # the API's spelling, as text
    {"due_at": dt.date(2030, 1, 1)},
    {"due_at": dt.datetime(9999, 12, 31, 23, tzinfo=dt.timezone(dt.timedelta(hours=-5)))},  # UTC: year 10000
    {"idempotency_key": 991},
    {"idempotency_key": "inv-\ud800"},  # a lone surrogate: no column holds it
    {"concurrency_key": 7},
    {"fairness_key": 7},
    {"retry_uncertain": None},
    {"retry_uncertain": "no"},
]


@pytest.mark.parametrize("options", BAD_OPTIONS, ids=[repr(o)[:40] for o in BAD_OPTIONS])
def test_badly_typed_submit_options_are_refused_naming_the_field(client: Client, options):
    """InvalidRequest before anything is written: never a TypeError, nor a driver's error from the INSERT."""
    with pytest.raises(InvalidRequest) as refused:
        client.submit("billing", "invoice.send", {"invoice": 1}, **options)
    assert refused.value.field == next(iter(options))
    assert client.list()["tasks"] == []


@pytest.mark.parametrize("filters", [dict(queue="Ã"), dict(kind="Ã"), dict(queue=""), dict(kind=""),
                                     dict(queues=["billing", "Ã"]), dict(after="42"), dict(cursor="tsk_x")])
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_list_refuses_names_outside_the_grammar_before_any_sql(client: Client, filters):
    with pytest.raises(InvalidRequest):
        client.list(**filters)


def test_after_is_the_deprecated_name_of_cursor(client: Client):
    ids = [client.submit("billing", "k", {"n": n})["task_id"] for n in range(3)]
    with pytest.warns(DeprecationWarning, match="cursor="):
        page = client.list(limit=1, after=ids[0])
    assert [t["task_id"] for t in page["tasks"]] == [ids[1]]
    with pytest.raises(InvalidRequest), pytest.warns(DeprecationWarning):
        client.list(after=ids[0], cursor=ids[1])


def test_the_cancel_reason_shown_is_the_one_given(client: Client):
    task_id = client.submit("billing", "k", {})["task_id"]
    with pytest.raises(InvalidRequest, match="255"):
        client.cancel(task_id, reason="r" * 256)
    reason = "customer asked: " + "é" * 239  # 255 characters, not 255 bytes
    assert client.cancel(task_id, reason=reason)["cancel"]["reason"] == reason
    assert client.get(task_id)["cancel"]["reason"] == reason


@pytest.mark.parametrize("task_id", ["Ã", "", "tsk_" + "é" * 26, "tsk_01J00000000000000000000000\n"])
def test_a_string_that_cannot_be_a_task_id_names_no_task(client: Client, task_id):
    """Not a database error (a collation clash with the ascii id column): simply no such task."""
    for call in (client.get, client.cancel, client.retry):
        with pytest.raises(TaskNotFound):
            call(task_id)
    with pytest.raises(ClientError) as refused:
        client.drain("ins_Ã")
    assert refused.value.code == "instance_not_found"


WHO_CALLS = [
    ("paused_by", lambda c, who: c.pause_queue("billing", paused_by=who)),
    ("resumed_by", lambda c, who: c.resume_queue("refunds", resumed_by=who)),
    ("requested_by", lambda c, who: c.cancel(c.submit("refunds", "k")["task_id"], requested_by=who)),
    ("updated_by", lambda c, who: c.set_queue_retention("billing", 60, updated_by=who)),
    ("updated_by", lambda c, who: c.set_fairness_weight("tenant:7", 2, updated_by=who)),
    ("updated_by", lambda c, who: c.set_settings({"lease_ttl": 40}, updated_by=who)),
]


@pytest.mark.parametrize(("field", "call"), WHO_CALLS, ids=[f"{i}-{field}" for i, (field, _) in enumerate(WHO_CALLS)])
def test_who_asked_holding_a_lone_surrogate_is_refused_naming_the_field(client: Client, field, call):
    """InvalidRequest before any SQL sees it, as for the other text a call takes: no column holds a lone
    surrogate (the driver's UnicodeEncodeError otherwise)."""
    client.pause_queue("refunds", paused_by="test")
    with pytest.raises(InvalidRequest) as refused:
        call(client, "op-\ud800")
    assert refused.value.field == field
    queues = client.queues()
    assert queues["refunds"]["paused_by"] == "test" and "billing" not in queues, "nothing was written"


def test_fairness_key_and_weights(client: Client):
    task = client.submit("billing", "invoice.send", {"invoice": 7}, fairness_key="tenant:7")
    assert client.get(task["task_id"])["fairness_key"] == "tenant:7"
    with pytest.raises(InvalidRequest, match="fairness_key"):
        client.submit("billing", "invoice.send", fairness_key="two words")
    assert client.fairness_weights() == {}
    set_ = client.set_fairness_weight("tenant:7", 3, updated_by="test")
    assert (set_["fairness_key"], set_["weight"], set_["updated_by"]) == ("tenant:7", 3, "test")
    assert client.set_fairness_weight("tenant:7", "5", updated_by="test")["weight"] == 5
    assert list(client.fairness_weights()) == ["tenant:7"]
    for key, weight in (("tenant:7", 0), ("tenant:7", 10_001), ("tenant:7", 2.5), ("tenant:7", True), ("", 2)):
        with pytest.raises(InvalidRequest):
            client.set_fairness_weight(key, weight, updated_by="test")
    assert client.fairness_weights()["tenant:7"]["weight"] == 5


@pytest.mark.parametrize("size", [0, -1, True, 1.5, "2", None])
def test_a_pool_size_that_is_no_whole_number_of_connections_is_refused_when_made(db, size):
    """A bool was read as one connection, a float failed deep inside the pool at its first use."""
    with pytest.raises(ValueError, match="pool_size must be"):
        Client(db, pool_size=size)

"""Scalar grammars: their own rules, and agreement with the schema's patterns."""

from __future__ import annotations

import base64
import re
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import contract_support as s
from pulse_trio.contract import grammar as g
from pulse_trio.contract.limits import MAX_COUNTER

UINT64_MAX = "18446744073709551615"
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


# -- counters ---------------------------------------------------------------------


@pytest.mark.parametrize("text, value", [("1", 1), ("42", 42), (UINT64_MAX, MAX_COUNTER), ("9" * 19, 10**19 - 1)])
def test_canonical_counters_parse(text: str, value: int) -> None:
    assert g.parse_counter(text) == value
    assert g.format_counter(value) == text


@pytest.mark.parametrize("text", [
    "0", "00", "01", "+1", "-1", "1.0", "1e3", " 1", "1 ", "1\n", "", "18446744073709551616",
    "99999999999999999999", "100000000000000000000", "\uff11", "\u0661", "0x10", "1_000",
])
def test_non_canonical_or_overflowing_counters_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        g.parse_counter(text)


@pytest.mark.parametrize("value", [0, -1, MAX_COUNTER + 1, True, 1.0, "1"])
def test_counter_values_outside_uint64_without_zero_are_refused(value) -> None:
    assert not g.is_counter(value)
    with pytest.raises(ValueError):
        g.format_counter(value)


# -- secrets --------------------------------------------------------------------------


def test_new_secrets_are_32_random_bytes_in_canonical_form() -> None:
    seen = set()
    for _ in range(200):
        secret = g.new_secret()
        assert g.is_secret(secret) and len(secret) == 43
        assert len(base64.urlsafe_b64decode(secret + "=")) == 32
        seen.add(secret)
    assert len(seen) == 200


@pytest.mark.parametrize("last", list("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"))
def test_only_the_16_zero_low_bit_last_chars_are_canonical(last: str) -> None:
    secret = s.SECRET_A[:-1] + last
    decoded = base64.urlsafe_b64decode(secret + "=")
    canonical = base64.urlsafe_b64encode(decoded).rstrip(b"=").decode() == secret
    assert g.is_secret(secret) == canonical == (last in "AEIMQUYcgkosw048")


@given(st.binary(min_size=32, max_size=32))
def test_every_32_byte_value_encodes_to_an_accepted_secret(raw: bytes) -> None:
    assert g.is_secret(base64.urlsafe_b64encode(raw).rstrip(b"=").decode())


# -- resource ids ------------------------------------------------------------------------


def test_new_ids_carry_their_prefix_and_time() -> None:
    for prefix in (g.SESSION_PREFIX, g.INSTANCE_PREFIX, g.TASK_PREFIX, g.LEASE_PREFIX):
        value = g.new_id(prefix, now_ms=1_764_676_800_000)
        assert g.is_resource_id(value, prefix)
        ms = 0
        for char in value[4:14]:
            ms = ms * 32 + CROCKFORD.index(char)
        assert ms == 1_764_676_800_000
    assert g.new_ulid(2**48 - 1).startswith("7ZZZZZZZZZ")
    assert g.new_ulid(0).startswith("0000000000")
    assert g.new_ulid(1000) < g.new_ulid(1001)
    with pytest.raises(ValueError):
        g.new_ulid(2**48)
    with pytest.raises(ValueError):
        g.new_id("job_")


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.integers(min_value=0, max_value=2**128 - 1), st.sampled_from([0, 1, 31, 32, 2**127, 2**128 - 1])))
def test_a_ulid_is_its_128_bits_in_crockford_base32(value: int) -> None:
    text = g._crockford(value)
    assert len(text) == 26 and set(text) <= set(CROCKFORD) and text[0] in "01234567"
    decoded = 0
    for char in text:
        decoded = decoded * 32 + CROCKFORD.index(char)
    assert decoded == value


@pytest.mark.parametrize("value", [
    s.TASK.lower(), "tsk_" + "0" * 25, "tsk_" + "0" * 27, "tsk_8" + "0" * 25, "tsk_" + "I" * 26, "tsk_" + "L" * 26,
    "tsk_" + "O" * 26, "tsk_" + "U" * 26, "tsk-" + "0" * 26, "TSK_" + "0" * 26, s.LEASE, s.TASK + "\n",
])
def test_malformed_task_ids_are_refused(value: str) -> None:
    assert not g.is_task_id(value)


# -- times ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("2026-12-02T12:00:00Z", datetime(2026, 12, 2, 12, tzinfo=timezone.utc)),
    ("2026-12-02T12:00:00.5Z", datetime(2026, 12, 2, 12, 0, 0, 500000, tzinfo=timezone.utc)),
    ("2026-12-02T12:00:00.000001Z", datetime(2026, 12, 2, 12, 0, 0, 1, tzinfo=timezone.utc)),
    ("2024-02-29T23:59:59.999999Z", datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=timezone.utc)),
    ("0001-01-01T00:00:00Z", datetime(1, 1, 1, tzinfo=timezone.utc)),
])
def test_times_parse_to_aware_utc(text: str, expected: datetime) -> None:
    parsed = g.parse_time(text)
    assert parsed == expected and parsed.tzinfo is timezone.utc


@pytest.mark.parametrize("text", [
    "2026-02-30T00:00:00Z", "2023-02-29T00:00:00Z", "2026-12-02T12:00:00.1234567Z", "2026-12-02T12:00:00+00:00",
    "2026-12-02T12:00:00", "2026-12-02t12:00:00z", "2026-12-02T12:00:60Z", "2026-12-02T24:00:00Z",
    "0000-01-01T00:00:00Z", "2026-12-02T12:00:00.Z", "2026-12-02T12:00:00Z\n", "2026-12-2T12:00:00Z",
])
def test_bad_times_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        g.parse_time(text)


def test_output_times_have_exactly_six_fractional_digits_in_utc() -> None:
    assert g.format_time(datetime(2026, 12, 2, 12, tzinfo=timezone.utc)) == "2026-12-02T12:00:00.000000Z"
    plus_two = timezone(timedelta(hours=2))
    assert g.format_time(datetime(2026, 12, 2, 14, 0, 0, 42, tzinfo=plus_two)) == "2026-12-02T12:00:00.000042Z"
    with pytest.raises(ValueError):
        g.format_time(datetime(2026, 12, 2))


@given(st.datetimes(timezones=st.just(timezone.utc)))
def test_time_round_trip(value: datetime) -> None:
    text = g.format_time(value)
    assert len(text) == 27 and g.parse_time(text) == value


# -- the schema's patterns say the same as the grammar ---------------------------------------

_PREDICATES = {
    "messageId": g.is_message_id,
    "queue": g.is_queue,
    "kind": g.is_kind,
    "errorCode": g.is_error_code,
    "concurrencyKey": g.is_concurrency_key,
    "label": lambda v: g.is_label(v, 128),
    "secret": g.is_secret,
    "sessionId": g.is_session_id,
    "instanceId": g.is_instance_id,
    "taskId": g.is_task_id,
    "leaseId": g.is_lease_id,
}


def _parses(parse, value: str) -> bool:
    try:
        parse(value)
    except ValueError:
        return False
    return True


def _candidates(definition: str) -> st.SearchStrategy[str]:
    pattern = s.schema()["$defs"][definition]["pattern"]
    core = pattern[1:-len("$(?!\\n)")]  # the same regex without its anchors
    valid = st.from_regex(re.compile(core), fullmatch=True)
    edited = st.tuples(valid, st.text(max_size=3), st.integers(0, 200)).map(lambda t: t[0][: t[2]] + t[1] + t[0][t[2]:])
    return st.one_of(valid, edited, valid.map(lambda v: v + "\n"), st.text(max_size=70))


@pytest.mark.parametrize("definition", sorted(_PREDICATES))
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_schema_patterns_agree_with_grammar_predicates(definition: str, data) -> None:
    value = data.draw(_candidates(definition))
    assert s.validator(definition).is_valid(value) == _PREDICATES[definition](value)


_COUNTER_NEAR_EDGES = st.one_of(
    st.integers(0, 2**64 + 10).map(str),
    st.integers(2**64 - 1000, 2**64 + 1000).map(str),
    st.integers(10**18, 10**21).map(str),
    st.from_regex(r"[+-]?0{0,2}[0-9]{0,21}", fullmatch=True),
)


@settings(max_examples=400, deadline=None)
@given(_COUNTER_NEAR_EDGES)
def test_counter_pattern_encodes_the_uint64_bound_exactly(value: str) -> None:
    assert s.validator("counter").is_valid(value) == _parses(g.parse_counter, value)


@pytest.mark.parametrize("value", ["18446744073709551615", "18446744073709551614", "18446744073709551609",
                                   "18446744073709551616", "18446744073709551620", "18446744073709552615",
                                   "28446744073709551615", "10000000000000000000", "9999999999999999999"])
def test_counter_pattern_at_every_digit_of_the_bound(value: str) -> None:
    assert s.validator("counter").is_valid(value) == _parses(g.parse_counter, value) == (int(value) < 2**64)


_TIMES = st.one_of(
    st.datetimes(timezones=st.just(timezone.utc)).map(g.format_time),
    st.from_regex(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{0,8})?[Zz]?", fullmatch=True),
    st.sampled_from(["2026-02-29T00:00:00Z", "2028-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2000-02-29T00:00:00Z"]),
)


@settings(max_examples=300, deadline=None)
@given(_TIMES)
def test_time_definition_with_format_assertion_agrees_with_parse_time(value: str) -> None:
    assert s.validator("time").is_valid(value) == _parses(g.parse_time, value)


def test_ulids_made_in_one_millisecond_still_increase():
    """Ids one process makes list in the order it made them, however many share a millisecond (threads too)."""
    import threading

    made = [g.new_ulid() for _ in range(5000)]
    assert made == sorted(made) and len(set(made)) == len(made)
    assert len({u[:10] for u in made}) < len(made), "several in one millisecond: the case this is about"
    per_thread: list[list[str]] = [[] for _ in range(4)]

    def make(out: list[str]) -> None:
        out.extend(g.new_ulid() for _ in range(2000))

    threads = [threading.Thread(target=make, args=(out,)) for out in per_thread]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = [u for out in per_thread for u in out]
    assert all(out == sorted(out) for out in per_thread) and len(set(everything)) == len(everything)

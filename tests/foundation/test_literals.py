"""The connection's literals: the text PyMySQL would send, made in fewer steps.

``driver.Connection.escape`` takes shortcuts for the values hot statements
repeat (ids, states, counters, times, IN lists). Each shortcut must give
exactly PyMySQL's own literal, in both ``sql_mode`` flavours (backslash
escapes and NO_BACKSLASH_ESCAPES), and the values must come back from the
real database as they went in.
"""

from __future__ import annotations

import datetime as dt

import pymysql
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pymysql.constants import SERVER_STATUS

from pulse_trio.dburl import connect
from pulse_trio.driver import CONVERSIONS, Connection

NO_BACKSLASH = SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES

#: Strings with and without the characters escaping changes, ids among them.
texts = st.one_of(
    st.text(max_size=40),
    st.text(alphabet="abcXYZ019_-:.'\"\\\n\r\x00\x1a%", max_size=20),
    st.from_regex(r"(tsk|lse|ses)_[0-9A-HJKMNP-TV-Z]{26}", fullmatch=True),
)
scalars = st.one_of(
    texts, st.integers(min_value=-2**63, max_value=2**64), st.none(), st.booleans(), st.binary(max_size=40),
    st.datetimes(), st.datetimes(timezones=st.just(dt.timezone.utc)), st.floats(allow_nan=False, allow_infinity=False),
)
#: IN lists and key tuples as the statements send them: flat, nested, homogeneous or mixed, empty.
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=6), st.tuples(inner, inner, inner),
                                                       st.lists(texts, max_size=8).map(tuple)), max_leaves=30)
#: A composite key's IN list, ``((lease_id, owner, revision), ...)``, and lists whose rows are not all such tuples.
key_rows = st.one_of(
    st.lists(st.tuples(texts, texts, st.integers(min_value=-2**63, max_value=2**64)), min_size=1, max_size=6),
    st.lists(st.tuples(texts, scalars), min_size=1, max_size=4).map(tuple),
    st.tuples(st.tuples(texts, st.booleans()), scalars, st.lists(texts, max_size=2)),
    st.lists(st.one_of(st.tuples(scalars, scalars), st.lists(scalars, max_size=3), scalars), min_size=1, max_size=4)
    .filter(lambda rows: type(rows[0]) is tuple),
)


def _pair(status: int) -> tuple[Connection, pymysql.connections.Connection]:
    ours = Connection(defer_connect=True, charset="utf8mb4", conv=CONVERSIONS)
    theirs = pymysql.connections.Connection(defer_connect=True, charset="utf8mb4", conv=CONVERSIONS)
    ours.server_status = theirs.server_status = status
    return ours, theirs


_PAIRS = {status: _pair(status) for status in (0, NO_BACKSLASH)}


@pytest.mark.parametrize("status", [0, NO_BACKSLASH], ids=["backslash escapes", "no backslash escapes"])
@settings(max_examples=600, deadline=None)
@given(value=st.one_of(values, key_rows))
def test_every_literal_is_the_one_pymysql_writes(status, value):
    ours, theirs = _PAIRS[status]
    assert ours.escape(value) == theirs.escape(value)


@pytest.mark.parametrize("status", [0, NO_BACKSLASH], ids=["backslash escapes", "no backslash escapes"])
def test_a_whole_statement_is_the_same_text(status):
    ours, theirs = _pair(status)
    ids = tuple(f"lse_01M94SBG181MB9TYMS8CY1G6{n:02d}" for n in range(64))
    now = dt.datetime(2026, 12, 6, 5, 0, 0, 123456)
    args = ("RUNNING", now, tuple((i, "ses_01M94SBG10MD0GZ4AX1TM8VT88", 1) for i in ids), ids, ("OFFERED",),
            "it's \\ odd\n", b"\x00\x01'", None, True, [], ())
    sql = "SELECT " + ", ".join(["%s"] * len(args))
    assert ours.cursor().mogrify(sql, args) == theirs.cursor().mogrify(sql, args)


def test_values_come_back_from_the_database_as_they_went_in(db):
    conn = connect(db)
    try:
        assert type(conn) is Connection
        sent = ("tsk_01M94SBDZHRD38SAB3Y55K4QBB", "it's a \"quote\" \\ and\na line\x00\x1a", "", "ünï ☃",
                dt.datetime(2026, 12, 6, 5, 0, 0, 123456), 2**64 - 1, None)
        with conn.cursor() as cur:
            cur.execute("SELECT " + ", ".join(["%s"] * len(sent)), sent)
            (row,) = cur.fetchall()
            assert row[:4] == sent[:4] and row[5:] == sent[5:]
            assert row[4] == sent[4].isoformat(" "), "a time is sent as its DATETIME(6) text"
            cur.execute("SELECT %s IN %s, %s IN %s", ("b'c", ("a", "b'c"), "x", ("a", "b'c")))
            assert cur.fetchone() == (1, 0)
    finally:
        conn.close()

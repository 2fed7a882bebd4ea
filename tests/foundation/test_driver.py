"""The connection's results: what PyMySQL itself reads, read in fewer steps (``driver._Result``).

Rows are cut from their packets in one loop and column descriptions are
kept per connection by their bytes; both must give exactly what PyMySQL's
own reader gives. Packets built here test every length form of a column
without a database; the real database is then read by both connections
side by side, every column type the store uses and the length forms
among them.
"""

from __future__ import annotations

import datetime as dt
import decimal
import ssl
import struct
from collections.abc import Iterator

import pymysql
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pymysql.connections import MySQLResult
from pymysql.protocol import MysqlPacket

from pulse_trio.driver import CONVERSIONS, MAX_DESCRIPTIONS, Connection, _Result


def _length_coded(value: bytes | None, form: str) -> bytes:
    """One column as the server writes it; ``form`` picks the length's encoding (any may carry a short length)."""
    if value is None:
        return b"\xfb"
    size = len(value)
    if form == "1" and size < 251:
        return bytes([size]) + value
    if form in ("1", "2") and size < 2**16:
        return b"\xfc" + size.to_bytes(2, "little") + value
    if form in ("1", "2", "3") and size < 2**24:
        return b"\xfd" + size.to_bytes(3, "little") + value
    return b"\xfe" + size.to_bytes(8, "little") + value


#: How a column is read: (encoding, converter), as PyMySQL picks them from its description.
READERS = [(None, None), ("utf8", None), ("ascii", int), ("ascii", CONVERSIONS[pymysql.FIELD_TYPE.DATETIME]),
           ("ascii", float)]
columns = st.lists(st.tuples(st.sampled_from(range(len(READERS))),
                             st.one_of(st.none(), st.binary(max_size=300), st.just(b"x" * 70_000)),
                             st.sampled_from(["1", "2", "3", "8"])), max_size=8)


def _values_for(reader: int, raw: bytes | None) -> bytes | None:
    """A value ``reader`` can convert: raw bytes for the binary reader, digits or a time for the others."""
    if raw is None or reader in (0, 1):
        return raw if reader == 0 or raw is None else raw.decode("latin-1").encode("utf8")
    if reader == 3:
        return b"2026-12-06 20:30:00.%06d" % (len(raw) % 1_000_000)
    return str(len(raw)).encode()


def _read(cls: type, converters: list, data: bytes):
    result = cls.__new__(cls)
    result.unbuffered_active = False  # (what __init__ sets, for __del__)
    result.converters = converters
    packet = MysqlPacket(data, "utf8")
    try:
        return ("row", result._read_row_from_packet(packet), packet._position)
    except AssertionError:
        return ("value cut short", None, None)
    except struct.error:
        return ("length cut short", None, None)


@settings(max_examples=300, deadline=None)
@given(cols=columns, missing=st.integers(min_value=0, max_value=2), cut=st.integers(min_value=0, max_value=3))
def test_a_row_is_read_as_pymysql_reads_it(cols, missing, cut):
    """Values, NULLs, each length form, a row with fewer columns than described, a truncated packet."""
    converters = [READERS[reader] for reader, _, _ in cols] + [READERS[1]] * missing
    data = b"".join(_length_coded(_values_for(reader, raw), form) for reader, raw, form in cols)
    if cut and data:
        data = data[:max(0, len(data) - cut)]
    assert _read(_Result, converters, data) == _read(MySQLResult, converters, data)


@pytest.fixture
def pair(database_config) -> Iterator[tuple[Connection, pymysql.connections.Connection]]:
    """Ours and PyMySQL's own connection to one database, read side by side."""
    kwargs = database_config.connect_kwargs()
    ours = Connection(**kwargs)
    try:
        theirs = pymysql.connections.Connection(**kwargs)
        try:
            yield ours, theirs
        finally:
            theirs.close()
    finally:
        ours.close()


_TYPES = """CREATE TEMPORARY TABLE driver_types (
    id INT PRIMARY KEY, big BIGINT UNSIGNED, num DECIMAL(20, 6), real_ DOUBLE, flag TINYINT(1),
    name VARCHAR(300) CHARACTER SET utf8mb4, code CHAR(30) CHARACTER SET ascii COLLATE ascii_bin,
    digest BINARY(32), blob_ MEDIUMBLOB, body MEDIUMTEXT, at DATETIME(6), day DATE, span TIME(6), doc JSON)"""
_ROWS = [
    (1, 2**64 - 1, decimal.Decimal("-12345.000001"), 1.5, 1, "ünï ☃ " * 40, "tsk_01M94SBDZHRD38SAB3Y55K4QBB",
     bytes(range(32)), b"\x00\xff" * 35_000, "x" * 251, dt.datetime(2026, 12, 6, 20, 0, 0, 123456),
     dt.date(2026, 12, 6), dt.timedelta(hours=-3, microseconds=5), '{"a": [1, "b"]}'),
    (2, None, None, None, None, "", "", b"\x00" * 32, b"", "y" * 70_000, None, None, None, None),
    (3, 0, decimal.Decimal("0"), -0.0, 0, "a" * 250, "x", b"\xfb" * 32, b"\xfc" * 250, "", dt.datetime(1, 1, 1),
     dt.date(9999, 12, 31), dt.timedelta(0), "null"),
]


def test_every_column_type_reads_as_pymysql_reads_it(pair):
    ours, theirs = pair
    for conn in (ours, theirs):
        with conn.cursor() as cur:
            cur.execute(_TYPES)
            cur.executemany("INSERT INTO driver_types VALUES (" + ", ".join(["%s"] * 14) + ")", _ROWS)
    statements = ["SELECT * FROM driver_types ORDER BY id",
                  "SELECT id, body, NULL, 'lit', 7 AS seven, CAST(at AS DATETIME) FROM driver_types ORDER BY id",
                  "SELECT * FROM driver_types WHERE id = 99",
                  "SELECT REPEAT('z', 300000), REPEAT(_binary x'fe', 70000)"]
    for statement in statements * 2:  # the second time, ours reads each description from its cache
        read = []
        for conn in (ours, theirs):
            with conn.cursor() as cur:
                cur.execute(statement)
                read.append((cur.fetchall(), cur.description, cur.rowcount))
        assert read[0] == read[1], statement
    assert ours.descriptions, "the descriptions were kept"


def test_the_descriptions_kept_stay_bounded(pair):
    """Columns named after literals vary without bound: the connection starts its cache again past the limit."""
    ours, theirs = pair
    for n in range(MAX_DESCRIPTIONS + 40):
        for conn in (ours, theirs):
            with conn.cursor() as cur:
                cur.execute("SELECT %s, %s", (f"value {n}", n))
                got = (cur.fetchall(), cur.description)
                if conn is ours:
                    mine = got
        assert mine == got
        assert len(ours.descriptions) <= MAX_DESCRIPTIONS + 2


@pytest.mark.parametrize("statement", ["SELECT 1 FROM no_such_table", "SELECT CAST('x' AS INT) + 'y'"])
def test_errors_and_warnings_come_through_alike(pair, statement):
    ours, theirs = pair
    outcomes = []
    for conn in (ours, theirs):
        with conn.cursor() as cur:
            try:
                cur.execute(statement)
                outcomes.append(("ok", cur.fetchall(), cur.description))
            except pymysql.MySQLError as exc:
                outcomes.append(("error", type(exc), exc.args))
    assert outcomes[0] == outcomes[1]


def test_a_new_character_set_drops_the_descriptions_kept(pair):
    """Which encoding a column is read in follows the connection's character set, so the kept ones go with it."""
    ours, theirs = pair
    for charset in ("utf8mb4", "latin1", "utf8mb4"):
        read = []
        for conn in (ours, theirs):
            conn.set_character_set(charset)
            with conn.cursor() as cur:
                cur.execute("SELECT %s, CONVERT(%s USING latin1), JSON_OBJECT('a', %s)",
                            ("\u00fc", "\u00e4", "\u00e9"))
                read.append((cur.fetchall(), cur.description))
        assert read[0] == read[1], charset
    ours.set_character_set("utf8mb4")
    assert not ours.descriptions


def test_connections_without_tls_options_share_one_opportunistic_context(db):
    """PyMySQL's no-option TLS (used when the server offers it, verifying nothing) is built once, not per connect."""
    first, second = (Connection(**db.connect_kwargs()) for _ in range(2))
    try:
        assert first.ctx is second.ctx
        assert (first.ctx.verify_mode, first.ctx.check_hostname) == (ssl.CERT_NONE, False)
        assert first._create_ssl_ctx({"verify_mode": "none"}) is not first.ctx  # options given: PyMySQL's own
        with second.cursor() as cur:  # and the connection works as PyMySQL's own
            cur.execute("SELECT 1")
            assert cur.fetchone() == (1,)
    finally:
        first.close()
        second.close()

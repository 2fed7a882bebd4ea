"""PyMySQL as the service drives it: literals written and results read in fewer steps.

PyMySQL stays the driver; this is its connection class with the hot paths
of a busy store made cheaper, each giving exactly what PyMySQL's own code
gives (tests/foundation/test_literals.py and test_driver.py hold the two
side by side):

- literals (:meth:`Connection.escape`): the values hot statements repeat
  (ids, states, counters, times, IN lists, composite keys) quoted inline;
- result rows (:class:`_Result`): each row's columns cut from its packet in
  one loop, instead of three method calls per column;
- result metadata: a result's column descriptions are the same bytes every
  time a statement shape runs, so each connection parses a description
  once and keeps it (a bounded number of them).

Like :mod:`pulse_trio.dburl`, it imports nothing of the package.
"""

from __future__ import annotations

import datetime as dt
import re
import struct
from typing import Any

import pymysql
from pymysql.constants import FIELD_TYPE
from pymysql.converters import conversions, convert_datetime, escape_datetime
from pymysql.protocol import FieldDescriptorPacket, MysqlPacket


def _read_datetime(text: str) -> dt.datetime | str:
    """DATETIME(6) text -> naive datetime through the C parser.

    PyMySQL's own converter is a regex plus int() per field; a task's
    commands read about a dozen timestamps, so this is on the hot path.
    Anything ``fromisoformat`` refuses goes to PyMySQL's converter.
    """
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        return convert_datetime(text)


def _write_datetime(value: dt.datetime, mapping: Any = None) -> str:
    """A naive datetime -> its SQL literal through the C ``isoformat``.

    The same text as PyMySQL's ``escape_datetime`` (fraction only when
    there are microseconds) at a third of the cost; a task's commands send
    about a dozen timestamps. Aware values keep PyMySQL's behaviour.
    """
    if value.tzinfo is not None:
        return escape_datetime(value, mapping)
    return "'" + value.isoformat(" ") + "'"


CONVERSIONS = {**conversions, FIELD_TYPE.DATETIME: _read_datetime, FIELD_TYPE.TIMESTAMP: _read_datetime,
                dt.datetime: _write_datetime}

#: The characters PyMySQL's string escaping changes, in either ``sql_mode`` (backslash escapes or
#: NO_BACKSLASH_ESCAPES): a string without them is its own literal once quoted.
_ESCAPED = re.compile(r"[\x00\n\r\x1a\\'\"]").search


#: The context PyMySQL's opportunistic TLS uses, once built (see :meth:`Connection._create_ssl_ctx`).
_OPPORTUNISTIC_TLS: list[Any] = []


class Connection(pymysql.connections.Connection):
    """PyMySQL's connection, with the literals and results of the hot statements in fewer steps.

    A claim, a start or a finish of 64 leases sends a few hundred values:
    ids, states, counters, times. PyMySQL escapes each through several calls
    (and a tuple of ids item by item). Here a string that holds nothing
    escaping would change is quoted as is, an IN list of such strings is
    joined in one call, the rows of a composite key's IN list (``(lease_id,
    owner, revision)``) are written in one loop, and integers, None, naive
    datetimes and nested tuples are written inline. Every other value, and
    every string with a character to escape, takes PyMySQL's own path: the
    text sent is the one PyMySQL would send. Results are read by
    :class:`_Result`.
    """

    def __init__(self, *args: Any, handshake_timeout: float | None = None, **kwargs: Any) -> None:
        #: Column descriptions this connection has parsed, by their packets' bytes (see :class:`_Result`).
        self.descriptions: dict[bytes, tuple[FieldDescriptorPacket, tuple, tuple[str | None, Any]]] = {}
        #: Seconds each read and write of the handshake may wait (see :meth:`connect`).
        self.handshake_timeout = handshake_timeout
        super().__init__(*args, **kwargs)

    def connect(self, sock: Any = None) -> None:
        """PyMySQL's own, with each read and write of the handshake bounded by ``handshake_timeout``.

        PyMySQL's ``connect_timeout`` covers the TCP connect alone: the greeting, the login and
        the session setup after it wait as long as ``read_timeout`` says, for good when it is
        unset, so a server that accepts and never answers would hold the caller's thread. The
        bound ends with the handshake: a statement then waits as long as ``read_timeout`` says
        (a lock wait, a migration's long ALTER must not be cut short).
        """
        if self.handshake_timeout is None:
            return super().connect(sock)
        after = self._read_timeout, self._write_timeout
        self._read_timeout, self._write_timeout = (
            self.handshake_timeout if t is None else min(t, self.handshake_timeout) for t in after)
        try:
            super().connect(sock)
        finally:
            self._read_timeout, self._write_timeout = after  # the next read or write resets the socket's

    def _create_ssl_ctx(self, sslp: Any) -> Any:
        """PyMySQL's, with the context of its opportunistic TLS (no TLS option given) built once per process.

        PyMySQL builds that context for every connection, TLS used or not
        (a local socket, a server without TLS), and building one reads the
        system's CA store: it cost more than the rest of a local connect
        (docs/performance.md, "Connecting"). It verifies nothing and keeps no
        per-connection state, so one serves every connection. The URL's TLS
        options (``ssl_mode=required`` and stronger) come as a finished
        context, built once per configuration (:func:`pulse_trio.dbtls.context`),
        which PyMySQL uses as it is.
        """
        if isinstance(sslp, dict) and not sslp:
            if not _OPPORTUNISTIC_TLS:  # two threads may both build one: the first kept serves both
                _OPPORTUNISTIC_TLS.append(super()._create_ssl_ctx({}))
            return _OPPORTUNISTIC_TLS[0]
        return super()._create_ssl_ctx(sslp)

    def set_character_set(self, charset: str, collation: str | None = None) -> None:
        """PyMySQL's own; the descriptions kept were read in the old encoding, so they go."""
        super().set_character_set(charset, collation)
        self.descriptions.clear()

    def escape(self, obj: Any, mapping: Any = None) -> str:
        kind = type(obj)
        if kind is str:
            if _ESCAPED(obj) is None:
                return "'" + obj + "'"
        elif kind is tuple or kind is list:
            if obj:
                first = type(obj[0])
                if first is str and type(obj[-1]) is str:
                    try:
                        joined = "','".join(obj)
                    except TypeError:  # a non-string between the ends
                        pass
                    else:
                        if _ESCAPED(joined) is None:
                            return "('" + joined + "')"
                elif first is tuple:
                    return "(" + ",".join([self._row(row, mapping) for row in obj]) + ")"
                escape = self.escape
                return "(" + ",".join([escape(item, mapping) for item in obj]) + ")"
        elif kind is int:
            return str(obj)
        elif obj is None:
            return "NULL"
        elif kind is dt.datetime:
            return _write_datetime(obj)
        return super().escape(obj, mapping)

    def _row(self, row: Any, mapping: Any) -> str:
        """One item of a list of rows: a tuple of plain strings and integers inline, anything else by :meth:`escape`."""
        if type(row) is not tuple:
            return self.escape(row, mapping)
        parts = []
        for item in row:
            kind = type(item)
            if kind is str and _ESCAPED(item) is None:
                parts.append("'" + item + "'")
            elif kind is int:
                parts.append(str(item))
            else:
                parts.append(self.escape(item, mapping))
        return "(" + ",".join(parts) + ")"

    def _read_query_result(self, unbuffered: bool = False) -> int:
        """PyMySQL's own, with :class:`_Result` reading what the server answers."""
        self._result = None
        result = _Result(self)
        if unbuffered:
            result.init_unbuffered_query()
        else:
            result.read()
        self._result = result
        if result.server_status is not None:
            self.server_status = result.server_status
        return result.affected_rows


#: Column descriptions one connection keeps at most; past it, it starts again (a statement that
#: selects literals names its columns after them, so their variety has no bound of its own).
MAX_DESCRIPTIONS = 512


class _Result(pymysql.connections.MySQLResult):
    """A result set read as PyMySQL reads it, with fewer calls per column and per description."""

    def _read_row_from_packet(self, packet: MysqlPacket) -> tuple:
        """The row's values: PyMySQL's length-coded strings, decoded and converted alike, cut in one loop."""
        data = packet._data
        pos = packet._position
        end = len(data)
        row = []
        for encoding, converter in self.converters:
            if pos >= end:  # no more columns in this row (PyMySQL stops there too)
                break
            size = data[pos]
            pos += 1
            if size >= 251:
                if size == 251 or size == 255:  # NULL (255 is no length at all: PyMySQL reads None too)
                    row.append(None)
                    continue
                width = 2 if size == 252 else 3 if size == 253 else 8
                if pos + width > end:
                    raise struct.error(f"a {width}-byte length at {pos} runs past the packet's {end} bytes")
                size = int.from_bytes(data[pos:pos + width], "little")
                pos += width
            value = data[pos:pos + size]
            if len(value) != size:
                raise AssertionError(f"Result length not requested length: expected={size}, actual={len(value)}")
            pos += size
            if encoding is not None:
                value = value.decode(encoding)
            if converter is not None:
                value = converter(value)
            row.append(value)
        packet._position = pos
        return tuple(row)

    def _get_descriptions(self) -> None:
        """PyMySQL's column descriptions, each parsed once per connection and then found by its bytes."""
        connection = self.connection
        known = connection.descriptions
        if len(known) > MAX_DESCRIPTIONS:
            known.clear()
        fields, converters, description = [], [], []
        for _ in range(self.field_count):
            raw = connection._read_packet()._data
            entry = known.get(raw)
            if entry is None:
                entry = known[raw] = _describe(connection, FieldDescriptorPacket(raw, connection.encoding))
            fields.append(entry[0])
            description.append(entry[1])
            converters.append(entry[2])
        self.fields, self.converters = fields, converters
        eof_packet = connection._read_packet()
        assert eof_packet.is_eof_packet(), "Protocol error, expecting EOF"
        self.description = tuple(description)


def _describe(connection: Connection, field: FieldDescriptorPacket) -> tuple[FieldDescriptorPacket, tuple, tuple]:
    """A column's description and how its values are read: PyMySQL's own choice of encoding and converter."""
    field_type = field.type_code
    if not connection.use_unicode:
        encoding = None
    elif field_type == FIELD_TYPE.JSON:
        encoding = connection.encoding  # JSON is sent in the connection's encoding, whatever its charsetnr
    elif field_type in pymysql.connections.TEXT_TYPES:
        encoding = None if field.charsetnr == 63 else connection.encoding  # charset 63: binary
    else:
        encoding = "ascii"
    converter = connection.decoders.get(field_type)
    if converter is pymysql.converters.through:
        converter = None
    return field, field.description(), (encoding, converter)

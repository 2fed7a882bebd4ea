"""What a failed statement, or a refused login, means: one reading for the runner, the pool and the writer choice.

The runner (``facade.py``) runs a transaction again or raises by
:func:`classify`; the writer choice (``writer.py``) moves to another node
only when :func:`node_answered` says the node did not, so a node that is up
but refuses one login (every connection slot taken, a wrong password) stays
the writer, as it does for every other process.
"""

from __future__ import annotations

import ssl

import pymysql

DEADLOCK = 1213  # also a Galera certification failure, reported at COMMIT: nothing was committed
LOCK_WAIT_TIMEOUT = 1205
#: Client-side "the connection is gone" codes (CR_*), and server shutdown.
CONNECTION_LOST = frozenset({2003, 2006, 2013, 2014, 2045, 2055, 1053, 1927})
#: A cluster node that is up but may not serve: 1047 "WSREP has not yet prepared node for
#: application use" and 1180 "Got error 6 'Not connected to Primary Component' during COMMIT".
#: Handled like a lost connection: the
#: connection is dropped, the writer re-checked, and a COMMIT hit by it re-checked.
NODE_NOT_READY = frozenset({1047, 1180})
#: The client library's own codes (CR_*): raised when the server did not answer, never sent by it.
CLIENT_CODES = range(2000, 3000)

#: The server refuses this login (user or password, a host or database the user may not use): waiting never
#: mends it, as it may an unreachable database.
LOGIN_REFUSED = frozenset({1044, 1045, 1130, 1698})
#: The server refuses a statement to this user (a table, column, routine or privilege it lacks).
STATEMENT_REFUSED = frozenset({1142, 1143, 1227, 1370})
#: The server is up but has no room for this login now: every connection taken (1040), the user's own
#: limit (1203) or hourly quota (1226). Waiting mends it, unlike a refused login.
NO_ROOM = frozenset({1040, 1203, 1226})

#: The client's own refusal of a server that offers no TLS where the URL requires it (CR_SSL_CONNECTION_ERROR).
TLS_NOT_OFFERED = 2026
#: What PyMySQL reports a TLS handshake it could not complete as: a failed connect (CR_CONN_HOST_ERROR).
CONNECT_FAILED = 2003

CONFLICT, LOST = "conflict", "lost"


def _code(exc: BaseException) -> int:
    return exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0


def classify(exc: BaseException) -> str | None:
    """``CONFLICT`` (roll back and run again), ``LOST`` (drop the connection, run again) or None."""
    if isinstance(exc, pymysql.err.InterfaceError):
        return LOST
    if not isinstance(exc, (pymysql.err.OperationalError, pymysql.err.InternalError,
                            pymysql.err.NotSupportedError)):
        return None
    code = _code(exc)
    if code in (DEADLOCK, LOCK_WAIT_TIMEOUT):
        return CONFLICT
    if code in CONNECTION_LOST or code in NODE_NOT_READY:
        return LOST
    return None


def tls_refused(exc: BaseException) -> bool:
    """The server's TLS is not what the URL requires: none offered, or a certificate that fails verification
    or names another host. Like a wrong password, waiting never mends it."""
    code = _code(exc)
    return code == TLS_NOT_OFFERED or (
        code == CONNECT_FAILED
        and isinstance(getattr(exc, "original_exception", None), ssl.SSLCertVerificationError))


def refusal(exc: BaseException) -> str | None:
    """``"login"``, ``"tls"`` or ``"statement"`` when the server refused this user (:data:`LOGIN_REFUSED`),
    its TLS failed the URL's (:func:`tls_refused`), or it refused a statement (:data:`STATEMENT_REFUSED`);
    else None."""
    code = _code(exc)
    if tls_refused(exc):
        return "tls"
    return "login" if code in LOGIN_REFUSED else "statement" if code in STATEMENT_REFUSED else None


def unavailable(exc: BaseException) -> bool:
    """Waiting may mend it: no answer (a client code, a lost connection), a node not ready, no room for a
    login (:data:`NO_ROOM`), or a conflict that outlasted its retries.

    Any other answer of the server (an unknown column, a table that is not
    there, a refused login or statement) stays what it is however long one
    waits: a command that met it must not read as one to try again. Nor
    does a server whose TLS fails the URL's (:func:`tls_refused`), though
    the client reports it as a failed connect.
    """
    if tls_refused(exc):
        return False
    code = _code(exc)
    return classify(exc) is not None or code in CLIENT_CODES or code in NO_ROOM


def node_answered(exc: BaseException) -> bool:
    """A failed connect was the node's own refusal (1040 too many connections, 1226, 1045, ...): it is up.

    Not when the node could not be reached or gave no answer (a client
    code, a timeout, a garbled greeting), nor when it said it is shutting
    down or not ready to serve: those move the writer.
    """
    code = _code(exc)
    return (isinstance(exc, pymysql.err.MySQLError) and code > 0 and code not in CLIENT_CODES
            and classify(exc) != LOST)

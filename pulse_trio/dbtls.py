"""TLS to the database: the URL's ``ssl_*`` options, checked once, and the context each configuration needs.

The names and meanings are MySQL's client options (``--ssl-mode``,
``--ssl-ca``, ``--ssl-cert``, ``--ssl-key``), so a URL reads as a MySQL or
MariaDB user expects (docs/operations.md §1.2). Everything a URL could get
wrong (a contradiction, a file that cannot be read or is no certificate)
is refused when it is parsed, in one line, rather than at some later
connect. The context of a configuration is built once per process and
shared by all its connections: building one reads its files (and, with no
CA file, the system's whole store), which would cost more than the rest of
a connect.

Like :mod:`pulse_trio.dburl` and :mod:`pulse_trio.driver`, it imports
nothing of the package.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import ssl
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

#: ``ssl_mode``'s values, weakest first (MySQL's ``--ssl-mode``).
SSL_MODES = ("disabled", "preferred", "required", "verify_ca", "verify_identity")
#: TLS when the server offers it, unverified; plain text otherwise (PyMySQL's default, and MySQL's).
DEFAULT_SSL_MODE = "preferred"
#: The modes that never talk plain text: a server without TLS is refused.
ENCRYPTING = ("required", "verify_ca", "verify_identity")
#: The modes that check the server's certificate against a CA (``ssl_ca``, else the system's store).
VERIFYING = ("verify_ca", "verify_identity")
#: The URL options read here.
TLS_OPTIONS = ("ssl_mode", "ssl_ca", "ssl_cert", "ssl_key")


class TlsOptionError(ValueError):
    """The TLS options contradict each other, or name a file that cannot be used."""


@dataclasses.dataclass(frozen=True, slots=True)
class TlsOptions:
    """How a connection uses TLS; the paths are absolute, so a process handed the URL finds the same files."""

    mode: str = DEFAULT_SSL_MODE
    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    def connect_kwargs(self) -> dict[str, Any]:
        """What PyMySQL's ``Connection`` takes for this mode.

        ``preferred`` passes nothing: PyMySQL's own opportunistic TLS, whose
        context the driver shares (:meth:`pulse_trio.driver.Connection._create_ssl_ctx`).
        The others pass a finished context rather than PyMySQL's ``ssl_*``
        arguments, which build one per connection and, given no CA file,
        check no host name even when asked to.
        """
        if self.mode == "disabled":
            return {"ssl_disabled": True}
        if self.mode == DEFAULT_SSL_MODE:
            return {}
        return {"ssl": context(self)}

    def query(self) -> list[str]:
        """The URL options that give these back (none for the default)."""
        if self.mode == DEFAULT_SSL_MODE:
            return []
        given = (("ssl_mode", self.mode), ("ssl_ca", self.ca), ("ssl_cert", self.cert), ("ssl_key", self.key))
        return [f"{name}={quote(value, safe='/')}" for name, value in given if value]


def parse_tls(options: Mapping[str, str], *, unix_socket: bool = False) -> TlsOptions:
    """The TLS options of a URL's ``options``, checked, and their context built (so a bad file fails here).

    Without ``ssl_mode``: ``ssl_ca`` means ``verify_identity`` (asking for
    a CA is asking for verification, and the strictest fails loudly where
    a weaker one would pass unseen; MySQL's client takes ``verify_ca``),
    a client certificate alone means ``required`` (it is sent inside TLS),
    nothing means ``preferred``.
    """
    ca, cert, key = (_absolute(options.get(name)) for name in ("ssl_ca", "ssl_cert", "ssl_key"))
    given = options.get("ssl_mode")
    if given is not None and given.lower() not in SSL_MODES:
        raise TlsOptionError(f"ssl_mode must be one of {', '.join(SSL_MODES)}, not {given!r}")
    mode = given.lower() if given else "verify_identity" if ca else "required" if cert or key else DEFAULT_SSL_MODE
    if ca and mode not in VERIFYING:
        raise TlsOptionError(f"ssl_ca is only checked under ssl_mode=verify_ca or verify_identity, not {mode}: "
                             "drop one of them")
    if (cert or key) and mode not in ENCRYPTING:
        raise TlsOptionError(f"a client certificate needs ssl_mode=required or stronger, not {mode}")
    if bool(cert) != bool(key):
        raise TlsOptionError("ssl_cert and ssl_key go together: give both, or neither")
    if unix_socket and mode in ENCRYPTING:
        raise TlsOptionError(f"ssl_mode={mode} protects a TCP connection, and unix_socket names a local one: "
                             "drop one of them")
    tls = TlsOptions(mode, ca, cert, key)
    for name, path in (("ssl_ca", ca), ("ssl_cert", cert), ("ssl_key", key)):
        if path:
            _readable(name, path)
    if mode in ENCRYPTING:
        context(tls)
    return tls


def _absolute(path: str | None) -> str | None:
    return os.path.abspath(path) if path else None


def _readable(name: str, path: str) -> None:
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise TlsOptionError(f"{name} {path} cannot be read: {exc.strerror or exc}") from None


class _EncryptedKey(Exception):
    """The key asks for a password: a URL holds none, and OpenSSL would otherwise ask the terminal."""


def _no_password() -> bytes:
    raise _EncryptedKey


@functools.cache
def context(tls: TlsOptions) -> ssl.SSLContext:
    """The one context of ``tls`` (an encrypting mode) in this process, built at its first use."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # certificate and host name checked, TLS 1.2 at least
    ctx.check_hostname = tls.mode == "verify_identity"
    if tls.mode not in VERIFYING:
        ctx.verify_mode = ssl.CERT_NONE
    elif tls.ca:
        try:
            ctx.load_verify_locations(cafile=tls.ca)
        except ssl.SSLError as exc:
            raise TlsOptionError(f"ssl_ca {tls.ca} holds no usable certificate: {exc.reason or exc}") from None
    else:
        ctx.load_default_certs()
    # As PyMySQL does: Python 3.13 turns strict X.509 checks on, which the CA and server certificates
    # MySQL generates for itself fail; they are verified as any other certificate is.
    ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT
    if tls.cert:
        try:
            ctx.load_cert_chain(tls.cert, tls.key, password=_no_password)
        except _EncryptedKey:
            raise TlsOptionError(f"ssl_key {tls.key} is encrypted: give an unencrypted key "
                                 "(readable by the service's user alone)") from None
        except ssl.SSLError as exc:
            raise TlsOptionError(f"ssl_cert {tls.cert} and ssl_key {tls.key} are no certificate and its key: "
                                 f"{exc.reason or exc}") from None
    return ctx

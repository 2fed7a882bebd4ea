"""The database URL's TLS options: read as MySQL's ``--ssl-*`` options, contradictions refused when parsed."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from pulse_trio.dburl import DatabaseUrlError, parse_database_url


@pytest.fixture(scope="module")
def pems(tmp_path_factory) -> dict[str, Path]:
    """A CA file, a client certificate and its key, an encrypted key, and a file that is no certificate."""
    folder = tmp_path_factory.mktemp("pems")
    ca = trustme.CA()
    client = ca.issue_cert("client.example")
    paths = {name: folder / f"{name}.pem" for name in ("ca", "cert", "key", "encrypted", "text")}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    client.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    client.private_key_pem.write_to_path(str(paths["key"]))
    key = serialization.load_pem_private_key(client.private_key_pem.bytes(), None)
    paths["encrypted"].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                     serialization.BestAvailableEncryption(b"secret")))
    paths["text"].write_text("not a certificate\n")
    return paths


def test_without_tls_options_a_connection_is_opportunistic_as_before():
    """No option: MySQL's PREFERRED, PyMySQL's own default (TLS when offered, unverified), nothing passed on."""
    config = parse_database_url("mysql://u@db1/pulse")
    assert config.tls.mode == "preferred"
    assert not {key for key in config.connect_kwargs() if key.startswith("ssl")}


def test_every_mode_reads_back_as_the_same_config(pems):
    """What a serve group and the bench hand their processes: every TLS option survives the round trip."""
    for query in ("ssl_mode=disabled", "ssl_mode=required", f"ssl_mode=verify_ca&ssl_ca={pems['ca']}",
                  f"ssl_mode=verify_identity&ssl_ca={pems['ca']}&ssl_cert={pems['cert']}&ssl_key={pems['key']}",
                  f"ssl_mode=required&ssl_cert={pems['cert']}&ssl_key={pems['key']}", "ssl_mode=verify_identity"):
        config = parse_database_url(f"mysql://u:p@db1:3306,db2:3306/pulse?{query}")
        assert parse_database_url(config.url(redact=False)) == config
        assert config.for_node("db2", 3306).tls == config.tls  # the writer's choice connects alike


def test_a_mode_is_read_as_mysql_writes_it():
    assert parse_database_url("mysql://u@db1/pulse?ssl_mode=VERIFY_IDENTITY").tls.mode == "verify_identity"


def test_a_ca_without_a_mode_verifies_the_server_and_its_name(pems):
    """Giving a CA asks for verification: the strictest, so a name mismatch fails rather than passes unseen."""
    config = parse_database_url(f"mysql://u@db1/pulse?ssl_ca={pems['ca']}")
    assert config.tls.mode == "verify_identity"
    context = config.connect_kwargs()["ssl"]
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_a_client_certificate_without_a_mode_requires_tls(pems):
    config = parse_database_url(f"mysql://u@db1/pulse?ssl_cert={pems['cert']}&ssl_key={pems['key']}")
    assert config.tls.mode == "required"
    assert config.connect_kwargs()["ssl"].verify_mode == ssl.CERT_NONE


def test_disabled_turns_tls_off():
    assert parse_database_url("mysql://u@db1/pulse?ssl_mode=disabled").connect_kwargs()["ssl_disabled"] is True


def test_verify_ca_checks_the_certificate_but_not_the_name(pems):
    context = parse_database_url(f"mysql://u@db1/pulse?ssl_mode=verify_ca&ssl_ca={pems['ca']}").connect_kwargs()["ssl"]
    assert context.verify_mode == ssl.CERT_REQUIRED and not context.check_hostname


def test_verify_identity_without_a_ca_checks_the_name_against_the_system_s_cas():
    """PyMySQL's own ``ssl_verify_identity`` checks no name when no CA file is given: ours does."""
    context = parse_database_url("mysql://u@db1/pulse?ssl_mode=verify_identity").connect_kwargs()["ssl"]
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_a_relative_path_is_made_absolute_for_the_processes_it_is_handed_to(pems, monkeypatch):
    monkeypatch.chdir(pems["ca"].parent)
    config = parse_database_url("mysql://u@db1/pulse?ssl_ca=ca.pem")
    assert config.tls.ca == str(pems["ca"])


def test_a_verifying_context_is_built_once_per_configuration_per_process(pems):
    """Building one reads its files (and, without a CA file, the system's store): not once per connection."""
    url = f"mysql://u@db1/pulse?ssl_ca={pems['ca']}"
    first, again = parse_database_url(url), parse_database_url(url)
    assert first.connect_kwargs()["ssl"] is again.connect_kwargs()["ssl"]
    assert first.with_database("other").connect_kwargs()["ssl"] is first.connect_kwargs()["ssl"]
    other = parse_database_url(url + "&ssl_mode=verify_ca")
    assert other.connect_kwargs()["ssl"] is not first.connect_kwargs()["ssl"]


@pytest.mark.parametrize("query, message", [
    ("ssl_mode=on", r"ssl_mode must be one of disabled, preferred, required, verify_ca, verify_identity"),
    ("ssl_mode=required&ssl_mode=disabled", "ssl_mode is given twice"),
    ("ssl_ca=", "ssl_ca has no value"),
    ("ssl_mode=disabled&ssl_ca={ca}", "ssl_ca is only checked under ssl_mode=verify_ca or verify_identity"),
    ("ssl_mode=preferred&ssl_ca={ca}", "ssl_ca is only checked under ssl_mode=verify_ca or verify_identity"),
    ("ssl_mode=required&ssl_ca={ca}", "ssl_ca is only checked under ssl_mode=verify_ca or verify_identity"),
    ("ssl_mode=disabled&ssl_cert={cert}&ssl_key={key}", "a client certificate needs ssl_mode=required or stronger"),
    ("ssl_mode=preferred&ssl_cert={cert}&ssl_key={key}", "a client certificate needs ssl_mode=required or stronger"),
    ("ssl_cert={cert}", "ssl_cert and ssl_key go together"),
    ("ssl_key={key}", "ssl_cert and ssl_key go together"),
    ("ssl_ca={missing}", "ssl_ca .*missing.pem cannot be read"),
    ("ssl_ca={folder}", "ssl_ca .* cannot be read"),
    ("ssl_ca={ca}/ca.pem", "ssl_ca .* cannot be read"),
    ("ssl_ca={text}", "ssl_ca .*text.pem holds no usable certificate"),
    ("ssl_cert={text}&ssl_key={key}", "ssl_cert .*text.pem and ssl_key .* are no certificate and its key"),
    ("ssl_cert={cert}&ssl_key={encrypted}", "ssl_key .*encrypted.pem is encrypted"),
], ids=["unknown-mode", "mode-twice", "ca-empty", "disabled-with-ca", "preferred-with-ca", "required-with-ca",
        "disabled-with-cert", "preferred-with-cert", "cert-without-key", "key-without-cert", "ca-missing",
        "ca-a-folder", "ca-under-a-file", "ca-not-pem", "cert-not-pem", "key-encrypted"])
def test_a_contradiction_or_an_unusable_file_is_refused_in_one_line(pems, query, message):
    files = {name: str(path) for name, path in pems.items()}
    query = query.format(**files, missing=pems["ca"].parent / "missing.pem", folder=pems["ca"].parent)
    with pytest.raises(DatabaseUrlError, match=message) as refused:
        parse_database_url(f"mysql://u@db1/pulse?{query}")
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("mode", ["required", "verify_ca", "verify_identity"])
def test_tls_over_a_unix_socket_is_refused(mode):
    """TLS protects a network path; a unix socket has none to protect."""
    with pytest.raises(DatabaseUrlError, match=f"ssl_mode={mode} protects a TCP connection"):
        parse_database_url(f"mysql://u@localhost/pulse?unix_socket=/run/mysqld.sock&ssl_mode={mode}")


def test_a_unix_socket_may_turn_tls_off():
    config = parse_database_url("mysql://u@localhost/pulse?unix_socket=/run/mysqld.sock&ssl_mode=disabled")
    assert config.unix_socket == "/run/mysqld.sock" and config.tls.mode == "disabled"


"""`pulse-trio token …` as a user runs it: a real subprocess, a real database."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import subprocess
import sys

import pytest

from pulse_trio.store.token import tokens
from pulse_trio.dburl import connect


def cli(db, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pulse_trio", *args, "--database-url", db.url(redact=False)],
        capture_output=True, text=True, timeout=60,
    )


def test_create_prints_only_the_token_and_stores_only_its_digest(db):
    done = cli(db, "token", "create", "--role", "worker", "--queue", "billing", "--queue", "email")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pt_")
    token = lines[0]
    conn = connect(db)
    with conn.cursor() as cur:
        cur.execute("SELECT digest, role, queues FROM api_tokens")
        rows = cur.fetchall()
    conn.close()
    assert len(rows) == 1
    assert bytes(rows[0][0]) == hashlib.sha256(token.encode()).digest()
    assert rows[0][1] == "worker" and json.loads(rows[0][2]) == ["billing", "email"]
    assert token not in repr(rows)


def test_list_and_revoke(db):
    token = cli(db, "token", "create", "--role", "operator").stdout.strip()
    listed = json.loads(cli(db, "token", "list").stdout)["tokens"]
    assert [t["role"] for t in listed] == ["operator"] and listed[0]["queues"] == ["*"]
    assert token not in json.dumps(listed)
    token_id = listed[0]["token_id"]
    conn = connect(db)
    assert tokens.authenticate(conn, token) is not None
    revoked = cli(db, "token", "revoke", token_id)
    assert revoked.returncode == 0 and json.loads(revoked.stdout)["revoked_at"]
    assert tokens.authenticate(conn, token) is None
    conn.close()
    missing = cli(db, "token", "revoke", "tok_nope")
    assert missing.returncode == 3 and "no token" in missing.stderr  # not found (docs/operations.md §7)


def test_bad_arguments_exit_2_and_write_nothing(db):
    assert cli(db, "token", "create", "--role", "root").returncode == 2
    assert cli(db, "token", "create", "--role", "worker", "--queue", "Bad Queue").returncode == 2
    assert json.loads(cli(db, "token", "list").stdout)["tokens"] == []


def test_authenticate_checks_role_queue_and_shape(db):
    conn = connect(db)
    now = dt.datetime(2026, 12, 2, tzinfo=dt.timezone.utc)
    token, info = tokens.create_token(conn, role="producer", queues=["billing"], label="", now=now)
    assert tokens.authenticate(conn, token, roles=("worker",)) is None
    found = tokens.authenticate(conn, token, roles=("producer",))
    assert found is not None and found.allows_queue("billing") and not found.allows_queue("email")
    assert tokens.authenticate(conn, token[:-1] + ("A" if token[-1] != "A" else "B")) is None
    assert tokens.authenticate(conn, "not-a-token") is None
    conn.close()


def test_allow_grants_cancel_and_retry_to_a_producer(db):
    done = cli(db, "token", "create", "--role", "producer", "--queue", "billing", "--allow", "cancel,retry")
    assert done.returncode == 0, done.stderr
    listed = json.loads(cli(db, "token", "list").stdout)["tokens"]
    assert listed[0]["allow"] == ["cancel", "retry"] and listed[0]["queues"] == ["billing"]
    for bad in (["--role", "producer", "--allow", "drain"], ["--role", "worker", "--allow", "cancel"]):
        refused = cli(db, "token", "create", *bad)
        assert refused.returncode == 2 and "grant" in refused.stderr
    assert len(json.loads(cli(db, "token", "list").stdout)["tokens"]) == 1


def _assert_one_line(done, exit_code: int) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == exit_code, done
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("pulse-trio: "), done.stderr


def test_token_create_with_a_label_that_is_not_utf8_is_one_line_and_exit_2(db):
    """A Latin-1 terminal's "café": Python hands the byte on as a lone surrogate, which no column can store."""
    _assert_one_line(cli(db, "token", "create", "--role", "worker", "--label", "caf\udce9"), 2)
    assert json.loads(cli(db, "token", "list").stdout)["tokens"] == []


def test_token_revoke_with_an_id_that_is_not_utf8_is_one_line(db):
    _assert_one_line(cli(db, "token", "revoke", "tok_caf\udce9"), 3)


def test_token_create_refuses_a_label_with_control_characters_as_worker_names_do(db):
    """`token list` would print them raw: a C1 control (\\x9b is CSI) drives the operator's terminal."""
    for label in ("\x9b2J", "line\x85break", "tab\there"):
        _assert_one_line(cli(db, "token", "create", "--role", "worker", "--label", label), 2)
    assert cli(db, "token", "create", "--role", "worker", "--label", "billing — café").returncode == 0
    assert [t["label"] for t in json.loads(cli(db, "token", "list").stdout)["tokens"]] == ["billing — café"]


def test_token_revoke_given_the_token_instead_of_its_id_never_shows_it(db):
    token = cli(db, "token", "create", "--role", "worker").stdout.strip()
    done = cli(db, "token", "revoke", token)
    _assert_one_line(done, 3)
    assert token[3:] not in done.stderr + done.stdout
    conn = connect(db)
    assert tokens.authenticate(conn, token) is not None  # nothing was revoked
    conn.close()


@pytest.mark.parametrize("given", [" {t}", "\t{t}", "Bearer {t}", "PULSE_TOKEN={t}"],
                         ids=["leading-blank", "leading-tab", "bearer-header-value", "assignment"])
def test_token_revoke_given_the_token_pasted_around_never_shows_it(db, given):
    """A token with a blank before it, or as the header value it travels in, is still the secret: the
    error line shows no argument that is not an id's shape (docs/operations.md §1.4)."""
    token = cli(db, "token", "create", "--role", "worker").stdout.strip()
    done = cli(db, "token", "revoke", given.format(t=token))
    _assert_one_line(done, 3)
    assert token[3:] not in done.stderr + done.stdout
    conn = connect(db)
    assert tokens.authenticate(conn, token) is not None  # nothing was revoked
    conn.close()

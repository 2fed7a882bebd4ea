"""Where the managed database lives, and which commands may create one (docs/operations.md §1.2).

Its home never depends on the current folder; a read-only command never
creates a database: it fails in one line with exit code 4.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile

import pytest

from cli_support import run
from pulse_trio.dburl import connect
from pulse_trio.managed_db import default_state_dir

pytestmark = pytest.mark.live  # it runs commands that start a managed mariadbd

EXIT_REFUSED = 1
EXIT_UNREACHABLE = 4

READ_ONLY = [
    ["queues"], ["workers"], ["nodes"], ["task", "show", "tsk_01M8YHTCDFEKP3A18E63CFJFES"], ["task", "list"],
    ["settings", "show"], ["token", "list"],
]


def test_the_home_follows_the_environment_not_the_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("PULSE_STATE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    assert default_state_dir() == tmp_path / ".local" / "state" / "pulse-trio"
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert default_state_dir() == tmp_path / "xdg" / "pulse-trio"
    monkeypatch.setenv("PULSE_STATE_DIR", str(tmp_path / "explicit"))
    assert default_state_dir() == tmp_path / "explicit"
    monkeypatch.chdir(tmp_path / ".." )
    assert default_state_dir() == tmp_path / "explicit"


@pytest.mark.parametrize("command", READ_ONLY, ids=lambda c: " ".join(c[:2]))
def test_a_read_only_command_never_creates_a_database(tmp_path, command):
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    done = run(*command, cwd=str(folder))
    assert done.returncode == EXIT_UNREACHABLE, done
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("pulse-trio: no managed database in ")
    assert "pulse-trio serve" in done.stderr and "--database-url" in done.stderr
    assert not (tmp_path / "state").exists() and list(folder.iterdir()) == []


def test_every_folder_shares_one_managed_database(tmp_path):
    home = tempfile.mkdtemp(prefix="pth")  # short: the socket path has a length limit
    try:
        env = {k: v for k, v in os.environ.items() if k not in ("PULSE_STATE_DIR", "XDG_STATE_HOME")}
        env["HOME"] = home
        first, second = tmp_path / "a", tmp_path / "b"
        first.mkdir(), second.mkdir()
        created = run("migrate", cwd=str(first), env=env, timeout=120)
        assert created.returncode == 0, created
        assert os.path.isdir(os.path.join(home, ".local", "state", "pulse-trio", "mariadb", "data", "mysql"))
        token = run("token", "create", "--role", "worker", cwd=str(second), env=env, timeout=120)
        assert token.returncode == 0, token
        listed = run("token", "list", cwd=str(first), env=env, timeout=120)
        assert listed.returncode == 0 and len(__import__("json").loads(listed.stdout)["tokens"]) == 1, listed
        assert list(first.iterdir()) == [] and list(second.iterdir()) == []  # no .pulse-state here
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_a_read_only_command_creates_no_schema_through_a_url(database_server):
    fresh = database_server.with_database("pulse_never_created")
    done = run("queues", "--database-url", fresh.url(redact=False))
    assert done.returncode == EXIT_UNREACHABLE and "pulse-trio migrate" in done.stderr, done
    conn = connect(database_server)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW DATABASES LIKE 'pulse_never_created'")
            assert cur.fetchall() == ()
    finally:
        conn.close()


def test_an_unreachable_database_is_one_line():
    done = run("queues", "--database-url", "mysql://root@127.0.0.1:1/pulse")
    assert done.returncode == EXIT_UNREACHABLE, done
    assert done.stderr.count("\n") == 1 and "cannot reach the database" in done.stderr, done.stderr


@pytest.mark.parametrize("command", [["queues"], ["settings", "show"], ["migrate"]])
def test_a_refused_login_exits_1_not_4(db, command):
    """The database answered and said no (docs/operations.md §7.1: 1); exit 4 reads as "try again later"."""
    wrong = dataclasses.replace(db, user="pulse_nobody", password="not-the-password")
    done = run(*command, "--database-url", wrong.url(redact=False))
    assert done.returncode == EXIT_REFUSED, done
    assert done.stderr.count("\n") == 1 and "refused the login" in done.stderr, done.stderr
    assert "cannot reach" not in done.stderr and "not-the-password" not in done.stderr, done.stderr


@pytest.fixture
def read_only_user(db):
    """The test database's URL for a user that may only read it."""
    conn = connect(db)
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE USER 'pulse_reader'@'%' IDENTIFIED BY 'reader-pw'")
            cur.execute(f"GRANT SELECT ON `{db.database}`.* TO 'pulse_reader'@'%'")
            cur.execute("CREATE USER 'pulse_reader'@'localhost' IDENTIFIED BY 'reader-pw'")
            cur.execute(f"GRANT SELECT ON `{db.database}`.* TO 'pulse_reader'@'localhost'")
        yield dataclasses.replace(db, user="pulse_reader", password="reader-pw")
    finally:
        with conn.cursor() as cur:
            cur.execute("DROP USER IF EXISTS 'pulse_reader'@'%', 'pulse_reader'@'localhost'")
        conn.close()


@pytest.mark.parametrize("command", [["settings", "set", "cancel_grace", "3"], ["queues", "pause", "mail"],
                                     ["submit", "--queue", "q", "--kind", "k"]])
def test_a_statement_the_user_may_not_run_exits_1_not_4(read_only_user, command):
    """The database answered "UPDATE command denied": a refusal (docs/operations.md §7.1: 1), not "cannot reach"."""
    assert run("settings", "show", "--database-url", read_only_user.url(redact=False)).returncode == 0
    done = run(*command, "--database-url", read_only_user.url(redact=False))
    assert done.returncode == EXIT_REFUSED, done
    assert done.stderr.count("\n") == 1 and "command denied" in done.stderr, done.stderr
    assert "cannot reach" not in done.stderr, done.stderr


def test_a_database_left_in_the_old_place_is_pointed_out(tmp_path):
    folder = tmp_path / "project"
    (folder / ".pulse-state" / "mariadb" / "data" / "mysql").mkdir(parents=True)
    done = run("queues", cwd=str(folder))
    assert done.returncode == EXIT_UNREACHABLE and done.stderr.count("\n") == 1, done
    assert f"an earlier version is in {folder / '.pulse-state'}" in done.stderr
    assert f"--state-dir {folder / '.pulse-state'}" in done.stderr

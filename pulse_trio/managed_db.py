"""A private MariaDB server for running without a configured database.

`pulse-trio serve` with no database URL, and the test suite without
``PULSE_TEST_DATABASE_URL``, both start their own ``mariadbd``: its own data
directory (initialised with ``mariadb-install-db`` on first use), its own
socket and port, and it is stopped when its owner stops. Nothing here
touches a system-wide MariaDB, so it works whether one is running or not.
The CLI's one home for it is :func:`default_state_dir` (never the current
folder), and only the commands that may create a database initialise one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pymysql

from pulse_trio.child_process import killed_with_parent
from pulse_trio.dburl import DatabaseConfig
from pulse_trio.ports import free_port, start_on_fresh_ports
from pulse_trio.sd_notify import without_notify_socket
from pulse_trio.stop_signals import STOP_SIGNALS

_SERVER_NAMES = ("mariadbd", "mysqld")
_INSTALL_NAMES = ("mariadb-install-db", "mysql_install_db")
_SBIN = ("/usr/sbin", "/usr/local/sbin", "/usr/bin", "/usr/local/bin")


STATE_DIR_ENV = "PULSE_STATE_DIR"
APP_NAME = "pulse-trio"


class ManagedDatabaseError(RuntimeError):
    """The private MariaDB could not be started."""


class _PortTaken(ManagedDatabaseError):
    """``mariadbd`` could not bind its port: another socket took it first."""


#: The longest socket path accepted, in bytes as the kernel counts them (a little under its ``sun_path``).
_SOCKET_PATH_MAX_BYTES = 100
#: The server's socket, in its state dir unless it is given another folder.
SOCKET_NAME = "mysqld.sock"

#: What ``mariadbd`` logs when its TCP port is taken (errno EADDRINUSE).
_PORT_IN_USE = "Address already in use"


class ManagedDatabaseMissing(ManagedDatabaseError):
    """No managed MariaDB has been initialised in this state dir (and the caller may not create one)."""


def socket_fits(folder: Path) -> bool:
    """The server's socket may live in ``folder``: its path is short enough for a unix socket."""
    return len(os.fsencode(Path(folder).resolve() / SOCKET_NAME)) <= _SOCKET_PATH_MAX_BYTES


def default_state_dir() -> Path:
    """The one home of the managed database, whatever the current folder.

    ``$PULSE_STATE_DIR`` if set; else ``$XDG_STATE_HOME/pulse-trio``; else
    ``~/.local/state/pulse-trio`` (for root too: ``/root/.local/state/pulse-trio``).
    """
    explicit = os.environ.get(STATE_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "state"
    return base / APP_NAME


def _find(names: tuple[str, ...]) -> str:
    for name in names:
        path = shutil.which(name) or next(
            (str(Path(d, name)) for d in _SBIN if Path(d, name).exists()), None
        )
        if path:
            return path
    raise ManagedDatabaseError(
        f"none of {', '.join(names)} found: install mariadb-server (apt-get install mariadb-server)"
    )


@contextlib.contextmanager
def _interrupts_after() -> Iterator[None]:
    """A Ctrl-C, SIGTERM or SIGHUP that arrives inside the block is delivered once it has run.

    ``Popen`` forks, then waits for the exec: interrupted there, it raises
    without returning the child it made, and nobody could stop that child.
    Held back, the interrupt comes once the child is known, and the start's
    own cleanup stops it. Signal handlers are the main thread's alone; in
    another thread no interrupt arrives to hold back.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    held = {signum: handler for signum, handler in held.items() if handler is not None}  # None: set outside Python
    for signum in held:
        signal.signal(signum, lambda number, frame: caught.append(number))
    try:
        yield
    finally:
        for signum, handler in held.items():
            signal.signal(signum, handler)
        for signum in caught:
            signal.raise_signal(signum)


class ManagedMariaDB:
    """One private ``mariadbd`` rooted at ``state_dir``.

    ``fast=True`` relaxes flushing (for throwaway test databases only): a
    crash of the host may lose the last second of commits, which a test
    database does not care about and the service's default must.
    ``die_with_parent=True`` has the server killed when the thread that
    started it ends, however it ends (a test run's own server; never one
    other processes share, as ``serve``'s is). ``socket_dir`` puts its
    socket in another folder than the state dir, for a private server whose
    state dir's path is too long for one (see :func:`socket_fits`); other
    processes find a shared one's socket in its state dir. ``server_options``
    are more ``mariadbd`` options (a test server's TLS certificates).
    """

    def __init__(self, state_dir: Path, *, port: int | None = None, fast: bool = False,
                 die_with_parent: bool = False, socket_dir: Path | None = None,
                 server_options: Sequence[str] = ()) -> None:
        self.state_dir = Path(state_dir).resolve()
        self.data_dir = self.state_dir / "data"
        self.socket_path = Path(socket_dir or self.state_dir).resolve() / SOCKET_NAME
        self.pid_path = self.state_dir / "mysqld.pid"
        self.log_path = self.state_dir / "mysqld.log"
        #: Its own temporary files: bootstraps that run at once in one shared /tmp clash on temporary table names.
        self.tmp_dir = self.state_dir / "tmp"
        self.port = port
        self.fast = fast
        self.die_with_parent = die_with_parent
        self.server_options = tuple(server_options)
        self._process: subprocess.Popen[bytes] | None = None
        self._users = None  # the shared users.lock, held while this object uses the server
        if not socket_fits(self.socket_path.parent):
            raise ManagedDatabaseError(f"the socket's folder path is too long for a unix socket: {self.socket_path.parent}")

    def config(self, database: str = "pulse") -> DatabaseConfig:
        return DatabaseConfig(
            database=database, user="root", host="localhost",
            port=self.port or 3306, unix_socket=str(self.socket_path),
        )

    @property
    def initialised(self) -> bool:
        """A data directory exists here (the server may or may not be running)."""
        return (self.data_dir / "mysql").is_dir()

    def start(self, timeout: float = 60.0, *, create: bool = True) -> DatabaseConfig:
        """Start the server (or reuse one already serving this state dir).

        With ``create=False`` nothing is created: no state dir, no data
        directory; ``ManagedDatabaseMissing`` says none has been initialised
        (an initialised one that is not running is started).

        Two locks in the state dir make the server shared safely between
        processes: an exclusive ``start.lock`` around starting and stopping
        (so a command started while ``serve`` is still initialising waits,
        then reuses the server instead of starting another on the same data
        directory), and a shared ``users.lock`` that every user holds while
        it uses the server. Whoever stops last stops the server.
        """
        if not create and not self.initialised:
            raise ManagedDatabaseMissing(f"no managed database in {self.state_dir}")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with self._start_lock():
            if not create and not self.initialised:  # its initialisation failed meanwhile
                raise ManagedDatabaseMissing(f"no managed database in {self.state_dir}")
            try:
                config = self._start_locked(timeout)
            except BaseException:  # an interrupt (Ctrl-C, a stop) while it starts: no server is left behind
                if self._process is not None:
                    self._terminate(timeout)
                raise
            self._users = open(self.state_dir / "users.lock", "w")
            fcntl.flock(self._users, fcntl.LOCK_SH)
            return config

    @contextlib.contextmanager
    def _start_lock(self):
        with open(self.state_dir / "start.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _start_locked(self, timeout: float) -> DatabaseConfig:
        """Start ``mariadbd`` and wait until it answers.

        A port chosen here is free when chosen, but another socket may take
        it before ``mariadbd`` binds it: the server then exits at once,
        having written nothing, and is started again on a fresh port (see
        :mod:`pulse_trio.ports`). A port the caller gave is never changed.
        """
        if self._answers():
            return self.config()
        if not (self.data_dir / "mysql").is_dir():
            self._install()
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        choose_port = self.port is None

        def launch() -> DatabaseConfig:
            if choose_port:
                self.port = free_port()
            return self._launch(timeout)

        return start_on_fresh_ports(launch, lambda error: choose_port and isinstance(error, _PortTaken))

    def _launch(self, timeout: float) -> DatabaseConfig:
        assert self.port is not None
        args = [
            _find(_SERVER_NAMES), "--no-defaults",
            f"--datadir={self.data_dir}", f"--socket={self.socket_path}",
            f"--pid-file={self.pid_path}", f"--log-error={self.log_path}",
            f"--port={self.port}", "--bind-address=127.0.0.1",
            "--character-set-server=utf8mb4", "--collation-server=utf8mb4_bin",
            "--default-time-zone=+00:00", "--max-connections=1000",
            "--innodb-buffer-pool-size=256M", "--skip-name-resolve", f"--tmpdir={self.tmp_dir}",
        ]
        if self.fast:
            args += ["--innodb-flush-log-at-trx-commit=2", "--sync-binlog=0", "--innodb-doublewrite=0"]
        args += self.server_options
        if os.geteuid() == 0:
            args.append("--user=root")
        log_start = self._log_size()
        with _interrupts_after():  # else an interrupt between the fork and Popen's return would orphan mariadbd
            self._process = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, preexec_fn=killed_with_parent() if self.die_with_parent else None,
                env=without_notify_socket(os.environ),
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                message = f"mariadbd exited at start; see {self.log_path}:\n{self._log_tail()}"
                if _PORT_IN_USE in self._log_since(log_start):
                    raise _PortTaken(message)
                raise ManagedDatabaseError(message)
            if self._answers():
                return self.config()
            time.sleep(0.05)
        self._terminate(5.0)
        raise ManagedDatabaseError(f"mariadbd did not answer within {timeout}s; see {self.log_path}")

    def stop(self, timeout: float = 30.0) -> None:
        """Stop using the server; stop the server itself if nobody else uses it."""
        users, self._users = self._users, None
        if users is None:
            return
        with self._start_lock():
            fcntl.flock(users, fcntl.LOCK_UN)
            try:
                fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                users.close()  # another process still uses it; the last one stops it
                self._process = None
                return
            try:
                self._terminate(timeout)
            finally:
                users.close()

    def _terminate(self, timeout: float) -> None:
        """Stop the server that serves the state dir: this object's child while it runs, else the pid file's.

        The child may have died and another user started the server again;
        the one running then is the one to stop. A pid file with nothing
        answering is stale (its number may be another process's by now).
        """
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            return
        if self._answers():
            self._stop_by_pid_file(timeout)

    def _stop_by_pid_file(self, timeout: float) -> None:
        """SIGTERM the server named in the pid file (started by another user), SIGKILL if it outlives ``timeout``."""
        with contextlib.suppress(OSError, ValueError):
            pid = int(self.pid_path.read_text().strip())
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                with contextlib.suppress(ChildProcessError):  # another object of this process started it: reap it
                    os.waitpid(pid, os.WNOHANG)
                os.kill(pid, 0)
                time.sleep(0.05)
            os.kill(pid, signal.SIGKILL)

    def _install(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        args = [
            _find(_INSTALL_NAMES), "--no-defaults", f"--datadir={self.data_dir}",
            "--auth-root-authentication-method=normal", "--skip-test-db",
        ]
        if os.geteuid() == 0:
            args.append("--user=root")
        # The bootstrap server takes its temporary directory from TMPDIR (the script has no option for it).
        result = subprocess.run(args, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                env={**without_notify_socket(os.environ), "TMPDIR": str(self.tmp_dir)})
        if result.returncode != 0:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            raise ManagedDatabaseError(f"mariadb-install-db failed:\n{result.stdout}\n{result.stderr}")

    def _answers(self) -> bool:
        if not self.socket_path.exists():
            return False
        with contextlib.suppress(pymysql.err.MySQLError, OSError):
            pymysql.connect(unix_socket=str(self.socket_path), user="root", connect_timeout=1).close()
            return True
        return False

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def _log_since(self, offset: int) -> str:
        """What the server logged after ``offset`` (its error log is appended to across starts)."""
        with contextlib.suppress(OSError), self.log_path.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")
        return ""

    def _log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def __enter__(self) -> ManagedMariaDB:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""A real 3-node MariaDB Galera cluster on loopback, for the galera test group.

Each node is a ``mariadbd`` with Debian's ``galera-4`` provider, its own data
directory, socket and four ports (client, group communication, IST, rsync
SST), one block from ``pulse_trio.ports.free_port_block``: below the
ephemeral range, so no outgoing connection takes one, and apart from the
ports ``free_port`` picks, so no serve process of another test takes one
while the nodes start one after the other. The nodes run as the ``mysql``
user: the rsync SST script refuses to run as root, and the data
directories are owned by it.

A node killed with SIGKILL is started again in two steps, as an operator
would: ``--wsrep-recover`` prints the last committed position from InnoDB,
and ``--wsrep-start-position`` hands it to the provider, so the node catches
up by an incremental transfer (IST) from a donor instead of copying every
file (SST).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pymysql

from pulse_trio.dburl import DatabaseConfig, parse_database_url
from pulse_trio.ports import free_port_block

PROVIDER = "/usr/lib/galera/libgalera_smm.so"
USER, PASSWORD = "pulse", "pulse-galera"
#: Short group-communication timeouts, so that a lost or isolated node is noticed
#: in a few seconds rather than Galera's production defaults.
PROVIDER_OPTIONS = ("evs.suspect_timeout=PT2S;evs.inactive_timeout=PT4S;evs.install_timeout=PT3S;"
                    "evs.keepalive_period=PT0.5S;evs.inactive_check_period=PT0.5S;gcache.size=64M")
_RECOVERED = re.compile(r"WSREP: Recovered position:?\s+([0-9a-f-]{36}:-?\d+)")


class ClusterError(RuntimeError):
    """The cluster could not be started or a node did not reach the asked state."""


class GaleraNode:
    def __init__(self, cluster: GaleraCluster, index: int, ports: list[int]) -> None:
        self.cluster, self.index = cluster, index
        self.name = f"node{index + 1}"
        self.port, self.gcomm_port, self.ist_port, self.sst_port = ports
        self.dir = cluster.root / self.name
        self.data_dir = self.dir / "data"
        self.socket_path = self.dir / "mysqld.sock"
        self.log_path = self.dir / "mysqld.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def args(self, *extra: str) -> list[str]:
        cluster = self.cluster
        return [
            "/usr/sbin/mariadbd", "--no-defaults", "--user=mysql",
            f"--datadir={self.data_dir}", f"--socket={self.socket_path}",
            f"--pid-file={self.dir / 'mysqld.pid'}", f"--log-error={self.log_path}",
            f"--port={self.port}", "--bind-address=127.0.0.1", "--skip-name-resolve",
            "--character-set-server=utf8mb4", "--collation-server=utf8mb4_bin",
            "--default-time-zone=+00:00", "--max-connections=500",
            "--innodb-buffer-pool-size=64M", "--innodb-log-file-size=48M",
            "--innodb-flush-log-at-trx-commit=2", "--sync-binlog=0", "--innodb-doublewrite=0",
            "--binlog-format=ROW", "--default-storage-engine=InnoDB", "--innodb-autoinc-lock-mode=2",
            "--wsrep-on=ON", f"--wsrep-provider={PROVIDER}",
            f"--wsrep-cluster-name={cluster.name}",
            f"--wsrep-cluster-address=gcomm://{','.join(f'127.0.0.1:{n.gcomm_port}' for n in cluster.nodes)}",
            f"--wsrep-node-name={self.name}", f"--wsrep-node-address=127.0.0.1:{self.gcomm_port}",
            f"--wsrep-node-incoming-address=127.0.0.1:{self.port}",
            f"--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:{self.gcomm_port};"
            f"ist.recv_addr=127.0.0.1:{self.ist_port};{PROVIDER_OPTIONS}",
            "--wsrep-sst-method=rsync", f"--wsrep-sst-receive-address=127.0.0.1:{self.sst_port}",
            "--wsrep-slave-threads=2",
            *extra,
        ]

    def start(self, *extra: str) -> None:
        if self.process is not None and self.process.poll() is None:
            raise ClusterError(f"{self.name} is already running")
        self.process = subprocess.Popen(self.args(*extra), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)

    def kill(self) -> None:
        """SIGKILL: the node vanishes as a crashed machine would."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self, timeout: float = 30.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def recover_position(self) -> str:
        """Run ``--wsrep-recover`` and return the ``uuid:seqno`` it found in InnoDB."""
        log = self.dir / "recover.log"
        log.unlink(missing_ok=True)
        args = [a if not a.startswith("--log-error=") else f"--log-error={log}" for a in self.args()]
        subprocess.run([*args, "--wsrep-recover"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=60, check=False)
        found = _RECOVERED.findall(log.read_text(errors="replace")) if log.exists() else []
        if not found:
            raise ClusterError(f"{self.name}: --wsrep-recover printed no position; see {log}")
        return found[-1]

    def restart_after_crash(self) -> None:
        """Recover the position, then start so the node rejoins by IST."""
        self.start(f"--wsrep-start-position={self.recover_position()}")

    def connect(self, *, root: bool = True, timeout: float = 2.0) -> pymysql.connections.Connection:
        if root:
            return pymysql.connect(unix_socket=str(self.socket_path), user="root", connect_timeout=timeout,
                                   autocommit=True)
        return pymysql.connect(host="127.0.0.1", port=self.port, user=USER, password=PASSWORD,
                               connect_timeout=timeout, autocommit=True)

    def status(self) -> dict[str, str]:
        with contextlib.closing(self.connect()) as conn, conn.cursor() as cur:
            cur.execute("SHOW GLOBAL STATUS WHERE Variable_name IN "
                        "('wsrep_local_state', 'wsrep_ready', 'wsrep_cluster_size', 'wsrep_cluster_status')")
            return {k: v for k, v in cur.fetchall()}

    def synced(self, cluster_size: int | None = None) -> bool:
        try:
            status = self.status()
        except (pymysql.err.MySQLError, OSError):
            return False
        ok = status.get("wsrep_local_state") == "4" and status.get("wsrep_ready") == "ON"
        if cluster_size is not None:
            ok = ok and status.get("wsrep_cluster_size") == str(cluster_size)
        return ok

    def wait_synced(self, timeout: float = 60.0, cluster_size: int | None = None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise ClusterError(f"{self.name} exited; log:\n{self.log_tail()}")
            if self.synced(cluster_size):
                return
            time.sleep(0.1)
        raise ClusterError(f"{self.name} not synced within {timeout}s; log:\n{self.log_tail()}")

    def isolate(self, on: bool = True) -> None:
        """Cut the node off from the group (``gmcast.isolate``): it leaves the primary component."""
        with contextlib.closing(self.connect()) as conn, conn.cursor() as cur:
            cur.execute(f"SET GLOBAL wsrep_provider_options = 'gmcast.isolate={1 if on else 0}'")

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def log_text(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")
        return ""


class GaleraCluster:
    """Three nodes; ``start()`` bootstraps node 1 and joins the others to it."""

    def __init__(self, size: int = 3) -> None:
        # Not under pytest's tmp dir: it is private to root, and the nodes run as mysql.
        self.root = Path(tempfile.mkdtemp(prefix="pulse-galera-", dir="/tmp"))
        self.root.chmod(0o755)
        self.name = f"pulse_{self.root.name[-8:]}"
        ports = free_port_block(4 * size)
        self.nodes: list[GaleraNode] = []
        for i in range(size):
            self.nodes.append(GaleraNode(self, i, ports[4 * i:4 * i + 4]))

    def url(self, database: str, nodes: list[GaleraNode] | None = None) -> str:
        hosts = ",".join(n.address for n in (nodes or self.nodes))
        return f"mysql://{USER}:{PASSWORD}@{hosts}/{database}"

    def config(self, database: str, nodes: list[GaleraNode] | None = None) -> DatabaseConfig:
        return parse_database_url(self.url(database, nodes))

    def start(self, timeout: float = 90.0) -> None:
        mysql = pwd.getpwnam("mysql")
        first = self.nodes[0]
        for node in self.nodes:
            node.dir.mkdir()
            os.chown(node.dir, mysql.pw_uid, mysql.pw_gid)
        first.data_dir.mkdir()
        os.chown(first.data_dir, mysql.pw_uid, mysql.pw_gid)
        result = subprocess.run(
            ["/usr/bin/mariadb-install-db", "--no-defaults", f"--datadir={first.data_dir}", "--user=mysql",
             "--auth-root-authentication-method=normal", "--skip-test-db"],
            capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
        if result.returncode != 0:
            raise ClusterError(f"mariadb-install-db failed:\n{result.stdout}\n{result.stderr}")
        for node in self.nodes[1:]:  # an empty data dir: the node joins by SST
            node.data_dir.mkdir()
            os.chown(node.data_dir, mysql.pw_uid, mysql.pw_gid)
        first.start("--wsrep-new-cluster")
        first.wait_synced(timeout)
        with contextlib.closing(first.connect()) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'")
            cur.execute(f"GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'%'")
        for node in self.nodes[1:]:
            node.start()
            node.wait_synced(timeout)  # one SST at a time: the donor serves one joiner
        for node in self.nodes:
            node.wait_synced(timeout, cluster_size=len(self.nodes))

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.kill()  # a throwaway cluster: no need for an orderly shutdown
        shutil.rmtree(self.root, ignore_errors=True)

    def running(self) -> list[GaleraNode]:
        return [n for n in self.nodes if n.process is not None and n.process.poll() is None]

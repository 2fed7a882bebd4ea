"""Figures read back from the database and /proc after a bench run.

Latencies come from the rows the run wrote (task created_at, lease
offered_at, task finished_at), so they are what the platform recorded, not
what a client observed; server CPU and peak RSS come from /proc.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

from pulse_trio.bench.noop_worker import QUEUE
from pulse_trio.dburl import DatabaseConfig
from pulse_trio.store.engine.writer import connect


def ms(seconds: float | None) -> float | None:
    """Seconds as the reports' milliseconds, to two decimals (None stays None)."""
    return None if seconds is None else round(seconds * 1000, 2)


def percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


@dataclasses.dataclass(frozen=True, slots=True)
class ProcessSample:
    """CPU used so far, resident and peak memory of one process, read from /proc."""

    cpu_seconds: float
    peak_rss_bytes: int
    rss_bytes: int = 0
    at: float = 0.0  # time.monotonic() of the reading, for CPU shares

    @classmethod
    def read(cls, pid: int) -> ProcessSample:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])  # utime + stime
        hz = os.sysconf("SC_CLK_TCK")
        peak = rss = 0
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peak = int(line.split()[1]) * 1024
            elif line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
        return cls(ticks / hz, peak, rss, time.monotonic())

    def cpu_percent_since(self, before: ProcessSample) -> float:
        """CPU time over wall time between two readings (100 = one core busy)."""
        wall = self.at - before.at
        return round(100 * (self.cpu_seconds - before.cpu_seconds) / wall, 1) if wall > 0 else 0.0


def database_pid(config: DatabaseConfig) -> int | None:
    """The database server's pid when it runs on this machine (its pid file is readable), else None.

    With it the bench can report the database's CPU per task beside the
    server's and the workers': on one machine they share the same cores.
    """
    conn = connect(config)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@pid_file")
            (path,) = cur.fetchone()
    finally:
        conn.close()
    try:
        pid = int(Path(path).read_text().strip())
    except (OSError, ValueError, TypeError):
        return None
    return pid if Path(f"/proc/{pid}/stat").exists() else None


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a serve group's members), parents first."""
    tree, index = [pid], 0
    while index < len(tree):
        for thread in Path(f"/proc/{tree[index]}/task").glob("*"):  # a child is listed under the thread that forked it
            try:
                tree.extend(int(child) for child in (thread / "children").read_text().split())
            except OSError:
                pass
        index += 1
    return tree


def cpu_seconds(pids: list[int]) -> float:
    """CPU used so far by these processes together."""
    return sum(ProcessSample.read(pid).cpu_seconds for pid in pids)


def global_statuses(config: DatabaseConfig, names: tuple[str, ...]) -> dict[str, int]:
    """Server-wide status counters (0 for a name the server does not know)."""
    conn = connect(config)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SHOW GLOBAL STATUS WHERE Variable_name IN ({', '.join(['%s'] * len(names))})", names)
            found = {name: int(value) for name, value in cur.fetchall()}
        return {name: found.get(name, 0) for name in names}
    finally:
        conn.close()


#: What the database did for a run: statements by kind, rows written, commits.
#: (MariaDB counts rows in the Handler_* counters; MySQL 8 has them as well.)
_WORK_COUNTERS = ("Com_commit", "Com_select", "Com_insert", "Com_update", "Com_delete",
                  "Handler_write", "Handler_update", "Handler_delete")


class DatabaseWork:
    """Statements, rows written and commits between two readings of the server's counters.

    The counters are server-wide: they include the bench's own submits and
    progress polls, which is what a producer and a monitor would add too.
    """

    def __init__(self, config: DatabaseConfig) -> None:
        self._config = config
        self._before = global_statuses(config, _WORK_COUNTERS)

    def per_task(self, tasks: int) -> dict[str, float]:
        after = global_statuses(self._config, _WORK_COUNTERS)
        d = {name: after[name] - self._before[name] for name in _WORK_COUNTERS}
        per = lambda value: round(value / tasks, 2)  # noqa: E731
        return {
            "db_commits_per_task": per(d["Com_commit"]),
            "db_statements_per_task": per(d["Com_select"] + d["Com_insert"] + d["Com_update"] + d["Com_delete"]),
            "db_statements_by_kind_per_task": {kind: per(d[f"Com_{kind}"])
                                               for kind in ("select", "insert", "update", "delete")},
            "db_rows_written_per_task": per(d["Handler_write"] + d["Handler_update"] + d["Handler_delete"]),
            "db_rows_written_by_kind_per_task": {"inserted": per(d["Handler_write"]),
                                                 "updated": per(d["Handler_update"]),
                                                 "deleted": per(d["Handler_delete"])},
        }


class Progress:
    """Whether the bench's tasks of one kind have all finished, asked on one held connection.

    Polled while a run goes on, so it must cost the machine it measures next
    to nothing:

    - :meth:`all_finished` looks for one task still waiting, through
      ``tasks_pickup_kind (queue, pick_state, kind, …)``, and for one live
      lease through ``leases_due``: a handful of index dives, whatever the size
      of the run or of the READY backlog. Counting the finished tasks instead
      read every finished row on every poll, all of it load on the database
      being measured;
    - it keeps its connection: PyMySQL builds a fresh TLS context for every
      connect, CPU taken from the server and the workers at every poll
      (docs/performance.md, "What was done about it").

    The connection is in autocommit, so each poll sees the latest commits.
    Call it once every task has been submitted.
    """

    def __init__(self, config: DatabaseConfig, kind: str) -> None:
        self._kind = kind
        self._conn = connect(config)
        self._conn.autocommit(True)

    def all_finished(self) -> bool:
        with self._conn.cursor() as cur:
            # waiting to be picked up, or held by a live lease (an OFFERED or RUNNING task has one)
            cur.execute("SELECT 1 FROM tasks FORCE INDEX (tasks_pickup_kind) WHERE queue = %s"
                        " AND pick_state IN ('READY', 'KEYED', 'KEY_WAIT', 'SCHEDULED') AND kind = %s LIMIT 1",
                        (QUEUE, self._kind))
            if cur.fetchone() is not None:
                return False
            # (only the run's workers are connected, so every live lease is one of the run's tasks)
            cur.execute("SELECT 1 FROM leases FORCE INDEX (leases_due) WHERE state IN ('OFFERED', 'RUNNING')"
                        " LIMIT 1")
            return cur.fetchone() is None

    def finished(self) -> int:
        """How many have finished: a count of every finished row, for the timeout message only."""
        with self._conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM tasks WHERE queue = %s AND kind = %s AND finished_at IS NOT NULL",
                        (QUEUE, self._kind))
            return int(cur.fetchone()[0])

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def task_timings(config: DatabaseConfig, kind: str) -> dict[str, object]:
    """Submit→assign and assign→finish latencies, and the finish span, in seconds."""
    conn = connect(config)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT TIMESTAMPDIFF(MICROSECOND, t.created_at, l.offered_at),"
                " TIMESTAMPDIFF(MICROSECOND, l.offered_at, t.finished_at)"
                " FROM tasks t JOIN leases l ON l.task_id = t.task_id AND l.attempt = 1"
                " WHERE t.kind = %s AND t.finished_at IS NOT NULL", (kind,))
            rows = cur.fetchall()
            cur.execute("SELECT MIN(created_at), MAX(finished_at) FROM tasks WHERE kind = %s", (kind,))
            first, last = cur.fetchone()
        conn.rollback()
    finally:
        conn.close()
    to_assign = [r[0] / 1e6 for r in rows if r[0] is not None]
    to_finish = [r[1] / 1e6 for r in rows if r[1] is not None]
    return {
        "submit_to_assign_ms": {"p50": ms(percentile(to_assign, 0.5)), "p95": ms(percentile(to_assign, 0.95)),
                                "p99": ms(percentile(to_assign, 0.99))},
        "assign_to_finish_ms": {"p50": ms(percentile(to_finish, 0.5)), "p99": ms(percentile(to_finish, 0.99))},
        "span_s": (last - first).total_seconds() if first and last else None,
    }


#: The run's lease rows: who held each, from when to when.
SLOT_USE_SQL = ("SELECT l.owner_session_id, l.offered_at, l.ended_at FROM leases l JOIN tasks t"
                " ON t.task_id = l.task_id WHERE t.kind = %s AND l.ended_at IS NOT NULL")


def slot_use(config: DatabaseConfig, kind: str, slots: int) -> dict[str, object]:
    """Slot utilisation (held lease time over slots x span) and the claims, from the run's lease rows.

    A slot is held from its offer (``offered_at``) to its end (``ended_at``);
    the span runs from the run's first offer to its last end, and what is
    left is the time slots sat idle between a finish and the next offer. A
    claim offers its batch to one session at one time, so its leases share
    (owner_session_id, offered_at); a claim made in a finish's transaction
    (a ride-along claim) shares its time with the ends it made room for.
    """
    conn = connect(config)
    try:
        with conn.cursor() as cur:
            cur.execute(SLOT_USE_SQL, (kind,))
            rows = cur.fetchall()
        conn.rollback()
    finally:
        conn.close()
    if not rows or slots <= 0:
        return {"slot_utilisation": None, "claims": 0, "offers_per_claim": None, "claims_with_finishes": 0}
    held = sum((ended - offered).total_seconds() for _, offered, ended in rows)
    span = (max(r[2] for r in rows) - min(r[1] for r in rows)).total_seconds()
    claims = {(session, offered) for session, offered, _ in rows}
    ends = {ended for _, _, ended in rows}
    return {"slot_utilisation": round(held / (slots * span), 3) if span > 0 else None, "claims": len(claims),
            "offers_per_claim": round(len(rows) / len(claims), 2),
            "claims_with_finishes": sum(1 for _, offered in claims if offered in ends)}


def connected_sessions(config: DatabaseConfig) -> int:
    """Worker instances whose session is not disconnected, counted in the database."""
    conn = connect(config)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM worker_instances WHERE state <> 'DISCONNECTED'")
            return int(cur.fetchone()[0])
    finally:
        conn.close()

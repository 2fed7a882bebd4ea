"""The guarantees every chaos run must keep, checked against the execution log and the database.

``check_guarantees`` reads what the recording workers logged (every
authorized execution, with monotonic start and end times) and what the
database holds (tasks, attempts, leases, worker instances, key permits and
counters), and asserts:

* no task lost: exactly the submitted tasks exist, each in a terminal state
  it may reach (``retry_uncertain`` tasks: SUCCEEDED; others SUCCEEDED, or
  UNKNOWN/``lease_expired`` when their started lease was lost);
* the attempt history is whole: attempts 1..n, every one ended, every one but
  the last EXPIRED (a lost lease of a ``retry_uncertain`` task) or FAILED
  retryable (a permitted retry), the last one the outcome's;
* no outcome lost: a SUCCEEDED task's stored outcome is exactly the result
  its recorded execution returned (a per-execution nonce), and every
  execution that returned is either that outcome or an attempt that EXPIRED;
* every execution matches its attempt row (lease id, ``effect_uncertain``,
  ``concurrency_token``), attempt numbers never repeat, and two executions
  of one task never overlap in time;
* a second execution only follows a lost lease and is then flagged
  ``effect_uncertain`` — or follows a retryable failure that the handler
  itself raised (``fail_first``, recorded); no execution is flagged
  uncertain without an earlier EXPIRED attempt;
* keyed tasks ran only on workers that declared concurrency keys (the
  process, and every session that held or ran one of their leases); unkeyed
  executions carry no token;
* per key: fencing tokens are 1..n with no gap or reuse (n = the key's
  counter), every lease of the key holds exactly its own permit, all
  permits are released at the end with ``outstanding`` back to 0, a task's
  later attempts get higher tokens, with limit 1 tokens strictly increase
  in execution order, and executions running at once never exceed the limit.

Violations are collected and reported together (the first 40).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import threading
import time
from pathlib import Path
from typing import Any

from pulse_trio.store.engine.writer import connect
from sql_support import rows as sql_rows

TERMINAL = ("SUCCEEDED", "FAILED", "UNKNOWN", "CANCELLED")


@dataclasses.dataclass
class Execution:
    run: str
    task_id: str
    lease_id: str
    attempt: int
    uncertain: bool
    key: str | None
    token: int | None
    pid: int
    keys_declared: bool
    start: float
    end: float | None = None  # None: no end record (the process was killed)
    how: str | None = None  # returned / retryable / cancelled / raised
    result: Any = None


def backends_that_ran(log: Path) -> set[str]:
    """The worker backends (asyncio, trio) that started at least one execution."""
    return {json.loads(line).get("backend") for line in log.read_text().splitlines()
            if json.loads(line)["event"] == "start"} if log.exists() else set()


def read_executions(log: Path) -> dict[str, list[Execution]]:
    """Executions by task id, sorted by attempt."""
    runs: dict[str, Execution] = {}
    ends: list[dict] = []
    if log.exists():
        for line in log.read_text().splitlines():
            record = json.loads(line)
            if record["event"] == "start":
                runs[record["run"]] = Execution(
                    record["run"], record["task_id"], record["lease_id"], record["attempt"], record["uncertain"],
                    record["key"], record["token"], record["pid"], record["keys_declared"], record["t"])
            else:
                ends.append(record)
    for record in ends:
        run = runs[record["run"]]  # an end without its start would be a broken log
        run.end, run.how, run.result = record["t"], record["how"], record["result"]
    by_task: dict[str, list[Execution]] = collections.defaultdict(list)
    for run in runs.values():
        by_task[run.task_id].append(run)
    for runs_of_task in by_task.values():
        runs_of_task.sort(key=lambda r: (r.attempt, r.start))
    return dict(by_task)


def task_states(db) -> collections.Counter[str]:
    return collections.Counter({state: int(n) for state, n in sql_rows(
        db, "SELECT state, COUNT(*) FROM tasks GROUP BY state")})


def wait_settled(db, count: int, timeout: float) -> collections.Counter[str]:
    """Until all ``count`` tasks are terminal and no key permit is HELD or QUARANTINED (or the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        states = task_states(db)
        terminal = sum(states[s] for s in TERMINAL)
        permits = sql_rows(db, "SELECT COUNT(*) FROM key_permits WHERE state <> 'RELEASED'")[0][0]
        if (terminal == count and not permits) or time.monotonic() > deadline:
            return states
        time.sleep(0.25)


class PermitSampler:
    """While the run goes on, sample every key's permits in one consistent read, about every 50 ms.

    Each sample checks, per key, that the counter's ``outstanding`` equals the
    permits HELD or QUARANTINED and that neither exceeds the key's limit.
    """

    def __init__(self, db, limits: dict[str, int], interval: float = 0.05) -> None:
        self.db, self.limits, self.interval = db, limits, interval
        self.samples = 0
        self.peak: collections.Counter[str] = collections.Counter()
        self.violations: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="permit-sampler", daemon=True)

    def __enter__(self) -> PermitSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        conn = connect(self.db)
        try:
            conn.autocommit(True)
            while not self._stop.wait(self.interval):
                with conn.cursor() as cur:
                    cur.execute(
                        "SELECT c.concurrency_key, c.outstanding,"
                        " (SELECT COUNT(*) FROM key_permits p WHERE p.concurrency_key = c.concurrency_key"
                        "  AND p.state IN ('HELD', 'QUARANTINED')) FROM key_counters c")
                    rows = cur.fetchall()
                self.samples += 1
                for key, outstanding, counted in rows:
                    limit = self.limits.get(key)
                    if limit is None:
                        continue
                    self.peak[key] = max(self.peak[key], int(counted))
                    if int(outstanding) != int(counted) or int(counted) > limit:
                        self.violations.append(f"key {key} (limit {limit}): outstanding {outstanding}, "
                                               f"{counted} permits held or quarantined")
        except Exception as exc:  # the test fails on a sampler that could not sample
            self.violations.append(f"sampler failed: {exc!r}")
        finally:
            conn.close()


def _max_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])  # ends sort first on ties
    peak = now = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def check_guarantees(db, ids: set[str], executions: dict[str, list[Execution]], *,
                     worker_keys: dict[int, bool], killed_at: dict[int, float],
                     views: dict[str, dict]) -> dict[str, Any]:
    """Assert every guarantee (see the module docstring); returns counts for the report."""
    bad: list[str] = []
    tasks = {r[0]: r for r in sql_rows(
        db, "SELECT task_id, state, attempt, max_attempts, retry_uncertain, concurrency_key, concurrency_limit,"
            " outcome_status, outcome_error_code, outcome_uncertain, outcome_attempt FROM tasks")}
    attempts: dict[str, dict[int, tuple]] = collections.defaultdict(dict)
    for r in sql_rows(db, "SELECT task_id, attempt, lease_id, instance_id, session_id, effect_uncertain,"
                       " concurrency_token, status, error_code, retryable, result FROM task_attempts"):
        attempts[r[0]][int(r[1])] = r
    leases = sql_rows(db, "SELECT lease_id, task_id, state, attempt, owner_instance_id, concurrency_token,"
                       " offered_at FROM leases")
    instances = {r[0]: r for r in sql_rows(
        db, "SELECT instance_id, session_id, concurrency_keys, registered_at FROM worker_instances")}
    sessions = {r[1]: r for r in instances.values()}
    permits = {r[0]: r for r in sql_rows(
        db, "SELECT lease_id, concurrency_key, concurrency_token, task_id, state FROM key_permits")}
    counters = {r[0]: (int(r[1]), int(r[2])) for r in sql_rows(
        db, "SELECT concurrency_key, last_token, outstanding FROM key_counters")}

    # -- no task lost, none invented -------------------------------------------------------
    if set(tasks) != ids:
        bad.append(f"tasks in the database != submitted: missing {sorted(ids - set(tasks))[:5]}, "
                   f"extra {sorted(set(tasks) - ids)[:5]}")
    if set(executions) - ids:
        bad.append(f"executions of tasks never submitted: {sorted(set(executions) - ids)[:5]}")

    for task_id in sorted(ids & set(tasks)):
        (_, state, attempt, max_attempts, retry_uncertain, key, limit, outcome_status, outcome_code,
         outcome_uncertain, outcome_attempt) = tasks[task_id]
        attempt, rows, runs = int(attempt), attempts.get(task_id, {}), executions.get(task_id, [])
        where = f"task {task_id} ({state}, key {key}, retry_uncertain {bool(retry_uncertain)})"
        allowed = {"SUCCEEDED"} if retry_uncertain else {"SUCCEEDED", "UNKNOWN"}
        if state not in allowed:
            bad.append(f"{where}: state {state}, expected one of {sorted(allowed)}; attempts "
                       f"{[(a, rows[a][7], rows[a][8]) for a in sorted(rows)]}")
            continue
        # -- the attempt history -------------------------------------------------------
        if sorted(rows) != list(range(1, attempt + 1)) or attempt < 1:
            bad.append(f"{where}: attempt rows {sorted(rows)} for attempt counter {attempt}")
            continue
        # a retryable failure is one the handler asked for (``fail_first``): recorded as such
        asked = {r.attempt for r in runs if r.how == "retryable"}
        permitted_failures = {a for a in rows if a in asked and rows[a][7] == "FAILED" and rows[a][9]
                              and rows[a][8] == "chaos.first_attempt"}
        for a in range(1, attempt):
            status, code, retryable = rows[a][7], rows[a][8], rows[a][9]
            lost_and_retried = status == "EXPIRED" and retry_uncertain
            if not (lost_and_retried or a in permitted_failures):
                bad.append(f"{where}: attempt {a} ended {status}/{code} (retryable {retryable}) yet was retried")
        last = rows[attempt]
        if state == "SUCCEEDED":
            if last[7] != "SUCCEEDED" or outcome_status != "SUCCEEDED" or outcome_attempt != attempt:
                bad.append(f"{where}: last attempt {last[7]}, outcome {outcome_status} of attempt {outcome_attempt}")
        elif state == "UNKNOWN":
            if last[7] != "EXPIRED" or outcome_code != "lease_expired" or not outcome_uncertain:
                bad.append(f"{where}: UNKNOWN with last attempt {last[7]}, code {outcome_code}, "
                           f"uncertain {outcome_uncertain}")
        view = views.get(task_id)
        if view is None or view["state"] != state or (view["outcome"] or {}).get("status") != state:
            bad.append(f"{where}: the task view disagrees: {view and (view['state'], view['outcome'])}")
            continue
        # -- executions against attempts -------------------------------------------------
        if len({r.attempt for r in runs}) != len(runs):
            bad.append(f"{where}: one attempt executed twice: {[(r.attempt, r.lease_id) for r in runs]}")
        for run in runs:
            row = rows.get(run.attempt)
            label = f"{where}: execution of attempt {run.attempt} (pid {run.pid}, {run.how})"
            if row is None:
                bad.append(f"{label}: no attempt row")
                continue
            (_, _, lease_id, _, _, row_uncertain, row_token, status, code, retryable, result) = row
            if lease_id != run.lease_id:
                bad.append(f"{label}: ran on lease {run.lease_id}, attempt row has {lease_id}")
            if bool(row_uncertain) != run.uncertain:
                bad.append(f"{label}: effect_uncertain {run.uncertain} but the attempt row says {row_uncertain}")
            if (None if row_token is None else int(row_token)) != run.token:
                bad.append(f"{label}: token {run.token} but the attempt row has {row_token}")
            if run.end is None:
                if run.pid not in killed_at:
                    bad.append(f"{label}: never ended, and its worker was not killed")
                    continue
                run.end = killed_at[run.pid]
                if status != "EXPIRED":
                    bad.append(f"{label}: killed mid-execution, yet the attempt ended {status}")
            elif run.how == "returned":
                if status == "SUCCEEDED":
                    if json.loads(result) != run.result:
                        bad.append(f"{label}: returned {run.result}, stored {result}")
                elif status != "EXPIRED":
                    bad.append(f"{label}: returned, yet the attempt ended {status}/{code}")
            elif run.how == "retryable":
                if not ((status == "FAILED" and retryable and code == "chaos.first_attempt") or status == "EXPIRED"):
                    bad.append(f"{label}: failed retryable, yet the attempt ended {status}/{code}/{retryable}")
            elif run.how == "cancelled":
                if status != "EXPIRED":
                    bad.append(f"{label}: stopped as lost, yet the attempt ended {status}/{code}")
            else:
                bad.append(f"{label}: the handler raised unexpectedly")
        # -- the outcome is the recorded execution's ---------------------------------------
        if state == "SUCCEEDED":
            maker = [r for r in runs if r.attempt == attempt and r.how == "returned"]
            stored = view["outcome"]["result"]
            if len(maker) != 1 or stored != maker[0].result:
                bad.append(f"{where}: outcome {stored} is not the recorded result of attempt {attempt}: "
                           f"{[(r.attempt, r.how, r.result) for r in runs]}")
        # -- second executions ------------------------------------------------------------
        for run in runs:
            if run.attempt == 1 and run.uncertain:
                bad.append(f"{where}: attempt 1 flagged effect_uncertain")
            earlier_lost = any(rows[a][7] == "EXPIRED" for a in range(1, run.attempt) if a in rows)
            if run.uncertain and not earlier_lost:
                bad.append(f"{where}: attempt {run.attempt} flagged uncertain without a lost lease before it")
            previous = rows.get(run.attempt - 1)
            if previous is not None and previous[7] == "EXPIRED" and not run.uncertain:
                bad.append(f"{where}: attempt {run.attempt} follows a lost lease but is not flagged uncertain")
        for before, after in zip(runs, runs[1:]):
            previous = rows.get(after.attempt - 1)
            permitted = previous is not None and (
                (previous[7] == "EXPIRED" and after.uncertain) or after.attempt - 1 in permitted_failures)
            if not permitted:
                bad.append(f"{where}: attempt {after.attempt} ran again after attempt {before.attempt} "
                           f"without a lost lease or retryable failure ({previous and previous[7]})")
            if before.end is not None and after.start < before.end:
                bad.append(f"{where}: attempt {after.attempt} started {before.end - after.start:.3f}s before "
                           f"attempt {before.attempt} stopped")
        # -- keys: declaration and tokens --------------------------------------------------
        for run in runs:
            if run.key != key:
                bad.append(f"{where}: execution saw key {run.key}")
            if key is None and run.token is not None:
                bad.append(f"{where}: unkeyed execution with token {run.token}")
            if key is not None and (run.token is None or not run.keys_declared or not worker_keys.get(run.pid)):
                bad.append(f"{where}: keyed execution on pid {run.pid} (declared {worker_keys.get(run.pid)}, "
                           f"token {run.token})")
        if key is not None:
            tokens = [int(rows[a][6]) if rows[a][6] is not None else None for a in sorted(rows)]
            if None in tokens or tokens != sorted(set(tokens)):
                bad.append(f"{where}: attempt tokens {tokens} do not strictly increase")
            for a, row in rows.items():
                inst = instances.get(row[3])
                if inst is None or not inst[2] or not sessions.get(row[4], (None, None, 0))[2]:
                    bad.append(f"{where}: attempt {a} ran on instance {row[3]} session {row[4]}, "
                               f"which did not declare concurrency keys")

    # -- leases and permits ------------------------------------------------------------------
    limits: dict[str, int] = {}
    for task_id, row in tasks.items():
        if row[5] is not None:
            if limits.setdefault(row[5], int(row[6])) != int(row[6]):
                bad.append(f"key {row[5]}: tasks disagree on the limit")
    lease_ids = set()
    for lease_id, task_id, lstate, _, owner, token, _ in leases:
        lease_ids.add(lease_id)
        if lstate in ("OFFERED", "RUNNING"):
            bad.append(f"lease {lease_id} of {task_id} still {lstate} after the run")
        key = tasks[task_id][5] if task_id in tasks else None
        permit = permits.get(lease_id)
        if key is None:
            if token is not None or permit is not None:
                bad.append(f"lease {lease_id} of unkeyed {task_id} has token {token} / permit {permit}")
            continue
        if not instances.get(owner, (None, None, 0))[2]:
            bad.append(f"keyed lease {lease_id} of {task_id} is owned by {owner}, which did not declare keys")
        if permit is None or permit[1] != key or permit[3] != task_id or token is None or int(permit[2]) != int(token):
            bad.append(f"keyed lease {lease_id} of {task_id} (token {token}) and its permit {permit} disagree")
    for lease_id, permit in permits.items():
        if lease_id not in lease_ids:
            bad.append(f"permit {permit} belongs to no lease")
        if permit[4] != "RELEASED":
            bad.append(f"permit {permit} still {permit[4]} after the run")
    per_key = collections.defaultdict(list)
    for permit in permits.values():
        per_key[permit[1]].append(int(permit[2]))
    report_keys = {}
    for key, limit in sorted(limits.items()):
        tokens = sorted(per_key.get(key, []))
        last, outstanding = counters.get(key, (0, -1))
        if tokens != list(range(1, len(tokens) + 1)) or last != len(tokens):
            bad.append(f"key {key}: tokens {tokens[:10]}... ({len(tokens)}) with counter at {last}: gap or reuse")
        if outstanding != 0:
            bad.append(f"key {key}: counter still has {outstanding} outstanding permits")
        runs = sorted((r for rs in executions.values() for r in rs if r.key == key), key=lambda r: r.start)
        closed = [(r.start, r.end) for r in runs if r.end is not None]
        peak = _max_overlap(closed)
        if peak > limit:
            bad.append(f"key {key}: {peak} executions ran at once, limit {limit}")
        if limit == 1:
            order = [r.token for r in runs]
            if any(b is None or a is None or b <= a for a, b in zip(order, order[1:])):
                bad.append(f"key {key} (limit 1): tokens in execution order do not strictly increase: {order}")
        report_keys[key] = {"limit": limit, "permits": len(tokens), "executions": len(runs), "peak": peak}

    assert not bad, f"{len(bad)} violation(s):\n" + "\n".join(bad[:40])
    all_runs = [r for rs in executions.values() for r in rs]
    statuses = collections.Counter(r[7] for rs in attempts.values() for r in rs.values())
    resumed = sum(1 for _, _, _, _, owner, _, offered in leases
                  if owner in instances and instances[owner][3] > offered)
    return {
        "tasks": len(ids),
        "states": dict(collections.Counter(t[1] for t in tasks.values())),
        "executions": len(all_runs),
        "repeated_tasks": sum(len(rs) > 1 for rs in executions.values()),
        "uncertain_executions": sum(r.uncertain for r in all_runs),
        "attempt_statuses": dict(statuses),
        "leases": len(leases),
        "lapsed_offers": sum(1 for lease in leases if lease[2] == "LAPSED"),
        "leases_moved_to_a_later_instance": resumed,
        "worker_registrations": len(instances),
        "keys": report_keys,
    }


def check_run(db, client, fleet, ids: set[str], states: collections.Counter[str]) -> dict:
    """Every task SUCCEEDED once settled, and the run kept every guarantee (``check_guarantees``)."""
    assert states == {"SUCCEEDED": len(ids)}, f"{states}; logs in {fleet.logs}"  # nothing lost
    executions = read_executions(fleet.log)
    assert set(executions) == ids
    assert backends_that_ran(fleet.log) == fleet.backends, f"logs in {fleet.logs}"
    try:
        return check_guarantees(db, ids, executions, worker_keys=fleet.worker_keys,
                                killed_at=fleet.killed_at, views=collect_views(client, ids))
    except AssertionError as exc:
        raise AssertionError(f"logs in {fleet.logs}\n{exc}") from None


def collect_views(client, ids: set[str]) -> dict[str, dict]:
    return {task_id: client.get(task_id) for task_id in ids}

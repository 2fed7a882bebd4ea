"""A worker registry for chaos runs: every authorized execution is appended to a log.

Two JSON lines per execution: ``start`` when the handler is called (after
the start ack, i.e. when execution is authorized) and ``end`` when it
stops, however it stops (returned, failed, or cancelled because the lease
was lost). Times are ``CLOCK_MONOTONIC``, which on Linux is one clock for
every process on the machine, so the test can line executions of different
worker processes up against each other. A worker killed with SIGKILL
writes no ``end``; the test knows when it killed it.

The payload steers the handler: ``sleep`` (seconds of "work") and
``fail_first`` (attempt 1 raises ``RetryableError``: a permitted retry
that follows no lost lease). The result carries a per-execution ``run``
nonce so the stored outcome can be matched to the execution that made it.

The handler awaits AnyIO only, so the same registry runs under
``worker run --backend asyncio`` and ``--backend trio`` (the fleet mixes both).
"""

from __future__ import annotations

import json
import os
import secrets
import time

import anyio

from pulse_trio.sdk import Registry, TaskContext
from pulse_trio.sdk.errors import RetryableError

registry = Registry()
LOG = os.environ["PULSE_CHAOS_LOG"]
KEYS_DECLARED = os.environ.get("PULSE_CHAOS_KEYS") == "1"
BACKEND = os.environ.get("PULSE_WORKER_BACKEND", "asyncio")


def _append(record: dict) -> None:
    # one write(2) of one short line on an O_APPEND descriptor: lines never interleave
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


@registry.handler("chaos", "work")
async def work(task: TaskContext) -> dict:
    run = secrets.token_hex(8)
    _append({"event": "start", "run": run, "task_id": task.task_id, "lease_id": task.lease_id,
             "attempt": task.attempt, "uncertain": task.effect_uncertain,
             "key": task.concurrency_key, "token": task.concurrency_token,
             "pid": os.getpid(), "backend": BACKEND, "keys_declared": KEYS_DECLARED, "t": time.clock_gettime(time.CLOCK_MONOTONIC)})
    how, result = "cancelled", None  # a BaseException (the loop's cancellation: the lease was lost) leaves these
    try:
        await anyio.sleep(float(task.payload.get("sleep", 0.3)))
        if task.payload.get("fail_first") and task.attempt == 1:
            how = "retryable"
            raise RetryableError("first attempts of this task fail", code="chaos.first_attempt")
        how, result = "returned", {"done": task.attempt, "run": run}
        return result
    except Exception:
        if how != "retryable":
            how = "raised"
        raise
    finally:
        _append({"event": "end", "run": run, "task_id": task.task_id, "how": how, "result": result,
                 "t": time.clock_gettime(time.CLOCK_MONOTONIC)})

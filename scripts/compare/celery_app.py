"""The Celery side of the comparison: one no-op task, durability settings closest to pulse-trio's.

Configured from the environment the harness sets (COMPARE_BROKER_URL,
COMPARE_RESULT_URL, COMPARE_READY_DIR), so the worker processes and the
submitting process load the same app.

- ``task_acks_late`` + ``task_reject_on_worker_lost``: a message is acked only
  after the task ran, and goes back to the queue if the worker dies: the
  at-least-once behaviour closest to pulse-trio's leases (the Redis
  transport's ``visibility_timeout``, one hour by default, plays the lease).
- a Redis result backend that stores every result (``task_ignore_result``
  false), as pulse-trio records every outcome.
"""

from __future__ import annotations

import os
from pathlib import Path

from celery import Celery
from celery.signals import worker_ready

app = Celery("compare")
app.conf.update(
    broker_url=os.environ.get("COMPARE_BROKER_URL", "redis://127.0.0.1:6379/14"),
    result_backend=os.environ.get("COMPARE_RESULT_URL", "redis://127.0.0.1:6379/15"),
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    task_ignore_result=False,
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name="compare.noop")
def noop() -> dict:
    return {}


@worker_ready.connect
def _announce_ready(sender=None, **_: object) -> None:
    ready_dir = os.environ.get("COMPARE_READY_DIR")
    if ready_dir:
        Path(ready_dir, f"celery-{os.getpid()}").touch()

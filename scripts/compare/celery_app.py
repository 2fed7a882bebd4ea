"""The Celery side of the comparison: one no-op task, durability settings closest to pulse-trio's.

Configured from the environment the harness sets (COMPARE_CELERY_BROKER,
COMPARE_BROKER_URL, COMPARE_RESULT_URL, COMPARE_CELERY_QUEUE,
COMPARE_CELERY_PREFETCH, COMPARE_READY_DIR), so the worker processes and the
submitting process load the same app and report the same settings.

Both brokers:

- ``task_acks_late`` + ``task_reject_on_worker_lost``: a message is acked only
  after the task ran, and goes back to the queue if the worker dies: the
  at-least-once behaviour closest to pulse-trio's leases.
- every result is reported (``task_ignore_result`` false), as pulse-trio
  records every outcome.
- ``worker_prefetch_multiplier`` from COMPARE_CELERY_PREFETCH: one of the
  knobs the harness sweeps (1: a worker holds no more unacked messages than it
  has processes; larger: the short-task setting Celery's optimizing guide
  suggests). Unset, Celery's own default per broker as below.

``redis``: Redis broker (its ``visibility_timeout``, one hour by default,
plays the lease) and a Redis result backend storing every result; prefetch
multiplier default Celery's 4.

``rabbitmq``: RabbitMQ broker, a durable queue of the harness's own name,
persistent task messages (delivery mode 2), prefetch multiplier default 1,
and the ``rpc`` result backend: each result is a message to the submitting
client's reply queue. Remote control is off so the workers declare no pidbox
queues of their own.
"""

from __future__ import annotations

import os
from pathlib import Path

from celery import Celery
from celery.signals import worker_ready


def _profile(broker: str) -> dict[str, object]:
    """The broker-specific settings, read from the environment when the app is made."""
    env = os.environ.get
    if broker == "redis":
        return {"broker_url": env("COMPARE_BROKER_URL", "redis://127.0.0.1:6379/14"),
                "result_backend": env("COMPARE_RESULT_URL", "redis://127.0.0.1:6379/15"),
                "worker_prefetch_multiplier": int(env("COMPARE_CELERY_PREFETCH", "4"))}
    if broker == "rabbitmq":
        return {"broker_url": env("COMPARE_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//"),
                "result_backend": "rpc://",
                "task_default_queue": env("COMPARE_CELERY_QUEUE", "compare"),
                "task_default_queue_type": "classic",
                "task_default_delivery_mode": "persistent",
                "worker_prefetch_multiplier": int(env("COMPARE_CELERY_PREFETCH", "1")),
                "worker_enable_remote_control": False}
    raise ValueError(f"unknown COMPARE_CELERY_BROKER {broker!r}: redis or rabbitmq")


def make_app(broker: str) -> Celery:
    """A fresh app for one broker: the harness submits to both in one process."""
    celery = Celery("compare", set_as_current=False)
    celery.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_ignore_result=False,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        **_profile(broker),
    )

    @celery.task(name="compare.noop", shared=False)
    def noop() -> dict:
        return {}

    return celery


app = make_app(os.environ.get("COMPARE_CELERY_BROKER", "redis"))


@worker_ready.connect
def _announce_ready(sender=None, **_: object) -> None:
    ready_dir = os.environ.get("COMPARE_READY_DIR")
    if ready_dir:
        Path(ready_dir, f"celery-{os.getpid()}").touch()

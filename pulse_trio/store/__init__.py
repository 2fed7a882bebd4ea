"""The transactional store: one MySQL transaction function per statechart transition.

Importing this package registers every function against its (chart,
trigger), and imports no Trio. The server and the producer surfaces use:

* :class:`~pulse_trio.store.engine.facade.SyncStore` (``store.run_sync(fn, **kwargs)``),
  and from a Trio program :class:`pulse_trio.store.engine.trio_bridge.Store`
  (``await store.run(fn, **kwargs)``), the one module here that imports Trio;
* the entry functions below, grouped by chart;
* the read-only views: :mod:`~pulse_trio.store.views.task` (a task),
  :mod:`~pulse_trio.store.views.queries` (the producer's listings and queue
  depths), :mod:`~pulse_trio.store.views.dashboard`, :mod:`~pulse_trio.store.token.tokens`
  (the token lookup of both endpoints, and the CLI's token statements);
* the value types in :mod:`pulse_trio.store.engine.results`, and the refusal codes
  in :mod:`pulse_trio.store.engine.codes`.

The service's SQL lives in this package, the writer choice of a
multi-host URL included (:mod:`~pulse_trio.store.engine.writer`: which node every
process writes through); outside it only the bench's own measurements speak
SQL.

See ``docs/statecharts/README.md`` for how composite transactions keep the
one-function-per-transition rule.
"""

from __future__ import annotations

# Registration side effects, in dependency order: each module registers its chart's functions and guards.
from pulse_trio.store.cluster_setting import settings  # noqa: F401
from pulse_trio.store.instance import instances, nodes  # noqa: F401
from pulse_trio.store.key_permit import permits  # noqa: F401
from pulse_trio.store.task import steps as task_steps  # noqa: F401
from pulse_trio.store.task import tasks  # noqa: F401
from pulse_trio.store.cancellation import intents  # noqa: F401
from pulse_trio.store.lease import guards as lease_guards  # noqa: F401
from pulse_trio.store.lease import steps as lease_steps  # noqa: F401
from pulse_trio.store.lease import leases  # noqa: F401
from pulse_trio.store.lease import assign as _assign  # noqa: F401  (the name is the function, below)
from pulse_trio.store.lease import resume as _resume  # noqa: F401  (the name is the function, below)
from pulse_trio.store.lease import timers as lease_timers  # noqa: F401
from pulse_trio.store.schedule import schedules  # noqa: F401
from pulse_trio.store.queue import queues  # noqa: F401
from pulse_trio.store.task import retention  # noqa: F401
from pulse_trio.store.lease.assign import LeaseCredential, assign, new_credentials, pickup_sql
from pulse_trio.store.cancellation.intents import notify as notify_cancellations
from pulse_trio.store.cancellation.intents import request as request_cancel
from pulse_trio.store.engine.facade import StoreStatistics, StoreUnavailable, SyncStore
from pulse_trio.store.engine.inputs import NewInstance, SubscribedQueue
from pulse_trio.store.instance.instances import disconnect, node_gone, register, set_capacity
from pulse_trio.store.lease.timers import expire, lapse
from pulse_trio.store.engine.inputs import FinishCommand, LeaseCommand, RenewCommand, StartCommand
from pulse_trio.store.lease.leases import finish, renew, start
from pulse_trio.store.key_permit.permits import release_after_quarantine
from pulse_trio.store.engine.registry import GUARDS, REGISTRY, Registration, decide
from pulse_trio.store.engine.results import Refusal
from pulse_trio.store.lease.resume import ResumeRequest, resume
from pulse_trio.store.engine.inputs import FinishReport
from pulse_trio.store.task.tasks import NewTask, promote, retry, submit
from pulse_trio.store.engine.tx import Tx
from pulse_trio.store.views.task import TaskView, get_task

#: The timers every instance runs (each a SKIP LOCKED batch, shared by instances).
TIMERS = (lapse, expire, promote, release_after_quarantine, nodes.lose)

__all__ = [
    "GUARDS", "REGISTRY", "TIMERS", "FinishCommand", "FinishReport", "LeaseCommand", "LeaseCredential", "NewInstance",
    "NewTask", "RenewCommand", "StartCommand",
    "Refusal", "Registration", "ResumeRequest", "StoreStatistics", "StoreUnavailable", "SubscribedQueue", "SyncStore",
    "TaskView", "Tx", "assign", "decide", "disconnect", "expire", "finish", "get_task", "lapse", "new_credentials",
    "node_gone", "nodes",
    "notify_cancellations", "pickup_sql", "promote", "register", "release_after_quarantine", "renew",
    "request_cancel", "resume", "retry", "set_capacity", "start", "submit",
]

"""The transactional store: one MySQL transaction function per statechart transition.

Importing this package registers every function against its (chart,
trigger), and imports no Trio. The server and the producer surfaces use:

* :class:`~pulse_trio.store.facade.SyncStore` (``store.run_sync(fn, **kwargs)``),
  and from a Trio program :class:`pulse_trio.store.trio_bridge.Store`
  (``await store.run(fn, **kwargs)``), the one module here that imports Trio;
* the entry functions below, grouped by chart;
* the read-only views: :mod:`~pulse_trio.store.views` (a task),
  :mod:`~pulse_trio.store.queries` (the producer's listings and queue
  depths), :mod:`~pulse_trio.store.dashboard`, :mod:`~pulse_trio.store.tokens`
  (the token lookup of both endpoints, and the CLI's token statements);
* the value types in :mod:`pulse_trio.store.results`, and the refusal codes
  in :mod:`pulse_trio.store.codes`.

The service's SQL lives in this package, the writer choice of a
multi-host URL included (:mod:`~pulse_trio.store.writer`: which node every
process writes through); outside it only the bench's own measurements speak
SQL.

See ``docs/statecharts/README.md`` for how composite transactions keep the
one-function-per-transition rule.
"""

from __future__ import annotations

from pulse_trio.store import (  # noqa: F401  (registration side effects, in dependency order)
    settings, instances, nodes, permits, task_steps, tasks, cancellation, lease_guards, lease_steps, leases, assign, resume,
    lease_timers, schedules, queues, retention,
)
from pulse_trio.store.assign import LeaseCredential, assign, new_credentials, pickup_sql
from pulse_trio.store.cancellation import notify as notify_cancellations
from pulse_trio.store.cancellation import request as request_cancel
from pulse_trio.store.facade import StoreStatistics, StoreUnavailable, SyncStore
from pulse_trio.store.inputs import NewInstance, SubscribedQueue
from pulse_trio.store.instances import disconnect, node_gone, register, set_capacity
from pulse_trio.store.lease_timers import expire, lapse
from pulse_trio.store.inputs import FinishCommand, LeaseCommand, RenewCommand, StartCommand
from pulse_trio.store.leases import finish, renew, start
from pulse_trio.store.permits import release_after_quarantine
from pulse_trio.store.registry import GUARDS, REGISTRY, Registration, decide
from pulse_trio.store.results import Refusal
from pulse_trio.store.resume import ResumeRequest, resume
from pulse_trio.store.inputs import FinishReport
from pulse_trio.store.tasks import NewTask, promote, retry, submit
from pulse_trio.store.tx import Tx
from pulse_trio.store.views import TaskView, get_task

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

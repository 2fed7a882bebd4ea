"""The transactional store: one MySQL transaction function per statechart transition.

Importing this package registers every function against its (chart,
trigger). The server and the producer surfaces use:

* :class:`Store` (``await store.run(fn, **kwargs)`` / ``store.run_sync``);
* the entry functions below, grouped by chart;
* the value types in :mod:`pulse_trio.store.results`.

See ``docs/statecharts/README.md`` for how composite transactions keep the
one-function-per-transition rule.
"""

from __future__ import annotations

from pulse_trio.store import (  # noqa: F401  (registration side effects, in dependency order)
    settings, instances, nodes, permits, task_steps, tasks, cancellation, lease_guards, lease_steps, leases, assign, resume,
    lease_timers,
)
from pulse_trio.store.assign import LeaseCredential, assign, new_credentials, pickup_sql
from pulse_trio.store.cancellation import notify as notify_cancellations
from pulse_trio.store.cancellation import request as request_cancel
from pulse_trio.store.facade import Store, StoreStatistics, StoreUnavailable
from pulse_trio.store.instances import NewInstance, SubscribedQueue, disconnect, node_gone, register, set_capacity
from pulse_trio.store.lease_timers import expire, lapse
from pulse_trio.store.leases import LeaseCommand, finish, renew, start
from pulse_trio.store.permits import release_after_quarantine
from pulse_trio.store.registry import GUARDS, REGISTRY, Registration, decide
from pulse_trio.store.results import Refusal
from pulse_trio.store.resume import ResumeRequest, resume
from pulse_trio.store.task_steps import FinishReport
from pulse_trio.store.tasks import NewTask, promote, retry, submit
from pulse_trio.store.tx import Tx
from pulse_trio.store.views import TaskView, get_task

#: The timers every instance runs (each a SKIP LOCKED batch, shared by instances).
TIMERS = (lapse, expire, promote, release_after_quarantine, nodes.lose)

__all__ = [
    "GUARDS", "REGISTRY", "TIMERS", "FinishReport", "LeaseCommand", "LeaseCredential", "NewInstance", "NewTask",
    "Refusal", "Registration", "ResumeRequest", "Store", "StoreStatistics", "StoreUnavailable", "SubscribedQueue",
    "TaskView", "Tx", "assign", "decide", "disconnect", "expire", "finish", "get_task", "lapse", "new_credentials",
    "node_gone", "nodes",
    "notify_cancellations", "pickup_sql", "promote", "register", "release_after_quarantine", "renew",
    "request_cancel", "resume", "retry", "set_capacity", "start", "submit",
]

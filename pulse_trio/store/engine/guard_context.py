"""What each chart's guards may read: one frozen, typed context per persistent chart.

``registry.decide`` evaluates a chart's guards against one of these and
refuses any other type, so a guard cannot depend on a field a caller forgot
to pass (a missing attribute would only fail on the path that reads it), and
a reader sees in one place what a transition decides on. Fields a trigger
does not use keep their defaults. Guard functions read the rows their
transaction locked; nothing here queries.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pulse_trio.contract.frozen import frozen

if TYPE_CHECKING:  # the rows and the report are read, never built, here
    from pulse_trio.store.engine.inputs import FinishReport, NewInstance
    from pulse_trio.store.engine.rows import InstanceRow, LeaseRow, NodeRow, ScheduleRow, TaskRow


@frozen
class LeaseContext:
    """A lease command, timer or assignment: the locked lease and task, and who is asking."""

    lease: LeaseRow | None = None
    task: TaskRow | None = None
    now: dt.datetime | None = None
    task_id: str = ""  # the command's: a lease of another task is no lease of this one
    lease_secret: str = dataclasses.field(default="", repr=False)
    session_id: str = ""
    revision: int = 0
    report: FinishReport | None = None
    session: InstanceRow | None = None  # assign and resume: the (new) session, locked
    old_instance: InstanceRow | None = None  # resume: the instance being resumed from
    instance_secret: str = dataclasses.field(default="", repr=False)


@frozen
class TaskContext:
    """A task step, submit, promote or retry."""

    task: TaskRow | None = None
    lease: LeaseRow | None = None
    report: FinishReport | None = None
    due_at: dt.datetime | None = None
    now: dt.datetime | None = None
    source: TaskRow | None = None  # retry: the task being copied (None: not found)


@frozen
class KeyPermitContext:
    """A permit's acquisition (its key's count) or its quarantine's end."""

    task: TaskRow | None = None
    outstanding: int = 0
    quarantine_until: dt.datetime | None = None
    now: dt.datetime | None = None


@frozen
class CancellationContext:
    """A cancel request (task and live lease) or a notice to the lease's holder."""

    task: TaskRow | None = None
    lease: LeaseRow | None = None
    opted_in: bool = False
    notified_session_id: str | None = None
    holder_session_id: str | None = None
    lease_state: str | None = None


@frozen
class InstanceContext:
    """A registration (the new instance and where it registers) or a change of a locked session."""

    row: InstanceRow | None = None
    sequence: int = 0
    drain: bool = False
    new: NewInstance | None = None
    allowed_queues: frozenset[str] | None = None
    node_id: str | None = None
    node_state: str | None = None
    token_live: bool = True


@frozen
class NodeContext:
    """A node's own row, or another node's judged by the declaring one."""

    node: NodeRow | None = None
    now: dt.datetime | None = None
    declared_by: str | None = None


@frozen
class SettingContext:
    """The cluster's settings as a change would leave them."""

    values: Mapping[str, int | None]


@frozen
class QueueContext:
    """A queue's pause, resume or retention change: its state before (NONE: no row yet)."""

    state: str = "NONE"


@frozen
class ScheduleContext:
    """A schedule's locked row (None: a create); its transitions have no guards yet."""

    schedule: ScheduleRow | None = None
    now: dt.datetime | None = None


@frozen
class FairShareContext:
    """A fairness key's clock or weight: their transitions have no guards, so nothing to judge."""


#: The one context type each persistent chart's guards are evaluated against.
CONTEXTS: dict[str, type] = {
    "lease": LeaseContext,
    "task": TaskContext,
    "key_permit": KeyPermitContext,
    "cancellation": CancellationContext,
    "instance": InstanceContext,
    "node": NodeContext,
    "cluster_setting": SettingContext,
    "schedule": ScheduleContext,
    "queue": QueueContext,
    "fair_share": FairShareContext,
    "fairness_weight": FairShareContext,
}

__all__ = ["CONTEXTS", "CancellationContext", "FairShareContext", "InstanceContext", "KeyPermitContext",
           "LeaseContext", "NodeContext", "QueueContext", "ScheduleContext", "SettingContext", "TaskContext"]

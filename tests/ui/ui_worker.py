"""The handlers the browser tests' worker processes run (``pulse-trio worker run ui_worker.py:REGISTRY``).

``busy`` works queue ``ui-work``: ``charge`` fails for good, and ``hostile`` fails with markup,
a ``javascript:`` URL and a right-to-left override in its error message and result.
``steady`` works queue ``ui-overview``: ``echo`` succeeds with its payload, ``charge`` fails.
``idle``: subscribed to ``ui-drain`` and never given work; it is there to be drained.
``pausable`` works queue ``ui-pause``: ``echo`` succeeds with its payload (while the queue is not paused).
"""

from __future__ import annotations

from pulse_trio.sdk import PermanentError, Registry, TaskContext

HOSTILE = ('<script>window.__pwned = "script"</script><img src=x onerror="window.__pwned=\'img\';alert(1)">'
           ' <a href="javascript:alert(1)">click</a> \u202eexe.gnp')

busy = Registry()
steady = Registry()
idle = Registry()
pausable = Registry()


@busy.handler("ui-work", "charge")
@steady.handler("ui-overview", "charge")
async def charge(task: TaskContext) -> None:
    raise PermanentError("card declined", code="card.declined")


@steady.handler("ui-overview", "echo")
@pausable.handler("ui-pause", "echo")
async def echo(task: TaskContext) -> object:
    return task.payload


@busy.handler("ui-work", "hostile")
async def hostile(task: TaskContext) -> None:
    raise PermanentError(HOSTILE, code="hostile.input", details={"echo": HOSTILE})


@idle.handler("ui-drain", "never")
async def never(task: TaskContext) -> None:
    raise PermanentError("this worker only waits to be drained")

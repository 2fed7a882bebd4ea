"""A worker registry for chaos runs: every authorized execution is appended to a log.

One JSON line per execution, written when the handler starts (after the
start ack, i.e. when execution is authorized): the test reads them back to
prove that a second execution of a task only ever followed a lost lease
and was flagged ``effect_uncertain``.
"""

from __future__ import annotations

import json
import os

import trio

from pulse_trio.sdk import Registry, TaskContext

registry = Registry()
LOG = os.environ["PULSE_CHAOS_LOG"]


@registry.handler("chaos", "work")
async def work(task: TaskContext) -> dict:
    line = json.dumps({"task_id": task.task_id, "attempt": task.attempt, "uncertain": task.effect_uncertain,
                       "pid": os.getpid()})
    with open(LOG, "a", encoding="utf-8") as handle:  # one short line: appends do not interleave
        handle.write(line + "\n")
    await trio.sleep(0.3)
    return {"done": task.attempt}

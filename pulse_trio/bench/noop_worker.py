"""The bench's worker registry: handlers that do nothing, so the platform is what is measured."""

from __future__ import annotations

from pulse_trio.sdk import Registry, TaskContext

QUEUE = "bench"
KIND = "noop"

registry = Registry()


@registry.handler(QUEUE, KIND)
async def noop(task: TaskContext) -> dict:
    return {}

"""The bench's worker registries: handlers that do nothing, so the platform is what is measured."""

from __future__ import annotations

from pulse_trio.sdk import Registry, TaskContext

QUEUE = "bench"
KIND = "noop"
# The latency bench keeps its two producer paths apart by kind, so each one's
# rows can be read back on their own.
HTTP_KIND = "latency.http"
CLIENT_KIND = "latency.client"
WARM_UP_KIND = "latency.warmup"

registry = Registry()
latency_registry = Registry()


@registry.handler(QUEUE, KIND)
async def noop(task: TaskContext) -> dict:
    return {}


@latency_registry.handler(QUEUE, HTTP_KIND)
async def noop_http(task: TaskContext) -> dict:
    return {}


@latency_registry.handler(QUEUE, CLIENT_KIND)
async def noop_client(task: TaskContext) -> dict:
    return {}


@latency_registry.handler(QUEUE, WARM_UP_KIND)
async def noop_warm_up(task: TaskContext) -> dict:
    return {}

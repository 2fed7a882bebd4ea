"""Calling one handler: decode its payload, run it on the loop or in a thread, map what it did to an outcome.

Shared by the lease runner (a real lease) and :mod:`pulse_trio.testing`
(a lease the test drives), so a handler's unit test goes through exactly
the code that runs it in production.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, NoReturn

import anyio
import anyio.lowlevel

from pulse_trio.sdk import outcome as oc
from pulse_trio.sdk.context import CANCEL_REQUESTED, LEASE_LOST, TaskContext
from pulse_trio.sdk.errors import HandlerOutcome
from pulse_trio.sdk.payload import InvalidPayload
from pulse_trio.sdk.registry import Handler
from pulse_trio.sdk.threads import HandlerThreads

log = logging.getLogger("pulse_trio.sdk")

#: What an ``async def`` handler may raise that is no ``Exception`` but still only its own task's failure
#: (argparse's ``sys.exit`` on bad input, say). A ``KeyboardInterrupt`` on the loop's thread is the Ctrl-C a
#: signal delivers wherever the loop happens to be; in a ``def`` handler's thread any exception is the handler's.
ASYNC_HANDLER_EXITS: tuple[type[BaseException], ...] = (SystemExit, GeneratorExit)


class HandlerExited(Exception):
    """A ``BaseException`` raised in a ``def`` handler's thread, carried to the loop as a plain failure."""

    def __init__(self, raised: BaseException) -> None:
        super().__init__(type(raised).__name__)
        self.raised = raised


def _in_thread(fn: Callable[..., Any], args: tuple[Any, ...], cancelled: type[BaseException]) -> Any:
    """Call a ``def`` handler in its thread: whatever it raises there is its own, so none of it stops the loop.

    No signal and no cancellation reaches a thread, so a ``BaseException``
    (``SystemExit``, ``KeyboardInterrupt``, a library's own) is the
    handler's failure too; only the loop's ``cancelled`` class, which
    ``check_cancelled()`` raises at a hard stop, goes out as itself.
    """
    try:
        return fn(*args)
    except (Exception, cancelled):
        raise
    except BaseException as exc:
        raise HandlerExited(exc) from exc


async def call_handler(handler: Handler, ctx: TaskContext, scope: anyio.CancelScope, *,
                       threads: HandlerThreads | None, max_result_bytes: int,
                       stopped: Callable[[], bool] | None = None) -> oc.Outcome | None:
    """Run ``handler`` for ``ctx`` inside ``scope`` (cancelled to stop it); None when the lease was lost.

    A stop already known (a cancel, a lost lease, the worker's hard stop)
    calls nothing, not even the payload's decoding. A payload that does not fit the handler's type is refused before the
    call (FAILED ``invalid_payload``); anything else its decoding raises is
    the payload type's own code (a ``__post_init__``, a validator) failing,
    mapped as the handler's own exception would be. A ``def`` handler runs
    in one of ``threads`` (AnyIO's own when None), so it never blocks the loop.
    At a hard stop (a scope around ``scope`` cancelled) it raises that
    cancellation, whatever the handler ended with: nothing is finished.

    ``stopped``: whether the worker has stopped hard, cheaply (its own flag),
    asked before the call and after a handler that returned; None: the
    scopes around the handler are read instead, as they always are after a
    handler that raised (a test's environment passes None).
    """
    hard_stop = stopped or _stopping_hard
    if hard_stop():  # the worker stopped hard before the call: nothing is called, nothing finished
        await anyio.lowlevel.checkpoint()  # raises the stop's cancellation
    if ctx.stop_reason is not None:  # known before the call (read just after the start's ack): nothing happened yet
        return _stopped(ctx)
    result: oc.Outcome | None = None
    failed: BaseException | None = None  # what the handler raised, mapped once it is known the worker goes on
    args: tuple[Any, ...] = (ctx,)
    try:
        with scope:
            try:
                if handler.takes_payload:
                    decode = handler.decode
                    try:
                        args = (ctx, ctx.payload if decode is None else decode(ctx.payload_json))
                    except InvalidPayload as exc:  # the handler is not called: the same payload would never fit
                        log.warning("task %s: %s", ctx.task_id, exc)
                        return oc.invalid_payload(str(exc))
                if handler.sync:
                    cancelled = anyio.get_cancelled_exc_class()
                    value = await (threads.run(_in_thread, handler.fn, args, cancelled) if threads is not None
                                   else anyio.to_thread.run_sync(_in_thread, handler.fn, args, cancelled))
                else:
                    value = await handler.fn(*args)
                result = oc.succeeded(value, max_result_bytes)
            except anyio.get_cancelled_exc_class() as exc:
                if anyio.current_effective_deadline() == -math.inf:  # the handler's scope or the worker's is cancelled
                    raise
                # No scope cancelled it: on asyncio a handler can let out a CancelledError of its own
                # (an awaited future someone else cancelled). That is the handler failing, not the worker
                # stopping; raised further, it would end the pool's task and, with it, the worker.
                failed = exc
            except (Exception, *ASYNC_HANDLER_EXITS) as exc:  # an async handler's exits too (a thread's: HandlerExited)
                if not isinstance(exc, Exception) and not _in_a_task():
                    raise  # a GeneratorExit thrown in to close the coroutine of a loop that is gone
                failed = exc.raised if isinstance(exc, HandlerExited) else exc
    except BaseException as exc:
        # Out through the handler's scope: a group the handler's task group raised with its children's exits
        # in it, or one that held the scope's cancellation beside a child's failure (the scope took its own out);
        # on Trio, at a hard stop, one with the worker's cancellation beside such a failure.
        failed = exc if _handlers_own(exc) else _beside_the_stop(exc)
        if failed is None:
            raise
    if _stopping_hard() if failed is not None else hard_stop():
        await _stop_instead(handler, ctx, failed)
    if failed is not None:
        return None if ctx.stop_reason == LEASE_LOST else _raised(handler, ctx, failed, max_result_bytes)
    return _stopped(ctx) if scope.cancelled_caught else result


def _stopped(ctx: TaskContext) -> oc.Outcome | None:
    """The outcome of a handler stopped by its context: CANCELLED after a cancel request, None for a lost lease."""
    return oc.cancelled(ctx.cancel_reason) if ctx.stop_reason == CANCEL_REQUESTED else None


def _raised(handler: Handler, ctx: TaskContext, exc: BaseException, max_result_bytes: int) -> oc.Outcome:
    """The outcome of a handler that raised ``exc`` (its own outcome, or FAILED ``unhandled_exception``)."""
    if not isinstance(exc, HandlerOutcome):
        log.error("handler %s raised for task %s", handler.name, ctx.task_id, exc_info=exc)
    return _mapped(exc, ctx, max_result_bytes)


def _stopping_hard() -> bool:
    """Whether a scope around the handler's (the worker's, stopping hard, or its caller's) is cancelled.

    Read outside the handler's own scope, so a cancel request or a lost
    lease, which cancel only that one, do not count.
    """
    return anyio.current_effective_deadline() == -math.inf


async def _stop_instead(handler: Handler, ctx: TaskContext, failed: BaseException | None) -> NoReturn:
    """Raise the worker's stop in place of what the handler ended with: a hard stop finishes nothing.

    The handler may end with nothing of the stop in hand: on asyncio a task
    group raises its children's failures without the cancellation, and a
    handler's own clean-up may fail, or swallow the cancellation and return.
    The stop's cancellation is still being delivered to this task, so the
    next checkpoint raises it.
    """
    if failed is None:
        log.warning("handler %s returned as the worker stopped, for task %s; nothing is finished", handler.name,
                    ctx.task_id)
    else:
        log.error("handler %s failed as the worker stopped, for task %s; nothing is finished", handler.name,
                  ctx.task_id, exc_info=failed)
    await anyio.sleep_forever()
    raise AssertionError("a cancelled scope let a checkpoint pass")  # pragma: no cover


def _beside_the_stop(exc: BaseException) -> BaseException | None:
    """The handler's failure in ``exc`` when it is a group holding it beside the worker's hard stop; else None.

    On Trio a handler's nursery cancelled by the stop raises the
    cancellation beside a child's failure (a clean-up that failed). A group
    with anything else in it (a Ctrl-C) is not the handler's to report.
    """
    if not isinstance(exc, BaseExceptionGroup) or not _stopping_hard():
        return None
    stopping, failed = exc.split(anyio.get_cancelled_exc_class())
    return failed if stopping is not None and failed is not None and _handlers_own(failed) else None


def _handlers_own(exc: BaseException) -> bool:
    """Whether ``exc`` is the handler's failure: an exception, or a group of those and its exits.

    A group that still holds a cancellation (the worker's, stopping hard)
    or a ``KeyboardInterrupt`` (the Ctrl-C) is not the handler's to report.
    """
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(lambda member: not isinstance(member, (BaseExceptionGroup, Exception,
                                                                   *ASYNC_HANDLER_EXITS))) is None
    return isinstance(exc, Exception)


def _in_a_task() -> bool:
    """Whether this runs in a task of a running event loop (so an exception here was raised by the handler)."""
    try:
        anyio.get_current_task()
    except Exception:  # noqa: BLE001 - no event loop runs in this thread
        return False
    return True


def _mapped(exc: BaseException, ctx: TaskContext, max_result_bytes: int) -> oc.Outcome:
    """``exc`` mapped to its outcome; a failure of the mapping itself fails this task, never the worker."""
    cancel_requested = ctx.stop_reason == CANCEL_REQUESTED
    try:
        return oc.from_exception(exc, cancel_requested=cancel_requested, max_bytes=max_result_bytes)
    except Exception as error:  # noqa: BLE001 - raised out of the pool's task, it would end the worker
        log.exception("task %s: the outcome of %s could not be read", ctx.task_id, type(exc).__name__)
        return oc.unmapped(exc, error, cancel_requested=cancel_requested)

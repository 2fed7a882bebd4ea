"""Test helpers for users' handlers: run one handler with no server.

::

    from pulse_trio.testing import HandlerEnvironment

    async def test_send_invoice():
        env = HandlerEnvironment(registry)
        outcome = await env.run("billing", "invoice.send", {"invoice": 991})
        assert outcome.status == "SUCCEEDED" and outcome.result["message_id"] == "msg-991"

See :class:`~pulse_trio.testing.environment.HandlerEnvironment` and
docs/worker.md §16. It runs under any AnyIO backend (asyncio, Trio),
imports only the SDK and loads no Trio for an asyncio test.
"""

from pulse_trio.testing.environment import Finished, HandlerEnvironment, TestClock

__all__ = ["Finished", "HandlerEnvironment", "TestClock"]

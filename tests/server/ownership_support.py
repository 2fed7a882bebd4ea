"""Who changes a live session: only its connection's own tasks (``server/session_inbox.py``).

:class:`SessionOwners` wraps, for one test, what changes a
:class:`~pulse_trio.server.live_session.LiveSession`:

* every plain (not async) method of the class but the reads others may
  call (``live_session.OUTSIDE_READS``);
* the setting of its attributes (a callable set by a test's monkeypatch is
  not state);
* every public method of the :class:`~pulse_trio.session.ServerSession`
  it drives but ``pending``, and its inbox's ``close``.

Each call records the Trio task it ran on. A session's own tasks are the
one that built it (the connection's reader, which also releases it) and
the tasks of the nurseries that task opened (the results task and the
writer); a call from any other task (a lane, the dispatcher, the timers,
an HTTP request, another connection, the test itself) is a violation.

The server and scenario tests use it on every test (an autouse fixture
in their conftest fails a test that saw a violation), so the rule holds
wherever a real service runs; ``test_session_ownership.py`` checks that it
catches an outsider and that each path others use reaches the session
through its inbox.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import traceback
from typing import Any

import pytest
import trio

from pulse_trio.server import live_session
from pulse_trio.server.live_session import LiveSession
from pulse_trio.server.session_inbox import SessionInbox
from pulse_trio.session import ServerSession

#: ServerSession methods that only read.
_PROTOCOL_READS = frozenset({"pending"})


@dataclasses.dataclass(frozen=True)
class Call:
    """One call of a state-changing method (or one attribute set) on a live session."""

    session: LiveSession
    name: str
    task: trio.lowlevel.Task | None  # None: outside Trio (a thread)
    owned: bool


class SessionOwners:
    """Records who changes each live session; see the module docstring."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.violations: list[str] = []
        self._home: dict[int, trio.lowlevel.Task | None] = {}  # id(session) -> the task that built it
        self._of: dict[int, LiveSession] = {}  # id(protocol) or id(inbox) -> its session
        self._keep: list[Any] = []  # keeps the objects behind those ids alive for the test

    # -- installing ---------------------------------------------------------------
    def install(self, monkeypatch: Any) -> None:
        owners = self
        init = LiveSession.__init__

        @functools.wraps(init)
        def built(session: LiveSession, *args: Any, **kwargs: Any) -> None:
            owners._home[id(session)] = _task()
            owners._keep.append(session)
            init(session, *args, **kwargs)
            for part in (session.protocol, session.inbox):
                owners._of[id(part)] = session
                owners._keep.append(part)

        monkeypatch.setattr(LiveSession, "__init__", built)

        def setattr_(session: LiveSession, name: str, value: Any) -> None:
            if not callable(value) or isinstance(value, type):
                owners._check(session, f"set {name}")
            object.__setattr__(session, name, value)

        monkeypatch.setattr(LiveSession, "__setattr__", setattr_)
        for name, value in list(vars(LiveSession).items()):
            if (inspect.isfunction(value) and not inspect.iscoroutinefunction(value)
                    and not name.startswith("__") and name not in live_session.OUTSIDE_READS):
                monkeypatch.setattr(LiveSession, name, self._wrap(value, name, lambda s: s))
        for name, value in list(vars(ServerSession).items()):
            if inspect.isfunction(value) and not name.startswith("_") and name not in _PROTOCOL_READS:
                monkeypatch.setattr(ServerSession, name, self._wrap(value, f"protocol.{name}", self._session_of))
        monkeypatch.setattr(SessionInbox, "close", self._wrap(SessionInbox.close, "inbox.close", self._session_of))

    def _session_of(self, part: Any) -> LiveSession | None:
        return self._of.get(id(part))

    def _wrap(self, method: Any, name: str, session_of: Any) -> Any:
        owners = self

        @functools.wraps(method)
        def checked(this: Any, *args: Any, **kwargs: Any) -> Any:
            session = session_of(this)
            if session is not None:
                owners._check(session, name)
            return method(this, *args, **kwargs)

        return checked

    # -- checking ----------------------------------------------------------------
    def _check(self, session: LiveSession, name: str) -> None:
        if id(session) not in self._home:
            return  # built before the install (not by a service of this test)
        task = _task()
        owned = task is not None and self.owns(session, task)
        self.calls.append(Call(session, name, task, owned))
        if not owned:
            where = "".join(traceback.format_stack(limit=8)[:-2])
            self.violations.append(f"{name} of session {session.__dict__.get('session_id')} ran on "
                                   f"{task.name if task else 'no Trio task'}, not the connection's own:\n{where}")

    def owns(self, session: LiveSession, task: trio.lowlevel.Task) -> bool:
        """``task`` is one of the session's own: the one that built it, or a child of a nursery it opened."""
        home = self._home.get(id(session))
        if task is home:
            return True
        nursery = task.parent_nursery
        return nursery is not None and nursery.parent_task is home

    def role(self, session: LiveSession, task: trio.lowlevel.Task | None) -> str:
        """``reader`` (the task that built the session), ``results`` (its results task), or what else ran it."""
        if task is None:
            return "no task"
        if task is self._home.get(id(session)):
            return "reader"
        if task.coro.cr_code is LiveSession.apply_results.__code__ and self.owns(session, task):
            return "results"
        return "own" if self.owns(session, task) else f"other: {task.name}"

    def roles(self, name: str, session: LiveSession | None = None) -> list[str]:
        """The role of the task behind each call of ``name`` (on ``session``, if given), in order."""
        return [self.role(c.session, c.task) for c in self.calls
                if c.name == name and (session is None or c.session is session)]

    def assert_owned(self) -> None:
        assert not self.violations, ("a task that is not the connection's own changed a session:\n"
                                     + "\n".join(self.violations[:5]))


def _task() -> trio.lowlevel.Task | None:
    try:
        return trio.lowlevel.current_task()
    except RuntimeError:
        return None


__all__ = ["Call", "SessionOwners"]


@pytest.fixture(autouse=True)
def session_owners(monkeypatch: Any) -> Any:
    """Fails the test if a task that is not a connection's own changed its session.

    The server and scenario conftests import this fixture, so it runs on each of their tests.
    """
    owners = SessionOwners()
    owners.install(monkeypatch)
    yield owners
    owners.assert_owned()


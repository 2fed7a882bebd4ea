"""No repr shows a secret: pytest prints reprs in failed assertions, and logs and debuggers print them too.

Every dataclass field of the package whose name says it holds a secret (a
lease or instance secret, a token, a password) is left out of its class's
``repr``; digests, ids and the concurrency key's fencing token are not
secrets. Checked over every module, so a new message or store value with a
secret field cannot forget it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib
import pkgutil
import re

import pulse_trio
from pulse_trio.contract import messages as m
from pulse_trio.contract.bodies import Lease

SECRET = re.compile(r"(^|_)(secret|password|token)$")
NOT_SECRET = {"concurrency_token"}  # the key permit's fencing number, shown on purpose


def _dataclasses() -> dict[str, type]:
    found = {}
    for info in pkgutil.walk_packages(pulse_trio.__path__, "pulse_trio."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (isinstance(value, type) and dataclasses.is_dataclass(value)
                    and value.__module__ == info.name):
                found[f"{info.name}.{value.__qualname__}"] = value
    return found


def test_no_dataclass_field_that_holds_a_secret_is_in_its_repr():
    shown = [f"{name}.{f.name}" for name, cls in sorted(_dataclasses().items()) for f in dataclasses.fields(cls)
             if SECRET.search(f.name) and f.name not in NOT_SECRET and f.repr]
    assert not shown, f"secrets shown by repr: {shown}"


def test_a_lease_command_and_an_offered_lease_print_without_their_secrets():
    secret = "s" * 43
    start = m.TaskStart(id="msg-1", session_id="ses_01M8VZMC9N9WQ7HZY3RZQQCE2A",
                        task_id="tsk_01M8VZMC9N9WQ7HZY3RZQQCE2A", lease_id="lse_01M8VZMC9N9WQ7HZY3RZQQCE2A",
                        lease_secret=secret, revision=1)
    assert secret not in repr(start) and "lse_01M8VZMC9N9WQ7HZY3RZQQCE2A" in repr(start)
    assert start == dataclasses.replace(start)  # still compared and copied by every field
    lease = Lease(lease_id="lse_01M8VZMC9N9WQ7HZY3RZQQCE2A", task_id="tsk_01M8VZMC9N9WQ7HZY3RZQQCE2A", revision=1,
                  epoch=1, state="OFFERED", expires_at=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
                  lease_secret=secret)
    assert secret not in repr(lease)

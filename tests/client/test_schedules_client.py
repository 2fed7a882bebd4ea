"""The schedules client (``pulse_trio.client.schedules``) against the real database."""

from __future__ import annotations

import pytest

from pulse_trio.client import Client
from pulse_trio.client.producer import InvalidRequest
from pulse_trio.client.schedules import Schedules, build_schedule


@pytest.mark.parametrize("who", ["op-\ud800", 7, None], ids=["lone-surrogate", "int", "none"])
def test_who_asked_that_no_column_holds_is_refused_naming_the_field(client: Client, who):
    """As for the other calls' ``paused_by``/``requested_by``: InvalidRequest naming the field before any SQL
    sees it, never the driver's UnicodeEncodeError (or a TypeError) from the INSERT or UPDATE."""
    schedules = Schedules(client.store)
    with pytest.raises(InvalidRequest) as refused:
        schedules.create(build_schedule(name="nightly", queue="reports", kind="build", interval=60), created_by=who)
    assert refused.value.field == "created_by"
    assert schedules.list(include_deleted=True) == [], "nothing was written"
    made = schedules.create(build_schedule(name="hourly", queue="reports", kind="build", interval=3600),
                            created_by="test")
    for action in ("pause", "delete"):
        with pytest.raises(InvalidRequest) as refused:
            schedules.change(action, "hourly", by=who)
        assert refused.value.field == "by"
    assert schedules.get(made.schedule_id).as_json() == made.as_json(), "nothing was changed"

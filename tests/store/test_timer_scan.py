"""The shared timers claim their due rows through one scaffold, in the states their chart names."""

from __future__ import annotations

from pulse_trio.store.lease import sql as lease_sql
from pulse_trio.store.instance import sql as instance_sql
from pulse_trio.store.key_permit import sql as key_permit_sql
from pulse_trio.store.task import sql as task_sql
from pulse_trio.store.engine.timer_scan import sources, statement

SCANS = [lease_sql.LAPSE_SCAN, lease_sql.EXPIRE_SCAN, task_sql.PROMOTE_SCAN, key_permit_sql.QUARANTINE_OVER_SCAN, instance_sql.LAPSED_SCAN]


def test_each_timer_looks_at_the_sources_of_its_trigger():
    assert {(s.chart, s.trigger): sources(s.chart, s.trigger) for s in SCANS} == {
        ("lease", "lapse"): ("OFFERED",), ("lease", "expire"): ("RUNNING",), ("task", "promote"): ("SCHEDULED",),
        ("key_permit", "release_after_quarantine"): ("QUARANTINED",), ("node", "lose"): ("ALIVE", "LOST"),
    }


def test_every_claim_skips_locked_rows_up_to_a_limit():
    for scan in SCANS:
        sql = statement(scan)
        assert sql.endswith(" LIMIT %s FOR UPDATE SKIP LOCKED"), sql
        assert f"{scan.due_column} <= %s" in sql
    assert "ORDER BY" not in statement(instance_sql.LAPSED_SCAN)  # reads only the rows it returns
    assert "n.state IN ('ALIVE', 'LOST')" in statement(instance_sql.LAPSED_SCAN)
    assert "WHERE due_state = 'SCHEDULED' AND due_at <= %s ORDER BY due_at" in statement(task_sql.PROMOTE_SCAN)

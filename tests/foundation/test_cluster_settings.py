"""The cluster settings' one definition: names, bounds, the null word, the pair rule, and serve's flags."""

from __future__ import annotations

import argparse
from decimal import Decimal

import pytest

from pulse_trio import cluster_settings as cs
from pulse_trio import config as cfg
from pulse_trio.client import ranges
from pulse_trio.dburl import connect


def _parse(argv: list[str]) -> cfg.Settings:
    parser = argparse.ArgumentParser()
    cfg.add_options(parser)
    return cfg.settings_from_args(parser.parse_args(argv))


def test_the_list_covers_what_every_process_must_agree_on():
    assert cs.NAMES == ("lease_ttl", "start_timeout", "cancel_grace", "permit_quarantine", "priority_step",
                        "fairness_quantum", "node_heartbeat", "node_lapse", "task_retention")
    assert cs.DEFAULTS_MS == {"lease_ttl": 30_000, "start_timeout": 30_000, "cancel_grace": 30_000,
                              "permit_quarantine": None, "priority_step": 30_000, "fairness_quantum": 1_000,
                              "node_heartbeat": 5_000, "node_lapse": 15_000, "task_retention": 7 * 86_400_000}
    assert cs.pair_problem(cs.DEFAULTS_MS) is None
    assert [s.flag for s in cs.SETTINGS][:2] == ["--lease-ttl", "--start-timeout"]


@pytest.mark.parametrize(("text", "ms"), [("2", 2_000), ("0.5", 500), ("0.001", 1), ("1e3", 1_000_000),
                                          (" 30 ", 30_000), ("2147483.647", 2_147_483_647)])
def test_values_are_seconds_to_the_millisecond(text, ms):
    assert cs.BY_NAME["cancel_grace"].from_text(text) == ms


@pytest.mark.parametrize(("text", "message"), [
    ("0", "0.001 to 2147483.647 seconds"), ("-1", "0.001 to 2147483.647"), ("2147483.648", "0.001 to"),
    ("0.0005", "to the millisecond"), ("1.0004", "to the millisecond"), ("abc", "not a number"),
    ("nan", "finite"), ("inf", "finite"), ("", "not a number"), ("lease-ttl", "not a number"),
    ("1e999999", "0.001 to 2147483.647"), ("-1e999999", "0.001 to 2147483.647"),
])
def test_values_outside_the_rules_are_refused_with_one_code(text, message):
    with pytest.raises(cs.InvalidSetting, match=message) as caught:
        cs.BY_NAME["cancel_grace"].from_text(text)
    assert caught.value.code == cs.INVALID_VALUE == "invalid_request"


def test_task_retention_has_bounds_of_its_own():
    retention = cs.BY_NAME["task_retention"]
    assert retention.from_text("604800") == 604_800_000 and retention.from_text("315360000") == 315_360_000_000
    for bad, message in (("0.5", "1 to 315360000 seconds"), ("315360000.001", "1 to 315360000"),
                         ("1.0001", "to the millisecond")):
        with pytest.raises(cs.InvalidSetting, match=message):
            retention.from_text(bad)


def test_the_cluster_lease_ttl_is_no_shorter_than_a_task_may_ask_for():
    """The lease of every task that names none: one a worker cannot renew in time would be lost every time."""
    lease_ttl = cs.BY_NAME["lease_ttl"]
    assert Decimal(lease_ttl.min_ms) / 1000 == ranges.MIN_LEASE_TTL_S
    assert lease_ttl.from_text("0.5") == 500
    for bad in ("0.499", "0.001"):
        with pytest.raises(cs.InvalidSetting, match="lease_ttl must be 0.5 to 2147483.647 seconds"):
            lease_ttl.from_text(bad)
    with pytest.raises(SystemExit) as refused:  # serve's flag and PULSE_LEASE_TTL: exit 2 before anything starts
        _parse(["--lease-ttl", "0.1"])
    assert refused.value.code == 2



    quarantine = cs.BY_NAME["permit_quarantine"]
    assert quarantine.from_text("lease-ttl") is None and quarantine.from_text("LEASE-TTL") is None
    assert quarantine.from_seconds(None) is None and quarantine.from_text("4") == 4_000
    assert quarantine.describe(None) == "the task's own lease ttl" and quarantine.describe(1_500) == "1.5 s"
    with pytest.raises(cs.InvalidSetting, match="not null"):
        cs.BY_NAME["lease_ttl"].from_seconds(None)


def test_json_numbers_go_through_the_same_check():
    setting = cs.BY_NAME["priority_step"]
    assert setting.from_seconds(Decimal("2.5")) == 2_500 and setting.from_seconds(3) == 3_000
    assert setting.from_seconds(0.3) == 300
    for bad in (True, Decimal("0"), Decimal("1E+10"), Decimal("0.0001")):
        with pytest.raises(cs.InvalidSetting):
            setting.from_seconds(bad)
    assert (cs.json_seconds(30_000), cs.json_seconds(1_500), cs.json_seconds(None)) == (30, 1.5, None)


def test_an_unknown_name_has_its_own_code():
    with pytest.raises(cs.InvalidSetting, match="the settings are lease_ttl, ") as caught:
        cs.lookup("poll_interval")  # per-process: never a cluster setting
    assert caught.value.code == cs.UNKNOWN_SETTING


def test_the_lapse_must_be_twice_the_heartbeat():
    values = dict(cs.DEFAULTS_MS, node_heartbeat=5_000, node_lapse=9_999)
    assert "node_lapse (9.999 s) must be at least twice node_heartbeat (5 s)" in cs.pair_problem(values)
    assert cs.pair_problem(dict(values, node_lapse=10_000)) is None
    assert cs.pair_problem(values, spell=lambda n: "--" + n).startswith("--node_lapse")


def test_serve_tells_a_given_setting_from_a_default(monkeypatch):
    assert _parse([]).explicit == frozenset()
    given = _parse(["--cancel-grace", "2", "--permit-quarantine", "lease-ttl", "--poll-interval", "1"])
    assert given.explicit == {"cancel_grace", "permit_quarantine"}  # poll_interval is per-process
    assert given.given_ms() == {"cancel_grace": 2_000, "permit_quarantine": None}
    assert _parse(["--cancel-grace", "30"]).explicit == {"cancel_grace"}  # the default's value, given: written
    monkeypatch.setenv("PULSE_PRIORITY_STEP", "2.5")
    from_env = _parse([])
    assert from_env.explicit == {"priority_step"} and from_env.priority_step == 2.5


@pytest.mark.parametrize("argv", [["--cancel-grace", "0.0005"], ["--priority-step", "0"],
                                  ["--permit-quarantine", "forever"], ["--lease-ttl", "2147484"]])
def test_serve_flags_use_the_same_check(argv):
    with pytest.raises(SystemExit):
        _parse(argv)


def test_a_pair_half_given_alone_is_judged_against_the_cluster_when_written():
    cfg.Settings().override(node_heartbeat=10).check()  # the cluster's lapse decides, at start
    with pytest.raises(ValueError, match="--node-lapse"):
        cfg.Settings().override(node_heartbeat=10, node_lapse=15).check()
    with pytest.raises(ValueError, match="0.001 to"):
        cfg.Settings().override(cancel_grace=0).check()


def test_a_copy_with_the_clusters_values_keeps_the_process_settings():
    mine = cfg.Settings(poll_interval=0.2).override(cancel_grace=2)
    follows = mine.with_cluster(dict(cs.DEFAULTS_MS, cancel_grace=7_000, permit_quarantine=1_500))
    assert (follows.cancel_grace, follows.permit_quarantine, follows.lease_ttl) == (7, 1.5, 30)
    assert follows.poll_interval == 0.2 and follows.explicit == {"cancel_grace"}


def test_the_migration_seeds_the_definitions_defaults(db):
    conn = connect(db)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT name, value_ms, state, updated_at, updated_by FROM cluster_settings")
            seeded = {name: (value, state, at, by) for name, value, state, at, by in cur.fetchall()}
    finally:
        conn.close()
    assert seeded == {name: (ms, "DEFAULT", None, None) for name, ms in cs.DEFAULTS_MS.items()}

"""An instance's live settings: replaced whole, with the milliseconds derived from them in the same step."""

from __future__ import annotations

from pulse_trio.config import Settings
from pulse_trio.server.live_settings import LiveSettings


def test_the_derived_milliseconds_follow_every_replacement():
    first = Settings(lease_ttl=0.5, start_timeout=2, permit_quarantine=None)
    live = LiveSettings(first)
    assert live.current is first
    assert (live.lease_ttl_ms, live.start_timeout_ms, live.permit_quarantine_ms) == (500, 2000, None)
    second = first.with_cluster({"lease_ttl": 45_000, "start_timeout": 1_500, "permit_quarantine": 60_000})
    live.replace(second)
    assert live.current is second
    assert (live.lease_ttl_ms, live.start_timeout_ms, live.permit_quarantine_ms) == (45_000, 1_500, 60_000)


def test_a_duration_is_the_whole_milliseconds_rows_and_frames_carry():
    live = LiveSettings(Settings(lease_ttl=0.0004, start_timeout=1.2344))
    assert (live.lease_ttl_ms, live.start_timeout_ms) == (1, 1234)  # never below 1 ms; rounded

"""The settings this instance runs by right now, and the values derived from them.

The cluster's settings change while an instance runs (``settings_sync.py``
re-reads them), so no part of the service may keep a copy: each holds the
one :class:`LiveSettings` of its instance and reads :attr:`LiveSettings.current`
at every decision. The whole milliseconds that rows and frames carry are
derived here once per change, in the same step that replaces the settings,
so a reader never sees a derived value from other settings than ``current``.
"""

from __future__ import annotations

from pulse_trio.cluster_settings import milliseconds
from pulse_trio.config import Settings


class LiveSettings:
    """One instance's current :class:`~pulse_trio.config.Settings`; only :meth:`replace` changes them."""

    __slots__ = ("current", "lease_ttl_ms", "start_timeout_ms", "permit_quarantine_ms")

    current: Settings
    #: ``current.lease_ttl`` as whole milliseconds: the default ttl of a claimed lease.
    lease_ttl_ms: int
    #: ``current.start_timeout`` as whole milliseconds: how long an offer waits for ``task.start``.
    start_timeout_ms: int
    #: ``current.permit_quarantine`` as whole milliseconds; None: each task's own lease ttl.
    permit_quarantine_ms: int | None

    def __init__(self, settings: Settings) -> None:
        self.replace(settings)

    def replace(self, settings: Settings) -> None:
        """Run by ``settings`` from now on (a frozen copy: never mutated in place)."""
        quarantine = settings.permit_quarantine
        self.lease_ttl_ms = milliseconds(settings.lease_ttl)
        self.start_timeout_ms = milliseconds(settings.start_timeout)
        self.permit_quarantine_ms = None if quarantine is None else milliseconds(quarantine)
        self.current = settings


__all__ = ["LiveSettings"]

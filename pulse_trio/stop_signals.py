"""The signals that ask a pulse-trio process to stop, in one place for every process that watches them.

Ctrl-C (SIGINT), a service manager's stop (SIGTERM) and a terminal that
closes (SIGHUP): ``serve``, a serve group's first process and members, and
the managed MariaDB's start take each as a stop (docs/operations.md §4).
The worker SDK, which imports nothing outside the contract, names the same
three itself (``pulse_trio.sdk.worker``).
"""

from __future__ import annotations

import signal
from typing import Final

STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

__all__ = ["STOP_SIGNALS"]

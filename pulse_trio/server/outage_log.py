"""What a loop that keeps asking the database logs while it cannot: once when it starts failing, once when it works.

Every loop of serve (the dispatcher's passes, the timers' ticks, the
heartbeats, the schedules' firing, the settings' and paused queues'
re-reads) retries for as long as its database is away, some of them every
second. One traceback per attempt would bury the line that says what
happened under hundreds that say it again; one for the whole outage, and a
line when it is over, tell the operator when it began and when it ended.
"""

from __future__ import annotations

import logging


class OutageLog:
    """The failing state of one loop: :meth:`failed` in its ``except`` block, :meth:`worked` after a success."""

    __slots__ = ("log", "failing_text", "back_text", "level", "failing")

    def __init__(self, log: logging.Logger, failing_text: str, back_text: str, *, level: int = logging.ERROR) -> None:
        self.log, self.failing_text, self.back_text, self.level = log, failing_text, back_text, level
        self.failing = False

    def failed(self) -> None:
        """The attempt failed: said, with the exception being handled, only when the last one worked."""
        if not self.failing:
            self.log.log(self.level, "%s; retrying, and saying so again once it works", self.failing_text,
                         exc_info=True)
        self.failing = True

    def worked(self) -> None:
        """The attempt worked: said only when the last one had failed."""
        if self.failing:
            self.log.info(self.back_text)
        self.failing = False


__all__ = ["OutageLog"]

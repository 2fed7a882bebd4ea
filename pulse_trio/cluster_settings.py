"""The settings every process of a cluster must agree on: names, units, bounds, defaults, checks.

Why they live in the database: a cancel's grace deadline, a submit's
``effective_at``, an offer's start deadline, a lease's ttl, a key permit's
quarantine and a node's lapse are written by whichever process happens to
act, and judged by every other one. If each process took them from its own
flags, the outcome would depend on who wrote the row. So the values are rows
of ``cluster_settings`` (migration 0009, chart ``cluster_setting``), and this
module is the one list of what may be stored there and how a value is
checked: ``serve``'s flags and ``PULSE_…`` variables, ``pulse-trio settings
set`` and ``PUT /v1/settings/{name}`` all parse through it.

Values are durations. They are stored as whole milliseconds (``value_ms``)
and shown as seconds; a value finer than a millisecond is refused, not
rounded. Each is bounded by the protocol's INT range, except
``task_retention`` (a second to ten years), which no frame carries, and
``lease_ttl``, which starts where a task's own lease_ttl does (half a second). The one nullable setting, ``permit_quarantine``, stores NULL for
"the task's own lease ttl", spelled ``lease-ttl`` on the command line and
``null`` in JSON.

Per-process settings (listen addresses, TLS files, the poll interval, the
hello timeout, the ping interval) are not here: they shape one process's
own sockets and loops, and two processes may differ in them safely.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Final

from pulse_trio.contract.limits import MAX_INT32

MIN_MS: Final = 1
#: The INT columns that hold derived durations, and the protocol's lease_ttl_ms / start_timeout_ms.
MAX_MS: Final = MAX_INT32
_MS = Decimal(1000)
_MILLISECOND = Decimal("0.001")
#: The shortest lease, the cluster's lease_ttl and a task's own alike (``client.ranges.MIN_LEASE_TTL_S``).
#: The worker SDK renews a third of the way to the expiry, so half a second leaves its renewal about a
#: third of a second for the round trip and the commit; a shorter lease could not be renewed.
LEASE_TTL_MIN_MS: Final = 500
#: task_retention: a week by default; at least a second, at most ten years (a BIGINT column holds it).
RETENTION_DEFAULT_MS: Final = 7 * 86_400_000
RETENTION_MIN_MS: Final = 1_000
RETENTION_MAX_MS: Final = 3_650 * 86_400_000

#: Refusal codes, shared by the client, the CLI and the HTTP API.
UNKNOWN_SETTING: Final = "setting_not_found"
INVALID_VALUE: Final = "invalid_request"
SETTING_CONFLICT: Final = "setting_conflict"


class InvalidSetting(ValueError):
    """A name that is no cluster setting, or a value outside its rules; ``code`` says which."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterSetting:
    """One setting: its name (also the ``serve`` flag and the ``PULSE_…`` variable), default and meaning."""

    name: str
    default_ms: int | None
    help: str
    #: The word for NULL on the command line; None: the setting always has a duration.
    null_word: str | None = None
    null_meaning: str = ""
    #: Bounds in milliseconds: the protocol's INT range unless the setting says otherwise.
    min_ms: int = MIN_MS
    max_ms: int = MAX_MS

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def nullable(self) -> bool:
        return self.null_word is not None

    def from_text(self, text: str) -> int | None:
        """A command-line value (seconds, decimals allowed; or the null word) as milliseconds."""
        if self.null_word is not None and text.strip().lower() == self.null_word:
            return None
        try:
            value = Decimal(text.strip())
        except InvalidOperation:
            raise self._invalid(f"not a number of seconds: {text!r}") from None
        return self.from_seconds(value)

    def from_seconds(self, value: Decimal | int | float | None) -> int | None:
        """Seconds (a JSON number, a float from code, or None where allowed) as milliseconds."""
        if value is None:
            if self.null_word is None:
                raise self._invalid(f"{self.name} must be a number of seconds, not null")
            return None
        if isinstance(value, bool):
            raise self._invalid(f"{self.name} must be a number of seconds")
        number = value if isinstance(value, Decimal) else Decimal(str(value))
        if not number.is_finite():
            raise self._invalid(f"{self.name} must be a finite number of seconds")
        # Judged exactly: a product in Decimal's context would round a value of many digits first,
        # and a sub-millisecond part or an excess over the maximum would pass unseen.
        try:
            whole_ms = number.quantize(_MILLISECOND)
        except ArithmeticError:  # too many digits at a millisecond's precision (1e999999): far out of range
            raise self._out_of_range(number) from None
        if whole_ms != number:
            raise self._invalid(f"{self.name} is given to the millisecond at most (got {number} s)")
        ms = int(whole_ms.scaleb(3))
        if not self.min_ms <= ms <= self.max_ms:
            raise self._out_of_range(number)
        return ms

    def _out_of_range(self, number: Decimal) -> InvalidSetting:
        return self._invalid(f"{self.name} must be {seconds_text(self.min_ms)} to {seconds_text(self.max_ms)} "
                             f"seconds (got {number})")

    def seconds(self, ms: int | None) -> float | None:
        return None if ms is None else ms / 1000

    def describe(self, ms: int | None) -> str:
        """For people: ``2 s``, or what NULL means."""
        return self.null_meaning if ms is None else f"{seconds_text(ms)} s"

    def _invalid(self, message: str) -> InvalidSetting:
        return InvalidSetting(INVALID_VALUE, message)


def seconds_text(ms: int) -> str:
    """Milliseconds as the shortest exact decimal number of seconds (``1500`` -> ``1.5``)."""
    return format((Decimal(ms) / _MS).normalize(), "f")


def milliseconds(seconds: float) -> int:
    """A duration held in seconds (``Settings``) as the whole milliseconds that rows and frames carry.

    Rounded, and never below ``MIN_MS``: no cluster setting is shorter.
    """
    return max(MIN_MS, round(seconds * 1000))


def json_seconds(ms: int | None) -> int | float | None:
    """Milliseconds as a JSON number of seconds: an integer when whole."""
    if ms is None:
        return None
    return ms // 1000 if ms % 1000 == 0 else ms / 1000


SETTINGS: Final[tuple[ClusterSetting, ...]] = (
    ClusterSetting("lease_ttl", 30_000, "seconds a started lease lives without renewal, for a task that "
                                        "names no lease_ttl of its own", min_ms=LEASE_TTL_MIN_MS),
    ClusterSetting("start_timeout", 30_000, "seconds an offer may wait for task.start"),
    ClusterSetting("cancel_grace", 30_000, "seconds a cancelled running task may keep running; fixed into the "
                                           "intent when the cancel is saved"),
    ClusterSetting("permit_quarantine", None, "seconds a key permit stays quarantined after a lost lease",
                   null_word="lease-ttl", null_meaning="the task's own lease ttl"),
    ClusterSetting("priority_step", 30_000, "seconds of waiting one priority level is worth; fixed into a "
                                            "task's effective_at when it is submitted"),
    ClusterSetting("fairness_quantum", 1_000, "seconds of due time one task of a fairness key with weight 1 "
                                              "takes up while the key has work waiting; fixed into a task's "
                                              "effective_at when it becomes READY"),
    ClusterSetting("node_heartbeat", 5_000, "seconds between each serve process's liveness heartbeats"),
    ClusterSetting("node_lapse", 15_000, "seconds without a heartbeat after which another instance declares a "
                                         "serve process lost and disconnects its sessions (at least twice "
                                         "node_heartbeat)"),
    ClusterSetting("task_retention", RETENTION_DEFAULT_MS,
                   "seconds a terminal task (with its leases, receipts and cancel intent) is kept after it ended, "
                   "before serve purges it; a queue may have its own (settings set ... --queue Q)",
                   min_ms=RETENTION_MIN_MS, max_ms=RETENTION_MAX_MS),
)
BY_NAME: Final[Mapping[str, ClusterSetting]] = {s.name: s for s in SETTINGS}
NAMES: Final = tuple(BY_NAME)
DEFAULTS_MS: Final[Mapping[str, int | None]] = {s.name: s.default_ms for s in SETTINGS}


def lookup(name: str) -> ClusterSetting:
    try:
        return BY_NAME[name]
    except KeyError:
        raise InvalidSetting(UNKNOWN_SETTING, f"no cluster setting {name[:80]!r}; the settings are "
                                              f"{', '.join(NAMES)}") from None


def pair_problem(values: Mapping[str, int | None], spell: Callable[[str], str] = str) -> str | None:
    """Why these values cannot go together, or None. ``values`` holds every setting (ms).

    A node's heartbeat must land at least twice within its lapse, or one
    late heartbeat would declare a live process lost. ``spell`` names a
    setting in the message (``serve`` says ``--node-lapse``).
    """
    heartbeat, lapse = values["node_heartbeat"], values["node_lapse"]
    assert heartbeat is not None and lapse is not None
    if lapse < 2 * heartbeat:
        return (f"{spell('node_lapse')} ({seconds_text(lapse)} s) must be at least twice {spell('node_heartbeat')} "
                f"({seconds_text(heartbeat)} s), or one late heartbeat would declare a live process lost")
    return None


__all__ = [
    "BY_NAME", "DEFAULTS_MS", "INVALID_VALUE", "LEASE_TTL_MIN_MS", "MAX_MS", "MIN_MS", "NAMES",
    "RETENTION_DEFAULT_MS", "SETTINGS", "SETTING_CONFLICT", "UNKNOWN_SETTING", "ClusterSetting", "InvalidSetting", "json_seconds", "lookup", "pair_problem",
    "seconds_text",
]

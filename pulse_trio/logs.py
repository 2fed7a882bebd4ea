"""Structured logs: one JSON object (or one ``key=value`` line) per record.

Stdlib ``logging`` with our own formatter: every module keeps using
``logging.getLogger(...)`` and ``extra={...}``; nothing else is needed.

* **Ids on the lines that concern them.** ``session_id``, ``instance_id``,
  ``task_id``, ``lease_id`` come from ``extra``, from :func:`bind` (a
  context variable, so a Trio task and the tasks it starts share it), or
  from the message itself: a ``ses_…``/``ins_…``/``tsk_…``/``lse_…`` id
  written into the text is lifted into its field, so older ``%s`` lines
  carry them too.
* **No secrets, ever.** Fields whose name says secret/token/password/
  authorization are replaced by ``"[redacted]"`` (``token_id`` and
  ``concurrency_token`` are not secrets and stay); bearer tokens
  (``pt_…``), ``Bearer …`` credentials, lease/instance secrets after their
  field name, and database URL passwords are masked in messages and
  tracebacks alike.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import json
import logging
import re
import sys
from collections.abc import Iterator
from typing import Any, TextIO

FORMATS = ("json", "text")
ID_FIELDS = ("session_id", "instance_id", "task_id", "lease_id")
_ID_PREFIX = {"ses_": "session_id", "ins_": "instance_id", "tsk_": "task_id", "lse_": "lease_id"}
_ID_RE = re.compile(r"\b(ses_|ins_|tsk_|lse_)[0-9A-HJKMNP-TV-Z]{26}\b")

_SECRET_NAME = re.compile(r"secret|token|passw|authorization|cookie|credential", re.IGNORECASE)
_PUBLIC_NAMES = frozenset({"token_id", "concurrency_token"})
REDACTED = "[redacted]"
_MASKS = (
    (re.compile(r"\bpt_[A-Za-z0-9_-]{8,}"), "pt_" + REDACTED),
    (re.compile(r"(?i)\b(bearer)\s+[^\s'\",;]+"), r"\1 " + REDACTED),
    (re.compile(r"(?i)(secret[\"']?\s*[:=]\s*[\"']?)[A-Za-z0-9_-]{20,}"), r"\1" + REDACTED),
    (re.compile(r"(mysql://[^:/@\s]+:)[^@\s]+@"), r"\1***@"),
)

# Attributes every LogRecord has; anything else on a record came from ``extra``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}

_bound: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("pulse_log_context", default={})


@contextlib.contextmanager
def bind(**fields: Any) -> Iterator[None]:
    """Add ``fields`` to every record logged in this context (Trio tasks inherit it)."""
    token = _bound.set({**_bound.get(), **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _bound.reset(token)


def mask(text: str) -> str:
    """``text`` with tokens, bearer credentials, secrets and URL passwords masked."""
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return text


def _clean(name: str, value: Any) -> Any:
    if name not in _PUBLIC_NAMES and _SECRET_NAME.search(name):
        return REDACTED
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    return mask(str(value))


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The structured content of ``record``: time, level, logger, message, ids, extras."""
    message = mask(record.getMessage())
    fields: dict[str, Any] = {
        "ts": dt.datetime.fromtimestamp(record.created, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "level": record.levelname.lower(),
        "logger": record.name,
        "msg": message,
    }
    extras = {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}
    for name, value in {**_bound.get(), **extras}.items():
        fields[name] = _clean(name, value)
    for match in _ID_RE.finditer(message):
        fields.setdefault(_ID_PREFIX[match.group(1)], match.group(0))
    if record.exc_info:
        fields["exc"] = mask(logging.Formatter().formatException(record.exc_info))
    elif record.exc_text:
        fields["exc"] = mask(record.exc_text)
    return fields


class JsonFormatter(logging.Formatter):
    """One compact JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(record_fields(record), ensure_ascii=False, separators=(",", ":"), default=str)


_BARE = re.compile(r"[^\s=\"]+")


class TextFormatter(logging.Formatter):
    """``ts level logger msg="…" key=value …``: readable, and still one parseable record per line."""

    def format(self, record: logging.LogRecord) -> str:
        fields = record_fields(record)
        head = f"{fields.pop('ts')} {fields.pop('level'):<7} {fields.pop('logger')}"
        exc = fields.pop("exc", None)
        parts = [head] + [f"{k}={_text_value(v)}" for k, v in fields.items()]
        line = " ".join(parts)
        if exc:
            line += " exc=" + json.dumps(exc, ensure_ascii=False)
        return line


def _text_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if _BARE.fullmatch(text) else json.dumps(text, ensure_ascii=False)


def formatter(fmt: str) -> logging.Formatter:
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}")
    return JsonFormatter() if fmt == "json" else TextFormatter()


def configure(fmt: str = "json", level: str | int = "INFO", stream: TextIO | None = None) -> logging.Handler:
    """Send every logger's records to ``stream`` (stderr) in ``fmt``; returns the handler.

    Replaces handlers a previous call installed, so calling it twice is safe.
    """
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter(fmt))
    handler._pulse_handler = True  # type: ignore[attr-defined]
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_pulse_handler", False)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    # transitions logs every state entry and exit at INFO: two records per frame on the hot path.
    logging.getLogger("transitions").setLevel(max(root.level, logging.WARNING))
    # hypercorn's own loggers: errors through ours; access lines are ours too (pulse_trio.http.access).
    logging.getLogger("hypercorn.error").propagate = True
    return handler


__all__ = ["FORMATS", "ID_FIELDS", "JsonFormatter", "TextFormatter", "bind", "configure", "formatter", "mask",
           "record_fields"]

"""Every producer-client call the docs name is one that class has, with those keywords.

Two classes answer a Python producer: ``pulse_trio.producer.Client`` (and
``AsyncClient``) over HTTP with a token, and ``pulse_trio.client.DatabaseClient``
with the database's credentials. The README and docs/worker.md §12 introduce
``Client`` as the HTTP one, so a page that writes ``Client.drain`` or
``Client(priority_step=…)`` for the database's sends a reader to a method or
keyword that is not there.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from pulse_trio.client import DatabaseClient
from pulse_trio.producer import AsyncClient, Client

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
CLASSES = {"AsyncClient": AsyncClient, "Client": Client, "DatabaseClient": DatabaseClient}
_NAME = r"(?<![\w.])(?P<cls>AsyncClient|DatabaseClient|Client)"
#: ``Client(...)``, ``Client.method`` and ``Client(...).method(...)``, arguments without parentheses inside.
MADE = re.compile(_NAME + r"\((?P<args>[^()`]*)\)")
CALLED = re.compile(_NAME + r"(?:\([^()`]*\))?\.(?P<method>\w+)(?:\((?P<args>[^()`]*)\))?")


def _keywords(args: str | None) -> list[str]:
    return re.findall(r"(\w+)=", args or "")


def _problems(text: str) -> list[str]:
    problems = []
    for match in MADE.finditer(text):
        taken = inspect.signature(CLASSES[match["cls"]].__init__).parameters
        problems += [f"{match[0]!r}: {match['cls']}() takes no {kw}=" for kw in _keywords(match["args"])
                     if kw not in taken]
    for match in CALLED.finditer(text):
        method = getattr(CLASSES[match["cls"]], match["method"], None)
        if method is None:
            problems.append(f"{match[0]!r}: {match['cls']} has no {match['method']}")
            continue
        taken = inspect.signature(method).parameters
        problems += [f"{match[0]!r}: {match['cls']}.{match['method']} takes no {kw}="
                     for kw in _keywords(match["args"]) if kw not in taken]
    return problems


def test_every_client_call_the_docs_name_exists():
    problems = [f"{page.relative_to(ROOT)}: {problem}" for page in PAGES
                for problem in _problems(page.read_text("utf-8"))]
    assert problems == []


def test_the_checker_sees_what_it_must():
    assert _problems("`Client.drain(x)`, `Client(priority_step=1)`, `Client(db).cancel(t, requested_by=1)`") == [
        "'Client(priority_step=1)': Client() takes no priority_step=",
        "'Client.drain(x)': Client has no drain",
        "'Client(db).cancel(t, requested_by=1)': Client.cancel takes no requested_by=",
    ]
    assert _problems("`DatabaseClient(db).cancel(t, requested_by=1)`, `AsyncClient.submit_many`") == []

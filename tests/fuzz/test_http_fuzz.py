"""Schema-driven fuzzing of the HTTP API with schemathesis, from the served ``/openapi.json``.

Every operation gets requests generated from the document: ones that fit it
(positive) and ones that break it (negative). Whatever is sent, the answer
is never a 5xx, its status is one the document lists for the operation,
and its body fits the document's schema. A request that fits the document
is refused only by a rule the document states but JSON Schema cannot
express (listed in ``UNEXPRESSED_RULES``); one that breaks the document is
refused with a 4xx. Afterwards the server holds no more sockets than before.

The service runs in the test's Trio loop on real sockets; schemathesis and
Hypothesis run in a worker thread (they are blocking), each request a real
HTTP request. The run is bounded by examples per operation and by a
wall-clock budget.
"""

from __future__ import annotations

import re
import time

import hypothesis
import hypothesis.errors
import requests
import schemathesis
import trio
from hypothesis import HealthCheck, Phase
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance, negative_data_rejection, response_schema_conformance, status_code_conformance,
)

from pulse_trio import cluster_settings as cs
from socket_support import open_server_sockets, settle_to

EXAMPLES = 15
#: Past this, remaining examples are not sent (a loaded machine shortens the run, never lengthens it).
BUDGET_S = 35.0

#: The refusals a request that fits the document may still get: rules the document states in words
#: because JSON Schema cannot say them (across fields, across path and body, decimal precision).
UNEXPRESSED_RULES = (
    "give delay or due_at, not both",
    "initial <= max",
    "the Idempotency-Key header and the idempotency_key field disagree",
    "must be a number of seconds, not null",  # PUT /v1/settings/{name}: null only for permit_quarantine
    "is given to the millisecond at most",
    "node_lapse",  # at least twice node_heartbeat (409 setting_conflict, or 400 within one PATCH)
    "has an exponent beyond",  # a payload number's written exponent (the worker protocol's rule)
    "integer digits",
    "deeper",  # a payload nested beyond its stated depth
    # PUT /v1/settings/{name}: one schema for every name, each setting's narrower bounds in its words
    *(f"{x.name} must be {cs.seconds_text(x.min_ms)} to {cs.seconds_text(x.max_ms)} seconds" for x in cs.SETTINGS
      if (x.min_ms, x.max_ms) != (cs.MIN_MS, cs.MAX_MS)),
)


class Refused(AssertionError):
    pass


def _accepts_what_fits(response: requests.Response | schemathesis.Response, case: schemathesis.Case) -> None:
    """A request that fits the document is not refused as bad input, save for the cross-field rules."""
    if response.status_code == 400:
        message = response.json()["error"]["message"]
        if not any(rule in message for rule in UNEXPRESSED_RULES):
            raise Refused(f"{case.method} {case.formatted_path} fits the document but was refused: {message}")


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_FIELD_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")


def _is_http(case: schemathesis.Case) -> bool:
    """Whether the generated headers are HTTP/1.1 at all (a name is a token; a value has no controls).

    One that is not never reaches the API: the HTTP layer answers 400 with an empty body and closes
    the connection, which the document (about the API, not about HTTP) does not describe.
    """
    return all(_TOKEN.fullmatch(str(name)) and _FIELD_VALUE.fullmatch(str(value))
               for name, value in (case.headers or {}).items())


def _fuzz(base: str, token: str, deadline: float) -> dict[str, int]:
    schema = schemathesis.openapi.from_url(f"{base}/openapi.json")
    session = requests.Session()
    # Fixed, so that a negative case breaks something else than the credentials (401 is no finding).
    auth = {"Authorization": f"Bearer {token}"}
    seen: dict[str, int] = {}
    settings = hypothesis.settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                                   suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
    try:
        for result in schema.get_all_operations():
            operation = result.ok()
            for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
                @settings
                @hypothesis.given(case=operation.as_strategy(generation_mode=mode, headers=auth))
                def run(case: schemathesis.Case) -> None:
                    if time.monotonic() > deadline:
                        seen["skipped"] = seen.get("skipped", 0) + 1
                        return
                    response = case.call(base_url=base, session=session, allow_redirects=False, timeout=10)
                    key = f"{mode.value} {case.method} {case.path} {response.status_code}"
                    seen[key] = seen.get(key, 0) + 1
                    checks = [not_a_server_error]
                    if _is_http(case):
                        checks += [status_code_conformance, content_type_conformance, response_schema_conformance]
                        if not mode.is_positive:
                            checks.append(negative_data_rejection)
                    else:
                        assert response.status_code == 400 and response.headers.get("connection") == "close"
                    case.validate_response(response, checks=checks)
                    if mode.is_positive:
                        _accepts_what_fits(response, case)

                try:
                    run()
                except hypothesis.errors.Unsatisfiable:
                    assert not mode.is_positive  # nothing to break in an operation without inputs
    finally:
        session.close()
    return seen


async def test_no_generated_request_gets_a_5xx_or_an_undocumented_answer(start_service, token_factory):
    service = await start_service(http_idle_timeout=1.0, http_body_timeout=2.0)
    token = token_factory("operator")
    base = f"http://127.0.0.1:{service.http_port}"
    baseline = open_server_sockets(service.http_port)
    started = time.monotonic()
    seen = await trio.to_thread.run_sync(_fuzz, base, token, started + BUDGET_S)
    document = (await trio.to_thread.run_sync(requests.get, f"{base}/openapi.json")).json()
    # schemathesis leaves out the document's own address; it was read above, and by schemathesis.
    operations = {f"{method.upper()} {path}" for path, item in document["paths"].items() for method in item
                  if path != "/openapi.json"}
    sent = {key: count for key, count in seen.items() if key != "skipped"}
    if "skipped" not in seen:  # within budget every operation was reached
        assert {key.split()[1] + " " + key.split()[2] for key in sent if key.startswith("positive")} == operations
    assert sum(sent.values()) > 100, seen
    assert not any(key.split()[3].startswith("5") for key in sent), seen
    assert await settle_to(service.http_port, baseline, within=5) == baseline

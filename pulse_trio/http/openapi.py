"""The OpenAPI 3.1 document of the HTTP API, written as data.

Served at ``/openapi.json`` and committed as ``docs/openapi.json``; a test
checks that the two are the same, that every route of the app is in it,
and that real answers validate against its schemas (OpenAPI 3.1 schemas
are JSON Schema 2020-12). After changing it::

    python -m pulse_trio.http.openapi > docs/openapi.json
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pulse_trio import __version__ as VERSION
from pulse_trio import cluster_settings as cs
from pulse_trio import schedule_timing as timing_rules
from pulse_trio.charts import states
from pulse_trio.client import ranges
from pulse_trio.contract import grammar as g
from pulse_trio.contract import limits as lim
from pulse_trio.http.auth import PERMISSIONS
from pulse_trio.http.bodies import IDEMPOTENCY_HEADER_PATTERN
from pulse_trio.http.throughput import WINDOW_MINUTES
from pulse_trio.store.views.dashboard import FINISHED_STATUSES
from pulse_trio.tokens import GRANTS

DUE_AT = {"type": "string", "format": "date-time", "pattern": ranges.DUE_AT_PATTERN}
TIME = {"type": "string", "format": "date-time", "pattern": r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$"}
NAME = {"type": "string", "pattern": f"^{g.NAME_PATTERN}$"}
TASK_ID = {"type": "string", "pattern": f"^{g.TASK_PREFIX}{g.ULID_PATTERN}$"}
INSTANCE_ID = {"type": "string", "pattern": f"^{g.INSTANCE_PREFIX}{g.ULID_PATTERN}$"}
SETTING_NAME = {"type": "string", "enum": list(cs.NAMES)}
SECONDS = {"type": "number", "minimum": min(x.min_ms for x in cs.SETTINGS) / 1000,
           "maximum": max(x.max_ms for x in cs.SETTINGS) / 1000}
#: A cluster setting's value as sent: the same bounds, to the millisecond (stated; JSON Schema's
#: multipleOf cannot say it exactly for decimals).
SECONDS_IN = SECONDS | {"description": "Seconds, to the millisecond (a finer value is refused)."}
TASK_STATES = list(states.TASK_STATES)


def _seconds_in(setting: cs.ClusterSetting) -> dict[str, Any]:
    """One setting's value as sent, within its own bounds."""
    return SECONDS_IN | {"minimum": setting.min_ms / 1000, "maximum": setting.max_ms / 1000}

FINISHED = list(FINISHED_STATUSES)


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def _obj(properties: dict[str, Any], required: list[str] | None = None, *, closed: bool = True) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties,
                              "required": list(properties) if required is None else required}
    if closed:
        schema["additionalProperties"] = False
    return schema


#: What chart `queue` records about a queue, beside its depths (pulse_trio/store/queue/queues.py).
QUEUE_CONTROL: dict[str, Any] = {
    "state": {"type": "string", "enum": list(states.QUEUE_STATES),
              "description": "PAUSED: no new offers on any serve process; ACTIVE otherwise."},
    "paused": {"type": "boolean"},
    "paused_at": _nullable(TIME | {"description": "While paused: since when."}),
    "paused_by": _nullable({"type": "string", "description": "While paused: `cli@host` or `http:tok_…`."}),
    "task_retention": _nullable({"type": "number", "minimum": 0, "description": (
        "Seconds a terminal task of this queue is kept, when the queue has a retention of its own; null: the "
        "cluster's task_retention.")}),
}


SCHEMAS: dict[str, Any] = {
    "Error": _obj({"error": _obj({
        "code": {"type": "string", "pattern": f"^{g.ERROR_CODE_PATTERN}$",
                 "description": "Stable, machine-readable."},
        "message": {"type": "string", "description": "For people."},
        "field": {"type": "string", "description": "422 only: the request field at fault."},
        "items": {"type": "array", "description": "A refused batch only: one entry per refused task.",
                  "items": _obj({
                      "index": {"type": "integer", "minimum": 0, "description": "The task's place in `tasks`."},
                      "code": {"type": "string", "pattern": f"^{g.ERROR_CODE_PATTERN}$",
                               "description": "What a single submit of this task would answer."},
                      "field": _nullable({"type": "string", "description": "The field at fault, if one is."}),
                      "message": {"type": "string"},
                  })},
    }, ["code", "message"])}),
    "SubmitBatchRequest": _obj({"tasks": {"type": "array", "minItems": 1, "maxItems": ranges.MAX_BATCH,
                                          "items": _ref("SubmitRequest")}}),
    "SubmitBatchResult": _obj({"tasks": {"type": "array", "items": _obj({
        "task_id": TASK_ID, "state": {"type": "string", "enum": TASK_STATES},
        "created": {"type": "boolean", "description": "False: the task this idempotency key named already."},
    })}}),
    # Optional fields may be null, meaning "not given" (payload excepted: null is a value).
    "SubmitRequest": _obj({
        "queue": NAME,
        "kind": NAME,
        "payload": {"description": f"Any JSON (default `{{}}`), at most {lim.MAX_PAYLOAD_BYTES // 1024} KiB as "
                                   f"compact UTF-8 (else 413) and {lim.MAX_PAYLOAD_DEPTH} levels deep; every "
                                   f"number with a decimal exponent within ±{lim.MAX_NUMBER_EXPONENT} and at most "
                                   f"{lim.MAX_INTEGER_DIGITS} integer digits, so that any consumer can read it "
                                   "(else 400). Stored and delivered digit for digit."},
        "priority": _nullable(ranges.PRIORITY.schema("Higher first; each level is worth the cluster's "
                                                     "priority_step of waiting.")),
        "delay": _nullable(ranges.DELAY.schema("Due this many seconds from now (not with due_at).")),
        "due_at": _nullable(DUE_AT | {"description": "Due at this UTC time (not with delay)."}),
        "idempotency_key": _nullable({"type": "string", "minLength": 1, "maxLength": lim.MAX_IDEMPOTENCY_KEY_CHARS,
                                      "description": "Business identity within the queue; the "
                                                     "`Idempotency-Key` header is the same field."}),
        "concurrency_key": _nullable({"type": "string", "pattern": f"^{g.CONCURRENCY_KEY_PATTERN}$"}),
        "concurrency_limit": _nullable(ranges.CONCURRENCY_LIMIT.schema()),
        "fairness_key": _nullable({"type": "string", "pattern": f"^{g.FAIRNESS_KEY_PATTERN}$",
                                   "description": "A tenant, say: the keys with work waiting in the queue share "
                                                  "it by their weights (docs/priority-and-fairness.md §5)."}),
        "max_attempts": _nullable(ranges.MAX_ATTEMPTS.schema()),
        "retry_uncertain": _nullable({"type": "boolean", "default": False,
                                      "description": "The handler is safe to run again after a lost lease."}),
        "lease_ttl": _nullable(ranges.LEASE_TTL.schema(
            "This task's lease ttl in seconds, kept to the millisecond (default: the cluster's lease_ttl). "
            f"At least {ranges.MIN_LEASE_TTL_S} s, so that a worker can renew it.")),
        "backoff_initial": _nullable(ranges.BACKOFF_INITIAL.schema(
            "Seconds before the first retry of a retryable failure, kept to the millisecond.")),
        "backoff_factor": _nullable(ranges.BACKOFF_FACTOR.schema("Each further retry waits this many times longer.")),
        "backoff_max": _nullable(ranges.BACKOFF_MAX.schema(
            "The longest retry delay in seconds (default 300, or backoff_initial when that is longer); "
            "given with backoff_initial, at least backoff_initial.")),
    }, ["queue", "kind"]) | {"not": {"required": ["delay", "due_at"],
                                       "properties": {"delay": {"type": "number"}, "due_at": {"type": "string"}}},
                             "description": "delay and due_at exclude each other (either may be null)."},
    "CancelRequest": _obj({"reason": {"type": "string", "maxLength": ranges.MAX_CANCEL_REASON_CHARS,
                                      "description": "Stored with the intent and shown as `cancel.reason`."}}, []),
    "Attempt": _obj({
        "attempt": {"type": "integer", "minimum": 1},
        "lease_id": {"type": "string"},
        "status": {"type": "string", "description": "RUNNING while the lease runs, then how the attempt ended."},
        "started_at": TIME,
        "ended_at": _nullable(TIME),
        "error_code": _nullable({"type": "string"}),
        "error_message": _nullable({"type": "string"}),
        "retryable": _nullable({"type": "boolean"}),
        "effect_uncertain": {"type": "boolean"},
        "concurrency_token": _nullable({"type": "string"}),
    }),
    "CancelIntent": _obj({
        "state": {"type": "string", "enum": ["REQUESTED", "NOTIFIED", "RESOLVED", "ESCALATED"],
                  "description": "REQUESTED/NOTIFIED: the running holder is to stop; RESOLVED: the task ended; "
                                 "ESCALATED: the grace ran out and the lease was expired."},
        "requested_at": TIME,
        "grace_expires_at": _nullable(TIME | {"description": "A running task's deadline: request + cancel grace "
                                                                "(the request time for a task cancelled at once)."}),
        "reason": {"type": "string"},
        "requested_by": {"type": "string"},
        "resolved_at": _nullable(TIME),
    }),
    "Outcome": _obj({
        "status": {"type": "string", "enum": FINISHED},
        "error_code": _nullable({"type": "string"}),
        "error_message": _nullable({"type": "string"}),
        "result": {"description": "The handler's result (any JSON). A CANCELLED task no handler finished "
                                  "(cancelled before start, or its grace ran out) shows {}, what a handler that "
                                  "stops on request reports; any other outcome no handler produced shows null."},
        "retryable": {"type": "boolean"},
        "effect_uncertain": {"type": "boolean"},
    }),
    "Task": _obj({
        "task_id": TASK_ID,
        "queue": NAME,
        "kind": NAME,
        "state": {"type": "string", "enum": TASK_STATES},
        "priority": {"type": "integer"},
        "attempt": {"type": "integer", "minimum": 0},
        "max_attempts": {"type": "integer"},
        "idempotency_key": {"type": "string"},
        "concurrency_key": _nullable({"type": "string"}),
        "concurrency_limit": {"type": "integer"},
        "fairness_key": _nullable({"type": "string"}),
        "effect_uncertain": {"type": "boolean"},
        "retry_uncertain": {"type": "boolean"},
        "backoff_initial": {"type": "number", "description": "Retry backoff: first delay, seconds."},
        "backoff_factor": {"type": "number", "description": "Retry backoff: growth per attempt."},
        "backoff_max": {"type": "number", "description": "Retry backoff: longest delay, seconds."},
        "retry_of": _nullable(TASK_ID),
        "retried_by": _nullable(TASK_ID),
        "created_at": TIME,
        "due_at": TIME,
        "cancel_requested_at": _nullable(TIME),
        "cancel": _nullable(_ref("CancelIntent")),
        "payload": {"description": "The task input, exactly as submitted."},
        "attempts": {"type": "array", "items": _ref("Attempt")},
        "outcome": _nullable(_ref("Outcome")),
        "created": {"type": "boolean", "description": "Submit and retry only: whether this call created it."},
        "cancel_changed": {"type": "boolean", "description": "Cancel only: whether this call saved the intent."},
        "done": {"type": "boolean", "description": "Outcome only: whether the task is terminal (its `outcome` "
                                                   "final); false when the wait ran out first."},
    }, ["task_id", "queue", "kind", "state", "priority", "attempt", "max_attempts", "idempotency_key",
        "created_at", "due_at", "payload", "attempts", "outcome"]),
    "TaskSummary": _obj({
        "task_id": TASK_ID, "queue": NAME, "kind": NAME, "state": {"type": "string", "enum": TASK_STATES},
        "priority": {"type": "integer"}, "attempt": {"type": "integer"}, "created_at": TIME,
    }),
    "TaskPage": _obj({
        "tasks": {"type": "array", "items": _ref("TaskSummary")},
        "next": _nullable(TASK_ID | {"description": "Pass as `cursor` for the next page; null on the last."}),
    }),
    "Worker": _obj({
        "instance_id": INSTANCE_ID,
        "session_id": {"type": "string"},
        "epoch": {"type": "string", "description": "Cluster-wide registration counter (decimal string)."},
        "state": {"type": "string", "enum": ["ACTIVE", "DRAINING", "DISCONNECTED"]},
        "worker_name": {"type": "string"},
        "subscriptions": {"type": "array", "items": _obj({
            "queue": NAME, "kinds": _nullable({"type": "array", "items": NAME})})},
        "capacity": {"type": "integer", "minimum": 0},
        "drain": {"type": "boolean"},
        "sequence": _nullable({"type": "string"}),
        "concurrency_keys": {"type": "boolean"},
        "cancellation_notifications": {"type": "boolean"},
        "active_leases": {"type": "integer", "minimum": 0, "description": "Leases the session holds now."},
        "registered_at": TIME,
        "disconnected_at": _nullable(TIME),
        "node_id": _nullable({"type": "string", "description": (
            "The `pulse-trio serve` process holding the session (`server_nodes`). When that process dies "
            "without closing it, another instance sets the session DISCONNECTED once the process's "
            "heartbeat lapses.")}),
    }),
    "WorkerList": _obj({"workers": {"type": "array", "items": _ref("Worker")}}),
    "Node": _obj({
        "node_id": {"type": "string"},
        "state": {"type": "string", "enum": ["ALIVE", "LOST", "STOPPED"]},
        "host": {"type": "string"},
        "pid": {"type": "integer"},
        "lapse_s": {"type": "number", "description": "Declared lost after this long without a heartbeat."},
        "started_at": TIME,
        "heartbeat_at": TIME,
        "lost_at": _nullable(TIME),
        "lost_by": _nullable({"type": "string", "description": "The node that declared it lost."}),
        "stopped_at": _nullable(TIME),
        "open_sessions": {"type": "integer", "minimum": 0,
                          "description": "Worker sessions still recorded open on it."},
    }),
    "NodeList": _obj({"nodes": {"type": "array", "items": _ref("Node")}}),
    "QueueDepths": _obj({"queues": {"type": "object", "additionalProperties": _obj({
        "states": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0},
                   "propertyNames": {"enum": TASK_STATES}},
        "oldest_ready_age_s": _nullable({"type": "number", "minimum": 0}),
        **QUEUE_CONTROL,
    })}}),
    "RetentionChange": _obj({"value": _nullable(_seconds_in(cs.BY_NAME["task_retention"]) | {"description": (
        "Seconds a terminal task of this queue is kept; null: the cluster's task_retention.")})}),
    "QueueState": _obj({
        "queue": NAME,
        **QUEUE_CONTROL,
        "changed": {"type": "boolean", "description": "False when the queue was in that state already."},
    }),
    "Setting": _obj({
        "name": SETTING_NAME,
        "value": _nullable(SECONDS | {"description": "Seconds; null only for permit_quarantine (the task's own "
                                                     "lease ttl)."}),
        "unit": {"const": "s"},
        "meaning": {"type": "string", "description": "The value for people (`2 s`, or what null means)."},
        "default": _nullable(SECONDS),
        "state": {"type": "string", "enum": ["DEFAULT", "SET"],
                  "description": "DEFAULT: as the migration seeded it; SET: someone set it."},
        "updated_at": _nullable(TIME),
        "updated_by": _nullable({"type": "string", "description": "`serve:nod_…` (a flag at start), `cli@host`, "
                                                                  "or `http:tok_…`."}),
        "description": {"type": "string"},
    }),
    "SettingMap": _obj({"settings": {"type": "object", "additionalProperties": _ref("Setting"),
                                     "propertyNames": SETTING_NAME}}),
    "FairnessWeight": _obj({
        "fairness_key": {"type": "string", "pattern": f"^{g.FAIRNESS_KEY_PATTERN}$"},
        "weight": {"type": "integer", "minimum": 1, "maximum": 10_000,
                   "description": "The key's share of a queue against other keys with work waiting (default 1)."},
        "updated_at": _nullable(TIME),
        "updated_by": _nullable({"type": "string", "description": "`cli@host` or `http:tok_…`; null: never set."}),
    }),
    "FairnessWeightMap": _obj({"fairness_weights": {"type": "object", "additionalProperties": _ref("FairnessWeight"),
                                                    "description": "The keys given a weight; any other weighs 1."}}),
    "WeightChange": _obj({"weight": {"type": "integer", "minimum": 1, "maximum": 10_000}}, ["weight"], closed=True),
    "SettingChange": _obj({"value": _nullable(SECONDS_IN | {"description": (
        "Seconds, to the millisecond (a finer value is refused); null only for permit_quarantine, where it "
        "means the task's own lease ttl (for another setting it is refused). Within each setting's own "
        "bounds, which `SettingsChange` states one by one: " + ", ".join(
            f"{x.name} {cs.seconds_text(x.min_ms)} to {cs.seconds_text(x.max_ms)} s" for x in cs.SETTINGS
            if (x.min_ms, x.max_ms) != (cs.MIN_MS, cs.MAX_MS)) + ".")})}),
    "SettingsChange": _obj({x.name: _nullable(_seconds_in(x)) if x.nullable else _seconds_in(x)
                            for x in cs.SETTINGS}, [], closed=True)
                      | {"minProperties": 1},
    "Whoami": _obj({
        "token_id": {"type": "string"},
        "role": {"type": "string", "enum": ["producer", "operator"]},
        "queues": {"type": "array", "items": {"type": "string"},
                   "description": "The queues the token is held to; `[\"*\"]`: every queue."},
        "allow": {"type": "array", "items": {"type": "string", "enum": list(GRANTS)},
                  "description": "Actions granted beyond the role (`token create --allow`), within its queues."},
        "label": {"type": "string"},
        "created_at": TIME,
        "revoked_at": {"type": "null"},
        "may": {"type": "array", "items": {"type": "string", "enum": list(PERMISSIONS)},
                "description": "The actions this token's role and grants let it take; every other one is 403."},
    }),
    "Overview": _obj({
        "at": TIME,
        "count_cap": {"type": "integer", "description": "State counts stop here (see `capped`)."},
        "recent_s": {"type": "number", "description": "The window of `recent`, seconds."},
        "first_minute": TIME | {"description": "Start of the first `per_minute` bucket (a clock minute)."},
        "minute_s": {"type": "number"},
        "queues": {"type": "object", "additionalProperties": _obj({
            "state": QUEUE_CONTROL["state"],
            "states": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0},
                       "propertyNames": {"enum": TASK_STATES}},
            "capped": {"type": "array", "items": {"enum": TASK_STATES},
                       "description": "States with more tasks than `count_cap`: their count is at least it."},
            "oldest_ready_age_s": _nullable({"type": "number", "minimum": 0}),
            "recent": _obj({status: {"type": "integer", "minimum": 0} for status in FINISHED}),
            "per_minute": _obj({status: {"type": "array", "items": {"type": "integer", "minimum": 0},
                                         "minItems": WINDOW_MINUTES, "maxItems": WINDOW_MINUTES}
                                for status in FINISHED}),
            "fairness": {"type": "array", "description": (
                "The fairness keys with the most READY tasks (at most 10), then `other` for the rest "
                "(docs/priority-and-fairness.md §5)."), "items": _obj({
                    "fairness_key": {"type": "string"},
                    "ready": {"type": "integer", "minimum": 0},
                    "recent_finished": {"type": "integer", "minimum": 0,
                                        "description": "Finished in the last `recent_s` seconds."},
                    "recent_share": _nullable({"type": "number", "minimum": 0, "maximum": 1, "description": (
                        "Its part of the queue's recent finishes with a fairness key.")}),
                    "keys": {"type": "integer", "minimum": 1, "description": "`other` only: how many keys."},
                }, ["fairness_key", "ready", "recent_finished", "recent_share"])},
        })},
    }),
    "Health": _obj({"status": {"const": "ok"}}),
    "Ready": _obj({"status": {"const": "ready"}, "schema_version": {"type": "integer"},
                   "code_version": {"type": "integer"},
                   "settings_conflicts": {"type": "array", "description": (
                       "Only when there is one: this instance's cluster-setting flags that replaced a different "
                       "stored value when it started, or that the cluster has moved away from since (another "
                       "instance or an operator set a different value)."), "items": _obj({
                           "name": SETTING_NAME,
                           "flag": _nullable(SECONDS | {"description": "This instance's flag."}),
                           "replaced": _nullable(SECONDS | {"description": "What the flag replaced at start, "
                                                                           "if different."}),
                           "replaced_by": _nullable({"type": "string"}),
                           "cluster": _nullable(SECONDS | {"description": "The cluster's value now."}),
                           "cluster_by": _nullable({"type": "string"}),
                           "message": {"type": "string"},
                       })}},
                  ["status", "schema_version", "code_version"]),
}

_ERRORS = {
    400: "Bad input: not strict JSON (`invalid_json`), or a field or parameter out of its rules, or an "
         "`Idempotency-Key` header on an operation other than `submitTask` (`invalid_request`).",
    401: "No bearer token, an unknown or revoked one, or an Authorization header given twice "
         "(`unauthenticated`).",
    403: "The token's role or queues do not allow this (`forbidden`).",
    404: "No such resource, or one in a queue the token cannot see.",
    409: "The request conflicts with the resource's state (`not_retryable`, `instance_disconnected`, "
         "`setting_conflict`, ...).",
    408: "The body did not arrive within the server's body timeout (`request_timeout`); the connection is closed.",
    413: "The body is over 512 KiB (`request_too_large`) or the payload over 256 KiB (`payload_too_large`).",
    415: "The body is declared as something other than JSON, or in a charset other than UTF-8 (`unsupported_media_type`).",
    422: "A field out of its rule: of a schedule (`invalid_schedule`), or of the queue endpoints "
         "(`invalid_request`); `field` names it. Nothing was written.",
    501: "Not available in this version (`not_implemented`).",
    503: "The database is unavailable (`database_unavailable`), or, for an outcome wait, this process holds as "
         "many waits as it may (`too_many_waits`); retry after `Retry-After` seconds.",
}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _responses(ok: dict[int, tuple[str, str]], errors: tuple[int, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {str(code): _json(_ref(schema), text) for code, (schema, text) in ok.items()}
    for code in errors:
        out[str(code)] = {"$ref": f"#/components/responses/E{code}"}
    return out


_AUTH = (400, 401, 403, 503)
_TASK_ID_PARAM = {"name": "task_id", "in": "path", "required": True, "schema": TASK_ID}
_SETTING_PARAM = {"name": "name", "in": "path", "required": True, "schema": SETTING_NAME}
_QUEUE_PARAM = {"name": "queue", "in": "path", "required": True, "schema": NAME}
_WEIGHT_PARAM = {"name": "key", "in": "path", "required": True,
                 "schema": {"type": "string", "pattern": f"^{g.FAIRNESS_KEY_PATTERN}$"},
                 "description": "The fairness key, percent-encoded where it must be."}
_SECURED = [{"bearer": []}]


def _op(op_id: str, summary: str, description: str, responses: dict[str, Any], *, secured: bool = True,
        **more: Any) -> dict[str, Any]:
    op: dict[str, Any] = {"operationId": op_id, "summary": summary, "description": description,
                          "responses": responses}
    op["security"] = _SECURED if secured else []
    op.update(more)
    return op


PATHS: dict[str, Any] = {
    "/v1/tasks": {
        "post": _op(
            "submitTask", "Submit a task",
            "Producer (in its queues) or operator. The same fields as `pulse-trio submit`. A known "
            "idempotency key in the same queue returns the existing task with 200 and `created: false`.",
            _responses({201: ("Task", "Created."), 200: ("Task", "Already submitted with this idempotency key.")},
                       (*_AUTH, 408, 413, 415)),
            parameters=[{"name": "Idempotency-Key", "in": "header", "required": False,
                         "description": "The same as the `idempotency_key` field; given both, they must agree.",
                         "schema": {"type": "string", "minLength": 1, "maxLength": lim.MAX_IDEMPOTENCY_KEY_CHARS,
                                    "pattern": IDEMPOTENCY_HEADER_PATTERN}}],
            requestBody={"required": True, "content": {"application/json": {"schema": _ref("SubmitRequest")}}}),
        "get": _op(
            "listTasks", "List tasks",
            "Oldest first (or newest first), filtered; a queue-scoped token sees only its queues. The cursor is "
            "the last task id of the previous page (a keyset, not an offset): a page starts strictly past it, so "
            "tasks added while paging shift nothing and no task is shown twice.",
            _responses({200: ("TaskPage", "A page of tasks.")}, _AUTH),
            parameters=[
                {"name": "queue", "in": "query", "schema": NAME},
                {"name": "state", "in": "query", "schema": {"type": "string", "enum": TASK_STATES}},
                {"name": "kind", "in": "query", "schema": NAME},
                {"name": "idempotency_key", "in": "query", "schema": {"type": "string", "minLength": 1,
                                                                      "maxLength": lim.MAX_IDEMPOTENCY_KEY_CHARS},
                 "description": "The task submitted with this key (one per queue)."},
                {"name": "order", "in": "query", "schema": {"type": "string", "enum": ["oldest", "newest"],
                                                            "default": "oldest"}},
                {"name": "cursor", "in": "query", "schema": TASK_ID,
                 "description": "The `next` of the previous page, with the same filters and order."},
                {"name": "limit", "in": "query", "schema": ranges.LIST_LIMIT.schema()},
            ]),
    },
    "/v1/tasks/batch": {
        "post": _op(
            "submitTasks", "Submit several tasks at once",
            f"Producer (in its queues) or operator. 1-{ranges.MAX_BATCH} tasks, each with the fields of a single "
            "submit, in one transaction: all are submitted or none. A refused batch names each refused task in "
            "`error.items` (its index, code and field) and submits nothing: 403 `forbidden` if a task is in a "
            "queue the token may not use, else 400 `invalid_request`. Known idempotency keys answer their "
            "existing tasks (`created: false`); 200 when no task was new.",
            _responses({201: ("SubmitBatchResult", "Submitted, in the order given."),
                        200: ("SubmitBatchResult", "Every task existed already.")}, (*_AUTH, 408, 413, 415)),
            requestBody={"required": True, "content": {"application/json": {"schema": _ref("SubmitBatchRequest")}}}),
    },
    "/v1/tasks/{task_id}": {
        "get": _op("getTask", "Show a task",
                   "The task with its attempts, outcome, lineage (`retry_of`, `retried_by`) and cancel "
                   "request: what `pulse-trio task show` prints.",
                   _responses({200: ("Task", "The task.")}, (*_AUTH, 404)), parameters=[_TASK_ID_PARAM]),
    },
    "/v1/tasks/{task_id}/outcome": {
        "get": _op("awaitOutcome", "Wait for a task's outcome",
                   "Producer or operator. A long-poll: answers once the task is terminal (SUCCEEDED, FAILED, "
                   "UNKNOWN or CANCELLED; `done: true`), or when `wait` seconds have passed (`done: false`, the "
                   "task as it is then). The end of the task wakes the request, whichever serve process of the "
                   "cluster commits it. Wait longer by asking again.",
                   _responses({200: ("Task", "The task, with `done`.")}, (*_AUTH, 404)),
                   parameters=[_TASK_ID_PARAM,
                               {"name": "wait", "in": "query", "schema": ranges.WAIT.schema(
                                   "Seconds to wait for the end (0: answer at once).")}]),
    },
    "/v1/tasks/{task_id}/cancel": {
        "post": _op("cancelTask", "Request cancellation",
                    "Operator, or a producer granted `cancel` (its queues). Saves a cancel intent (a task not yet started is cancelled at once; a running "
                    "one is told and given the cancel grace). A terminal task is reported as it is, with "
                    "`cancel_changed: false`.",
                    _responses({200: ("Task", "The task after the request.")}, (*_AUTH, 404, 409, 408, 413, 415)),
                    parameters=[_TASK_ID_PARAM],
                    requestBody={"required": False,
                                 "content": {"application/json": {"schema": _ref("CancelRequest")}}}),
    },
    "/v1/tasks/{task_id}/retry": {
        "post": _op("retryTask", "Retry a terminal task by hand",
                    "Operator, or a producer granted `retry` (its queues). Creates a new task (`retry_of` = this one) from a FAILED, UNKNOWN or CANCELLED "
                    "task; asking again returns the same new task with 200.",
                    _responses({201: ("Task", "The new task."), 200: ("Task", "The retry made before.")},
                               (*_AUTH, 404, 409, 408, 413, 415)),
                    parameters=[_TASK_ID_PARAM]),
    },
    "/v1/workers": {
        "get": _op("listWorkers", "List worker instances",
                   "Operator. Instances with their session, capacity, drain and held leases.",
                   _responses({200: ("WorkerList", "The instances.")}, _AUTH),
                   parameters=[{"name": "all", "in": "query", "schema": {"type": "boolean", "default": False},
                                "description": "Include disconnected instances."}]),
    },
    "/v1/workers/{instance_id}/drain": {
        "post": _op("drainWorker", "Drain a worker instance",
                    "Operator. No new tasks go to this instance, whichever server holds its session; its "
                    "leases continue and may be renewed and finished. The drain lasts until the session ends: "
                    "a later `worker.capacity` with `drain: false` does not lift it. Draining twice is "
                    "harmless. 409 for a disconnected instance.",
                    _responses({200: ("Worker", "The drained instance.")}, (*_AUTH, 404, 409)),
                    parameters=[{"name": "instance_id", "in": "path", "required": True, "schema": INSTANCE_ID}]),
    },
    "/v1/nodes": {
        "get": _op("listNodes", "List server processes",
                   "Operator. The `pulse-trio serve` processes, newest first: ALIVE ones heartbeat, LOST ones "
                   "died (or were cut off) and had their sessions disconnected by another instance.",
                   _responses({200: ("NodeList", "The processes.")}, _AUTH),
                   parameters=[{"name": "all", "in": "query", "schema": {"type": "boolean", "default": False},
                                "description": "Include processes that stopped gracefully."}]),
    },
    "/v1/queues": {
        "get": _op("queueDepths", "Queue depths",
                   "Tasks per state per queue and the age of the oldest due READY task; a queue-scoped token "
                   "sees only its queues.",
                   _responses({200: ("QueueDepths", "Depths by queue.")}, _AUTH)),
    },
    "/v1/queues/{queue}/pause": {
        "post": _op("pauseQueue", "Pause a queue",
                    "Operator (a queue-scoped token: its queues). No serve process offers a task of this queue "
                    "from within half a second on; leases already out continue, renew and finish, and "
                    "submissions are still accepted. Pausing a paused queue changes nothing (`changed: false`). "
                    "No body, or `{}`.",
                    _responses({200: ("QueueState", "The queue, paused.")}, (*_AUTH, 422, 408, 413, 415)),
                    parameters=[_QUEUE_PARAM]),
    },
    "/v1/queues/{queue}/retention": {
        "put": _op("setQueueRetention", "Set a queue's own task retention",
                   "Operator (a queue-scoped token: its queues). Body `{\"value\": seconds}`: terminal tasks of this "
                   "queue are purged that long after they ended, instead of after the cluster's task_retention; "
                   "`{\"value\": null}`: the cluster's applies again. 422 naming `value` outside "
                   f"{cs.RETENTION_MIN_MS // 1000} to {cs.RETENTION_MAX_MS // 1000} seconds.",
                   _responses({200: ("QueueState", "The queue with its retention.")}, (*_AUTH, 422, 408, 413, 415)),
                   parameters=[_QUEUE_PARAM],
                   requestBody={"required": True,
                                "content": {"application/json": {"schema": _ref("RetentionChange")}}}),
    },
    "/v1/queues/{queue}/resume": {
        "post": _op("resumeQueue", "Resume a queue",
                    "Operator (a queue-scoped token: its queues). The queue's tasks are offered again. Resuming "
                    "an active queue changes nothing (`changed: false`). No body, or `{}`.",
                    _responses({200: ("QueueState", "The queue, active.")}, (*_AUTH, 422, 408, 413, 415)),
                    parameters=[_QUEUE_PARAM]),
    },
    "/v1/settings": {
        "get": _op("listSettings", "Cluster settings",
                   "Producer or operator. The settings every process of the cluster shares (what "
                   "`pulse-trio settings show` prints), by name.",
                   _responses({200: ("SettingMap", "Every cluster setting.")}, _AUTH)),
        "patch": _op("changeSettings", "Change several cluster settings at once",
                     "Operator without `--queue`. One transaction: node_heartbeat and node_lapse can change "
                     "together. Running instances apply the change within their refresh interval "
                     "(docs/operations.md).",
                     _responses({200: ("SettingMap", "Every cluster setting after the change.")},
                                (*_AUTH, 409, 408, 413, 415)),
                     requestBody={"required": True,
                                  "content": {"application/json": {"schema": _ref("SettingsChange")}}}),
    },
    "/v1/settings/{name}": {
        "get": _op("getSetting", "One cluster setting", "Producer or operator.",
                   _responses({200: ("Setting", "The setting.")}, (*_AUTH, 404)), parameters=[_SETTING_PARAM]),
        "put": _op("setSetting", "Change one cluster setting",
                   "Operator without `--queue`. 409 `setting_conflict` when node_lapse would be under twice "
                   "node_heartbeat.",
                   _responses({200: ("Setting", "The setting after the change.")}, (*_AUTH, 404, 409, 408, 413, 415)),
                   parameters=[_SETTING_PARAM],
                   requestBody={"required": True,
                                "content": {"application/json": {"schema": _ref("SettingChange")}}}),
    },
    "/v1/fairness-weights": {
        "get": _op("listFairnessWeights", "Fairness weights",
                   "Producer or operator. The fairness keys given a weight (what `pulse-trio settings weights` "
                   "prints); any other key weighs 1 (docs/priority-and-fairness.md §5).",
                   _responses({200: ("FairnessWeightMap", "The weights.")}, _AUTH)),
    },
    "/v1/fairness-weights/{key}": {
        "get": _op("getFairnessWeight", "One fairness key's weight", "Producer or operator. 1 if never set.",
                   _responses({200: ("FairnessWeight", "The weight.")}, (*_AUTH, 400)), parameters=[_WEIGHT_PARAM]),
        "put": _op("setFairnessWeight", "Give a fairness key a weight",
                   "Operator without `--queue`. Cluster-wide; the key's tasks placed after the change use it.",
                   _responses({200: ("FairnessWeight", "The weight after the change.")}, (*_AUTH, 400, 408, 413, 415)),
                   parameters=[_WEIGHT_PARAM],
                   requestBody={"required": True, "content": {"application/json": {"schema": _ref("WeightChange")}}}),
    },
    "/v1/whoami": {
        "get": _op("whoami", "The presented token",
                   "Producer or operator. The token's record and the actions its role may take (`may`), from the "
                   "table the API enforces: the dashboard shows only those.",
                   _responses({200: ("Whoami", "The token.")}, _AUTH)),
    },
    "/v1/overview": {
        "get": _op("overview", "Queue overview",
                   "Producer (its queues) or operator. Per queue: ACTIVE or PAUSED, tasks by state (each counted up "
                   "to `count_cap`), "
                   "the age of the oldest due READY task, tasks finished in the last `recent_s` seconds by "
                   "outcome, and per clock minute over the last hour, all read from the database.",
                   _responses({200: ("Overview", "The queues.")}, _AUTH)),
    },
    "/": {
        "get": _op("root", "Go to the dashboard", "Redirects to `/ui/`.",
                   {"302": {"description": "To `/ui/`."}}, secured=False),
    },
    "/ui/": {
        "get": _op("dashboard", "The dashboard",
                   "The web dashboard's page (docs/dashboard.md). It asks for a token and calls this API.",
                   {"200": {"description": "HTML.", "content": {"text/html": {"schema": {"type": "string"}}}}},
                   secured=False),
    },
    "/ui/{asset}": {
        "get": _op("dashboardAsset", "A file of the dashboard", "Its scripts, style sheet and icon.",
                   {"200": {"description": "The file."}, "404": {"$ref": "#/components/responses/E404"}},
                   secured=False,
                   parameters=[{"name": "asset", "in": "path", "required": True, "schema": {"type": "string"}}]),
    },
    "/healthz": {
        "get": _op("healthz", "Liveness", "The process answers.",
                   _responses({200: ("Health", "Alive.")}, ()), secured=False),
    },
    "/readyz": {
        "get": _op("readyz", "Readiness", "The database is reachable and its schema is this code's or a newer release's; "
                   "`settings_conflicts` lists this instance's cluster-setting flags that disagree with the cluster.",
                   _responses({200: ("Ready", "Ready.")}, (503,)), secured=False),
    },
    "/metrics": {
        "get": _op("metrics", "Prometheus metrics", "The Prometheus text exposition format.",
                   {"200": {"description": "Metrics.", "content": {"text/plain": {"schema": {"type": "string"}}}}},
                   secured=False),
    },
    "/openapi.json": {
        "get": _op("openapi", "This document", "The OpenAPI document of this API.",
                   {"200": {"description": "OpenAPI 3.1.", "content": {"application/json": {"schema": {}}}}},
                   secured=False),
    },
}


# -- recurring schedules (docs/operations.md §8) ---------------------------------------------------
_SCHEDULE_PARAM = {"name": "schedule", "in": "path", "required": True, "schema": {"type": "string"},
                   "description": "The schedule's id (`sch_…`), or the name of a live schedule."}
_MISSED = {"type": "string", "enum": list(timing_rules.MISSED_POLICIES)}
SCHEDULE_RULES = {
    "cron": {"type": "string", "maxLength": timing_rules.MAX_CRON_CHARS,
             "description": "Five fields (minute hour day-of-month month day-of-week), read in `timezone`; "
                            "the day fields also take `L`, `LW`, `5L` and `MON#2`. "
                            "Exactly one of cron and interval."},
    "interval": {"type": "integer", "minimum": timing_rules.MIN_INTERVAL_S, "maximum": timing_rules.MAX_INTERVAL_S,
                 "description": "Every this many seconds, counted from the Unix epoch in UTC."},
    "timezone": {"type": "string", "description": "An IANA time zone name (default UTC)."},
}
SCHEMAS.update({
    "ScheduleRequest": _obj({
        "name": NAME | {"description": "Unique among live schedules; may not start with `sch_`."},
        "queue": NAME, "kind": NAME,
        "payload": {"description": "Every task's input (any JSON, default `{}`), stored and delivered digit for "
                                   "digit."},
        "cron": _nullable(SCHEDULE_RULES["cron"]),
        "interval": _nullable(SCHEDULE_RULES["interval"]),
        "timezone": _nullable(SCHEDULE_RULES["timezone"] | {"default": "UTC"}),
        "missed": _nullable(_MISSED | {"default": "skip", "description": (
            "Ticks missed while no serve ran: `skip` fires only the current tick, `catch_up` up to "
            "`catch_up_limit` of the latest.")}),
        "catch_up_limit": _nullable({"type": "integer", "minimum": 1, "maximum": timing_rules.MAX_CATCH_UP,
                                     "default": timing_rules.DEFAULT_CATCH_UP,
                                     "description": "With missed=catch_up only."}),
        "priority": _nullable(ranges.PRIORITY.schema("Its tasks' priority.")),
        "max_attempts": _nullable(ranges.MAX_ATTEMPTS.schema("Its tasks' max attempts.")),
    }, ["name", "queue", "kind"]),
    "Schedule": _obj({
        "schedule_id": {"type": "string", "pattern": f"^sch_{g.ULID_PATTERN}$"},
        "name": NAME,
        "state": {"type": "string", "enum": [s for s in states.CHARTS["schedule"].spec.states if s != "NONE"]},
        "queue": NAME, "kind": NAME,
        "cron": _nullable(SCHEDULE_RULES["cron"]),
        "interval": _nullable(SCHEDULE_RULES["interval"]),
        "timezone": SCHEDULE_RULES["timezone"],
        "missed": _MISSED,
        "catch_up_limit": _nullable({"type": "integer", "minimum": 1}),
        "priority": {"type": "integer"},
        "max_attempts": {"type": "integer"},
        "next_fire_at": _nullable(TIME | {"description": "The next tick (ACTIVE only)."}),
        "last_tick_at": _nullable(TIME | {"description": "The latest tick fired."}),
        "last_task_id": _nullable(TASK_ID),
        "fired_ticks": {"type": "integer", "minimum": 0},
        "created_at": TIME, "created_by": {"type": "string"},
        "updated_at": TIME, "updated_by": {"type": "string"},
        "payload": {"description": "Every task's input, exactly as given."},
        "changed": {"type": "boolean", "description": "Pause, resume and delete only: whether this call "
                                                      "changed it."},
    }, ["schedule_id", "name", "state", "queue", "kind", "cron", "interval", "timezone", "missed",
        "catch_up_limit", "priority", "max_attempts", "next_fire_at", "last_tick_at", "last_task_id",
        "fired_ticks", "created_at", "created_by", "updated_at", "updated_by", "payload"]),
    "ScheduleList": _obj({"schedules": {"type": "array", "items": _ref("Schedule")}}),
})


def _schedule_change(op_id: str, summary: str, description: str) -> dict[str, Any]:
    return _op(op_id, summary, "Operator (a queue-scoped token: its queues' schedules). " + description,
               _responses({200: ("Schedule", "The schedule after it, with `changed`.")}, (*_AUTH, 404, 408, 413,
                                                                                            415)),
               parameters=[_SCHEDULE_PARAM])


PATHS.update({
    "/v1/schedules": {
        "get": _op("listSchedules", "List schedules",
                   "Producer or operator; a queue-scoped token sees only its queues' schedules. By name.",
                   _responses({200: ("ScheduleList", "The schedules.")}, _AUTH),
                   parameters=[{"name": "all", "in": "query", "schema": {"type": "boolean", "default": False},
                                "description": "Include deleted schedules."}]),
        "post": _op("createSchedule", "Create a recurring schedule",
                    "Operator (in its queues). Each due tick becomes exactly one task whose idempotency key is "
                    "`schedule:<schedule_id>:<tick>`, however many serve processes run. 422 names the field "
                    "out of its rule; 409 `schedule_exists` when a live schedule has the name.",
                    _responses({201: ("Schedule", "Created, ACTIVE.")}, (*_AUTH, 409, 408, 413, 415, 422)),
                    requestBody={"required": True,
                                 "content": {"application/json": {"schema": _ref("ScheduleRequest")}}}),
    },
    "/v1/schedules/{schedule}": {
        "get": _op("getSchedule", "Show a schedule", "Producer or operator. A deleted schedule by its id too.",
                   _responses({200: ("Schedule", "The schedule.")}, (*_AUTH, 404)), parameters=[_SCHEDULE_PARAM]),
        "delete": _schedule_change("deleteSchedule", "Delete a schedule",
                                   "It never fires again and its name is free; its tasks stay."),
    },
    "/v1/schedules/{schedule}/pause": {
        "post": _schedule_change("pauseSchedule", "Pause a schedule",
                                 "No tick fires while it is PAUSED; pausing twice changes nothing."),
    },
    "/v1/schedules/{schedule}/resume": {
        "post": _schedule_change("resumeSchedule", "Resume a schedule",
                                 "The next tick is the first after now; ticks that fell while paused are not "
                                 "fired."),
    },
})


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "pulse-trio HTTP API",
            "version": VERSION,
            "description": "Producers submit and read tasks; operators also cancel, retry, watch workers, "
                           "pause queues and change the cluster settings. "
                           "Bearer tokens come from `pulse-trio token create --role producer|operator`. Every "
                           "error is `{\"error\": {\"code\", \"message\"}}`.",
        },
        "paths": PATHS,
        "components": {
            "schemas": SCHEMAS,
            "responses": {f"E{code}": _json(_ref("Error"), text) for code, text in _ERRORS.items()},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "A producer or operator token (`pt_…`)."}},
        },
    }


def text() -> str:
    """The document as served and committed: indented JSON and a final newline."""
    return json.dumps(document(), ensure_ascii=False, indent=2) + "\n"


if __name__ == "__main__":
    sys.stdout.write(text())

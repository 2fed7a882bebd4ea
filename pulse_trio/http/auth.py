"""Bearer tokens on the HTTP API: who may do what.

======================  ==========================================
producer                submit, read tasks, schedules and queue
                        depths — only in the token's queues (none
                        listed: every queue); read the cluster
                        settings
operator                everything: cancel, retry, workers, drain
                        too; create and change schedules, pause and
                        resume queues and set their retention (in
                        its queues); change the cluster settings
                        (only a token without queues)
worker                  nothing here (the worker endpoint only)
======================  ==========================================

A token created with ``--queue`` is held to those queues whatever its
role, so an operator token can be scoped as well. A producer token created
with ``--allow cancel,retry`` may also take those actions (and only within
its queues): :func:`may` is the one place a role or a grant is judged.

No token, an unknown one or a revoked one is 401; a live token whose role
or queues do not allow the request is 403. A task in a queue the token
cannot see is reported as not found, and so is a worker instance that subscribes to
such a queue, so a token learns nothing about queues outside its scope but
the names of their schedules: names are one namespace for the cluster
(routes address a schedule by name), so creating one that another queue
uses is 409 ``schedule_exists`` (docs/http-api.md, Tokens and roles).
"""

from __future__ import annotations

from starlette.requests import Request

from pulse_trio import tokens
from pulse_trio.bearer import parse_bearer
from pulse_trio.http.errors import forbidden, unauthenticated

PRODUCER = "producer"
OPERATOR = "operator"
READERS = (PRODUCER, OPERATOR)

#: Every action of the API: the roles that may take it, and how a refusal names it. The handlers
#: and ``GET /v1/whoami`` (which tells the dashboard what to show) both read this one table.
PERMISSIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "submit": (READERS, "submit tasks"),
    "read": (READERS, "read tasks"),
    "list": (READERS, "list tasks"),
    "queues": (READERS, "read queue depths"),
    "overview": (READERS, "read the overview"),
    "cancel": ((OPERATOR,), "cancel tasks"),
    "retry": ((OPERATOR,), "retry tasks"),
    "workers": ((OPERATOR,), "list workers"),
    "drain": ((OPERATOR,), "drain workers"),
    "nodes": ((OPERATOR,), "list server processes"),
    "settings": (READERS, "read the cluster settings"),
    "configure": ((OPERATOR,), "change the cluster settings"),
    "pause": ((OPERATOR,), "pause or resume queues, or set a queue's retention"),
    "schedules": (READERS, "read schedules"),
    "schedule": ((OPERATOR,), "create, pause, resume or delete schedules"),
}


def bearer(request: Request) -> str | None:
    """The token of the request's one ``Authorization`` header (None: none or another scheme).

    Given twice it is 401, not read as its first value: the worker endpoint
    refuses it too, and a proxy in front may have judged the other one.
    """
    values = request.headers.getlist("authorization")
    if len(values) > 1:
        raise unauthenticated("the Authorization header is given twice; send one bearer token")
    return parse_bearer(values[0]) if values else None


def require_role(info: tokens.TokenInfo, roles: tuple[str, ...], action: str) -> None:
    if info.role not in roles:
        raise forbidden(f"a {info.role} token cannot {action}; that takes the {' or '.join(roles)} role")


#: Actions on what every queue shares: a token held to some queues (``--queue``) may not take them.
EVERY_QUEUE_ACTIONS = frozenset({"configure"})


def may(info: tokens.TokenInfo, action: str) -> bool:
    """Whether the token may take ``action`` (a key of ``PERMISSIONS``): by its role, or by a grant it was made with."""
    if action in EVERY_QUEUE_ACTIONS and info.queues:
        return False
    roles, _ = PERMISSIONS[action]
    return info.role in roles or (action in tokens.GRANTS and action in info.allow
                                  and info.role in tokens.GRANTABLE_ROLES)


def require(info: tokens.TokenInfo, action: str) -> None:
    """403 unless the token may take ``action`` (a key of ``PERMISSIONS``)."""
    if may(info, action):
        return
    roles, text = PERMISSIONS[action]
    if action in EVERY_QUEUE_ACTIONS and info.queues and info.role in roles:
        raise forbidden(f"a token with --queue cannot {text}: that applies to every queue, and takes "
                        f"a {' or '.join(roles)} token without --queue")
    grant = (f", or a {' or '.join(tokens.GRANTABLE_ROLES)} token created with --allow {action}"
             if action in tokens.GRANTS else "")
    raise forbidden(f"a {info.role} token cannot {text}; that takes the {' or '.join(roles)} role{grant}")


def allowed_actions(info: tokens.TokenInfo) -> list[str]:
    """The actions of ``PERMISSIONS`` this token may take, in table order."""
    return [action for action in PERMISSIONS if may(info, action)]


def require_queue(info: tokens.TokenInfo, queue: str) -> None:
    if not info.allows_queue(queue):
        raise forbidden(f"this token is not allowed queue {queue!r}")


def visible_queues(info: tokens.TokenInfo) -> tuple[str, ...] | None:
    """The queues the token may read; None: every queue."""
    return info.queues or None


__all__ = ["EVERY_QUEUE_ACTIONS", "OPERATOR", "PERMISSIONS", "PRODUCER", "READERS", "allowed_actions", "bearer", "may", "require",
           "require_queue", "require_role", "visible_queues"]

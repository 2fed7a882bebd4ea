"""Response headers that keep a browser from running, sniffing or framing anything.

The dashboard's pages get ``UI_POLICY``: scripts, styles, images and
requests only from this service, no inline script or style, no plugins,
no framing, and Trusted Types required, so even a stray ``innerHTML`` with
a string throws instead of parsing markup. Every other answer (JSON,
metrics) gets ``API_POLICY``, which allows nothing at all should a
browser be pointed at it. Every answer is ``nosniff``: a payload can never
be taken for a script or a page.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

UI_POLICY = "; ".join((
    "default-src 'self'", "script-src 'self'", "style-src 'self'", "img-src 'self'", "connect-src 'self'",
    "object-src 'none'", "base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'",
    "require-trusted-types-for 'script'", "trusted-types 'none'",
))
API_POLICY = "default-src 'none'; frame-ancestors 'none'"

_ALWAYS = (
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)
_CSP = b"content-security-policy"


class SecurityHeaders:
    """ASGI middleware: the headers above on every HTTP answer; a handler's own CSP wins."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {name.lower() for name, _ in headers}
                headers += [(name, value) for name, value in _ALWAYS if name not in names]
                if _CSP not in names:
                    headers.append((_CSP, API_POLICY.encode()))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)

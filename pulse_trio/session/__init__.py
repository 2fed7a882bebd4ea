"""The sans-IO session protocol: frames in, events and frames out."""

from pulse_trio.session.server import Close, Reject, Request, ServerSession

__all__ = ["Close", "Reject", "Request", "ServerSession"]

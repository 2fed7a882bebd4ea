"""The HTTP JSON API for producers and operators, health, metrics and OpenAPI.

``app`` builds the Starlette application, ``api`` and ``ops`` hold the
handlers, ``bodies`` reads requests as strictly as frames, ``auth`` says
which token may do what, ``errors`` shapes every failure, ``openapi`` is
the document, and ``server`` runs it all on hypercorn's Trio worker beside
the worker service (``HttpApi``, which ``pulse_trio.serve`` hands to it).

The API works through the producer client and the store, plus
:class:`~pulse_trio.live_instance.LiveInstance` for what only the running
instance can do; it never imports ``pulse_trio.server``.
"""

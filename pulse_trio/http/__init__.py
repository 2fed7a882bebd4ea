"""The HTTP JSON API for producers and operators, health, metrics and OpenAPI.

``app`` builds the Starlette application, ``api`` and ``ops`` hold the
handlers, ``bodies`` reads requests as strictly as frames, ``auth`` says
which token may do what, ``errors`` shapes every failure, ``openapi`` is
the document, and ``server`` runs it all on hypercorn's Trio worker inside
the service's nursery (``serve_http``, which ``serve()`` starts).
"""

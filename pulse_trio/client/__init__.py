"""The direct-database producer client: submit, get, cancel, retry and list tasks from Python.

:class:`DatabaseClient` (also importable as ``Client``, its earlier name)
talks to MySQL with the service's own transaction functions; it is what the
CLI and the HTTP API run on, and the way to enqueue inside your own
transaction (``submit(..., connection=conn)``). Applications that submit
and await outcomes without database credentials use :mod:`pulse_trio.producer`.
"""

from pulse_trio.client.producer import Client, ClientError, DatabaseClient, TaskNotFound

__all__ = ["Client", "ClientError", "DatabaseClient", "TaskNotFound"]

"""The producer client: submit, get, cancel, retry and list tasks from Python."""

from pulse_trio.client.producer import Client, ClientError, TaskNotFound

__all__ = ["Client", "ClientError", "TaskNotFound"]

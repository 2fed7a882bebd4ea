"""`pulse-trio serve` as a real process for server tests: start it, wait until it listens.

Tests import it by name (``import serve_process``): this folder is on the
``pythonpath`` of pyproject.toml.
"""

from __future__ import annotations

import os
import subprocess
import sys

import trio

from pulse_trio.cli.common import EXIT_CANNOT_LISTEN
from pulse_trio.ports import PORT_ATTEMPTS, free_port
from pulse_trio.serve_process import ServeExited


async def start_on_free_ports(db, *args: str, log=None,
                              env: dict[str, str] | None = None) -> tuple[trio.Process, int, int]:
    """:func:`start` on a worker port and an HTTP port chosen here: ``(process, worker_port, http_port)``.

    A chosen port can be taken by another socket before ``serve`` binds it; ``serve`` then exits
    with ``EXIT_CANNOT_LISTEN`` having recorded nothing, and it is started again on fresh ports.
    """
    for attempt in range(1, PORT_ATTEMPTS + 1):
        worker_port, http_port = free_port(), free_port()
        try:
            process = await start(db, worker_port, *args, http_port=http_port, log=log, env=env)
        except ServeExited as exited:
            if exited.returncode != EXIT_CANNOT_LISTEN or attempt == PORT_ATTEMPTS:
                raise
            continue
        return process, worker_port, http_port
    raise AssertionError("unreachable")


async def start_together(db, count: int, *args: str) -> list[tuple[trio.Process, int, int]]:
    """:func:`start_on_free_ports` ``count`` times at once (a start is mostly imports and waits, so theirs
    overlap); in the order asked for. If one fails, those already started are killed."""
    started: dict[int, tuple[trio.Process, int, int]] = {}

    async def one(index: int) -> None:
        started[index] = await start_on_free_ports(db, *args)

    try:
        async with trio.open_nursery() as nursery:
            for index in range(count):
                nursery.start_soon(one, index)
    except BaseException:
        for process, _, _ in started.values():
            if process.poll() is None:
                process.kill()
        raise
    return [started[index] for index in range(count)]


async def start(db, port: int, *args: str, http_port: int | None = None, log=None,
                env: dict[str, str] | None = None) -> trio.Process:
    """``pulse-trio serve`` on ``port`` against ``db``, once it accepts connections.

    With ``http_port`` the HTTP listener is waited for too (it opens after
    the worker endpoint). ``log``: an open file for its stderr (its log
    lines), else discarded; ``env``: variables added to this process's
    environment.
    """
    command = [sys.executable, "-m", "pulse_trio", "serve", "--database-url", db.url(redact=False),
               "--worker-listen", f"127.0.0.1:{port}", "--http-listen", f"127.0.0.1:{http_port or free_port()}",
               *args]
    ports = (port, http_port) if http_port else (port,)
    process = await trio.lowlevel.open_process(command, stdout=subprocess.DEVNULL,
                                               stderr=log if log is not None else subprocess.DEVNULL,
                                               env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    with trio.fail_after(30):
        for listening in ports:
            while True:
                if process.poll() is not None:
                    raise ServeExited(process.returncode)
                try:
                    stream = await trio.open_tcp_stream("127.0.0.1", listening)
                    await stream.aclose()
                    break
                except OSError:
                    await trio.sleep(0.05)
    return process

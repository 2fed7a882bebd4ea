"""`pulse-trio worker run MODULE:REGISTRY`: run a registry of handlers as a worker.

Progress goes to stderr, for people: the connection, each task started and
finished (with its result), reconnects and resumes, and a summary line of
counts while work is going on. SIGTERM, SIGINT or SIGHUP (a closed
terminal) drains (finish the running tasks, take no more, exit 0), and so
does an operator's drain of this worker; a second signal stops at once.

``--backend`` picks the event loop the handlers run on: asyncio (the
default, what most handler libraries need; ``--uvloop`` for uvloop's
loop) or trio.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import logging
import os
import ssl
import sys
from pathlib import Path
from typing import Any

from pulse_trio.cli.common import fail, run_guarded
from pulse_trio.contract.limits import MAX_CAPACITY

PROGRESS_INTERVAL_S = 10.0
BACKENDS = ("asyncio", "trio")


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("worker", help="run task handlers written with the Python SDK")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    run = actions.add_parser("run", help="connect, run tasks until SIGTERM/SIGINT/SIGHUP, then drain and exit",
                             description="Run the handlers of a pulse_trio.sdk.Registry. MODULE is imported "
                                         "with the current folder on sys.path (or give a path to a .py file).")
    run.add_argument("target", metavar="MODULE:REGISTRY", help="e.g. examples.billing_worker:registry")
    run.add_argument("--url", default=os.environ.get("PULSE_WORKER_URL") or None,
                     help="ws:// or wss:// endpoint; several, comma-separated, are tried in turn on each "
                          "reconnect [env PULSE_WORKER_URL; default ws://127.0.0.1:7380/v1/worker]")
    run.add_argument("--token", default=os.environ.get("PULSE_WORKER_TOKEN") or None,
                     help="worker bearer token (pulse-trio token create --role worker) [env PULSE_WORKER_TOKEN]")
    run.add_argument("--capacity", type=_capacity, default=os.environ.get("PULSE_WORKER_CAPACITY") or "1",
                     help="tasks run at once (default 1) [env PULSE_WORKER_CAPACITY]")
    run.add_argument("--name", default=os.environ.get("PULSE_WORKER_NAME") or None,
                     help="worker name shown to operators (default host-pid) [env PULSE_WORKER_NAME]")
    run.add_argument("--concurrency-keys", action="store_true",
                     help="accept tasks that carry a concurrency key (pass concurrency_token downstream)")
    run.add_argument("--no-cancel-notifications", dest="cancel_notifications", action="store_false",
                     help="learn of cancellations only from renewals, not task.cancel pushes")
    run.add_argument("--ca-file", type=Path, help="PEM CA bundle to verify a wss:// server with")
    run.add_argument("--strict", action="store_true", help="also refuse unknown fields in server frames")
    run.add_argument("--quiet", action="store_true", help="only warnings and errors on stderr")
    run.add_argument("--drain-check", type=_seconds, default=None, metavar="SECONDS",
                     help="how often to ask whether an operator drained this worker (default 10)")
    run.add_argument("--backend", choices=BACKENDS, default=os.environ.get("PULSE_WORKER_BACKEND") or "asyncio",
                     help="event loop the handlers run on: asyncio (default; what asyncpg, httpx, aiobotocore "
                          "... need) or trio [env PULSE_WORKER_BACKEND]")
    run.add_argument("--uvloop", action="store_true", help="with --backend asyncio: run on uvloop's event loop")
    run.set_defaults(run=run_guarded(_run, long_running=True))


def _capacity(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 1 <= value <= MAX_CAPACITY:
        raise argparse.ArgumentTypeError(f"capacity must be 1..{MAX_CAPACITY}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0.05 <= value <= 3600:
        raise argparse.ArgumentTypeError("must be 0.05..3600 seconds")
    return value


def load_registry(target: str) -> Any:
    """Import ``module:attribute`` (or ``path/to/file.py:attribute``) and return the Registry.

    Whatever goes wrong in the user's module is one line and exit 2: the
    worker cannot start until the module is fixed, so a service manager
    must not restart it (docs/operations.md §7.1).
    """
    from pulse_trio.sdk import Registry

    module_name, sep, attribute = target.rpartition(":")
    if not sep or not module_name or not attribute:
        fail(f"expected MODULE:REGISTRY, got {target!r}", 2)
    module = _import(module_name)
    registry = getattr(module, attribute, None)
    if callable(registry) and not isinstance(registry, Registry):
        registry = _call_factory(target, registry)
    if not isinstance(registry, Registry):
        fail(f"{target} is not a pulse_trio.sdk.Registry", 2)
    if not len(registry):
        fail(f"{target} has no handlers", 2)
    return registry


def _import(module_name: str) -> Any:
    """The module, run as Python runs it; anything its top level raises ends the command."""
    try:
        if module_name.endswith(".py"):
            path = Path(module_name).resolve()
            spec = importlib.util.spec_from_file_location(path.stem, path)
            if spec is None or spec.loader is None:
                fail(f"cannot load {module_name}", 2)
            module = importlib.util.module_from_spec(spec)
            sys.modules[path.stem] = module
            spec.loader.exec_module(module)
            return module
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        return importlib.import_module(module_name)
    except SyntaxError as exc:  # IndentationError too: where it is matters more than the type
        fail(f"cannot import {module_name}: {type(exc).__name__} in {exc.filename}, line {exc.lineno}: "
             f"{_one_line(exc.msg)}", 2)
    except (ImportError, OSError) as exc:
        fail(f"cannot import {module_name}: {_one_line(str(exc))}", 2)
    except (Exception, SystemExit) as exc:  # whatever its top level raised: a missing setting, or sys.exit() over one
        fail(f"cannot import {module_name}: it raised {type(exc).__name__}: {_one_line(str(exc))}", 2)


def _call_factory(target: str, factory: Any) -> Any:
    """What a function named by the target returns, if it takes no arguments (else it is no factory)."""
    try:
        inspect.signature(factory).bind()
    except TypeError:
        fail(f"{target} is neither a pulse_trio.sdk.Registry nor a function of no arguments returning one", 2)
    except ValueError:  # no signature to read (some built-ins): calling it says
        pass
    try:
        return factory()
    except (Exception, SystemExit) as exc:  # a sys.exit() in it is a bad argument too, not its own exit code
        fail(f"{target} raised {type(exc).__name__}: {_one_line(str(exc))}", 2)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _say(text: str) -> None:
    """One line for people on stderr; none when stderr is gone.

    A terminal that closed under the worker (its SIGHUP drains it) leaves
    stderr failing with EIO, a reader that went away with EPIPE: the drain
    must go on all the same, its running tasks finish and report.
    """
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except OSError:
        pass


def _log_to_stderr(quiet: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("pulse-trio worker: %(message)s"))
    sdk = logging.getLogger("pulse_trio.sdk")
    sdk.addHandler(handler)
    sdk.setLevel(logging.WARNING if quiet else logging.INFO)
    sdk.propagate = False


def _run(args: argparse.Namespace) -> int:
    import anyio

    from pulse_trio import sd_notify
    from pulse_trio.contract.credentials import check_token
    from pulse_trio.contract.errors import InvalidMessage
    from pulse_trio.sdk import DEFAULT_URL, Worker, WorkerRefused
    from pulse_trio.sdk.endpoint import check_url
    from pulse_trio.sdk.worker import DRAIN_CHECK_S
    from pulse_trio.watchdog import dump_stacks_when_killed, keep_alive

    if not args.token:
        fail("a worker token is required: --token or PULSE_WORKER_TOKEN", 2)
    try:
        check_token(args.token, "worker")
    except ValueError as exc:
        fail(f"{exc}: --token or PULSE_WORKER_TOKEN", 2)
    url = args.url or DEFAULT_URL
    urls = [u.strip() for u in url.split(",")]
    for one in urls:
        try:
            check_url(one)
        except ValueError as exc:
            fail(f"--url: {exc}", 2)
    if args.backend not in BACKENDS:
        fail(f"--backend is one of {', '.join(BACKENDS)}, got {args.backend!r}", 2)
    options: dict[str, Any] = {}
    if args.uvloop:
        if args.backend != "asyncio":
            fail("--uvloop goes with --backend asyncio", 2)
        if importlib.util.find_spec("uvloop") is None:
            fail("--uvloop needs the uvloop package: pip install uvloop", 2)
        options["use_uvloop"] = True
    registry = load_registry(args.target)
    try:
        context = ssl.create_default_context(cafile=str(args.ca_file)) if args.ca_file else None
    except (OSError, ssl.SSLError) as exc:  # missing, unreadable, or no certificate in it
        fail(f"--ca-file {args.ca_file}: {exc.strerror or exc}", 2)
    _log_to_stderr(args.quiet)
    try:
        worker = Worker(urls, args.token, registry, capacity=args.capacity, name=args.name,
                        concurrency_keys=args.concurrency_keys, cancellation_notifications=args.cancel_notifications,
                        ssl_context=context, strict=args.strict, drain_check=args.drain_check or DRAIN_CHECK_S)
    except InvalidMessage as exc:  # the hello it would send breaks the contract (a --name too long, say)
        fail(f"--name: {exc}", 2)
    except ValueError as exc:  # what the flags checked above leave to the Worker (a --ca-file with a ws:// URL)
        fail(str(exc), 2)
    kinds = ", ".join(f"{h.queue}/{h.kind}" for h in registry)
    _say(f"pulse-trio worker: {len(registry)} handler(s): {kinds}; capacity {args.capacity}; "
         f"connecting to {url} ({args.backend}{' with uvloop' if args.uvloop else ''})\n")

    watchdog_s = sd_notify.watchdog_interval()

    async def ready() -> None:
        """Connected and registered: systemd (``Type=notify``) may count the unit as started; from then on,
        under ``WatchdogSec=``, the loop's pings (a handler that holds the loop holds them too)."""
        await worker.wait_connected()
        sd_notify.notify("READY=1", f"STATUS=connected to {url}; capacity {args.capacity}")
        if watchdog_s is not None:
            dump_stacks_when_killed()
            await keep_alive(watchdog_s)

    async def main() -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_progress, worker)
            tasks.start_soon(ready)
            await worker.run(handle_signals=True)
            tasks.cancel_scope.cancel()

    try:
        anyio.run(main, backend=args.backend, backend_options=options)
    except* WorkerRefused as group:  # delivered inside the task groups' ExceptionGroups
        fail(describe_refusal(_first(group), url))
    stats = worker.stats
    _say(f"pulse-trio worker: stopped: {stats.started} started, {stats.succeeded} succeeded, "
         f"{stats.failed} failed, {stats.unknown} unknown, {stats.cancelled} cancelled, "
         f"{stats.lost} lost, {stats.unsettled} outcome unknown to this worker"
         f"{'; drained by an operator' if worker.drained_by_operator else ''}\n")
    return 130 if worker.stopped else 0


def _first(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):  # one level per nursery
        error = error.exceptions[0]
    return error


def describe_refusal(exc: Any, url: str) -> str:
    """One line naming why the service refused, from what it said (status or code, and its words)."""
    from pulse_trio.sdk.refusal import Fault, of_refused

    status, code, detail = getattr(exc, "status", None), getattr(exc, "code", None), getattr(exc, "detail", "")
    if status is not None and of_refused(exc) is Fault.TOKEN:
        return (f"{url} refused the worker token (HTTP {status}): it is unknown, revoked or not a worker token; "
                "see `pulse-trio token list`, create one with `pulse-trio token create --role worker`")
    if status is not None and not detail:
        return (f"{url} refused the WebSocket handshake with HTTP {status} and no reason: it is not a "
                f"pulse-trio worker endpoint (the HTTP API port?); workers connect to serve's "
                f"--worker-listen address, by default {_default_url()}")
    if status == 404:
        return f"no worker endpoint at {url} (HTTP 404): {detail}"
    if status is not None:
        return f"{url} refused the WebSocket handshake (HTTP {status}): {detail}"
    if code is not None:
        return f"the service refused this worker ({code}): {detail or code}"
    return str(exc)


def _default_url() -> str:
    from pulse_trio.sdk import DEFAULT_URL

    return DEFAULT_URL


async def _progress(worker: Any) -> None:
    """A counts line every PROGRESS_INTERVAL_S while something changed or runs."""
    import anyio

    last = None
    while True:
        await anyio.sleep(PROGRESS_INTERVAL_S)
        s = worker.stats
        now = (s.started, s.finished, s.running, s.lost, s.connects, s.unsettled)
        if now != last and (s.running or now[:2] != (last or (0, 0))[:2]):
            state = "connected" if worker.connected else "reconnecting"
            _say(f"pulse-trio worker: {state}; {s.running} running, {s.started} started, "
                 f"{s.succeeded} succeeded, {s.failed} failed, {s.unknown} unknown, "
                 f"{s.cancelled} cancelled, {s.lost} lost, {s.unsettled} outcome unknown\n")
        last = now

"""How ``pulse-trio`` starts a Python process of its own: on this process's code, whatever the working directory holds.

``python -m`` puts the working directory first on ``sys.path``, so a
``pulse_trio`` folder there (a checkout of another version, anyone's file
in a shared directory such as /tmp) would be what the child imports and
runs, with this process's rights and its database password in its
environment. A child therefore starts with ``-P`` (no such entry), and
with the folder this package was imported from first on ``PYTHONPATH``
unless it is one the interpreter searches by itself (site-packages): a
source checkout, run from its folder or through ``PYTHONPATH``, is what
its children run too.
"""

from __future__ import annotations

import ctypes
import os
import signal
import site
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

#: The folder ``pulse_trio`` was imported from.
PACKAGE_ROOT = Path(__file__).resolve().parent.parent
#: prctl(2)'s option that names the signal a child gets when its parent ends (Linux).
_PR_SET_PDEATHSIG = 1


def python_command(module: str, *args: str) -> list[str]:
    """``python -m module args``, with no working directory on the child's ``sys.path``."""
    return [sys.executable, "-P", "-m", module, *args]


def child_environment(base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """``base`` (this process's environment) and ``extra``, with this package's folder first on ``PYTHONPATH``."""
    environment = dict(os.environ if base is None else base, **extra)
    if PACKAGE_ROOT not in _site_folders():
        environment["PYTHONPATH"] = os.pathsep.join(
            [str(PACKAGE_ROOT), *filter(None, [environment.get("PYTHONPATH")])])
    return environment


def _site_folders() -> set[Path]:
    return {Path(folder).resolve() for folder in [*site.getsitepackages(), site.getusersitepackages()]}


def killed_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the child SIGKILLed when the thread that started it ends; None where unsupported.

    A test run killed by SIGKILL or SIGTERM (a CI job's time limit) runs no
    cleanup: the throwaway ``serve`` and ``mariadbd`` it started would run
    for ever. Linux's ``PR_SET_PDEATHSIG`` ends them with it, whatever kills
    it. It fires when the starting *thread* ends, so only a child started
    from a thread that lives as long as it should (the main one) may use it.
    """
    prctl = getattr(_libc(), "prctl", None)
    if prctl is None:
        return None
    parent = os.getpid()

    def arm() -> None:  # in the child, between fork and exec: nothing that takes a lock
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent ended before the signal was armed
            os.kill(os.getpid(), signal.SIGKILL)
    return arm


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None

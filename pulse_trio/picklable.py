"""Errors that cross a process boundary as themselves.

Python pickles an exception as its class called again with its ``args``.
An error whose constructor takes other arguments than the message it keeps
in ``args`` (a code, a status, a task view) then fails to unpickle, and a
``ProcessPoolExecutor`` turns that failure into ``BrokenProcessPool``.
:class:`ByFields` pickles the error by what it holds instead: its ``args``
and its attributes, without calling the constructor again.
"""

from __future__ import annotations

from typing import Any


class ByFields(BaseException):
    """Mixed into an error whose constructor does not take its own ``args``: it unpickles field for field."""

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuilt, (type(self), self.args, self.__dict__)


def _rebuilt(cls: type[BaseException], args: tuple[Any, ...], fields: dict[str, Any]) -> BaseException:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(fields)
    return error

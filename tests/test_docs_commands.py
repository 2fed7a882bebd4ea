"""The README's list of `pulse-trio` commands is the command's own.

The README says ``pulse-trio --help`` lists every command and names them:
``task list|show|cancel|retry`` spells out a group's actions, ``workers
[drain]`` a command that is also a group, and a bare group name
(``schedules``) stands for all of its actions. A command added to the CLI
and not to the list, or an action listed that the CLI lacks, fails here.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from pulse_trio.cli import build_parser

README = Path(__file__).resolve().parents[1] / "README.md"
LIST = re.compile(r"`pulse-trio --help` lists every command \((?P<items>[^)]*)\)")


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _listed() -> dict[str, set[str] | None]:
    """Each command the README names: the actions it spells out, or None for the whole group."""
    match = LIST.search(re.sub(r"\s+", " ", README.read_text("utf-8")))
    assert match, "README.md no longer says which commands `pulse-trio --help` lists"
    listed: dict[str, set[str] | None] = {}
    for item in re.findall(r"`([^`]+)`", match.group("items")):
        name, _, rest = item.partition(" ")
        listed[name] = set(rest.strip("[]").split("|")) if rest else None
    return listed


def test_the_readme_names_every_command_and_only_those():
    commands = _actions(build_parser())
    listed = _listed()
    assert sorted(set(commands) - set(listed)) == [], "commands the README's list leaves out"
    assert sorted(set(listed) - set(commands)) == [], "commands the README lists that pulse-trio lacks"
    for name, actions in listed.items():
        if actions is not None:
            assert actions == set(_actions(commands[name])), f"README lists {name} {sorted(actions)}"

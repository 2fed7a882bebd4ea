"""Conventions every `pulse-trio` command keeps (docs/operations.md §7).

Every flag says what it does and --help shows its default; each command
takes only the flags it uses.
"""

from __future__ import annotations

import argparse
import gc

import pytest
from cli_support import run

from pulse_trio.cli import build_parser
from pulse_trio.cli.common import (EXIT_USAGE, YOUNG_GENERATION_THRESHOLD, CliParser, CommandFailed, run_guarded,
                                   tuned_collector)


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """Every parser in the tree with its command path (`task list`, `bench latency`, …)."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


def _flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {action.option_strings[-1] if action.option_strings else action.dest: action
            for action in parser._actions
            if not isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction))}


def test_every_flag_of_every_command_has_help_text():
    commands = list(_commands(build_parser()))
    assert len(commands) > 15
    missing = [f"{' '.join(path)} {flag}" for path, parser in commands for flag, action in _flags(parser).items()
               if not action.help or action.help is argparse.SUPPRESS or action.help.startswith("[env")]
    assert missing == []


def test_help_shows_defaults():
    commands = dict(_commands(build_parser()))
    assert all(isinstance(parser, CliParser) for parser in commands.values())
    text = commands[("serve",)].format_help()
    assert "(default: 127.0.0.1:7380)" in text and "(default: json)" in text and "(default: 0.05)" in text
    text = commands[("task", "list")].format_help()
    assert "(default: 100)" in text and "(default: oldest)" in text


def test_no_switch_shows_a_default_that_reads_as_if_it_were_on():
    """``--no-cancel-notifications (default: True)`` said the opposite of what the switch does when absent."""
    shown = [f"{' '.join(path)} {flag}" for path, parser in _commands(build_parser())
             for flag, action in _flags(parser).items()
             if action.nargs == 0 and "(default:" in (parser._get_formatter()._get_help_string(action) or "")]
    assert shown == []


def test_commands_take_only_the_flags_they_use():
    commands = dict(_commands(build_parser()))
    read_only = [("queues",), ("workers",), ("nodes",), ("task", "show"), ("task", "list"), ("settings", "show"),
                 ("token", "list"), ("task", "retry"), ("workers", "drain")]
    for path in read_only:
        flags = set(_flags(commands[path]))
        assert not flags & {"--cancel-grace", "--priority-step", "--lease-ttl", "--worker-listen"}, path
    assert "--cancel-grace" in _flags(commands[("task", "cancel")])  # deprecated there, and only there
    assert "--priority-step" in _flags(commands[("submit",)])
    for path in [("queues",), ("workers",), ("nodes",), ("task", "list"), ("settings", "show")]:
        assert "--format" in _flags(commands[path]), path
    assert "--format" not in _flags(commands[("task", "show")])


@pytest.mark.parametrize(("args", "line"), [
    (["submit", "--queue", "q", "--kind", "k", "--delay", "xyz"],
     "pulse-trio submit: error: argument --delay: delay must be a number: 0..315360000 seconds"),
    (["submit", "--queue", "q"], "pulse-trio submit: error: the following arguments are required: --kind"),
    (["task", "list", "--limit", "0"], None),
    (["task", "list", "--order", "sideways"], None),
    (["task"], "pulse-trio task: error: the following arguments are required: ACTION"),
    (["queues", "--no-such-flag"], "pulse-trio: error: unrecognized arguments: --no-such-flag"),
    (["no-such-command"], None),
])
def test_a_bad_argument_is_one_line_and_exit_2(args, line):
    """docs/operations.md §7.1: a failure is one line on stderr, never a page of usage."""
    done = run(*args)
    assert done.returncode == EXIT_USAGE and done.stdout == "", done
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("pulse-trio"), done.stderr
    assert ": error: " in done.stderr, done.stderr
    if line is not None:
        assert done.stderr == line + "\n"


def test_help_still_prints_the_usage():
    done = run("submit", "--help")
    assert done.returncode == 0 and done.stdout.startswith("usage: pulse-trio submit") and "--delay" in done.stdout


def test_only_the_service_commands_tune_the_collector():
    """`serve` and `worker run` run for days: they collect the young generation less often; one-shot commands don't."""
    tuned = {path for path, parser in _commands(build_parser())
             if getattr(parser.get_default("run"), "long_running", False)}
    assert tuned == {("serve",), ("worker", "run")}


@pytest.fixture
def collector_thresholds():
    saved, enabled = gc.get_threshold(), gc.isenabled()
    yield saved
    gc.set_threshold(*saved)
    (gc.enable if enabled else gc.disable)()


def test_a_long_running_command_runs_with_the_collector_tuned_and_leaves_it_as_found(collector_thresholds):
    gc.set_threshold(700, 10, 10)
    seen = []
    assert run_guarded(lambda args: seen.append(gc.get_threshold()), long_running=True)(argparse.Namespace()) == 0
    assert seen == [(YOUNG_GENERATION_THRESHOLD, 10, 10)]
    assert gc.get_threshold() == (700, 10, 10)

    def refused(args):
        seen.append(gc.get_threshold())
        raise CommandFailed("no", EXIT_USAGE)

    assert run_guarded(refused, long_running=True)(argparse.Namespace()) == EXIT_USAGE
    assert seen[-1] == (YOUNG_GENERATION_THRESHOLD, 10, 10) and gc.get_threshold() == (700, 10, 10)
    run_guarded(lambda args: seen.append(gc.get_threshold()))(argparse.Namespace())
    assert seen[-1] == (700, 10, 10)


def test_tuning_never_lowers_a_threshold_nor_enables_a_disabled_collector(collector_thresholds):
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD * 5, 3, 4)
    gc.disable()
    with tuned_collector():
        assert gc.get_threshold() == (YOUNG_GENERATION_THRESHOLD * 5, 3, 4)
        assert not gc.isenabled()

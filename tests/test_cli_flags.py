"""The command line's flags for settings are generated from the settings' fields: a flag named
as a setting of FlowSettings, TaskSettings or a task's settings takes that field's type, help text
and default (or the command's own, said as "here"), so the CLI and the API cannot drift."""
from __future__ import annotations

import argparse

import pytest

from autoprune.cli.main import build_parser
from autoprune.flow.config import FlowSettings, TaskSettings, flat_fields
from autoprune.tasks import TASKS

TYPES = {"int": int, "float": float, "str": str}
FIELDS = {s.name: s for cls in (FlowSettings, TaskSettings,
                                 TASKS["classification"].settings_class())
          for s in flat_fields(cls)}


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


@pytest.mark.parametrize("command", ["demo", "sensitivity", "prune", "report"])
def test_setting_flags_come_from_the_fields(command):
    generated = 0
    for action in _commands()[command]._actions:
        field = FIELDS.get(action.dest)
        if field is None or not action.help or action.help == argparse.SUPPRESS or \
                action.dest in ("output", "data"):
            continue
        kind = field.metadata.get("kind")
        if kind not in TYPES:
            continue
        generated += 1
        assert action.help.startswith(field.metadata["help"]), (command, action.dest)
        assert action.type is TYPES[kind], (command, action.dest)
        if "(here: " not in action.help:
            assert action.default == field.default, (command, action.dest)
    assert generated >= 3, command


def test_every_timing_field_is_a_flag_of_sensitivity_and_prune():
    timing = [s for s in flat_fields(FlowSettings) if s.group == "latency"]
    for command in ("sensitivity", "prune"):
        flags = {a.dest: a for a in _commands()[command]._actions}
        for s in timing:
            assert s.name in flags and flags[s.name].default == s.default, (command, s.name)


def test_a_former_spelling_still_works_but_is_not_shown():
    parser = build_parser()
    args = parser.parse_args(["demo", "--train-images", "50", "--size", "40"])
    assert args.train_limit == 50 and args.input_size == 40
    assert "--train-images" not in _commands()["demo"].format_help()

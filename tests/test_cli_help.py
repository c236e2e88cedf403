"""The CLI explains itself without loading the heavy libraries: --help, --version and each
subcommand's --help import neither torch nor a model library; `train --help` lists every task's
keys with their defaults."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from autoprune.cli import main
from autoprune.cli.main import build_parser
from autoprune.tasks import TASKS

HEAVY = ("torch", "torch_pruning", "timm", "ultralytics", "segmentation_models_pytorch")
PROBE = """
import json, sys
from autoprune.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(m for m in {heavy} if m in sys.modules)), file=sys.stderr)
"""


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["prune", "--help"],
                                  ["export", "--help"], ["profiles", "--help"]])
def test_help_and_version_load_no_heavy_library(argv):
    done = subprocess.run([sys.executable, "-c", PROBE.format(heavy=HEAVY), *argv],
                          capture_output=True, text=True, timeout=120)
    assert json.loads(done.stderr.strip().splitlines()[-1]) == [], done.stderr
    assert "usage: autoprune" in done.stdout or "autoprune 0." in done.stdout


def test_train_help_lists_each_task_keys_and_an_example(capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    for name, task in TASKS.items():
        assert f"task: {name}   e.g. task: {name}, {task.config_example}" in out
    assert "epochs=10" in out and "eval_metric_loss=None" in out and "lr=None (float)" in out
    assert "flow defaults: epochs=100" in out  # detection's own default
    assert "imgsz" not in out  # deprecated spellings are not advertised


# (command, old spelling, new spelling, value): the old spellings still parse, hidden from --help
RENAMED = [("demo", "--size", "--input-size", "48"),
           ("demo", "--train-images", "--train-limit", "64"),
           ("demo", "--val-images", "--eval-limit", "32"),
           ("sensitivity", "--limit", "--eval-limit", "40"),
           ("report", "--limit", "--eval-limit", "8"),
           ("export", "--size", "--input-size", "96"),
           ("export", "--opset", "--opset-version", "13"),
           ("profiles", "--size", "--input-size", "64"),
           ("profiles", "--batch", "--batch-size", "8")]
POSITIONALS = {"sensitivity": ["ckpt.pt", "data", "sens.json"], "report": ["a.pt", "b.pt", "data"],
               "export": ["a.pt", "a.onnx"], "profiles": ["build"], "demo": []}


def _subparser(command: str):
    import argparse
    subs = next(a for a in build_parser()._actions
                if isinstance(a, argparse._SubParsersAction))
    return subs.choices[command]


@pytest.mark.parametrize("command,old,new,value", RENAMED)
def test_old_flag_spellings_parse_like_the_api_names_and_are_hidden(command, old, new, value,
                                                                    capsys):
    parser = build_parser()
    with_new = parser.parse_args([command, *POSITIONALS[command], new, value])
    with_old = parser.parse_args([command, *POSITIONALS[command], old, value])
    dest = new[2:].replace("-", "_")
    assert getattr(with_new, dest) == getattr(with_old, dest) == int(value)
    assert vars(with_new) == vars(with_old)
    default = parser.parse_args([command, *POSITIONALS[command]])
    assert getattr(default, dest) != int(value)  # the alias has no default of its own
    with pytest.raises(SystemExit):
        parser.parse_args([command, "--help"])
    shown = capsys.readouterr().out
    assert new in shown and not re.search(re.escape(old) + r"(?![\w-])", shown)


# what each command calls: its options are named as those arguments (plus CLI-only switches)
CLI_ONLY = {"help", "version", "static", "overwrite", "task", "arch", "latency", "out",
            "skip_existing", "all", "strict", "quiet", "allow_pickle", "output", "no_check",
            "int8"}


def _api_names(command: str) -> set[str]:
    import inspect
    from autoprune.cli import demo
    from autoprune.flow import checkpoints, options
    from autoprune.profiles import build
    from autoprune.tasks.classification import api as cls
    calls = {"demo": [demo.run_demo, cls.train],
             "sensitivity": [cls.analyze_sensitivity],
             "prune": [checkpoints.prune_checkpoint],
             "export": [checkpoints.export_checkpoint, checkpoints.check_onnx,
                        checkpoints.export_int8],
             "report": [checkpoints.compare_checkpoints], "profiles": [build.build_profile]}
    names = {n for fn in calls[command] for n in inspect.signature(fn).parameters}
    # the keywords a function takes by name through **: train()'s latency_* names of
    # prune_checkpoint, build_profile's recipe, the sensitivity options
    from dataclasses import fields

    from autoprune.flow.precision import Int8Settings

    by_name = {"sensitivity": options.sensitivity_option_names(),
               "prune": checkpoints.LATENCY_NAMES,
               "profiles": build.SETTINGS,
               "report": [f.name for f in fields(Int8Settings)]}  # compare_checkpoints(int8=)
    return names | set(by_name.get(command, ()))


@pytest.mark.parametrize("command", ["demo", "sensitivity", "prune", "export", "report",
                                     "profiles"])
def test_option_names_are_the_api_argument_names(command):
    for action in _subparser(command)._actions:
        if not action.option_strings or action.help == "==SUPPRESS==":
            continue
        assert action.dest in _api_names(command) | CLI_ONLY, (command, action.option_strings)
        assert f"--{action.dest.replace('_', '-')}" in action.option_strings

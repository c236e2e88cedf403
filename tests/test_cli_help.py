"""The CLI explains itself without loading the heavy libraries: --help, --version and each
subcommand's --help import neither torch nor a model library; `train --help` lists every task's
keys with their defaults."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from autoprune.cli import main
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
    assert "epochs=10" in out and "eval_metric_loss=None" in out and "lr=0.05" in out
    assert "imgsz" not in out  # deprecated spellings are not advertised

"""SIGKILL in the middle of a sensitivity analysis leaves a valid file; a rerun finishes it and
gives the same result as an uninterrupted run."""
import json
import os
import random
import signal
import time
from pathlib import Path

import autoprune

from conftest import forked_process

TOTAL = 9


def _analysis(path: str, delay: float) -> None:
    """The analysis a killed process runs (a process forked from the fork server)."""
    import time

    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).eval()
    x = torch.randn(2, 3, 32, 32)
    ref = model(x).detach()

    def eval_fn(m):
        time.sleep(delay)
        return float(torch.nn.functional.cosine_similarity(m(x).flatten(), ref.flatten(), dim=0))

    autoprune.sensitivity(model, x, eval_fn, groups=["conv1", "layer1.0.conv1", "layer2.0.conv2"],
                          ratios=(0.2, 0.5, 0.8), sensitivities_file=path, progress=False)


def _start(path: Path, delay: float):
    """A process running :func:`_analysis`, forked from a fork server that imported torch,
    torchvision and autoprune once (a real process: SIGKILL ends it as it would end a CLI)."""
    return forked_process(_analysis, str(path), delay)


def _finished(proc) -> int | None:
    proc.join(timeout=300)
    return proc.exitcode


def _points(path: Path) -> int:
    if not path.exists():
        return 0
    json.loads(path.read_text())  # the file on disk is always complete JSON
    return sum(len(p) for p in autoprune.load_sensitivities(path).values())


def test_sigkill_leaves_valid_resumable_file(tmp_path):
    reference = tmp_path / "reference.json"
    assert _finished(_start(reference, 0.0)) == 0
    expected = autoprune.load_sensitivities(reference)
    assert _points(reference) == TOTAL

    path = tmp_path / "killed.json"
    rng = random.Random(0)
    seen, kills = [], 0
    while kills < 3:
        before = _points(path)
        proc = _start(path, 0.2)
        deadline = time.time() + 120
        while _points(path) <= before and time.time() < deadline and proc.is_alive():
            time.sleep(0.02)  # wait until this run has written at least one new point
        time.sleep(rng.uniform(0.0, 0.3))  # then kill it at a random moment
        if not proc.is_alive():
            break
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=60)
        assert proc.exitcode == -signal.SIGKILL
        kills += 1
        seen.append(_points(path))
    assert kills >= 2, "the analysis finished before it could be killed twice"
    assert seen == sorted(seen) and seen[-1] < TOTAL

    assert _finished(_start(path, 0.0)) == 0
    assert autoprune.load_sensitivities(path) == expected
    assert not list(tmp_path.glob(".killed.json.*.tmp"))  # temp files of killed runs are cleaned

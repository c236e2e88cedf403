"""SIGKILL in the middle of a sensitivity analysis leaves a valid file; a rerun finishes it and
gives the same result as an uninterrupted run."""
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import autoprune

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import sys, time, torch, torchvision, autoprune
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).eval()
    x = torch.randn(2, 3, 32, 32)
    ref = model(x).detach()
    delay = float(sys.argv[2])
    def eval_fn(m):
        time.sleep(delay)
        return float(torch.nn.functional.cosine_similarity(m(x).flatten(), ref.flatten(), dim=0))
    autoprune.sensitivity(model, x, eval_fn, groups=["conv1", "layer1.0.conv1", "layer2.0.conv2"],
                          ratios=(0.2, 0.5, 0.8), sensitivities_file=sys.argv[1], progress=False)
""")
TOTAL = 9


def _start(path: Path, delay: float) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", SCRIPT, str(path), str(delay)], env=env)


def _points(path: Path) -> int:
    if not path.exists():
        return 0
    json.loads(path.read_text())  # the file on disk is always complete JSON
    return sum(len(p) for p in autoprune.load_sensitivities(path).values())


def test_sigkill_leaves_valid_resumable_file(tmp_path):
    reference = tmp_path / "reference.json"
    assert _start(reference, 0.0).wait(timeout=300) == 0
    expected = autoprune.load_sensitivities(reference)
    assert _points(reference) == TOTAL

    path = tmp_path / "killed.json"
    rng = random.Random(0)
    seen, kills = [], 0
    while kills < 3:
        before = _points(path)
        proc = _start(path, 0.2)
        deadline = time.time() + 120
        while _points(path) <= before and time.time() < deadline and proc.poll() is None:
            time.sleep(0.02)  # wait until this run has written at least one new point
        time.sleep(rng.uniform(0.0, 0.3))  # then kill it at a random moment
        if proc.poll() is not None:
            break
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        kills += 1
        seen.append(_points(path))
    assert kills >= 2, "the analysis finished before it could be killed twice"
    assert seen == sorted(seen) and seen[-1] < TOTAL

    assert _start(path, 0.0).wait(timeout=300) == 0
    assert autoprune.load_sensitivities(path) == expected
    assert not list(tmp_path.glob(".killed.json.*.tmp"))  # temp files of killed runs are cleaned

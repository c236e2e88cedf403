"""Progress in a log: when stderr is not a terminal, no bar is redrawn (no carriage returns kept in
the log); the sensitivity analysis prints a line per group, training a line per epoch."""
import sys

import pytest
import torch
from torch.utils.data import TensorDataset
from tqdm.auto import tqdm

from autoprune import classification as cls
from autoprune.engine import progress
from conftest import ToyNet


def test_plain_progress_prints_one_line_per_part_and_one_at_the_end(capsys):
    bar = progress.progress_bar(total=6, desc="sensitivity", unit="pt")  # stderr: captured
    assert isinstance(bar, progress.PlainProgress)
    for group in ("conv1", "conv2", "conv3"):
        bar.set_postfix_str(group)
        bar.update()
        bar.update()
    bar.close()
    bar.close()
    err = capsys.readouterr().err
    assert [line.split(" (")[0] for line in err.splitlines()] == [
        "sensitivity: 2/6 pt after conv1", "sensitivity: 4/6 pt after conv2",
        "sensitivity: 6/6 pt done"]
    assert list(progress.progress_bar(range(3), desc="x", lines=False)) == [0, 1, 2]
    assert capsys.readouterr().err == ""  # lines=False: the caller prints its own line


def test_a_terminal_gets_a_tqdm_bar(monkeypatch):
    monkeypatch.setattr(progress, "interactive", lambda stream=None: True)
    bar = progress.progress_bar(total=3, desc="latency", file=sys.stdout)
    assert isinstance(bar, tqdm) and not bar.disable
    bar.close()
    assert progress.progress_bar(total=3, enabled=False).disable


def test_a_two_epoch_run_writes_a_bounded_log(tmp_path, capfd):
    """The one-call flow (2 + 2 epochs, 16 steps each, an analysis of every group) with stdout
    and stderr captured (not terminals): no bar frames, a few dozen lines."""
    g = torch.Generator().manual_seed(0)
    images = torch.rand(64, 3, 16, 16, generator=g)
    labels = images.mean(dim=(2, 3)).argmax(dim=1)  # the brightest channel: learnable
    data = TensorDataset(images, labels)
    torch.manual_seed(0)
    cls.train(ToyNet(num_classes=3), data, data, epochs=2, pretrain_epochs=2, batch_size=4,
              input_size=16, warmup_epochs=0, lr=0.01, save_dir=tmp_path / "run",
              sensitivities_file=tmp_path / "sens.json", ratios=(0.5,), eval_metric_loss=0.5,
              device="cpu")
    out, err = capfd.readouterr()
    assert "\r" not in out + err
    lines = (out + err).splitlines()
    assert sum(line.startswith("epoch ") for line in lines) == 4  # one line per epoch
    assert sum(line.startswith("sensitivity: ") for line in lines) == 5  # per group + the end
    assert len(lines) <= 60, "\n".join(lines)


def test_ultralytics_bars_are_drawn_once_in_a_log(capfd):
    from autoprune.tasks.detection import models as yolo
    from ultralytics.utils.tqdm import TQDM

    with yolo.quiet(False):  # every Ultralytics call of autoprune runs inside quiet()
        for _ in TQDM(range(50), desc="train"):
            pass
    out = capfd.readouterr().out  # where Ultralytics draws its bars
    assert "\r" not in out and len(out.strip().splitlines()) == 1, out


def test_counted_puts_a_count_and_its_noun_in_agreement():
    from autoprune.engine.progress import counted

    assert [counted(1, "epoch"), counted(2, "epoch"), counted(1234, "image")] == \
        ["1 epoch", "2 epochs", "1,234 images"]
    assert [counted(1, "batch", "batches"), counted(3, "batch", "batches")] == \
        ["1 batch", "3 batches"]
    assert counted("x", "epoch") == "x epochs"  # e.g. from a damaged file: shown, no crash

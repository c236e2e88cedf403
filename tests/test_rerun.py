"""A rerun into a save_dir that holds an earlier run says what it found (a finished run, a run
interrupted at epoch N, a sensitivity file with K points) and how to resume or start over; the
`autoprune train` command refuses to train over it without --resume or --overwrite."""
import functools
import shutil

import pytest
import torch
from torch.utils.data import TensorDataset

from autoprune import classification as cls
from autoprune.cli import main
from autoprune.engine.store import save_sensitivities
from autoprune.flow.previous import previous_run
from autoprune.flow.training import STATE_FILE, STATE_VERSION
from autoprune.tasks.classification.adapter import ClassificationAdapter
from conftest import ToyNet


def _state(stage, done: int, planned: int) -> None:
    stage.mkdir(parents=True, exist_ok=True)
    torch.save({"version": STATE_VERSION, "history": [1.0] * done, "epochs": planned},
               stage / STATE_FILE)
    (stage / "best.pt").write_bytes(b"")


def test_what_an_earlier_run_left_in_words(tmp_path):
    adapter = ClassificationAdapter()
    assert previous_run(adapter, tmp_path / "none", "none") is None
    _state(tmp_path / "plain" / "baseline", 2, 5)
    assert previous_run(adapter, tmp_path / "plain", "none") == \
        "a run interrupted in baseline after epoch 2/5"
    _state(tmp_path / "plain" / "baseline", 5, 5)
    assert previous_run(adapter, tmp_path / "plain", "none") == \
        "a finished run (baseline/best.pt)"
    _state(tmp_path / "old", 2, 5)  # an earlier version's layout is no stage of this one
    assert previous_run(adapter, tmp_path / "old", "none") is None

    run, sens = tmp_path / "run", tmp_path / "sens.json"
    _state(run / "baseline", 3, 3)
    assert previous_run(adapter, run, "new", sens) == \
        "a run interrupted between the base model and retraining (baseline/best.pt)"
    save_sensitivities({"conv1": {0.1: 0.0, 0.2: 0.01}, "conv2": {0.1: 0.02}}, sens)
    _state(run / "pruned", 1, 2)
    assert previous_run(adapter, run, "existing", sens) == (
        f"a run interrupted in pruned after epoch 1/2, and the sensitivity file {sens} with 3 "
        f"points (kept: only missing points are measured)")
    # pruning a given model (pretrain_weights) trains pruned/ alone: baseline/ is its input
    assert previous_run(adapter, run, "existing", None, run / "baseline" / "best.pt") == \
        "a run interrupted in pruned after epoch 1/2"
    _state(run / "pruned", 2, 2)
    (run / "report.json").write_text("{}")
    assert previous_run(adapter, run, "existing", sens).startswith(
        "a finished run (report.json, pruned/best.pt), and the sensitivity file")
    given = tmp_path / "given"
    _state(given / "baseline", 3, 3)
    assert previous_run(adapter, given, "new", sens, given / "baseline" / "best.pt") is None


def test_detection_reads_the_epochs_of_its_ultralytics_run(tmp_path):
    from autoprune.tasks.detection import DetectionAdapter
    from autoprune.tasks.detection import models as yolo
    adapter = DetectionAdapter(nc=2, input_size=64)
    weights = tmp_path / "pruned" / "ultralytics" / "weights"
    weights.mkdir(parents=True)
    model = adapter.build("yolov8n")
    torch.save({"epoch": 1, "model": None, "ema": model.half(), "train_args": {"epochs": 3}},
               weights / "last.pt")
    assert adapter.trained_epochs(tmp_path / "pruned") == (2, 3)
    assert adapter.trained_epochs(tmp_path / "baseline") is None
    assert isinstance(yolo.load_ultralytics(weights / "last.pt"), torch.nn.Module)


def _data():
    g = torch.Generator().manual_seed(0)
    images = torch.rand(32, 3, 16, 16, generator=g)
    return TensorDataset(images, images.mean(dim=(2, 3)).argmax(dim=1))


def test_a_rerun_of_the_api_says_what_it_found(tmp_path, capsys):
    kw = dict(epochs=1, batch_size=8, input_size=16, save_dir=tmp_path / "run", device="cpu",
              progress=False)
    cls.train(ToyNet(num_classes=3), _data(), _data(), **kw)
    assert "holds" not in capsys.readouterr().out
    cls.train(ToyNet(num_classes=3), _data(), _data(), **kw)
    assert (f"[autoprune] {tmp_path / 'run'} holds a finished run (baseline/best.pt): this run "
            f"starts over and replaces it (resume=True") in capsys.readouterr().out
    cls.train(ToyNet(num_classes=3), _data(), _data(), resume=True, **kw)
    out = capsys.readouterr().out
    assert "holds a finished run (baseline/best.pt): resuming it" in out
    assert "already finished" in out


def test_cli_train_refuses_to_train_over_a_run_without_resume_or_overwrite(tmp_path, monkeypatch,
                                                                           capsys):
    seen = []

    @functools.wraps(cls.train)  # the CLI checks config keys against the signature
    def train(**kwargs):
        seen.append(kwargs)

    monkeypatch.setattr(cls, "train", train)
    run = tmp_path / "run"
    config = tmp_path / "run.yaml"
    config.write_text(f"task: classification\nmodel: resnet18\ntrain_data: fashion-mnist\n"
                      f"save_dir: {run}\nsensitivities_file: {tmp_path / 'sens.json'}\n")
    assert main(["train", str(config)]) == 0 and len(seen) == 1  # nothing there yet
    _state(run / "baseline", 3, 3)
    _state(run / "pruned", 1, 2)
    assert main(["train", str(config)]) == 2 and len(seen) == 1
    err = capsys.readouterr().err.strip()
    assert err == (f"autoprune: error: {run} holds a run interrupted in pruned after epoch 1/2: "
                   f"`autoprune train {config} --resume` continues it (a finished stage is not "
                   f"trained again), --overwrite starts over, or set another save_dir")
    assert main(["train", str(config), "--resume"]) == 0 and seen[-1]["resume"] is True
    assert main(["train", str(config), "--overwrite"]) == 0 and "resume" not in seen[-1]
    config.write_text(config.read_text() + "resume: true\n")
    assert main(["train", str(config)]) == 0 and seen[-1]["resume"] is True
    with pytest.raises(SystemExit):
        main(["train", str(config), "--resume", "--overwrite"])
    # pruning the run's own base model (pretrain_weights) trains pruned/ only: nothing to refuse
    shutil.rmtree(run / "pruned")
    config.write_text(f"task: classification\nmodel: resnet18\ntrain_data: fashion-mnist\n"
                      f"save_dir: {run}\nsensitivities_file: {tmp_path / 'sens.json'}\n"
                      f"pretrain_weights: {run / 'baseline' / 'best.pt'}\n")
    assert main(["train", str(config)]) == 0 and "resume" not in seen[-1]

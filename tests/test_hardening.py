"""Issue 30's findings, tried as an attacker and a careless user would: no code runs from a
setting, exports are atomic, symlink loops and YAML tricks are refused, and every bad input is one
line naming the problem and the fix (docs/bad_inputs.md). Tiny models, CPU, no network."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from PIL import Image

import autoprune as ap
from autoprune import classification as cls
from autoprune.cli import main
from autoprune.cli.config_file import load_config
from autoprune.flow.checkpoints import export_checkpoint
from conftest import ToyNet, assert_one_line, make_model, needs_fmnist

ROOT = Path(__file__).resolve().parents[1]


class _RunsCode:
    """A pickle that runs code when unpickled (what a malicious .pt holds)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _payload(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "code_ran"
    payload = tmp_path / "payload.pt"
    torch.save({"model": _RunsCode(marker)}, payload)
    return payload, marker


def _cli_error(capsys, *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("autoprune: error: ") and "\n" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


# ---- no code runs from a setting ----------------------------------------------------------------

@pytest.mark.parametrize("key", ["distill_model", "pretrained", "model", "resume", "cfg",
                                 "tracker", "data", "project"])
def test_train_args_naming_a_file_are_refused_before_anything_is_read(key, tmp_path):
    from autoprune.tasks.detection.train_args import check_train_args

    payload, marker = _payload(tmp_path)
    with pytest.raises(ap.ConfigError) as info:
        check_train_args({"lr0": 0.01, key: str(payload)})
    assert key in assert_one_line(info) and not marker.exists()


@pytest.mark.parametrize("train_args, message", [
    ({"lr0": "payload.pt"}, "train_args lr0='payload.pt' must be a number"),
    ({"optimizer": "../x.pt"}, "must be a name such as 'AdamW'"),
    ({"cache": "disk"}, "writes .npy files next to your images"),
    ({"freeze": ["a"]}, "a number of layers or a list of layer indices"),
    ({"save_dir": "/tmp/elsewhere"}, "is not one of the training settings"),
    ("lr0=0.1", "must be a mapping"),
])
def test_train_args_values_of_the_wrong_kind_are_refused(train_args, message):
    from autoprune.tasks.detection.train_args import check_train_args

    with pytest.raises(ap.ConfigError) as info:
        check_train_args(train_args)
    assert message in assert_one_line(info)


def test_every_allowed_train_arg_is_an_ultralytics_setting():
    """The allow-list names settings the installed Ultralytics has (a rename there fails here)."""
    from autoprune.tasks.detection import models as yolo
    from autoprune.tasks.detection.train_args import NUMBERS, WORDS, check_train_args

    from autoprune.tasks import TASKS

    own = {k for t in TASKS.values() if t.data_key == "data"
           for k in t.adapter_class().train_arg_numbers}  # the YOLO sub-tasks' loss weights
    assert not (set(NUMBERS) | set(WORDS) | own) - set(yolo.DEFAULT_CFG_DICT)
    check_train_args({"nbs": 8, "optimizer": "AdamW", "lr0": 0.01, "warmup_epochs": 1,
                      "mosaic": 0.0, "amp": False, "cache": "ram", "freeze": [0, 1], "dis": 2})


@needs_fmnist
def test_a_detection_yaml_with_a_payload_in_train_args_runs_nothing(tmp_path, capsys):
    """The attack of issue 30: `train_args: {distill_model: payload.pt}` in a YAML config."""
    from autoprune.datasets.scenes import write_yolo_dataset

    payload, marker = _payload(tmp_path)
    data = write_yolo_dataset(tmp_path / "scenes", train=4, val=2, size=64)
    config = tmp_path / "det.yaml"
    config.write_text(textwrap.dedent(f"""\
        task: detection
        model: yolov8n.yaml
        data: {data}
        epochs: 1
        input_size: 64
        save_dir: {tmp_path / 'run'}
        train_args: {{distill_model: {payload}}}
        """))
    assert main(["train", str(config)]) == 2
    _cli_error(capsys, "train_args may not set 'distill_model'", "distill=True")
    assert not marker.exists() and not (tmp_path / "run" / "baseline").exists()


@needs_fmnist
def test_resume_refuses_an_ultralytics_last_pt_that_names_a_file_to_load(tmp_path):
    """An Ultralytics last.pt whose recorded arguments name a distill_model (or pretrained) file:
    resuming would unpickle it unchecked, so det.resume refuses it first."""
    from autoprune import detection as det
    from autoprune.tasks.detection import models as yolo

    payload, marker = _payload(tmp_path)
    with yolo.quiet():
        model = yolo.DetectionModel("yolov8n.yaml", nc=3, verbose=False)
    last = tmp_path / "run" / "ultralytics" / "weights" / "last.pt"
    last.parent.mkdir(parents=True)
    for key in ("distill_model", "pretrained"):
        torch.save({"model": model, "epoch": 0,
                    "train_args": {"epochs": 2, "imgsz": 64, key: str(payload)}}, last)
        with pytest.raises(ap.CheckpointError) as info:
            det.resume(last)
        assert f"records {key}=" in assert_one_line(info)
    assert not marker.exists()


def test_timm_loading_model_kwargs_are_refused_for_tu_encoders(tmp_path):
    from autoprune import segmentation as seg

    payload, marker = _payload(tmp_path)
    for kwargs in ({"checkpoint_path": str(payload)}, {"pretrained": True},
                   {"pretrained_cfg_overlay": {"file": str(payload)}}):
        with pytest.raises(ap.ConfigError) as info:
            seg.train("unet", "tu-resnet18", train_data="fashion-scenes", model_kwargs=kwargs,
                      epochs=1, save_dir=tmp_path / "run", progress=False)
        assert "would make timm load or fetch weights" in assert_one_line(info)
    assert not marker.exists()


def test_a_checkpoint_whose_metadata_names_a_file_for_timm_is_damaged(tmp_path):
    from autoprune import segmentation as seg

    path = ap.save_pruned(make_model("toy"), tmp_path / "s.pt", task="segmentation",
                          arch="smp/unet/tu-resnet18",
                          build={"num_classes": 3, "model_kwargs": {"checkpoint_path": "x.pt"}})
    with pytest.raises(ap.CheckpointError) as info:
        seg.load_model(path)
    assert "is damaged (metadata field 'build.model_kwargs' sets checkpoint_path" in \
        assert_one_line(info)


def test_a_checkpoint_whose_task_was_changed_is_named_damaged(tmp_path):
    from autoprune import segmentation as seg

    path = ap.save_pruned(make_model("toy"), tmp_path / "c.pt", task="segmentation",
                          arch="timm/resnet18", build={"num_classes": 10})
    with pytest.raises(ap.CheckpointError) as info:
        seg.load_model(path)
    assert "is damaged (metadata field 'arch' is 'timm/resnet18', not a segmentation model: " \
           "its 'task' or 'arch' was changed)" in assert_one_line(info)
    path = ap.save_pruned(make_model("toy"), tmp_path / "d.pt", task="no_such_task",
                          arch="timm/resnet18")
    with pytest.raises(ap.CheckpointError, match="metadata field 'task' is 'no_such_task'"):
        cls.load_model(path)


# ---- exports are atomic ------------------------------------------------------------------------

@pytest.fixture
def checkpoint(tmp_path):
    return ap.save_pruned(make_model("resnet18"), tmp_path / "c.pt", task="classification",
                          arch="timm/resnet18", build={"num_classes": 10}, input_size=32)


def _temp_files(folder: Path) -> list[Path]:
    return sorted(folder.rglob(".*.tmp"))


def test_a_killed_export_keeps_the_earlier_onnx_file(checkpoint, tmp_path):
    """SIGKILL in the middle of re-exporting onto a good model.onnx: it is left as it was, and a
    killed first export leaves no half file at the output."""
    onnx = export_checkpoint(checkpoint, tmp_path / "model.onnx")
    before = onnx.read_bytes()
    script = textwrap.dedent(f"""
        import os, signal, torch
        real = torch.onnx.export
        def export(*args, **kwargs):
            real(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGKILL)   # the file is written, not yet renamed
        torch.onnx.export = export
        from autoprune.flow.checkpoints import export_checkpoint
        export_checkpoint({str(checkpoint)!r}, {str(tmp_path / 'model.onnx')!r}, overwrite=True)
        export_checkpoint({str(checkpoint)!r}, {str(tmp_path / 'first.onnx')!r})
        """)
    child = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True)
    assert child.returncode == -signal.SIGKILL
    assert onnx.read_bytes() == before
    assert not (tmp_path / "first.onnx").exists()


def test_a_full_disk_while_exporting_is_one_line_and_keeps_the_earlier_file(checkpoint, tmp_path,
                                                                           monkeypatch, capsys):
    import errno
    import shutil

    onnx = export_checkpoint(checkpoint, tmp_path / "model.onnx")
    before = onnx.read_bytes()

    def no_space(*args, **kwargs):
        Path(args[2]).write_bytes(b"\x08partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch.onnx, "export", no_space)
    monkeypatch.setattr("autoprune.engine.files.shutil.disk_usage",
                        lambda p: shutil._ntuple_diskusage(100, 100, 0))
    assert main(["export", str(checkpoint), str(onnx)]) == 2
    _cli_error(capsys, f"could not write {onnx} (no space left on the device)")
    assert onnx.read_bytes() == before and not _temp_files(tmp_path)


@pytest.mark.parametrize("argv, message", [
    (["--opset-version", "3"], "opset_version=3 is not an ONNX opset torch"),
    (["--opset-version", "99"], "opset_version=99 is not an ONNX opset torch"),
    (["--input-size", "100000"], "input_size=100000 would need about"),
    (["--input-size", "0"], "input_size=0 must be a whole number, at least 1"),
])
def test_export_settings_out_of_range_are_one_line(argv, message, checkpoint, tmp_path, capsys):
    assert main(["export", str(checkpoint), str(tmp_path / "m.onnx"), *argv]) == 2
    _cli_error(capsys, message)
    assert not (tmp_path / "m.onnx").exists()


# ---- symlink loops, YAML tricks -----------------------------------------------------------------

def test_an_imagefolder_symlink_loop_is_read_once_and_said(tmp_path, capsys):
    for c in "ab":
        (tmp_path / "data" / c).mkdir(parents=True)
        for i in range(12):
            Image.new("RGB", (8, 8), (i * 20, 0, 0)).save(tmp_path / "data" / c / f"{i}.png")
    os.symlink(".", tmp_path / "data" / "a" / "loop")
    from autoprune.tasks.classification.adapter import ClassificationAdapter

    adapter = ClassificationAdapter(tmp_path / "data", input_size=32)
    assert len(adapter.train_set) == 24
    assert f"{tmp_path / 'data' / 'a' / 'loop'} leads back into a folder already read: not " \
           f"followed" in capsys.readouterr().out


@needs_fmnist
def test_a_yolo_image_folder_with_a_symlink_loop_is_refused(tmp_path):
    from autoprune.datasets.scenes import write_yolo_dataset
    from autoprune.tasks.detection.data import read_data_yaml

    data = write_yolo_dataset(tmp_path / "scenes", train=4, val=2, size=64)
    os.symlink(".", Path(data).parent / "images" / "train" / "loop")
    with pytest.raises(ap.ConfigError) as info:
        read_data_yaml(data)
    assert "links back into a folder already read: Ultralytics would read those images again" \
        in assert_one_line(info)


def test_a_yaml_key_given_twice_is_refused_naming_both_lines(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("task: classification\nepochs: 3\nmodel: resnet18\nepochs: 1\n")
    with pytest.raises(ap.ConfigError) as info:
        load_config(path)
    assert "'epochs' is set twice (lines 2 and 4): keep one" in assert_one_line(info)


def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path):
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    start = time.perf_counter()
    with pytest.raises(ap.ConfigError) as info:
        load_config(path)
    assert "its aliases expand to more than 100,000 values" in assert_one_line(info)
    assert time.perf_counter() - start < 5
    (tmp_path / "shared.yaml").write_text("base: &b {lr: 0.1}\nx: *b\ny: [*b, *b]\n")
    assert load_config(tmp_path / "shared.yaml")["y"] == [{"lr": 0.1}] * 2  # small aliases pass
    (tmp_path / "self.yaml").write_text("a: &a [1, *a]\n")
    with pytest.raises(ap.ConfigError, match="an alias refers to itself"):
        load_config(tmp_path / "self.yaml")


@pytest.mark.parametrize("text, message", [
    ("task: [classification]\nmodel: resnet18\n", "task ['classification'] must be one name"),
    ("task: classification\n" + "x: " + "[" * 3000 + "]" * 3000 + "\n", "nested too deeply"),
])
def test_cli_config_shapes_that_crashed_are_one_line(text, message, tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert main(["train", str(path)]) == 2
    _cli_error(capsys, message)


# ---- misleading messages -------------------------------------------------------------------------

def test_sensitivity_latency_settings_without_latency_name_the_flag(tmp_path, capsys):
    ckpt = ap.save_pruned(make_model("toy"), tmp_path / "c.pt", arch=None)
    assert main(["sensitivity", str(ckpt), "fashion-mnist", str(tmp_path / "s.json"),
                 "--latency-threads", "2"]) == 2
    err = _cli_error(capsys, "--latency-threads=2 is given without --latency: set --latency")
    assert "pruned_latency" not in err


def test_prune_latency_settings_without_a_target_name_the_flag(tmp_path, capsys):
    ckpt = ap.save_pruned(make_model("toy"), tmp_path / "c.pt", arch=None)
    assert main(["prune", str(ckpt), "DEFAULT", str(tmp_path / "p.pt"),
                 "--latency-batch", "4"]) == 2
    _cli_error(capsys, "--latency-batch=4 is given without --pruned-latency")


def test_an_output_path_taken_by_a_folder_is_refused_before_training(tmp_path):
    (tmp_path / "run" / "report.json").mkdir(parents=True)
    data = _Images()
    with pytest.raises(ap.ConfigError) as info:
        cls.train(ToyNet(3), data, data, epochs=1, batch_size=4, input_size=32, progress=False,
                  save_dir=tmp_path / "run", sensitivities_file=tmp_path / "s.json")
    assert f"{tmp_path / 'run' / 'report.json'} is a folder, and this run writes a file there" \
        in assert_one_line(info)
    assert not (tmp_path / "run" / "baseline").exists()


class _Images(torch.utils.data.Dataset):
    classes = ["0", "1", "2"]

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.randn(3, 32, 32), i % 3


def test_a_truncated_latency_ratios_file_is_named_on_resume(tmp_path):
    from autoprune.flow.latency import LatencyTarget, latency_ratios

    (tmp_path / "latency_ratios.json").write_text('{"target": {"value": 0.4')
    with pytest.raises(ap.ConfigError) as info:
        latency_ratios(None, make_model("toy"), None, LatencyTarget(0.4), tmp_path, round_to=None,
                       criterion="l1_norm", max_loss=None, resume=True)
    assert f"{tmp_path / 'latency_ratios.json'} is damaged or unreadable" in assert_one_line(info)
    assert "delete it and run again without resume" in str(info.value)

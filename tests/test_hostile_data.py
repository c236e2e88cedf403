"""Hostile data and settings (issue 21: a new user / an attacker): damaged image files, malformed
YOLO labels and data.yaml, labels that are not class indices, settings of the wrong type, devices
this machine lacks, one-class folders, background-only masks. Each is refused with one line that
names the problem and the fix (docs/bad_inputs.md). Tiny data (32 px, a few images), CPU, seeded;
at most one epoch, and that only where the damage shows in the middle of a run."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import Dataset

import autoprune as ap
from autoprune import classification as cls
from autoprune import segmentation as seg
from autoprune.cli import main

SMALL = dict(epochs=1, batch_size=2, input_size=32, progress=False, device="cpu")


def _image(path: Path, seed: int, size: int = 32) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path


def _truncate(path: Path) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _image_folder(root: Path, classes=("cat", "dog"), per_class: int = 3) -> Path:
    for c, name in enumerate(classes):
        for i in range(per_class):
            _image(root / name / f"{i}.jpg", seed=10 * c + i)
    return root


def _one_line(info, *parts: str) -> str:
    text = str(info.value)
    assert isinstance(info.value, ap.AutopruneError) and "\n" not in text, text
    for part in parts:
        assert part in text, text
    return text


# -- classification ----------------------------------------------------------------------------
def test_truncated_jpeg_in_an_image_folder_is_named(tmp_path):
    """A JPEG cut short reads as `OSError: Truncated File Read` mid-epoch; now the file is named."""
    root = _image_folder(tmp_path / "data")
    bad = _truncate(root / "dog" / "2.jpg")  # not the first image: it breaks during the run
    with pytest.raises(ap.ConfigError) as info:
        cls.train("resnet18", root, root, save_dir=tmp_path / "run", **SMALL)
    _one_line(info, f"image {bad} cannot be read", "remove or replace the file")


def test_error_from_a_loader_worker_stays_one_line(tmp_path):
    """With num_workers > 0 the DataLoader raises the worker's error again with the worker's
    traceback as its message; an AutopruneError keeps its own line. (torch's own re-raise,
    without a worker process: a real one takes seconds to shut down after an error.)"""
    from torch.utils.data._utils import ExceptionWrapper

    from autoprune.engine.data import load_image

    bad = _truncate(_image(tmp_path / "x.jpg", seed=0))
    try:
        load_image(bad)
    except ap.ConfigError:
        wrapped = ExceptionWrapper(where="in DataLoader worker process 0")
    with pytest.raises(ap.ConfigError) as info:
        wrapped.reraise()
    text = _one_line(info, f"image {bad} cannot be read (", "remove or replace the file")
    assert text.startswith("image ") and text.endswith("the file"), text


def test_not_an_image_in_an_image_folder_is_named(tmp_path):
    root = _image_folder(tmp_path / "data")
    (root / "cat" / "notes.png").write_text("not a picture")
    with pytest.raises(ap.ConfigError) as info:
        cls.train("resnet18", root, root, save_dir=tmp_path / "run", **SMALL)
    _one_line(info, "notes.png cannot be read", "remove or replace the file")


def test_image_folder_of_one_class_is_refused(tmp_path):
    root = _image_folder(tmp_path / "data", classes=("cat",))
    with pytest.raises(ap.ConfigError) as info:
        cls.train("resnet18", root, root, save_dir=tmp_path / "run", **SMALL)
    _one_line(info, "the data has a single class ('cat')", "needs at least two classes")
    assert not (tmp_path / "run" / "baseline" / "best.pt").exists()


class Named(Dataset):
    """Images labelled by class name ('cat'), not by index."""

    classes = ["cat", "dog"]

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return torch.randn(3, 32, 32), self.classes[i % 2]


def test_dataset_with_string_labels_is_refused(tmp_path):
    """`AttributeError: 'tuple' object has no attribute 'to'` in the training loop before."""
    with pytest.raises(ap.ConfigError) as info:
        cls.train("resnet18", Named(), Named(), save_dir=tmp_path / "run", **SMALL)
    _one_line(info, "train_data gives labels like 'cat' (str)",
              "labels must be integer class indices")


@pytest.mark.parametrize("key, value", [
    ("batch_size", "big"), ("lr", "fast"), ("lr", 0), ("num_workers", "two"),
    ("input_size", "large"), ("weight_decay", -1.0), ("warmup_epochs", float("nan")),
    ("num_classes", "five"), ("epochs", "ten"), ("batch_size", 2.5),
])
def test_classification_settings_of_the_wrong_type(key, value, tmp_path):
    """`TypeError: '<' not supported between instances of 'str' and 'int'` before."""
    class Three(Dataset):  # built lazily: the check must come before the data is read
        classes = ["a", "b", "c"]

        def __len__(self):
            return 6

        def __getitem__(self, i):
            return torch.randn(3, 32, 32), i % 3

    with pytest.raises(ap.ConfigError) as info:
        cls.train("resnet18", Three(), Three(), save_dir=tmp_path / "run",
                  **{**SMALL, key: value})
    _one_line(info, f"{key}={value!r} must be")


def test_yaml_config_with_batch_size_big_is_one_line(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(f"task: classification\nmodel: resnet18\ntrain_data: {tmp_path}\n"
                      f"batch_size: big\n")
    assert main(["train", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "autoprune: error: batch_size='big' must be a whole number, at least 1: fix " \
                  "it in the call or the config", err


# -- devices -------------------------------------------------------------------------------------
@pytest.mark.parametrize("gpus, device, message", [
    (0, "cuda:3", "device cuda:3 is not available (this machine has no CUDA GPU): use "
                  "device='cpu' or 'auto'"),
    (0, "cuda", "device cuda is not available (this machine has no CUDA GPU)"),
    (1, "cuda:3", "device cuda:3 is not available (this machine has 1 GPU: cuda:0)"),
    (2, "cuda:2", "(this machine has 2 GPUs: cuda:0 .. cuda:1)"),
    (0, "gpu", "device='gpu' is not a device: use 'auto', 'cpu', 'cuda' or 'cuda:N'"),
])
def test_device_this_machine_lacks(gpus, device, message, tmp_path, monkeypatch):
    """`RuntimeError: Found no NVIDIA driver` (or an invalid device ordinal) before."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    with pytest.raises(ap.ConfigError) as info:
        cls.train("resnet18", Named(), Named(), save_dir=tmp_path / "run",
                  **{**SMALL, "device": device})
    _one_line(info, message)


def test_cli_device_cuda_without_a_gpu(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "s.json"
    assert main(["sensitivity", str(tmp_path / "none.pt"), "fashion-mnist", str(out),
                 "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip()
    assert "device cuda is not available (this machine has no CUDA GPU)" in err, err


# -- detection: data.yaml and YOLO labels ---------------------------------------------------------
def _yolo(root: Path, labels: str = "0 0.5 0.5 0.4 0.4\n", yaml_text: str | None = None) -> Path:
    """A two-image YOLO data set (one train, one val image) whose train label is ``labels``."""
    for split, text in (("train", labels), ("val", "1 0.5 0.5 0.2 0.3\n")):
        _image(root / "images" / split / "0.jpg", seed=1)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split / "0.txt").write_text(text)
    path = root / "data.yaml"
    path.write_text(yaml_text or "train: images/train\nval: images/val\n"
                                 "names: [cat, dog]\n")
    return path


@pytest.mark.parametrize("labels, message", [
    ("0 0.5 0.5 0.4 0.4\none 0.5 0.5 0.2 0.2\n",
     "line 2 ('one 0.5 0.5 0.2 0.2') is not all numbers"),
    ("0 0.5 0.5 0.4\n", "line 1 ('0 0.5 0.5 0.4') has 4 values: each line is 'class cx cy w h'"),
    ("0 0.5 0.5 0.4 0.4 0.9\n", "has 6 values"),
    ("1 0.5 0.5 1.5 0.4\n", "has coordinates outside [0, 1]"),
    ("1 -0.3 0.5 0.2 0.4\n", "has coordinates outside [0, 1]"),
    ("1 0.5 nan 0.2 0.4\n", "has coordinates outside [0, 1]"),
    ("0.5 0.5 0.5 0.2 0.4\n", "has class id 0.5 but 2 classes are named (ids 0..1)"),
    ("7 0.5 0.5 0.2 0.4\n", "has class id 7 but 2 classes are named"),
    ("0 0.5 0.5 0.2 0.4\n0 0.1 0.1 0.9 0.1 0.5 0.9\n", "mixes boxes and polygons"),
])
def test_malformed_yolo_labels_are_refused_with_file_and_line(labels, message, tmp_path):
    """Before: `ValueError: could not convert string to float: 'one'`, or Ultralytics silently
    dropping the image as corrupt and training on the rest."""
    from autoprune import detection as det

    data = _yolo(tmp_path / "data", labels)
    with pytest.raises(ap.ConfigError) as info:
        det.train("yolov8n.yaml", data, epochs=1, input_size=32, batch_size=2, device="cpu",
                  save_dir=tmp_path / "run", progress=False)
    _one_line(info, str(tmp_path / "data" / "labels" / "train" / "0.txt"), message)


def test_yolo_polygon_labels_pass(tmp_path):
    """Segment-style rows (class + x y pairs) are what Ultralytics takes: not refused."""
    from autoprune.tasks.detection.data import check_label_file

    path = tmp_path / "0.txt"
    path.write_text("0 0.1 0.1 0.9 0.1 0.5 0.9\n1 0.2 0.2 0.3 0.2 0.3 0.3 0.2 0.3\n\n")
    check_label_file(path, 2)


@pytest.mark.parametrize("names, message", [
    ("names: [cat, dog]\nnc: many\n", "says nc: 'many' but lists 2 names: write nc: 2 or drop nc"),
    ("names: [cat, dog]\nnc: 3\n", "says nc: 3 but lists 2 names"),
    ("names: {0: cat, 5: dog}\n", "'names:' must list the class names ([cat, dog]) or map ids"),
    ("names: {a: cat, b: dog}\n", "'names:' must list the class names"),
    ("names: 2\n", "'names:' must list the class names"),
    ("names: []\n", "'names:' must list the class names"),
])
def test_inconsistent_names_and_nc_are_refused(names, message, tmp_path):
    from autoprune import detection as det

    data = _yolo(tmp_path / "data", yaml_text="train: images/train\nval: images/val\n"
                                              + names)
    with pytest.raises(ap.ConfigError) as info:
        det.train("yolov8n.yaml", data, epochs=1, input_size=32, batch_size=2, device="cpu",
                  save_dir=tmp_path / "run", progress=False)
    _one_line(info, str(data), message)


@pytest.mark.parametrize("key, value", [("batch_size", "big"), ("input_size", "big"),
                                        ("input_size", 64.5), ("num_workers", -1),
                                        ("eval_limit", "all")])
def test_detection_settings_of_the_wrong_type(key, value, tmp_path):
    from autoprune import detection as det

    with pytest.raises(ap.ConfigError) as info:
        det.train("yolov8n.yaml", tmp_path / "data.yaml", epochs=1, save_dir=tmp_path / "run",
                  progress=False, **{key: value})
    _one_line(info, f"{key}={value!r} must be")


# -- segmentation: images/ + masks/ folders ------------------------------------------------------
def _pairs(root: Path, n: int = 4, foreground: int = 1) -> Path:
    """``n`` 32x32 image/mask pairs; each mask has a square of class ``foreground``."""
    for i in range(n):
        _image(root / "images" / f"{i}.png", seed=i)
        mask = np.zeros((32, 32), dtype=np.uint8)
        mask[8:24, 8:24] = foreground
        (root / "masks").mkdir(parents=True, exist_ok=True)
        Image.fromarray(mask).save(root / "masks" / f"{i}.png")
    return root


def _seg(tmp_path, root, **kw):
    return seg.train("unet", "resnet18", train_data=root, eval_data=root,
                     save_dir=tmp_path / "run", **{**SMALL, **kw})


def test_truncated_image_in_a_segmentation_folder_is_named(tmp_path):
    root = _pairs(tmp_path / "data")
    bad = _truncate(root / "images" / "3.png")  # its header reads: it breaks during the run
    with pytest.raises(ap.ConfigError) as info:
        _seg(tmp_path, root, num_classes=2)
    _one_line(info, f"image {bad} cannot be read", "remove or replace the file")


def test_truncated_mask_is_named_before_training(tmp_path):
    root = _pairs(tmp_path / "data")
    bad = _truncate(root / "masks" / "2.png")
    with pytest.raises(ap.ConfigError) as info:
        _seg(tmp_path, root, num_classes=2)
    _one_line(info, f"image {bad} cannot be read", "remove or replace the file")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("num_classes", [None, 2])
def test_background_only_masks_are_refused(num_classes, tmp_path):
    """0/255 masks: 255 is the ignore_index, so every foreground pixel was ignored and a model
    that predicts background everywhere was trained."""
    root = _pairs(tmp_path / "data", foreground=255)
    with pytest.raises(ap.ConfigError) as info:
        _seg(tmp_path, root, num_classes=num_classes)
    _one_line(info, "hold no class but 0 (background; ignore_index=255 pixels aside)",
              "save a 0/255 mask's foreground as 1")


def test_segmentation_settings_of_the_wrong_type(tmp_path):
    root = _pairs(tmp_path / "data")
    for key, value in (("batch_size", "big"), ("ignore_index", "none"), ("dice_weight", "1")):
        with pytest.raises(ap.ConfigError) as info:
            _seg(tmp_path, root, **{key: value})
        _one_line(info, f"{key}={value!r} must be")

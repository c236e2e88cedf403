"""One vocabulary across the task APIs: detection takes input_size / batch_size / num_workers like
the other tasks; Ultralytics' imgsz / batch / workers still work, with a FutureWarning."""
from __future__ import annotations

import inspect

import pytest

import autoprune
from autoprune import classification as cls
from autoprune import detection as det
from autoprune import segmentation as seg

SHARED = ("epochs", "input_size", "batch_size", "num_workers", "device", "save_dir",
          "sensitivities_file", "eval_metric_loss", "pruned_flops", "resume", "seed")


@pytest.mark.parametrize("api", [cls, det, seg])
def test_every_task_train_takes_the_shared_names(api):
    params = inspect.signature(api.train).parameters
    assert [name for name in SHARED if name not in params] == []


@pytest.mark.parametrize("old, new", [("imgsz", "input_size"), ("batch", "batch_size"),
                                      ("workers", "num_workers")])
def test_ultralytics_names_still_work_with_a_deprecation_warning(old, new, tmp_path):
    # a bad value passed under the old name is checked under the new one: it was forwarded
    with pytest.warns(FutureWarning, match=f"{old}= is deprecated: use {new}="):
        with pytest.raises(autoprune.ConfigError, match=f"{new}='big' must be"):
            det.train("yolov8n.yaml", tmp_path / "data.yaml", epochs=1, save_dir=tmp_path / "r",
                      **{old: "big"})


def test_both_names_with_different_values_are_refused(tmp_path):
    with pytest.raises(autoprune.ConfigError, match="imgsz=32 and input_size=64 name the same"):
        det.train("yolov8n.yaml", tmp_path / "data.yaml", epochs=1, imgsz=32, input_size=64)

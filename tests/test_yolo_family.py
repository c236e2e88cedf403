"""The YOLO tasks as one family (issue 39): the base (autoprune/tasks/detection/) names none of its
sub-tasks, each sub-task declares its Ultralytics classes, names, metric, label kind and loss
keys in its own package and gets the rest from the base, and a label kind a task declares on its
adapter is found by name through the registry. Reads the source and builds no model: fast."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from PIL import Image

from autoprune.errors import ConfigError
from autoprune.flow.registry import TASKS, Task
from autoprune.tasks.detection import formats
from autoprune.tasks.detection.adapter import DetectionAdapter
from autoprune.tasks.detection.family import YoloTask
from autoprune.tasks.detection.settings import YoloSettings
from autoprune.tasks.detection.trainer import KeepModuleTrainer
from autoprune.tasks.detection.validator import PatientNMS

from conftest import assert_one_line

BASE = Path(__file__).resolve().parents[1] / "autoprune" / "tasks" / "detection"
# the sub-tasks' names and keys: model-name suffixes, Ultralytics' task names, head parts, label
# and data keys, loss weights ("polygon" stays: YOLO label files hold boxes or polygons, and
# detection reads both)
SUB_TASK_WORDS = re.compile(
    r"-seg\b|-pose\b|-obb\b|\bsegment\b|instance[ _]segmentation|\bpose\b|\bobb\b|\bkpt"
    r"|keypoint|flip_idx|\bproto\b|mask_ratio|overlap_mask|\bkobj\b|\bangle\b", re.I)
# modules of the base excused for now, each with why (none: each sub-task declares its P2 / P6
# heads on its HeadVariant, and names.py's examples name no sub-task)
NAMING_FOR_NOW: set[str] = set()


def _yolo_tasks() -> list[Task]:
    return [t for t in TASKS.values() if t.settings
            and issubclass(t.settings_class(), YoloSettings)
            and t.name not in ("detection", "rtdetr")]  # (RT-DETR: detection models of other
    # classes and names, rtdetr-l: tests/test_rtdetr.py)


def test_the_yolo_base_names_none_of_its_sub_tasks():
    """No module of the base (its docstrings and comments too) names a sub-task or its keys:
    adding a YOLO task is its own package plus one registration line."""
    found = []
    for path in sorted(BASE.rglob("*.py")):
        name = path.relative_to(BASE).as_posix()
        if name in NAMING_FOR_NOW:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for match in SUB_TASK_WORDS.finditer(line):
                found.append(f"{name}:{n}: {match.group(0)!r} in {line.strip()[:70]!r}")
    assert not found, "the YOLO base names a sub-task (declare it in the sub-task's package):\n" \
        + "\n".join(found)


def test_the_word_check_sees_a_sub_task_key():
    assert SUB_TASK_WORDS.search('own = {"kpt_shape": [17, 3]}')
    assert SUB_TASK_WORDS.search("model = 'yolo11n-seg.yaml'")
    assert SUB_TASK_WORDS.search("task='segment'")
    assert not SUB_TASK_WORDS.search("ckpt = read(path); a segmentation model; a polygon line")


@pytest.mark.parametrize("task", [t.name for t in _yolo_tasks()])
def test_each_sub_task_declares_itself_and_the_base_derives_the_rest(task):
    """A sub-task's adapter declares its Ultralytics classes (a YoloTask), its names (a
    HeadVariant), its metric and where its metrics come from; the base derives the trainer,
    validator, model and head classes, the name rules and the messages from them."""
    adapter = TASKS[task].adapter_class()
    own = vars(adapter)
    assert issubclass(adapter, DetectionAdapter)
    assert {"task", "metric", "kind", "ultralytics", "variant", "metric_sources"} <= set(own)
    spec = adapter.ultralytics
    assert isinstance(spec, YoloTask) and spec.name == adapter.yolo_task != "detect"
    assert adapter.trainer_class is spec.trainer and issubclass(spec.trainer, KeepModuleTrainer)
    assert spec.trainer.patient_validator is spec.validator is adapter.validator_class
    assert issubclass(spec.validator, PatientNMS) and spec.validator.__module__.startswith(
        f"autoprune.tasks.{task}.")
    assert adapter.model_class is spec.model and adapter.head_class is spec.head
    suffix = adapter.variant.suffix
    assert adapter.arch_suffix == suffix and adapter.resolve_arch(f"yolo11n{suffix}.yaml") == \
        f"yolo11n{suffix}"
    assert TASKS[task].arch_key(f"yolov8s{suffix}.pt") == f"yolov8s{suffix}"
    assert adapter.model_hint == f"a {adapter.kind} model (e.g. 'yolo11n{suffix}.yaml')"
    letters = {letter for _, letter in adapter.metric_sources}
    stats = {f"metrics/mAP50{k}({letter})": 0.5 for letter in letters for k in ("", "-95")}
    assert adapter.metric in adapter.metrics_of(stats)
    assert adapter.labels is None or adapter.labels.task == adapter.yolo_task


def test_a_missing_head_is_named_from_the_declarations():
    import torch.nn as nn

    with pytest.raises(ConfigError, match=r"Sequential has no YOLO Pose head: pass a YOLO pose "
                                          r"model \(e\.g\. 'yolo11n-pose\.yaml'\)") as e:
        TASKS["pose"].adapter_class()(num_classes=2).check_model(nn.Sequential(nn.Conv2d(3, 4, 1)))
    assert_one_line(e)


# -- a label kind declared on an adapter, found by name ----------------------------------------
def _marks(c: int, annotation: dict, box: tuple[float, float, float, float], w: float, h: float,
           where: str, counts: dict) -> str:
    """A made-up kind: the class and the box's centre only."""
    counts["box_as_polygon"] += 0
    return f"{c} {(box[0] + box[2]) / 2 / w:.3f} {(box[1] + box[3]) / 2 / h:.3f}"


MARKS = formats.LabelKind("marks", "centre marks", _marks, boxes_only="marks need COCO data")


class MarksAdapter(DetectionAdapter):
    """A YOLO task of another label kind, registered from this test."""

    task = "marks_test"
    labels = MARKS


def _coco(root: Path) -> Path:
    """A COCO set of one 32x24 image with two objects."""
    (root / "val").mkdir(parents=True)
    Image.new("RGB", (32, 24)).save(root / "val" / "a.png")
    data = {"images": [{"id": 1, "file_name": "a.png", "width": 32, "height": 24}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 3, "bbox": [0, 0, 16, 12]},
                            {"id": 2, "image_id": 1, "category_id": 5, "bbox": [8, 6, 16, 12]}],
            "categories": [{"id": 3, "name": "cat"}, {"id": 5, "name": "dog"}]}
    (root / "instances_val.json").write_text(json.dumps(data))
    return root / "instances_val.json"


def test_a_label_kind_is_found_through_the_registry(tmp_path, monkeypatch):
    """A conversion asked for a task's labels by Ultralytics' task name finds the kind the task's
    adapter declares (the base knows detection's boxes only); an unknown name lists the kinds."""
    with pytest.raises(ConfigError, match=r"task='marks' must be 'detect' \(boxes\) or "
                                          r"'segment' \(polygons\)$") as e:
        formats.label_kind("marks")
    assert_one_line(e)
    monkeypatch.setitem(TASKS, "marks_test", Task(
        "marks_test", package="autoprune.tasks.detection", adapter="test_yolo_family:MarksAdapter",
        resolve_arch="autoprune.tasks.detection.names:resolve_arch", profile="",
        settings="autoprune.tasks.detection.settings:YoloSettings"))
    assert formats.label_kind("marks") == MARKS and formats.label_kind(MARKS) is MARKS
    source = formats.prepare_yolo_data(_coco(tmp_path / "coco"), cache_dir=tmp_path / "c",
                                       task="marks")
    assert source.record["task"] == "marks"
    labels = (tmp_path / "c" / "labels" / "val" / "a.txt").read_text().splitlines()
    assert labels == ["0 0.250 0.250", "1 0.500 0.500"]
    (tmp_path / "voc").mkdir()
    with pytest.raises(ConfigError, match="its XML holds boxes only; marks need COCO data$"):
        formats.prepare_yolo_data(tmp_path / "voc", data_format="voc", cache_dir=tmp_path / "v",
                                  task=MARKS)

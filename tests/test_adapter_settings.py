"""A task adapter takes its settings as keywords or as one settings object (``settings=``): the
same adapter either way; an unknown keyword, or both ways at once, is one line. No training."""
import inspect

import pytest
import torch
import yaml
from PIL import Image

import autoprune
from autoprune.flow.registry import TASKS, get_task
from autoprune.tasks.classification.adapter import ClassificationAdapter
from autoprune.tasks.classification.settings import ClassificationSettings
from autoprune.tasks.detection.adapter import DetectionAdapter
from autoprune.tasks.detection.settings import YoloSettings
from autoprune.tasks.segmentation.adapter import SegmentationAdapter
from autoprune.tasks.segmentation.settings import SegmentationSettings


class _Labelled(torch.utils.data.Dataset):
    """Eight (image, label) pairs of two classes."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.rand(3, 32, 32), i % 2


class _Masked(torch.utils.data.Dataset):
    """Four (image, mask) pairs of three classes."""

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return torch.rand(3, 32, 32), torch.full((32, 32), i % 3, dtype=torch.long)


def _yolo_data(root):
    """A YOLO data.yaml of one 64 px image per split, two classes."""
    for split in ("train", "val"):
        (root / "images" / split).mkdir(parents=True)
        (root / "labels" / split).mkdir(parents=True)
        Image.new("RGB", (64, 64), (90, 90, 90)).save(root / "images" / split / "0.png")
        (root / "labels" / split / "0.txt").write_text("1 0.5 0.5 0.25 0.25\n")
    (root / "data.yaml").write_text(yaml.safe_dump({
        "path": str(root), "train": "images/train", "val": "images/val",
        "names": {0: "a", 1: "b"}}))
    return root / "data.yaml"


CASES = {  # adapter, its settings, its data, settings other than the defaults
    "classification": (ClassificationAdapter, ClassificationSettings,
                       lambda tmp: (_Labelled(), _Labelled()),
                       dict(num_classes=2, input_size=32, batch_size=4, lr=0.02, device="cpu",
                            eval_limit=6)),
    "segmentation": (SegmentationAdapter, SegmentationSettings,
                     lambda tmp: (_Masked(), _Masked()),
                     dict(num_classes=3, input_size=32, batch_size=2, lr=0.01, device="cpu",
                          ignore_index=254)),
    "detection": (DetectionAdapter, YoloSettings, lambda tmp: (_yolo_data(tmp),),
                  dict(input_size=64, batch_size=8, eval_limit=1, device="cpu", num_workers=1,
                       train_args={"lr0": 0.02})),
}


def _observed(adapter):
    names = ("input_size", "batch_size", "num_classes", "num_workers", "device", "eval_limit",
             "train_args", "ignore_index", "eval_set")
    seen = {name: getattr(adapter, name, None) for name in names}
    seen["eval_set"] = None if seen["eval_set"] is None else len(seen["eval_set"])
    seen["lr"] = getattr(getattr(adapter, "cfg", None), "lr", None)
    return seen


@pytest.mark.parametrize("task", sorted(CASES))
def test_keywords_and_settings_make_the_same_adapter(task, tmp_path):
    adapter_class, settings_class, data, given = CASES[task]
    inputs = data(tmp_path)
    by_keywords = adapter_class(*inputs, progress=False, **given)
    by_settings = adapter_class(*inputs, settings=settings_class(**given), progress=False)
    assert _observed(by_keywords) == _observed(by_settings)
    assert by_keywords.input_size == given["input_size"]
    assert by_keywords.batch_size == given["batch_size"]
    assert by_keywords.num_classes == {"detection": 2}.get(task, given.get("num_classes"))
    if "lr" in given:
        assert by_settings.cfg.lr == given["lr"]


@pytest.mark.parametrize("task", sorted(CASES))
def test_an_unknown_keyword_is_one_line_naming_it(task):
    adapter_class = CASES[task][0]
    with pytest.raises(autoprune.ConfigError) as e:
        adapter_class(batch_sise=4)
    message = str(e.value)
    assert "unknown setting(s) batch_sise" in message and "did you mean batch_size?" in message
    assert "\n" not in message


@pytest.mark.parametrize("task", sorted(CASES))
def test_settings_and_keywords_together_are_refused(task):
    adapter_class, settings_class = CASES[task][:2]
    with pytest.raises(autoprune.ConfigError, match="settings= and input_size="):
        adapter_class(settings=settings_class(), input_size=64)
    with pytest.raises(autoprune.ConfigError, match="must be a"):
        adapter_class(settings=dict(input_size=64))


def test_detection_takes_its_former_names_silently(tmp_path, recwarn):
    adapter = DetectionAdapter(nc=3, workers=2, input_size=64, progress=False)
    assert adapter.num_classes == 3 and adapter.num_workers == 2
    assert not [w for w in recwarn if issubclass(w.category, FutureWarning)]
    # num_classes is no setting of detection.train: it goes beside settings=
    adapter = DetectionAdapter(settings=YoloSettings(input_size=64), num_classes=3, nc=4)
    assert adapter.num_classes == 3 and adapter.input_size == 64
    with pytest.raises(autoprune.ConfigError, match="num_classes=5 but the data has 2 classes"):
        DetectionAdapter(_yolo_data(tmp_path), nc=5, input_size=64, progress=False)


def test_the_deprecated_names_warn():
    with pytest.warns(FutureWarning, match="imgsz= is deprecated: use input_size="):
        adapter = ClassificationAdapter(num_classes=2, imgsz=48, progress=False)
    assert adapter.input_size == 48


@pytest.mark.parametrize("task", sorted(TASKS))
def test_an_adapter_takes_at_most_8_explicit_parameters(task):
    adapter_class = get_task(task).adapter_class()
    params = [p for name, p in inspect.signature(adapter_class.__init__).parameters.items()
              if name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    assert len(params) <= 8, f"{adapter_class.__name__}: {[p.name for p in params]}"

"""The classification task's settings (besides the flow's): the data, the classifier and its
training loop."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ...flow.config import TaskSettings, setting


@dataclass
class ClassificationSettings(TaskSettings):
    """``autoprune.classification.train``'s own settings."""

    analysis_defaults: ClassVar[dict[str, Any]] = {"batch_size": 128}  # analyze_sensitivity's

    num_classes: int | None = setting(None, "classes (default: from the data)", kind="int")
    batch_size: int = setting(64, "images per training batch", kind="int")
    pretrained: Any = setting(False, "start from pretrained weights: True or 'IMAGENET' (the "
                              "architecture's default: timm's hub, torchvision's weights), a tag "
                              "('timm/resnet18.a1_in1k', 'hf-hub:org/name', 'IMAGENET1K_V2'); "
                              "the head is made for your classes", kind="bool|str",
                              train_only=True)
    data_format: str | None = setting(None, "imagefolder, paddlex (file lists + labels.txt) or "
                                      "csv; None: told from the path", kind="str")
    mean: list | None = setting(None, "normalisation mean per channel (default: the pretrained "
                                "config's, else ImageNet's)", kind="list[float]")
    std: list | None = setting(None, "normalisation std per channel (default: as mean)",
                               kind="list[float]")
    interpolation: str | None = setting(None, "resize interpolation (default: the pretrained "
                                        "config's, else bilinear)", kind="str")
    lr: float | None = setting(None, "peak learning rate (default 0.05 from scratch, 0.01 from "
                               "pretrained weights)", kind="float", train_only=True)
    optimizer: str = setting("sgd", "sgd or adamw", kind="str", train_only=True)
    weight_decay: float = setting(5e-4, "weight decay", kind="float", train_only=True)
    warmup_epochs: float = setting(0.5, "linear warm-up before the cosine schedule, in epochs",
                                   kind="float", train_only=True)
    train_limit: int | None = setting(None, "train on a class-balanced subset of this many "
                                      "images", kind="int", train_only=True)

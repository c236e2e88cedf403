"""The segmentation task's settings (besides the flow's): the smp model, the data and the
training loop."""
from __future__ import annotations

from dataclasses import dataclass

from ...flow.config import TaskSettings, setting


@dataclass
class SegmentationSettings(TaskSettings):
    """``autoprune.segmentation.train``'s own settings."""

    encoder: str | None = setting(None, "the smp encoder (resnet18 when the model names none)",
                                  kind="str")
    num_classes: int | None = setting(None, "classes (default: from the data)", kind="int")
    batch_size: int = setting(8, "images per training batch", kind="int")
    lr: float = setting(1e-3, "peak learning rate", kind="float", train_only=True)
    in_channels: int = setting(3, "image channels", kind="int")
    model_kwargs: dict | None = setting(None, "more arguments of the smp model", kind="dict")
    encoder_weights: str | None = setting(None, "the encoder's starting weights: smp's name "
                                          "('imagenet', fetched by smp into the Hugging Face "
                                          "cache) or a local file", kind="str|path",
                                          train_only=True)
    data_format: str | None = setting(None, "masks (images/ + masks/), voc, cityscapes or "
                                      "paddlex; None: told from the path", kind="str")
    class_names: list | None = setting(None, "the class names, in id order", kind="list[str]")
    ignore_index: int = setting(255, "the mask value that is not scored", kind="int")
    optimizer: str = setting("adamw", "sgd or adamw", kind="str", train_only=True)
    weight_decay: float = setting(1e-4, "weight decay", kind="float", train_only=True)
    warmup_epochs: float = setting(0.5, "linear warm-up before the cosine schedule, in epochs",
                                   kind="float", train_only=True)
    dice_weight: float = setting(1.0, "weight of the Dice term beside cross-entropy",
                                 kind="float", train_only=True)
    train_limit: int | None = setting(None, "train on this many images (scenes: their count)",
                                      kind="int", train_only=True)

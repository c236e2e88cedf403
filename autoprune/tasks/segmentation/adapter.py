"""Segmentation adapter: segmentation-models-pytorch (smp) models, images/masks folders, a Dataset
or the Fashion-MNIST scenes, Dice + cross-entropy training, mIoU and per-class IoU. smp itself is
imported only by ``segmentation_models``.

Architecture keys are ``smp/<arch>/<encoder>`` (``smp/unet/resnet18``, ``smp/deeplabv3plus/
mobilenet_v2``). Encoders start from random weights unless ``encoder_weights`` names a file or
smp's weights name (``"imagenet"``): nothing is downloaded unless named.

What pruning must leave alone (``ignored_layers``):

- the segmentation head's final conv (it produces the class maps) and every module whose class
  name contains "Attention" (smp's scSE blocks, Segformer attention);
- in a ``tu-`` encoder (a timm model), what a timm classifier keeps (:mod:`..timm_rules`: the
  projections into attention heads, token-mixing MLPs, CSP ``conv_exp``), with its timm layers
  made traceable;

A group whose channels are a concatenation seen by a depthwise conv (DeepLabV3+'s 256 + 48
decoder input) is pruned like any other; the channel choice keeps at least one channel of each
concatenated input (:meth:`~autoprune.groups.PruningGraph.channels_to_remove`).

Unused encoder stages that still run (PSPNet on mobilenet_v2 / efficientnet) are made to pass their
input through when the model is built: see ``segmentation_models``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Dataset

from ...flow.config import settings_of
from ...flow.int8 import batches_of, without_augmentation
from ...flow.options import check_numbers
from ...engine.data import CachedBatches, check_limits, make_loader
from ...errors import ConfigError
from .incremental import BoundedMIoU
from .metrics import evaluate_iou
from .settings import SegmentationSettings
from ...flow.training import FitConfig, pick_device
from .. import timm_rules
from ..supervised import SupervisedFit
from .data import SCENES, class_key, infer_classes, is_scenes, scene_class_names
from .formats import data_kind as _data_kind, resolve_segmentation_data, val_split_of
from .models import (STRIDE, TIMM_LOADING, arch_of_model, build_segmenter, head_conv,
                     output_classes, resolve_arch, skip_unused_modules)


class DiceCELoss(nn.Module):
    """Cross-entropy + ``dice_weight`` x soft Dice (mean over the classes present in the batch);
    ``ignore_index`` pixels count in neither."""

    def __init__(self, ignore_index: int = 255, dice_weight: float = 1.0):
        super().__init__()
        self.ignore_index, self.dice_weight = ignore_index, dice_weight

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        ce = F.cross_entropy(logits.float(), target, ignore_index=self.ignore_index)
        if not self.dice_weight:
            return ce
        valid = (target != self.ignore_index)[:, None]
        probs = logits.float().softmax(1) * valid
        onehot = F.one_hot(target.where(valid[:, 0], 0), logits.shape[1]).permute(0, 3, 1, 2)
        onehot = onehot * valid
        dims = (0, 2, 3)
        inter = (probs * onehot).sum(dims)
        card = probs.sum(dims) + onehot.sum(dims)
        dice = (2 * inter + 1.0) / (card + 1.0)
        present = onehot.sum(dims) > 0
        dice_loss = (1 - dice[present]).mean() if present.any() else ce.new_zeros(())
        return ce + self.dice_weight * dice_loss


class SegmentationAdapter(SupervisedFit):
    """Segmentation task: smp models, Dice + CE with AdamW + cosine (AMP on CUDA), mIoU and
    per-class IoU on cached evaluation batches."""

    task = "segmentation"
    metric = "miou"
    higher_is_better = True
    build_keys = ("num_classes", "in_channels", "model_kwargs", "class_names", "ignore_index")
    build_counts = ("num_classes", "in_channels")

    def __init__(self, train_data: Any = None, eval_data: Any = None, *,
                 settings: SegmentationSettings | None = None, data_root: str | None = None,
                 seed: int = 0, progress: bool = True, **given: Any):
        """The data (an images/masks folder, VOC, Cityscapes, PaddleX lists, a Dataset or the
        Fashion-MNIST scenes) and the settings of :class:`~.settings.SegmentationSettings` (where
        they are documented): ``settings=``, or its fields as keywords. ``data_root``: where the
        scenes' Fashion-MNIST is kept."""
        s = settings_of(SegmentationSettings, settings, given, self.task)
        check_numbers(whole=True, low=1, batch_size=s.batch_size, input_size=s.input_size,
                      in_channels=s.in_channels)
        self.encoder = s.encoder  # the encoder a model name without one gets (resnet18 by default)
        check_numbers(whole=True, num_workers=s.num_workers)
        check_numbers(whole=True, low=None, num_classes=s.num_classes, ignore_index=s.ignore_index)
        check_numbers(lr=s.lr, above=True)
        check_numbers(weight_decay=s.weight_decay, warmup_epochs=s.warmup_epochs,
                      dice_weight=s.dice_weight)
        scenes = is_scenes(train_data) or is_scenes(eval_data)
        given_data = train_data if train_data is not None else eval_data
        input_size = s.input_size
        if input_size is None and isinstance(given_data, Dataset):
            input_size = int(_first_item(given_data)[0].shape[-2])
        self.input_size = input_size or (64 if scenes else 256)
        if self.input_size < STRIDE or self.input_size % STRIDE:
            raise ConfigError(f"input_size={self.input_size} must be a multiple of {STRIDE} "
                              f"(smp encoders downsample 32x): use 64, 96, 128, 256...")
        self.device = pick_device(s.device)
        self.in_channels, self.ignore_index = s.in_channels, s.ignore_index
        self.model_kwargs = dict(s.model_kwargs or {})
        self.encoder_weights = s.encoder_weights
        self.cfg = FitConfig(lr=s.lr, optimizer=s.optimizer, weight_decay=s.weight_decay,
                             warmup_epochs=s.warmup_epochs, progress=progress, sync_bn=s.sync_bn)
        self.loss = DiceCELoss(s.ignore_index, s.dice_weight)
        self.batch_size, self.num_workers, self.seed = s.batch_size, s.num_workers, seed
        num_classes = s.num_classes
        if num_classes is not None and (isinstance(num_classes, bool) or num_classes < 2):
            raise ConfigError(f"num_classes={num_classes} must be at least 2 (background + "
                              f"one class)")
        if scenes and num_classes not in (None, len(scene_class_names())):
            raise ConfigError(f"num_classes={num_classes} but {SCENES} has "
                              f"{len(scene_class_names())} classes (background + 10 garments): "
                              f"omit num_classes")
        data = dict(input_size=self.input_size, num_classes=num_classes,
                    in_channels=s.in_channels, ignore_index=s.ignore_index, seed=seed,
                    root=data_root, data_format=s.data_format, class_names=s.class_names)
        self.data_format, self._start_weights = s.data_format, None
        self.train_set = self.eval_set = None
        check_limits(train_limit=s.train_limit, eval_limit=s.eval_limit)
        if train_data is not None:
            self.train_set = resolve_segmentation_data(train_data, train=True,
                                                       limit=s.train_limit, **data)
            make_loader(self.train_set, s.batch_size, shuffle=False)  # checks emptiness
        if eval_data is None and is_scenes(train_data):
            eval_data = SCENES
        elif eval_data is None:  # a VOC / Cityscapes / PaddleX root: its val split
            eval_data = val_split_of(train_data, s.data_format)
        self._data = (train_data, eval_data)
        if eval_data is not None:
            self.eval_set = resolve_segmentation_data(eval_data, train=False, limit=s.eval_limit,
                                                      **data)
            make_loader(self.eval_set, s.batch_size, shuffle=False)
        self.num_classes = num_classes or infer_classes([self.train_set, self.eval_set]) or \
            _declared_classes(self.train_set, self.eval_set)
        for ds in (self.train_set, self.eval_set):
            if ds is not None and hasattr(ds, "num_classes") and ds.num_classes is None:
                ds.num_classes = self.num_classes  # user Datasets: check items against it
        names = s.class_names or _declared_names(self.train_set, self.eval_set)
        if names is not None and self.num_classes is not None and len(names) != self.num_classes:
            raise ConfigError(f"{len(names)} class names for num_classes={self.num_classes}: "
                              f"give one name per class, background included")
        self.class_names = list(names) if names is not None else None
        self._eval_batches = None

    # -- what the user passed ----------------------------------------------------------------
    def prepare_model(self, model: Any, pretrain_weights: Any, save_dir: Path) -> tuple[Any, Any]:
        """A name with ``encoder`` (``"unet"`` + ``encoder="resnet34"``, resnet18 when none is
        named) as its key; a module with its unused encoder stages made to pass their input."""
        return self.analysis_model(model), pretrain_weights

    def analysis_model(self, model: Any) -> Any:
        """See :meth:`prepare_model` (a checkpoint path is passed through)."""
        if isinstance(model, nn.Module):
            skip_unused_modules(model, size=self.input_size, in_channels=self.in_channels)
            return model
        if isinstance(model, str) and not Path(model).is_file():
            return resolve_arch(model, self.encoder, default_encoder="resnet18")
        return model

    # -- the TaskAdapter protocol ----------------------------------------------------------------
    def arch_key(self, model: str | nn.Module) -> str | None:
        """``smp/<arch>/<encoder>`` of a name (``"unet/resnet18"``; ConfigError if unknown) or of
        an smp model object (None if unknown)."""
        return resolve_arch(model) if isinstance(model, str) else arch_of_model(model)

    def build(self, arch: str, num_classes: int | None = None, in_channels: int | None = None,
              model_kwargs: dict[str, Any] | None = None, **_: Any) -> nn.Module:
        num_classes = num_classes or self.num_classes
        if num_classes is None:
            raise ConfigError("num_classes is unknown: pass num_classes= (background included)")
        model, provenance = build_segmenter(
            arch, num_classes, in_channels or self.in_channels,
            self.model_kwargs if model_kwargs is None else model_kwargs,
            encoder_weights=self.encoder_weights)
        if provenance is not None:
            self._start_weights = provenance.to_dict()
        return model

    def start_weights(self) -> dict[str, Any] | None:
        """Where the encoder's pretrained weights came from (``encoder_weights``), if any."""
        return self._start_weights

    def describe_data(self) -> str | None:
        """``voc, 21 classes, 1,464 train + 1,449 val images``."""
        kinds = sorted({_data_kind(d, self.data_format) for d in self._data if d is not None})
        sizes = [f"{len(ds):,} {name}" for ds, name in ((self.train_set, "train"),
                                                       (self.eval_set, "val")) if ds is not None]
        return f"{'/'.join(kinds)}, {self.num_classes} classes, {' + '.join(sizes)} images"

    @classmethod
    def check_build_kwargs(cls, build: dict[str, Any]) -> str | None:
        """The default checks, and ``model_kwargs`` a map naming no file for timm to load."""
        why = super().check_build_kwargs(build)  # build_keys, build_counts
        kwargs = build.get("model_kwargs")
        if why or kwargs is None:
            return why
        if not isinstance(kwargs, dict):
            return f"metadata field 'build.model_kwargs' is {kwargs!r:.40}, not a map"
        loading = sorted(k for k in kwargs if k in TIMM_LOADING or "pretrained" in str(k))
        if loading:
            return (f"metadata field 'build.model_kwargs' sets {', '.join(loading)}, which "
                    f"would load or fetch weights")
        return None

    def build_kwargs(self, model: nn.Module) -> dict[str, Any]:
        return {"num_classes": self.num_classes or output_classes(model),
                "in_channels": self.in_channels, "model_kwargs": self.model_kwargs,
                "class_names": self.class_names, "ignore_index": self.ignore_index}

    def check_model(self, model: nn.Module) -> None:
        """Refuse a model whose class maps do not match the data's classes, or that cannot take
        inputs of ``input_size`` (PAN's pyramid pooling needs 128 px)."""
        out = output_classes(model)
        if self.num_classes is not None and out is not None and out != self.num_classes:
            raise ConfigError(f"the model predicts {out} classes but the data has "
                              f"{self.num_classes}: build it with classes={self.num_classes}")
        x = self.example_inputs(model).to(next(model.parameters()).device)
        was_training = model.training
        try:
            with torch.no_grad():
                model.eval()(x)
        except RuntimeError as e:
            first = (str(e).strip().splitlines() or ["failed"])[0][:120]
            raise ConfigError(f"{type(model).__name__} cannot take {self.input_size} px inputs "
                              f"({first}): pass a larger input_size, e.g. "
                              f"{max(128, 2 * self.input_size)}") from None
        finally:
            model.train(was_training)

    def example_inputs(self, model: nn.Module) -> torch.Tensor:
        return torch.randn(1, self.in_channels, self.input_size, self.input_size,
                           generator=torch.Generator().manual_seed(0)).to(_device_of(model))

    def timing_inputs(self, model: nn.Module) -> torch.Tensor:
        return self.example_inputs(model)

    def ignored_layers(self, model: nn.Module) -> list[Any]:
        """Head conv, attention blocks and what the timm model of a ``tu-`` encoder needs
        (:mod:`..timm_rules`; see the module docstring).
        GroupNorms with several groups (FPN's decoder) are pruned by equal cuts per norm group
        (:meth:`~autoprune.groups.PruningGraph.channels_to_remove`)."""
        ignored: list[nn.Module] = timm_rules.ignored_layers(timm_rules.make_traceable(model))
        head = head_conv(model)
        if head is not None:
            ignored.append(head)
        for m in model.modules():
            if "Attention" in type(m).__name__:
                ignored.extend(m.modules())
        return list({id(m): m for m in ignored}.values())

    def calibration_inputs(self, limit: int) -> list[torch.Tensor]:
        """The first ``limit`` training images without their augmentation (an INT8 model's
        calibration data)."""
        if self.train_set is None:
            raise ConfigError("quantize='int8' calibrates on the train split: pass train_data")
        return batches_of(without_augmentation(self.train_set), self.batch_size, limit)

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        if self.eval_set is None:
            raise ConfigError("evaluation needs eval_data (an images/ + masks/ folder, a Dataset "
                              f"or '{SCENES}')")
        if self._eval_batches is None:
            self._eval_batches = CachedBatches(make_loader(
                self.eval_set, self.batch_size, shuffle=False, num_workers=self.num_workers),
                device=self.device)
        num_classes, keys = self.metric_classes(model)
        return evaluate_iou(model, self._eval_batches, device=self.device,
                            num_classes=num_classes, class_keys=keys,
                            ignore_index=self.ignore_index)

    def metric_classes(self, model: nn.Module) -> tuple[int, list[str]]:
        """The class count the metrics cover and each class's key (``iou_<key>``)."""
        num_classes = self.num_classes or output_classes(model)
        keys = [class_key(n) for n in self.class_names or range(num_classes)]
        if len(set(keys)) < len(keys):  # names that differ only in punctuation
            keys = [f"{i}_{k}" for i, k in enumerate(keys)]
        return num_classes, keys

    def incremental_eval(self) -> BoundedMIoU | None:
        """mIoU batch by batch with sure bounds, for the adaptive analysis's early stop
        (:mod:`.incremental`)."""
        return BoundedMIoU(self) if self.eval_set is not None and self.metric == "miou" \
            else None


def _first_item(ds: Dataset) -> Any:
    if len(ds) == 0:
        raise ConfigError("the dataset is empty: check the data (no images were found)")
    return ds[0]


def _declared_names(*datasets: Dataset | None) -> list[str] | None:
    for ds in datasets:
        names = getattr(ds, "classes", None) if ds is not None else None
        if names is not None:
            return list(names)
    return None


def _declared_classes(*datasets: Dataset | None) -> int | None:
    names = _declared_names(*datasets)
    return len(names) if names else None


def _device_of(model: nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")

"""Classification adapter: timm / torchvision models, ImageFolder / Dataset / Fashion-MNIST data
(read by :mod:`.data`), top-1/top-5 metrics. With :mod:`.data` (torchvision's ImageFolder), the
modules of the classification task that import timm or torchvision."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping

import torch
import torch.nn as nn
import timm
import torchvision

from ...flow.config import settings_of
from ...flow.int8 import batches_of
from ...flow.options import check_numbers
from ...engine.data import CachedBatches, check_limits, make_loader
from ...errors import ConfigError
from ...flow.training import FitConfig, evaluate_topk, pick_device
from . import models as torchvision_models
from .. import timm_rules
from ..supervised import SupervisedFit
from .incremental import ShuffledTop1
from .settings import ClassificationSettings
from .pretrained import create_pretrained, is_hub_spec, pretrained_data_config
from .starting import FINE_TUNE_LR, SCRATCH_LR, check_pretrained, kept_from as _kept_from
from .data import (DEFAULT_DATA, FASHION_MNIST, balanced_indices, data_kind as _kind,
                   dataset_classes, is_class_index as _is_class_index, resolve_dataset,
                   targets_of as _targets, val_split as _val_split)
from . import yolo_names
from .input_sizes import check_input_size, check_model_input_size


def resolve_arch(name: str) -> str:
    """Canonical architecture key ``timm/<name>``, ``torchvision/<name>`` or
    ``ultralytics/<name>`` (a YOLO classification model: ``yolo11n-cls``, :mod:`.yolo_names`).

    A bare name is looked up in timm first, then torchvision, then Ultralytics; prefix
    ``torchvision/``, ``timm/`` or ``ultralytics/`` to choose.
    """
    if yolo_names.canonical(name):
        return yolo_names.canonical(name)
    source, _, bare = name.rpartition("/")
    if source not in ("", "timm", "torchvision"):
        raise ConfigError(f"unknown model source {source!r} in {name!r}: use 'timm/<name>', "
                          f"'torchvision/<name>' or a bare name")
    if source in ("", "timm") and timm.is_model(bare):
        timm_rules.check_supported(bare)  # refused by name, before any work
        return f"timm/{bare}"
    if source in ("", "torchvision") and bare in torchvision.models.list_models(
            module=torchvision.models):
        torchvision_models.check_supported(bare)  # refused by name, before any work
        return f"torchvision/{bare}"
    if source in ("", "torchvision") and bare in torchvision.models.list_models():
        raise ConfigError(f"torchvision model {bare!r} is not an image classifier (a detection, "
                          f"segmentation, video or quantized model): the classification task "
                          f"takes the names of torchvision.models.list_models(module="
                          f"torchvision.models)")
    why = yolo_names.refusal(name)
    if why:
        raise ConfigError(why)
    raise ConfigError(f"unknown model name {name!r}: not a timm, torchvision or YOLO "
                      f"classification model (e.g. resnet18, mobilenetv3_small_100, "
                      f"efficientnet_b0, mobilenet_v2, yolo11n-cls)")


def arch_of_model(model: nn.Module) -> str | None:
    """The key of a timm or torchvision model object (``timm/<name>``, ``torchvision/<name>``),
    or None when it is neither.

    timm models name their architecture in ``pretrained_cfg``. torchvision models do not: the
    builders defined next to the model's class are run on the meta device (no memory, no weights)
    and the one whose parameter names and shapes are the model's wins; failing that, the one
    builder whose parameter names alone match (a pruned or re-widened copy: the group
    fingerprint then tells it apart).
    """
    cfg = getattr(model, "pretrained_cfg", None) or getattr(model, "default_cfg", None)
    if isinstance(cfg, dict) and cfg.get("architecture"):
        if timm.is_model(cfg["architecture"]):
            return f"timm/{cfg['architecture']}"
    if type(model).__module__.startswith("torchvision.models."):
        return _torchvision_arch(model)
    if yolo_names.is_yolo_classifier(model):
        from .yolo_cls import arch_of
        return arch_of(model)
    return None


def _torchvision_arch(model: nn.Module) -> str | None:
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    num_classes = _output_classes(model)
    same_names = []
    for name in torchvision.models.list_models(module=torchvision.models):
        builder = torchvision.models.get_model_builder(name)
        if builder.__module__ != type(model).__module__:
            continue
        kwargs = {"num_classes": num_classes} if num_classes else {}
        try:
            with torch.device("meta"):
                candidate = builder(weights=None, **kwargs)
        except Exception:  # noqa: BLE001 - a builder that cannot run here is just not a match
            continue
        if type(candidate) is not type(model):
            continue
        theirs = {k: tuple(v.shape) for k, v in candidate.state_dict().items()}
        if theirs == shapes:
            return f"torchvision/{name}"
        if theirs.keys() == shapes.keys():
            same_names.append(name)
    return f"torchvision/{same_names[0]}" if len(same_names) == 1 else None


def build_classifier(arch: str, num_classes: int) -> nn.Module:
    """An untrained classifier (no weights are downloaded)."""
    arch = resolve_arch(arch)
    source, name = arch.split("/", 1)
    if source == yolo_names.SOURCE:
        from .yolo_cls import build
        return build(arch, num_classes)
    if source == "timm":
        model = timm.create_model(name, pretrained=False, num_classes=num_classes)
        if getattr(model, "num_classes", num_classes) != num_classes:  # gemma4_vit_167m_enc
            raise ConfigError(f"timm model {name!r} is a feature encoder without a "
                              f"classification head (timm builds it with num_classes="
                              f"{model.num_classes} whatever is asked): pick a timm "
                              f"classifier, e.g. a name without the '_enc' suffix")
        return timm_rules.make_traceable(model)
    model = torchvision.models.get_model(name, weights=None, num_classes=num_classes)
    return torchvision_models.make_traceable(model)


class ClassificationAdapter(SupervisedFit):
    """Classification task: builds timm/torchvision models, trains with SGD/AdamW + warm-up +
    cosine, evaluates top-1/top-5 on cached evaluation batches."""

    task = "classification"
    metric = "top1"
    higher_is_better = True

    def __init__(self, train_data: Any = None, eval_data: Any = None, *,
                 settings: ClassificationSettings | None = None, model_name: Any = None,
                 data_root: str | None = None, label_smoothing: float = 0.0, seed: int = 0,
                 progress: bool = True, **given: Any):
        """The data (a folder, a file list, a Dataset or ``"fashion-mnist"``) and the settings of
        :class:`~.settings.ClassificationSettings` (where they are documented): ``settings=``, or
        its fields as keywords. ``model_name`` picks a pretrained model's data config;
        ``data_root``: where Fashion-MNIST is kept."""
        s = settings_of(ClassificationSettings, settings, given, self.task)
        self.pretrained = check_pretrained(s.pretrained)
        lr = (FINE_TUNE_LR if self.pretrained else SCRATCH_LR) if s.lr is None else s.lr
        data_config = self._data_config(model_name, s.mean, s.std, s.interpolation)
        check_numbers(whole=True, low=1, batch_size=s.batch_size, input_size=s.input_size)
        check_numbers(whole=True, num_workers=s.num_workers)
        check_numbers(whole=True, low=2, num_classes=s.num_classes)
        check_numbers(lr=lr, above=True)
        check_numbers(weight_decay=s.weight_decay, warmup_epochs=s.warmup_epochs,
                      label_smoothing=label_smoothing)
        is_fashion = lambda d: isinstance(d, str) and d.lower() == FASHION_MNIST
        fashion = is_fashion(train_data)
        native = tuple(data_config.get("input_size") or (3, 224, 224))[-1]
        self.input_size = s.input_size or (32 if fashion or is_fashion(eval_data) else native)
        if self.input_size < 8:
            raise ConfigError(f"input_size={self.input_size} is too small: use 32 or more")
        if isinstance(model_name, str):  # a size its forward refuses: before any data is read
            check_input_size(resolve_arch(model_name), self.input_size, build_classifier)
        self.device = pick_device(s.device)
        self.cfg = FitConfig(lr=lr, optimizer=s.optimizer, weight_decay=s.weight_decay,
                             warmup_epochs=s.warmup_epochs, label_smoothing=label_smoothing,
                             progress=progress, sync_bn=s.sync_bn)
        self.batch_size, self.num_workers, self.seed = s.batch_size, s.num_workers, seed
        self.train_set = self.eval_set = None
        check_limits(train_limit=s.train_limit, eval_limit=s.eval_limit)
        data = dict(input_size=self.input_size, root=data_root, data_config=data_config,
                    data_format=s.data_format)
        if train_data is not None:
            self.train_set = resolve_dataset(train_data, train=True, limit=s.train_limit, **data)
            make_loader(self.train_set, s.batch_size, shuffle=False)  # checks emptiness
        if eval_data is None:  # Fashion-MNIST's test split, or the val list beside a train list
            eval_data = FASHION_MNIST if fashion else _val_split(train_data, s.data_format)
        if eval_data is not None:
            self.eval_set = resolve_dataset(eval_data, train=False, limit=s.eval_limit, **data)
        self.num_classes = self._check_classes(s.num_classes)
        self.data_config, self._start_weights, self._head_kept = data_config, None, False
        own = self.pretrained or s.mean is not None or s.std is not None or s.interpolation
        self._normalisation = {k: list(v) if isinstance(v, tuple) else v
                               for k, v in data_config.items()
                               if k in ("mean", "std", "interpolation")} if own else {}
        self._data = (train_data, eval_data)
        self._data_root, self._data_format = data_root, s.data_format
        self._eval_batches = None

    @classmethod
    def from_settings(cls, settings: ClassificationSettings, inputs: Mapping[str, Any],
                      flow: Any) -> "ClassificationAdapter":
        """The adapter of a ``train`` call; ``pretrain_weights="IMAGENET"`` (PaddleX's word, or
        any hub name) counts as ``pretrained``, and the model's name picks the pretrained data
        config."""
        changes = _kept_from(flow.pretrain_weights, dataclasses.asdict(settings))
        if not settings.pretrained and is_hub_spec(flow.pretrain_weights):
            changes["pretrained"] = flow.pretrain_weights
        return cls(**{k: v for k, v in inputs.items() if k != "model"},
                   settings=dataclasses.replace(settings, **changes),
                   model_name=inputs.get("model"), seed=flow.seed, progress=flow.progress)

    def _data_config(self, model_name: Any, mean: Any, std: Any,
                     interpolation: str | None) -> dict[str, Any]:
        """Normalisation, interpolation, crop and input size: the pretrained config of
        ``model_name`` when starting from pretrained weights (else ImageNet's normalisation),
        with the user's ``mean`` / ``std`` / ``interpolation`` on top."""
        config = dict(DEFAULT_DATA)
        if self.pretrained and isinstance(model_name, str) and yolo_names.canonical(model_name):
            raise ConfigError(f"pretrained={self.pretrained!r} with {model_name!r}: a YOLO "
                              f"classification model's weights are Ultralytics' .pt: pass "
                              f"model='{yolo_names.stem(model_name)}.pt' (a local file, or from "
                              f"Ultralytics' weights dir) instead of pretrained")
        if self.pretrained and isinstance(model_name, str):
            config.update(pretrained_data_config(resolve_arch(model_name), self.pretrained))
        for key, value in (("mean", mean), ("std", std)):
            if value is not None:
                if not isinstance(value, (list, tuple)) or len(value) not in (1, 3) or not all(
                        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
                    raise ConfigError(f"{key}={value!r:.40} must be one number per channel, "
                                      f"e.g. [0.485, 0.456, 0.406]")
                config[key] = tuple(float(v) for v in value)
        if interpolation is not None:
            if interpolation not in ("bilinear", "bicubic", "nearest", "lanczos"):
                raise ConfigError(f"interpolation={interpolation!r} must be bilinear, bicubic, "
                                  f"nearest or lanczos")
            config["interpolation"] = interpolation
        return config

    def prepare_model(self, model: Any, pretrain_weights: Any,
                      save_dir: Path) -> tuple[Any, Any]:
        """With ``pretrained`` (or a hub name as ``pretrain_weights``): the model built with
        those weights and a fresh head for the data's classes (fine-tuned from there); else the
        model as given. A YOLO classification ``.pt`` (``yolo11n-cls.pt``): its weights, with a
        new head for the data's classes where they differ."""
        if yolo_names.is_weights_name(model):
            from .yolo_cls import load_weights
            module, self._start_weights, self._head_kept = load_weights(model, self.num_classes)
            return module, pretrain_weights
        if not self.pretrained:
            return model, pretrain_weights
        if is_hub_spec(pretrain_weights):  # PaddleX's pretrain_weights="IMAGENET"
            pretrain_weights = None
        if pretrain_weights is not None:
            raise ConfigError(f"pretrained={self.pretrained!r} and pretrain_weights="
                              f"{pretrain_weights} both name starting weights: pass one")
        if not isinstance(model, str):
            raise ConfigError(f"pretrained={self.pretrained!r} needs a model name (e.g. "
                              f"'resnet18'), not a model object: load the weights into your "
                              f"object yourself, or pass its name")
        if self.num_classes is None:
            raise ConfigError("pretrained weights get a new head for your classes: pass "
                              "num_classes= or data that declares its classes")
        module, provenance, config = create_pretrained(resolve_arch(model), self.num_classes,
                                                       self.pretrained)
        self._start_weights = provenance.to_dict()
        self._head_kept = config.get("num_classes") == self.num_classes
        return module, None

    def starts_trained(self) -> bool:
        """True when the pretrained weights came with their own head for as many classes as
        the data has (ImageNet's 1,000 on ImageNet): the model can be pruned as published."""
        return self._start_weights is not None and self._head_kept

    def start_weights(self) -> dict[str, Any] | None:
        return self._start_weights

    def data_settings(self) -> dict[str, Any]:
        """A pretrained model's (or the user's) normalisation and interpolation, kept with its
        checkpoints so that they are evaluated on the same inputs."""
        return dict(self._normalisation)

    def describe_data(self) -> str | None:
        """``imagefolder, 10 classes, 12,000 train + 1,000 val images``."""
        kinds = {_kind(d) for d in self._data if d is not None}
        sizes = [f"{len(ds):,} {name}" for ds, name in ((self.train_set, "train"),
                                                       (self.eval_set, "val")) if ds is not None]
        return f"{'/'.join(sorted(kinds))}, {self.num_classes} classes, {' + '.join(sizes)} images"

    def _check_classes(self, num_classes: int | None) -> int | None:
        found = [c for c in (dataset_classes(self.train_set) if self.train_set else None,
                             dataset_classes(self.eval_set) if self.eval_set else None) if c]
        if len(found) == 2 and found[0] != found[1]:
            raise ConfigError(f"training and evaluation data have different classes "
                              f"({len(found[0])} vs {len(found[1])}): "
                              f"use the same class folders in both")
        if found and num_classes is not None and num_classes != len(found[0]):
            raise ConfigError(f"num_classes={num_classes} but the data has {len(found[0])} classes "
                              f"({', '.join(map(str, found[0][:5]))}...): pass "
                              f"num_classes={len(found[0])} or omit it")
        if found and len(found[0]) < 2:
            raise ConfigError(f"the data has a single class ({found[0][0]!r}): a classifier needs "
                              f"at least two classes; add a folder of images for each other class")
        return num_classes if num_classes is not None else (len(found[0]) if found else None)

    def check_item(self, name: str, item: Any, channels: int) -> None:
        """Also refuse labels that are not class indices (a Dataset returning 'cat')."""
        super().check_item(name, item, channels)
        label = item[1]
        if not _is_class_index(label):
            raise ConfigError(f"{name} gives labels like {label!r:.30} ({type(label).__name__}): "
                              f"labels must be integer class indices 0 .. num_classes - 1; map "
                              f"each class name to its index")

    # -- the TaskAdapter protocol ----------------------------------------------------------------
    def build(self, arch: str, num_classes: int | None = None, **_: Any) -> nn.Module:
        num_classes = num_classes or self.num_classes
        if num_classes is None:
            raise ConfigError("num_classes is unknown: pass num_classes= or data that declares "
                              "its classes")
        return build_classifier(arch, num_classes)

    def build_kwargs(self, model: nn.Module) -> dict[str, Any]:
        return {"num_classes": self.num_classes or _output_classes(model)}

    def arch_key(self, model: str | nn.Module) -> str | None:
        """``timm/<name>`` or ``torchvision/<name>`` of a model name (ConfigError if unknown) or
        of a timm/torchvision model object (None if unknown)."""
        if isinstance(model, str):
            return resolve_arch(model)
        arch = arch_of_model(model)
        if arch and arch.startswith("torchvision/"):
            torchvision_models.check_supported(arch.split("/", 1)[1])
        if arch and arch.startswith("timm/"):
            timm_rules.check_supported(arch.split("/", 1)[1])
        return arch

    def check_model(self, model: nn.Module) -> None:
        """Refuse a model whose output size does not match the data's classes."""
        out = _output_classes(model)
        if self.num_classes is not None and out is not None and out != self.num_classes:
            raise ConfigError(f"the model predicts {out} classes but the data has "
                              f"{self.num_classes}: build it with num_classes={self.num_classes}")
        check_model_input_size(model, self.input_size)

    def example_inputs(self, model: nn.Module) -> torch.Tensor:
        return torch.randn(1, 3, self.input_size, self.input_size,
                           generator=torch.Generator().manual_seed(0)).to(_device_of(model))

    def timing_inputs(self, model: nn.Module) -> torch.Tensor:
        return self.example_inputs(model)

    def ignored_layers(self, model: nn.Module) -> list[Any]:
        """Nothing for most models (the classifier produces the output, which the core never
        prunes); a torchvision ShuffleNetV2 is made traceable and its shuffled convs are kept
        (:mod:`.models`); a timm model is made traceable and an attention model keeps all but its
        blocks' inner widths (:mod:`..timm_rules`)."""
        torchvision_models.make_traceable(timm_rules.make_traceable(model))
        return torchvision_models.ignored_layers(model) + timm_rules.ignored_layers(model)

    def _eval_indices(self, limit: int) -> list[int]:
        """A subset takes from every class in turn when the labels are known."""
        targets = _targets(self.eval_set)
        return balanced_indices(targets, limit) if targets is not None else \
            super()._eval_indices(limit)

    def calibration_inputs(self, limit: int) -> list[torch.Tensor]:
        """Up to ``limit`` images of the train split (every class in turn) through the
        evaluation transforms, in batches (an INT8 model's calibration data)."""
        train_data = self._data[0]
        if train_data is None:
            raise ConfigError("quantize='int8' calibrates on the train split: pass train_data")
        ds = resolve_dataset(train_data, train=False, split="train", limit=limit,
                             input_size=self.input_size, root=self._data_root,
                             data_config=self.data_config, data_format=self._data_format)
        return batches_of(ds, self.batch_size, limit)

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        if self.eval_set is None:
            raise ConfigError("evaluation needs eval_data (a validation folder or Dataset)")
        if self._eval_batches is None:
            self._eval_batches = CachedBatches(make_loader(
                self.eval_set, max(self.batch_size, 128), shuffle=False,
                num_workers=self.num_workers), device=self.device)
        k = min(5, self.num_classes or 5)
        return evaluate_topk(model, self._eval_batches, device=self.device,
                             topk=(1, k) if k > 1 else (1,))

    def incremental_eval(self) -> ShuffledTop1 | None:
        """Top-1 image by image in a seeded random order (the adaptive analysis's early stop,
        :mod:`.incremental`); none for a subclass that evaluates its own way."""
        mine = type(self).evaluate is ClassificationAdapter.evaluate and self.metric == "top1"
        return ShuffledTop1(self) if mine and self.eval_set is not None else None


def _output_classes(model: nn.Module) -> int | None:
    get = getattr(model, "get_classifier", None)  # timm
    head = get() if callable(get) else None
    if head is None:
        linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
        head = linears[-1] if linears else None
    return getattr(head, "out_features", None)


def _device_of(model: nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")

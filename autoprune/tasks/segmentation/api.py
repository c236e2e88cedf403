"""One-call segmentation pruning for segmentation-models-pytorch, PaddleX style.

Three steps (or one call that does all three)::

    from autoprune import segmentation as seg
    # 1. train: out/baseline/best.pt
    seg.train("unet", "resnet18", train_data="fashion-scenes", epochs=10, save_dir="out")
    # 2. sensitivities of the trained model on the validation set
    seg.analyze_sensitivity("out/baseline/best.pt", "fashion-scenes", "out/sens.json")
    # 3. prune by a tolerated mIoU loss (or pruned_flops=0.4) and retrain: out/pruned/best.pt
    r = seg.train("unet", "resnet18", train_data="fashion-scenes", epochs=10,
                  pretrain_weights="out/baseline/best.pt", sensitivities_file="out/sens.json",
                  eval_metric_loss=0.05, save_dir="out")
    model = seg.load_model(r.pruned_path)

Data: ``"fashion-scenes"`` (Fashion-MNIST garments pasted on textured backgrounds; mask 0 =
background, ``c + 1`` = garment class ``c``; 11 classes; built in memory), a folder holding
``images/`` and ``masks/`` (PNG class indices, same file names; ``ignore_index`` pixels, 255 by
default, count nowhere), or a torch Dataset of ``(image (C, H, W), mask (H, W))``.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Mapping

import torch
import torch.nn as nn

from ...flow import checkpoints, run
from ...flow.checkpoints import checkpoint_meta
from ...engine.sensitivity import DEFAULT_RATIOS
from ..base import TrainResult
from .adapter import SegmentationAdapter
from .models import resolve_arch, skip_unused_modules


def train(model: str | nn.Module = "unet", encoder: str | None = None, *, train_data: Any,
          eval_data: Any = None, num_classes: int | None = None, epochs: int = 10,
          batch_size: int = 8, lr: float = 1e-3, pretrain_weights: str | os.PathLike | None = None,
          sensitivities_file: str | os.PathLike | None = None,
          eval_metric_loss: float | None = None, pruned_flops: float | None = None,
          pruned_latency: float | None = None, latency_device: str = "cpu",
          latency_threads: int | None = None, latency_batch: int = 1,
          save_dir: str | os.PathLike = "output",
          device: str = "auto", input_size: int | None = None, in_channels: int = 3,
          model_kwargs: dict[str, Any] | None = None, encoder_weights: str | None = None,
          class_names: list[str] | None = None, ignore_index: int = 255,
          optimizer: str = "adamw", weight_decay: float = 1e-4, warmup_epochs: float = 0.5,
          dice_weight: float = 1.0, pretrain_epochs: int | None = None,
          criterion: str = "l1_norm", round_to: int | None = None,
          ratios: Iterable[float] = DEFAULT_RATIOS, num_workers: int = 0,
          train_limit: int | None = None, eval_limit: int | None = None, seed: int = 0,
          progress: bool = True,
          sensitivity_options: Mapping[str, Any] | None = None,
          resume: bool = False, sync_bn: bool = False,
          distill: bool | dict[str, float] = False, prune_steps: int = 1) -> TrainResult:
    """Train an smp segmentation model, and prune it when ``sensitivities_file`` is given.

    model / encoder: an smp architecture (unet, unetplusplus, fpn, deeplabv3plus, pspnet, linknet,
    manet, pan, ...) and encoder (resnet18 (default), resnet34, mobilenet_v2, efficientnet-b0, ...);
    ``model="unet/resnet18"`` works too, as does an smp ``nn.Module``. Encoders start from random
    weights unless ``encoder_weights`` (a local file of encoder weights; nothing is downloaded)
    or ``pretrain_weights`` (a whole trained model) is given.
    train_data / eval_data: ``"fashion-scenes"`` (eval defaults to scenes of its test split;
    ``train_limit`` / ``eval_limit`` set the scene counts, 1000 / 200), an ``images/`` +
    ``masks/`` folder, or a Dataset. Images are resized to ``input_size`` (a multiple of 32;
    64 for scenes, 256 for folders). ``model_kwargs`` go to the smp constructor.

    sensitivities_file, eval_metric_loss, pruned_flops, pruned_latency (and latency_device,
    latency_threads, latency_batch), pretrain_epochs: as in
    :func:`autoprune.classification.train` (None -> plain training; a new or existing path; or
    "DEFAULT"). Training: Dice + cross-entropy, AdamW, warm-up + cosine, AMP on CUDA; the
    checkpoint with the best mIoU is kept. Outputs in ``save_dir``: ``baseline/best.pt`` (all
    that plain training writes),
    ``pruned/best.pt``, ``report.json|md|csv`` (metrics ``miou`` and ``iou_<class>``) and
    ``sensitivity.png``.

    resume: ``True`` continues an interrupted run called with the same arguments, as in
    :func:`autoprune.classification.train` (each stage from its ``train_state.pt``).
    sync_bn: as in :func:`autoprune.classification.train` (``SyncBatchNorm`` under torchrun).
    distill: retrain the pruned model against the unpruned base model as a frozen teacher
    (``True``, or ``{"alpha": 0.5, "temperature": 4.0}``, the defaults): the loss is
    ``(1 - alpha) * task loss + alpha * KD``, KD being the KL divergence of the softened
    per-pixel class probabilities, averaged over the pixels (scaled by T²). Works under
    torchrun and with ``resume``. Off by default.
    prune_steps: reach the target in that many equal steps (the same final channels as one
    step), retraining ``epochs // prune_steps`` epochs after each (the last step the
    remainder; the steps before the last in ``save_dir/pruned_step<k>/``).
    """
    torch.manual_seed(seed)
    adapter = SegmentationAdapter(
        train_data, eval_data, num_classes=num_classes, input_size=input_size,
        in_channels=in_channels, model_kwargs=model_kwargs, class_names=class_names,
        ignore_index=ignore_index, encoder_weights=encoder_weights, batch_size=batch_size, lr=lr,
        optimizer=optimizer, weight_decay=weight_decay, warmup_epochs=warmup_epochs,
        dice_weight=dice_weight, device=device, num_workers=num_workers,
        train_limit=train_limit, eval_limit=eval_limit, seed=seed, progress=progress,
        sync_bn=sync_bn)
    if isinstance(model, str):
        model = resolve_arch(model, encoder, default_encoder="resnet18")
    else:
        skip_unused_modules(model, size=adapter.input_size, in_channels=in_channels)
    return run.train(adapter, model, **run.flow_settings(locals()))


def analyze_sensitivity(model_or_checkpoint: str | os.PathLike | nn.Module, eval_data: Any,
                        save_file: str | os.PathLike, *, encoder: str | None = None,
                        num_classes: int | None = None,
                        pretrain_weights: str | os.PathLike | None = None,
                        input_size: int | None = None, batch_size: int = 8,
                        device: str = "auto", criterion: str = "l1_norm",
                        ratios: Iterable[float] = DEFAULT_RATIOS, eval_limit: int | None = None,
                        num_workers: int = 0, progress: bool = True,
                        sensitivity_options: Mapping[str, Any] | None = None
                        ) -> dict[str, dict[float, float]]:
    """Measure a trained model's sensitivities (relative mIoU loss per group and ratio) on
    ``eval_data`` into ``save_file`` (resumable).

    ``model_or_checkpoint``: a checkpoint saved by ``train`` (architecture, classes, input size
    and ignore index come from it), a model name (``"unet/resnet18"``, or ``"unet"`` plus
    ``encoder``) plus ``pretrain_weights``, or a model object.
    """
    settings: dict[str, Any] = {}
    is_file = isinstance(model_or_checkpoint, (str, os.PathLike)) and \
        Path(model_or_checkpoint).is_file()
    if is_file:
        meta = checkpoint_meta(model_or_checkpoint)
        settings = {k: v for k, v in meta.get("build", {}).items()
                    if k in ("in_channels", "model_kwargs", "class_names", "ignore_index")}
        num_classes = num_classes or meta.get("build", {}).get("num_classes")
        input_size = input_size or meta.get("input_size")
    elif isinstance(model_or_checkpoint, str):
        model_or_checkpoint = resolve_arch(model_or_checkpoint, encoder)
    adapter = SegmentationAdapter(None, eval_data, num_classes=num_classes, input_size=input_size,
                                  batch_size=batch_size, device=device, eval_limit=eval_limit,
                                  num_workers=num_workers, progress=progress, **settings)
    return run.analyze_sensitivity(adapter, model_or_checkpoint, save_file,
                                   pretrain_weights=pretrain_weights, criterion=criterion,
                                   ratios=ratios, progress=progress,
                                   sensitivity_options=sensitivity_options)


def load_model(path: str | os.PathLike, base_model: nn.Module | None = None) -> nn.Module:
    """Load a checkpoint written by ``train`` (pruned or not), weights-only, in eval mode."""
    meta = checkpoint_meta(path)
    build = meta.get("build", {})
    adapter = SegmentationAdapter(input_size=meta.get("input_size") or 64, progress=False,
                                  **{k: v for k, v in build.items()
                                     if k in ("num_classes", "in_channels", "model_kwargs",
                                              "class_names", "ignore_index")})
    return checkpoints.load_model(path, adapter, base_model=base_model)


__all__ = ["TrainResult", "analyze_sensitivity", "load_model", "train"]

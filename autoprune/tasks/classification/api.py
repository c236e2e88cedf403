"""One-call classification pruning, PaddleX style.

Three steps (or one call that does all three)::

    from autoprune import classification as cls
    # 1. train: out/baseline/best.pt
    cls.train("resnet18", "fashion-mnist", epochs=3, save_dir="out")
    # 2. sensitivities of the trained model on the validation set
    cls.analyze_sensitivity("out/baseline/best.pt", "fashion-mnist", "out/sens.json")
    # 3. prune by a tolerated loss (or pruned_flops=0.4) and retrain: out/pruned/best.pt
    r = cls.train("resnet18", "fashion-mnist", epochs=3, pretrain_weights="out/baseline/best.pt",
                  sensitivities_file="out/sens.json", eval_metric_loss=0.05, save_dir="out")
    model = cls.load_model(r.pruned_path)

Grayscale Fashion-MNIST is repeated to 3 channels so ImageNet-style (3-channel) models take it.
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
from .adapter import ClassificationAdapter


def train(model: str | nn.Module, train_data: Any, eval_data: Any = None, *,
          num_classes: int | None = None, epochs: int = 10, batch_size: int = 64,
          lr: float = 0.05, pretrain_weights: str | os.PathLike | None = None,
          sensitivities_file: str | os.PathLike | None = None,
          eval_metric_loss: float | None = None, pruned_flops: float | None = None,
          pruned_latency: float | None = None, latency_device: str = "cpu",
          latency_threads: int | None = None, latency_batch: int = 1,
          save_dir: str | os.PathLike = "output",
          device: str = "auto", input_size: int | None = None, optimizer: str = "sgd",
          weight_decay: float = 5e-4, warmup_epochs: float = 0.5,
          pretrain_epochs: int | None = None, criterion: str = "l1_norm",
          round_to: int | None = None, ratios: Iterable[float] = DEFAULT_RATIOS,
          num_workers: int = 0, train_limit: int | None = None, eval_limit: int | None = None,
          seed: int = 0, progress: bool = True,
          sensitivity_options: Mapping[str, Any] | None = None,
          resume: bool = False, sync_bn: bool = False,
          distill: bool | dict[str, float] = False, prune_steps: int = 1) -> TrainResult:
    """Train a classifier, and prune it when ``sensitivities_file`` is given.

    model: a timm or torchvision name ("resnet18", "mobilenetv3_small_100", "torchvision/
    mobilenet_v2", ...) or an ``nn.Module``. train_data / eval_data: an ImageFolder root, a torch
    Dataset of (image, label), or ``"fashion-mnist"`` (eval defaults to its test split).

    sensitivities_file: None -> plain training; an existing path -> use it (missing points are
    measured on eval_data); a new path -> measure and save there (resumable); "DEFAULT" -> the
    bundled profile for this architecture. Ratios come from ``eval_metric_loss`` (tolerated
    relative loss per group, 0.05 by default) or from ``pruned_flops`` (fraction of FLOPs to
    remove); giving both is an error. ``pruned_latency`` (the share of measured latency to
    remove, e.g. 0.5 for 2x faster, on ``latency_device`` with ``latency_threads`` and
    ``latency_batch``) instead of ``pruned_flops``: each sensitivity point is also timed there,
    and ``eval_metric_loss``, if given, caps any group's loss.
    Without ``pretrain_weights`` the base model is trained first (``pretrain_epochs``, default
    ``epochs``), then pruned and retrained for ``epochs``. Outputs go to ``save_dir``:
    ``baseline/best.pt`` (the model trained from the start; plain training writes only this
    stage), ``pruned/best.pt``, ``report.json|md|csv`` and ``sensitivity.png``.

    sensitivity_options: passed to :func:`autoprune.sensitivity` for a new analysis, e.g.
    ``{"early_stop": 0.5}`` (skip a group's larger ratios once its loss passes 0.5),
    ``{"evaluation": "prune"}`` (never masked variants), ``{"batch_variants": 4}`` or
    ``{"eval_images": 500}`` (the analysis on 500 evaluation images, the rest on all).

    resume: after an interruption (Ctrl-C, crash), call again with the same arguments and
    ``resume=True``: a training stage continues after its last finished epoch (from the
    ``train_state.pt`` written next to ``last.pt`` every epoch) with the same LR schedule and
    random states, a finished stage is not trained again, and the sensitivity file keeps its
    measured points. Without ``resume`` training starts over.

    sync_bn: under torchrun on several GPUs, normalise BatchNorm over all ranks' images
    (``SyncBatchNorm``; worth it when each GPU holds a small batch). Ignored in one process.
    distill: retrain the pruned model against the unpruned base model as a frozen teacher
    (``True``, or ``{"alpha": 0.5, "temperature": 4.0}``, the defaults): the loss is
    ``(1 - alpha) * task loss + alpha * KD``, KD being the KL divergence of the softened
    class probabilities (scaled by T²). Works under torchrun and with ``resume``. Off by
    default.
    prune_steps: reach the target in that many equal steps (the same final channels as one
    step), retraining ``epochs // prune_steps`` epochs after each (the last step the
    remainder; the steps before the last in ``save_dir/pruned_step<k>/``).
    """
    torch.manual_seed(seed)
    adapter = ClassificationAdapter(
        train_data, eval_data, num_classes=num_classes, input_size=input_size,
        batch_size=batch_size, lr=lr, optimizer=optimizer, weight_decay=weight_decay,
        warmup_epochs=warmup_epochs, device=device, num_workers=num_workers,
        train_limit=train_limit, eval_limit=eval_limit, seed=seed, progress=progress,
        sync_bn=sync_bn)
    return run.train(adapter, model, **run.flow_settings(locals()))


def analyze_sensitivity(model_or_checkpoint: str | os.PathLike | nn.Module, eval_data: Any,
                        save_file: str | os.PathLike, *, num_classes: int | None = None,
                        pretrain_weights: str | os.PathLike | None = None,
                        input_size: int | None = None, batch_size: int = 128,
                        device: str = "auto", criterion: str = "l1_norm",
                        ratios: Iterable[float] = DEFAULT_RATIOS, eval_limit: int | None = None,
                        num_workers: int = 0, progress: bool = True,
                        sensitivity_options: Mapping[str, Any] | None = None
                        ) -> dict[str, dict[float, float]]:
    """Measure a trained model's sensitivities on ``eval_data`` into ``save_file`` (resumable).

    ``model_or_checkpoint``: a checkpoint saved by ``train`` (architecture, classes and input size
    come from it), a model name plus ``pretrain_weights``, or a model object.
    """
    if isinstance(model_or_checkpoint, (str, os.PathLike)) and Path(model_or_checkpoint).is_file():
        meta = checkpoint_meta(model_or_checkpoint)
        num_classes = num_classes or meta.get("build", {}).get("num_classes")
        input_size = input_size or meta.get("input_size")
    adapter = ClassificationAdapter(None, eval_data, num_classes=num_classes,
                                    input_size=input_size, batch_size=batch_size, device=device,
                                    eval_limit=eval_limit, num_workers=num_workers,
                                    progress=progress)
    return run.analyze_sensitivity(adapter, model_or_checkpoint, save_file,
                                   pretrain_weights=pretrain_weights, criterion=criterion,
                                   ratios=ratios, progress=progress,
                                   sensitivity_options=sensitivity_options)


def load_model(path: str | os.PathLike, base_model: nn.Module | None = None) -> nn.Module:
    """Load a checkpoint written by ``train`` (pruned or not), weights-only, in eval mode."""
    return checkpoints.load_model(path, ClassificationAdapter(), base_model=base_model)


__all__ = ["ClassificationAdapter", "TrainResult", "analyze_sensitivity", "load_model", "train"]

"""What the adapters trained by autoprune's own loop share (classification, segmentation)."""
from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from ..flow.options import check_numbers
from ..engine.checkpoint import export_onnx
from ..engine.data import make_loader, subset
from ..errors import ConfigError
from ..flow.training import Distill, fit_keep_best, kd_loss
from ..flow.contract import TaskAdapter


class SupervisedFit(TaskAdapter):
    """``fit`` for adapters with ``train_set``, ``eval_set``, ``cfg``, ``batch_size``,
    ``num_workers``, ``seed``, ``device``, ``metric`` and, optionally, a ``loss`` callable."""

    distills = True

    def distill_loss(self, student: torch.Tensor, teacher: torch.Tensor,
                     temperature: float) -> torch.Tensor:
        """The distillation term: KL on the softmax over dim 1 at ``temperature``, scaled by T²,
        averaged over the rest (the images; for a segmentation map, the images and pixels)."""
        return kd_loss(student, teacher, temperature)

    def fit(self, model: nn.Module, epochs: int, save_dir: Path,
            meta: dict[str, Any] | None = None, resume: bool = False,
            distill: Distill | None = None) -> nn.Module:
        """Train, evaluate after each epoch, keep ``best.pt`` (by ``self.metric``), ``last.pt``
        and ``train_state.pt``; ``resume=True`` continues from ``train_state.pt``; ``distill``
        adds :meth:`distill_loss` against its frozen teacher."""
        if self.train_set is None:
            raise ConfigError("training needs train_data")
        check_numbers(whole=True, low=1, epochs=epochs)
        loader = make_loader(self.train_set, self.batch_size, shuffle=True,
                             num_workers=self.num_workers, seed=self.seed, drop_last=True,
                             shard=True)  # each torchrun rank reads its share
        cfg = dataclasses.replace(self.cfg, epochs=epochs, seed=self.seed)
        return fit_keep_best(model, loader, cfg, device=self.device,
                             save_dir=save_dir, meta=meta, loss_fn=getattr(self, "loss", None),
                             evaluate=self.evaluate if self.eval_set is not None else None,
                             metric=self.metric, higher_is_better=self.higher_is_better,
                             resume=resume,
                             distill=distill and dataclasses.replace(
                                 distill, kd_loss=distill.kd_loss or self.distill_loss))

    def export_onnx(self, model: nn.Module, path: Path, opset_version: int = 17,
                    dynamic_batch: bool = True) -> Path:
        """``model`` as ONNX at ``path``, on :meth:`example_inputs` (batch 1)."""
        return export_onnx(model, self.example_inputs(model), path, opset_version=opset_version,
                           dynamic_batch=dynamic_batch)

    def with_eval_limit(self, limit: int) -> "SupervisedFit":
        """This adapter evaluating on ``limit`` of its evaluation items (the sensitivity
        analysis' ``eval_images``), those :meth:`_eval_indices` picks."""
        limited = copy.copy(self)
        limited.eval_set = subset(self.eval_set, self._eval_indices(limit))
        limited._eval_batches = None
        return limited

    def _eval_indices(self, limit: int) -> list[int]:
        """The evaluation items a subset of ``limit`` keeps: the first ones."""
        return list(range(min(limit, len(self.eval_set))))

    def check_data(self, model: nn.Module) -> None:
        """Refuse data the model cannot take before any time is spent, from the first item of
        each dataset (:meth:`check_item`)."""
        want = self.example_inputs(model).shape[1]
        for name, dataset in (("train_data", self.train_set), ("eval_data", self.eval_set)):
            if dataset is None or len(dataset) == 0:
                continue
            with torch.random.fork_rng(devices=[]):  # a random augmentation must not shift training
                item = dataset[0]
            self.check_item(name, item, want)

    def check_item(self, name: str, item: Any, channels: int) -> None:
        """Refuse an ``(image, target)`` item whose image is not a ``channels``-channel (C, H, W)
        tensor or array; a task adds its own checks of the target."""
        image = item[0]
        shape = tuple(image.shape) if hasattr(image, "shape") else None  # tensor or array
        if shape is None or len(shape) != 3 or shape[0] != channels:
            raise ConfigError(f"{name} gives images of shape {shape or type(image).__name__} "
                              f"but the model takes {channels}-channel tensors (C, H, W): convert "
                              f"the images, or build the model for their channel count")

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

from ...flow.api import make_analyze, make_load_model, make_train
from ...flow.contract import TrainResult
from ...flow.registry import get_task
from .adapter import ClassificationAdapter

_TASK = get_task("classification")

train = make_train(_TASK, """Train a classifier, and prune it when ``sensitivities_file`` is given.

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

resume: after an interruption (Ctrl-C, crash), call again with ``resume=True`` (the same
``save_dir``; every other setting is read back from ``save_dir/args.yaml``, and one given with
another value is refused): a training stage continues after its last finished epoch (from the
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
""")

analyze_sensitivity = make_analyze(_TASK, "eval_data", """Measure a trained model's sensitivities on
``eval_data`` into ``save_file`` (resumable).

``model_or_checkpoint``: a checkpoint saved by ``train`` (architecture, classes and input size
come from it), a model name plus ``pretrain_weights``, or a model object. The settings are those
of :func:`train` that concern the data and the analysis (``batch_size`` 128 by default,
``eval_limit``, ``device``, ``criterion``, ``ratios``, ``sensitivity_options``...).""")

load_model = make_load_model(_TASK)

__all__ = ["ClassificationAdapter", "TrainResult", "analyze_sensitivity", "load_model", "train"]

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

from ...flow.api import make_analyze, make_load_model, make_train
from ...flow.contract import TrainResult
from ...flow.registry import get_task

_TASK = get_task("segmentation")

train = make_train(_TASK, """\
Train an smp segmentation model, and prune it when ``sensitivities_file`` is given.

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

resume: ``True`` continues an interrupted run (its settings read back from
``save_dir/args.yaml``), as in :func:`autoprune.classification.train` (each stage from its
``train_state.pt``).
sync_bn: as in :func:`autoprune.classification.train` (``SyncBatchNorm`` under torchrun).
distill: retrain the pruned model against the unpruned base model as a frozen teacher
(``True``, or ``{"alpha": 0.5, "temperature": 4.0}``, the defaults): the loss is
``(1 - alpha) * task loss + alpha * KD``, KD being the KL divergence of the softened
per-pixel class probabilities, averaged over the pixels (scaled by T²). Works under
torchrun and with ``resume``. Off by default.
prune_steps: reach the target in that many equal steps (the same final channels as one
step), retraining ``epochs // prune_steps`` epochs after each (the last step the
remainder; the steps before the last in ``save_dir/pruned_step<k>/``).
""")

analyze_sensitivity = make_analyze(_TASK, "eval_data", """Measure a trained model's sensitivities
(relative mIoU loss per group and ratio) on ``eval_data`` into ``save_file`` (resumable).

``model_or_checkpoint``: a checkpoint saved by ``train`` (architecture, classes, input size and
ignore index come from it), a model name (``"unet/resnet18"``, or ``"unet"`` plus ``encoder``)
plus ``pretrain_weights``, or a model object.""")

load_model = make_load_model(_TASK)

__all__ = ["TrainResult", "analyze_sensitivity", "load_model", "train"]

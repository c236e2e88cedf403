"""The supervised training the timm and smp tasks share (the YOLO tasks train with Ultralytics):
``loop.py`` (``fit``: SGD/AdamW, warm-up + cosine, AMP, DDP, resumable random states),
``keep_best.py`` (``fit_keep_best``: ``best.pt`` / ``last.pt`` / ``train_state.pt``), ``distill.py``
(distillation from the unpruned model), ``devices.py`` (``pick_device``), ``metrics.py``
(top-k accuracy). The names are public here."""
from .devices import pick_device
from .distill import DISTILL_DEFAULTS, Distill, check_distill, kd_loss, prepare_teacher
from .keep_best import STATE_FILE, STATE_VERSION, fit_keep_best, read_train_state
from .loop import FitConfig, fit, use_sync_batchnorm, warmup_cosine
from .metrics import evaluate_topk

__all__ = ["DISTILL_DEFAULTS", "Distill", "FitConfig", "STATE_FILE", "STATE_VERSION",
           "check_distill", "evaluate_topk", "fit", "fit_keep_best", "kd_loss", "pick_device",
           "prepare_teacher", "read_train_state", "use_sync_batchnorm", "warmup_cosine"]

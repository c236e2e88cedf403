"""Reading Ultralytics checkpoints safely: ``weights_only`` against Ultralytics' allow-list of
model classes plus autoprune's split-free twins (:mod:`.twins`); a file holding any other class
is refused, never unpickled."""
from __future__ import annotations

import os
import pickle
from typing import Any

import torch
import torch.nn as nn

from ...engine.fast_copy import fast_deepcopy
from ...errors import CheckpointError
from . import offline  # noqa: F401  (first: the offline environment before Ultralytics)
from .console import quiet
from .twins import SPLIT_FREE, patch_model

from ultralytics.nn.tasks import guess_model_task, torch_safe_load  # noqa: E402
from ultralytics.utils import DEFAULT_CFG_DICT  # noqa: E402


def load_ultralytics_file(path: str | os.PathLike) -> Any:
    """The checkpoint at ``path`` as stored, loaded ``weights_only`` against Ultralytics'
    allow-list of model classes plus autoprune's split-free twins: a file holding any other class
    is refused, never unpickled. (Unpickling a checkpoint's module tree takes seconds for a large
    model: a caller with several uses of one file loads it once and passes it on.)"""
    torch.serialization.add_safe_globals(list(SPLIT_FREE))
    with quiet():
        ckpt, _ = torch_safe_load(str(path), safe_only=True)
    return ckpt


def read_ultralytics(path: str | os.PathLike, loaded: Any = None) -> tuple[nn.Module, dict]:
    """``(model, checkpoint)`` of an Ultralytics checkpoint (:func:`load_ultralytics_file`, or
    ``loaded``, what it returned for ``path``: its model is then copied, the checkpoint left as
    it is). The model is float, in eval mode, not yet patched."""
    ckpt = load_ultralytics_file(path) if loaded is None else loaded
    model = ckpt.get("ema") or ckpt.get("model") if isinstance(ckpt, dict) else None
    if not isinstance(model, nn.Module):
        raise TypeError("no model in it")
    model = (model if loaded is None else fast_deepcopy(model)).float()
    model.args = {**DEFAULT_CFG_DICT, **(ckpt.get("train_args") or {})}
    model.pt_path = str(path)
    model.task = getattr(model, "task", None) or guess_model_task(model)
    if not hasattr(model, "stride"):
        model.stride = torch.tensor([32.0])
    return model.eval(), ckpt


def load_ultralytics(path: str | os.PathLike) -> nn.Module:
    """The model of an Ultralytics checkpoint (loaded safely, see :func:`read_ultralytics`),
    float, patched."""
    try:
        model, _ = read_ultralytics(path)
    except (TypeError, KeyError, AttributeError, RuntimeError, EOFError, ValueError,
            pickle.UnpicklingError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        raise CheckpointError(f"{path} is neither an autoprune checkpoint nor an Ultralytics one "
                              f"made of known model classes ({first}): pass a checkpoint "
                              f"written by autoprune or Ultralytics") from None
    return patch_model(model)


__all__ = ["load_ultralytics", "read_ultralytics"]

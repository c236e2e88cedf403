"""The Ultralytics trainer settings a user may pass through ``train_args``: hyper-parameters,
loss weights and augmentations, each a plain number, switch or one of a few words.

Ultralytics unpickles, with ``weights_only=False``, any file that a trainer argument names
(``model``, ``pretrained``, ``distill_model``, ``resume``, a ``cfg`` YAML that sets those...), so
this is an allow-list: any other key is refused, and so is a value of another type (a path where a
number belongs). The same check guards the arguments stored in an Ultralytics ``last.pt`` that a
run resumes from (:func:`check_stored_args`).
"""
from __future__ import annotations

import math
import numbers
import re
from typing import Any, Mapping

from ...errors import CheckpointError, ConfigError

# numbers or switches (Ultralytics reads booleans as 0/1 where it wants numbers)
NUMBERS = frozenset({
    # schedule and optimiser
    "lr0", "lrf", "momentum", "weight_decay", "warmup_epochs", "warmup_momentum",
    "warmup_bias_lr", "nbs", "cos_lr", "patience", "time", "close_mosaic", "fraction", "dropout",
    # loss weights of detection and distillation (a YOLO sub-task adds its own: the adapter's
    # train_arg_numbers)
    "box", "cls", "cls_pw", "dfl", "dlog", "dgrad", "dlam", "dis",
    # augmentation
    "hsv_h", "hsv_s", "hsv_v", "degrees", "translate", "scale", "shear", "perspective", "flipud",
    "fliplr", "bgr", "mosaic", "mixup", "cutmix", "copy_paste", "erasing", "multi_scale",
    # training and validation behaviour
    "single_cls", "rect", "deterministic", "val", "plots", "save_period", "profile",
    "channels_last", "iou", "conf", "max_det", "verbose",
})
# words, each checked against what it may be (a pattern: never a path)
WORDS = {
    "optimizer": r"[A-Za-z][A-Za-z0-9_]{0,20}",      # SGD, AdamW, auto ... (Ultralytics checks)
    "copy_paste_mode": r"flip|mixup",
    "auto_augment": r"randaugment|autoaugment|augmix",
    "amp": r"bf16|fp16",                              # or a switch
    "cache": r"ram",                                   # or a switch; "disk" writes next to images
    "compile": r"default|reduce-overhead|max-autotune|max-autotune-no-cudagraphs",  # or a switch
}
SWITCH_OR_WORD = frozenset({"amp", "cache", "compile"})
FREEZE = "freeze"  # a number of layers, or a list of layer indices
# what autoprune sets itself, and the argument that names it
OWN = {"epochs": "epochs=", "imgsz": "input_size=", "batch": "batch_size=", "device": "device=",
       "workers": "num_workers=", "seed": "seed=", "project": "save_dir=", "name": "save_dir=",
       "data": "data=", "model": "the model argument", "pretrained": "pretrain_weights=",
       "resume": "resume=True", "distill_model": "distill=True"}


def _number(value: Any) -> bool:
    return value is None or (isinstance(value, numbers.Real) and
                             (isinstance(value, bool) or math.isfinite(value)))


def _refusal(key: str, value: Any, more: frozenset[str] = frozenset()) -> str | None:
    """Why ``key: value`` may not reach Ultralytics' trainer, or None (``more``: numeric
    settings a sub-task adds)."""
    if key in OWN:
        return f"train_args may not set {key!r}: autoprune sets it (use {OWN[key]})"
    if key in NUMBERS or key in more:
        ok = _number(value)
    elif key in WORDS:
        ok = (isinstance(value, str) and re.fullmatch(WORDS[key], value) is not None) or \
             (key in SWITCH_OR_WORD and isinstance(value, bool))
    elif key == FREEZE:
        ok = value is None or (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, (list, tuple)) and
            all(isinstance(v, int) and not isinstance(v, bool) for v in value))
    else:
        return (f"train_args key {key!r} is not one of the training settings autoprune passes to "
                f"Ultralytics (hyper-parameters, loss weights and augmentations such as lr0, "
                f"optimizer, mosaic, nbs, patience; a key that names a file is never passed): "
                f"drop it")
    if ok:
        return None
    if key == "cache" and value == "disk":
        return ("train_args cache='disk' writes .npy files next to your images: use "
                "cache='ram' or cache=False")
    kind = "a number" if key in NUMBERS or key in more else \
        "a number of layers or a list of layer indices" if key == FREEZE else \
        "one of " + ", ".join(repr(w) for w in WORDS[key].split("|")) \
        if "|" in WORDS[key] else "a name such as 'AdamW'"
    return f"train_args {key}={value!r:.60} must be {kind}: fix it"


def check_train_args(train_args: Mapping[str, Any] | None,
                     numbers_: frozenset[str] = frozenset()) -> dict[str, Any]:
    """``train_args`` checked against the allow-list (a one-line ConfigError names the first key
    refused and why); ``numbers_``: the numeric settings a YOLO sub-task adds (its loss weights);
    returns a plain copy."""
    if train_args is None:
        return {}
    if not isinstance(train_args, Mapping):
        raise ConfigError(f"train_args={train_args!r:.60} must be a mapping of Ultralytics "
                          f"training settings, e.g. {{'lr0': 0.002, 'optimizer': 'AdamW'}}")
    for key, value in train_args.items():
        why = _refusal(str(key), value, numbers_)
        if why:
            raise ConfigError(why)
    return dict(train_args)


# keys an Ultralytics run records that name a file it would load on resume (weights_only=False)
_LOADS_A_FILE = ("distill_model", "pretrained", "cfg")


def check_stored_args(stored: Mapping[str, Any] | None, path: Any) -> None:
    """Refuse an Ultralytics checkpoint whose recorded trainer arguments would make a resumed run
    load another file (a ``distill_model`` / ``pretrained`` path, a ``cfg`` YAML): autoprune's
    runs never record one, so the file was made elsewhere or edited."""
    for key in _LOADS_A_FILE:
        value = (stored or {}).get(key)
        if value is not None and not isinstance(value, bool):
            raise CheckpointError(f"{path} records {key}={str(value)[:60]!r}, a file that "
                                  f"resuming would load unchecked: it was not written by an "
                                  f"autoprune run; start a new run instead of resuming this one")

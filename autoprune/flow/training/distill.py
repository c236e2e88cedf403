"""Distillation from the unpruned model (``distill=``): the recipe (alpha, temperature), the
frozen teacher and the logit KD loss the supervised loop adds."""
from __future__ import annotations

from dataclasses import dataclass
import math
from typing import Any, Callable, Mapping

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...errors import ConfigError

DISTILL_DEFAULTS = {"alpha": 0.5, "temperature": 4.0}


@dataclass(frozen=True)
class Distill:
    """Knowledge distillation from a frozen ``teacher`` during :func:`fit`: the loss becomes
    ``(1 - alpha) * task loss + alpha * kd_loss(student outputs, teacher outputs, temperature)``."""

    teacher: nn.Module
    alpha: float = DISTILL_DEFAULTS["alpha"]
    temperature: float = DISTILL_DEFAULTS["temperature"]
    kd_loss: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor] | None = None
    recipe: Mapping[str, Any] | None = None  # as the report records it (a task's own recipe)

    @classmethod
    def of(cls, teacher: nn.Module, recipe: Mapping[str, Any]) -> "Distill":
        """The distillation of ``recipe`` (a task's :meth:`distill_recipe`) from ``teacher``:
        logit KD's alpha and temperature when it names them."""
        logit = {k: float(recipe[k]) for k in ("alpha", "temperature") if k in recipe}
        return cls(teacher, **logit, recipe=dict(recipe))


def check_distill(distill: Any) -> dict[str, float] | None:
    """``distill`` as the API takes it (False/None: off; True: the defaults; a mapping with
    ``alpha`` in [0, 1] and ``temperature`` > 0) as ``{"alpha": a, "temperature": t}`` or None;
    anything else is a one-line ConfigError."""
    if distill is None or distill is False:
        return None
    if distill is True:
        return dict(DISTILL_DEFAULTS)
    if not isinstance(distill, dict):
        raise ConfigError(f"distill={distill!r:.60} must be True, False or a mapping such as "
                          f"{{'alpha': 0.5, 'temperature': 4.0}}")
    unknown = sorted(set(map(str, distill)) - set(DISTILL_DEFAULTS))
    if unknown:
        raise ConfigError(f"distill has unknown key(s) {', '.join(unknown)}: use only 'alpha' "
                          f"and 'temperature'")
    out = {**DISTILL_DEFAULTS, **distill}
    for key, value in out.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not math.isfinite(value):
            raise ConfigError(f"distill {key}={value!r:.40} is not a number: pass e.g. "
                              f"{DISTILL_DEFAULTS[key]}")
        out[key] = float(value)
    if not 0.0 <= out["alpha"] <= 1.0:
        raise ConfigError(f"distill alpha={out['alpha']} is outside [0, 1]: the weight of the "
                          f"distillation term, e.g. 0.5")
    if out["temperature"] <= 0:
        raise ConfigError(f"distill temperature={out['temperature']} must be above 0: e.g. 4.0")
    return out


def kd_loss(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """Hinton's logit distillation: KL(softmax(teacher / T) || softmax(student / T)) * T²,
    over dim 1 (the classes), averaged over every other position: the batch for ``(N, C)``
    logits, the batch and the pixels for ``(N, C, H, W)`` (per-pixel KD). 0 when they agree."""
    t = float(temperature)
    classes = student.shape[1]
    s = student.float().movedim(1, -1).reshape(-1, classes)
    q = teacher.detach().float().movedim(1, -1).reshape(-1, classes)
    return F.kl_div(F.log_softmax(s / t, dim=1), F.log_softmax(q / t, dim=1),
                    reduction="batchmean", log_target=True) * (t * t)


def prepare_teacher(teacher: nn.Module, device: torch.device) -> nn.Module:
    """The teacher as distillation uses it: on ``device``, frozen, in eval mode (it is never
    wrapped in DDP and never saved in a training state)."""
    teacher.to(device).eval()
    teacher.requires_grad_(False)
    return teacher

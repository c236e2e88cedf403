"""Ultralytics' detection validator with an NMS that has no time limit: the same results,
independent of the machine's load."""
from __future__ import annotations

import contextlib
from typing import Iterator

from . import offline  # noqa: F401  (first: the offline environment before Ultralytics)

from ultralytics.models.yolo.detect import DetectionValidator  # noqa: E402
from ultralytics.utils import nms  # noqa: E402


@contextlib.contextmanager
def patient_nms() -> Iterator[None]:
    """Ultralytics' NMS stops after 2 s + 0.05 s per image and drops the rest: on a loaded CPU
    that makes mAP (and every sensitivity point) depend on the machine's load. Lift the limit."""
    original = nms.non_max_suppression

    def patient(*args, **kwargs):
        kwargs.setdefault("max_time_img", 1e6)
        return original(*args, **kwargs)

    nms.non_max_suppression = patient
    try:
        yield
    finally:
        nms.non_max_suppression = original


class PatientNMS:
    """A validator mixin (before Ultralytics' validator class in the bases): its NMS without a
    time limit (:func:`patient_nms`); and, when the caller hands it a model that is already its
    own copy (``given_a_copy = True``, as autoprune's evaluation does), no second deep copy of
    that model (Ultralytics copies a standalone model before fusing it: 0.1 s of each of the
    hundreds of evaluations of a YOLO sensitivity analysis)."""

    given_a_copy = False

    def postprocess(self, preds):
        with patient_nms():
            return super().postprocess(preds)

    def get_model(self, model, trainer=None, **kwargs):
        if trainer is None and self.given_a_copy and model is not None:
            return model
        return super().get_model(model, trainer, **kwargs)


class PatientValidator(PatientNMS, DetectionValidator):
    """DetectionValidator whose NMS has no time limit (same results, independent of load)."""


__all__ = ["PatientNMS", "PatientValidator", "patient_nms"]

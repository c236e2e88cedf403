"""A sure upper bound of Ultralytics' mAP over a whole val split, from the images seen so far
(the adaptive analysis's early stop for detection; :mod:`.incremental` feeds it batch by batch).

mAP is not a mean over images: per class, every detection of the split is ranked by confidence
and Ultralytics' ``compute_ap`` integrates the precision envelope over recall (101 points, linear
interpolation between consecutive points of the curve). What the unseen images will add is
unknown, but two things are known before any model runs: the labels of every image (so each
class's unseen ground truths ``k``) and the one-to-one matching (a ground truth is matched by at
most one detection, of its own class, at each IoU threshold).

The bound: per class and IoU threshold, the seen detections ranked by confidence (within equal
confidences, true positives first) behind ``k`` perfect detections ranked above everything
("ideal"). Why it bounds the final AP from above:

1. Dominance. Any prefix of the final ranking holds some seen detections ``A`` (all those above
   a confidence, plus some of those at it) and unseen ones ``B``, with ``tp(B) <= min(|B|, k)``.
   The ideal prefix of the ``k`` perfect detections and the first ``|A|`` seen ones holds
   ``tp' >= tp(A)`` true positives (true positives first within ties), so its recall
   ``(k + tp') / n`` is not lower and its precision ``(k + tp') / (k + |A|)`` is not lower either:
   ``x -> (x + s) / (x + j)`` grows with ``x`` for ``s <= j``, and ``tp(B) <= k``, ``tp(B) <= |B|``.
   So the envelope ``T(x)`` (the best precision at recall ``>= x``) of the final ranking is at
   most the ideal one's, everywhere.
2. Interpolation and sampling. Ultralytics' curve ``f`` interpolates between points at most one
   ground truth (``1/n`` of recall) apart, so ``f(x) <= T(x - 1/n)``; ``f`` does not increase, so
   its 101-point trapezoid is at most its left sum, at most ``integral of T(x - 1/n)`` over
   ``[-h, 1 - h]`` (``h = 0.01``). Hence the final AP is at most ``integral_0^1 T_ideal + 1/n + h``.

mAP50-95 is the mean over the classes with ground truth and the ten IoU thresholds, so the mean
of these bounds bounds it. The bound is loose (it assumes every unseen object found first, and
adds ``1/n + 0.01``): it decides early the points whose mAP fell far below a threshold, after
most of their images, which is what a loss target's points above its crossing are. No sure lower
bound is used (the unseen images may hold any number of confident false positives): 0.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

STEP = 0.01  # Ultralytics' AP is a trapezoid over 101 recall points: this step


def ideal_envelope_area(tp: np.ndarray, conf: np.ndarray, perfect: int, labels: int) -> float:
    """``integral_0^1 T(x) dx`` for one class and IoU threshold: ``T`` the precision envelope of
    ``perfect`` true positives ranked first, then the detections ``tp`` (bool) / ``conf`` ranked
    by confidence with true positives first among equal confidences; ``labels`` ground truths."""
    if labels <= 0:
        return 0.0
    order = np.lexsort((~tp, -conf))  # by confidence, descending; then true positives first
    hits = tp[order].astype(np.float64)
    tpc = perfect + np.cumsum(hits)
    count = perfect + np.arange(1, len(hits) + 1, dtype=np.float64)
    recall = np.concatenate([np.arange(1, perfect + 1, dtype=np.float64), tpc]) / labels
    precision = np.concatenate([np.ones(perfect), tpc / np.maximum(count, 1.0)])
    if not len(recall):
        return 0.0
    envelope = np.maximum.accumulate(precision[::-1])[::-1]  # best precision at this recall or more
    widths = np.diff(np.concatenate([[0.0], recall]))
    return float(np.sum(widths * envelope))


def class_ap_upper(tp: np.ndarray, conf: np.ndarray, seen_labels: int, unseen_labels: int
                   ) -> np.ndarray:
    """Upper bounds of one class's final AP at each IoU threshold (``tp``: ``(n, t)`` bool of its
    seen detections; see the module docstring), capped at 1."""
    labels = seen_labels + unseen_labels
    return np.array([min(1.0, ideal_envelope_area(tp[:, j], conf, unseen_labels, labels)
                         + 1.0 / labels + STEP) for j in range(tp.shape[1])])


def map_upper_bounds(tp: np.ndarray, conf: np.ndarray, pred_cls: np.ndarray,
                     seen_cls: np.ndarray, total_labels: Mapping[int, int]) -> dict[str, float]:
    """``{"map50_95", "map50"}``: sure upper bounds of the whole split's mAPs given the seen
    images' detections (``tp`` ``(n, 10)`` at IoU 0.5:0.95, ``conf``, ``pred_cls``), their
    ground-truth classes ``seen_cls`` and ``total_labels`` (ground truths per class over every
    image of the split)."""
    tp = np.asarray(tp, dtype=bool).reshape(len(conf), 10)
    conf, pred_cls = np.asarray(conf, dtype=np.float64), np.asarray(pred_cls)
    seen = dict(zip(*np.unique(np.asarray(seen_cls).astype(int), return_counts=True)))
    classes = sorted(c for c, n in total_labels.items() if n > 0)
    if not classes:
        return {"map50_95": 0.0, "map50": 0.0}
    per_class = []
    for c in classes:
        mine = pred_cls.astype(int) == c
        got = int(seen.get(c, 0))
        per_class.append(class_ap_upper(tp[mine], conf[mine], got, int(total_labels[c]) - got))
    ap = np.stack(per_class)
    return {"map50_95": float(ap.mean()), "map50": float(ap[:, 0].mean())}


def seen_maps(tp: np.ndarray, conf: np.ndarray, pred_cls: np.ndarray,
              seen_cls: np.ndarray) -> dict[str, float]:
    """``{"map50_95", "map50"}`` of the seen images alone: per class with ground truth among
    them and IoU threshold, the area under the precision envelope of its detections (no perfect
    detection ranked first, no slack; Ultralytics' 101-point curve is within a point or two),
    averaged as mAP is. An estimate (the cost said before an adaptive analysis), not a bound."""
    tp = np.asarray(tp, dtype=bool).reshape(len(conf), 10)
    conf, pred_cls = np.asarray(conf, dtype=np.float64), np.asarray(pred_cls).astype(int)
    seen = dict(zip(*np.unique(np.asarray(seen_cls).astype(int), return_counts=True)))
    if not seen:
        return {"map50_95": 0.0, "map50": 0.0}
    per_class = []
    for c, n in sorted(seen.items()):
        mine = pred_cls == c
        hits, confs = tp[mine], conf[mine]
        per_class.append([ideal_envelope_area(hits[:, j], confs, 0, int(n))
                          for j in range(tp.shape[1])])
    ap = np.array(per_class)
    return {"map50_95": float(ap.mean()), "map50": float(ap[:, 0].mean())}


__all__ = ["STEP", "class_ap_upper", "ideal_envelope_area", "map_upper_bounds", "seen_maps"]

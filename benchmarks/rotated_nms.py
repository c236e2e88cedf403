"""Rotated-box NMS (YOLO OBB) as autoprune's validation runs it against Ultralytics' own.

Ultralytics' NMS for rotated boxes computes the probiou of every pair of candidate boxes, the
boxes of different classes told apart by a large offset; autoprune's (``validator.class_by_class``,
inside ``patient_nms``) computes it within each class only, where a bound shows the result is the
same (checked here: ``equal``). The predictions are those of an untrained head (every class
score below 0.05, above the validator's conf 0.001), as a heavily pruned model gives at a
sensitivity-analysis point: thousands of candidates per image.

    taskset -c 1 python benchmarks/rotated_nms.py          # one thread, one image per case
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from autoprune.tasks.detection import validator  # noqa: E402  (Ultralytics set up offline)

from ultralytics.utils import nms  # noqa: E402

CASES = ((336, 10, 128), (1344, 15, 256))  # anchors, classes (DOTA has 15), input px


def main() -> None:
    torch.set_num_threads(1)
    for anchors, nc, px in CASES:
        g = torch.Generator().manual_seed(5)
        pred = torch.cat((torch.rand(1, 2, anchors, generator=g) * px,
                          torch.rand(1, 2, anchors, generator=g) * 40 + 2,
                          torch.rand(1, nc, anchors, generator=g) * 0.05,
                          (torch.rand(1, 1, anchors, generator=g) - 0.5) * 3), 1)
        args = dict(conf_thres=0.001, iou_thres=0.7, multi_label=True, nc=nc, rotated=True)
        start = time.perf_counter()
        want = nms.non_max_suppression(pred.clone(), max_time_img=1e6, **args)
        full = time.perf_counter() - start
        with validator.patient_nms():
            start = time.perf_counter()
            got = nms.non_max_suppression(pred.clone(), **args)
            grouped = time.perf_counter() - start
        print(f"{px} px, {anchors} anchors x {nc} classes: Ultralytics {full:.2f} s, class by "
              f"class {grouped:.3f} s ({full / grouped:.0f}x), "
              f"equal={torch.equal(got[0], want[0])}",
              flush=True)


if __name__ == "__main__":
    main()

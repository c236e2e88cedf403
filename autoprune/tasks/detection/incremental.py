"""mAP that reports batch by batch with a sure upper bound, for the adaptive analysis's early stop
(:mod:`autoprune.engine.incremental`; the bound and why it holds: :mod:`.map_bound`).

The evaluation is Ultralytics' own validator, run whole as :func:`.evaluation.evaluate` runs it,
in a worker thread: after each batch its ``on_val_batch_end`` callback hands the bound to the
analysis and waits; when the analysis has decided the point it closes the iterator, and the
callback stops the validator (nothing of a stopped evaluation is kept). The last step carries
the validator's own mAP, so a point seen on every image is exactly what ``evaluate`` gives.
"""
from __future__ import annotations

import queue
import threading
from typing import Any, Callable, Iterator

import numpy as np
import torch.nn as nn

from ...engine.bounds import look_points
from ...engine.incremental import Step
from . import evaluation
from .map_bound import map_upper_bounds, seen_maps

# the statistic Ultralytics matches each metric letter's predictions in (one-to-one matching)
TP_KEYS = {"B": "tp", "M": "tp_m", "P": "tp_p"}


class _Stopped(Exception):
    """Raised in the validator's thread once the analysis has what it needs."""


def bounded_metric(adapter: Any) -> tuple[str, str] | None:
    """``(letter, kind)`` of the adapter's metric (``("B", "map50_95")`` for ``map50_95``,
    ``("M", "map50")`` for ``map50_mask``), or None when it is not a mAP of its sources."""
    for name, letter in adapter.metric_sources:
        tail = f"_{name}" if name else ""
        for kind in ("map50_95", "map50"):
            if adapter.metric == f"{kind}{tail}" and letter in TP_KEYS:
                return letter, kind
    return None


class BoundedMAP:
    """``incremental(model)``: per batch of the adapter's validator, a sure upper bound of the
    whole val split's mAP (lower bound 0), computed afresh at the analysis's looks (32 images,
    then x1.5: a bound ranks every detection seen so far) and kept between them, with the mAP
    of the images seen so far (``seen``, at the looks); the last step the validator's own
    value."""

    random_order = False  # a sure bound needs no random order
    resumable = False

    def __init__(self, adapter: Any, letter: str, kind: str):
        self.adapter, self.images = adapter, len(adapter.eval_set)
        self.tp_key, self.kind = TP_KEYS[letter], kind
        self._labels: tuple[Any, dict[int, int]] | None = None  # (dataset, labels per class)

    def _total_labels(self, dataset: Any) -> dict[int, int]:
        """Ground truths per class over every image the validator reads (its labels, once)."""
        if self._labels is None or self._labels[0] is not dataset:
            classes = [np.asarray(label["cls"]).reshape(-1) for label in dataset.labels]
            flat = np.concatenate(classes).astype(int) if classes else np.zeros(0, dtype=int)
            self._labels = (dataset, dict(zip(*map(list, np.unique(flat, return_counts=True)))))
        return self._labels[1]

    def _stats(self, validator: Any) -> tuple[np.ndarray, ...]:
        """``(tp, conf, pred_cls, target_cls)`` of the images the validator has seen."""
        stats = validator.metrics.stats
        if self.tp_key not in stats:
            raise KeyError(f"Ultralytics' validator keeps no {self.tp_key!r} statistics")
        cat = lambda key, shape: (np.concatenate(stats[key], 0) if stats[key]  # noqa: E731
                                  else np.zeros(shape))
        return (cat(self.tp_key, (0, 10)), cat("conf", (0,)), cat("pred_cls", (0,)),
                cat("target_cls", (0,)))

    def at_look(self, validator: Any) -> tuple[float, Callable[[], float]]:
        """``(upper bound, mAP of the images seen alone)`` from the validator's statistics after
        its latest batch; the latter (an estimate: :func:`seen_maps`) as a function of the
        statistics taken at this look, computed only where the estimate's pilot asks."""
        stats = self._stats(validator)
        bounds = map_upper_bounds(*stats, self._total_labels(validator.dataloader.dataset))
        return bounds[self.kind], lambda: seen_maps(*stats)[self.kind]

    def incremental(self, model: nn.Module, start: int = 0) -> Iterator[Step]:
        if start:
            raise ValueError("a bounded mAP evaluation starts from the first image")
        adapter = self.adapter
        validator, net = evaluation.validator_and_copy(adapter, model)
        handed: queue.Queue = queue.Queue()
        go_on, stop = threading.Semaphore(0), threading.Event()
        seen, high, looks = [0], [1.0], look_points(self.images)

        def after_batch(v: Any) -> None:
            if v.seen >= len(v.dataloader.dataset):
                return  # the last batch: its value comes with the validator's result
            value = None
            if looks and v.seen >= looks[0]:  # a new bound at each look (a former one holds)
                while looks and v.seen >= looks[0]:
                    looks.pop(0)
                bound, value = self.at_look(v)
                high[0] = min(high[0], bound)
            handed.put(("step", Step(v.seen - seen[0], low=0.0, high=high[0], seen=value)))
            seen[0] = v.seen
            go_on.acquire()
            if stop.is_set():
                raise _Stopped

        def work() -> None:
            try:
                handed.put(("done", evaluation.validate(adapter, validator, net)))
            except _Stopped:  # asked for by the analysis (validate reset the loader)
                pass
            except BaseException as error:  # noqa: BLE001 - handed to the analysis's thread
                handed.put(("error", error))

        validator.add_callback("on_val_batch_end", after_batch)
        worker = threading.Thread(target=work, name="autoprune-bounded-map", daemon=True)
        worker.start()
        try:
            while True:
                what, item = handed.get()
                if what == "step":
                    yield item
                    go_on.release()
                elif what == "error":
                    raise item
                else:  # "done"
                    value = adapter.metrics_of(item)[adapter.metric]
                    yield Step(self.images - seen[0], low=value, high=value, value=value)
                    return
        finally:
            if worker.is_alive():
                stop.set()
                go_on.release()
                worker.join()


__all__ = ["BoundedMAP", "TP_KEYS", "bounded_metric"]

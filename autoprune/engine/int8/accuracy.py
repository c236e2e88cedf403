"""Mixed precision for accuracy, by measurement: when the INT8 model loses more than the
tolerated share of the FP32 model's metric, each layer (Conv / Gemm / MatMul node) is kept in FP32
alone and the model evaluated (its quantization sensitivity); then the fewest layers that bring
the metric within the tolerance are kept in FP32, added greedily from the most helpful one,
evaluating again after each (when none does, the best set measured is returned, and said so).

At most ``max_layers`` layers are measured. Where a model has more, the ones measured first are
those whose quantization adds the most noise (ONNX Runtime's ``qdq_loss_debug``: the
signal-to-quantization-noise ratio of each layer's input activation and weight on a calibration
batch, the lowest first): that ratio only orders the work, every choice rests on an evaluation.
"""
from __future__ import annotations

import dataclasses
import math
import tempfile
from pathlib import Path
from typing import Any, Callable, Sequence

from ...errors import MetricError
from .calibration import reader
from .quantizer import Int8Quantizer, layer_nodes, load, quiet


@dataclasses.dataclass(frozen=True)
class AccuracyChoice:
    """What :func:`exclude_for_accuracy` found: the layers kept in FP32 (``excluded``), the
    metrics of the FP32 model, of the all-INT8 model and of the mixed one (``metric``), its
    relative ``loss`` against FP32, whether it is within ``tolerance`` (``reached``), each measured
    layer's loss when kept alone in FP32 (``sensitivity``), the evaluations run and a one-line
    ``message``."""

    excluded: tuple[str, ...]
    fp32_metric: float
    int8_metric: float
    metric: float
    loss: float
    tolerance: float
    reached: bool
    sensitivity: dict[str, float]
    evaluations: int
    message: str


def relative_loss(fp32: float, metric: float, higher_is_better: bool = True) -> float:
    """``(fp32 - metric) / fp32`` (sign flipped for a lower-is-better metric)."""
    return ((fp32 - metric) if higher_is_better else (metric - fp32)) / abs(fp32)


def _check_metric(value: Any, what: str) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise MetricError(f"evaluate returned {value!r} for {what}, not a number: return the "
                          f"metric as a float") from None
    if not math.isfinite(value):
        raise MetricError(f"evaluate returned {value} for {what}: the metric must be finite")
    return value


def noise_order(quantizer: Int8Quantizer, fp32_onnx: bytes, int8_onnx: bytes,
                layers: Sequence[str]) -> list[str]:
    """``layers`` ordered by the quantization noise of their inputs, the noisiest first: the
    lower of the signal-to-quantization-noise ratios (dB) of the layer's input activation
    (before / after its QDQ pair, on the first calibration batch) and of its weight
    (ONNX Runtime's ``qdq_loss_debug``). A layer without either keeps its place at the end."""
    from onnxruntime.quantization import qdq_loss_debug as dbg
    prepared = quantizer.prepare(fp32_onnx)
    model = load(prepared)
    names = [i.name for i in model.graph.input]
    inputs = {n.name: list(n.input) for n in model.graph.node}
    with tempfile.TemporaryDirectory(prefix="autoprune-int8-") as folder, quiet():
        fp32_path, int8_path, augmented = (str(Path(folder, n)) for n in
                                           ("fp32.onnx", "int8.onnx", "augmented.onnx"))
        Path(fp32_path).write_bytes(prepared)
        Path(int8_path).write_bytes(int8_onnx)
        dbg.modify_model_output_intermediate_tensors(int8_path, augmented)
        batch = quantizer.batches(names)[:1]
        acts = dbg.create_activation_matching(dbg.collect_activations(augmented, reader(batch)))
        act_db = {k: dbg.compute_signal_to_quantization_noice_ratio(v["pre_qdq"], v["post_qdq"])
                  for k, v in acts.items()}
        weight_db = dbg.compute_weight_error(dbg.create_weight_matching(fp32_path, int8_path))
    score = {}
    for layer in layers:
        found = [db.get(t) for t, db in zip(inputs.get(layer, [])[:2], (act_db, weight_db))]
        found = [f for f in found if f is not None]
        score[layer] = min(found) if found else math.inf
    return sorted(layers, key=lambda n: score[n])


def exclude_for_accuracy(quantizer: Int8Quantizer, fp32_onnx: bytes,
                         evaluate: Callable[[bytes], float], fp32_metric: float,
                         tolerance: float, *, higher_is_better: bool = True,
                         max_layers: int = 24, exclude: Sequence[str] = ()) -> AccuracyChoice:
    """The fewest layers to keep in FP32 so that the INT8 model's metric (``evaluate(onnx
    bytes)``, in the runtime, on the val split) loses at most ``tolerance`` (relative) of
    ``fp32_metric``, by measured per-layer sensitivity (see the module). ``exclude``: nodes kept
    in FP32 from the start (e.g. for speed). When even every measured layer in FP32 cannot reach
    the tolerance, ``reached`` is False and ``message`` says so in one line."""
    fp32_metric = _check_metric(fp32_metric, "the FP32 model")
    if fp32_metric == 0:
        raise MetricError("the FP32 model's metric is 0: a relative INT8 loss cannot be measured "
                          "against it (train the model first)")
    base = tuple(exclude)
    count = [0]

    def measure(nodes: Sequence[str]) -> float:
        count[0] += 1
        data = quantizer.quantize(fp32_onnx, exclude=base + tuple(nodes), fresh=True)
        return _check_metric(evaluate(data), "the INT8 model")

    def loss_of(value: float) -> float:
        return relative_loss(fp32_metric, value, higher_is_better)

    int8_metric = measure(())
    if loss_of(int8_metric) <= tolerance:
        return _choice((), fp32_metric, int8_metric, int8_metric, tolerance, {}, count[0],
                       higher_is_better)
    layers = [n for n in quantizer.layer_nodes(fp32_onnx) if n not in base]
    if len(layers) > max_layers:
        layers = noise_order(quantizer, fp32_onnx,
                             quantizer.quantize(fp32_onnx, exclude=base, fresh=True),
                             layers)[:max_layers]
    alone = {n: measure((n,)) for n in layers}
    sensitivity = {n: loss_of(v) for n, v in alone.items()}
    helpful = sorted((n for n in layers if sensitivity[n] < loss_of(int8_metric)),
                     key=lambda n: sensitivity[n])
    chosen: list[str] = []
    best: tuple[tuple[str, ...], float] = ((), int8_metric)
    for node in helpful:
        chosen.append(node)
        metric = alone[node] if len(chosen) == 1 else measure(chosen)
        if loss_of(metric) < loss_of(best[1]):
            best = (tuple(chosen), metric)
        if loss_of(metric) <= tolerance:
            break
    # within the tolerance: the first (fewest) set that reached it; else the best one measured
    return _choice(best[0], fp32_metric, int8_metric, best[1], tolerance, sensitivity,
                   count[0], higher_is_better, measured=len(layers))


def _choice(excluded: tuple[str, ...], fp32: float, int8: float, metric: float,
            tolerance: float, sensitivity: dict[str, float], evaluations: int,
            higher_is_better: bool, measured: int = 0) -> AccuracyChoice:
    loss = relative_loss(fp32, metric, higher_is_better)
    reached = loss <= tolerance
    if not excluded and reached:
        message = (f"INT8 keeps the metric within the tolerance ({loss:+.2%} loss, tolerated "
                   f"{tolerance:.2%}): every layer quantized")
    elif reached:
        message = (f"{len(excluded)} layer(s) kept in FP32 bring the INT8 loss from "
                   f"{relative_loss(fp32, int8, higher_is_better):.2%} to {loss:.2%} (tolerated "
                   f"{tolerance:.2%})")
    else:
        message = (f"INT8 cannot reach the tolerated loss of {tolerance:.2%}: with "
                   f"{len(excluded)} of {measured} measured layer(s) in FP32 it still loses "
                   f"{loss:.2%}; keep the model in FP32 or tolerate more (int8_metric_loss)")
    return AccuracyChoice(excluded, fp32, int8, metric, loss, tolerance, reached, sensitivity,
                          evaluations, message)

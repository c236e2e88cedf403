"""INT8 in the deploy runtime (``quantize="int8"``): after retraining, the deploy form of the base
and of the pruned model is quantized statically by ONNX Runtime's own quantizer (QDQ, per-channel
weights, calibrated on the user's train split through the task's evaluation transforms), layers
whose quantization makes the runtime slower are kept in FP32 (chosen by timing), and layers kept
in FP32 for accuracy when the INT8 model loses more than ``int8_metric_loss`` (chosen by measured
per-layer sensitivity); the INT8 model's metric is measured in the runtime on the val split, and
the four models (FP32 / INT8 x base / pruned) are timed together in paired rounds.

The settings are one group of :class:`~autoprune.flow.config.FlowSettings` (:class:`Int8Settings`:
``quantize``, ``calibration_images``, ``calibration_method``, ``int8_metric_loss``); the quantizer
is :mod:`autoprune.engine.int8`.
"""
from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
import torch.nn as nn

from ..engine.data import make_loader
from ..engine.latency import timed_inputs
from ..engine.timing import Timing
from ..errors import ConfigError
from .contract import TaskAdapter
from .precision import Int8Settings, nothing_quantized

INT8_FILE = "model_int8.onnx"  # in each stage folder (baseline/, pruned/)


def batches_of(dataset: Any, batch_size: int | None, limit: int) -> list[torch.Tensor]:
    """The model inputs of the first ``limit`` items of ``dataset`` (``(input, target)`` pairs or
    inputs), in batches."""
    loader = make_loader(dataset, max(1, min(int(batch_size or 32), limit)), shuffle=False)
    out, seen = [], 0
    for batch in loader:
        inputs = batch[0] if isinstance(batch, (list, tuple)) else batch
        out.append(inputs[:limit - seen])
        seen += len(out[-1])
        if seen >= limit:
            break
    return out


def without_augmentation(dataset: Any) -> Any:
    """``dataset`` as its evaluation twin where it says how: a copy with ``train=False`` (the
    segmentation datasets flip only in training), through ``Subset`` wrappers; as it is
    otherwise."""
    import copy

    from torch.utils.data import Subset

    if isinstance(dataset, Subset):
        view = copy.copy(dataset)
        view.dataset = without_augmentation(dataset.dataset)
        return view
    if getattr(dataset, "train", None) is True:
        view = copy.copy(dataset)
        view.train = False
        return view
    return dataset


def _onnx_bytes(adapter: TaskAdapter, model: nn.Module) -> bytes:
    """``model`` exported as the task deploys it (FP32 ONNX, dynamic batch), with the task's
    metadata."""
    with tempfile.TemporaryDirectory(prefix="autoprune-int8-") as folder:
        path = adapter.export_onnx(model, Path(folder) / "model.onnx")
        return Path(path).read_bytes()


def _log(message: str) -> None:
    print(message, flush=True)


@dataclasses.dataclass
class Quantized:
    """One model quantized by :func:`quantize_model`: the report's entry for it, its FP32 ONNX
    bytes, its INT8 form (ONNX bytes; in OpenVINO, NNCF's ``openvino.Model``), the runtime and
    the FP32 model's metrics there."""

    entry: dict[str, Any]
    fp32_onnx: bytes
    int8_onnx: Any
    fp32_metrics: dict[str, float]
    runtime: str = "onnxruntime"


def calibration_of(adapter: TaskAdapter, settings: Int8Settings) -> tuple[list[Any], int]:
    """The adapter's calibration batches (its train split through the evaluation transforms)
    and their image count; an empty split is a one-line ConfigError."""
    calibration = adapter.calibration_inputs(settings.calibration_images)
    images = sum(len(b) for b in calibration)
    if images == 0:
        raise ConfigError("calibration on an empty split: the train data holds no images to "
                          "calibrate the INT8 model on; pass train data with images")
    return calibration, images


def quantize_model(adapter: TaskAdapter, model: nn.Module, calibration: list[Any],
                   settings: Int8Settings, threads: int, *, label: str = "model",
                   log: Callable[[str], None] = _log,
                   runtime: str = "onnxruntime") -> Quantized:
    """``model`` (trained, FP32) exported as the task deploys it, quantized statically with the
    blocks whose quantization slows ONNX Runtime down kept in FP32 (by timing), and the fewest
    layers kept in FP32 that bring its metric within ``int8_metric_loss`` of the FP32 model's
    (by measured sensitivity, when set); in OpenVINO (``runtime``) by NNCF's ``nncf.quantize``
    (:func:`quantize_openvino`). Nothing is written: :func:`ship` writes it once the paired
    timing of both forms says the INT8 one is faster."""
    if runtime == "openvino":
        return quantize_openvino(adapter, model, calibration, settings, threads, label=label,
                                 log=log)
    from ..engine.int8.accuracy import exclude_for_accuracy
    from ..engine.int8.quantizer import Int8Quantizer, check_runs, graph_summary
    from ..engine.int8.speed import exclude_for_speed

    images = sum(len(b) for b in calibration)
    fp32 = _onnx_bytes(adapter, model)
    # the FP32 model's metric in the runtime too: the same protocol as the INT8 one's (a YOLO
    # validator feeds an exported graph square batches, torch rectangular ones)
    evaluates = adapter.eval_set is not None
    if settings.int8_metric_loss is not None and not evaluates:
        raise ConfigError("int8_metric_loss measures the INT8 model's metric on validation "
                          "data: pass eval data, or leave int8_metric_loss out")
    fp32_metrics = adapter.evaluate_deployed(fp32, threads) if evaluates else {}
    quantizer = Int8Quantizer(calibration, settings.quantizer_settings(),
                              source=f"{images} images of the train split")
    speed = exclude_for_speed(quantizer, fp32, threads=threads)
    log(f"[autoprune] INT8 {label}: {speed.message}")
    excluded = tuple(speed.excluded)
    accuracy = None
    if settings.int8_metric_loss is not None:
        metric = adapter.metric
        accuracy = exclude_for_accuracy(
            quantizer, fp32, lambda data: adapter.evaluate_deployed(data, threads)[metric],
            fp32_metrics[metric], settings.int8_metric_loss,
            higher_is_better=adapter.higher_is_better, exclude=excluded)
        excluded += tuple(n for n in accuracy.excluded if n not in excluded)
        log(f"[autoprune] INT8 {label}: {accuracy.message}")
    int8 = quantizer.quantize(fp32, exclude=excluded)
    check_runs(int8)  # a plain ONNX Runtime session loads it
    entry = {"file": None, "shipped": False, "size_mb": len(int8) / 1e6,
             "metrics": adapter.evaluate_deployed(int8, threads) if evaluates else {},
             "excluded": list(excluded), "excluded_for_speed": list(speed.excluded),
             "excluded_for_accuracy": list(accuracy.excluded) if accuracy else [],
             "speed": speed.message, "search_faster": speed.int8_faster,
             "costly_ops": speed.costly_ops,
             "accuracy": accuracy.message if accuracy else None,
             "accuracy_reached": accuracy.reached if accuracy else None,
             "graph": graph_summary(int8),
             "quantization": {**quantizer.record(), "exclude": list(excluded)}}
    return Quantized(entry, fp32, int8, fp32_metrics)


def quantize_openvino(adapter: TaskAdapter, model: nn.Module, calibration: list[Any],
                      settings: Int8Settings, threads: int, *, label: str = "model",
                      log: Callable[[str], None] = _log) -> Quantized:
    """``model`` exported as the task deploys it and quantized for OpenVINO by NNCF's
    ``nncf.quantize`` (its performance preset; NNCF places the quantizers, so no layer is kept in
    FP32 by autoprune's timing or sensitivity search: ``int8_metric_loss`` is refused there),
    its metric measured in OpenVINO."""
    from ..engine.int8.openvino import openvino_int8, openvino_record
    from ..engine.int8.quantizer import Int8Quantizer

    if settings.int8_metric_loss is not None:
        raise ConfigError("int8_metric_loss keeps layers in FP32 by ONNX Runtime's per-layer "
                          "sensitivity; in OpenVINO NNCF places the quantizers: leave "
                          "int8_metric_loss out, or pass latency_runtime='onnxruntime'")
    images = sum(len(b) for b in calibration)
    fp32 = _onnx_bytes(adapter, model)
    evaluates = adapter.eval_set is not None
    fp32_metrics = adapter.evaluate_deployed(fp32, threads, "openvino") if evaluates else {}
    quantizer = Int8Quantizer(calibration, settings.quantizer_settings(),
                              source=f"{images} images of the train split")
    int8 = openvino_int8(quantizer, fp32)
    log(f"[autoprune] INT8 {label}: quantized for OpenVINO by NNCF")
    entry = {"file": None, "shipped": False, "size_mb": _ov_size_mb(int8),
             "metrics": adapter.evaluate_deployed(int8, threads, "openvino")
             if evaluates else {},
             "excluded": [], "excluded_for_speed": [], "excluded_for_accuracy": [],
             "speed": "NNCF's performance preset (no per-block timing in OpenVINO)",
             "costly_ops": {}, "accuracy": None, "accuracy_reached": None,
             "quantization": openvino_record(quantizer)}
    return Quantized(entry, fp32, int8, fp32_metrics, runtime="openvino")


def _ov_size_mb(model: Any) -> float:
    """The size of an ``openvino.Model`` as saved (its weights file), in MB."""
    import openvino as ov

    with tempfile.TemporaryDirectory(prefix="autoprune-ov-") as folder:
        ov.save_model(model, str(Path(folder) / "m.xml"))
        return sum(p.stat().st_size for p in Path(folder).iterdir()) / 1e6


def ship(done: Quantized, path: Path, fp32_ms: float, int8_ms: float) -> dict[str, Any]:
    """``done``'s entry with the verdict of the paired timing: its INT8 model written to
    ``path`` atomically when it runs faster than the FP32 one and :func:`held_back` names no
    reason to keep FP32 (the entry's ``held_back`` says it when it does), else not shipped (an
    INT8 file of an earlier run at ``path`` is removed: it would be taken for this one). Its
    folder is made when missing (``baseline/`` of a run that prunes a given checkpoint trains no
    base there)."""
    from ..engine.files import atomic_write

    faster = int8_ms < fp32_ms
    reason = held_back(done.entry) if faster or nothing_quantized(done.entry) else None
    entry = {**done.entry, "latency_ms": int8_ms, "int8_faster": faster, "held_back": reason}
    path = Path(path)
    if done.runtime == "openvino":  # OpenVINO's own form: model_int8.xml + .bin
        path = path.with_suffix(".xml")
    if faster and reason is None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if done.runtime == "openvino":
            _save_openvino(done.int8_onnx, path)
        else:
            def write(tmp: str) -> None:
                with open(tmp, "wb") as f:
                    f.write(done.int8_onnx)

            atomic_write(path, write)
        entry.update(file=str(path), shipped=True)
    else:
        for stale in (path, path.with_suffix(".bin")) if done.runtime == "openvino" else (path,):
            stale.unlink(missing_ok=True)
    return entry


def held_back(entry: Mapping[str, Any]) -> str | None:
    """Why an INT8 model that the paired timing finds faster is still not written (None: it
    is): nothing in it is INT8, or the block search timed its chosen form slower than FP32 (two
    timings that disagree: the difference is within noise, and FP32 is the safe model)."""
    if nothing_quantized(entry):
        return ("no layer runs faster in INT8 on this CPU: every one was kept in FP32, so its "
                "INT8 form is its FP32 model")
    if entry.get("search_faster") is False:
        return ("the block search timed it slower than FP32 and the paired timing faster: the "
                "difference is within noise")
    return None


def _save_openvino(model: Any, path: Path) -> None:
    """``model`` saved as OpenVINO IR ``path`` (``.xml``) and its ``.bin``: both written in a
    temp folder beside them, then moved into place (the weights first), so that an interrupted
    save leaves no half pair."""
    import os

    import openvino as ov

    with tempfile.TemporaryDirectory(prefix=".autoprune-ov-", dir=path.parent) as folder:
        ov.save_model(model, str(Path(folder) / path.name))
        os.replace(Path(folder) / path.with_suffix(".bin").name, path.with_suffix(".bin"))
        os.replace(Path(folder) / path.name, path)


def quantize_sides(adapter: TaskAdapter, models: Mapping[str, nn.Module],
                   paths: Mapping[str, Path], metrics: Mapping[str, Mapping[str, float]],
                   settings: Int8Settings, timing: Timing = Timing(), *,
                   log: Callable[[str], None] = _log) -> dict[str, Any]:
    """Quantize each model of ``models`` (``{"baseline": ..., "pruned": ...}``, the trained FP32
    models) into ``paths[side]`` (:func:`quantize_model`; a run's ``<stage>/model_int8.onnx``)
    and time all of them
    together: the report's ``int8`` section. ``metrics``: each side's metrics in torch (kept
    beside the FP32 ONNX model's, which the INT8 model is compared with: the same runtime and
    protocol); ``timing``: the threads and batch the paired latencies are taken with (in ONNX
    Runtime)."""
    settings = settings.check(timing)
    threads = timing.threads or torch.get_num_threads()
    start = time.perf_counter()
    calibration, images = calibration_of(adapter, settings)
    log(f"[autoprune] INT8: quantizing {', '.join(models)} in ONNX Runtime (calibration on "
        f"{images} train images, {settings.calibration_method})")
    out: dict[str, Any] = {"metric": adapter.metric}
    runtime = "openvino" if timing.runtime == "openvino" else "onnxruntime"
    out["runtime"] = runtime
    done = {side: quantize_model(adapter, model, calibration, settings, threads, label=side,
                                 log=log, runtime=runtime)
            for side, model in models.items()}
    out["latency"] = paired_latencies(adapter, models,
                                      {s: (q.fp32_onnx, q.int8_onnx) for s, q in done.items()},
                                      timing, runtime)
    ms = out["latency"]["ms"]
    out["fp32"] = {}
    for side, q in done.items():
        out[side] = ship(q, Path(paths[side]), ms[f"{side}_fp32"], ms[f"{side}_int8"])
        out.setdefault("quantization", out[side].pop("quantization"))
        out[side].pop("quantization", None)
        out["fp32"][side] = {"size_mb": len(q.fp32_onnx) / 1e6, "metrics": q.fp32_metrics,
                             "metrics_torch": dict(metrics[side]),
                             "latency_ms": ms[f"{side}_fp32"]}
    out["verdicts"] = verdicts(out, list(models))
    for line in out["verdicts"]:
        log(f"[autoprune] INT8: {line}")
    out["seconds"] = round(time.perf_counter() - start, 1)
    return out


def paired_latencies(adapter: TaskAdapter, models: Mapping[str, nn.Module],
                     onnx: Mapping[str, tuple[bytes, Any]], timing: Timing,
                     runtime: str = "onnxruntime") -> dict[str, Any]:
    """Every model's milliseconds in ONNX Runtime, FP32 and INT8, timed together in alternating
    rounds on the adapter's timing batch (``timing``'s threads and batch; one thread: the
    thread's CPU time), relative to the FP32 base model: ``{"ms": {"<side>_<precision>": ms},
    "setting": ...}``. ``onnx``: each side's (FP32, INT8) ONNX bytes."""
    from ..engine.int8.speed import paired_ms
    from ..engine.latency import latency_setting
    from ..engine.timer import report_rounds
    from ..engine.runtimes import OpenVinoRunner, OrtRunner

    threads = timing.threads or torch.get_num_threads()
    first = next(iter(models.values()))
    inputs = timed_inputs(adapter.timing_inputs(first), timing.batch)
    args = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    args = tuple(a.detach().cpu() for a in args)
    names, runners = [], []
    for side in models:
        for precision, data in zip(("fp32", "int8"), onnx[side]):
            names.append(f"{side}_{precision}")
            runner = OpenVinoRunner if runtime == "openvino" else OrtRunner
            runners.append(runner(data, args, threads=threads))
    clock = time.thread_time if threads == 1 else time.perf_counter
    ms = paired_ms(runners, rounds=report_rounds(9), clock=clock)
    setting = latency_setting(args[0], threads=threads, batch=timing.batch, runtime=runtime)
    setting.pop("precision", None)  # both precisions are timed here
    return {"ms": dict(zip(names, ms)), "setting": setting}


def verdicts(section: Mapping[str, Any], sides: list[str]) -> list[str]:
    """What the INT8 figures say, in words: each side's INT8 speed-up over its FP32 model, and
    a side whose INT8 model is slower than FP32 on this CPU (with the operators that cost most:
    ship the FP32 model there)."""
    lines = []
    ms = section["latency"]["ms"]
    for side in sides:
        fp32, int8 = ms[f"{side}_fp32"], ms[f"{side}_int8"]
        reason = section[side].get("held_back")
        if reason:
            lines.append(f"the {side} model: {reason} ({INT8_FILE} not written): ship its FP32 "
                         f"model")
        elif int8 >= fp32:
            ops = ", ".join(f"{op} {t:.2f} ms" for op, t in
                            list(section[side].get("costly_ops", {}).items())[:3])
            lines.append(f"the {side} model runs slower in INT8 than in FP32 on this CPU "
                         f"({int8:.2f} ms against {fp32:.2f}; costliest INT8 operators: {ops}): "
                         f"ship its FP32 model"
                         + ("" if section[side].get("shipped") else
                            f" ({INT8_FILE} not written)"))
        else:
            lines.append(f"{side}: INT8 {fp32 / int8:.2f}x faster than FP32 "
                         f"({fp32:.2f} -> {int8:.2f} ms)")
    if "baseline" in sides and "pruned" in sides:
        base = ms["baseline_fp32"]
        int8_wins = (ms["pruned_int8"] < ms["pruned_fp32"]
                     and not section["pruned"].get("held_back"))
        best = ms["pruned_int8"] if int8_wins else ms["pruned_fp32"]
        lines.append(f"pruned {'INT8' if int8_wins else 'FP32'} "
                     f"against the FP32 base model: {base / best:.2f}x faster "
                     f"({base:.2f} -> {best:.2f} ms)")
    return lines

"""Checkpoints in the flow: load weights into a model, rebuild a saved model with its task's
adapter, and prune, export or compare saved checkpoints (the ``autoprune prune | export |
report`` commands)."""
from __future__ import annotations

import dataclasses

import os
from pathlib import Path
from typing import Any, Mapping

import torch
import torch.nn as nn

from ..engine.checkpoint import (check_opset, damaged, load_pruned, read_pruned_metadata,
                                save_pruned)
from ..engine.keywords import regroup
from ..engine.latency import Timing
from ..engine.memory import activation_bytes, available_bytes
from ..engine.channels import check_criterion
from ..engine.prune import prune
from ..engine.outputs import same_file
from ..errors import (CheckpointError, ConfigError, NotAutopruneCheckpointError,
                      SensitivityFileError, UnreadableCheckpointError)
from .contract import TaskAdapter
from .registry import TASKS
from .allocation import Targets, choose_ratios, other_target_note, table_for
from .latency import check_unused_settings, default_round_to
from .options import check_numbers, check_save_dir, sens_mode
from .report import compare_sides, to_console, write_reports
from .sensitivities import read_table


def load_weights(model: nn.Module, path: str | os.PathLike) -> nn.Module:
    """Load an autoprune checkpoint (pruned or not) or a plain state_dict into ``model``."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}: check pretrain_weights")
    try:
        return load_pruned(path, model)
    except UnreadableCheckpointError:
        raise
    except NotAutopruneCheckpointError:  # a plain state_dict
        pass
    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    try:
        model.load_state_dict(state, strict=True)
    except (RuntimeError, TypeError, AttributeError) as e:
        first = str(e).strip().splitlines()[0][:200]
        raise CheckpointError(f"{path} does not fit this model ({first}): was it made for "
                              f"another architecture or num_classes?") from None
    return model

def checkpoint_meta(path: str | os.PathLike) -> dict[str, Any]:
    """The metadata of the autoprune checkpoint at ``path``, its build arguments checked by its
    task (a CheckpointError naming the damaged field)."""
    meta = read_pruned_metadata(path)
    name = meta.get("task")
    if name is not None and name not in TASKS:
        raise damaged(Path(path), f"metadata field 'task' is {name!r:.40}, not one of the tasks "
                                  f"{', '.join(TASKS)}")
    if name is None:  # a core save_pruned without task=: nothing task-specific to check
        return meta
    task = TASKS[name]
    why = task.adapter_class().check_build_kwargs(meta.get("build") or {})
    if not why and meta.get("arch"):
        try:  # the task and the architecture must belong together
            task.arch_key(meta["arch"])
        except ConfigError:
            why = (f"metadata field 'arch' is {meta['arch']!r:.60}, not a {name} model: its "
                   f"'task' or 'arch' was changed")
    if why:
        raise damaged(Path(path), why)
    return meta


def load_model(path: str | os.PathLike, adapter: TaskAdapter | None = None,
               base_model: nn.Module | None = None) -> nn.Module:
    """Rebuild the model saved at ``path`` (pruned or not) and load its weights (weights-only).

    The architecture comes from the checkpoint's metadata; a checkpoint of a custom model object
    needs ``base_model`` (a fresh instance of the same unpruned architecture).
    """
    meta = checkpoint_meta(path)
    if base_model is None:
        if not meta.get("arch"):
            raise CheckpointError(f"{path} was saved from a custom model object: pass "
                                  f"base_model=<a fresh instance of that architecture>")
        if adapter is None:
            adapter = adapter_for_checkpoint(path)[0]
        if meta.get("task") not in (None, adapter.task):
            raise CheckpointError(f"{path} is a {meta.get('task')} checkpoint, not "
                                  f"{adapter.task}: use autoprune.{meta.get('task')}.load_model")
        base_model = adapter.build(meta["arch"], **meta.get("build", {}))
    return load_pruned(path, base_model).eval()

def adapter_for_checkpoint(path: str | os.PathLike, task: str | None = None,
                           **settings: Any) -> tuple[TaskAdapter, dict]:
    """The task adapter a checkpoint was made with (its classes, build arguments and input size;
    ``settings`` on top), plus its metadata. ``task``: the task expected (a checkpoint of
    another is a one-line CheckpointError), or the one a checkpoint without a task is read as."""
    meta = checkpoint_meta(path)
    found = meta.get("task")
    if task is not None and found not in (None, task):
        raise CheckpointError(f"{path} is a {found} checkpoint, not {task}: use "
                              f"autoprune.{found}.load_model")
    if found is None and task is None:
        raise CheckpointError(f"{path} does not say which task its model is for (saved by "
                              f"save_pruned without task=): pass the task (CLI: --task), or use "
                              f"autoprune.<task>.load_model")
    adapter_class = TASKS[found or task].adapter_class()
    return adapter_class.for_checkpoint(meta, **settings), meta

# prune_checkpoint's latency_* keywords (train()'s names) and the Timing field each sets
LATENCY_NAMES = {f"latency_{f.name}": ("timing", f.name) for f in dataclasses.fields(Timing)}


def prune_checkpoint(checkpoint: str | os.PathLike, sensitivities_file: Any,
                     output: str | os.PathLike, *, eval_metric_loss: float | None = None,
                     pruned_flops: float | None = None, pruned_latency: float | None = None,
                     criterion: str = "l1_norm", round_to: int | None = None,
                     overwrite: bool = False, timing: Any = None, **latency: Any):
    """Prune a saved model with a sensitivity file (or "DEFAULT") and save it, without retraining.
    The target is ``eval_metric_loss`` (0.05 when no target is given), ``pruned_flops`` or
    ``pruned_latency`` (a file timed with latency in that setting; DEFAULT: the profile's points
    are timed into ``sensitivities_latency.json`` next to ``output``; ``eval_metric_loss`` then
    caps any group's loss); ``output`` may replace ``checkpoint`` only with ``overwrite=True``.
    Where the latency is timed: ``timing`` (an :class:`~autoprune.engine.latency.Timing` or a
    dict of its fields), or ``latency_device`` / ``latency_threads`` / ``latency_batch`` /
    ``latency_runtime`` as ``train()`` names them. With a latency target the result's
    ``latency_ratios`` holds the measured figures."""
    if same_file(output, checkpoint) and not overwrite:
        raise ConfigError(f"output {output} is the input checkpoint: choose another path (the "
                          f"input is never overwritten)")
    given = regroup("prune_checkpoint", latency, LATENCY_NAMES, warn=False).get("timing", {})
    where = Timing.of(timing, **given)
    check_unused_settings(pruned_latency, where)
    if round_to is None and pruned_latency is not None:
        round_to = default_round_to(where)  # as the flow does
    targets = Targets.of(eval_metric_loss, pruned_flops, pruned_latency, where)
    adapter, meta = adapter_for_checkpoint(checkpoint)
    model = load_model(checkpoint, adapter)
    mode = sens_mode(sensitivities_file)
    if mode == "new":
        raise SensitivityFileError(f"no sensitivity file at {sensitivities_file}: measure one "
                                   f"with `autoprune sensitivity` first, or pass DEFAULT")
    check_criterion(criterion)
    record, path = read_table(adapter, model, sensitivities_file, meta.get("arch"), criterion)
    note = other_target_note(record, targets, path)
    if note:
        print(note, flush=True)
    table = table_for(adapter, model, record, path, targets=targets,
                      default_profile=mode == "default", save_dir=Path(output).parent,
                      arch=meta.get("arch"), criterion=criterion)
    chosen = choose_ratios(adapter, model, table, targets, round_to=round_to,
                           criterion=criterion)
    result = prune(model, adapter.example_inputs(model), chosen, criterion=criterion,
                   round_to=round_to, ignored_layers=adapter.ignored_layers(model))
    previous = meta.get("plan") or {}
    save_pruned(model, output, **{**meta, "pruned": True, "plan": {**previous, **result.plan}})
    result.latency_ratios = chosen if targets.latency is not None else None
    return result

def check_onnx(checkpoint: str | os.PathLike, onnx: Path, *,
               baseline: str | os.PathLike | None = None,
               input_size: int | None = None) -> dict[str, Any]:
    """What ``autoprune export`` prints about the ONNX model it wrote: the largest difference of
    ONNX Runtime's outputs from torch's (``max_abs_diff``) and its latency on the CPU (torch's
    threads): ``latency_ms``, or with ``baseline`` (the checkpoint it was pruned from) both
    timed in pairs in ONNX Runtime (``baseline_ms``, ``reduction``)."""
    from ..engine.latency import paired_reduction
    from ..engine.measure import latency_ms
    from ..engine.runtimes import compile_model, output_difference

    size = {"input_size": input_size} if input_size else {}
    adapter, _ = adapter_for_checkpoint(checkpoint, progress=False, **size)
    model = adapter.deploy_module(load_model(checkpoint, adapter))
    x = adapter.example_inputs(model)
    runner = compile_model(model, x, runtime="onnxruntime", threads=torch.get_num_threads(),
                           onnx=Path(onnx).read_bytes())
    out = {"max_abs_diff": output_difference(model, x, runner=runner)}
    if baseline is None:
        out["latency_ms"] = latency_ms(model, x, runtime="onnxruntime")
        return out
    base = adapter.deploy_module(load_model(baseline, adapter_for_checkpoint(
        baseline, progress=False, **size)[0]))
    timed = paired_reduction(base, model, x, runtime="onnxruntime")
    out.update(latency_ms=timed["pruned_ms"], baseline_ms=timed["baseline_ms"],
               reduction=timed["reduction"])
    return out


def export_checkpoint(checkpoint: str | os.PathLike, output: str | os.PathLike, *,
                      input_size: int | None = None, opset_version: int = 17,
                      dynamic_batch: bool = True, overwrite: bool = False) -> Path:
    """Export a checkpoint written by autoprune (pruned or not) to ONNX at ``output``, with the
    task's input (the checkpoint's input size unless ``input_size`` is given; any batch size
    unless ``dynamic_batch`` is False);
    ``output`` may replace ``checkpoint`` only with ``overwrite=True``."""
    if same_file(output, checkpoint) and not overwrite:
        raise ConfigError(f"output {output} is the input checkpoint: choose another path, e.g. "
                          f"{Path(checkpoint).with_suffix('.onnx')}")
    check_numbers(whole=True, low=1, input_size=input_size)
    check_opset(opset_version)
    own, _ = adapter_for_checkpoint(checkpoint)
    model = load_model(checkpoint, own)
    adapter = own
    if input_size is not None and input_size != own.input_size:
        adapter, _ = adapter_for_checkpoint(checkpoint, input_size=input_size)
        check_memory_for(model, own, adapter.input_size, "export it")
    return adapter.export_onnx(model, Path(output), opset_version=opset_version,
                               dynamic_batch=dynamic_batch)


def export_int8(checkpoint: str | os.PathLike, output: str | os.PathLike, data: Any, *,
                eval_data: Any = None, eval_limit: int | None = None,
                calibration_images: int | None = None,
                calibration_method: str | None = None, int8_metric_loss: float | None = None,
                input_size: int | None = None, threads: int | None = None,
                overwrite: bool = False) -> dict[str, Any]:
    """Export a checkpoint as a static INT8 ONNX model at ``output`` (ONNX Runtime's quantizer,
    QDQ, per-channel weights; :func:`autoprune.flow.int8.quantize_model`), calibrated on
    ``calibration_images`` images of ``data``'s train split through the task's evaluation
    transforms; blocks that run slower in INT8 are kept in FP32 (by timing), and with
    ``int8_metric_loss`` the fewest layers that keep the metric within it on ``data``'s (or
    ``eval_data``'s) val split (its first ``eval_limit`` images). Returns the INT8 entry (size,
    metrics, nodes kept in FP32) with the FP32 and INT8 latencies timed in pairs (``fp32_ms``,
    ``int8_ms``). An INT8 model slower than the FP32 one on this CPU is not written (the entry
    says so)."""
    from .int8 import calibration_of, paired_latencies, quantize_model, ship
    from .precision import Int8Settings

    if same_file(output, checkpoint) and not overwrite:
        raise ConfigError(f"output {output} is the input checkpoint: choose another path, e.g. "
                          f"{Path(checkpoint).with_suffix('.int8.onnx')}")
    check_numbers(whole=True, low=1, input_size=input_size, threads=threads)
    defaults = Int8Settings()
    settings = Int8Settings(
        quantize="int8", calibration_images=calibration_images or defaults.calibration_images,
        calibration_method=calibration_method or defaults.calibration_method,
        int8_metric_loss=int8_metric_loss).check()
    meta = checkpoint_meta(checkpoint)
    task = TASKS.get(meta.get("task"))
    if task is None:
        raise CheckpointError(f"{checkpoint} does not say which task its model is for: export "
                              f"it with autoprune.<task> and quantize the ONNX file")
    given = {task.data_key: data, **({"eval_data": eval_data} if eval_data is not None else {}),
             **({"input_size": input_size} if input_size else {}),
             **({"eval_limit": eval_limit} if eval_limit else {})}
    adapter, _ = adapter_for_checkpoint(checkpoint, progress=False, **given)
    model = load_model(checkpoint, adapter)
    threads = threads or torch.get_num_threads()
    calibration, images = calibration_of(adapter, settings)
    done = quantize_model(adapter, model, calibration, settings, threads)
    timed = paired_latencies(adapter, {"model": model}, {"model": (done.fp32_onnx,
                                                                     done.int8_onnx)},
                             Timing(threads=threads))
    fp32_ms, int8_ms = timed["ms"]["model_fp32"], timed["ms"]["model_int8"]
    return {**ship(done, Path(output), fp32_ms, int8_ms), "fp32_metrics": done.fp32_metrics,
            "calibration_images": images, "fp32_ms": fp32_ms, "int8_ms": int8_ms,
            "fp32_size_mb": len(done.fp32_onnx) / 1e6}


def check_memory_for(model: nn.Module, adapter: TaskAdapter, input_size: int, work: str) -> None:
    """Refuse an input size whose forward pass needs more memory than the machine has free
    (estimated from the activations at ``adapter``'s own input size, scaled by area)."""
    free = available_bytes()
    own = adapter.input_size
    if free is None or not own:
        return
    need = activation_bytes(model, adapter.example_inputs(model)) * (input_size / own) ** 2
    if need > 0.8 * free:
        raise ConfigError(f"input_size={input_size} would need about {need / 1e9:,.1f} GB to "
                          f"{work} (the model's activations at that size), more than the "
                          f"{free / 1e9:,.1f} GB free here: pass a smaller input size (the "
                          f"checkpoint's is {own})")

def compare_checkpoints(baseline: str | os.PathLike, pruned: str | os.PathLike, data: Any, *,
                        save_dir: str | os.PathLike = ".", eval_limit: int | None = None,
                        device: str = "auto", int8: Any = None,
                        train_data: Any = None) -> dict[str, Any]:
    """Evaluate and measure two checkpoints of one architecture; write and print the report.
    ``int8`` (:class:`~autoprune.flow.precision.Int8Settings` with ``quantize="int8"``): both
    models are also quantized in ONNX Runtime, calibrated on ``train_data``'s train split, into
    ``save_dir/baseline_int8.onnx`` and ``save_dir/pruned_int8.onnx``, and the report gets the
    FP32 / INT8 x base / pruned table."""
    what = [_model_of(checkpoint_meta(p)) for p in (baseline, pruned)]
    if what[0] != what[1]:
        raise ConfigError(f"{pruned} holds a {what[1]} but {baseline} a {what[0]}: compare a "
                          f"pruned checkpoint with the checkpoint it was pruned from")
    quantize = int8 is not None and int8.wanted()
    if quantize and train_data is None:
        raise ConfigError("quantize='int8' calibrates on training data: pass train_data")
    task = TASKS.get(checkpoint_meta(baseline).get("task"))
    calibrate = {task.data_key: train_data} if quantize and task is not None else {}
    adapter, meta = adapter_for_checkpoint(baseline, eval_data=data, eval_limit=eval_limit,
                                           device=device, progress=False, **calibrate)
    models = [load_model(p, adapter).to(adapter.device) for p in (baseline, pruned)]
    metrics = [adapter.evaluate(m) for m in models]
    sides = compare_sides(adapter, *models, *metrics)
    report = {"task": adapter.task, "arch": meta.get("arch"), **sides,
              "flops_reduction": 1 - sides["pruned"]["flops"] / sides["baseline"]["flops"]}
    folder = check_save_dir(save_dir)
    if quantize:
        from .int8 import quantize_sides

        report["int8"] = quantize_sides(
            adapter, dict(zip(("baseline", "pruned"), models)),
            {side: folder / f"{side}_int8.onnx" for side in ("baseline", "pruned")},
            dict(zip(("baseline", "pruned"), metrics)), int8)
    write_reports(report, folder)
    print(to_console(report))
    return report

def _model_of(meta: Mapping[str, Any]) -> str:
    """The model a checkpoint holds, in words: "classification timm/resnet18 (num_classes=10)"."""
    build = ", ".join(f"{k}={v}" for k, v in (meta.get("build") or {}).items())
    return f"{meta.get('task')} {meta.get('arch') or 'custom model'}" + (f" ({build})" if build
                                                                          else "")

"""The task-agnostic journey: base model -> sensitivities -> ratios -> prune -> retrain -> report.

It talks to a task only through the :class:`~autoprune.tasks.base.TaskAdapter` protocol.
"""
from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import torch
import torch.nn as nn

from .allocate import ratios_by_flops, ratios_by_loss
from .arguments import (check_numbers, check_save_dir, check_sensitivity_options, check_targets,
                        names_a_missing_file, sens_mode, written_by_run)
from .checkpoint import (BASE_SHAPES, load_pruned, read_pruned_metadata,
                         save_pruned)
from .distributed import broadcast, rank_and_world
from .errors import (CheckpointError, ConfigError, NotAutopruneCheckpointError,
                     SensitivityFileError, UnreadableCheckpointError)
from .groups import PruningGraph, check_criterion
from .measure import measure
from .plots import plot_sensitivities
from .profiles import find_profile
from .prune import check_round_to, prune
from .report import to_console, write_reports
from .sensitivity import DEFAULT_RATIOS, check_ratios, sensitivity, weights_sha256
from .store import check_fingerprint, read_record, same_file
from .tasks.base import TaskAdapter, TrainResult


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


def _check_data(adapter: TaskAdapter, model: nn.Module) -> None:
    """Refuse data the model cannot take, for adapters that can tell (the supervised ones)."""
    if hasattr(adapter, "check_data"):
        adapter.check_data(model)


def _checkpoint_meta(adapter: TaskAdapter, arch: str | None, model: nn.Module,
                     **extra: Any) -> dict[str, Any]:
    return {"task": adapter.task, "arch": arch, "build": adapter.build_kwargs(model),
            "input_size": getattr(adapter, "input_size", None), **extra}


def check_sensitivities_file(adapter: TaskAdapter, model: nn.Module, sensitivities_file: Any,
                             arch: str | None, criterion: str = "l1_norm") -> Path:
    """Resolve ``sensitivities_file`` ("DEFAULT" or a path) and refuse a file or profile made for
    another model or with another ``criterion``, before any time is spent training or measuring."""
    mode = sens_mode(sensitivities_file)
    if mode == "default":
        if arch is None:
            raise ConfigError("sensitivities_file='DEFAULT' needs a model name (e.g. 'resnet18'), "
                              "not a model object of unknown architecture")
        path = find_profile(adapter.task, arch)
    else:
        path = Path(sensitivities_file)
    if mode in ("default", "existing"):
        record = read_record(path)
        graph = PruningGraph(model, adapter.example_inputs(model), adapter.ignored_layers(model))
        fingerprint = record.model.get("fingerprint")
        if mode == "default" and fingerprint != graph.fingerprint:
            raise SensitivityFileError(
                f"the DEFAULT profile for {arch} does not match this model's groups (another "
                f"width, num_classes or a patched layer?): pass sensitivities_file=<new path>")
        check_fingerprint(record, path, graph.fingerprint)
        if record.criterion != criterion:
            raise SensitivityFileError(f"{path} was measured with criterion {record.criterion!r}, "
                                       f"this run prunes by {criterion!r}: pass criterion="
                                       f"{record.criterion!r}, or measure a new file")
    return path


def get_sensitivities(adapter: TaskAdapter, model: nn.Module, sensitivities_file: Any, *,
                      arch: str | None, criterion: str = "l1_norm",
                      ratios: Iterable[float] = DEFAULT_RATIOS, progress: bool = True,
                      options: Mapping[str, Any] | None = None
                      ) -> tuple[dict[str, dict[float, float]], Path]:
    """The sensitivity table for ``model``: the DEFAULT profile, or a file completed on the
    adapter's evaluation data (only missing points are computed)."""
    path = check_sensitivities_file(adapter, model, sensitivities_file, arch, criterion)
    if sens_mode(sensitivities_file) == "default":
        return read_record(path).sensitivities, path
    options = check_sensitivity_options(options)
    subset = options.pop("eval_images", None)
    measure_on = adapter.with_eval_limit(subset) if subset else adapter
    sens = sensitivity(model, adapter.example_inputs(model),
                       lambda m: measure_on.evaluate(m)[adapter.metric], ratios=ratios,
                       sensitivities_file=path, criterion=criterion,
                       ignored_layers=adapter.ignored_layers(model),
                       higher_is_better=adapter.higher_is_better, metric_name=adapter.metric,
                       arch=arch, extra={"task": adapter.task,
                                         "eval_images": _eval_size(measure_on)},
                       progress=progress, **options)
    return sens, path


def _eval_size(adapter: TaskAdapter) -> int | None:
    """How many evaluation samples the sensitivities are measured on (recorded in the file)."""
    try:
        return len(getattr(adapter, "eval_set", None))
    except TypeError:
        return None


def _figures(adapter: TaskAdapter, model: nn.Module, metrics: dict[str, float]) -> dict[str, Any]:
    inputs = adapter.timing_inputs(model)
    cpu = measure(copy.deepcopy(model).cpu(), inputs.cpu() if torch.is_tensor(inputs) else inputs)
    gpu = None
    if torch.cuda.is_available():
        gpu = measure(model, inputs, device="cuda")["latency_ms"]
    return {"params": cpu["params"], "flops": cpu["flops"], "size_mb": cpu["size_mb"],
            "metrics": metrics, "latency_cpu_ms": cpu["latency_ms"], "latency_gpu_ms": gpu}


def _rebuilds(adapter: TaskAdapter, arch: str, model: nn.Module) -> bool:
    """True when ``adapter.build(arch)`` gives ``model``'s modules and (unpruned) shapes, so a
    checkpoint may record ``arch`` and ``load_model`` rebuild it; a patched or resized model
    records no arch (loading it then needs ``base_model``)."""
    try:
        fresh = adapter.build(arch, **adapter.build_kwargs(model))
    except Exception:  # noqa: BLE001 - any failure means: not rebuildable from the key
        return False
    structure = lambda m: [(n, type(x).__name__) for n, x in m.named_modules()]
    shapes = getattr(model, BASE_SHAPES, None) or \
        {k: tuple(v.shape) for k, v in model.state_dict().items()}
    fresh_shapes = {k: tuple(v.shape) for k, v in fresh.state_dict().items()}
    return structure(fresh) == structure(model) and \
        {k: tuple(v) for k, v in shapes.items()} == fresh_shapes


def train(adapter: TaskAdapter, model: str | nn.Module, *, epochs: int, save_dir: str | os.PathLike,
          pretrain_weights: str | os.PathLike | None = None, sensitivities_file: Any = None,
          eval_metric_loss: float | None = None, pruned_flops: float | None = None,
          pretrain_epochs: int | None = None, criterion: str = "l1_norm",
          round_to: int | None = None, ratios: Iterable[float] = DEFAULT_RATIOS,
          progress: bool = True,
          sensitivity_options: Mapping[str, Any] | None = None,
          resume: bool = False) -> TrainResult:
    """The PaddleX-style flow for any task (see ``autoprune.classification.train``).

    ``resume=True``: each training stage (``save_dir``, or ``baseline/`` and ``pruned/``)
    continues from its ``train_state.pt``; a finished stage is not trained again."""
    mode = sens_mode(sensitivities_file)
    check_numbers(whole=True, low=1, epochs=epochs, pretrain_epochs=pretrain_epochs)
    if mode != "none":  # every setting of the later steps, before hours of training
        eval_metric_loss = check_targets(eval_metric_loss, pruned_flops)  # 0.05 by default
        check_criterion(criterion)
        check_sensitivity_options(sensitivity_options)
        check_ratios(ratios)
        check_round_to(round_to)
        if not _has_eval(adapter):
            raise ConfigError("pruning needs eval_data: the sensitivities and the report are "
                              "measured on it; pass a validation folder or Dataset")
    save_dir = check_save_dir(save_dir)
    arch = adapter.arch_key(model)  # a name or a model object (None: unknown architecture)
    if isinstance(model, str):
        model = adapter.build(arch)
        rebuild_arch = arch
    else:
        rebuild_arch = arch if arch and _rebuilds(adapter, arch, model) else None
    adapter.check_model(model)
    _check_data(adapter, model)
    if pretrain_weights is not None:
        if written_by_run(Path(pretrain_weights), save_dir, mode):
            raise ConfigError(f"pretrain_weights {pretrain_weights} lies where this run writes its "
                              f"outputs: pick another save_dir (the input is never overwritten)")
        load_weights(model, pretrain_weights)
    model.to(getattr(adapter, "device", "cpu"))
    meta = _checkpoint_meta(adapter, rebuild_arch, model)
    if mode != "none":
        check_sensitivities_file(adapter, model, sensitivities_file, arch, criterion)
    resuming = {"resume": True} if resume else {}  # only adapters with their own loop take it

    if mode == "none":  # plain training
        model = adapter.fit(model, epochs, save_dir, meta={**meta, "pruned": False}, **resuming)
        return TrainResult(model, baseline_path=save_dir / "best.pt",
                           metrics=_on_rank0(lambda: adapter.evaluate(model))
                           if _has_eval(adapter) else {})

    if pretrain_weights is None:  # the one-call flow: train the base model first
        _log(f"[autoprune] training the base model ({pretrain_epochs or epochs} epochs)")
        model = adapter.fit(model, pretrain_epochs or epochs, save_dir / "baseline",
                            meta={**meta, "pruned": False}, **resuming)
        baseline_path = save_dir / "baseline" / "best.pt"
    else:
        baseline_path = Path(pretrain_weights)
    base_metrics = _on_rank0(lambda: adapter.evaluate(model))
    _log(f"[autoprune] baseline {adapter.metric} = {base_metrics[adapter.metric]:.4f}")

    _log(f"[autoprune] sensitivities ({mode}: {sensitivities_file})")
    sens, sens_path = get_sensitivities(adapter, model, sensitivities_file, arch=arch,
                                        criterion=criterion, ratios=ratios, progress=progress,
                                        options=sensitivity_options)
    example = adapter.example_inputs(model)
    ignored = adapter.ignored_layers(model)
    if pruned_flops is not None:
        chosen = ratios_by_flops(model, example, sens, pruned_flops, round_to=round_to,
                                 ignored_layers=ignored)
    else:
        chosen = ratios_by_loss(sens, eval_metric_loss)
    baseline_model = copy.deepcopy(model)
    result = prune(model, example, chosen, criterion=criterion, round_to=round_to,
                   ignored_layers=ignored)
    _log(f"[autoprune] pruned {len(result.plan)} groups: FLOPs {result.flops_before / 1e6:.1f}M "
          f"-> {result.flops_after / 1e6:.1f}M (-{result.flops_reduction:.1%}); retraining "
          f"{epochs} epochs")
    model = adapter.fit(model, epochs, save_dir / "pruned",
                        meta={**meta, "pruned": True, "plan": result.plan}, **resuming)

    def finish() -> dict[str, Any]:
        report = {"task": adapter.task, "arch": arch, "sensitivities_file": str(sens_path),
                  "eval_metric_loss": None if pruned_flops is not None else eval_metric_loss,
                  "pruned_flops_target": pruned_flops, "criterion": criterion,
                  "round_to": round_to, "ratios": dict(chosen),
                  "flops_reduction": result.flops_reduction,
                  "baseline": _figures(adapter, baseline_model, base_metrics),
                  "pruned": _figures(adapter, model, adapter.evaluate(model))}
        write_reports(report, save_dir)
        plot_sensitivities(sens, save_dir / "sensitivity.png",
                           title=f"Sensitivity: {arch or 'model'}",
                           threshold=None if pruned_flops is not None else eval_metric_loss)
        print(to_console(report))
        return report

    report = _on_rank0(finish)  # latency is measured by one process, alone
    return TrainResult(model, report=report, baseline_path=baseline_path,
                       pruned_path=save_dir / "pruned" / "best.pt", sensitivities_path=sens_path,
                       ratios=dict(chosen), metrics=report["pruned"]["metrics"])


def _on_rank0(fn: Callable[[], Any]) -> Any:
    """``fn()`` run by rank 0 alone (evaluation, measuring, writing), its result sent to every
    rank; just ``fn()`` in a single process."""
    return broadcast(fn() if rank_and_world()[0] == 0 else None)


def _log(line: str) -> None:
    if rank_and_world()[0] == 0:
        print(line, flush=True)


def _has_eval(adapter: TaskAdapter) -> bool:
    return getattr(adapter, "eval_set", None) is not None


def analyze_sensitivity(adapter: TaskAdapter, model: str | nn.Module, save_file: str | os.PathLike,
                        *, pretrain_weights: str | os.PathLike | None = None,
                        criterion: str = "l1_norm", ratios: Iterable[float] = DEFAULT_RATIOS,
                        progress: bool = True,
                        sensitivity_options: Mapping[str, Any] | None = None
                        ) -> dict[str, dict[float, float]]:
    """Step 2 of the flow: measure the sensitivities of a trained model into ``save_file``.

    ``model`` is a checkpoint path written by autoprune, a model name (then pass
    ``pretrain_weights``) or a model object.
    """
    arch = None
    if names_a_missing_file(model):
        raise CheckpointError(f"no checkpoint at {model}: check the path")
    if isinstance(model, (str, os.PathLike)) and Path(model).is_file():
        meta = read_pruned_metadata(model)
        arch = meta.get("arch")
        model = load_model(model, adapter)
    elif isinstance(model, str):
        arch = adapter.arch_key(model)
        model = adapter.build(arch)
        if pretrain_weights is None:
            raise ConfigError("a model name needs pretrain_weights=<checkpoint of the trained "
                              "model>: sensitivities of an untrained model mean nothing")
    if pretrain_weights is not None:
        load_weights(model, pretrain_weights)
    _check_data(adapter, model)
    model.to(getattr(adapter, "device", "cpu"))
    if Path(save_file).is_file():  # measuring this model: a table of other weights is no answer
        check_sensitivities_file(adapter, model, save_file, arch, criterion)  # the model first
        stored = read_record(save_file).model.get("weights_sha256")
        if stored and stored != weights_sha256(model):
            raise SensitivityFileError(f"{save_file} was measured on other weights of this model: "
                                       f"pass a new file path to measure these (or delete it)")
    sens, _ = get_sensitivities(adapter, model, save_file, arch=arch, criterion=criterion,
                                ratios=ratios, progress=progress, options=sensitivity_options)
    return sens


def load_model(path: str | os.PathLike, adapter: TaskAdapter | None = None,
               base_model: nn.Module | None = None) -> nn.Module:
    """Rebuild the model saved at ``path`` (pruned or not) and load its weights (weights-only).

    The architecture comes from the checkpoint's metadata; a checkpoint of a custom model object
    needs ``base_model`` (a fresh instance of the same unpruned architecture).
    """
    meta = read_pruned_metadata(path)
    if base_model is None:
        if not meta.get("arch"):
            raise CheckpointError(f"{path} was saved from a custom model object: pass "
                                  f"base_model=<a fresh instance of that architecture>")
        if adapter is None:
            from .tasks import get_adapter

            adapter = get_adapter(meta.get("task", "classification"))
        if meta.get("task") not in (None, adapter.task):
            raise CheckpointError(f"{path} is a {meta.get('task')} checkpoint, not "
                                  f"{adapter.task}: use autoprune.{meta.get('task')}.load_model")
        base_model = adapter.build(meta["arch"], **meta.get("build", {}))
    return load_pruned(path, base_model).eval()


def adapter_for_checkpoint(path: str | os.PathLike, **kwargs: Any) -> tuple[TaskAdapter, dict]:
    """The task adapter a checkpoint was made with (its classes and input size), plus its metadata."""
    from .tasks import get_adapter

    meta = read_pruned_metadata(path)
    settings = {"input_size": meta.get("input_size"), **meta.get("build", {}), **kwargs}
    return get_adapter(meta.get("task", "classification"), **settings), meta


def prune_checkpoint(checkpoint: str | os.PathLike, sensitivities_file: Any,
                     output: str | os.PathLike, *, eval_metric_loss: float | None = None,
                     pruned_flops: float | None = None, criterion: str = "l1_norm",
                     round_to: int | None = None, overwrite: bool = False):
    """Prune a saved model with a sensitivity file (or "DEFAULT") and save it, without retraining.
    The target is ``eval_metric_loss`` (0.05 when neither is given) or ``pruned_flops``;
    ``output`` may replace ``checkpoint`` only with ``overwrite=True``."""
    if same_file(output, checkpoint) and not overwrite:
        raise ConfigError(f"output {output} is the input checkpoint: choose another path (the "
                          f"input is never overwritten)")
    eval_metric_loss = check_targets(eval_metric_loss, pruned_flops)
    adapter, meta = adapter_for_checkpoint(checkpoint)
    model = load_model(checkpoint, adapter)
    if sens_mode(sensitivities_file) == "new":
        raise SensitivityFileError(f"no sensitivity file at {sensitivities_file}: measure one "
                                   f"with `autoprune sensitivity` first, or pass DEFAULT")
    check_criterion(criterion)
    path = check_sensitivities_file(adapter, model, sensitivities_file, meta.get("arch"), criterion)
    sens = read_record(path).sensitivities
    example, ignored = adapter.example_inputs(model), adapter.ignored_layers(model)
    chosen = ratios_by_flops(model, example, sens, pruned_flops, round_to=round_to,
                             ignored_layers=ignored) if pruned_flops is not None \
        else ratios_by_loss(sens, eval_metric_loss)
    result = prune(model, example, chosen, criterion=criterion, round_to=round_to,
                   ignored_layers=ignored)
    previous = meta.get("plan") or {}
    save_pruned(model, output, **{**meta, "pruned": True, "plan": {**previous, **result.plan}})
    return result


def export_checkpoint(checkpoint: str | os.PathLike, output: str | os.PathLike, *,
                      input_size: int | None = None, opset_version: int = 17,
                      overwrite: bool = False) -> Path:
    """Export a checkpoint written by autoprune (pruned or not) to ONNX at ``output``, with the
    task's input (batch 1, the checkpoint's input size unless ``input_size`` is given);
    ``output`` may replace ``checkpoint`` only with ``overwrite=True``."""
    if same_file(output, checkpoint) and not overwrite:
        raise ConfigError(f"output {output} is the input checkpoint: choose another path, e.g. "
                          f"{Path(checkpoint).with_suffix('.onnx')}")
    if input_size is not None and input_size < 1:
        raise ConfigError(f"--size {input_size} must be a positive number of pixels")
    size = {"input_size": input_size} if input_size else {}
    adapter, _ = adapter_for_checkpoint(checkpoint, **size)
    model = load_model(checkpoint, adapter)
    return adapter.export_onnx(model, Path(output), opset_version=opset_version)


def compare_checkpoints(baseline: str | os.PathLike, pruned: str | os.PathLike, data: Any, *,
                        save_dir: str | os.PathLike = ".", eval_limit: int | None = None,
                        device: str = "auto") -> dict[str, Any]:
    """Evaluate and measure two checkpoints of one architecture; write and print the report."""
    what = [_model_of(read_pruned_metadata(p)) for p in (baseline, pruned)]
    if what[0] != what[1]:
        raise ConfigError(f"{pruned} holds a {what[1]} but {baseline} a {what[0]}: compare a "
                          f"pruned checkpoint with the checkpoint it was pruned from")
    adapter, meta = adapter_for_checkpoint(baseline, eval_data=data, eval_limit=eval_limit,
                                           device=device, progress=False)
    models = [load_model(p, adapter).to(adapter.device) for p in (baseline, pruned)]
    figures = [_figures(adapter, m, adapter.evaluate(m)) for m in models]
    report = {"task": adapter.task, "arch": meta.get("arch"), "baseline": figures[0],
              "pruned": figures[1], "flops_reduction": 1 - figures[1]["flops"] / figures[0]["flops"]}
    write_reports(report, check_save_dir(save_dir))
    print(to_console(report))
    return report


def _model_of(meta: Mapping[str, Any]) -> str:
    """The model a checkpoint holds, in words: "classification timm/resnet18 (num_classes=10)"."""
    build = ", ".join(f"{k}={v}" for k, v in (meta.get("build") or {}).items())
    return f"{meta.get('task')} {meta.get('arch') or 'custom model'}" + (f" ({build})" if build
                                                                          else "")

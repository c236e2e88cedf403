"""The task-agnostic journey, in named stages: checks -> base model -> sensitivity table ->
allocation -> prune and retrain (in one or several steps) -> report.
(over 400 lines: the flow's stages in order, each a short function; step 2 alone,
``analyze_sensitivity``, is :mod:`autoprune.flow.analysis_step`.)

It talks to a task only through the :class:`~autoprune.flow.contract.TaskAdapter` contract, and
takes its settings as one :class:`~autoprune.flow.config.FlowSettings`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import torch.nn as nn

from ..engine.channels import check_criterion
from ..engine.checkpoint import BASE_SHAPES, save_pruned
from ..engine.distributed import barrier, broadcast, init_from_env, rank_and_world
from ..engine.fast_copy import fast_deepcopy
from ..engine.progress import counted
from ..engine.provenance import file_provenance
from ..engine.prune import PruneResult, check_round_to, prune
from ..engine.sensitivity import check_ratios
from ..engine.store import SensitivityRecord
from ..errors import ConfigError
from .allocation import Targets, choose_ratios, table_for
from .checkpoints import load_model, load_weights
from .config import (FlowSettings, check_flags, check_numbers, from_flat, run_record,
                     save_run_config)
from .contract import TaskAdapter, TrainResult
from .int8 import INT8_FILE, quantize_sides
from .latency import check_unused_settings, default_round_to, target_fields
from .layout import BASELINE, PRUNED, SIDE_FILE, STEP_PREFIX, old_layout, run_outputs
from .options import (check_outputs, check_save_dir, check_sensitivity_options,
                      written_by_run)
from .plots import plot_sensitivities
from .previous import previous_run
from .report import analysis_summary, compare_sides, to_console, write_reports
from .sensitivities import allocation_target, check_sensitivities_file, get_sensitivities
from .steps import Schedule, check_schedule, combined, step_targets
from .training import Distill, prepare_teacher


@dataclass
class Run:
    """What the stages of one run share: the adapter, the settings and what each stage left."""

    adapter: TaskAdapter
    flow: FlowSettings
    save_dir: Path
    mode: str                              # see FlowSettings.mode
    targets: Targets | None = None         # None: plain training
    distill: dict[str, Any] | None = None  # the recipe, as the report records it
    schedule: Schedule | None = None
    arch: str | None = None
    model: nn.Module | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    baseline_path: Path | None = None
    base_metrics: dict[str, float] = field(default_factory=dict)
    baseline_model: nn.Module | None = None
    record: SensitivityRecord | None = None
    sens_path: Path | None = None
    chosen: Mapping[str, float] = field(default_factory=dict)
    result: PruneResult | None = None


def train(adapter: TaskAdapter, model: str | nn.Module, flow: FlowSettings | None = None, *,
          inputs: Mapping[str, Any] | None = None, settings: Any = None,
          **keywords: Any) -> TrainResult:
    """The PaddleX-style flow for any task (see ``autoprune.classification.train``), with the
    settings ``flow`` (or given as keywords). ``inputs`` / ``settings``: what the task API was
    called with, saved with the flow's settings as ``save_dir/args.yaml``.

    Every mode writes the layout of :mod:`autoprune.flow.layout`: each trained model in a stage
    folder (``baseline/``, ``pruned/``), reports at the top of ``save_dir``. Under torchrun (a
    script, or ``torchrun -m autoprune train``) the process group is started here when it is
    not yet: training runs as DDP, the analysis is shared out over the ranks."""
    init_from_env(adapter.device)
    run = start(adapter, model, flow or from_flat(FlowSettings, keywords), inputs, settings)
    if run.targets is None:
        return plain_training(run)
    base_model(run)
    sensitivity_table(run)
    if (run.flow.sensitivity_options or {}).get("plan"):
        _log("[autoprune] sensitivity_options plan=True: the analysis' expected cost is "
             "printed above; nothing was pruned (run again without plan to measure and prune)")
        return TrainResult(run.model, baseline_path=run.baseline_path,
                           sensitivities_path=run.sens_path)
    allocate(run)
    prune_and_retrain(run)
    return finish(run)


# --- the stages -----------------------------------------------------------------------------
def start(adapter: TaskAdapter, model: Any, flow: FlowSettings,
          inputs: Mapping[str, Any] | None, settings: Any) -> Run:
    """Check every setting (before hours of training), look at what an earlier run left, build
    the model and save the run's settings."""
    run = check(adapter, flow)
    run.save_dir = check_save_dir(flow.save_dir)
    check_outputs(*run_outputs(run.save_dir, run.mode, flow.pretrain_weights, flow.prune_steps,
                               adapter.stage_files))
    given = run_record(adapter.task, dict(inputs or {"model": model}), flow, settings)
    model, pretrain_weights = adapter.prepare_model(model, flow.pretrain_weights, run.save_dir)
    if pretrain_weights is not flow.pretrain_weights:  # e.g. the weights of a YOLO object
        run.flow = dataclasses.replace(run.flow, pretrain_weights=pretrain_weights)
        if pretrain_weights is not None and flow.pretrain_epochs is not None and \
                run.mode != "none":
            _log(f"[autoprune] note: the model's weights are taken as the base model (trained on "
                 f"the data's classes): pretrain_epochs={flow.pretrain_epochs} is not used")
    flow = run.flow  # as checked (round_to for a deploy runtime) and prepared
    if flow.pretrain_epochs == 0 and flow.pretrain_weights is None and run.mode != "none" \
            and not adapter.starts_trained():
        raise ConfigError("pretrain_epochs=0 prunes the starting weights as they are, but this "
                          "model holds none trained for the data's classes (random weights, or "
                          "a new head for them): pass pretrain_epochs=1 or more to fine-tune "
                          "first, or pretrain_weights=<a trained checkpoint>")
    _announce_previous(run)
    data = adapter.describe_data()
    if data:
        _log(f"[autoprune] data: {data}")
    run.arch = adapter.arch_key(model)  # a name or a model object (None: unknown architecture)
    run.model, rebuild_arch = _built(adapter, model, run.arch)
    adapter.check_model(run.model)
    adapter.check_data(run.model)
    if flow.pretrain_weights is not None:
        if written_by_run(Path(flow.pretrain_weights), run.save_dir, run.mode,
                          adapter.stage_files):
            raise ConfigError(f"pretrain_weights {flow.pretrain_weights} lies where this run "
                              f"writes its outputs: pick another save_dir (the input is never "
                              f"overwritten)")
        load_weights(run.model, flow.pretrain_weights)
    run.model.to(adapter.device)
    run.meta = {"task": adapter.task, "arch": rebuild_arch,
                "build": adapter.build_kwargs(run.model), "input_size": adapter.input_size,
                "start_weights": start_weights(adapter, flow.pretrain_weights),
                "data": adapter.data_settings()}
    if run.targets is not None:
        check_sensitivities_file(adapter, run.model, flow.sensitivities_file, run.arch,
                                 flow.criterion)
    if rank_and_world()[0] == 0:  # the settings as given (a resumed run compares with them),
        save_run_config(run.save_dir, given)  # once every check has passed
    return run


def check(adapter: TaskAdapter, flow: FlowSettings) -> Run:
    """Every setting of the run checked (one-line ConfigErrors), before any work; the run's
    mode, targets, distillation recipe and step schedule."""
    mode = flow.mode()
    check_numbers(whole=True, low=1, epochs=flow.epochs, prune_steps=flow.prune_steps)
    check_numbers(whole=True, pretrain_epochs=flow.pretrain_epochs)  # 0: prune as published
    check_flags(progress=flow.progress, resume=flow.resume)
    if not flow.int8.wanted():  # quantize="int8" times with latency_threads and latency_batch
        check_unused_settings(flow.pruned_latency, flow.latency)
    flow.int8.check(flow.latency)
    distill = adapter.distill_recipe(flow.distill)
    run = Run(adapter, flow, Path(flow.save_dir), mode, distill=distill)
    if mode == "none":
        if flow.pruned_latency is not None:
            raise ConfigError("pruned_latency needs sensitivities_file: a path to measure the "
                              "sensitivities and latencies into, or 'DEFAULT'")
        if distill or flow.prune_steps > 1:
            raise ConfigError("distill and prune_steps shape the retraining after pruning: pass "
                              "sensitivities_file (a path or 'DEFAULT') and a target, or drop "
                              "them")
        if flow.pruned_flops is not None:  # else trained, not pruned, and nothing said
            raise ConfigError("pruned_flops needs sensitivities_file: a path to measure the "
                              "sensitivities into, or 'DEFAULT' (the bundled profile)")
        return run
    if flow.pretrain_epochs and flow.pretrain_weights is not None and \
            Path(str(flow.pretrain_weights)).is_file():
        raise ConfigError(f"pretrain_epochs={flow.pretrain_epochs} trains the base model, but "
                          f"pretrain_weights={flow.pretrain_weights} is the trained base model "
                          f"(pruned as it is): drop pretrain_epochs, or drop pretrain_weights "
                          f"to train a base model first")
    if flow.prune_steps > flow.epochs:
        raise ConfigError(f"prune_steps={flow.prune_steps} needs at least as many epochs "
                          f"(epochs={flow.epochs}): each step retrains epochs // prune_steps "
                          f"epochs")
    run.targets = Targets.of(flow.eval_metric_loss, flow.pruned_flops, flow.pruned_latency,
                             flow.latency)
    if flow.round_to is None and default_round_to(flow.latency):
        run.flow = dataclasses.replace(flow, round_to=default_round_to(flow.latency))
    if not callable(flow.criterion):
        check_criterion(flow.criterion)
    check_sensitivity_options(flow.sensitivity_options)
    check_ratios(flow.ratios)
    check_round_to(flow.round_to)
    run.schedule = check_schedule(flow.prune_schedule, flow.prune_steps)
    if adapter.eval_set is None:
        raise ConfigError("pruning needs eval_data: the sensitivities and the report are "
                          "measured on it; pass a validation folder or Dataset")
    return run


def plain_training(run: Run) -> TrainResult:
    """No sensitivities_file: train (or fine-tune) into ``baseline/``."""
    adapter, stage = run.adapter, run.save_dir / BASELINE
    model = _fit(run, run.model, run.flow.epochs, stage, pruned=False)
    _print_outputs(run.save_dir, [("model", stage / "best.pt"), ("last epoch", stage / "last.pt"),
                                  *adapter.deployables(stage)])
    return TrainResult(model, baseline_path=stage / "best.pt",
                       metrics=_on_rank0(lambda: adapter.evaluate(model))
                       if adapter.eval_set is not None else {})


def base_model(run: Run) -> None:
    """The model to prune: trained first into ``baseline/`` (the one-call flow), or the given
    ``pretrain_weights``; its metrics are the report's baseline."""
    flow = run.flow
    if flow.pretrain_weights is None and flow.pretrain_epochs == 0:
        _log("[autoprune] base model: the starting weights as they are (pretrain_epochs=0)")
        run.baseline_path = run.save_dir / BASELINE / "best.pt"
        if rank_and_world()[0] == 0:
            save_pruned(run.model, run.baseline_path, **{**run.meta, "pruned": False})
        barrier()
    elif flow.pretrain_weights is None:
        epochs = flow.pretrain_epochs or flow.epochs
        _log(f"[autoprune] training the base model ({counted(epochs, 'epoch')})")
        run.model = _fit(run, run.model, epochs, run.save_dir / BASELINE, pruned=False)
        run.baseline_path = run.save_dir / BASELINE / "best.pt"
    else:
        run.baseline_path = Path(flow.pretrain_weights)
    run.base_metrics = _on_rank0(lambda: run.adapter.evaluate(run.model))
    _log(f"[autoprune] baseline {run.adapter.metric} = "
         f"{run.base_metrics[run.adapter.metric]:.4f}")


def sensitivity_table(run: Run) -> None:
    """The sensitivity table: the DEFAULT profile, or a file measured or completed (each point
    also timed with a latency target)."""
    flow = run.flow
    _log(f"[autoprune] sensitivities ({run.mode}: {flow.sensitivities_file})")
    run.record, run.sens_path = get_sensitivities(  # a latency target's timings: allocate()
        run.adapter, run.model, flow.sensitivities_file, arch=run.arch,
        criterion=flow.criterion, ratios=flow.ratios, progress=flow.progress,
        options=flow.sensitivity_options, target=allocation_target(run.targets))


def allocate(run: Run) -> None:
    """Per-group ratios for the target (:func:`~autoprune.flow.allocation.choose_ratios`)."""
    adapter, flow = run.adapter, run.flow
    table = table_for(adapter, run.model, run.record, run.sens_path, targets=run.targets,
                      default_profile=run.mode == "default", save_dir=run.save_dir,
                      arch=run.arch, criterion=flow.criterion, progress=flow.progress)
    run.chosen = choose_ratios(adapter, run.model, table, run.targets, round_to=flow.round_to,
                               criterion=flow.criterion, save_dir=run.save_dir,
                               resume=flow.resume)
    latency = run.targets.latency
    if latency is not None:
        _log(f"[autoprune] latency target -{latency.value:.0%} on {latency.device}: measured "
             f"-{run.chosen.achieved:.1%} ({run.chosen.baseline_ms:.2f} -> "
             f"{run.chosen.pruned_ms:.2f} ms)")


def prune_and_retrain(run: Run) -> None:
    """Prune to the chosen ratios in ``prune_steps`` steps, retraining after each (the last step
    into ``pruned/``, those before into ``pruned_step<k>/``), distilling the unpruned model
    when asked."""
    adapter, flow = run.adapter, run.flow
    run.baseline_model = fast_deepcopy(run.model)
    distill = None
    if run.distill:  # the teacher: the unpruned model, frozen
        distill = Distill.of(prepare_teacher(fast_deepcopy(run.baseline_model), adapter.device),
                             run.distill)
    model, ignored = run.model, adapter.ignored_layers(run.model)
    steps = step_targets(model, adapter.example_inputs(model), run.chosen, flow.prune_steps,
                         flow.round_to, ignored, run.schedule)
    done: list[PruneResult] = []
    for k, step_ratios in enumerate(steps, 1):
        done.append(prune(model, adapter.example_inputs(model), step_ratios(done),
                          criterion=flow.criterion, round_to=flow.round_to,
                          ignored_layers=ignored,  # a later step starts where the last ended
                          flops_before=done[-1].flops_after if done else None))
        run.result = combined(done, run.chosen)
        epochs = step_epochs(flow.epochs, flow.prune_steps, k)
        which = f" (step {k}/{flow.prune_steps})" if flow.prune_steps > 1 else ""
        _log(f"[autoprune] pruned {len(run.result.plan)} groups{which}: FLOPs "
             f"{run.result.flops_before / 1e6:.1f}M -> {run.result.flops_after / 1e6:.1f}M "
             f"(-{run.result.flops_reduction:.1%}); retraining {counted(epochs, 'epoch')}"
             + (", distilling the unpruned model" if distill else ""))
        stage = run.save_dir / (PRUNED if k == flow.prune_steps else f"{STEP_PREFIX}{k}")
        model = _fit(run, model, epochs, stage, pruned=True, distill=distill)
    run.model = model


def finish(run: Run) -> TrainResult:
    """The before/after report (rank 0 measures alone), the plot and the list of outputs."""
    report = _on_rank0(lambda: write_report(run))
    save_dir = run.save_dir
    _print_outputs(save_dir, [
        ("pruned model", save_dir / PRUNED / "best.pt"),
        *run.adapter.deployables(save_dir / PRUNED), ("base model", run.baseline_path),
        ("sensitivities", run.sens_path),
        *[("latency table", save_dir / SIDE_FILE) for _ in [0]
          if run.mode == "default" and run.targets.latency is not None],
        ("report", save_dir / "report.md"), ("report data", save_dir / "report.json"),
        ("report table", save_dir / "report.csv"), ("plot", save_dir / "sensitivity.png")])
    return TrainResult(run.model, report=report, baseline_path=run.baseline_path,
                       pruned_path=save_dir / PRUNED / "best.pt",
                       sensitivities_path=run.sens_path, ratios=dict(run.chosen),
                       metrics=report["pruned"]["metrics"])


def write_report(run: Run) -> dict[str, Any]:
    """``report.json|md|csv`` and ``sensitivity.png`` of a finished run; the report printed."""
    adapter, flow, targets = run.adapter, run.flow, run.targets
    pruned_metrics = adapter.evaluate(run.model)
    sides = compare_sides(adapter, run.baseline_model, run.model, run.base_metrics,
                          pruned_metrics)
    report = {"task": adapter.task, "arch": run.arch, "data": adapter.describe_data(),
              "start_weights": run.meta["start_weights"],
              "sensitivities_file": str(run.sens_path),
              "sensitivity_analysis": analysis_summary(run.record.extra),
              "eval_metric_loss": None if targets.flops is not None else targets.loss,
              "pruned_flops_target": targets.flops, "pruned_latency_target": flow.pruned_latency,
              "criterion": _name_of(flow.criterion), "round_to": flow.round_to,
              "ratios": dict(run.chosen), "flops_reduction": run.result.flops_reduction,
              "recipe": {"distill": run.distill or False, "prune_steps": flow.prune_steps},
              **target_fields(eval_metric_loss=targets.loss, pruned_flops=targets.flops,
                              target=targets.latency,
                              baseline=adapter.deploy_module(run.baseline_model),
                              pruned=adapter.deploy_module(run.model),
                              example_inputs=adapter.example_inputs(run.model),
                              chosen=run.chosen, cpu=sides["latency_paired"]["cpu"]),
              **sides}
    if flow.int8.wanted(flow.latency):  # FP32 / INT8 x base / pruned, in the runtime
        report["int8"] = quantize_sides(
            adapter, {"baseline": run.baseline_model, "pruned": run.model},
            {"baseline": run.save_dir / BASELINE / INT8_FILE,
             "pruned": run.save_dir / PRUNED / INT8_FILE},
            {"baseline": run.base_metrics, "pruned": pruned_metrics}, flow.int8, flow.latency)
    write_reports(report, run.save_dir)
    plot_sensitivities(run.record.sensitivities, run.save_dir / "sensitivity.png",
                       title=f"Sensitivity: {run.arch or 'model'}",
                       threshold=targets.loss if targets.flops is None else None)
    print(to_console(report))
    return report


# --- helpers --------------------------------------------------------------------------------
def start_weights(adapter: TaskAdapter, pretrain_weights: Any) -> dict[str, Any] | None:
    """Where the model's starting weights came from: the pretrained weights the adapter loaded,
    else the ``pretrain_weights`` file (with its sha256), else None (random initialisation)."""
    loaded = adapter.start_weights()
    if loaded is not None:
        return loaded
    if pretrain_weights is not None and Path(pretrain_weights).is_file():
        return file_provenance(pretrain_weights).to_dict()
    return None


def step_epochs(epochs: int, steps: int, k: int) -> int:
    """Retraining epochs after step ``k`` of ``steps``: ``epochs // steps``, the last step the
    remainder."""
    return epochs // steps if k < steps else epochs - (steps - 1) * (epochs // steps)


def _fit(run: Run, model: nn.Module, epochs: int, stage: Path, *, pruned: bool,
         distill: Distill | None = None) -> nn.Module:
    meta = {**run.meta, "pruned": pruned}
    if pruned and run.result is not None:
        meta["plan"] = run.result.plan
    extra = {"distill": distill} if distill is not None else {}
    return run.adapter.fit(model, epochs, stage, meta=meta, resume=run.flow.resume, **extra)


def _built(adapter: TaskAdapter, model: Any, arch: str | None) -> tuple[nn.Module, str | None]:
    """The model object (built from its name), and the architecture a checkpoint may record
    (None when a rebuild from the name would not give this model)."""
    if isinstance(model, str):
        return adapter.build(arch), arch
    return model, arch if arch and _rebuilds(adapter, arch, model) else None


def _rebuilds(adapter: TaskAdapter, arch: str, model: nn.Module) -> bool:
    """True when ``adapter.build(arch)`` gives ``model``'s modules and (unpruned) shapes, so a
    checkpoint may record ``arch`` and ``load_model`` rebuild it; a patched or resized model
    records no arch (loading it then needs ``base_model``)."""
    try:
        fresh = adapter.build(arch, **adapter.build_kwargs(model))
    except Exception:  # noqa: BLE001 - any failure means: not rebuildable from the key
        return False
    structure = lambda m: [(n, type(x).__name__) for n, x in m.named_modules()]  # noqa: E731
    shapes = getattr(model, BASE_SHAPES, None) or \
        {k: tuple(v.shape) for k, v in model.state_dict().items()}
    fresh_shapes = {k: tuple(v.shape) for k, v in fresh.state_dict().items()}
    return structure(fresh) == structure(model) and \
        {k: tuple(v) for k, v in shapes.items()} == fresh_shapes


def _announce_previous(run: Run) -> None:
    """Say what an earlier run left in save_dir (resumed, or replaced), and an earlier version's
    files (never read, never replaced)."""
    flow = run.flow
    found, old = _on_rank0(lambda: (
        previous_run(run.adapter, run.save_dir, run.mode, flow.sensitivities_file,
                     flow.pretrain_weights),
        old_layout(run.save_dir, flow.pretrain_weights, run.adapter.stage_files)))
    if old:
        _log(f"[autoprune] {old}")
    if found:
        _log(f"[autoprune] {run.save_dir} holds {found}: " + (
            "resuming it" if flow.resume else "this run starts over and replaces it (resume=True, "
            "or `autoprune train --resume`, continues it; another save_dir keeps it)"))


def _name_of(criterion: Any) -> str:
    return criterion if isinstance(criterion, str) else \
        getattr(criterion, "__name__", type(criterion).__name__)


def _on_rank0(fn: Callable[[], Any]) -> Any:
    """``fn()`` run by rank 0 alone (evaluation, measuring, writing), its result sent to every
    rank; just ``fn()`` in a single process."""
    return broadcast(fn() if rank_and_world()[0] == 0 else None)


def _print_outputs(save_dir: Path, outputs: list[tuple[str, Path]]) -> None:
    """The run's last lines: where each of its outputs is, one a line (rank 0)."""
    width = max(len(label) for label, _ in outputs)
    _log(f"[autoprune] outputs of this run (save_dir {save_dir}):\n" + "\n".join(
        f"  {label.ljust(width)}  {path}" for label, path in outputs))


def _log(line: str) -> None:
    if rank_and_world()[0] == 0:
        print(line, flush=True)

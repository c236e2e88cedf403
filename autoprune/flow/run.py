"""The task-agnostic journey: base model -> sensitivities -> ratios -> prune -> retrain -> report.

It talks to a task only through the :class:`~autoprune.tasks.base.TaskAdapter` contract.
"""
from __future__ import annotations

import copy
import inspect
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import torch.nn as nn

from ..engine.allocate import ratios_by_flops, ratios_by_loss
from ..engine.checkpoint import BASE_SHAPES
from ..engine.distributed import broadcast, init_from_env, rank_and_world
from ..engine.channels import channels_to_keep, check_criterion
from ..engine.groups import PruningGraph
from ..engine.prune import PruneResult, check_round_to, prune
from ..engine.sensitivity import DEFAULT_RATIOS, check_ratios, weights_sha256
from ..engine.store import read_record
from ..errors import CheckpointError, ConfigError, SensitivityFileError
from ..tasks.base import TaskAdapter, TrainResult
from .checkpoints import checkpoint_meta, load_model, load_weights
from .latency import (check_unused_settings, latency_ratios, latency_target, target_fields,
                      timed_default)
from .layout import BASELINE, PRUNED, STEP_PREFIX, old_layout, run_outputs
from .options import (check_numbers, check_outputs, check_save_dir, check_sensitivity_options, check_targets,
                      names_a_missing_file, sens_mode, written_by_run)
from .plots import plot_sensitivities
from .previous import previous_run
from .report import compare_sides, to_console, write_reports
from .sensitivities import check_sensitivities_file, get_sensitivities
from .training import Distill, check_distill, prepare_teacher


def _checkpoint_meta(adapter: TaskAdapter, arch: str | None, model: nn.Module,
                     **extra: Any) -> dict[str, Any]:
    return {"task": adapter.task, "arch": arch, "build": adapter.build_kwargs(model),
            "input_size": adapter.input_size, **extra}

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
          resume: bool = False, pruned_latency: float | None = None,
          latency_device: str = "cpu", latency_threads: int | None = None,
          latency_batch: int = 1, distill: Any = False, prune_steps: int = 1) -> TrainResult:
    """The PaddleX-style flow for any task (see ``autoprune.classification.train``).

    Every mode writes the layout of :mod:`autoprune.flow.layout`: each trained model in a stage
    folder (``baseline/``, ``pruned/``), reports at the top of ``save_dir``.
    ``resume=True``: each training stage continues from its ``train_state.pt``; a finished
    stage is not trained again.
    ``pruned_latency``: the share of latency to remove, measured on ``latency_device``
    (``latency_threads``, ``latency_batch``); the analysis then times its points (a DEFAULT
    profile's points are timed into ``save_dir/sensitivities_latency.json``) and
    ``eval_metric_loss``, if given, caps any group's loss.
    ``distill``: retrain the pruned model against the unpruned one (True, or ``{"alpha": a,
    "temperature": t}``; adapters with ``distills`` only). ``prune_steps=K``: reach the ratios
    in K steps (the same final channel counts), retraining ``epochs // K`` epochs after each
    (the last step the remainder).

    Under torchrun (a script, or ``torchrun -m autoprune train``) the process group is started
    here when it is not yet: training runs as DDP, the analysis is shared out over the ranks."""
    init_from_env()
    mode = sens_mode(sensitivities_file)
    check_numbers(whole=True, low=1, epochs=epochs, pretrain_epochs=pretrain_epochs,
                  prune_steps=prune_steps)
    distill = check_recipe(adapter, mode, epochs, distill, prune_steps)
    check_unused_settings(pruned_latency, latency_device, latency_threads, latency_batch)
    if pruned_latency is not None and mode == "none":
        raise ConfigError("pruned_latency needs sensitivities_file: a path to measure the "
                          "sensitivities and latencies into, or 'DEFAULT'")
    target = None
    if mode != "none":  # every setting of the later steps, before hours of training
        # 0.05 by default; with pruned_latency a cap on any group's loss, or None
        eval_metric_loss = check_targets(eval_metric_loss, pruned_flops, pruned_latency)
        target = latency_target(pruned_latency, latency_device, latency_threads, latency_batch)
        check_criterion(criterion)
        check_sensitivity_options(sensitivity_options)
        check_ratios(ratios)
        check_round_to(round_to)
        if not _has_eval(adapter):
            raise ConfigError("pruning needs eval_data: the sensitivities and the report are "
                              "measured on it; pass a validation folder or Dataset")
    save_dir = check_save_dir(save_dir)
    check_outputs(*run_outputs(save_dir, mode, pretrain_weights, prune_steps))
    found, old = _on_rank0(lambda: (
        previous_run(adapter, save_dir, mode, sensitivities_file, pretrain_weights),
        old_layout(save_dir, pretrain_weights)))
    if old:  # an earlier version's files: never read, never replaced
        _log(f"[autoprune] {old}")
    if found:
        _log(f"[autoprune] {save_dir} holds {found}: " + (
            "resuming it" if resume else "this run starts over and replaces it (resume=True, or "
            "`autoprune train --resume`, continues it; another save_dir keeps it)"))
    arch = adapter.arch_key(model)  # a name or a model object (None: unknown architecture)
    if isinstance(model, str):
        model = adapter.build(arch)
        rebuild_arch = arch
    else:
        rebuild_arch = arch if arch and _rebuilds(adapter, arch, model) else None
    adapter.check_model(model)
    adapter.check_data(model)
    if pretrain_weights is not None:
        if written_by_run(Path(pretrain_weights), save_dir, mode):
            raise ConfigError(f"pretrain_weights {pretrain_weights} lies where this run writes its "
                              f"outputs: pick another save_dir (the input is never overwritten)")
        load_weights(model, pretrain_weights)
    model.to(adapter.device)
    meta = _checkpoint_meta(adapter, rebuild_arch, model)
    if mode != "none":
        check_sensitivities_file(adapter, model, sensitivities_file, arch, criterion)
    resuming = {"resume": True} if resume else {}  # only adapters with their own loop take it

    base_stage = save_dir / BASELINE  # every mode: a trained model lives in a stage folder
    if mode == "none":  # plain training
        model = adapter.fit(model, epochs, base_stage, meta={**meta, "pruned": False},
                            **resuming)
        _print_outputs(save_dir, [("model", base_stage / "best.pt"),
                                  ("last epoch", base_stage / "last.pt"),
                                  *adapter.deployables(base_stage)])
        return TrainResult(model, baseline_path=base_stage / "best.pt",
                           metrics=_on_rank0(lambda: adapter.evaluate(model))
                           if _has_eval(adapter) else {})

    if pretrain_weights is None:  # the one-call flow: train the base model first
        _log(f"[autoprune] training the base model ({pretrain_epochs or epochs} epochs)")
        model = adapter.fit(model, pretrain_epochs or epochs, base_stage,
                            meta={**meta, "pruned": False}, **resuming)
        baseline_path = base_stage / "best.pt"
    else:
        baseline_path = Path(pretrain_weights)
    base_metrics = _on_rank0(lambda: adapter.evaluate(model))
    _log(f"[autoprune] baseline {adapter.metric} = {base_metrics[adapter.metric]:.4f}")

    _log(f"[autoprune] sensitivities ({mode}: {sensitivities_file})")
    timed = {**dict(sensitivity_options or {}), **target.options()} if target else \
        sensitivity_options
    sens, sens_path = get_sensitivities(adapter, model, sensitivities_file, arch=arch,
                                        criterion=criterion, ratios=ratios, progress=progress,
                                        options=timed if mode != "default" else
                                        sensitivity_options)
    example = adapter.example_inputs(model)
    ignored = adapter.ignored_layers(model)
    if target is not None:
        record = timed_default(adapter, model, sens_path, target, save_dir, arch=arch,
                               criterion=criterion, progress=progress) \
            if mode == "default" else sens.record
        chosen = latency_ratios(adapter, model, record, target, save_dir, round_to=round_to,
                                criterion=criterion, max_loss=eval_metric_loss, resume=resume)
        _log(f"[autoprune] latency target -{target.value:.0%} on {target.device}: measured "
             f"-{chosen.achieved:.1%} ({chosen.baseline_ms:.2f} -> {chosen.pruned_ms:.2f} ms)")
    elif pruned_flops is not None:
        chosen = ratios_by_flops(model, example, sens, pruned_flops, round_to=round_to,
                                 ignored_layers=ignored)
    else:
        chosen = ratios_by_loss(sens, eval_metric_loss)
    baseline_model = copy.deepcopy(model)
    retrain = dict(resuming)
    if distill:  # the teacher: the unpruned model, frozen (rebuilt from its checkpoint on resume)
        retrain["distill"] = Distill(prepare_teacher(copy.deepcopy(baseline_model),
                                                      adapter.device),
                                     **{k: v for k, v in distill.items()  # logit KD's settings
                                        if k in ("alpha", "temperature")})
    steps = step_targets(model, example, chosen, prune_steps, round_to, ignored)
    done: list[PruneResult] = []
    for k, step_ratios in enumerate(steps, 1):
        example = adapter.example_inputs(model)
        done.append(prune(model, example, step_ratios(done), criterion=criterion,
                          round_to=round_to, ignored_layers=ignored))
        result = combined(done, chosen)
        step_epochs = epochs // prune_steps if k < prune_steps else \
            epochs - (prune_steps - 1) * (epochs // prune_steps)
        which = f" (step {k}/{prune_steps})" if prune_steps > 1 else ""
        _log(f"[autoprune] pruned {len(result.plan)} groups{which}: FLOPs "
             f"{result.flops_before / 1e6:.1f}M -> {result.flops_after / 1e6:.1f}M "
             f"(-{result.flops_reduction:.1%}); retraining {step_epochs} epochs"
             + (", distilling the unpruned model" if distill else ""))
        stage = save_dir / (PRUNED if k == prune_steps else f"{STEP_PREFIX}{k}")
        model = adapter.fit(model, step_epochs, stage,
                            meta={**meta, "pruned": True, "plan": result.plan}, **retrain)

    def finish() -> dict[str, Any]:
        sides = compare_sides(adapter, baseline_model, model, base_metrics,
                              adapter.evaluate(model))
        report = {"task": adapter.task, "arch": arch, "sensitivities_file": str(sens_path),
                  "eval_metric_loss": None if pruned_flops is not None else eval_metric_loss,
                  "pruned_flops_target": pruned_flops, "pruned_latency_target": pruned_latency,
                  "criterion": criterion, "round_to": round_to, "ratios": dict(chosen),
                  "flops_reduction": result.flops_reduction,
                  "recipe": {"distill": distill or False, "prune_steps": prune_steps},
                  **target_fields(eval_metric_loss=eval_metric_loss, pruned_flops=pruned_flops,
                                  target=target, baseline=baseline_model, pruned=model,
                                  example_inputs=adapter.example_inputs(model), chosen=chosen,
                                  cpu=sides["latency_paired"]["cpu"]),
                  **sides}
        write_reports(report, save_dir)
        plot_sensitivities(sens, save_dir / "sensitivity.png",
                           title=f"Sensitivity: {arch or 'model'}",
                           threshold=eval_metric_loss if pruned_flops is None else None)
        print(to_console(report))
        return report

    report = _on_rank0(finish)  # latency is measured by one process, alone
    _print_outputs(save_dir, [
        ("pruned model", save_dir / PRUNED / "best.pt"), *adapter.deployables(save_dir / PRUNED),
        ("base model", baseline_path), ("sensitivities", sens_path),
        *[("latency table", p) for p in [save_dir / "sensitivities_latency.json"]
          if mode == "default" and target is not None],
        ("report", save_dir / "report.md"), ("report data", save_dir / "report.json"),
        ("report table", save_dir / "report.csv"), ("plot", save_dir / "sensitivity.png")])
    return TrainResult(model, report=report, baseline_path=baseline_path,
                       pruned_path=save_dir / PRUNED / "best.pt", sensitivities_path=sens_path,
                       ratios=dict(chosen), metrics=report["pruned"]["metrics"])

def check_recipe(adapter: TaskAdapter, mode: str, epochs: int, distill: Any,
                 prune_steps: int) -> dict[str, float] | None:
    """The retraining recipe's settings checked before any training: ``distill`` as the
    adapter records it (``{"alpha", "temperature"}`` for logit distillation) or None (a
    ConfigError for a task that cannot distill, or without pruning), ``prune_steps`` at most
    ``epochs`` and only with pruning."""
    own = getattr(adapter, "distill_recipe", None) if getattr(adapter, "distills", False) \
        else None
    distill = own(distill) if own is not None else check_distill(distill)
    if distill and not getattr(adapter, "distills", False):
        raise ConfigError(f"distill is not offered for {adapter.task} yet: "
                          f"{getattr(adapter, 'no_distill_reason', 'its trainer has no hook')}; "
                          f"drop distill")
    if mode == "none" and (distill or prune_steps > 1):
        raise ConfigError("distill and prune_steps shape the retraining after pruning: pass "
                          "sensitivities_file (a path or 'DEFAULT') and a target, or drop them")
    if prune_steps > epochs:
        raise ConfigError(f"prune_steps={prune_steps} needs at least as many epochs (epochs="
                          f"{epochs}): each step retrains epochs // prune_steps epochs")
    return distill


def step_targets(model: nn.Module, example: Any, chosen: Mapping[str, float], steps: int,
                 round_to: int | None, ignored: Any) -> list[Callable[[list[PruneResult]],
                                                                      dict[str, float]]]:
    """For each of ``steps`` steps, a function of the steps done so far giving that step's
    ratios: each group keeps ``keep^(k/steps)`` of its channels after step k (rounded, in
    ``round_to`` multiples), the last step exactly one-shot's count, so the pruned model ends
    with the channels (and FLOPs) of pruning ``chosen`` at once."""
    if steps == 1:
        return [lambda done: dict(chosen)]
    graph = PruningGraph(model, example, ignored)
    start = {g.name: g.channels for g in graph.groups if chosen.get(g.name, 0) > 0}
    counts: dict[str, list[int]] = {}
    for name, n0 in start.items():
        final = channels_to_keep(n0, chosen[name], round_to)
        unit = round_to if round_to and round_to > 1 else 1
        path = []
        for k in range(1, steps):
            n = n0 * (final / n0) ** (k / steps)
            n = max(final, min(n0, int(n / unit + 0.5) * unit))
            path.append(n)
        path.append(final)
        for i in range(1, len(path)):  # never grow back
            path[i] = min(path[i], path[i - 1])
        counts[name] = path

    def ratios(k: int) -> Callable[[list[PruneResult]], dict[str, float]]:
        def of(done: list[PruneResult]) -> dict[str, float]:
            now = dict(start)
            for step in done:
                now.update({g: p["kept"] for g, p in step.plan.items()})
            return {g: (now[g] - path[k]) / now[g] for g, path in counts.items()
                    if path[k] < now[g]}
        return of

    return [ratios(k) for k in range(steps)]


def combined(done: list[PruneResult], chosen: Mapping[str, float]) -> PruneResult:
    """One :class:`PruneResult` for pruning in steps: FLOPs and parameters from before the first
    step to after the last; per group the first channel count, the last kept one, the ratio
    asked for and the removed indices of the unpruned model."""
    if len(done) == 1:
        return done[0]
    plan: dict[str, dict[str, Any]] = {}
    alive: dict[str, list[int]] = {}
    for step in done:
        for name, p in step.plan.items():
            indices = alive.setdefault(name, list(range(p["channels"])))
            removed = set(p["removed"])
            alive[name] = [c for i, c in enumerate(indices) if i not in removed]
            first = plan.get(name, {}).get("channels", p["channels"])
            plan[name] = {"channels": first, "kept": p["kept"], "ratio": chosen.get(name, 0.0),
                          "removed": sorted(set(range(first)) - set(alive[name]))}
    return PruneResult(done[-1].model, plan, params_before=done[0].params_before,
                       params_after=done[-1].params_after, flops_before=done[0].flops_before,
                       flops_after=done[-1].flops_after)


def flow_settings(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments of :func:`train` (after ``adapter`` and ``model``) found in ``arguments``:
    what a task API forwards from its own, e.g. ``run.train(adapter, model,
    **flow_settings(locals()))``."""
    return {k: arguments[k] for k in FLOW_SETTINGS if k in arguments}


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

def _has_eval(adapter: TaskAdapter) -> bool:
    return adapter.eval_set is not None

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
    init_from_env()  # under torchrun: the points are shared out over the ranks
    arch = None
    if names_a_missing_file(model):
        raise CheckpointError(f"no checkpoint at {model}: check the path")
    if isinstance(model, (str, os.PathLike)) and Path(model).is_file():
        meta = checkpoint_meta(model)
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
    adapter.check_data(model)
    model.to(adapter.device)
    if Path(save_file).is_file():  # measuring this model: a table of other weights is no answer
        check_sensitivities_file(adapter, model, save_file, arch, criterion)  # the model first
        stored = read_record(save_file).model.get("weights_sha256")
        if stored and stored != weights_sha256(model):
            raise SensitivityFileError(f"{save_file} was measured on other weights of this model: "
                                       f"pass a new file path to measure these (or delete it)")
    sens, _ = get_sensitivities(adapter, model, save_file, arch=arch, criterion=criterion,
                                ratios=ratios, progress=progress, options=sensitivity_options)
    return sens


FLOW_SETTINGS = tuple(inspect.signature(train).parameters)[2:]  # what a task API forwards

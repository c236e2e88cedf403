"""What each ``autoprune`` subcommand does (the parser is in :mod:`autoprune.cli.main`); the
deploy-side ones, ``export`` and ``report``, are :mod:`autoprune.cli.deploy`."""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from .. import __version__
from ..engine.distributed import init_from_env, rank_and_world
from ..engine.sensitivity import DEFAULT_RATIOS
from ..engine.paddleslim import import_paddleslim
from ..engine.outputs import check_output
from ..engine.latency import merge_records
from ..engine.timing import Timing
from ..engine.store import read_record, save_sensitivities, write_record
from ..errors import AutopruneError, ConfigError
from ..flow.checkpoints import checkpoint_meta, prune_checkpoint
from ..flow.defaults import DEFAULT, available_profiles, profile_dir, profiles_in
from ..flow.latency import check_unused_settings
from ..flow.config import (DEPRECATED, RUN_CONFIG, FlowSettings, check_known, follow_folder,
                           names, read_run_config)
from ..flow.options import sens_mode
from ..flow.previous import previous_run
from ..profiles.build import arch_key_of, build_profile
from ..tasks import TASKS, get_adapter, get_task, task_of
from .config_file import load_config
from .show import say
from .demo import run_demo
from .doctor import difference_warning, doctor_lines


def demo(args: argparse.Namespace) -> None:
    init_from_env(args.device)  # under torchrun: DDP training, the analysis shared out
    run_demo(args.save_dir, arch=args.arch, epochs=args.epochs,
             pretrain_epochs=args.pretrain_epochs, train_limit=args.train_limit,
             eval_limit=args.eval_limit, input_size=args.input_size,
             eval_metric_loss=args.eval_metric_loss,
             seed=args.seed, device=args.device)


def merge(args: argparse.Namespace) -> None:
    check_output(args.output, args.inputs, "a sensitivity file", args.overwrite)
    merged = merge_records(args.inputs)
    write_record(merged, args.output)
    timed = " with latencies" if merged.latency else ""
    print(f"merged {len(args.inputs)} files into {args.output} ({len(merged.sensitivities)} "
          f"groups{timed})")


def convert(args: argparse.Namespace) -> None:
    check_output(args.output, [args.input], "a sensitivity file", args.overwrite)
    sens = import_paddleslim(args.input, allow_pickle=args.allow_pickle)
    save_sensitivities(sens, args.output, arch=args.arch, source="paddleslim")
    print(f"wrote {args.output} ({len(sens)} groups) from PaddleSlim pickle {args.input}")


def train(args: argparse.Namespace) -> None:
    cfg = train_config(args)
    task = get_task(cfg.pop("task"))
    api = task.api()
    known = set(task.inputs) | set(task.aliases) | set(names(FlowSettings)) | \
        set(names(task.settings_class()))
    check_known(set(cfg) - set(DEPRECATED), known,
                f"{task.name} in {args.config or 'the command line'}")
    data_key = "train_data" if "train_data" in cfg else task.data_key
    for key in ("model", data_key):
        if key not in cfg:
            raise ConfigError(f"{args.config or 'the command'} lacks '{key}:' (e.g. "
                              f"{task.config_example})")
    if not cfg.get("resume") and not args.overwrite:  # never train over a run by accident
        save_dir = cfg.get("save_dir", FlowSettings.save_dir)
        sens = cfg.get("sensitivities_file")
        probe = get_adapter(task.name, device="cpu")  # reads the files only: takes no GPU
        found = previous_run(probe, save_dir, sens_mode(sens), sens, cfg.get("pretrain_weights"))
        if found:
            again = f"autoprune train {args.config} --resume" if args.config else \
                f"autoprune train --resume {save_dir}"
            raise ConfigError(f"{save_dir} holds {found}: `{again}` continues it (a finished "
                              f"stage is not trained again), --overwrite starts over, or set "
                              f"another save_dir")
    init_from_env(cfg.get("device", "auto"))  # under torchrun: DDP training, the points shared
    api.train(**cfg)


def train_config(args: argparse.Namespace) -> dict:
    """The settings of `autoprune train`: the YAML config (or, for ``--resume SAVE_DIR``, the
    run's ``args.yaml``), then the ``--<setting> value`` flags, then ``--task`` and
    ``--resume``."""
    resume, config = args.resume, args.config
    run_dir = None
    if resume not in (None, True):  # --resume took a value: a run folder, or the config file
        if Path(resume).is_dir():
            run_dir = Path(resume)
        elif config is None:
            config = resume
        else:
            raise ConfigError(f"--resume {resume}: pass the run's save_dir (a folder holding "
                              f"args.yaml), or the config file and --resume")
    if config is not None:
        cfg = load_config(config)
    elif run_dir is not None:
        cfg = read_run_config(run_dir)
        if cfg is None:
            raise ConfigError(f"{run_dir} holds no {RUN_CONFIG} (a run of an earlier autoprune, "
                              f"or not a save_dir): resume with its YAML config, `autoprune "
                              f"train config.yaml --resume`")
        cfg = {k: v for k, v in follow_folder(cfg, run_dir).items()  # renamed: it follows
               if k not in ("objects", "autoprune") and k not in (cfg.get("objects") or [])}
        cfg["save_dir"] = str(run_dir)
    else:
        cfg = {}
    args.config = config
    cfg.update(args.settings)
    if args.task is not None:
        cfg["task"] = args.task
    if resume is not None:
        cfg["resume"] = True
    if "task" not in cfg:
        raise ConfigError(f"{config or 'the command'} lacks 'task:': add one of "
                          f"{', '.join(TASKS)} (or pass --task; `autoprune train --help` lists "
                          f"each task's settings)")
    return cfg


def _ratios(text: str | None):
    if not text:
        return DEFAULT_RATIOS
    try:
        return tuple(float(r) for r in text.split(","))
    except ValueError:
        raise ConfigError(f"--ratios {text!r} must be comma-separated numbers such as "
                          f"0.1,0.3,0.5") from None


def sensitivity(args: argparse.Namespace) -> None:
    check_output(args.output, [args.checkpoint, args.data], "a sensitivity file", None)
    latency = _latency(args)
    init_from_env(args.device)  # under torchrun: the points are shared out over the ranks
    task = args.task
    if args.task is None and Path(args.checkpoint).is_file():
        task = checkpoint_meta(args.checkpoint).get("task")
        if task is None:
            raise ConfigError(f"{args.checkpoint} does not say which task its model is for: pass "
                              f"--task ({', '.join(TASKS)})")
    api = get_task(task or "classification").api()  # a missing file: the task API names it
    sens = api.analyze_sensitivity(args.checkpoint, args.data, args.output,
                                   ratios=_ratios(args.ratios), criterion=args.criterion,
                                   eval_limit=args.eval_limit, device=args.device,
                                   sensitivity_options={"early_stop": args.early_stop,
                                                        "evaluation": args.evaluation,
                                                        "batch_variants": args.batch_variants,
                                                        **latency, **_adaptive(args)})
    if rank_and_world()[0] == 0 and not args.plan:
        print(f"wrote {args.output}: {len(sens)} groups")


def _adaptive(args: argparse.Namespace) -> dict:
    """The adaptive-analysis options of `autoprune sensitivity` (--adaptive, --plan)."""
    if args.target is not None and not args.adaptive:
        raise ConfigError("--target tells --adaptive where to measure: add --adaptive")
    out = {"plan": True} if args.plan else {}
    if args.adaptive:
        out.update(adaptive=True, target=args.target or "loss=0.05", bound=args.bound,
                   confidence=args.confidence)
    return out


def _latency(args: argparse.Namespace) -> dict:
    """The latency options of `autoprune sensitivity` (none without --latency)."""
    if not args.latency:
        check_unused_settings(None, _timing(args), switch="--latency", cli=True)
        return {}
    return {"latency": True, **{f"latency_{k}": v for k, v in _timing(args).kwargs().items()}}


def _timing(args: argparse.Namespace) -> Timing:
    """The :class:`Timing` the ``--latency-<field>`` flags spell (the flow's timing group)."""
    from ..flow import config

    timing = config.group_class(config.FlowSettings, "latency")
    return timing(**{f.name: getattr(args, f"latency_{f.name}")
                     for f in dataclasses.fields(timing)})


def prune(args: argparse.Namespace) -> None:
    inputs = [args.checkpoint] + ([] if args.sensitivities.upper() == DEFAULT else
                                  [args.sensitivities])
    check_output(args.output, inputs, "a checkpoint", args.overwrite)
    check_unused_settings(args.pruned_latency, _timing(args), switch="--pruned-latency",
                          cli=True)
    out = prune_checkpoint(args.checkpoint, args.sensitivities, args.output,
                           eval_metric_loss=args.eval_metric_loss, pruned_flops=args.pruned_flops,
                           criterion=args.criterion, round_to=args.round_to,
                           overwrite=args.overwrite, pruned_latency=args.pruned_latency,
                           timing=_timing(args))
    timed = out.latency_ratios
    speed = f", latency {signed_percent(-timed.achieved)} on {args.latency_device} " \
            f"({timed.baseline_ms:.2f} -> {timed.pruned_ms:.2f} ms)" if timed is not None else ""
    print(f"wrote {args.output}: FLOPs {signed_percent(-out.flops_reduction)}, params "
          f"{signed_percent(-out.params_reduction)}{speed} (not retrained: run `autoprune "
          f"train` with pretrain_weights to fine-tune)")


def signed_percent(change: float) -> str:
    """A relative change with its sign written once: ``-30.0%`` (less), ``+172.1%`` (more)."""
    return f"{change:+.1%}"


def profiles(args: argparse.Namespace) -> None:
    if args.action == "list":
        folder = Path(args.out) if args.out else profile_dir()
        listed = profiles_in(folder) if args.out else available_profiles()
        print(f"DEFAULT profiles in {folder}:")
        print(f"  {'task':21s} {'arch key':30s} {'baseline':>16s}  {'input':>6s}  "
              f"{'start':14s} {'data':16s} file")
        tasks = list(TASKS) + sorted(set(listed) - set(TASKS))  # registered tasks first
        for task in tasks:
            for key, name in sorted(listed.get(task, {}).items()):
                say(f"  {task:21s} {key:30s} {_profile_line(folder / name)}")
        if not any(listed.values()):
            print("  (none)")
        return
    if not args.arch:
        examples = "; ".join(f"{t.name}: {t.arch_help}" for t in TASKS.values())
        raise ConfigError(f"profiles build needs --arch ({examples})")
    task = args.task or task_of(args.arch)
    out = Path(args.out) if args.out else profile_dir()
    if args.skip_existing:
        key = arch_key_of(args.arch, task)
        name = profiles_in(out).get(task, {}).get(key)
        if name and (out / name).is_file():
            print(f"skip {task} {key}: {out / name} exists (drop --skip-existing to rebuild)")
            return
    path = build_profile(args.arch, out, task=task, epochs=args.epochs,
                         train_images=args.train_images, val_images=args.val_images,
                         input_size=args.input_size, batch_size=args.batch_size,
                         ratios=_ratios(args.ratios), device=args.device, seed=args.seed,
                         pretrained=args.pretrained, data=args.data, work_dir=args.work_dir)
    print(f"wrote {path}")


def _profile_line(path: Path) -> str:
    """A profile's baseline, input size, start (from scratch or which weights) and data set."""
    try:
        record = read_record(path)
        base = f"{record.metric.get('name')} {float(record.metric.get('baseline')):.3f}"
    except (AutopruneError, OSError, TypeError, ValueError):
        return f"{'(unreadable)':>16s}  {path.name}"
    how = record.extra.get("how") or {}
    data = str(how.get("dataset") or "?").split(" (")[0]
    return (f"{base:>16s}  {str(how.get('input_size', '?')) + ' px':>6s}  "
            f"{str(how.get('start') or 'from scratch'):14s} {data:16s} {path.name}")


def doctor(args: argparse.Namespace) -> None:
    lines, differing = doctor_lines(show_all=args.all)
    if not args.quiet:
        print(f"autoprune {__version__}")
        print("\n".join(lines))
    warning = difference_warning(differing)
    if warning:
        print(f"autoprune: {warning}", file=sys.stderr)
        if args.strict:
            raise SystemExit(1)
    elif not args.quiet:
        print("every tested package is at its tested version")

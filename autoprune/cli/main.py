"""The ``autoprune`` command line: its parser and entry point. Errors of bad input are printed as
one line (exit code 2).
(over 400 lines: one table of subcommands and their flags.)"""
from __future__ import annotations

import argparse
import importlib
import inspect
import sys
import textwrap
from typing import Any, Sequence

from .. import __version__
from ..errors import AutopruneError
from ..tasks import TASKS
from .config_file import load_config
from .doctor import MAIN_PACKAGES, check_stack, difference_warning, version_text


class _VersionAction(argparse.Action):
    """``--version``: autoprune's version and the main packages' (a warning when one differs)."""

    def __call__(self, parser, namespace, values, option_string=None):
        checks = check_stack(MAIN_PACKAGES)
        print(version_text(__version__, checks))
        warning = difference_warning(checks)
        if warning:
            print(f"autoprune: {warning}", file=sys.stderr)
        parser.exit()


class _TrainHelp(argparse.Action):
    """``train --help``: the usage, then each task's YAML keys with their defaults and an example
    (read from the task's ``train``, which loads its libraries: only when asked)."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.print_help()
        print(config_keys())
        parser.exit()


def config_keys() -> str:
    """Every registered task's settings (YAML keys and --flags of `autoprune train`) with their
    types and defaults, and a YAML example each."""
    from ..flow.config import FlowSettings, names

    lines = ["\nSettings: YAML keys, or --<setting> flags (e.g. --pruned-flops 0.4), the names of "
             "autoprune.<task>.train.", "\n  every task (the flow):",
             _settings_lines(FlowSettings, {})]
    for task in TASKS.values():
        settings = task.settings_class()
        changed = settings.flow_defaults
        inputs = ", ".join(n if d is inspect.Parameter.empty else f"{n}={d!r}"
                           for n, d in task.inputs.items())
        lines += [f"\n  task: {task.name}   e.g. task: {task.name}, {task.config_example}",
                  f"    inputs: {inputs}"
                  + (f"; flow defaults: {', '.join(f'{k}={v!r}' for k, v in changed.items())}"
                     if changed else ""),
                  _settings_lines(settings, {}, names(settings))]
    return "\n".join(lines)


def _settings_lines(cls: type, changed: dict, only: list[str] | None = None) -> str:
    """``name (type) = default`` for each setting of ``cls``, wrapped."""
    from ..flow.config import flat_fields

    items = []
    for s in flat_fields(cls):
        if only is not None and s.name not in only:
            continue
        default = changed.get(s.name, s.default)
        items.append(f"{s.name}={default!r} ({s.metadata.get('kind') or 'any'})")
    return textwrap.fill(", ".join(items), width=96, initial_indent="    ",
                         subsequent_indent="    ")


DATA_HELP = ("validation data: an ImageFolder root or 'fashion-mnist' (classification), a "
             "data.yaml (detection), an images/masks folder or 'fashion-scenes' (segmentation)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``autoprune`` command."""
    p = argparse.ArgumentParser(prog="autoprune", description="Sensitivity-driven structured "
                                "channel pruning for PyTorch CNNs.")
    p.add_argument("--version", action=_VersionAction, nargs=0,
                   help="print autoprune's version and its main packages', then exit")
    sub = p.add_subparsers(dest="command", required=True)

    dr = sub.add_parser("doctor", help="compare the installed packages with the tested versions "
                        "(autoprune/constraints.txt)")
    dr.add_argument("--all", action="store_true", help="list every tested package, not only the "
                    "main ones")
    dr.add_argument("--strict", action="store_true", help="exit with code 1 when a tested "
                    "package differs (what scripts/setup.sh checks)")
    dr.add_argument("--quiet", action="store_true", help="print only what differs")
    dr.set_defaults(func="doctor")

    d = sub.add_parser("demo", help="the one-call flow on Fashion-MNIST: train, analyse, prune "
                       "and retrain a model (CPU, a few minutes) and print the before/after table")
    d.add_argument("--save-dir", default="runs/demo", help="output folder (default: runs/demo)")
    d.add_argument("--arch", default="resnet18", help="timm or torchvision model name "
                   "(default: resnet18)")
    _setting_flags(d, "flow", ["pretrain_epochs", "epochs", "eval_metric_loss", "seed"],
                   pretrain_epochs=3, epochs=2, eval_metric_loss=0.05)
    _option(d, "--train-limit", "--train-images", type=int, default=12000,
            help="train on a class-balanced subset of this many images (here: 12000)")
    _setting_flags(d, "task", ["eval_limit", "input_size", "device"], eval_limit=1000,
                   input_size=32, aliases={"eval_limit": "--val-images", "input_size": "--size"})
    d.set_defaults(func="demo")

    t = sub.add_parser("train", add_help=False, help="train (and prune, when sensitivities_file "
                       "is set) from a YAML config and/or --<setting> flags: task, model, "
                       "train_data, eval_data, epochs, save_dir, sensitivities_file, "
                       "eval_metric_loss or pruned_flops, ...")
    t.add_argument("-h", "--help", action=_TrainHelp, nargs=0,
                   help="show this help, with every task's settings and their defaults, and exit")
    t.add_argument("config", nargs="?", help="YAML file; keys are the settings of "
                   f"autoprune.<task>.train and 'task:' ({', '.join(TASKS)}); any "
                   f"--<setting> <value> flag overrides it (values read as YAML)")
    t.add_argument("--task", choices=tuple(TASKS), help="the task (instead of 'task:')")
    rerun = t.add_mutually_exclusive_group()
    rerun.add_argument("--resume", nargs="?", const=True, metavar="SAVE_DIR",
                       help="continue the interrupted run where it stopped (a finished stage is "
                       "not trained again): with the config, or alone with the run's save_dir, "
                       "whose args.yaml holds its settings")
    rerun.add_argument("--overwrite", action="store_true", help="start over when save_dir holds "
                       "an earlier run (refused without --resume or this)")
    t.set_defaults(func="train")

    se = sub.add_parser("sensitivity", help="measure the sensitivities of a trained checkpoint "
                        "on validation data (resumable; `torchrun --nproc_per_node N -m autoprune "
                        "sensitivity ...` shares the points over N processes/GPUs)")
    se.add_argument("checkpoint",
                    help="a checkpoint written by autoprune (e.g. out/baseline/best.pt)")
    se.add_argument("data", help=DATA_HELP)
    se.add_argument("output", help="sensitivity file to write or complete (JSON)")
    se.add_argument("--task", choices=tuple(TASKS), help="the checkpoint's task (default: read "
                    "from the checkpoint)")
    se.add_argument("--ratios", help="comma-separated ratios (default 0.1,...,0.9)")
    _setting_flags(se, "flow", ["criterion"])
    _setting_flags(se, "task", ["eval_limit", "device"], aliases={"eval_limit": "--limit"})
    se.add_argument("--early-stop", type=float, help="skip a group's larger ratios once its loss "
                    "passes this (off by default; recorded in the file)")
    se.add_argument("--evaluation", default="auto", choices=("auto", "masked", "prune"),
                    help="masked = batched masked variants (checked against real pruning); auto "
                    "= masked on a GPU, prune on a CPU")
    se.add_argument("--batch-variants", type=int, default=8,
                    help="ratios of one group per forward pass with masked variants (default 8)")
    se.add_argument("--latency", action="store_true", help="also time each point's pruned model "
                    "(for --pruned-latency); resumable, recorded with the device it ran on")
    se.add_argument("--adaptive", action="store_true", help="measure only the points and images "
                    "the allocation for --target needs (decided points recorded with their "
                    "interval)")
    se.add_argument("--target", help="what the ratios will be chosen for: loss=0.05 (default), "
                    "flops=0.5 or latency=0.4 (with --adaptive)")
    se.add_argument("--bound", choices=("confidence", "exact"), default="confidence",
                    help="how --adaptive decides a point on part of the images: confidence "
                    "(--confidence, default 0.999) or exact (never differs from the full "
                    "evaluation)")
    se.add_argument("--confidence", type=float, default=0.999,
                    help="the confidence of --bound confidence (default 0.999)")
    se.add_argument("--plan", "--dry-run", action="store_true", help="print the expected cost "
                    "(points, images, seconds per image timed here, ETA) and exit")
    _latency_options(se)
    se.set_defaults(func="sensitivity")

    pr = sub.add_parser("prune", help="prune a checkpoint with a sensitivity file (no retraining)")
    pr.add_argument("checkpoint",
                    help="a checkpoint written by autoprune (e.g. out/baseline/best.pt)")
    pr.add_argument("sensitivities", help="a sensitivity file, or DEFAULT")
    pr.add_argument("output", help="where to write the pruned checkpoint")
    _setting_flags(pr.add_mutually_exclusive_group(), "flow", ["eval_metric_loss",
                                                              "pruned_flops"])
    _setting_flags(pr, "flow", ["pruned_latency"])
    _latency_options(pr)
    _setting_flags(pr, "flow", ["criterion", "round_to"])
    _overwrite_option(pr)
    pr.set_defaults(func="prune")

    ex = sub.add_parser("export", help="export a checkpoint (pruned or not) to ONNX")
    ex.add_argument("checkpoint", help="a checkpoint written by autoprune, pruned or not")
    ex.add_argument("output", help="the .onnx file to write")
    _option(ex, "--input-size", "--size", type=int,
            help="input size in px (default: the checkpoint's)")
    _option(ex, "--opset-version", "--opset", type=int, default=17,
            help="ONNX opset (default 17)")
    ex.add_argument("--static", action="store_true", help="fix the batch size to 1 (default: "
                    "any batch size, axis 0 named 'batch')")
    ex.add_argument("--baseline", metavar="CHECKPOINT", help="the checkpoint it was pruned "
                    "from: both timed in pairs in ONNX Runtime (before -> after)")
    ex.add_argument("--no-check", action="store_true", help="skip the ONNX Runtime check (its "
                    "outputs against torch's, and its latency)")
    ex.add_argument("--int8", action="store_true", help="write a static INT8 model (ONNX "
                    "Runtime's quantizer, QDQ, per-channel weights) calibrated on --data's "
                    "train split; blocks that run slower in INT8 stay FP32")
    ex.add_argument("--data", help="with --int8: the training data (as `autoprune train` takes "
                    "it) whose train split calibrates, and whose val split measures, the model")
    ex.add_argument("--eval-data", help="with --int8: other validation data")
    _setting_flags(ex, "task", ["eval_limit"], eval_limit=None)
    _setting_flags(ex, "flow", ["calibration_images", "calibration_method", "int8_metric_loss"])
    _overwrite_option(ex)
    ex.set_defaults(func="deploy.export")

    rp = sub.add_parser("report", help="compare a baseline and a pruned checkpoint: size, FLOPs, "
                        "metrics, latency")
    rp.add_argument("baseline", help="the checkpoint before pruning")
    rp.add_argument("pruned", help="the pruned checkpoint (same architecture)")
    rp.add_argument("data", help=DATA_HELP)
    rp.add_argument("--save-dir", default=".", help="where report.json/md/csv go (default .)")
    _setting_flags(rp, "task", ["eval_limit", "device"], aliases={"eval_limit": "--limit"})
    _setting_flags(rp, "flow", ["quantize", "calibration_images", "calibration_method",
                                "int8_metric_loss"])
    rp.add_argument("--train-data", help="with --quantize: the training data whose train split "
                    "calibrates the INT8 models")
    rp.set_defaults(func="deploy.report")

    pf = sub.add_parser("profiles", help="list the DEFAULT sensitivity profiles, or build one "
                        "on public data (Fashion-MNIST; its scenes for detection/segmentation)")
    pf.add_argument("action", choices=("list", "build"))
    pf.add_argument("--arch", help="architecture to build: " + "; ".join(
        f"{t.name}: {t.arch_help}" for t in TASKS.values()))
    pf.add_argument("--task", choices=tuple(TASKS), help="force the task (default: told from "
                    "--arch)")
    pf.add_argument("--out", help="profile folder to write (build) or read (list) (default: the "
                    "bundled one)")
    for flags, setting, what in ((("--epochs",), "epochs", "training epochs"),
                                 (("--train-images",), "train_images", "training images or scenes"),
                                 (("--val-images",), "val_images", "images the sensitivities are "
                                  "measured on"),
                                 (("--input-size", "--size"), "input_size", "input size in pixels"),
                                 (("--batch-size", "--batch"), "batch_size", "batch size")):
        _option(pf, *flags, type=int, help=f"{what} (default per task: {_per_task(setting)})")
    pf.add_argument("--ratios", help="comma-separated ratios (default 0.1,...,0.9)")
    pf.add_argument("--pretrained", nargs="?", const=True, metavar="WEIGHTS",
                    help="start from pretrained weights (ImageNet's for classification and "
                    "smp encoders, Ultralytics' COCO <arch>.pt for YOLO; or a weights name)")
    pf.add_argument("--data", help="your data set instead of Fashion-MNIST: an ImageNet-style "
                    "folder (train/, val/), a PaddleX list root, a VOC / COCO / Cityscapes "
                    "root or a YOLO data.yaml")
    pf.add_argument("--seed", type=int, default=0)
    pf.add_argument("--device", default="auto", help="auto (a GPU when there is one), cpu, cuda")
    pf.add_argument("--skip-existing", action="store_true",
                    help="do nothing if --out already lists this architecture")
    pf.add_argument("--work-dir", help="keep the build (data, base model, sensitivities) in a "
                    "folder here, so that a build killed part-way resumes when run again "
                    "(default: a temporary folder)")
    pf.set_defaults(func="profiles")

    s = sub.add_parser("show", help="print a sensitivity file as a table, or a checkpoint's "
                       "metadata (architecture, pruning, starting weights, metrics)")
    s.add_argument("file", help="a sensitivity file (JSON) or an autoprune checkpoint")
    s.set_defaults(func="show.show")

    m = sub.add_parser("merge", help="merge sensitivity files (union; later files win)")
    m.add_argument("inputs", nargs="+", help="sensitivity files to merge")
    m.add_argument("-o", "--output", required=True, help="the merged file to write")
    _overwrite_option(m)
    m.set_defaults(func="merge")

    c = sub.add_parser("convert-paddleslim", help="convert a PaddleSlim sensitivities pickle to "
                       "an autoprune JSON file (needs --allow-pickle)")
    c.add_argument("input", help="a PaddleSlim sensitivities pickle")
    c.add_argument("output", help="the autoprune sensitivity file to write (JSON)")
    c.add_argument("--allow-pickle", action="store_true",
                   help="confirm that you trust the file: pickle files can run code when read")
    c.add_argument("--arch", default=None, help="architecture to record in the file")
    _overwrite_option(c)
    c.set_defaults(func="convert")
    return p


def _per_task(setting: str) -> str:
    """``3 classification, 30 detection, ...``: a profile-build default of every task."""
    return ", ".join(f"{t.profile_settings[setting]} {t.name}" for t in TASKS.values()
                     if setting in t.profile_settings)


def _option(parser: argparse.ArgumentParser, flag: str, *old: str, **kwargs) -> None:
    """An option named as the API argument it sets (``--input-size`` for ``input_size``); the
    ``old`` spellings still work but are not shown in ``--help``."""
    action = parser.add_argument(flag, **kwargs)
    for spelling in old:  # no default of its own: the new option's stands
        parser.add_argument(spelling, **{k: v for k, v in kwargs.items()
                                         if k not in ("help", "default")},
                            dest=action.dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS)


_TYPES = {"int": int, "float": float, "str": str}


def _settings_class(which: str) -> type:
    """The settings dataclass a command's flags come from: ``flow`` (:class:`FlowSettings`) or
    ``task`` (what every task takes: :class:`TaskSettings`); a task's own settings are not read
    here (that would import the task's libraries for ``--help``)."""
    from ..flow import config

    return config.FlowSettings if which == "flow" else config.TaskSettings


def _setting_flags(parser: Any, which: str, names: Sequence[str],
                   aliases: dict[str, str] | None = None, **defaults: Any) -> None:
    """``--<name>`` for each setting of ``names`` of the settings class ``which`` (see
    :func:`_settings_class`), its type, default and help text read from the field (the flag is
    that setting: the names, types and defaults of the CLI are the API's). ``defaults``: the
    command's own default for a setting; ``aliases``: a former spelling, still accepted."""
    from ..flow.config import flat_fields

    spelled = {s.name: s for s in flat_fields(_settings_class(which))}
    for name in names:
        field = spelled[name]
        default = defaults.get(name, field.default)
        shown = "" if default is None else \
            f" ({'here' if name in defaults else 'default'}: {default})"
        old = [(aliases or {})[name]] if name in (aliases or {}) else []
        _option(parser, "--" + name.replace("_", "-"), *old,
                type=_TYPES.get(field.metadata.get("kind"), str), default=default,
                help=f"{field.metadata.get('help', '')}{shown}")


def _latency_options(parser: argparse.ArgumentParser) -> None:
    """``--latency-<field>`` for each field of the flow's timing group (:class:`autoprune.Timing`:
    its type, default and help text, the same as ``latency_<field>`` in a YAML config)."""
    from ..flow import config

    group = [s.name for s in config.flat_fields(config.FlowSettings)
             if s.group == "latency"]
    _setting_flags(parser, "flow", group)


def _overwrite_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--overwrite", action="store_true", help="let the output replace an "
                        "input or an existing file of another kind (refused without it)")


TRAIN_OWN = {"-h": 0, "--help": 0, "--task": 1, "--resume": None, "--overwrite": 0}  # value count


def _train_flags(argv: list[str]) -> tuple[list[str], list[str]]:
    """``train``'s own arguments (config, --task, --resume [dir], --overwrite, --help) and the
    ``--<setting> [value]`` tokens, apart."""
    own, settings = [argv[0]], []
    i = 1
    while i < len(argv):
        token = argv[i]
        name = token.split("=", 1)[0]
        if not token.startswith("--") and not token.startswith("-h"):
            own.append(token)  # the config file
        elif name in TRAIN_OWN:
            own.append(token)
            takes = TRAIN_OWN[name]
            if "=" not in token and i + 1 < len(argv) and not argv[i + 1].startswith("-") and \
                    (takes == 1 or (takes is None and not argv[i + 1].endswith((".yaml",
                                                                                  ".yml")))):
                own.append(argv[i + 1])
                i += 1
        else:
            settings.append(token)
            if "=" not in token and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                settings.append(argv[i + 1])
                i += 1
        i += 1
    return own, settings


def setting_flags(tokens: Sequence[str]) -> dict[str, Any]:
    """``--pruned-flops 0.4 --train-args "{lr0: 0.01}" --progress`` as settings (each value read
    as YAML: numbers, lists, mappings, null; a flag without a value is True)."""
    import yaml

    out: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("--") or len(token) < 3:
            raise ValueError(f"unexpected argument {token!r}: settings are given as --<name> "
                             f"<value>")
        name, eq, value = token[2:].partition("=")
        if not eq:
            if i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
                value, i = tokens[i + 1], i + 1
            else:
                value = "true"
        try:
            out[name.replace("-", "_")] = yaml.safe_load(value) if value != "" else None
        except yaml.YAMLError:
            out[name.replace("-", "_")] = value
        i += 1
    return out


def _interrupted_message(args: argparse.Namespace) -> str:
    """What a Ctrl-C leaves behind, and how to pick up from there."""
    again = "run the same command again to resume"
    if args.command == "sensitivity":
        return f"interrupted: progress is saved in {args.output}; {again}"
    if args.command == "demo":
        return (f"interrupted: finished epochs and measured sensitivity points are saved in "
                f"{args.save_dir}; run the same command again to continue")
    if args.command == "train":
        try:
            cfg = load_config(args.config) if args.config else {}
        except AutopruneError:
            cfg = {}
        save_dir = getattr(args, "settings", {}).get("save_dir") or cfg.get("save_dir") or \
            (args.resume if isinstance(args.resume, str) else "output")
        with_config = f"`autoprune train {args.config} --resume` or " if args.config else ""
        return (f"interrupted: progress is saved in {save_dir}; {with_config}`autoprune train "
                f"--resume {save_dir}` (its settings are in args.yaml there) continues it")
    return "interrupted: nothing was saved; run the command again"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``autoprune`` console script."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    settings: list[str] = []
    if argv[:1] == ["train"]:  # --<setting> <value> flags, checked against the task's settings
        argv, settings = _train_flags(argv)
    args = parser.parse_args(argv)
    if args.command == "train":
        try:
            args.settings = setting_flags(settings)
        except ValueError as e:
            parser.error(str(e))
    # the subcommands load torch and the model libraries (seconds): imported once a command runs,
    # so that --help and --version answer at once
    module, _, func = args.func.rpartition(".")  # "deploy.export": cli/deploy.py's export
    try:
        getattr(importlib.import_module(f".{module or 'commands'}", __package__), func)(args)
    except AutopruneError as e:
        print(f"autoprune: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `autoprune show f.json | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print(f"autoprune: {_interrupted_message(args)}", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The ``autoprune`` command line. Errors of bad input are printed as one line (exit code 2)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from . import __version__
from .config_file import load_config
from .errors import AutopruneError, ConfigError


def _demo(args: argparse.Namespace) -> None:
    from .demo import run_demo
    from .distributed import init_from_env

    init_from_env()  # under torchrun: DDP training, the analysis shared out
    run_demo(args.save_dir, arch=args.arch, epochs=args.epochs,
             pretrain_epochs=args.pretrain_epochs, train_images=args.train_images,
             val_images=args.val_images, size=args.size, eval_metric_loss=args.eval_metric_loss,
             seed=args.seed, device=args.device)


def _show(args: argparse.Namespace) -> None:
    from .store import read_record

    rec = read_record(args.file)
    print(f"arch: {rec.model.get('arch')}  fingerprint: {rec.model.get('fingerprint')}  "
          f"criterion: {rec.criterion}")
    print(f"metric: {rec.metric.get('name')}  baseline: {rec.metric.get('baseline')}  "
          f"higher_is_better: {rec.metric.get('higher_is_better')}")
    ratios = sorted({r for pts in rec.sensitivities.values() for r in pts})
    print("group".ljust(32) + "".join(f"{r:>8.2f}" for r in ratios))
    for group, pts in rec.sensitivities.items():
        cells = "".join(f"{pts[r]:>8.4f}" if r in pts else f"{'-':>8}" for r in ratios)
        print(group[:31].ljust(32) + cells)


def _merge(args: argparse.Namespace) -> None:
    from .store import check_output, merge_sensitivities, read_record, save_sensitivities

    check_output(args.output, args.inputs, "a sensitivity file", args.overwrite)
    first = read_record(args.inputs[0])
    merged = merge_sensitivities(args.inputs)
    save_sensitivities(merged, args.output, **first.model, criterion=first.criterion,
                       metric_name=first.metric.get("name"), baseline=first.metric.get("baseline"),
                       higher_is_better=first.metric.get("higher_is_better", True))
    print(f"merged {len(args.inputs)} files into {args.output} ({len(merged)} groups)")


def _convert(args: argparse.Namespace) -> None:
    from .store import check_output, import_paddleslim, save_sensitivities

    check_output(args.output, [args.input], "a sensitivity file", args.overwrite)
    sens = import_paddleslim(args.input, allow_pickle=args.allow_pickle)
    save_sensitivities(sens, args.output, arch=args.arch, source="paddleslim")
    print(f"wrote {args.output} ({len(sens)} groups) from PaddleSlim pickle {args.input}")


def _train(args: argparse.Namespace) -> None:
    import inspect

    cfg = load_config(args.config)
    task = cfg.pop("task", "classification")
    api = _task_api(task)
    allowed = set(inspect.signature(api.train).parameters)
    unknown = sorted(set(cfg) - allowed)
    if unknown:
        raise ConfigError(f"unknown setting(s) {', '.join(unknown)} in {args.config}; "
                          f"{task} takes: {', '.join(sorted(allowed))}")
    example = "model: yolov8n.yaml, data: data.yaml" if task == "detection" else \
        "model: resnet18, train_data: fashion-mnist"
    data_key = "data" if task == "detection" and "train_data" not in cfg else "train_data"
    for key in ("model", data_key):
        if key not in cfg:
            raise ConfigError(f"{args.config} lacks '{key}:' (e.g. {example})")
    from .distributed import init_from_env

    init_from_env()  # under torchrun: DDP training, the sensitivity points shared out
    api.train(**cfg)


def _task_api(task: str):
    import importlib

    from .tasks import TASKS

    if task not in TASKS:
        raise ConfigError(f"unknown task {task!r}: choose one of {', '.join(TASKS)}")
    return importlib.import_module(f"autoprune.{task}")


def _ratios(text: str | None):
    from .sensitivity import DEFAULT_RATIOS

    if not text:
        return DEFAULT_RATIOS
    try:
        return tuple(float(r) for r in text.split(","))
    except ValueError:
        raise ConfigError(f"--ratios {text!r} must be comma-separated numbers such as "
                          f"0.1,0.3,0.5") from None


def _sensitivity(args: argparse.Namespace) -> None:
    from .distributed import init_from_env, rank_and_world
    from .store import check_output

    check_output(args.output, [args.checkpoint, args.data], "a sensitivity file", None)
    init_from_env()  # under torchrun: the points are shared out over the ranks
    task = args.task
    if args.task is None and Path(args.checkpoint).is_file():
        from .checkpoint import read_pruned_metadata

        task = read_pruned_metadata(args.checkpoint).get("task")
    api = _task_api(task or "classification")
    sens = api.analyze_sensitivity(args.checkpoint, args.data, args.output,
                                   ratios=_ratios(args.ratios), criterion=args.criterion,
                                   eval_limit=args.limit, device=args.device,
                                   sensitivity_options={"early_stop": args.early_stop,
                                                        "evaluation": args.evaluation,
                                                        "batch_variants": args.batch_variants})
    if rank_and_world()[0] == 0:
        print(f"wrote {args.output}: {len(sens)} groups")


def _prune(args: argparse.Namespace) -> None:
    from .pipeline import prune_checkpoint
    from .profiles import DEFAULT
    from .store import check_output

    inputs = [args.checkpoint] + ([] if args.sensitivities.upper() == DEFAULT else
                                  [args.sensitivities])
    check_output(args.output, inputs, "a checkpoint", args.overwrite)
    out = prune_checkpoint(args.checkpoint, args.sensitivities, args.output,
                           eval_metric_loss=args.eval_metric_loss, pruned_flops=args.pruned_flops,
                           criterion=args.criterion, round_to=args.round_to,
                           overwrite=args.overwrite)
    print(f"wrote {args.output}: FLOPs -{out.flops_reduction:.1%}, params "
          f"-{out.params_reduction:.1%} (not retrained: run `autoprune train` with "
          f"pretrain_weights to fine-tune)")


def _export(args: argparse.Namespace) -> None:
    from .pipeline import export_checkpoint
    from .store import check_output

    check_output(args.output, [args.checkpoint], "an ONNX model", args.overwrite)
    out = export_checkpoint(args.checkpoint, args.output, input_size=args.size,
                            opset_version=args.opset, overwrite=args.overwrite)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB)")


def _report(args: argparse.Namespace) -> None:
    from .pipeline import compare_checkpoints

    report = compare_checkpoints(args.baseline, args.pruned, args.data, save_dir=args.save_dir,
                                 eval_limit=args.limit, device=args.device)
    print(f"report written to {args.save_dir}/report.json, report.md, report.csv "
          f"(FLOPs -{report['flops_reduction']:.1%})")


def _profiles(args: argparse.Namespace) -> None:
    from .profiles import available_profiles, profile_dir, profiles_in

    if args.action == "list":
        from .store import read_record

        folder = Path(args.out) if args.out else profile_dir()
        profiles = profiles_in(folder) if args.out else available_profiles()
        print(f"DEFAULT profiles in {folder}:")
        print(f"  {'task':15s} {'arch key':32s} {'baseline':>16s}  file")
        for task, archs in sorted(profiles.items()):
            for key, name in sorted(archs.items()):
                try:
                    metric = read_record(folder / name).metric
                    base = f"{metric.get('name')} {float(metric.get('baseline')):.3f}"
                except (AutopruneError, OSError, TypeError, ValueError):
                    base = "(unreadable)"
                print(f"  {task:15s} {key:32s} {base:>16s}  {name}")
        if not profiles:
            print("  (none)")
        return
    from .profile_build import arch_key_of, build_profile, task_of

    if not args.arch:
        raise ConfigError("profiles build needs --arch (e.g. --arch resnet18, --arch yolov8n, "
                          "--arch smp/unet/resnet18)")
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
                         input_size=args.size, batch_size=args.batch, ratios=_ratios(args.ratios),
                         device=args.device, seed=args.seed)
    print(f"wrote {path}")


class _VersionAction(argparse.Action):
    """``--version``: autoprune's version and the main packages' (a warning when one differs)."""

    def __call__(self, parser, namespace, values, option_string=None):
        from .doctor import MAIN_PACKAGES, check_stack, difference_warning, version_text

        checks = check_stack(MAIN_PACKAGES)
        print(version_text(__version__, checks))
        warning = difference_warning(checks)
        if warning:
            print(f"autoprune: {warning}", file=sys.stderr)
        parser.exit()


def _doctor(args: argparse.Namespace) -> None:
    from .doctor import difference_warning, doctor_lines

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
    dr.set_defaults(func=_doctor)

    d = sub.add_parser("demo", help="the one-call flow on Fashion-MNIST: train, analyse, prune "
                       "and retrain a model (CPU, a few minutes) and print the before/after table")
    d.add_argument("--save-dir", default="runs/demo", help="output folder (default: runs/demo)")
    d.add_argument("--arch", default="resnet18", help="timm or torchvision model name "
                   "(default: resnet18)")
    d.add_argument("--pretrain-epochs", type=int, default=3,
                   help="epochs of the base model (default: 3)")
    d.add_argument("--epochs", type=int, default=2, help="epochs after pruning (default: 2)")
    d.add_argument("--train-images", type=int, default=12000, help="training subset (default: 12000)")
    d.add_argument("--val-images", type=int, default=1000, help="validation subset (default: 1000)")
    d.add_argument("--size", type=int, default=32, help="input size in pixels (default: 32)")
    d.add_argument("--eval-metric-loss", type=float, default=0.05,
                   help="tolerated relative top-1 loss per group (default: 0.05)")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--device", default="auto", help="auto, cpu or cuda")
    d.set_defaults(func=_demo)

    t = sub.add_parser("train", help="train (and prune, when sensitivities_file is set) from a "
                       "YAML config: task, model, train_data, eval_data, epochs, save_dir, "
                       "sensitivities_file, eval_metric_loss or pruned_flops, ...")
    t.add_argument("config", help="YAML file; keys are the arguments of autoprune.<task>.train")
    t.set_defaults(func=_train)

    se = sub.add_parser("sensitivity", help="measure the sensitivities of a trained checkpoint "
                        "on validation data (resumable; `torchrun --nproc_per_node N -m autoprune "
                        "sensitivity ...` shares the points over N processes/GPUs)")
    se.add_argument("checkpoint", help="a checkpoint written by autoprune (e.g. out/best.pt)")
    se.add_argument("data", help="validation data: a folder or 'fashion-mnist'")
    se.add_argument("output", help="sensitivity file to write or complete (JSON)")
    se.add_argument("--task", help="classification, detection or segmentation (default: the "
                    "checkpoint's task)")
    se.add_argument("--ratios", help="comma-separated ratios (default 0.1,...,0.9)")
    se.add_argument("--criterion", default="l1_norm", help="l1_norm, l2_norm, fpgm or bn_scale")
    se.add_argument("--limit", type=int, help="use only this many validation images")
    se.add_argument("--device", default="auto")
    se.add_argument("--early-stop", type=float, help="skip a group's larger ratios once its loss "
                    "passes this (off by default; recorded in the file)")
    se.add_argument("--evaluation", default="auto", choices=("auto", "masked", "prune"),
                    help="masked = batched masked variants (checked against real pruning); auto "
                    "= masked on a GPU, prune on a CPU")
    se.add_argument("--batch-variants", type=int, default=8,
                    help="ratios of one group per forward pass with masked variants (default 8)")
    se.set_defaults(func=_sensitivity)

    pr = sub.add_parser("prune", help="prune a checkpoint with a sensitivity file (no retraining)")
    pr.add_argument("checkpoint")
    pr.add_argument("sensitivities", help="a sensitivity file, or DEFAULT")
    pr.add_argument("output", help="where to write the pruned checkpoint")
    target = pr.add_mutually_exclusive_group()
    target.add_argument("--eval-metric-loss", type=float,
                        help="tolerated relative loss per group (default 0.05)")
    target.add_argument("--pruned-flops", type=float, help="fraction of FLOPs to remove instead")
    pr.add_argument("--criterion", default="l1_norm")
    pr.add_argument("--round-to", type=int, help="keep multiples of this many channels")
    _overwrite_option(pr)
    pr.set_defaults(func=_prune)

    ex = sub.add_parser("export", help="export a checkpoint (pruned or not) to ONNX")
    ex.add_argument("checkpoint")
    ex.add_argument("output", help="the .onnx file to write")
    ex.add_argument("--size", type=int, help="input size in px (default: the checkpoint's)")
    ex.add_argument("--opset", type=int, default=17, help="ONNX opset (default 17)")
    _overwrite_option(ex)
    ex.set_defaults(func=_export)

    rp = sub.add_parser("report", help="compare a baseline and a pruned checkpoint: size, FLOPs, "
                        "metrics, latency")
    rp.add_argument("baseline")
    rp.add_argument("pruned")
    rp.add_argument("data", help="validation data: a folder or 'fashion-mnist'")
    rp.add_argument("--save-dir", default=".", help="where report.json/md/csv go (default .)")
    rp.add_argument("--limit", type=int, help="use only this many validation images")
    rp.add_argument("--device", default="auto")
    rp.set_defaults(func=_report)

    pf = sub.add_parser("profiles", help="list the DEFAULT sensitivity profiles, or build one "
                        "on public data (Fashion-MNIST; its scenes for detection/segmentation)")
    pf.add_argument("action", choices=("list", "build"))
    pf.add_argument("--arch", help="architecture to build: a timm/torchvision name (resnet18), "
                    "a YOLO name (yolo26n, yolov8s) or smp/<arch>/<encoder> (smp/unet/resnet18)")
    pf.add_argument("--task", choices=("classification", "detection", "segmentation"),
                    help="force the task (default: told from --arch)")
    pf.add_argument("--out", help="profile folder to write (build) or read (list) (default: the "
                    "bundled one)")
    pf.add_argument("--epochs", type=int, help="training epochs (default per task: 3 / 30 / 10 "
                    "for classification / detection / segmentation)")
    pf.add_argument("--train-images", type=int, help="training images or scenes (default 12000 "
                    "/ 512 / 1000)")
    pf.add_argument("--val-images", type=int, help="images the sensitivities are measured on "
                    "(default 1000 / 64 / 200)")
    pf.add_argument("--size", type=int, help="input size in pixels (default 32 / 128 / 64)")
    pf.add_argument("--batch", type=int, help="batch size (default 128 / 16 / 8)")
    pf.add_argument("--ratios", help="comma-separated ratios (default 0.1,...,0.9)")
    pf.add_argument("--seed", type=int, default=0)
    pf.add_argument("--device", default="auto", help="auto (a GPU when there is one), cpu, cuda")
    pf.add_argument("--skip-existing", action="store_true",
                    help="do nothing if --out already lists this architecture")
    pf.set_defaults(func=_profiles)

    s = sub.add_parser("show", help="print a sensitivity file as a table")
    s.add_argument("file")
    s.set_defaults(func=_show)

    m = sub.add_parser("merge", help="merge sensitivity files (union; later files win)")
    m.add_argument("inputs", nargs="+", help="sensitivity files to merge")
    m.add_argument("-o", "--output", required=True, help="the merged file to write")
    _overwrite_option(m)
    m.set_defaults(func=_merge)

    c = sub.add_parser("convert-paddleslim", help="convert a PaddleSlim sensitivities pickle to "
                       "an autoprune JSON file (needs --allow-pickle)")
    c.add_argument("input")
    c.add_argument("output")
    c.add_argument("--allow-pickle", action="store_true",
                   help="confirm that you trust the file: pickle files can run code when read")
    c.add_argument("--arch", default=None, help="architecture to record in the file")
    _overwrite_option(c)
    c.set_defaults(func=_convert)
    return p


def _overwrite_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--overwrite", action="store_true", help="let the output replace an "
                        "input or an existing file of another kind (refused without it)")


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
            cfg = load_config(args.config)
        except AutopruneError:
            cfg = {}
        save_dir = cfg.get("save_dir", "output") if cfg else "the save_dir of the config"
        return (f"interrupted: progress is saved in {save_dir}; add `resume: true` to "
                f"{args.config} and {again}")
    return "interrupted: nothing was saved; run the command again"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``autoprune`` console script."""
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
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

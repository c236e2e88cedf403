"""The deploy-side subcommands: ``autoprune export`` (ONNX, or INT8 with ``--int8``, checked
in ONNX Runtime) and ``autoprune report`` (two checkpoints compared, optionally in INT8). The
other subcommands are :mod:`autoprune.cli.commands`."""
from __future__ import annotations

import argparse
import importlib.util

from ..engine.outputs import check_output
from ..errors import ConfigError
from ..flow.checkpoints import (check_onnx, checkpoint_meta, compare_checkpoints,
                                export_checkpoint, export_int8)
from .commands import signed_percent
from .show import shown


def _same_model(checkpoint: str, baseline: str) -> None:
    """Refuse a ``--baseline`` that is not the model ``checkpoint`` was pruned from (another
    task or architecture, or another class count)."""
    mine, theirs = checkpoint_meta(checkpoint), checkpoint_meta(baseline)
    keys = ("task", "arch")
    counts = [{k: v for k, v in (m.get("build") or {}).items() if k in ("num_classes", "nc")}
              for m in (mine, theirs)]
    if [mine.get(k) for k in keys] != [theirs.get(k) for k in keys] or counts[0] != counts[1]:
        what = lambda m, c: f"a {m.get('task')} {m.get('arch') or 'custom model'}" + \
            (f" ({', '.join(f'{k}={v}' for k, v in c.items())})" if c else "")
        raise ConfigError(shown(f"--baseline {baseline} holds {what(theirs, counts[1])} but "
                                f"{checkpoint} {what(mine, counts[0])}: pass the checkpoint "
                                f"{checkpoint} was pruned from, or leave --baseline out"))


def export(args: argparse.Namespace) -> None:
    check_output(args.output, [args.checkpoint], "an ONNX model", args.overwrite)
    if args.int8:
        export_int8_cli(args)
        return
    given = [k for k in ("data", "eval_data", "eval_limit") if getattr(args, k) is not None]
    given += _changed_int8_flags(args)
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise ConfigError(f"{flag} is for an INT8 export: add --int8, or leave {flag} out")
    if args.baseline is not None:
        _same_model(args.checkpoint, args.baseline)
    out = export_checkpoint(args.checkpoint, args.output, input_size=args.input_size,
                            opset_version=args.opset_version, dynamic_batch=not args.static,
                            overwrite=args.overwrite)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB)")
    if args.no_check or importlib.util.find_spec("onnxruntime") is None:
        return
    checked = check_onnx(args.checkpoint, out, baseline=args.baseline,
                         input_size=args.input_size)
    speed = f"{checked['latency_ms']:.2f} ms"
    if "baseline_ms" in checked:
        speed = (f"{checked['baseline_ms']:.2f} -> {speed} "
                 f"({signed_percent(-checked['reduction'])}, against {args.baseline})")
    print(f"ONNX Runtime (CPU, {torch_threads()} thread(s), batch 1): {speed}; outputs differ "
          f"from torch's by at most {checked['max_abs_diff']:.2e}")


def export_int8_cli(args: argparse.Namespace) -> None:
    """`autoprune export --int8`: the INT8 model, its size, metric and speed against FP32."""
    if args.data is None:
        raise ConfigError("--int8 calibrates on training data: pass --data <the data the model "
                          "was trained on>")
    if args.static or args.baseline is not None:
        raise ConfigError("--int8 writes a dynamic-batch INT8 model and times it against its "
                          "FP32 form: leave --static and --baseline out")
    out = export_int8(args.checkpoint, args.output, args.data, eval_data=args.eval_data,
                      eval_limit=args.eval_limit,
                      calibration_images=args.calibration_images,
                      calibration_method=args.calibration_method,
                      int8_metric_loss=args.int8_metric_loss, input_size=args.input_size,
                      overwrite=args.overwrite)
    speed = (f"ONNX Runtime (CPU, {torch_threads()} thread(s), batch 1): FP32 "
             f"{out['fp32_ms']:.2f} ms -> INT8 {out['int8_ms']:.2f} ms")
    metric = out["metrics"]
    if metric:
        speed += "; " + ", ".join(f"{k} {out['fp32_metrics'].get(k, float('nan')):.4f} -> "
                                  f"{v:.4f}" for k, v in metric.items())
    kept = f"; {len(out['excluded'])} node(s) kept in FP32" if out["excluded"] else ""
    if out["shipped"]:
        print(f"wrote {args.output} ({out['size_mb']:.2f} MB, INT8, calibrated on "
              f"{out['calibration_images']} train images{kept})")
    elif out["held_back"]:
        print(f"not written: {out['held_back']} ({out['speed']}): deploy the FP32 model "
              f"(autoprune export without --int8)")
    else:
        print(f"not written: the INT8 model is slower than the FP32 one on this CPU "
              f"({out['speed']}): deploy the FP32 model (autoprune export without --int8)")
    print(speed)


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def report(args: argparse.Namespace) -> None:
    int8 = _int8_settings(args)
    compared = compare_checkpoints(args.baseline, args.pruned, args.data,
                                   save_dir=args.save_dir, eval_limit=args.eval_limit,
                                   device=args.device, int8=int8, train_data=args.train_data)
    print(f"report written to {args.save_dir}/report.json, report.md, report.csv "
          f"(FLOPs {signed_percent(-compared['flops_reduction'])})")


def _changed_int8_flags(args: argparse.Namespace) -> list[str]:
    """The INT8 settings (``--calibration-images``...) given with another value than their
    default."""
    from ..flow.precision import Int8Settings

    defaults = Int8Settings()
    return [k for k in ("calibration_images", "calibration_method", "int8_metric_loss")
            if getattr(args, k) != getattr(defaults, k)]


def _int8_settings(args: argparse.Namespace):
    """`autoprune report`'s INT8 settings (None without --quantize; its other flags refused)."""
    from ..flow.precision import Int8Settings

    given = {k: getattr(args, k) for k in _changed_int8_flags(args)}
    if args.quantize is None:
        if given or args.train_data is not None:
            flag = "--" + next(iter(given), "train_data").replace("_", "-")
            raise ConfigError(f"{flag} is for an INT8 report: add --quantize int8, or leave "
                              f"{flag} out")
        return None
    if args.train_data is None:
        raise ConfigError("--quantize int8 calibrates on training data: pass --train-data <the "
                          "data the models were trained on>")
    return Int8Settings(quantize=args.quantize, **given).check()

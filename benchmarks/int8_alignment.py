"""Which channel counts ONNX Runtime's INT8 convolutions run fast at: single convolutions and
small stacks (regular 3x3, pointwise 1x1, depthwise 3x3) at channel counts that are or are not
multiples of 4, 8 and 16, timed FP32 against INT8 (static QDQ, per-channel int8 weights, the
activations' type this CPU runs fastest, see autoprune.engine.int8.settings.cpu_choice; S8S8
beside it) on one thread, pinned to one core, by thread CPU time in alternating rounds.

    python benchmarks/int8_alignment.py            # about 3 minutes on one core here
    python benchmarks/int8_alignment.py --quick    # fewer counts, for a smoke run

The table gives, per case, the milliseconds of FP32 and INT8 and their ratio, and each one's time
relative to the next multiple of 16 channels (64 or 80) in the same family: a count below it has
fewer multiply-accumulates, so a ratio near or above 1 means its kernel wastes what pruning
removed (a slow generic path at an unaligned count). Results go to
benchmarks/README.md, section "INT8: channel alignment".
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoprune.engine.int8.cpu import cpu_features, summary  # noqa: E402
from autoprune.engine.int8.speed import _session, paired_ms  # noqa: E402
from autoprune.engine.quantize import Int8Quantizer, QuantizeSettings  # noqa: E402
from autoprune.engine.runtimes import onnx_model  # noqa: E402

COUNTS = (56, 60, 62, 63, 64, 66, 68, 72, 76, 80)
QUICK = (63, 64, 72, 80)


def conv(kind: str, c: int) -> nn.Module:
    """One convolution of ``c`` channels in and out: 3x3, 1x1 or depthwise 3x3."""
    if kind == "3x3":
        return nn.Conv2d(c, c, 3, padding=1)
    if kind == "1x1":
        return nn.Conv2d(c, c, 1)
    return nn.Conv2d(c, c, 3, padding=1, groups=c)


def model(kind: str, c: int, stack: bool) -> nn.Module:
    """A single convolution, or a stack of three with ReLUs (``stack``), from 16 input channels
    so that only the tested layers carry ``c``."""
    layers: list[nn.Module] = [nn.Conv2d(16, c, 1), nn.ReLU()]
    for _ in range(3 if stack else 1):
        layers += [conv(kind, c), nn.ReLU()]
    return nn.Sequential(*layers).eval()


def time_case(kind: str, c: int, size: int, stack: bool, rounds: int) -> dict[str, float]:
    torch.manual_seed(0)
    net = model(kind, c, stack)
    x = torch.randn(1, 16, size, size)
    fp32 = onnx_model(net, x)
    calibration = [torch.randn(4, 16, size, size)]
    fast = Int8Quantizer(calibration).quantize(fp32)
    s8 = Int8Quantizer(calibration, QuantizeSettings(activations="int8",
                                                     reduce_range=False)).quantize(fp32)
    feeds = {"input": x.numpy()}
    sessions = [_session(d, 1) for d in (fp32, fast, s8)]
    ms = paired_ms([lambda s=s: s.run(None, feeds) for s in sessions], rounds=rounds, passes=5)
    return {"fp32": ms[0], "int8": ms[1], "s8s8": ms[2]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=28, help="input height and width")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--core", type=int, default=0, help="pin to this CPU core (-1: don't)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.core >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.core})
    torch.set_num_threads(1)
    features = cpu_features()
    kind_name = "U8S8" if Int8Quantizer(None).settings.activations == "uint8" else "S8S8"
    print(f"CPU: {features.get('model')} ({summary(features)}); INT8 = {kind_name}, "
          f"per-channel, reduce_range={Int8Quantizer(None).settings.reduce_range}; "
          f"{args.size}x{args.size}, 1 thread, core {args.core}\n")
    print("| layers | channels | %4 | %8 | %16 | FP32 ms | INT8 ms | FP32/INT8 | S8S8 ms | "
          "FP32 vs next %16 | INT8 vs next %16 |")
    print("|---|---:|:-:|:-:|:-:|---:|---:|---:|---:|---:|---:|")
    start = time.time()
    counts = QUICK if args.quick else COUNTS
    for stack in (False, True):
        for kind in ("3x3", "1x1", "dw"):
            rows = {c: time_case(kind, c, args.size, stack, args.rounds) for c in counts}
            for c, r in rows.items():
                ref = rows[min(n for n in rows if n >= c and n % 16 == 0)]
                mark = lambda m: "y" if c % m == 0 else "-"  # noqa: E731
                label = f"{'3 x ' if stack else ''}{kind}"
                print(f"| {label} | {c} | {mark(4)} | {mark(8)} | {mark(16)} | {r['fp32']:.3f} | "
                      f"{r['int8']:.3f} | {r['fp32'] / r['int8']:.2f}x | {r['s8s8']:.3f} | "
                      f"{r['fp32'] / ref['fp32']:.2f} | {r['int8'] / ref['int8']:.2f} |",
                      flush=True)
    print(f"\n{time.time() - start:.0f} s")


if __name__ == "__main__":
    main()

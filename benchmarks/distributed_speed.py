"""Sensitivity-analysis wall time with 1 and 2 processes (torchrun, gloo on CPU).

A small classification model is trained for one epoch on a Fashion-MNIST subset and saved; then
``autoprune sensitivity <checkpoint> fashion-mnist <out.json>`` runs under
``python -m torch.distributed.run --nproc_per_node N`` (= ``torchrun``; single node, rendezvous on
a free loopback port, gloo over ``lo``) with the same total number of CPU threads:

* 1 process x 2 threads (``OMP_NUM_THREADS=2``)  -- the reference
* 2 processes x 1 thread (``OMP_NUM_THREADS=1``) -- the points shared out over the ranks
* 1 process x 1 thread                           -- for scale

Each wall time is the whole command: process start, imports, data loading and the analysis. The
sensitivity files must hold the same numbers; the largest difference is printed.

    python benchmarks/distributed_speed.py --quick     # resnet18, 12 groups x 2 ratios, 200 images

The last line printed is ``speedup_2proc=<x> max_abs_diff=<y>`` (x = time of 1 process x 2
threads / time of 2 processes x 1 thread).
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
# (processes, threads per process); the first is the reference for the speed-up
CONFIGS = ((1, 2), (2, 1), (1, 1))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_analysis(checkpoint: Path, out: Path, procs: int, threads: int, ratios: str, limit: int,
                 timeout: float) -> float:
    """Wall time in seconds of one torchrun launch of ``autoprune sensitivity``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
        str(ROOT), os.environ.get("PYTHONPATH")])), "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads), "GLOO_SOCKET_IFNAME": "lo"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
           "--nproc_per_node", str(procs), "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()),
           "-m", "autoprune", "sensitivity", str(checkpoint), "fashion-mnist", str(out),
           "--ratios", ratios, "--limit", str(limit), "--device", "cpu"]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n"
                           f"{done.stderr[:3000]}\n...\n{done.stderr[-2000:]}")
    return wall


def max_abs_diff(a: dict, b: dict) -> float:
    if a.keys() != b.keys() or any(a[n].keys() != b[n].keys() for n in a):
        raise AssertionError("the sensitivity files cover different groups or ratios")
    return max((abs(a[n][r] - b[n][r]) for n in a for r in a[n]), default=0.0)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny case (a few minutes on 2 CPU cores)")
    p.add_argument("--model", default="resnet18")
    p.add_argument("--size", type=int, default=32, help="input size (Fashion-MNIST is 28 px)")
    p.add_argument("--train-images", type=int, help="training images (3000; --quick: 1500)")
    p.add_argument("--limit", type=int, help="validation images of the analysis (1000; --quick: "
                                             "200)")
    p.add_argument("--ratios", help="ratios measured (0.1,0.3,0.5,0.7,0.9; --quick: 0.3,0.6)")
    p.add_argument("--configs", default=",".join(f"{n}x{t}" for n, t in CONFIGS),
                   help="PROCSxTHREADS list; the first is the reference, a 2-process one is "
                        "compared with it")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per launch")
    args = p.parse_args(argv)
    defaults = (1500, 200, "0.3,0.6") if args.quick else (3000, 1000, "0.1,0.3,0.5,0.7,0.9")
    given = (args.train_images, args.limit, args.ratios)  # a flag given wins over --quick
    args.train_images, args.limit, args.ratios = (g if g is not None else d
                                                  for g, d in zip(given, defaults))
    configs = [tuple(int(v) for v in c.split("x")) for c in args.configs.split(",")]
    if not any(n == 2 for n, _ in configs):
        p.error("--configs needs a 2-process entry such as 2x1")

    from autoprune import classification as cls
    from autoprune import load_sensitivities

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        base = cls.train(args.model, "fashion-mnist", epochs=1, train_limit=args.train_images,
                         eval_limit=min(args.limit, 200), input_size=args.size, batch_size=64,
                         save_dir=tmp / "base", progress=False).baseline_path
        print(f"trained {args.model} for 1 epoch on {args.train_images} images at {args.size} px "
              f"in {time.perf_counter() - t0:.1f} s; analysis: ratios {args.ratios}, "
              f"{args.limit} validation images, CPU, gloo; {os.cpu_count()} CPUs visible",
              flush=True)
        walls, sens = {}, {}
        for n, t in configs:
            out = tmp / f"sens_{n}x{t}.json"
            walls[(n, t)] = run_analysis(base, out, n, t, args.ratios, args.limit, args.timeout)
            sens[(n, t)] = load_sensitivities(out)
            print(f"  {n} process(es) x {t} thread(s): {walls[(n, t)]:.1f} s "
                  f"({sum(len(v) for v in sens[(n, t)].values())} points)", flush=True)

    ref = configs[0]
    two = next(c for c in configs if c[0] == 2)
    values = [v for points in sens[ref].values() for v in points.values()]
    print(f"sensitivities (relative top-1 loss) of {ref[0]}x{ref[1]}: {len(values)} points, "
          f"{sum(v != 0 for v in values)} non-zero, from {min(values):.4f} to {max(values):.4f}")
    print()
    print("| processes x threads | wall time | speed-up vs "
          f"{ref[0]}x{ref[1]} | max abs diff vs {ref[0]}x{ref[1]} |")
    print("|---|---:|---:|---:|")
    diffs = {}
    for c in configs:
        diffs[c] = max_abs_diff(sens[ref], sens[c])
        print(f"| {c[0]} x {c[1]} | {walls[c]:.1f} s | {walls[ref] / walls[c]:.2f}x | "
              f"{diffs[c]:.2e} |")
    result = {"speedup_2proc": walls[ref] / walls[two], "max_abs_diff": max(diffs.values()),
              "walls": walls}
    print(f"speedup_2proc={result['speedup_2proc']:.2f} max_abs_diff={result['max_abs_diff']:.2e}")
    return result


if __name__ == "__main__":
    main()

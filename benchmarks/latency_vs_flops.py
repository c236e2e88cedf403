"""Measured latency against the FLOPs reduction, per task, with and without ``round_to=8``.

For each model and FLOPs target, a deep copy is pruned with uniform ratios that remove that share
of the FLOPs: a synthetic sensitivity table, the same for every group (loss = ratio), is handed to
``autoprune.allocate.ratios_by_flops``, so every group gets the same ratio and the bisection only
finds the ratio that hits the target (with the adapter's ignored layers left alone). The pruned
copy is then timed right after the unpruned model (paired, so that load on a shared machine
drifts less between the two): batch 1 (and 8), median of ``--runs`` forward passes after warm-up,
one CPU thread by default (``--threads``) and, when CUDA is available, GPU. Weights are untrained
(latency does not depend on them; denormals are flushed by ``autoprune.measure.latency_ms``);
nothing is downloaded.

    python benchmarks/latency_vs_flops.py --quick    # small inputs, a few minutes on 2 CPU cores
    python benchmarks/latency_vs_flops.py            # 224 / 320 / 256 px, batch 1 and 8

``eff`` = speed-up / (FLOPs before / FLOPs after): 1.0 when latency falls as much as the FLOPs.
The last line printed is ``rows=<n> mean_cpu_eff=<x>`` (plus ``mean_gpu_eff=<y>`` with CUDA).
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from autoprune.engine.allocate import ratios_by_flops
from autoprune.errors import ConfigError
from autoprune.engine.groups import prunable_groups
from autoprune.engine.measure import count_flops, count_params, latency_ms
from autoprune.engine.prune import prune
from autoprune.tasks import get_adapter

# task -> [(model name for the adapter, full-size input, quick input)]
MODELS = {
    "classification": [("resnet18", 224, 64), ("mobilenetv3_large_100", 224, 64)],
    "detection": [("yolov8n", 320, 128)],
    "segmentation": [("unet-resnet18", 256, 64)],
}
CLASSES = 10


def make_adapter(task: str, size: int):
    if task == "classification":
        return get_adapter(task, num_classes=CLASSES, input_size=size, device="cpu", progress=False)
    if task == "detection":
        return get_adapter(task, nc=CLASSES, input_size=size, device="cpu", progress=False)
    return get_adapter(task, num_classes=CLASSES, input_size=size, device="cpu", progress=False)


def uniform_table(names) -> dict[str, dict[float, float]]:
    """Every group the same curve (loss = ratio): ratios_by_flops then gives every group
    one ratio."""
    return {n: {r: r for r in (0.1, 0.3, 0.5, 0.7, 0.9)} for n in names}


def timed(model, x, devices, warmup, runs) -> dict[str, float]:
    return {d: latency_ms(model, x, device=d, warmup=warmup, repeats=runs) for d in devices}


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small inputs, batch 1 only")
    p.add_argument("--tasks", default="classification,detection,segmentation")
    p.add_argument("--models", default="", help="comma-separated model names to keep (default all)")
    p.add_argument("--targets", default="0.3,0.5,0.7", help="FLOPs reductions to aim for")
    p.add_argument("--round-to", default="none,8", help="comma-separated: none and/or integers")
    p.add_argument("--device", default="auto", help="cpu, cuda, or auto (cpu, plus cuda if any)")
    p.add_argument("--runs", type=int, default=30, help="timed runs per measurement (median)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batches", default="1,8", help="batch sizes to time")
    p.add_argument("--size", type=int, default=0, help="input size for every model (0: per model)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (default 1: on a shared machine, more threads mostly "
                        "measure OpenMP waiting on busy cores; 0: torch's default)")
    args = p.parse_args(argv)
    if args.quick:
        args.runs, args.warmup, args.batches = min(args.runs, 20), min(args.warmup, 3), "1"
    if args.threads:
        torch.set_num_threads(args.threads)
    tasks = [t for t in args.tasks.split(",") if t]
    unknown = set(tasks) - set(MODELS)
    if unknown:
        p.error(f"unknown task(s) {sorted(unknown)}: choose from {', '.join(MODELS)}")
    keep = {m for m in args.models.split(",") if m}
    targets = [float(t) for t in args.targets.split(",")]
    roundings = [None if r.lower() == "none" else int(r) for r in args.round_to.split(",")]
    batches = [int(b) for b in args.batches.split(",")]
    cuda = torch.cuda.is_available()
    if args.device == "cuda" and not cuda:
        p.error("--device cuda but CUDA is not available")
    devices = {"cpu": ["cpu"], "cuda": ["cuda"], "auto": ["cpu"] + (["cuda"] if cuda else [])}[
        args.device]
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, "
          f"devices {','.join(devices)}, median of {args.runs} runs after {args.warmup} warm-up, "
          f"batches {','.join(map(str, batches))}, untrained weights")

    rows = []
    for task in tasks:
        for name, size, quick_size in MODELS[task]:
            if keep and name not in keep:
                continue
            size = args.size or (quick_size if args.quick else size)
            adapter = make_adapter(task, size)
            model = adapter.build(name).eval()
            example = adapter.example_inputs(model)
            ignored = adapter.ignored_layers(model)
            groups = [g.name for g in prunable_groups(model, example, ignored)]
            sens = uniform_table(groups)
            inputs = {b: example.repeat(b, *([1] * (example.dim() - 1))) for b in batches}
            first = timed(model, inputs[batches[0]], devices, args.warmup, args.runs)
            flops0, params0 = count_flops(model, example), count_params(model)
            print(f"{task} {name} @{size}px: {len(groups)} groups, {flops0 / 1e6:.1f} M MACs, "
                  f"{params0 / 1e6:.2f} M params, batch-{batches[0]} {devices[0]} "
                  f"{first[devices[0]]:.2f} ms",
                  flush=True)
            for rt in roundings:
                for target in targets:
                    t0 = time.perf_counter()
                    try:
                        ratios = ratios_by_flops(model, example, sens, target, round_to=rt,
                                                 ignored_layers=ignored)
                    except ConfigError as e:
                        print(f"  round_to={rt} target={target}: not reachable ({e})")
                        continue
                    pruned = copy.deepcopy(model)
                    res = prune(pruned, example, ratios, round_to=rt, ignored_layers=ignored)
                    ratio = statistics.median(ratios.values()) if ratios else 0.0
                    timings = []  # printed as measured: a run stopped at its limit keeps them
                    for b in batches:  # paired: the unpruned model is timed right before
                        before = timed(model, inputs[b], devices, args.warmup, args.runs)
                        after = timed(res.model, inputs[b], devices, args.warmup, args.runs)
                        row = dict(task=task, model=name, size=size, round_to=rt, target=target,
                                   ratio=ratio, batch=b, flops_red=res.flops_reduction,
                                   flops_x=res.flops_before / res.flops_after,
                                   params_before=res.params_before, params_after=res.params_after)
                        for d in devices:
                            row[f"{d}_before"], row[f"{d}_after"] = before[d], after[d]
                            row[f"{d}_speedup"] = before[d] / after[d]
                            row[f"{d}_eff"] = row[f"{d}_speedup"] / row["flops_x"]
                            timings.append(f"batch {b} {d} {before[d]:.2f} -> {after[d]:.2f} ms "
                                           f"({row[f'{d}_speedup']:.2f}x)")
                        rows.append(row)
                    print(f"  round_to={rt} target={target}: ratio {ratio:.3f}, FLOPs "
                          f"-{res.flops_reduction:.1%}; {'; '.join(timings)} "
                          f"({time.perf_counter() - t0:.1f} s)", flush=True)
                    del pruned, res

    label = {"cpu": "CPU", "cuda": "GPU"}
    head = ["task", "model", "px", "round_to", "target", "batch", "ratio", "FLOPs red.",
            "params (M)"]
    for d in devices:
        head += [f"{label[d]} ms before", f"{label[d]} ms after", f"{label[d]} speed-up",
                 f"{label[d]} eff"]
    print()
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" if i < 3 else "---:" for i in range(len(head))) + "|")
    for r in rows:
        cells = [r["task"], r["model"], str(r["size"]), str(r["round_to"] or "-"),
                 f"{r['target']:.1f}", str(r["batch"]), f"{r['ratio']:.3f}",
                 f"-{r['flops_red']:.1%}",
                 f"{r['params_before'] / 1e6:.2f} → {r['params_after'] / 1e6:.2f}"]
        for d in devices:
            cells += [f"{r[f'{d}_before']:.2f}", f"{r[f'{d}_after']:.2f}",
                      f"{r[f'{d}_speedup']:.2f}x", f"{r[f'{d}_eff']:.2f}"]
        print("| " + " | ".join(cells) + " |")
    parts = [f"rows={len(rows)}"]  # the last line: rows=<n> mean_cpu_eff=<x> [mean_gpu_eff=<y>]
    for d in devices:
        effs = [r[f"{d}_eff"] for r in rows]
        parts.append(f"mean_{label[d].lower()}_eff="
                     f"{sum(effs) / len(effs) if effs else float('nan'):.3f}")
    print(" ".join(parts))
    return rows


if __name__ == "__main__":
    main()

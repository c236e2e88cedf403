"""Speed where the model runs: the speed-up of pruned models in PyTorch eager against ONNX Runtime
against the FLOPs ratio, and ``pruned_latency`` landing when timed in ONNX Runtime.

Default mode, for resnet18, mobilenetv3_large_100 (timm), YOLOv8n (Ultralytics, from YAML) and
Unet-resnet18 (smp, ``encoder_weights=None``), untrained (latency does not depend on the weights):

1. copies pruned **uniformly** at -30/-50/-70 % FLOPs (every group one ratio: a synthetic table,
   loss = ratio for every group, handed to ``ratios_by_flops``, as in ``latency_vs_flops.py``);
2. each copy timed against the unpruned model in pairs (``PairedTimer``: alternating rounds, the
   median of the neighbouring rounds' ratios) in **torch eager** and in **ONNX Runtime** (the
   model exported in memory as ``autoprune export`` writes it: opset 17, dynamic batch,
   ``ORT_ENABLE_ALL``; YOLOv8n with Ultralytics' export head in both), with one thread and with
   all the CPUs this process may use, at batch 1 and 8; one timer per runtime x threads x batch,
   so the unpruned model is exported once.

``--landing``: per model, the bundled DEFAULT profile's losses (ratios ``--ratios``) timed point
by point in ONNX Runtime (``measure_latencies(..., runtime="onnxruntime")``, CPU, one thread,
batch 1), then ``ratios_by_latency(..., pruned_latency, runtime="onnxruntime")``; the chosen
model is saved (``save_pruned``) and **new Python processes** rebuild the unpruned model, load
the checkpoint weights-only and time the two in ONNX Runtime (and, for contrast, in eager);
the median of ``--fresh-runs`` processes counts.

    taskset -c 0 python benchmarks/deploy_latency.py --quick              # 64-96 px, a few min
    taskset -c 0 python benchmarks/deploy_latency.py                      # 128-224 px
    python benchmarks/deploy_latency.py --threads all                    # every CPU, wall clock
    taskset -c 0 python benchmarks/deploy_latency.py --landing            # the four models
    taskset -c 0 python benchmarks/deploy_latency.py --landing --quick    # resnet18 only

Speed-up = ms before / ms after (paired); ``eff`` = speed-up / (FLOPs before / FLOPs after).
The last line is ``rows=<n> mean_eager_eff=<x> mean_ort_eff=<y>``, or with ``--landing``
``models=<n> within=<k> target=<t> tolerance=<tol> runtime=onnxruntime``.
"""
from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("YOLO_AUTOINSTALL", "False")

# name -> (task, architecture, input size, quick input size, adapter arguments)
MODELS = {
    "resnet18": ("classification", "timm/resnet18", 128, 64, {"num_classes": 10}),
    "mobilenetv3_large_100": ("classification", "timm/mobilenetv3_large_100", 224, 64,
                              {"num_classes": 10}),
    "yolov8n": ("detection", "yolov8n", 160, 96, {"nc": 10}),
    "unet-resnet18": ("segmentation", "smp/unet/resnet18", 128, 64, {"num_classes": 3}),
}
RUNTIMES = ("torch", "onnxruntime")
LABEL = {"torch": "eager", "onnxruntime": "ORT"}


def _adapter(name: str, size: int):
    from autoprune.tasks import get_adapter

    task, _, _, _, kwargs = MODELS[name]
    return get_adapter(task, input_size=size, **kwargs)


def deployed(model):
    """``model`` in the form ``autoprune export`` writes (YOLO: Ultralytics' export head, one
    output tensor); other models as they are. In place."""
    from autoprune.tasks.detection.models import Detect

    for m in model.modules():
        if isinstance(m, Detect):
            m.export, m.format = True, "onnx"
    return model


def build(name: str, size: int):
    """The unpruned model (seeded, eval, deploy form), its example input and ignored layers."""
    import torch

    torch.manual_seed(0)
    adapter = _adapter(name, size)
    model = deployed(adapter.build(adapter.arch_key(MODELS[name][1])).eval())
    return adapter, model, adapter.example_inputs(model), adapter.ignored_layers(model)


def thread_counts(spec: str) -> list[int]:
    """``"1,all"`` -> [1, the CPUs this process may use], without repeats."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    out: list[int] = []
    for part in spec.split(","):
        n = cpus if part.strip() == "all" else int(part)
        if n not in out:
            out.append(n)
    return out


# ---- default mode: speed-up at equal FLOPs, eager vs ONNX Runtime ------------------------------

def flops_rows(name: str, size: int, targets: list[float], threads: list[int],
               batches: list[int], rounds: int, runs: int, round_to: int | None = None
               ) -> list[dict]:
    from autoprune.engine.allocate import ratios_by_flops
    from autoprune.engine.groups import prunable_groups
    from autoprune.engine.latency import PairedTimer
    from autoprune.engine.measure import count_flops
    from autoprune.engine.prune import prune

    _, model, example, ignored = build(name, size)
    groups = [g.name for g in prunable_groups(model, example, ignored)]
    uniform = {g: {r: r for r in (0.1, 0.3, 0.5, 0.7, 0.9)} for g in groups}
    flops0 = count_flops(model, example)
    timers = {(rt, t, b): PairedTimer(model, example, threads=t, batch=b, rounds=rounds,
                                      runs=runs, runtime=rt)
              for rt in RUNTIMES for t in threads for b in batches}
    rows = []
    for target in targets:
        start = time.perf_counter()
        ratios = ratios_by_flops(model, example, uniform, target, ignored_layers=ignored,
                                 round_to=round_to)
        pruned = prune(copy.deepcopy(model), example, ratios, ignored_layers=ignored,
                       round_to=round_to).model
        flops_x = flops0 / count_flops(pruned, example)
        ratio = statistics.median(ratios.values()) if ratios else 0.0
        for t in threads:
            for b in batches:
                row = {"model": name, "size": size, "target": target, "ratio": ratio,
                       "round_to": round_to,
                       "flops_x": flops_x, "threads": t, "batch": b}
                for rt in RUNTIMES:
                    timer = timers[(rt, t, b)]
                    first = len(timer.base_rounds)
                    relative = timer.compare(pruned)
                    base_ms = statistics.median(timer.base_rounds[first:])
                    row[f"{rt}_before"], row[f"{rt}_after"] = base_ms, base_ms * relative
                    row[f"{rt}_x"] = 1.0 / relative
                    row[f"{rt}_eff"] = row[f"{rt}_x"] / flops_x
                    row[f"{rt}_clock"] = timer.setting["clock"]
                rows.append(row)
        exports = sum(tm.exports for tm in timers.values())
        print(f"  {name} @{size}px -{target:.0%} FLOPs: ratio {ratio:.3f}, "
              f"{flops_x:.2f}x fewer FLOPs (round_to {round_to}), "
              f"timed in {time.perf_counter() - start:.0f} s "
              f"({exports} ONNX exports so far)", flush=True)
    return rows


def print_flops_table(rows: list[dict]) -> None:
    head = ["model", "px", "threads", "batch", "round_to", "FLOPs", "ratio", "FLOPs x",
            "eager ms", "eager x", "eager eff", "ORT ms", "ORT x", "ORT eff",
            "ORT / eager (unpruned)"]
    print()
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" if i < 2 else "---:" for i in range(len(head))) + "|")
    for r in rows:
        cells = [r["model"], str(r["size"]), str(r["threads"]), str(r["batch"]),
                 str(r["round_to"] or "-"),
                 f"-{r['target']:.0%}", f"{r['ratio']:.3f}", f"{r['flops_x']:.2f}x"]
        for rt in RUNTIMES:
            cells += [f"{r[f'{rt}_before']:.2f} → {r[f'{rt}_after']:.2f}", f"{r[f'{rt}_x']:.2f}x",
                      f"{r[f'{rt}_eff']:.2f}"]
        cells.append(f"{r['onnxruntime_before'] / r['torch_before']:.2f}")
        print("| " + " | ".join(cells) + " |")


# ---- --landing: pruned_latency timed in ONNX Runtime, re-measured in a fresh process ----------

def remeasure(name: str, path: str, rounds: int) -> dict:
    """In this (fresh) process: the unpruned model against the checkpoint at ``path``, timed in
    pairs on the CPU with one thread, in ONNX Runtime and in eager."""
    from autoprune import read_pruned_metadata
    from autoprune.engine.latency import paired_reduction
    from autoprune.flow.checkpoints import load_model

    size = read_pruned_metadata(path)["input_size"]
    adapter, base, example, _ = build(name, size)
    pruned = deployed(load_model(path, adapter).eval())
    out = {}
    for rt in RUNTIMES:
        r = paired_reduction(base, pruned, example, device="cpu", threads=1, rounds=rounds,
                             runtime=rt)
        out[rt] = {"reduction": r["reduction"], "baseline_ms": r["baseline_ms"],
                   "pruned_ms": r["pruned_ms"]}
    return out


def fresh_median(name: str, path: Path, runs: int, rounds: int) -> dict:
    """:func:`remeasure` in ``runs`` new processes one after the other; per runtime the run with
    the median reduction."""
    results = []
    for _ in range(runs):
        child = subprocess.run([sys.executable, __file__, "--remeasure", name, str(path),
                                str(rounds)], capture_output=True, text=True, check=False)
        if child.returncode != 0:
            raise RuntimeError(f"the fresh process failed: {child.stderr.strip()[-800:]}")
        results.append(json.loads(child.stdout.strip().splitlines()[-1]))
    out = {}
    for rt in RUNTIMES:
        ordered = sorted((r[rt] for r in results), key=lambda r: r["reduction"])
        out[rt] = dict(ordered[len(ordered) // 2], runs=[r["reduction"] for r in ordered])
    return out


def landing(name: str, size: int, target: float, ratios: list[float] | None, tolerance: float,
            work: Path, fresh_runs: int, rounds: int, round_to: int | None = None) -> dict:
    from autoprune import save_pruned
    from autoprune.engine.latency import Timing, measure_latencies
    from autoprune.engine.latency_target import ratios_by_latency
    from autoprune.engine.measure import count_flops
    from autoprune.engine.prune import prune
    from autoprune.engine.store import read_record
    from autoprune.flow.defaults import find_profile

    task = MODELS[name][0]
    adapter, model, example, ignored = build(name, size)
    key = adapter.arch_key(MODELS[name][1])
    losses = read_record(find_profile(task, key)).sensitivities
    if ratios:
        losses = {g: {r: v for r, v in pts.items() if any(abs(r - q) < 1e-9 for q in ratios)}
                  for g, pts in losses.items()}
    start = time.time()
    record = measure_latencies(model, example, losses, threads=1, ignored_layers=ignored,
                               arch=key, path=work / f"{name}-{size}-ort.json", progress=False,
                               runtime="onnxruntime")
    timed = time.time() - start
    start = time.time()
    chosen = ratios_by_latency(model, example, record, target,
                               timing=Timing(threads=1, runtime="onnxruntime"),
                               ignored_layers=ignored, search={"tolerance": tolerance},
                               round_to=round_to)
    chose = time.time() - start
    pruned = copy.deepcopy(model)
    prune(pruned, example, {g: r for g, r in chosen.items() if r > 0}, ignored_layers=ignored,
          round_to=round_to)
    path = save_pruned(pruned, work / f"{name}-{size}-{round_to}.pt", task=task, arch=key,
                       build=adapter.build_kwargs(model), input_size=size, pruned=True)
    fresh = fresh_median(name, path, fresh_runs, rounds)
    flops = count_flops(model, example), count_flops(pruned, example)
    ort = fresh["onnxruntime"]
    return {"model": name, "size": size, "round_to": round_to, "target": target,
            "table_saving": chosen.table_saving,
            "achieved": chosen.achieved, "method": chosen.method, "fresh": ort["reduction"],
            "fresh_runs": ort["runs"], "baseline_ms": ort["baseline_ms"],
            "pruned_ms": ort["pruned_ms"], "eager": fresh["torch"]["reduction"],
            "eager_ms": (fresh["torch"]["baseline_ms"], fresh["torch"]["pruned_ms"]),
            "flops_removed": 1 - flops[1] / flops[0],
            "points": sum(len(p) for p in losses.values()), "timing_s": timed, "choose_s": chose,
            "within": abs(ort["reduction"] - target) <= tolerance}


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="small inputs (64-96 px), fewer rounds; with --landing resnet18 only")
    p.add_argument("--models", default=",".join(MODELS), help="comma list of " + ", ".join(MODELS))
    p.add_argument("--size", type=int, default=0, help="input size for every model (0: per model)")
    p.add_argument("--targets", default="0.3,0.5,0.7", help="FLOPs reductions (default mode)")
    p.add_argument("--threads", default="1,all",
                   help="CPU threads to time with ('all': the CPUs this process may use)")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--round-to", default="none",
                   help="comma list: none and/or channel multiples (e.g. none,8); both modes")
    p.add_argument("--rounds", type=int, default=0,
                   help="paired rounds per timing (default 9, --quick 5; --landing's fresh "
                        "processes 25)")
    p.add_argument("--runs", type=int, default=2, help="passes per round (the fastest counts)")
    p.add_argument("--landing", action="store_true",
                   help="pruned_latency timed in ONNX Runtime, re-measured in fresh processes")
    p.add_argument("--target", type=float, default=0.4, help="pruned_latency (--landing)")
    p.add_argument("--tolerance", type=float, default=0.03)
    p.add_argument("--ratios", default="0.2,0.4,0.6,0.8",
                   help="the profile's ratios to time ('all' for every one; --landing)")
    p.add_argument("--fresh-runs", type=int, default=3)
    p.add_argument("--work-dir", help="keep the timed tables and checkpoints here (--landing)")
    p.add_argument("-v", "--verbose", action="store_true", help="log each timed allocation")
    p.add_argument("--remeasure", nargs=3, metavar=("MODEL", "CHECKPOINT", "ROUNDS"),
                   help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.remeasure:
        name, path, rounds = args.remeasure
        print(json.dumps(remeasure(name, path, int(rounds))), flush=True)
        return []
    import torch

    names = args.models.split(",")
    if args.quick and args.landing and args.models == ",".join(MODELS):
        names = ["resnet18"]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        p.error(f"unknown model(s) {unknown}: pick from {', '.join(MODELS)}")
    if args.verbose:
        logging.basicConfig(level=logging.DEBUG, format="%(message)s")
        logging.getLogger("autoprune").setLevel(logging.DEBUG)
    import onnxruntime

    size_of = lambda n: args.size or MODELS[n][3 if args.quick else 2]
    cpus = thread_counts("all")[0]
    print(f"torch {torch.__version__}, onnxruntime {onnxruntime.__version__}, {cpus} CPU(s) "
          f"usable, untrained weights", flush=True)
    if args.landing:
        return _main_landing(args, names, size_of)
    rounds = args.rounds or (5 if args.quick else 9)
    threads = thread_counts(args.threads)
    batches = [int(b) for b in args.batches.split(",")]
    targets = [float(t) for t in args.targets.split(",")]
    print(f"paired rounds {rounds} x {args.runs} passes, threads {threads}, batches {batches}",
          flush=True)
    roundings = [None if r.lower() == "none" else int(r) for r in args.round_to.split(",")]
    rows = []
    for name in names:
        for round_to in roundings:
            rows += flops_rows(name, size_of(name), targets, threads, batches, rounds,
                               args.runs, round_to)
    print_flops_table(rows)
    effs = {rt: [r[f"{rt}_eff"] for r in rows] for rt in RUNTIMES}
    print(f"rows={len(rows)} " + " ".join(
        f"mean_{LABEL[rt].lower()}_eff={statistics.mean(v) if v else float('nan'):.3f}"
        for rt, v in effs.items()), flush=True)
    return rows


def _main_landing(args, names: list[str], size_of) -> list[dict]:
    ratios = None if args.ratios == "all" else [float(r) for r in args.ratios.split(",")]
    rounds = args.rounds or 25
    roundings = [None if r.lower() == "none" else int(r) for r in args.round_to.split(",")]
    rows = []
    print(f"{'model':22s} {'px':>4s} {'rnd':>4s} {'target':>6s} {'table sum':>9s} {'achieved':>8s} "
          f"{'fresh ORT':>9s} {'ORT ms before -> after':>22s} {'eager':>6s} {'FLOPs':>7s}  "
          f"within", flush=True)
    with tempfile.TemporaryDirectory(prefix="autoprune-deploy-") as tmp:
        work = Path(args.work_dir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        for name, round_to in ((n, rt) for n in names for rt in roundings):
            r = landing(name, size_of(name), args.target, ratios, args.tolerance, work,
                        args.fresh_runs, rounds, round_to)
            rows.append(r)
            print(f"{name:22s} {r['size']:4d} {str(round_to or '-'):>4s} {r['target']:6.3f} "
                  f"{r['table_saving']:9.3f} {r['achieved']:8.3f} {r['fresh']:9.3f} "
                  f"{r['baseline_ms']:9.2f} -> {r['pruned_ms']:8.2f} {r['eager']:6.3f} "
                  f"{-r['flops_removed']:+7.1%}  {'yes' if r['within'] else 'NO'} "
                  f"({r['method']}; {r['points']} points timed in {r['timing_s']:.0f} s, "
                  f"chosen in {r['choose_s']:.0f} s; fresh ORT runs "
                  f"{', '.join(f'{x:.3f}' for x in r['fresh_runs'])})", flush=True)
    print(f"models={len(rows)} within={sum(r['within'] for r in rows)} target={args.target} "
          f"tolerance={args.tolerance} runtime=onnxruntime", flush=True)
    return rows


if __name__ == "__main__":
    main()

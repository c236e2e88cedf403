"""Latency-aware allocation against a FLOPs allocation and uniform ratios at the same measured
latency, before and after the same short retraining, for several models and latency targets.

For each model (``--models``: timm ``mobilenetv3_large_100`` and ``resnet18`` on Fashion-MNIST,
Ultralytics YOLOv8n on Fashion-MNIST scenes) one base model is trained and its sensitivities are
measured with each point timed (``sensitivity_options={"latency": True}``, CPU, one thread,
batch 1); both serve every target (``--targets``). Everything goes through the task's adapter
(``autoprune.tasks.get_adapter``): training, evaluation (top-1, mAP50-95) and retraining. For each
target three pruned copies then remove the same share of *measured* latency:

- ``latency-aware``: ``autoprune.ratios_by_latency`` for the target (its greedy allocation on
  loss per millisecond saved and its loss-threshold allocation, each corrected against the
  measured latency; the one with the least summed table loss at the target is taken, and the
  output names it); what it achieves is the latency the other two are brought to;
- ``flops``: ``ratios_by_flops`` (least loss per FLOP), its FLOPs target bisected until the
  measured latency reduction matches;
- ``uniform``: one ratio for every group, bisected the same way.

Each of the three is evaluated, retrained the same way (``--retrain-epochs``, same seed, data and
schedule) and evaluated again. The column "summed table loss" is the sum over groups of the
table's loss at each method's ratios (``autoprune.engine.allocate.summed_loss``): the objective
the latency-aware allocation minimises, so a reader sees whether it wins on it even where the real
metric, whose losses do not add up over groups, disagrees.

Every latency is timed against the unpruned model in alternating rounds
(:class:`autoprune.engine.latency.PairedTimer`), so load on a shared machine cancels out.

    python benchmarks/latency_aware.py --quick       # mobilenetv3_large_100, 64 px, -15 %, ~5 min
    python benchmarks/latency_aware.py               # the three models at their targets
    python benchmarks/latency_aware.py --models resnet18 --targets 0.4 --work-dir runs/lat

``--work-dir`` keeps each model's base model and timed table in a folder named by the model and
the settings the base model depends on (``resnet18-64px-4000img-2ep-seed0``): a rerun with the
same settings reuses them, and measures only missing points. Prints a markdown table per model and
target, a summary table, and, last, for the first model at the first target:
``target=<t> achieved=<a> aware_metric=<x> flops_metric=<y> uniform_metric=<z>`` (the metric before
retraining) followed by ``aware_retrained=<x> flops_retrained=<y> uniform_retrained=<z>``
(after it).
"""
from __future__ import annotations

import argparse
import copy
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import torch  # noqa: E402

from autoprune.engine.allocate import (ignored_names, ratios_by_flops,  # noqa: E402
                                       summed_loss)
from autoprune.engine.latency import PairedTimer  # noqa: E402
from autoprune.engine.latency_target import ratios_by_latency  # noqa: E402
from autoprune.engine.measure import count_flops  # noqa: E402
from autoprune.engine.prune import remove_channels  # noqa: E402
from autoprune.engine.store import read_record  # noqa: E402
from autoprune.errors import ConfigError  # noqa: E402
from autoprune.flow import run  # noqa: E402
from autoprune.flow.analysis_step import analyze_sensitivity  # noqa: E402
from autoprune.flow.checkpoints import load_model  # noqa: E402
from autoprune.tasks import get_adapter  # noqa: E402

METHODS = ("latency-aware", "flops", "uniform")
# Per model, the full run's settings (about an hour for the three on one CPU core: see
# benchmarks/README.md section 7 for the time of each stage). size: input pixels (mobilenetv3 at
# 224: at 64 or 128 px its batch-1 CPU latency is mostly per-layer overhead, every group at ratio
# 0.8 removes only 32 / 42 % of it, so -50 % is out of reach); train/val: images; table: the
# evaluation images each table point is measured on (the before/after metrics use all ``val``);
# retrain: epochs given to each method, on the first ``retrain_images`` training images
# (classification; detection retrains on all of its scenes).
FASHION = dict(task="classification", data="fashion-mnist", batch=64, lr=0.05)
SCENES = dict(task="detection", data="scenes", batch=16,
              train_args=dict(optimizer="AdamW", lr0=0.003, warmup_epochs=1, nbs=16))
MODELS: dict[str, dict[str, Any]] = {
    # at 224 px batch 1, -30 % of mobilenetv3's latency takes -54 % of its FLOPs and leaves
    # every allocation at chance before retraining (top-1 0.876 base): it gets milder targets
    "mobilenetv3_large_100": dict(FASHION, arch="mobilenetv3_large_100", size=224, epochs=4,
                                  train=4000, val=500, table=100, retrain=1, retrain_images=1000,
                                  ratios="0.1,0.2,0.3,0.45,0.6,0.9", targets="0.15,0.25"),
    "resnet18": dict(FASHION, arch="resnet18", size=64, epochs=2, train=4000, val=500, table=100,
                     retrain=1, retrain_images=1000, ratios="0.2,0.4,0.6,0.8",
                     targets="0.3,0.5"),
    "yolov8n": dict(SCENES, arch="yolov8n.yaml", size=128, epochs=20, train=256, val=64,
                    table=32, retrain=3, ratios="0.3,0.6,0.9", targets="0.3,0.5"),
}
# --quick: the mobilenetv3 case of the first runs (README section 7)
QUICK_TARGET = 0.15
QUICK = dict(size=64, epochs=2, train=3000, val=300, table=300, retrain=1, retrain_images=None,
             ratios="0.2,0.4,0.6,0.8", targets=str(QUICK_TARGET))
# --tiny (the tests: seconds, a single ratio). Detection: 24 scenes of one large garment,
# validated on the training images, 12 epochs at lr0=0.005 without warmup, so the barely trained
# base model scores above 0 (as benchmarks/task_flows.py --quick and tests/test_detection.py)
TINY = {"classification": dict(size=32, epochs=1, train=128, val=32, table=32, retrain=1,
                               retrain_images=None, ratios="0.5", bisect=4),
        "detection": dict(size=64, epochs=12, train=24, val=8, table=8, retrain=1, batch=8,
                          bisect=4, ratios="0.5", val_on_train=True,
                          scenes=dict(objects=(1, 1), scale=(0.8, 1.0)),
                          train_args=dict(optimizer="AdamW", lr0=0.005, warmup_epochs=0,
                                          mosaic=0.0, nbs=8))}


def pruned_copy(model, example, ratios, ignored):
    """``model`` copied and pruned by ``ratios`` (groups at 0 left alone)."""
    net = copy.deepcopy(model)
    remove_channels(net, example, {k: v for k, v in ratios.items() if v > 0},
                    ignored_layers=ignored)  # its FLOPs counted only where they are printed
    return net


def bisect_to_latency(make: Callable[[float], dict], measure: Callable[[dict], float],
                      goal: float, lo: float = 0.0, hi: float = 0.95, steps: int = 8):
    """``(ratios, reduction)``: the ``make(x)`` (ratios) whose measured latency reduction is
    closest to ``goal``, ``x`` bisected in [lo, hi] (the reduction grows with ``x``); None when
    no ``x`` gave ratios."""
    best = None
    for _ in range(steps):
        mid = (lo + hi) / 2
        try:
            ratios = make(mid)
        except ConfigError:  # a FLOPs target the table cannot reach: aim lower
            hi = mid
            continue
        reduction = measure(ratios)
        if best is None or abs(reduction - goal) < abs(best[1] - goal):
            best = (ratios, reduction)
        lo, hi = (mid, hi) if reduction < goal else (lo, mid)
    return best


def settings(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """The settings of model ``name``: its full run's, --quick's or --tiny's, then the options
    given on the command line."""
    s = dict(MODELS[name], bisect=8)
    if args.quick:
        s.update(QUICK)
    elif args.tiny:
        s.update(TINY[s["task"]])
    given = {"size": args.size, "epochs": args.epochs, "train": args.train_images,
             "val": args.val_images, "table": args.table_images, "retrain": args.retrain_epochs,
             "ratios": args.ratios, "bisect": args.bisect_steps,
             "retrain_images": args.retrain_images}
    s.update({k: v for k, v in given.items() if v is not None})
    s["table"] = min(s["table"], s["val"])
    s["retrain_images"] = min(s.get("retrain_images") or s["train"], s["train"])
    return s


def make_adapter(s: Mapping[str, Any], work: Path, seed: int):
    """The task adapter holding the model's data and training settings (CPU); classification
    trains on the first ``s["train"]`` images."""
    common = dict(input_size=s["size"], batch_size=s["batch"], device="cpu", seed=seed,
                  progress=False)
    if s["task"] == "classification":
        return get_adapter("classification", train_data=s["data"], eval_data=s["data"],
                           num_classes=10, lr=s["lr"], train_limit=s["train"],
                           eval_limit=s["val"], **common)
    from autoprune.datasets.scenes import write_yolo_dataset

    root = work / f"scenes-{s['size']}px-{s['train']}-{s['val']}"
    data = root / "data.yaml"
    if not data.is_file():
        write_yolo_dataset(root, train=s["train"], val=s["val"], size=s["size"], seed=0,
                           **s.get("scenes", {}))
        if s.get("val_on_train"):
            import yaml

            cfg = yaml.safe_load(data.read_text())
            data.write_text(yaml.safe_dump({**cfg, "val": cfg["train"]}, sort_keys=False))
    return get_adapter("detection", data=data, train_args=s["train_args"], **common)


def base_and_table(name: str, s: Mapping[str, Any], work: Path, args: argparse.Namespace):
    """The trained base model and its latency-timed sensitivity record (both reused when
    ``work`` already holds them); the adapter; the seconds each took."""
    adapter = make_adapter(s, work, args.seed)
    # everything the base model depends on names its folder: a rerun with other settings trains
    # a new one instead of reusing an old one silently
    folder = work / f"{name}-{s['size']}px-{s['train']}img-{s['epochs']}ep-seed{args.seed}"
    base_path = folder / "base" / "baseline" / "best.pt"
    finished = folder / "base" / "finished"  # best.pt exists after the first epoch already
    t0 = time.perf_counter()
    if not finished.is_file():  # an interrupted base training is resumed, not taken as it is
        torch.manual_seed(args.seed)
        run.train(adapter, s["arch"], epochs=s["epochs"], save_dir=folder / "base",
                  progress=False, resume=True)
        finished.write_text(f"{s['epochs']} epochs\n")
    t1 = time.perf_counter()
    sens_path = folder / "sens.json"
    ratios = tuple(float(r) for r in str(s["ratios"]).split(","))
    analyze_sensitivity(adapter, base_path, sens_path, ratios=ratios, progress=False,
                        sensitivity_options={"latency": True, "latency_threads": args.threads,
                                             "eval_images": s["table"]})
    t2 = time.perf_counter()
    model = load_model(base_path, adapter).cpu().eval()
    return adapter, model, read_record(sens_path), folder, (t1 - t0, t2 - t1)


def compare(name: str, target: float, s: Mapping[str, Any], adapter, model, record,
            folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The three allocations of one model at one target, each evaluated, retrained and evaluated
    again; prints the markdown table and returns the figures."""
    timing = {"device": "cpu", "threads": args.threads, "batch": 1}
    trainer = adapter  # retrains the pruned models (classification: on fewer images)
    if s["task"] == "classification" and s["retrain_images"] < s["train"]:
        trainer = make_adapter({**s, "train": s["retrain_images"]}, folder.parent, args.seed)
    example = adapter.example_inputs(model)
    ignored = ignored_names(model, adapter.ignored_layers(model))
    metric_name, sens = adapter.metric, record.sensitivities
    flops0 = count_flops(model, example)
    row: dict[str, Any] = {"model": name, "size": s["size"], "target": target,
                           "metric_name": metric_name, "reachable": True}
    t0 = time.perf_counter()
    print(f"\n### {name} at {s['size']} px, target -{target:.0%} latency\n", flush=True)
    try:
        aware = ratios_by_latency(model, example, record, target, ignored_layers=ignored,
                                  search={"tolerance": args.tolerance}, timing=timing)
    except ConfigError as e:  # out of the table's reach, or timings too unsteady to land
        print(f"latency-aware allocation failed: {e}\n", flush=True)
        return {**row, "reachable": False, "why": str(e)}
    timer = PairedTimer(model, example, rounds=25, **timing)  # as ratios_by_latency's
    measure = lambda r: 1.0 - timer.compare(pruned_copy(model, example, r, ignored))
    goal = aware.achieved
    chosen = {"latency-aware": (dict(aware), aware.achieved)}
    most = max(max(p) for p in sens.values())
    chosen["flops"] = bisect_to_latency(
        lambda f: ratios_by_flops(model, example, sens, f, ignored_layers=ignored), measure, goal,
        steps=s["bisect"])
    chosen["uniform"] = bisect_to_latency(lambda r: {g: r for g in sens}, measure, goal, hi=most,
                                          steps=s["bisect"])
    chosen = {m: c for m, c in chosen.items() if c is not None}
    t1 = time.perf_counter()

    retrain = s["retrain"]
    lines = [f"| method | latency reduction (measured) | FLOPs | summed table loss | "
             f"{metric_name} before retraining | {metric_name} after {retrain} epoch(s) |",
             "|---|---:|---:|---:|---:|---:|"]
    out = {m: {} for m in chosen}
    for method, (ratios, reduction) in chosen.items():
        net = pruned_copy(model, example, ratios, ignored)
        flops = count_flops(net, example)
        figures = out[method]
        figures.update(reduction=reduction, flops=flops, flops_removed=1 - flops / flops0,
                       table_loss=summed_loss(sens, ratios),
                       before=adapter.evaluate(net)[metric_name], after=float("nan"))
        if retrain > 0:
            torch.manual_seed(args.seed)  # the same retraining for the three
            net = trainer.fit(net, retrain, folder / "retrain" / f"{target:g}" / method)
            figures["after"] = adapter.evaluate(net)[metric_name]
        lines.append(f"| {method} | -{reduction:.1%} ({timer.baseline_ms * (1 - reduction):.2f} "
                     f"ms) | {flops / 1e6:.1f}M (-{figures['flops_removed']:.1%}) "
                     f"| {figures['table_loss']:.4f} | {figures['before']:.4f} "
                     f"| {figures['after']:.4f} |")
    t2 = time.perf_counter()
    print("\n".join(lines), flush=True)  # after the training's own lines
    images = f"{s['retrain_images']} images" if s["task"] == "classification" else \
        f"{s['train']} scenes"
    families = ", ".join(f"{k} -{v['achieved']:.1%} loss {v['loss']:.4f}"
                         for k, v in aware.candidates.items())
    print(f"\n{name}: unpruned {timer.baseline_ms:.2f} ms, {flops0 / 1e6:.1f}M FLOPs; "
          f"retrained {retrain} epoch(s) on {images}; the latency-aware allocation took the "
          f"{aware.method} family ({families}; its own summed loss {aware.loss:.4f}); "
          f"allocations {t1 - t0:.0f} s, evaluations and retraining {t2 - t1:.0f} s", flush=True)
    return {**row, "achieved": goal, "baseline_ms": timer.baseline_ms, "methods": out,
            "family": aware.method}


def summary(rows: list[dict[str, Any]]) -> str:
    """The markdown summary: one line per model and target."""
    def three(r, key, fmt):
        return " / ".join(fmt.format(r["methods"][m][key]) if m in r["methods"] else "-"
                          for m in METHODS)

    lines = ["| model | px | target | achieved | FLOPs removed | summed table loss | metric "
             "before retraining | metric after | aware best before / after |",
             "|---|---:|---:|---:|---:|---:|---:|---:|:--:|"]
    for r in rows:
        head = f"| {r['model']} | {r['size']} | -{r['target']:.0%} "
        if not r["reachable"]:
            lines.append(head + "| unreachable | | | | | |")
            continue
        best = lambda key: ("yes" if all(r["methods"]["latency-aware"][key] >= f[key]
                                         for f in r["methods"].values()) else "no")
        lines.append(head + f"| -{r['achieved']:.1%} | {three(r, 'flops_removed', '{:.1%}')} | "
                     f"{three(r, 'table_loss', '{:.3f}')} | "
                     f"{r['metric_name']} {three(r, 'before', '{:.4f}')} | "
                     f"{three(r, 'after', '{:.4f}')} | {best('before')} / {best('after')} |")
    lines.append("(each cell: latency-aware / flops / uniform; one seed)")
    return "\n".join(lines)


def last_lines(row: dict[str, Any]) -> str:
    """The two machine-read lines for ``row``."""
    get = lambda m, key: row.get("methods", {}).get(m, {}).get(key, math.nan)
    return (f"target={row['target']} achieved={row.get('achieved', math.nan):.3f} "
            f"aware_metric={get('latency-aware', 'before'):.4f} "
            f"flops_metric={get('flops', 'before'):.4f} "
            f"uniform_metric={get('uniform', 'before'):.4f}\n"
            f"aware_retrained={get('latency-aware', 'after'):.4f} "
            f"flops_retrained={get('flops', 'after'):.4f} "
            f"uniform_retrained={get('uniform', 'after'):.4f}")


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", default=",".join(MODELS), help="comma list of " + ", ".join(MODELS))
    p.add_argument("--targets",
                   help="comma list of latency reductions to aim at (default: the model's, "
                        "0.3,0.5; mobilenetv3_large_100 0.15,0.25)")
    p.add_argument("--quick", action="store_true",
                   help=f"mobilenetv3_large_100 only, 64 px, target {QUICK_TARGET} (minutes)")
    p.add_argument("--tiny", action="store_true", help="seconds-long settings (the tests)")
    p.add_argument("--tolerance", type=float, default=0.03,
                   help="how close ratios_by_latency must land to the target")
    p.add_argument("--epochs", type=int, help="base training epochs (overrides the model's)")
    p.add_argument("--retrain-epochs", type=int,
                   help="epochs of the same retraining given to each pruned model (0: none)")
    p.add_argument("--train-images", type=int)
    p.add_argument("--retrain-images", type=int,
                   help="classification: the training images of the retraining (default: the "
                        "model's setting; at most --train-images)")
    p.add_argument("--val-images", type=int)
    p.add_argument("--table-images", type=int,
                   help="evaluation images each sensitivity point is measured on")
    p.add_argument("--size", type=int, help="input pixels (overrides the model's)")
    p.add_argument("--ratios", help="ratios of the sensitivity table, e.g. 0.2,0.4,0.6,0.8")
    p.add_argument("--bisect-steps", type=int,
                   help="timed steps bringing the flops and uniform allocations to the latency "
                        "the latency-aware one reached (default 8)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads while timing")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work-dir", help="keep base models and sensitivity files here (a rerun "
                   "reuses them) instead of a temporary folder")
    args = p.parse_args(argv)
    names = ["mobilenetv3_large_100"] if args.quick else args.models.split(",")
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        p.error(f"unknown model(s) {unknown}: pick from {', '.join(MODELS)}")
    torch.set_num_threads(args.threads)
    rows = []
    with tempfile.TemporaryDirectory(prefix="autoprune-lataware-") as tmp:
        work = Path(args.work_dir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        for name in names:
            s = settings(name, args)
            adapter, model, record, folder, (t_train, t_table) = base_and_table(name, s, work,
                                                                                args)
            base = adapter.evaluate(model)[adapter.metric]
            points = sum(len(v) for v in record.sensitivities.values())
            print(f"\n## {name} ({s['task']}) at {s['size']} px: base {adapter.metric} "
                  f"{base:.4f}, {record.extra['latency']['baseline_ms']:.2f} ms (CPU, "
                  f"{args.threads} thread, batch 1); base training {t_train:.0f} s, table "
                  f"{t_table:.0f} s ({points} timed points, {len(record.sensitivities)} groups)",
                  flush=True)
            for target in (float(t) for t in str(args.targets or s["targets"]).split(",")):
                rows.append(compare(name, target, s, adapter, model, record, folder, args))
    print("\n## Summary\n\n" + summary(rows), flush=True)
    print(last_lines(rows[0]), flush=True)
    return rows


if __name__ == "__main__":
    main()

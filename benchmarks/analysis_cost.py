"""Analysis cost (issue 41): the full sensitivity analysis against the adaptive one.

For each model: a base model is trained briefly, then its sensitivities are measured on its
validation data by the full analysis (every group x ratio x image) and by the adaptive analysis
for each target (``eval_metric_loss=0.05``, ``pruned_flops=0.5``, ``pruned_latency=0.4``). Printed
per model and target: images evaluated (machine-independent), wall time, the ETA said before the
points, and the allocation each table gives (per-group ratios, their largest difference in ratio
steps, predicted loss; the adaptive allocation's loss also read on the full table, which
measured every point on every image). For ``--retrain`` models, both loss-target and
FLOPs-target allocations are pruned and retrained (same seed and epochs) and their metric
compared; with ``--retrain-seeds 2`` or more both are also retrained with seeds 1, 2 ...: each
allocation's mean and spread over the seeds (the spread is what one seed's retrained metric is
worth, the noise a difference between the two allocations' must be read against). Then
PaddleSlim's algorithm (copy, real prune, a DataLoader re-reading the image files per point)
against autoprune's full and adaptive analyses on the same groups, ratios and images
(``--paddleslim``), and the cost-growth table: full-analysis time against groups, ratios, images
and input size, measured and fitted (power law per factor).

    python benchmarks/analysis_cost.py                 # the issue's settings (hours on a CPU)
    taskset -c 0 python benchmarks/analysis_cost.py --size 32 --val-images 1000 ...  # scaled
    python benchmarks/analysis_cost.py --quick         # tiny settings, a smoke run

The issue's run: resnet18 and resnet50 at 224 px (Fashion-MNIST upscaled, 2,000 val images),
mobilenetv3_large_100, YOLOv8s at 320 px, Unet-resnet18. The last line printed is
``min_saving=<x> max_step_diff=<k> eta_error=<e>``. Results also go to ``<out>/results.json``.
"""
from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import torch  # noqa: E402

import autoprune  # noqa: E402
from autoprune.engine.allocate import summed_loss  # noqa: E402
from autoprune.engine.files import write_text_atomic  # noqa: E402
from autoprune.engine.timing import Timing  # noqa: E402
from autoprune.flow.checkpoints import checkpoint_meta, load_model  # noqa: E402
from autoprune.flow.registry import get_task  # noqa: E402
from autoprune.flow.sensitivities import TaskEval  # noqa: E402

CLASSIFIERS = ("resnet18", "resnet50", "mobilenetv3_large_100")
TASK_OF = {**{m: "classification" for m in CLASSIFIERS}, "yolov8s": "detection",
           "yolov8n": "detection", "unet": "segmentation"}
TARGETS = {"loss": 0.05, "flops": 0.5, "latency": 0.4}  # --flops changes the FLOPs target
RATIOS = tuple(round(0.1 * k, 1) for k in range(1, 10))
STEP = 0.1
DEVICE = "cpu"  # where the classifiers' base models train and their points are evaluated


# --- base models and their adapters ---------------------------------------------------------
def base_model(name: str, a: argparse.Namespace, out: Path) -> tuple[Path, Any]:
    """A briefly trained base model of ``name`` (its checkpoint) and the data it was made on."""
    task = TASK_OF[name]
    save = out / f"base_{name}"
    if task == "classification":
        data = "fashion-mnist"
        if not (save / "baseline" / "best.pt").is_file():
            autoprune.classification.train(
                name, data, epochs=a.base_epochs, train_limit=a.train_images,
                eval_limit=a.val_images, input_size=a.size, batch_size=64, save_dir=save,
                warmup_epochs=0, device=DEVICE, progress=False)
        return save / "baseline" / "best.pt", data
    if task == "segmentation":
        data = "fashion-scenes"
        if not (save / "baseline" / "best.pt").is_file():
            autoprune.segmentation.train(
                "unet", "resnet18", train_data=data, epochs=a.base_epochs,
                train_limit=a.seg_train, eval_limit=a.seg_val, input_size=a.seg_size,
                batch_size=8, save_dir=save, device="cpu", progress=False)
        return save / "baseline" / "best.pt", data
    from autoprune.datasets.scenes import write_yolo_dataset

    data = out / "scenes" / "data.yaml"
    if not data.is_file():
        write_yolo_dataset(data.parent, train=a.det_train, val=a.det_val, size=a.det_size,
                           seed=0, task="detect")
    if not (save / "baseline" / "best.pt").is_file():
        autoprune.detection.train(f"{name}.yaml", data, epochs=a.det_epochs, save_dir=save,
                                  input_size=a.det_size, batch_size=16, device="cpu",
                                  progress=False,
                                  train_args={"optimizer": "AdamW", "lr0": 0.003,
                                              "warmup_epochs": 0, "nbs": 16})
    return save / "baseline" / "best.pt", data


def adapter_for(name: str, checkpoint: Path, data: Any, a: argparse.Namespace) -> tuple:
    """``(adapter, model)`` as ``<task>.analyze_sensitivity`` builds them for ``checkpoint``."""
    task = get_task(TASK_OF[name])
    limit = {"classification": a.val_images, "segmentation": a.seg_val,
             "detection": a.det_val}[TASK_OF[name]]
    inputs = {"train_data": data, "eval_data": data,
              "train_limit": a.seg_train if TASK_OF[name] == "segmentation" else a.train_images} \
        if TASK_OF[name] != "detection" else {"data": data}
    device = DEVICE if TASK_OF[name] == "classification" else "cpu"
    adapter = task.adapter_class().for_checkpoint(checkpoint_meta(checkpoint), eval_limit=limit,
                                                  device=device, progress=False, **inputs)
    model = adapter.analysis_model(load_model(checkpoint, adapter)).eval()
    return adapter, model


def groups_of(model: torch.nn.Module, adapter: Any, count: int) -> list[str]:
    names = [g.name for g in autoprune.prunable_groups(model, adapter.example_inputs(model),
                                                        adapter.ignored_layers(model))]
    return names[:count] if count else names


REUSE = False  # --reuse: an analysis whose file a previous run finished is read, not redone


def analyze(adapter: Any, model: torch.nn.Module, groups: list[str], path: Path,
            ratios=RATIOS, eval_fn: Any = None, **options: Any) -> dict[str, Any]:
    """One analysis into ``path``: its table, record, wall time and the ETA said before it
    (``eval_fn``: the adapter's metric, :class:`TaskEval`, unless given)."""
    if REUSE and path.is_file():
        record = autoprune.read_record(path)
        ev = record.extra.get("evaluation", {})
        same = (record.extra.get("adaptive") or {}).get("target") == options.get("target") and \
            record.extra.get("eval_images") == len(adapter.eval_set) and \
            all(set(ratios) <= set(record.sensitivities.get(g, {})) | (
                set(ratios) if options.get("adaptive") else set()) for g in groups)
        if ev.get("seconds") is not None and set(groups) <= set(record.sensitivities) and same:
            table = {g: {r: v for r, v in record.sensitivities[g].items() if r in ratios}
                     for g in groups}
            return {"table": table, "record": record, "wall": ev["seconds"],
                    "images": ev["images_evaluated"], "eta": ev.get("eta_s"),
                    "points_wall": ev["seconds"], "points": sum(map(len, table.values())),
                    "decided_early": _as_intervals(record, groups, ratios)}
    path.unlink(missing_ok=True)
    start = time.perf_counter()
    table = autoprune.sensitivity(model, adapter.example_inputs(model),
                                  eval_fn or TaskEval(adapter),
                                  groups=groups, ratios=ratios, sensitivities_file=path,
                                  ignored_layers=adapter.ignored_layers(model),
                                  higher_is_better=adapter.higher_is_better,
                                  metric_name=adapter.metric,
                                  extra={"eval_images": len(adapter.eval_set)},
                                  options=options, progress=True)
    wall = time.perf_counter() - start
    record = autoprune.read_record(path)
    ev = record.extra["evaluation"]
    return {"table": table, "record": record, "wall": wall, "images": ev["images_evaluated"],
            "eta": ev.get("eta_s"), "points_wall": ev.get("seconds"),
            "points": sum(map(len, table.values())),
            "decided_early": _as_intervals(record, groups, ratios)}


def _as_intervals(record: Any, groups: list[str], ratios: Any) -> int:
    """The points of ``groups`` x ``ratios`` that ``record`` holds as intervals (decided early)."""
    return sum(record.is_interval(g, r) for g in groups for r in ratios)


# --- allocations ------------------------------------------------------------------------------
def allocation(kind: str, adapter: Any, model: torch.nn.Module, result: dict[str, Any],
               path: Path) -> dict[str, Any]:
    """The ratios ``result``'s table gives for target ``kind`` and their predicted loss."""
    table = result["table"]
    example = adapter.example_inputs(model)
    if kind == "loss":
        ratios = autoprune.ratios_by_loss(table, TARGETS["loss"])
        return {"ratios": ratios, "loss": summed_loss(table, ratios)}
    if kind == "flops":
        ratios = autoprune.ratios_by_flops(model, example, table, TARGETS["flops"],
                                           ignored_layers=adapter.ignored_layers(model))
        return {"ratios": dict(ratios), "loss": summed_loss(table, ratios),
                "achieved": ratios.achieved}
    deployed = adapter.deploy_module(model)
    timing = Timing(threads=1)
    timed = autoprune.measure_latencies(deployed, adapter.example_inputs(deployed), table,
                                        path=path.with_suffix(".latency.json"), timing=timing,
                                        ignored_layers=adapter.ignored_layers(deployed),
                                        progress=False)
    ratios = autoprune.ratios_by_latency(deployed, adapter.example_inputs(deployed), timed,
                                         TARGETS["latency"], timing=timing,
                                         ignored_layers=adapter.ignored_layers(deployed),
                                         search={"tolerance": 0.05})
    return {"ratios": dict(ratios), "loss": ratios.loss, "achieved": ratios.achieved}


def steps_apart(a: dict[str, float], b: dict[str, float]) -> float:
    """The largest per-group ratio difference, in ratio steps."""
    return max((abs(a.get(g, 0.0) - b.get(g, 0.0)) / STEP for g in set(a) | set(b)),
               default=0.0)


def retrain(adapter: Any, model: torch.nn.Module, ratios: dict[str, float], epochs: int,
            out: Path, seed: int = 0) -> float:
    """``model`` pruned to ``ratios``, retrained ``epochs`` with ``seed`` (the adapter's training
    seed): its metric (kept in ``out/metric.json``, which ``--reuse`` reads back when it was
    trained from the same ratios, epochs and seed)."""
    done = out / "metric.json"
    if REUSE and done.is_file():
        kept = json.loads(done.read_text())
        if kept.get("ratios") == ratios and kept.get("epochs", epochs) == epochs and \
                kept.get("seed", 0) == seed:
            return kept["metric"]
    torch.manual_seed(seed)
    if hasattr(adapter, "seed"):
        adapter.seed = seed
    pruned = copy.deepcopy(model)
    autoprune.prune(pruned, adapter.example_inputs(pruned), ratios,
                    ignored_layers=adapter.ignored_layers(pruned))
    trained = adapter.fit(pruned, epochs, out)
    metric = adapter.evaluate(trained)[adapter.metric]
    write_text_atomic(done, json.dumps({"metric": metric, "ratios": ratios, "epochs": epochs,
                                        "seed": seed}))
    return metric


def retrained_pair(name: str, kind: str, got: dict[str, Any], make_adapter: Callable[[], Any],
                   model: torch.nn.Module, a: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Both allocations of ``got`` retrained with seed 0 (``full``, ``adaptive``), and with
    seeds 1 ... ``a.retrain_seeds - 1`` too where that is more than one (``seeds``: each
    allocation's metric per seed, seed 0 first)."""
    seeds = {which: [retrain(make_adapter(), model, got[which]["ratios"], a.retrain_epochs,
                             out / (f"retrain_{name}_{kind}_{which}"
                                    + (f"_seed{seed}" if seed else "")), seed)
                     for seed in range(max(1, a.retrain_seeds))]
             for which in ("full", "adaptive")}
    runs: dict[str, Any] = {which: metrics[0] for which, metrics in seeds.items()}
    if a.retrain_seeds > 1:
        runs["seeds"] = seeds
    return runs


def retrained_text(retrained: dict[str, Any]) -> str:
    """``full / adaptive`` retrained metrics (seed 0), and over several seeds each allocation's
    mean and spread (largest difference between its seeds)."""
    text = f"{retrained['full']:.4f} / {retrained['adaptive']:.4f}"
    if "seeds" in retrained:
        full, mine = retrained["seeds"]["full"], retrained["seeds"]["adaptive"]
        text += (f"; {len(full)} seeds: mean {sum(full) / len(full):.4f} / "
                 f"{sum(mine) / len(mine):.4f}, spread {max(full) - min(full):.4f} / "
                 f"{max(mine) - min(mine):.4f}")
    return text


# --- PaddleSlim side by side ------------------------------------------------------------------
def _speed_module():
    path = Path(__file__).with_name("sensitivity_speed.py")
    spec = importlib.util.spec_from_file_location("bench_sensitivity_speed", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def paddleslim_side_by_side(name: str, a: argparse.Namespace, out: Path) -> dict[str, Any]:
    """PaddleSlim's algorithm, autoprune's full and adaptive analyses on the same groups,
    ratios and images (one thread): wall times."""
    speed = _speed_module()
    checkpoint, _ = base_model(name, argparse.Namespace(**{
        **vars(a), "train_images": a.ps_train_images, "base_epochs": a.ps_base_epochs}), out)
    val_dir = speed.write_image_folder(out / f"val_png_{a.ps_images}", a.ps_images)
    cls = autoprune.classification
    adapter = cls.ClassificationAdapter(None, val_dir, num_classes=10, input_size=a.size,
                                        batch_size=128, progress=False, device="cpu")
    model = cls.load_model(checkpoint).eval()
    groups = groups_of(model, adapter, a.ps_groups)
    loader = torch.utils.data.DataLoader(adapter.eval_set, batch_size=128, shuffle=False)
    start = time.perf_counter()
    reference = speed.paddleslim_style(model, adapter.example_inputs(model), loader, groups,
                                       RATIOS)
    paddleslim = time.perf_counter() - start
    full = analyze(adapter, model, groups, out / f"ps_full_{name}.json")
    fresh = cls.ClassificationAdapter(None, val_dir, num_classes=10, input_size=a.size,
                                      batch_size=128, progress=False, device="cpu")
    adaptive = analyze(fresh, model, groups, out / f"ps_adaptive_{name}.json", adaptive=True,
                       target={"loss": TARGETS["loss"]})
    diff = max(abs(reference[g][r] - full["table"][g][r]) for g in groups for r in RATIOS)
    return {"model": name, "groups": len(groups), "images": a.ps_images,
            "paddleslim_s": paddleslim, "full_s": full["wall"], "adaptive_s": adaptive["wall"],
            "max_abs_diff": diff,
            "same_allocation": steps_apart(autoprune.ratios_by_loss(reference, 0.05),
                                           autoprune.ratios_by_loss(adaptive["table"], 0.05))}


# --- cost growth ------------------------------------------------------------------------------
def cost_growth(a: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    """Full-analysis time of resnet18 against each factor (the others at the base setting)."""
    base = {"groups": 4, "ratios": 3, "images": a.growth_images, "size": a.growth_size}
    factors = {"groups": [2, 4, 8], "ratios": [2, 3, 6],
               "images": [a.growth_images // 2, a.growth_images, a.growth_images * 2],
               "size": [a.growth_size, a.growth_size * 3 // 2, a.growth_size * 2]}
    rows = []
    checkpoint, data = base_model("resnet18", a, out)
    for factor, values in factors.items():
        measured = []
        for v in values:
            s = {**base, factor: v}
            adapter = autoprune.classification.ClassificationAdapter(
                None, data, num_classes=10, input_size=s["size"], eval_limit=s["images"],
                progress=False, device="cpu")
            model = autoprune.classification.load_model(checkpoint).eval()
            ratios = tuple(round(0.9 * (k + 1) / s["ratios"], 2) for k in range(s["ratios"]))
            run = analyze(adapter, model, groups_of(model, adapter, s["groups"]),
                          out / f"growth_{factor}_{v}.json", ratios=ratios)
            measured.append((v, run["points_wall"], run["eta"]))
        x = [math.log(v) for v, _, _ in measured]
        y = [math.log(t) for _, t, _ in measured]
        slope = (y[-1] - y[0]) / (x[-1] - x[0])
        for v, t, eta in measured:
            fit = math.exp(y[0] + slope * (math.log(v) - x[0]))
            rows.append({"factor": factor, "value": v, "measured_s": t, "fit_s": fit,
                         "exponent": slope, "eta_s": eta})
    return rows


# --- the run ----------------------------------------------------------------------------------
def measure_model(name: str, a: argparse.Namespace, out: Path) -> dict[str, Any]:
    checkpoint, data = base_model(name, a, out)
    adapter, model = adapter_for(name, checkpoint, data, a)
    groups = groups_of(model, adapter, a.groups)
    full = analyze(adapter, model, groups, out / f"{name}_full.json")
    row = {"model": name, "groups": len(groups), "images_per_point": len(adapter.eval_set),
           "baseline": full["record"].metric["baseline"], "full": _brief(full), "targets": {}}
    for kind in a.model_targets.get(name, a.targets):
        fresh, _ = adapter_for(name, checkpoint, data, a)  # no batches decoded yet
        path = out / f"{name}_{kind}_{TARGETS[kind]}.json"
        run = analyze(fresh, model, groups, path, adaptive=True,
                      target={kind: TARGETS[kind]}, bound=a.bound)
        got = {"run": _brief(run), "saving": full["images"] / run["images"]}
        try:
            mine = allocation(kind, adapter, model, run, path)
            ref = allocation(kind, adapter, model, full, out / f"{name}_full.json")
            got.update(adaptive=mine, full=ref, steps=steps_apart(ref["ratios"], mine["ratios"]),
                       on_full=summed_loss(full["table"], mine["ratios"]))
        except autoprune.AutopruneError as e:  # e.g. a target the table cannot reach
            got["error"] = str(e)
        if name in a.retrain and kind in ("loss", "flops") and "full" in got:
            got["retrained"] = retrained_pair(
                name, kind, got, lambda: adapter_for(name, checkpoint, data, a)[0], model, a,
                out)
        row["targets"][kind] = got
        _print_target(name, kind, got)
    return row


def _brief(run: dict[str, Any]) -> dict[str, Any]:
    return {k: run[k] for k in ("images", "wall", "eta", "points_wall", "points",
                                "decided_early")}


def _print_target(name: str, kind: str, got: dict[str, Any]) -> None:
    run = got["run"]
    line = (f"{name} {kind}: {run['images']:,} images ({got['saving']:.1f}x fewer), "
            f"{run['wall']:.0f} s, {run['points']} points ({run['decided_early']} decided early)")
    if "steps" in got:
        line += (f"; allocation within {got['steps']:.2f} steps, predicted loss "
                 f"{got['full']['loss']:.3f} full / {got['adaptive']['loss']:.3f} adaptive "
                 f"({got['on_full']:.3f} on the full table)")
    if "error" in got:
        line += f"; no allocation: {got['error']}"
    if "retrained" in got:
        line += f"; retrained {retrained_text(got['retrained'])}"
    print(line, flush=True)


def print_tables(rows: list[dict[str, Any]], side: dict[str, Any] | None,
                 growth: list[dict[str, Any]]) -> dict[str, float]:
    print("\n| model | target | images full | images adaptive | fewer | wall full (s) | "
          "wall adaptive (s) | ETA adaptive (s) | steps apart | loss full / adaptive / "
          "adaptive on the full table | "
          "retrained full / adaptive |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
    savings, steps, eta_errors = [], [], []
    for row in rows:
        full = row["full"]
        if full["eta"]:
            eta_errors.append(full["eta"] / full["points_wall"] - 1)
        for kind, got in row["targets"].items():
            run = got["run"]
            savings.append(got["saving"])
            if run["eta"] and run["points_wall"]:
                eta_errors.append(run["eta"] / run["points_wall"] - 1)
            if "steps" in got:
                steps.append(got["steps"])
            loss = (f"{got['full']['loss']:.3f} / {got['adaptive']['loss']:.3f} / "
                    f"{got['on_full']:.3f}" if "steps" in got else
                    "no allocation (its line above says why)" if "error" in got else "")
            retrained = retrained_text(got["retrained"]) if "retrained" in got else ""
            print(f"| {row['model']} ({row['groups']} groups, {row['images_per_point']} img) | "
                  f"{kind} | {full['images']:,} | {run['images']:,} | {got['saving']:.1f}x | "
                  f"{full['wall']:.0f} | {run['wall']:.0f} | {run['eta'] or 0:.0f} | "
                  f"{got.get('steps', float('nan')):.2f} | {loss} | {retrained} |")
    print("\nETA said before the points against their wall time:")
    for row in rows:
        print(f"  {row['model']} full: ETA {row['full']['eta'] or 0:.0f} s, took "
              f"{row['full']['points_wall']:.0f} s")
        for kind, got in row["targets"].items():
            print(f"  {row['model']} {kind}: ETA {got['run']['eta'] or 0:.0f} s, took "
                  f"{got['run']['points_wall']:.0f} s")
    if side:
        print(f"\nPaddleSlim's algorithm vs autoprune, {side['model']}, {side['groups']} groups "
              f"x {len(RATIOS)} ratios x {side['images']} images, one thread: PaddleSlim "
              f"{side['paddleslim_s']:.0f} s, full {side['full_s']:.0f} s "
              f"({side['paddleslim_s'] / side['full_s']:.2f}x), "
              f"adaptive {side['adaptive_s']:.0f} s "
              f"({side['paddleslim_s'] / side['adaptive_s']:.2f}x); max |diff| full vs "
              f"PaddleSlim {side['max_abs_diff']:.1e}; loss allocation within "
              f"{side['same_allocation']:.2f} steps")
    if growth:
        print("\n| factor | value | measured (s) | fit (s) | exponent | ETA (s) |")
        print("|---|---:|---:|---:|---:|---:|")
        for g in growth:
            print(f"| {g['factor']} | {g['value']} | {g['measured_s']:.1f} | {g['fit_s']:.1f} | "
                  f"{g['exponent']:.2f} | {g['eta_s'] or 0:.1f} |")
    return {"min_saving": min(savings, default=float("nan")),
            "max_step_diff": max(steps, default=float("nan")),
            "eta_error": max((abs(e) for e in eta_errors), default=float("nan"))}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", default="resnet18,resnet50,mobilenetv3_large_100,yolov8s,unet")
    p.add_argument("--targets", default="loss,flops,latency")
    p.add_argument("--flops", type=float, default=0.5, help="the FLOPs target (0.5; a subset "
                   "of --groups may not reach it)")
    p.add_argument("--model-targets", default="", help="per model, e.g. unet=loss+flops "
                   "(comma-separated; the others get --targets)")
    p.add_argument("--reuse", action="store_true", help="read the analyses and retrained "
                   "metrics a previous run left in --out instead of redoing them")
    p.add_argument("--bound", default="confidence", choices=("confidence", "exact"))
    p.add_argument("--size", type=int, default=224, help="classification input size")
    p.add_argument("--val-images", type=int, default=2000, help="classification val images")
    p.add_argument("--train-images", type=int, default=4000)
    p.add_argument("--base-epochs", type=int, default=2)
    p.add_argument("--groups", type=int, default=0, help="first N groups of each model (0: all)")
    p.add_argument("--det-size", type=int, default=320)
    p.add_argument("--det-train", type=int, default=256)
    p.add_argument("--det-val", type=int, default=128)
    p.add_argument("--det-epochs", type=int, default=30)
    p.add_argument("--seg-size", type=int, default=128)
    p.add_argument("--seg-train", type=int, default=1000)
    p.add_argument("--seg-val", type=int, default=256)
    p.add_argument("--retrain", default="resnet18,mobilenetv3_large_100")
    p.add_argument("--retrain-epochs", type=int, default=2)
    p.add_argument("--retrain-seeds", type=int, default=1, help="both allocations retrained "
                   "with this many seeds (means and spreads: what one seed's metric is worth)")
    p.add_argument("--paddleslim", default="resnet50", help="model timed against PaddleSlim's "
                   "algorithm ('none': skip)")
    p.add_argument("--ps-groups", type=int, default=0)
    p.add_argument("--ps-images", type=int, default=2000)
    p.add_argument("--ps-train-images", type=int, default=4000)
    p.add_argument("--ps-base-epochs", type=int, default=1,
                   help="epochs of the side by side's base model (at 224 px one epoch on 1,000 "
                        "images left resnet50 at top-1 0.14: too weak for the analysis to mean "
                        "much; a base model already in --out is reused)")
    p.add_argument("--growth", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--growth-images", type=int, default=256)
    p.add_argument("--growth-size", type=int, default=32)
    p.add_argument("--out", help="folder for models, tables and results.json (default: temp)")
    p.add_argument("--quick", action="store_true", help="tiny settings, a smoke run")
    a = p.parse_args(argv)
    if a.quick:
        a.models, a.targets, a.size, a.val_images, a.train_images = "resnet18", "loss,flops", \
            32, 192, 320
        a.groups, a.retrain, a.retrain_epochs, a.paddleslim, a.ps_groups, a.ps_images = \
            3, "resnet18", 1, "resnet18", 2, 64
        a.growth, a.base_epochs, a.ps_train_images = False, 1, 320
    a.models = [m for m in a.models.split(",") if m]
    a.targets = [t for t in a.targets.split(",") if t]
    TARGETS["flops"] = a.flops
    a.model_targets = {m: t.split("+") for m, _, t in
                       (item.partition("=") for item in a.model_targets.split(",") if item)}
    global REUSE
    REUSE = a.reuse
    a.retrain = [m for m in a.retrain.split(",") if m]
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(a.out or tmp)
        out.mkdir(parents=True, exist_ok=True)
        rows = [measure_model(name, a, out) for name in a.models]
        side = paddleslim_side_by_side(a.paddleslim, a, out) if a.paddleslim != "none" else None
        growth = cost_growth(a, out) if a.growth else []
        summary = print_tables(rows, side, growth)
        results = {"settings": {k: v for k, v in vars(a).items()}, "models": rows,
                   "paddleslim": side, "growth": growth, **summary}
        write_text_atomic(out / "results.json", json.dumps(results, indent=1, default=str))
    print(f"min_saving={summary['min_saving']:.2f} max_step_diff={summary['max_step_diff']:.2f} "
          f"eta_error={summary['eta_error']:.2f}")
    return results


if __name__ == "__main__":
    main()

"""Adaptive analysis replayed (issue 41): every point's per-image scores measured once, then the
adaptive analysis for any number of targets run against them in seconds.

The evaluated-image counts of an adaptive analysis do not depend on the machine: given each
point's score of every image (in the evaluation's seeded order), the analysis decides the same
points and stops at the same images whether the model is run or its recorded scores are read.
So this script measures a classification model's full table once (every group x ratio x image,
through the real task evaluation; the scores are kept in ``<out>/<model>/scores.pt``, a dict of
tensors read back with ``weights_only=True``), then runs the real adaptive analysis
(``autoprune.sensitivity(..., options={"adaptive": True, "target": ...})``: its planner, bounds
and rounds) for each target with an evaluation that serves the recorded scores of the pruned
model it is given (recognised by its layers' widths). Printed per target: images evaluated by
the full and the adaptive analysis, points, the allocation each table gives (largest difference
in ratio steps), how far apart the full analysis's own allocations lie when it is run on each
half of the images alone (the noise floor of comparing two allocations at all: a FLOPs target's
threshold can sit at a few images' loss, where the full table's choice on noise-level curves
rests on single images), and the summed loss of both allocations read on the full table. With
``--retrain N`` both allocations of each target are pruned from the base model and trained N
epochs (seed 0, the same data), and their metrics on the validation set compared (kept in
``<out>/<model>/retrain-<target>-<full|adaptive>/metric.json``, read back on a rerun). A latency
target is read as a FLOPs target of the same value, unless ``--latency``: then every grid point
is timed once on this machine (``<out>/<model>/latency.json``, one thread, batch 1) and both
tables are allocated by ``ratios_by_latency`` (pruned copies timed until the target is
measured), printed with the measured reductions and the FLOPs each removes, against the band of
FLOPs targets the analysis brackets (``target`` to ``target / 0.7``). Timed at 32 px, one
table's allocation lands anywhere within the tolerance and its summed loss moved by 20 % between
two runs; ``--latency-clock E`` reads every timing as ``1 - E x`` the FLOPs removed instead
(deterministic: both allocations land on the target, their losses compare exactly). The halves'
column reads a latency target as a FLOPs target either way.

    python benchmarks/adaptive_replay.py --models resnet18,mobilenetv3_large_100 \\
        --targets flops=0.3,flops=0.5,flops=0.7,loss=0.05 --out runs/replay
    python benchmarks/adaptive_replay.py --quick      # tiny, what the test runs

Base models as benchmarks/analysis_cost.py makes them (Fashion-MNIST at ``--size`` px,
``--train-images``, ``--base-epochs``). Wall times here mean nothing (the scores are replayed):
benchmarks/analysis_cost.py times the real thing.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import io
import re
import sys
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import autoprune  # noqa: E402
from autoprune.engine.adaptive import LATENCY_EFFICIENCY  # noqa: E402
from autoprune.engine.allocate import FlopsModel, ignored_names, summed_loss  # noqa: E402
from autoprune.engine.groups import PruningGraph  # noqa: E402
from autoprune.engine.incremental import Step  # noqa: E402
from autoprune.engine.timing import Timing  # noqa: E402
from autoprune.flow.sensitivities import TaskEval  # noqa: E402


def _cost_module() -> Any:
    """benchmarks/analysis_cost.py (its base models, adapters, groups and step distance)."""
    spec = importlib.util.spec_from_file_location(
        "analysis_cost", Path(__file__).resolve().parent / "analysis_cost.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cost = _cost_module()
RATIOS = cost.RATIOS
TIMING = Timing(threads=1)  # where --latency times: the CPU, one thread, batch 1, eager


class ReplayEval:
    """The task's incremental evaluation, each pruned model's per-image scores computed once (the
    whole set, in its order) and served from ``path`` afterwards."""

    def __init__(self, inner: TaskEval, path: Path):
        self.inner, self.path, self.images = inner, path, inner.images
        self.random_order, self.resumable = inner.random_order, inner.resumable
        self.scores = torch.load(path, weights_only=True) if path.is_file() else {}
        self.computed = self.saved = 0  # points computed here; how many of them are in the file

    @staticmethod
    def key(model: torch.nn.Module) -> str:
        """The model's layer widths: a pruned point's fingerprint."""
        return ",".join(str(p.shape[0]) for p in model.parameters())

    def _scores(self, model: torch.nn.Module) -> torch.Tensor:
        key = self.key(model)
        if key not in self.scores:
            parts = [s.scores.detach().double().cpu()
                     for s in self.inner.incremental(model, start=0)]
            self.scores[key] = torch.cat(parts)
            self.computed += 1
            if self.computed % 12 == 0:  # kept as they come: a run stopped early keeps most
                self.save()
        return self.scores[key]

    def save(self) -> None:
        """Write the scores atomically."""
        tmp = self.path.with_suffix(".tmp")
        torch.save(self.scores, tmp)
        tmp.replace(self.path)
        self.saved = self.computed

    def __call__(self, model: torch.nn.Module) -> float:
        return float(self._scores(model).mean())

    def incremental(self, model: torch.nn.Module, start: int = 0, batch: int = 64
                    ) -> Iterator[Step]:
        scores = self._scores(model)
        for i in range(start, len(scores), batch):
            part = scores[i:i + batch]
            last = i + batch >= len(scores)
            yield Step(len(part), scores=part, value=float(scores.mean()) if last else None)


class HalfEval(ReplayEval):
    """The kept scores of one half of the validation images (``half`` 0: the first, 1: the
    second, in the evaluation's order): the full analysis on half the set."""

    def __init__(self, inner: TaskEval, path: Path, half: int):
        super().__init__(inner, path)
        n = inner.images
        self.index = torch.arange(0, n // 2) if half == 0 else torch.arange(n // 2, n)
        self.images = len(self.index)

    def _scores(self, model: torch.nn.Module) -> torch.Tensor:
        return super()._scores(model)[self.index]


def analyze(adapter: Any, model: torch.nn.Module, evaluate: ReplayEval, groups: list[str],
            path: Path, **options: Any) -> tuple[dict, Any, int | None]:
    """One analysis (full, or adaptive with ``options``) of ``groups`` into ``path``: its table,
    record and the images its estimate said before the points (adaptive; None otherwise)."""
    path.unlink(missing_ok=True)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
        table = autoprune.sensitivity(
            model, adapter.example_inputs(model), evaluate, groups=groups, ratios=RATIOS,
            sensitivities_file=path, ignored_layers=adapter.ignored_layers(model),
            higher_is_better=True, metric_name=adapter.metric,
            extra={"eval_images": evaluate.images}, options=options,
            progress=bool(options.get("adaptive")))  # the estimate is said with progress on
    said = re.search(r"expected about \d+ points and ([\d,]+) images", printed.getvalue())
    return table, autoprune.read_record(path), \
        int(said.group(1).replace(",", "")) if said else None


@contextlib.contextmanager
def flops_clock(efficiency: float) -> Iterator[None]:
    """Every paired timing reads, instead of the clock, ``1 - efficiency x`` the share of the
    FLOPs the pruned copy removed (a fixed share of the latency that no pruning saves):
    deterministic, so two allocations of a latency target land exactly on it and their losses
    compare without timing noise (timed for real at 32 px, one table's allocation measured a
    summed loss 20 % apart from one run to the next)."""
    from autoprune.engine.measure import count_flops
    from autoprune.engine.timer import PairedTimer

    def compare(timer: PairedTimer, candidate: torch.nn.Module) -> float:
        timer.base_rounds.append(1.0)  # the timer's own bookkeeping of unpruned rounds
        if getattr(timer, "_base_flops", None) is None:
            timer._base_flops = count_flops(timer.base, timer.inputs)
        return 1.0 - efficiency * (1.0 - count_flops(candidate, timer.inputs) / timer._base_flops)

    real = PairedTimer.compare
    PairedTimer.compare = compare
    try:
        yield
    finally:
        PairedTimer.compare = real


class Deployed(NamedTuple):
    """A model as the task deploys it (what a latency timing times), made once per model: its
    example inputs, ignored layers and FLOPs model."""

    model: torch.nn.Module
    example: Any
    ignored: Any
    flops: FlopsModel

    @classmethod
    def of(cls, adapter: Any, model: torch.nn.Module) -> "Deployed":
        deployed = adapter.deploy_module(model)
        example, ignored = adapter.example_inputs(deployed), adapter.ignored_layers(deployed)
        graph = PruningGraph(deployed, example, ignored_names(deployed, ignored))
        return cls(deployed, example, ignored, FlopsModel(graph, example))


def timed_grid(deployed: Deployed, table: dict, path: Path) -> Any:
    """Every point of the full ``table`` timed once on this machine (kept in ``path``,
    resumable, read back afterwards): the latencies every table's latency allocation reads."""
    return autoprune.measure_latencies(deployed.model, deployed.example, table, path=path,
                                       timing=TIMING, ignored_layers=deployed.ignored,
                                       progress=False)


def latency_allocation(value: float, deployed: Deployed, table: dict, timed: Any,
                       tolerance: float = 0.05) -> dict[str, Any]:
    """The real latency allocation of ``table`` (``ratios_by_latency``: its points' latencies
    read from ``timed``, pruned copies timed until ``value`` is measured within ``tolerance``):
    its ratios, the measured reduction and the FLOPs it removes."""
    record = dataclasses.replace(
        timed, sensitivities={g: dict(p) for g, p in table.items()}, intervals={},
        latency={g: {r: timed.latency[g][r] for r in p} for g, p in table.items()})
    ratios = autoprune.ratios_by_latency(deployed.model, deployed.example, record, value,
                                         timing=TIMING, ignored_layers=deployed.ignored,
                                         search={"tolerance": tolerance})
    return {"ratios": dict(ratios), "achieved": ratios.achieved, "method": ratios.method,
            "flops_removed": 1.0 - deployed.flops.predict(ratios) / deployed.flops.total}


def allocation(kind: str, value: float, adapter: Any, model: torch.nn.Module,
               table: dict) -> dict[str, float]:
    """The ratios ``table`` gives for a loss or FLOPs target (a latency one read as FLOPs: the
    replay times nothing without ``--latency``)."""
    if kind == "loss":
        return dict(autoprune.ratios_by_loss(table, value))
    return dict(autoprune.ratios_by_flops(model, adapter.example_inputs(model), table, value,
                                          ignored_layers=adapter.ignored_layers(model)))


def base_model(name: str, a: argparse.Namespace, work: Path) -> tuple[Any, torch.nn.Module]:
    """The adapter and trained base model of ``name`` in ``work`` (trained there once, with
    ``a``'s size, images and epochs; read back afterwards, also by the scripts that read a
    replay folder)."""
    args = argparse.Namespace(size=a.size, val_images=a.val_images, train_images=a.train_images,
                              base_epochs=a.base_epochs, seg_train=0, seg_val=0, det_val=0)
    checkpoint, data = cost.base_model(name, args, work)
    return cost.adapter_for(name, checkpoint, data, args)


def replay(name: str, a: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    """The full table of ``name`` (measured once), then one adaptive analysis per target."""
    work = out / name
    work.mkdir(parents=True, exist_ok=True)
    adapter, model = base_model(name, a, work)
    groups = cost.groups_of(model, adapter, a.groups)
    evaluate = ReplayEval(TaskEval(adapter), work / "scores.pt")
    full, record, _ = analyze(adapter, model, evaluate, groups, work / "full.json")
    evaluate.save()
    if a.measure_only:  # the scores kept (e.g. measured on a GPU), replayed elsewhere
        return []
    full_images = record.extra["evaluation"]["images_evaluated"]
    halves = [analyze(adapter, model, HalfEval(TaskEval(adapter), work / "scores.pt", k), groups,
                      work / f"full-half{k}.json")[0] for k in (0, 1)]
    kept = "latency.json" if a.latency_clock is None else \
        f"latency-clock-{a.latency_clock:g}.json"
    deployed = Deployed.of(adapter, model) if a.latency else None
    timed = timed_grid(deployed, full, work / kept) if deployed is not None else None
    rows = []
    for target in a.targets.split(","):
        kind, value = target.split("=")
        table, rec, said = analyze(adapter, model, evaluate, groups,
                                   work / f"adaptive-{target}.json", adaptive=True,
                                   target=target, bound=a.bound,
                                   **({"confidence": a.confidence} if a.confidence else {}))
        measured = {}
        if kind == "latency" and timed is not None:
            measured = {which: latency_allocation(float(value), deployed, t, timed,
                                                  a.latency_tolerance)
                        for which, t in (("full", full), ("adaptive", table))}
            theirs, ours = measured["full"]["ratios"], measured["adaptive"]["ratios"]
        else:
            ours = allocation(kind, float(value), adapter, model, table)
            theirs = allocation(kind, float(value), adapter, model, full)
        ev = rec.extra["evaluation"]
        rows.append({"model": name, "groups": len(groups), "images": evaluate.images,
                     "target": target, "full_images": full_images,
                     "adaptive_images": ev["images_evaluated"], "said_images": said,
                     "fewer": full_images / max(1, ev["images_evaluated"]),
                     "points": sum(map(len, table.values())),
                     "of": len(groups) * len(RATIOS),
                     # points the table holds as intervals (the file's counter also counts
                     # a point decided early, then refined, each time)
                     "decided_early": sum(map(len, rec.intervals.values())),
                     "steps_apart": cost.steps_apart(theirs, ours),
                     "halves_apart": cost.steps_apart(*(allocation(kind, float(value), adapter,
                                                                   model, t) for t in halves)),
                     "loss_full": summed_loss(full, theirs),
                     "loss_adaptive": summed_loss(full, ours),
                     **({"latency": measured} if measured else {})})
        if a.retrain:
            rows[-1]["retrained"] = {
                which: cost.retrain(adapter, model, ratios, a.retrain,
                                    work / f"retrain-{target}-{which}")
                for which, ratios in (("full", theirs), ("adaptive", ours))}
    if evaluate.computed > evaluate.saved:  # points the full pass did not leave (none, normally)
        evaluate.save()
    return rows


def retrained_cell(row: dict[str, Any]) -> str:
    """`` full / adaptive (points) |`` of a row's retrained metrics, or nothing."""
    if "retrained" not in row:
        return ""
    full, ours = row["retrained"]["full"], row["retrained"]["adaptive"]
    return f" {full:.4f} / {ours:.4f} ({100 * (ours - full):+.2f}) |"


def base_model_arguments(p: argparse.ArgumentParser, quick_help: str) -> None:
    """The options that say which models and how their base models were made (``--quick``:
    :func:`quick_settings`), shared by this script and those that read its ``--out`` folder."""
    p.add_argument("--models", default="resnet18,mobilenetv3_large_100")
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--val-images", type=int, default=1000)
    p.add_argument("--train-images", type=int, default=4000)
    p.add_argument("--base-epochs", type=int, default=3)
    p.add_argument("--quick", action="store_true", help=quick_help)


def replay_arguments(p: argparse.ArgumentParser) -> None:
    """The options of a script that reads this script's ``--out`` folder (``bound_levers.py``,
    ``isotonic_curves.py``): where it is, which models, and the settings their base models were
    made with."""
    p.add_argument("--replay", default="runs/replay", help="adaptive_replay.py's --out")
    base_model_arguments(p, "adaptive_replay.py --quick's settings")


def quick_settings(a: argparse.Namespace) -> argparse.Namespace:
    """``a`` with this script's ``--quick`` base-model settings when ``a.quick`` is set."""
    if a.quick:
        a.models, a.size, a.val_images, a.train_images, a.base_epochs = "resnet18", 32, 128, \
            128, 1
    return a


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    base_model_arguments(p, "tiny settings (what the test runs)")
    p.add_argument("--targets", default=None,
                   help="loss=0.05,flops=0.3,flops=0.5,flops=0.7 (with --quick: the first two)")
    p.add_argument("--groups", type=int, default=0, help="first N groups (0: all)")
    p.add_argument("--bound", default="confidence", choices=("confidence", "exact"))
    p.add_argument("--confidence", type=float, default=0.0,
                   help="the confidence bound's level (0: the analysis's default)")
    p.add_argument("--out", default="runs/replay")
    p.add_argument("--retrain", type=int, default=0, metavar="EPOCHS",
                   help="prune both allocations of each target and train them EPOCHS (0: no)")
    p.add_argument("--device", default="cpu", help="where the base model trains and the full "
                   "table's scores are measured (cpu, cuda); the replays read them anywhere")
    p.add_argument("--latency", action="store_true",
                   help="time every grid point once (kept in latency.json) and allocate latency "
                        "targets by measurement (ratios_by_latency) on both tables, instead of "
                        "reading them as FLOPs targets")
    p.add_argument("--latency-clock", type=float, default=None, metavar="EFFICIENCY",
                   help="with --latency: read each timing as 1 - EFFICIENCY x the FLOPs removed "
                        "instead of the clock (deterministic; its grid kept in "
                        "latency-clock-EFFICIENCY.json)")
    p.add_argument("--latency-tolerance", type=float, default=0.05,
                   help="how close to a latency target each allocation must measure (its "
                        "summed loss depends on where it lands: with 0.05 two allocations of "
                        "one table landed up to 2.6 points apart)")
    p.add_argument("--measure-only", action="store_true",
                   help="stop once the full table's scores are kept (scores.pt)")
    a = quick_settings(p.parse_args(argv))
    cost.DEVICE = a.device
    cost.REUSE = True  # a retrained allocation's metric.json is read back, not trained again
    if a.quick:
        a.groups, a.targets = 2, a.targets or "loss=0.05,flops=0.3"
    a.targets = a.targets or "loss=0.05,flops=0.3,flops=0.5,flops=0.7"
    if a.device == "cpu":
        torch.set_num_threads(1)
    with flops_clock(a.latency_clock) if a.latency_clock is not None else \
            contextlib.nullcontext():
        rows = [row for name in a.models.split(",") for row in replay(name, a, Path(a.out))]
    if not rows:
        return rows
    print("| model (groups, val images) | target | images full | images adaptive | fewer | "
          "points | decided early | allocation: largest difference (ratio steps) | "
          "full analysis on each half of the images: its allocations apart (steps) | "
          "summed loss on the full table, full / adaptive allocation | images said before "
          "(error) |" + (" retrained full / adaptive (points) |" if a.retrain else ""))
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if a.retrain else ""))
    for r in rows:
        print(f"| {r['model']} ({r['groups']}, {r['images']:,}) | {r['target']} | "
              f"{r['full_images']:,} | {r['adaptive_images']:,} | {r['fewer']:.2f}x | "
              f"{r['points']} of {r['of']} | {r['decided_early']} | {r['steps_apart']:.2f} | "
              f"{r['halves_apart']:.2f} | "
              f"{r['loss_full']:.4f} / {r['loss_adaptive']:.4f} | {r['said_images']:,} "
              f"({r['said_images'] / r['adaptive_images'] - 1:+.0%}) |" + retrained_cell(r))
    for r in rows:
        if "latency" in r:
            full, ours = r["latency"]["full"], r["latency"]["adaptive"]
            goal = float(r["target"].split("=")[1])
            print(f"{r['model']} {r['target']}: measured {-full['achieved']:+.1%} / "
                  f"{-ours['achieved']:+.1%} ({full['method']} / {ours['method']}), FLOPs "
                  f"removed {full['flops_removed']:.1%} / {ours['flops_removed']:.1%}, the "
                  f"analysis's band of FLOPs goals {goal:.0%}-"
                  f"{min(0.95, goal / LATENCY_EFFICIENCY):.0%}")
    print(f"min_fewer={min(r['fewer'] for r in rows):.2f} "
          f"max_steps={max(r['steps_apart'] for r in rows):.2f} "
          f"max_halves_apart={max(r['halves_apart'] for r in rows):.2f} "
          f"max_said_error="
          f"{max(abs(r['said_images'] / r['adaptive_images'] - 1) for r in rows):.2f}")
    return rows


if __name__ == "__main__":
    main()

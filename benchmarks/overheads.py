"""The fixed costs around each measurement, old way against new way, side by side in one run:

* a model's deep copy (each YOLO evaluation fuses a copy; the timer copies each candidate):
  ``copy.deepcopy`` against :func:`autoprune.engine.fast_copy.fast_deepcopy`;
* the two copies in each Ultralytics checkpoint save (the EMA model, the optimizer's state);
* the probe of a new graph (one half-removal and forward pass per group): every forward from the
  input and every module synced after each removal, against forwards that start at the group's
  first layer and a sync of the modules that hold a channel attribute (the verdicts must agree);
* a candidate of a latency target, pruned to be timed (every group at 0.3): ``prune`` on a copy
  (FLOPs counted before and after, channels chosen on the copy) against ``remove_channels`` with
  the channels chosen once on the unpruned model (``ratios_by_latency``; the same tensors).

One thread; pin it to a core of its own (FIELD_NOTES: timing on a shared CPU):

    taskset -c 1 python benchmarks/overheads.py           # about 3 minutes
    taskset -c 1 python benchmarks/overheads.py --quick   # yolov8n only

Each figure is the median of alternating rounds (old, new, old, new...). Results go to
benchmarks/README.md, section "Fixed costs around a measurement".
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoprune.engine import groups as groups_module  # noqa: E402
from autoprune.engine import probe  # noqa: E402
from autoprune.engine.fast_copy import fast_deepcopy  # noqa: E402
from autoprune.engine.prune import prune, remove_channels  # noqa: E402


def paired(old: Callable[[], object], new: Callable[[], object], rounds: int
           ) -> tuple[float, float]:
    """Median seconds of ``old()`` and ``new()``, timed in alternating rounds."""
    a, b = [], []
    for _ in range(rounds):
        for fn, out in ((old, a), (new, b)):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
    return statistics.median(a), statistics.median(b)


def build(name: str) -> tuple[nn.Module, object, list]:
    """``name`` untrained, its example input at 64 px and its ignored layers."""
    if name.startswith("yolo"):
        from autoprune.tasks.detection import DetectionAdapter

        adapter = DetectionAdapter(nc=10, input_size=64)
    else:
        from autoprune.tasks.classification import ClassificationAdapter

        adapter = ClassificationAdapter(num_classes=10, input_size=64)
    torch.manual_seed(0)
    model = adapter.build(name)
    return model, adapter.example_inputs(model), adapter.ignored_layers(model)


class _NoReplay:
    """A prefix cache that replays nothing: every probe forward starts at the input."""

    def __init__(self, model: nn.Module):
        pass

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        yield

    def first_touched(self, modules: list) -> int:
        return 0

    @contextlib.contextmanager
    def skipping_before(self, first: int) -> Iterator[int]:
        yield 0


def probe_seconds(model: nn.Module, example, ignored, old: bool) -> tuple[float, list[str]]:
    """Seconds of one probe of a fresh graph of ``model`` and its verdict (unsafe group names);
    ``old``: forwards from the input and a sync of every module after each removal."""
    graph = groups_module.PruningGraph(model, example, ignored, probe=False)
    if old:
        graph._attribute_holders = None  # sync_attributes walks every module
    saved = probe.PrefixCache
    probe.PrefixCache = _NoReplay if old else saved
    try:
        t = time.perf_counter()
        unsafe = probe.unsafe_groups(graph, graph.groups)
        return time.perf_counter() - t, unsafe
    finally:
        probe.PrefixCache = saved


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="yolov8n only, fewer rounds")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    names = ["yolov8n"] if args.quick else ["yolov8n", "yolov9t", "resnet50",
                                            "mobilenetv3_large_100"]
    rounds = 5 if args.quick else 11
    rows = []
    print("| model | groups | deepcopy | fast_deepcopy | x | checkpoint copies (old / new) | x "
          "| probe (old / new) | x | latency candidate (old / new) | x |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in names:
        model, example, ignored = build(name)
        copy_old, copy_new = paired(lambda: copy.deepcopy(model), lambda: fast_deepcopy(model),
                                    rounds)
        ema = fast_deepcopy(model).half()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for param in model.parameters():
            param.grad = torch.zeros_like(param)
        opt.step()
        save_old, save_new = paired(
            lambda: (copy.deepcopy(ema), copy.deepcopy(opt.state_dict())),
            lambda: (fast_deepcopy(ema), fast_deepcopy(opt.state_dict())), rounds)
        probes = {True: [], False: []}
        verdicts = {}
        for _ in range(3 if not args.quick else 1):
            for old in (True, False):
                seconds, verdicts[old] = probe_seconds(model, example, ignored, old)
                probes[old].append(seconds)
        if verdicts[True] != verdicts[False]:
            raise AssertionError(f"{name}: the probes disagree: {verdicts}")
        graph = groups_module.PruningGraph(model, example, ignored)
        groups = len(graph.groups)
        ratios = {g.name: 0.3 for g in graph.groups}
        chosen = {n: graph.channels_to_remove(graph.group(n), r) for n, r in ratios.items()}
        old_copy, new_copy = fast_deepcopy(model), fast_deepcopy(model)
        prune(old_copy, example, ratios, ignored_layers=ignored)
        remove_channels(new_copy, example, ratios, ignored_layers=ignored,
                        chosen_by=lambda n, r: chosen[n])
        if {k: v.shape for k, v in old_copy.state_dict().items()} != \
                {k: v.shape for k, v in new_copy.state_dict().items()}:
            raise AssertionError(f"{name}: the two candidates differ")
        cand_old, cand_new = paired(
            lambda: prune(fast_deepcopy(model), example, ratios, ignored_layers=ignored),
            lambda: remove_channels(fast_deepcopy(model), example, ratios, ignored_layers=ignored,
                                    chosen_by=lambda n, r: chosen[n]), rounds)
        probe_old, probe_new = statistics.median(probes[True]), statistics.median(probes[False])
        row = {"model": name, "groups": groups, "copy_s": (copy_old, copy_new),
               "checkpoint_copies_s": (save_old, save_new), "probe_s": (probe_old, probe_new),
               "latency_candidate_s": (cand_old, cand_new), "unsafe": verdicts[False]}
        rows.append(row)
        print(f"| {name} | {groups} | {1e3 * copy_old:.1f} ms | {1e3 * copy_new:.1f} ms | "
              f"{copy_old / copy_new:.1f}x | {1e3 * save_old:.0f} / {1e3 * save_new:.0f} ms | "
              f"{save_old / save_new:.1f}x | {probe_old:.2f} / {probe_new:.2f} s | "
              f"{probe_old / probe_new:.2f}x | {1e3 * cand_old:.0f} / {1e3 * cand_new:.0f} ms | "
              f"{cand_old / cand_new:.1f}x |", flush=True)
    return rows


if __name__ == "__main__":
    main()

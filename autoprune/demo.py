"""The core demo: train a torchvision model on Fashion-MNIST, measure sensitivities, prune by a
tolerated loss, fine-tune, and print the before/after table (CPU friendly: 32 px, a subset)."""
from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import torch
import torchvision
from torch.utils.data import DataLoader

from .allocate import ratios_by_loss
from .checkpoint import save_pruned
from .datasets import FashionMNIST
from .measure import measure
from .prune import prune
from .report import to_console, write_reports
from .sensitivity import sensitivity
from .training import FitConfig, evaluate_topk, fit, pick_device


def run_demo(save_dir: str | Path = "runs/demo", *, arch: str = "resnet18", epochs: int = 3,
             finetune_epochs: int = 2, train_images: int = 12000, val_images: int = 1000,
             size: int = 32, eval_metric_loss: float = 0.05, seed: int = 0,
             device: str = "auto") -> dict:
    """Run the whole core flow and return the report dict (also written to ``save_dir``)."""
    torch.manual_seed(seed)
    save_dir = Path(save_dir)
    save_dir.mkdir(parents=True, exist_ok=True)
    dev = pick_device(device)
    train = FashionMNIST("train", size=size, channels=3, limit=train_images)
    val = FashionMNIST("test", size=size, channels=3, limit=val_images)
    loader = DataLoader(train, batch_size=128, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    val_batches = [(val.images[i:i + 250], val.targets[i:i + 250]) for i in range(0, len(val), 250)]
    example = val.images[:1]

    model = getattr(torchvision.models, arch)(num_classes=10)
    print(f"[1/4] training {arch} on {len(train)} Fashion-MNIST images at {size}px ({dev})")
    fit(model, loader, FitConfig(epochs=epochs, lr=0.05, warmup_epochs=0.3), device=dev,
        on_epoch_end=lambda e, loss: print(f"  epoch {e + 1}: loss {loss:.4f}"))
    model.cpu().eval()
    base_metrics = evaluate_topk(model, val_batches, device=torch.device("cpu"))
    print(f"  baseline top1 {base_metrics['top1']:.4f}")

    print(f"[2/4] sensitivity analysis on {len(val)} validation images")
    sens_file = save_dir / "sensitivities.json"
    top1 = lambda m: evaluate_topk(m, val_batches, device=torch.device("cpu"))["top1"]
    sens = sensitivity(model, example, top1, sensitivities_file=sens_file, metric_name="top1",
                       arch=arch)

    print(f"[3/4] pruning with eval_metric_loss={eval_metric_loss}")
    baseline_model = copy.deepcopy(model)
    ratios = ratios_by_loss(sens, eval_metric_loss)
    result = prune(model, example, ratios)
    print(f"  FLOPs {result.flops_before / 1e6:.1f}M -> {result.flops_after / 1e6:.1f}M "
          f"(-{result.flops_reduction:.1%})")
    fit(model, loader, FitConfig(epochs=finetune_epochs, lr=0.01), device=dev)
    model.cpu().eval()
    pruned_metrics = evaluate_topk(model, val_batches, device=torch.device("cpu"))
    save_pruned(model, save_dir / "pruned.pt", arch=arch, num_classes=10, plan=result.plan)

    print("[4/4] measuring (latency of a batch of 16 images)")
    timing_batch = val.images[:16]
    report = {"task": "classification", "arch": arch, "eval_metric_loss": eval_metric_loss,
              "input_size": size, "latency_batch": len(timing_batch), "ratios": ratios,
              "flops_reduction": result.flops_reduction}
    for key, m, metrics in (("baseline", baseline_model, base_metrics),
                            ("pruned", model, pruned_metrics)):
        figures = measure(m, timing_batch, repeats=50)
        report[key] = {"params": figures["params"], "flops": figures["flops"],
                       "size_mb": figures["size_mb"], "metrics": metrics,
                       "latency_cpu_ms": figures["latency_ms"], "latency_gpu_ms": None}
        if torch.cuda.is_available():
            report[key]["latency_gpu_ms"] = measure(m, timing_batch, device="cuda")["latency_ms"]
    write_reports(report, save_dir)
    print()
    print(to_console(report))
    print(f"\nwritten: {save_dir}/report.json, report.md, report.csv, pruned.pt, sensitivities.json")
    return report

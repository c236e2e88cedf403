"""GPU paths, skipped without CUDA (CI has none; scripts/gpu/check.sh runs them on a lent GPU):
the masked, batched analysis on CUDA against real pruning and against the CPU, AMP training and
the report's GPU latency row, GPU latency timing, evaluation batches kept on the device. The rest of
the suite also runs on the GPU there: ``device="auto"`` picks CUDA."""
import json

import pytest
import torch

import autoprune
from autoprune import classification as cls
from autoprune.engine.latency import paired_reduction
from autoprune.engine.store import read_record
from autoprune.tasks import get_adapter

from conftest import needs_fmnist

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
RATIOS = (0.25, 0.5, 0.75)


@pytest.fixture
def exact_fp32(monkeypatch):
    """Plain FP32 convolutions and matrix products (no TF32), so CPU and GPU agree to 1e-4."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)


def _resnet(device: str):
    torch.manual_seed(0)
    adapter = get_adapter("classification", input_size=32, num_classes=10)
    model = adapter.build(adapter.arch_key("resnet18")).eval().to(device)
    return model, torch.randn(1, 3, 32, 32, device=device)


def _mean_top_probability(device: str):
    """A continuous metric (mean top probability on fixed images): any output change shows."""
    g = torch.Generator().manual_seed(1)
    batches = [torch.randn(16, 3, 32, 32, generator=g).to(device) for _ in range(2)]

    @torch.no_grad()
    def fn(model):
        return sum(model(x).softmax(1).max(1).values.mean().item() for x in batches) / len(batches)
    return fn


def _analysis(device: str, mode: str, path):
    model, example = _resnet(device)
    losses = autoprune.sensitivity(model, example, _mean_top_probability(device), ratios=RATIOS,
                                   sensitivities_file=path, progress=False,
                                   options={"evaluation": mode})
    return losses, read_record(path).extra["evaluation"]


def _max_diff(a, b):
    assert a.keys() == b.keys()
    return max(abs(a[n][r] - b[n][r]) for n in a for r in a[n])


def test_masked_analysis_on_cuda_equals_pruning_there_and_on_the_cpu(tmp_path, exact_fp32):
    """evaluation="masked" on the GPU (the batched variants "auto" picks there) gives the losses
    of real pruning on the GPU and of the CPU analysis, every point masked."""
    masked, counts = _analysis("cuda", "masked", tmp_path / "masked.json")
    pruned, _ = _analysis("cuda", "prune", tmp_path / "pruned.json")
    on_cpu, _ = _analysis("cpu", "prune", tmp_path / "cpu.json")
    assert counts["points"]["masked"] >= len(masked) * len(RATIOS) - len(masked)
    assert _max_diff(masked, pruned) <= 1e-4
    assert _max_diff(pruned, on_cpu) <= 1e-4
    assert max(v for pts in pruned.values() for v in pts.values()) > 0.01  # the metric moves


def test_auto_analysis_on_cuda_matches_pruning(tmp_path, exact_fp32):
    """evaluation="auto" on the GPU (what a user gets) records its choice and keeps the numbers."""
    auto, counts = _analysis("cuda", "auto", tmp_path / "auto.json")
    pruned, _ = _analysis("cuda", "prune", tmp_path / "pruned.json")
    assert sum(counts["points"].values()) >= len(auto) * len(RATIOS)
    assert _max_diff(auto, pruned) <= 1e-4


def test_gpu_latency_pairs_the_two_models():
    """Paired GPU timing: both times positive, a pruned half-width model not slower by much."""
    model, example = _resnet("cpu")
    out = paired_reduction(model, model, example, device="cuda", batch=8, rounds=5)
    assert out["baseline_ms"] > 0 and out["pruned_ms"] > 0
    assert abs(out["reduction"]) < 0.5  # the same model against itself


@needs_fmnist
def test_flow_on_cuda_trains_with_amp_and_reports_gpu_latency(tmp_path):
    """The one-call flow on device="cuda": AMP training, a smaller pruned model, both latency
    rows (CPU and GPU) in the report, and checkpoints that load on the CPU."""
    r = cls.train("resnet18", "fashion-mnist", save_dir=tmp_path / "run", device="cuda",
                  epochs=1, batch_size=32, input_size=32, train_limit=320, eval_limit=64,
                  ratios=(0.3, 0.6), sensitivities_file=tmp_path / "sens.json",
                  pruned_flops=0.3, progress=False)
    rep = json.loads((tmp_path / "run" / "report.json").read_text())
    for side in ("baseline", "pruned"):
        assert rep[side]["latency_gpu_ms"] > 0 and rep[side]["latency_cpu_ms"] > 0
    assert rep["pruned"]["flops"] < rep["baseline"]["flops"]
    assert "GPU latency" in (tmp_path / "run" / "report.md").read_text()
    model = cls.load_model(r.pruned_path)
    assert next(model.parameters()).device.type == "cpu"
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_cached_evaluation_batches_are_kept_on_the_device_or_pinned(monkeypatch):
    """The kept evaluation batches move to the GPU once (a masked analysis re-reads them for every
    variant: no host copies then), or are pinned when over the device budget; the metric is the
    one the loader's own batches give."""
    from torch.utils.data import DataLoader, TensorDataset

    from autoprune.engine import data
    from autoprune.flow.training.metrics import evaluate_topk

    g = torch.Generator().manual_seed(0)
    dataset = TensorDataset(torch.randn(64, 3, 32, 32, generator=g), torch.randint(0, 10, (64,)))
    model, _ = _resnet("cuda")
    plain = evaluate_topk(model, DataLoader(dataset, batch_size=16), device=torch.device("cuda"))
    kept = data.CachedBatches(DataLoader(dataset, batch_size=16), device="cuda")
    assert evaluate_topk(model, kept, device=torch.device("cuda")) == plain  # the first pass
    assert all(t.is_cuda for batch in kept._cache for t in batch)
    assert evaluate_topk(model, kept, device=torch.device("cuda")) == plain
    monkeypatch.setattr(data, "DEVICE_BUDGET", 0)
    pinned = data.CachedBatches(DataLoader(dataset, batch_size=16), device="cuda")
    list(pinned)
    assert all(t.is_pinned() and not t.is_cuda for batch in pinned._cache for t in batch)
    assert evaluate_topk(model, pinned, device=torch.device("cuda")) == plain

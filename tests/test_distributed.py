"""Sensitivity analysis sharded over 2 gloo processes equals the single-process result; rank 0
writes one file; a killed distributed run's shard files are absorbed by the next run."""

import re

import pytest
import torch
import torch.distributed as dist
import torchvision

import autoprune
from autoprune.engine.store import SensitivityRecord, shard_path, write_record

from conftest import needs_fmnist, spawn_ranks

GROUPS = ["conv1", "layer1.0.conv1", "layer2.0.conv2", "layer3.0.conv1", "layer4.1.conv1"]
RATIOS = (0.3, 0.6)


def _setup():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torchvision.models.resnet18(num_classes=10).eval()
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    ref = model(x).detach()

    def eval_fn(m):
        return float(torch.nn.functional.cosine_similarity(m(x).flatten(), ref.flatten(), dim=0))
    return model, x, eval_fn


def _worker(rank: int, world: int, init_file: str, path: str, out: str,
            evaluation: str = "auto") -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        model, x, eval_fn = _setup()
        sens = autoprune.sensitivity(model, x, eval_fn, groups=GROUPS, ratios=RATIOS,
                                     sensitivities_file=path,
                                     progress=False, options={"evaluation": evaluation})
        torch.save(sens, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("evaluation", ["auto", "masked"])
def test_two_gloo_ranks_equal_single_process(tmp_path, evaluation):
    model, x, eval_fn = _setup()
    single = autoprune.sensitivity(model, x, eval_fn, groups=GROUPS, ratios=RATIOS, progress=False)

    path = tmp_path / "sens.json"
    spawn_ranks(_worker, (2, str(tmp_path / "init"), str(path), str(tmp_path / "out"),
                          evaluation))
    tolerance = 0 if evaluation == "auto" else 1e-5  # masked: equal up to float noise
    for rank in range(2):
        got = torch.load(f"{tmp_path / 'out'}.{rank}", weights_only=True)
        assert got.keys() == single.keys()
        assert all(abs(got[n][r] - single[n][r]) <= tolerance for n in single for r in single[n])
    merged = autoprune.load_sensitivities(path)
    assert all(abs(merged[n][r] - single[n][r]) <= tolerance for n in single for r in single[n])
    if evaluation == "masked":  # each rank measured whole groups, in batched passes
        extra = autoprune.read_record(path).extra["evaluation"]
        assert extra["points"]["masked"] >= 2
    assert not list(tmp_path.glob("sens.json.rank*.json"))  # shards merged and removed


def test_leftover_shards_are_absorbed(tmp_path):
    model, x, eval_fn = _setup()
    path = tmp_path / "sens.json"
    autoprune.sensitivity(model, x, eval_fn, groups=GROUPS[:1], ratios=(0.3,),
                          sensitivities_file=path, progress=False)
    # a rank killed mid-run left its points in a shard file
    done = autoprune.sensitivity(model, x, eval_fn, groups=GROUPS[1:2], ratios=(0.3,),
                                 progress=False)
    record = autoprune.read_record(path)
    shard = SensitivityRecord(model=record.model, metric=record.metric)
    shard.set_point(GROUPS[1], 0.3, done[GROUPS[1]][0.3])
    write_record(shard, shard_path(path, 1))
    calls = []
    counted = lambda m: calls.append(1) or eval_fn(m)
    autoprune.sensitivity(model, x, counted, groups=GROUPS[:2], ratios=(0.3,),
                          sensitivities_file=path, progress=False)
    assert calls == []  # nothing left to measure: the shard's point was taken over
    assert not shard_path(path, 1).exists()
    assert autoprune.load_sensitivities(path)[GROUPS[1]] == done[GROUPS[1]]


def test_early_stop_skips_larger_ratios_and_is_recorded(tmp_path):
    model, x, eval_fn = _setup()
    path = tmp_path / "s.json"
    full = autoprune.sensitivity(model, x, eval_fn, groups=["conv1"], ratios=(0.2, 0.5, 0.8),
                                 progress=False)
    cap = full["conv1"][0.2] / 2  # the first point already passes the cap
    sens = autoprune.sensitivity(model, x, eval_fn, groups=["conv1"], ratios=(0.2, 0.5, 0.8),
                                 sensitivities_file=path, progress=False,
                                 options={"early_stop": cap})
    assert sens == {"conv1": {0.2: full["conv1"][0.2]}}
    assert autoprune.read_record(path).extra["early_stop"] == cap
    with pytest.raises(autoprune.ConfigError, match="early_stop"):
        autoprune.sensitivity(model, x, eval_fn, groups=["conv1"], progress=False,
                              options={"early_stop": -1})


def _torchrun(args: list[str]) -> str:
    """``torchrun --nproc_per_node 2 -m autoprune <args>`` on loopback; returns its stdout."""
    from conftest import torchrun

    return torchrun(["-m", "autoprune", *args])


# -- DDP training ------------------------------------------------------------------------------

def _tiny_net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                               torch.nn.Linear(8, 4))


def _tiny_data() -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(2)
    return torch.utils.data.TensorDataset(torch.randn(64, 3, 8, 8, generator=g),
                                          torch.randint(0, 4, (64,), generator=g))


def _teacher(distill: bool) -> dict:
    """``fit``'s distill argument: a frozen teacher (another tiny net), or nothing."""
    from autoprune.flow.training import Distill

    if not distill:
        return {}
    torch.manual_seed(7)
    teacher = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(),
                                  torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                  torch.nn.Linear(4, 4))
    return {"distill": Distill(teacher, alpha=0.5, temperature=2.0)}


def _ddp_fit_worker(rank: int, world: int, init_file: str, out: str,
                    distill: bool = False) -> None:
    from autoprune.engine.data import make_loader
    from autoprune.flow.training import FitConfig, fit

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        loader = make_loader(_tiny_data(), 16, shuffle=True, seed=3, drop_last=True, shard=True)
        model = _tiny_net()
        losses = fit(model, loader, FitConfig(epochs=2, lr=0.1, progress=False),
                     device=torch.device("cpu"), **_teacher(distill))
        torch.save({"state": model.state_dict(), "losses": losses, "steps": len(loader),
                    "batch": loader.batch_size}, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("distill", [False, True], ids=["plain", "distill"])
def test_ddp_training_over_two_ranks_equals_one_process_on_the_total_batch(tmp_path, distill):
    """2 ranks x batch 8 with averaged gradients = 1 process x batch 16 over the same shuffle;
    with distillation too (each rank's teacher, never wrapped in DDP, on the rank's images)."""
    from torch.utils.data import DataLoader, DistributedSampler

    from autoprune.flow.training import FitConfig, fit

    spawn_ranks(_ddp_fit_worker, (2, str(tmp_path / "init"), str(tmp_path / "out"), distill))
    ranks = [torch.load(f"{tmp_path / 'out'}.{r}", weights_only=True) for r in range(2)]
    assert [r["steps"] for r in ranks] == [4, 4] and [r["batch"] for r in ranks] == [8, 8]
    data = _tiny_data()
    loader = DataLoader(data, batch_size=16, drop_last=True,
                        sampler=DistributedSampler(data, num_replicas=1, rank=0, seed=3))
    model = _tiny_net()
    losses = fit(model, loader, FitConfig(epochs=2, lr=0.1, progress=False),
                 device=torch.device("cpu"), **_teacher(distill))
    for r in ranks:
        assert r["losses"] == pytest.approx(losses, rel=1e-5)
        for k, v in model.state_dict().items():
            assert torch.allclose(r["state"][k], v, atol=1e-6), k
    assert any(not torch.equal(v, _tiny_net().state_dict()[k])  # it did train
               for k, v in model.state_dict().items())


@needs_fmnist
def test_torchrun_train_prunes_with_ddp_and_rank0_writes(tmp_path):
    """`torchrun --nproc_per_node 2 -m autoprune train cfg.yaml`: both stages train as DDP, the
    analysis is shared out (its numbers those of one process: the same analysis of the same
    base model here), rank 0 alone prints and writes the checkpoints and the report.
    (`torchrun -m autoprune sensitivity`, 1 and 2 processes: test_benchmarks_speed.)"""
    import yaml

    from autoprune import classification as cls

    # a FLOPs target always prunes (whether a group of this one-epoch model stays within a
    # tolerated top-1 loss on 40 images is luck)
    cfg = {"task": "classification", "model": "resnet18", "train_data": "fashion-mnist",
           "epochs": 1, "batch_size": 32, "train_limit": 256, "eval_limit": 40,
           "input_size": 32, "save_dir": str(tmp_path / "run"), "device": "cpu",
           "sensitivities_file": str(tmp_path / "run" / "sens.json"), "ratios": [0.5],
           "pruned_flops": 0.3, "progress": False}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    out = _torchrun(["train", str(tmp_path / "cfg.yaml")])
    assert out.count("[autoprune] baseline top1") == 1  # printed by rank 0 only
    assert out.count("epoch 1/1") == 2  # one line per stage, not per rank
    assert out.count("DistributedDataParallel over 2 processes, 16 images per process") == 2
    run = tmp_path / "run"
    report = __import__("json").loads((run / "report.json").read_text())
    assert report["flops_reduction"] == pytest.approx(0.3, abs=0.02)
    assert report["pruned"]["latency_cpu_ms"] > 0
    pruned = cls.load_model(run / "pruned" / "best.pt")
    assert sum(p.numel() for p in pruned.parameters()) < \
        sum(p.numel() for p in cls.load_model(run / "baseline" / "best.pt").parameters())
    sens = autoprune.load_sensitivities(run / "sens.json")
    assert len(sens) == 12 and all(list(p) == [0.5] for p in sens.values())
    assert not list(run.glob("sens.json.rank*"))
    single = cls.analyze_sensitivity(run / "baseline" / "best.pt", "fashion-mnist",
                                     tmp_path / "single.json", ratios=(0.5,), eval_limit=40,
                                     input_size=32, device="cpu", progress=False)
    assert sens.keys() == single.keys()
    for name in sens:
        assert sens[name][0.5] == pytest.approx(single[name][0.5], abs=1e-6)


def test_ddp_batch_smaller_than_world_is_refused(monkeypatch):
    from autoprune.engine import data

    monkeypatch.setattr(data, "rank_and_world", lambda: (0, 2))
    with pytest.raises(autoprune.ConfigError, match="total over 2 processes: pass at least 2"):
        data.make_loader(_tiny_data(), 1, shuffle=True, shard=True)
    assert data.make_loader(_tiny_data(), 1, shuffle=True).batch_size == 1  # not sharded


def _bn_net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                               torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                               torch.nn.Linear(8, 4))


def test_sync_batchnorm_swap_trains_the_original_modules_and_puts_them_back():
    """What the SyncBatchNorm copies learn (weights, running statistics) lands in the original
    BatchNorm modules, which are back in place afterwards: same training as without the swap."""
    from autoprune.engine.data import make_loader
    from autoprune.flow.training import FitConfig, fit, use_sync_batchnorm

    cfg = FitConfig(epochs=1, lr=0.1, progress=False)
    swapped, plain = _bn_net(), _bn_net()
    original_bn = swapped[1]
    restore = use_sync_batchnorm(swapped)
    assert isinstance(swapped[1], torch.nn.SyncBatchNorm)  # forward works untrained/unsynced on CPU
    fit(swapped, make_loader(_tiny_data(), 16, shuffle=True, seed=3), cfg,
        device=torch.device("cpu"))
    restore()
    fit(plain, make_loader(_tiny_data(), 16, shuffle=True, seed=3), cfg, device=torch.device("cpu"))
    assert swapped[1] is original_bn and type(swapped[1]) is torch.nn.BatchNorm2d
    assert original_bn.num_batches_tracked.item() == 4
    for k, v in plain.state_dict().items():
        assert torch.allclose(swapped.state_dict()[k], v, atol=1e-6), k


def test_sync_bn_on_cpu_ranks_is_refused_and_ignored_in_one_process(monkeypatch):
    from autoprune.flow.training import loop as training
    from autoprune.engine.data import make_loader

    model = _bn_net()
    loader = make_loader(_tiny_data(), 16, shuffle=False)
    cfg = training.FitConfig(epochs=1, progress=False, sync_bn=True)
    assert len(training.fit(model, loader, cfg, device=torch.device("cpu"))) == 1  # one process
    assert type(model[1]) is torch.nn.BatchNorm2d
    monkeypatch.setattr(training, "rank_and_world", lambda: (0, 2))
    with pytest.raises(autoprune.ConfigError, match="sync_bn=True needs CUDA GPUs"):
        training.fit(model, loader, cfg, device=torch.device("cpu"))
    assert type(model[1]) is torch.nn.BatchNorm2d


def test_a_group_started_by_autoprune_is_destroyed_before_interpreter_shutdown(tmp_path):
    """A process group left to interpreter shutdown can abort a finished run (gloo's threads:
    "terminate called without an active exception", seen in CI): init_from_env destroys what it
    started at exit, while Python is whole. A handler registered before it runs after it."""
    from conftest import torchrun

    script = tmp_path / "probe.py"
    script.write_text(
        "import atexit, os, torch, torch.distributed as dist\n"
        "from autoprune.engine.distributed import init_from_env, all_reduce_sum\n"
        "say = lambda text: os.write(1, (text + '\\n').encode())"
        "  # one write a line: two ranks share stdout\n"
        "atexit.register(lambda: say(f'group alive at exit: {dist.is_initialized()}'))\n"
        "assert init_from_env('cpu')\n"  # gloo, also where there is a GPU
        "total = all_reduce_sum(1.0)\n"
        "say(f'rank {dist.get_rank()} sum {total}')\n")
    out = torchrun([str(script)])  # (ranks whose print() interleaved, "...: ...:False\n False")
    assert "rank 0 sum 2.0" in out and "rank 1 sum 2.0" in out
    assert "group alive at exit: True" not in out
    assert out.count("group alive at exit: False") == 2


@pytest.mark.parametrize("device, local_rank, gpus, expected", [
    ("auto", "0", 1, True), ("cuda", "0", 2, True), ("auto", "1", 2, True),
    ("cpu", "1", 1, False), (torch.device("cpu"), "3", 1, False), ("auto", "1", 0, False),
    ("auto", "1", 1, "torchrun started local rank 1 on a machine with 1 GPU (one process per "
                     "GPU): start `torchrun --nproc_per_node 1`, or pass device='cpu'"),
    ("cuda:0", "2", 2, "with 2 GPUs")])
def test_torchrun_ranks_take_a_gpu_each_or_the_cpu(device, local_rank, gpus, expected,
                                                   monkeypatch):
    """NCCL on cuda:LOCAL_RANK only where the rank has a GPU of its own and the CPU was not asked
    for; more ranks than GPUs is a one-line error, not set_device's CUDA error on rank 1 (seen
    on the one-GPU machine: the gloo tests' rank 1 died with exit code 2)."""
    from autoprune.engine.distributed import ranks_on_gpus

    monkeypatch.setenv("LOCAL_RANK", local_rank)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    if isinstance(expected, bool):
        assert ranks_on_gpus(device) is expected
    else:
        with pytest.raises(autoprune.ConfigError, match=re.escape(expected)):
            ranks_on_gpus(device)


def _one_gpu_and_rank_1(monkeypatch) -> None:
    """This process as torchrun's local rank 1 on a machine with one GPU (faked)."""
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


def test_auto_device_on_a_rank_without_a_gpu_names_nproc_per_node(monkeypatch):
    """device='auto' on rank 1 of a one-GPU machine is init_from_env's one line (which names the
    fix), not "cuda:1 is not available: use 'auto'"; device='cpu' is the CPU there."""
    from autoprune.flow.training import pick_device

    _one_gpu_and_rank_1(monkeypatch)
    with pytest.raises(autoprune.ConfigError, match="--nproc_per_node 1`, or pass device='cpu'"):
        pick_device("auto")
    assert pick_device("cpu") == torch.device("cpu")


def test_cli_train_with_device_cpu_takes_no_gpu_before_training(tmp_path, monkeypatch, capsys):
    """`torchrun -m autoprune train` with `device: cpu` on a one-GPU machine: rank 1 died in the
    CLI's look for an earlier run (an adapter built with device 'auto' took cuda:1; seen on the
    H100 machine). That look reads files only: here it reports the earlier run."""
    from autoprune.cli import main

    _one_gpu_and_rank_1(monkeypatch)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "report.json").write_text("{}")
    config = tmp_path / "c.yaml"
    config.write_text(f"task: classification\nmodel: resnet18\ntrain_data: fashion-mnist\n"
                      f"device: cpu\nsave_dir: {tmp_path / 'run'}\npruned_flops: 0.3\n"
                      f"sensitivities_file: {tmp_path / 's.json'}\nepochs: 1\n"
                      f"train_limit: 8\neval_limit: 8\ninput_size: 32\n")  # (short if it ran)
    assert main(["train", str(config)]) != 0
    err = capsys.readouterr().err
    assert "holds a finished run (report.json)" in err and "not available" not in err

"""Sensitivity analysis sharded over 2 gloo processes equals the single-process result; rank 0
writes one file; a killed distributed run's shard files are absorbed by the next run."""
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torchvision

import autoprune
from autoprune.store import SensitivityRecord, shard_path, write_record

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
                                     sensitivities_file=path, evaluation=evaluation,
                                     progress=False)
        torch.save(sens, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("evaluation", ["auto", "masked"])
def test_two_gloo_ranks_equal_single_process(tmp_path, evaluation):
    model, x, eval_fn = _setup()
    single = autoprune.sensitivity(model, x, eval_fn, groups=GROUPS, ratios=RATIOS, progress=False)

    path = tmp_path / "sens.json"
    mp.spawn(_worker, args=(2, str(tmp_path / "init"), str(path), str(tmp_path / "out"),
                            evaluation), nprocs=2, join=True)
    tolerance = 0 if evaluation == "auto" else 1e-5  # masked: equal up to float noise
    for rank in range(2):
        got = torch.load(f"{tmp_path / 'out'}.{rank}", weights_only=True)
        assert got.keys() == single.keys()
        assert all(abs(got[n][r] - single[n][r]) <= tolerance for n in single for r in single[n])
    merged = autoprune.load_sensitivities(path)
    assert all(abs(merged[n][r] - single[n][r]) <= tolerance for n in single for r in single[n])
    if evaluation == "masked":  # each rank measured whole groups, in batched passes
        extra = autoprune.store.read_record(path).extra["evaluation"]
        assert extra["points"]["masked"] >= 2
    assert not list(tmp_path.glob("sens.json.rank*.json"))  # shards merged and removed


def test_leftover_shards_are_absorbed(tmp_path):
    model, x, eval_fn = _setup()
    path = tmp_path / "sens.json"
    autoprune.sensitivity(model, x, eval_fn, groups=GROUPS[:1], ratios=(0.3,),
                          sensitivities_file=path, progress=False)
    # a rank killed mid-run left its points in a shard file
    done = autoprune.sensitivity(model, x, eval_fn, groups=GROUPS[1:2], ratios=(0.3,), progress=False)
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
                                 sensitivities_file=path, early_stop=cap, progress=False)
    assert sens == {"conv1": {0.2: full["conv1"][0.2]}}
    assert autoprune.read_record(path).extra["early_stop"] == cap
    with pytest.raises(autoprune.ConfigError, match="early_stop"):
        autoprune.sensitivity(model, x, eval_fn, groups=["conv1"], early_stop=-1, progress=False)


@pytest.mark.skipif(not Path("/usr/share/datasets/fashion-mnist").is_dir(),
                    reason="dataset-fashion-mnist not installed")
def test_torchrun_cli_two_processes(tmp_path):
    import socket
    import subprocess
    import sys

    from autoprune import classification as cls

    base = cls.train("resnet18", "fashion-mnist", epochs=1, batch_size=32, train_limit=320,
                     eval_limit=40, save_dir=tmp_path / "base", progress=False).baseline_path
    out = tmp_path / "sens.json"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
           "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}  # loopback only
    with socket.socket() as s:  # a free loopback port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(port),
           "-m", "autoprune", "sensitivity", str(base), "fashion-mnist",
           str(out), "--ratios", "0.5", "--limit", "40", "--device", "cpu"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[:3000] + "\n...\n" + done.stderr[-1500:]
    sens = autoprune.load_sensitivities(out)
    assert len(sens) == 12 and all(list(p) == [0.5] for p in sens.values())
    single = cls.analyze_sensitivity(base, "fashion-mnist", tmp_path / "single.json",
                                     ratios=(0.5,), eval_limit=40, device="cpu", progress=False)
    assert sens.keys() == single.keys()
    for name in sens:
        assert sens[name][0.5] == pytest.approx(single[name][0.5], abs=1e-6)
    assert any(p[0.5] != 0 for p in sens.values())

"""Shared fixtures for the core-engine tests: small models, example inputs, a deterministic eval_fn.

Everything runs on CPU with tiny inputs; nothing is downloaded (timm/torchvision models are built
from their configs with random weights).
"""
from __future__ import annotations

import copy
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Dataset

# Tiny tensors: one intra-op thread is faster, and with two threads on a busy two-core machine
# OpenMP spin-waits made a single mobilenet_v2 forward take seconds. One thread is also what makes
# results bit-reproducible across processes (the subprocess reload test relies on it).
torch.set_num_threads(1)
# The reports' before/after timing takes 3 paired rounds instead of 15 (about 3 s less per run):
# the tests check what a report holds, not how precise its milliseconds are. Set in the
# environment, so that CLI and torchrun children take it too.
os.environ.setdefault("AUTOPRUNE_REPORT_ROUNDS", "3")
# ...and in torch only: the ONNX Runtime row (two exports and two sessions, 1-2.5 s a run, about
# 100 runs) is checked by the tests that ask for it (monkeypatch.setenv, `report_in_onnxruntime`).
os.environ.setdefault("AUTOPRUNE_REPORT_RUNTIMES", "torch")

NUM_CLASSES = 10
IMG = 32


def pytest_collection_modifyitems(config, items) -> None:
    """The slowest test files first (``tests/file_seconds.json``, measured by
    ``scripts/test_file_seconds.py``; a file not listed comes last). With ``--dist loadfile
    --no-loadscope-reorder`` (test.sh) the two workers take files longest first and finish close
    together (xdist's own order, by test count, left one worker idle for a minute at the end)."""
    import json
    from pathlib import Path

    listed = Path(__file__).with_name("file_seconds.json")
    seconds = json.loads(listed.read_text()) if listed.is_file() else {}
    items.sort(key=lambda item: -seconds.get(item.path.name, 0.0))  # stable: a file's own order


def has_fmnist() -> bool:
    """True when Fashion-MNIST is where autoprune looks for it (``$AUTOPRUNE_FASHION_MNIST``, then
    Debian's ``/usr/share/datasets/fashion-mnist``: ``apt-get install dataset-fashion-mnist``)."""
    from autoprune.datasets import find_root
    from autoprune.errors import ConfigError

    try:
        find_root()
    except ConfigError:
        return False
    return True


# the tests that train on Fashion-MNIST (or its scenes) skip where it is not installed
needs_fmnist = pytest.mark.skipif(not has_fmnist(), reason="dataset-fashion-mnist not installed")


class ToyNet(nn.Module):
    """stem conv-bn-relu; a residual block x + bn(conv(relu(bn(conv(x))))); two parallel conv
    branches concatenated; a strided conv; global pool; linear head."""

    def __init__(self, num_classes: int = NUM_CLASSES):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU())
        self.block_conv1 = nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.block_bn1 = nn.BatchNorm2d(16)
        self.block_conv2 = nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.block_bn2 = nn.BatchNorm2d(16)
        self.branch_a = nn.Sequential(nn.Conv2d(16, 8, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.branch_b = nn.Sequential(nn.Conv2d(16, 12, 3, padding=1, bias=False),
                                      nn.BatchNorm2d(12), nn.ReLU())
        self.fuse = nn.Sequential(nn.Conv2d(20, 24, 3, stride=2, padding=1, bias=False),
                                  nn.BatchNorm2d(24), nn.ReLU())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(24, num_classes)

    def forward(self, x):
        x = self.stem(x)
        y = F.relu(self.block_bn1(self.block_conv1(x)))
        x = F.relu(x + self.block_bn2(self.block_conv2(y)))
        x = torch.cat([self.branch_a(x), self.branch_b(x)], dim=1)
        x = self.fuse(x)
        return self.fc(torch.flatten(self.pool(x), 1))


# The groups ToyNet must have (name, channels); the residual group is named after stem.0.
TOY_GROUPS = [("stem.0", 16), ("block_conv1", 16), ("branch_a.0", 8), ("branch_b.0", 12),
              ("fuse.0", 24)]


def _resnet18(num_classes):
    import torchvision
    return torchvision.models.resnet18(weights=None, num_classes=num_classes)


def _mobilenet_v2(num_classes):
    import torchvision
    return torchvision.models.mobilenet_v2(weights=None, num_classes=num_classes)


def _efficientnet_b0(num_classes):
    import timm
    return timm.create_model("efficientnet_b0", pretrained=False, num_classes=num_classes)


def _mobilenetv3_small(num_classes):
    import timm
    return timm.create_model("mobilenetv3_small_100", pretrained=False, num_classes=num_classes)


FACTORIES: dict[str, Callable[[int], nn.Module]] = {
    "toy": ToyNet,
    "resnet18": _resnet18,
    "mobilenet_v2": _mobilenet_v2,
    "efficientnet_b0": _efficientnet_b0,
    "mobilenetv3_small_100": _mobilenetv3_small,
}
REAL_MODELS = ["resnet18", "mobilenet_v2", "efficientnet_b0", "mobilenetv3_small_100"]
ALL_MODELS = REAL_MODELS + ["toy"]
# The module that produces the logits (must never lose output channels).
HEADS = {"toy": "fc", "resnet18": "fc", "mobilenet_v2": "classifier.1",
         "efficientnet_b0": "classifier", "mobilenetv3_small_100": "classifier"}


def randomize_norms(model: nn.Module, seed: int = 0) -> nn.Module:
    """Give every BatchNorm non-trivial affine parameters and running statistics (deterministic),
    so restoring/saving buffers and BN-coupled channels is really exercised."""
    g = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                n = m.num_features
                if m.affine:
                    m.weight.copy_(0.5 + torch.rand(n, generator=g))
                    m.bias.copy_(0.2 * torch.randn(n, generator=g))
                if m.track_running_stats:
                    m.running_mean.copy_(0.1 * torch.randn(n, generator=g))
                    m.running_var.copy_(0.5 + torch.rand(n, generator=g))
    return model


def make_model(name: str, seed: int = 0, num_classes: int = NUM_CLASSES) -> nn.Module:
    """A freshly built model in eval mode with seeded random weights."""
    torch.manual_seed(seed)
    model = FACTORIES[name](num_classes)
    return randomize_norms(model, seed).eval()


def make_input(batch: int = 2, size: int = IMG, seed: int = 123) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


class RefEval:
    """A deterministic, higher-is-better eval_fn: ``1 / (1 + ||out - ref|| / ||ref - mean(ref)||)``
    where ``ref`` is the unpruned model's output on a fixed batch. Baseline = 1 exactly; removing
    channels gives a clearly non-zero loss. Counts its calls; can raise KeyboardInterrupt on a
    given call (to simulate an interrupted run) and records the mode it was called in."""

    def __init__(self, model: nn.Module, x: torch.Tensor, interrupt_on_call: int | None = None):
        was_training = model.training
        model.eval()
        with torch.no_grad():
            self.ref = model(x).detach().clone()
        model.train(was_training)
        self.x = x
        self.scale = float((self.ref - self.ref.mean(0)).norm())
        self.calls = 0
        self.interrupt_on_call = interrupt_on_call
        self.seen_training: list[bool] = []
        self.seen_grad: list[bool] = []

    def __call__(self, model: nn.Module) -> float:
        self.calls += 1
        if self.interrupt_on_call is not None and self.calls == self.interrupt_on_call:
            raise KeyboardInterrupt("simulated Ctrl-C")
        self.seen_training.append(model.training)
        self.seen_grad.append(torch.is_grad_enabled())
        out = model(self.x)
        return 1.0 / (1.0 + float((out - self.ref).norm()) / self.scale)


def state_shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    """Every state-dict tensor's shape, by key."""
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def params(model: nn.Module) -> int:
    """The model's parameter count."""
    return sum(p.numel() for p in model.parameters())


def ort_session(path: Path | str) -> Any:
    """An ONNX Runtime CPU session of the file at ``path``, on one thread."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_same_state(model: nn.Module, snap: dict[str, torch.Tensor]) -> None:
    state = model.state_dict()
    assert list(state) == list(snap)
    for k, v in state.items():
        assert v.shape == snap[k].shape, k
        assert v.dtype == snap[k].dtype, k
        assert torch.equal(v, snap[k]), k


def assert_one_line(exc_info) -> str:
    msg = str(exc_info.value)
    assert msg.strip(), "error message is empty"
    assert "\n" not in msg, f"error message spans several lines: {msg!r}"
    return msg


def outputs(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    was_training = model.training
    model.eval()
    with torch.no_grad():
        out = model(x)
    model.train(was_training)
    return out


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture
def toy():
    return make_model("toy")


@pytest.fixture
def resnet18():
    return make_model("resnet18")


@pytest.fixture
def x():
    """A batch of two 32x32 images."""
    return make_input()


@pytest.fixture
def x1():
    """A single 32x32 image (FLOPs are counted per sample)."""
    return make_input(batch=1)


def clone(model: nn.Module) -> nn.Module:
    return copy.deepcopy(model)


class Images(Dataset):
    """``n`` random 32-px images of 4 classes (3-class masks with ``segmentation``); with
    ``noise`` each read adds torch-RNG noise (an augmentation), so a resumed run matches only if
    the RNG states are restored. After ``crash_after`` reads it raises KeyboardInterrupt (a
    simulated Ctrl-C). Shared by the resume and retraining tests."""

    def __init__(self, n=48, *, noise=True, crash_after=None, segmentation=False):
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(n, 3, 32, 32, generator=g)
        self.y = torch.randint(0, 3, (n, 32, 32), generator=g) if segmentation else \
            torch.arange(n) % 4
        self.noise, self.crash_after, self.reads = noise, crash_after, 0
        if not segmentation:
            self.classes = ["a", "b", "c", "d"]

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        self.reads += 1
        if self.crash_after is not None and self.reads > self.crash_after:
            raise KeyboardInterrupt("simulated Ctrl-C")
        x = self.x[i] + 0.2 * torch.randn(3, 32, 32) if self.noise else self.x[i]
        return x, self.y[i]


def prunes_by_name_and_reloads(name: str, size: int, tmp_path, prune_all) -> None:
    """Build the classifier ``name`` through the classification adapter, ``prune_all(model, x)``,
    run it (10 finite logits) and reload it from a checkpoint to identical outputs."""
    import autoprune as ap
    from autoprune import classification as cls
    from autoprune.tasks.classification import ClassificationAdapter

    torch.manual_seed(0)
    adapter = ClassificationAdapter(num_classes=10, input_size=size, progress=False)
    arch = adapter.arch_key(name)
    model = adapter.build(arch).eval()
    x = adapter.example_inputs(model)
    prune_all(model, x)
    with torch.no_grad():
        out = model(x)
    assert out.shape == (1, 10) and torch.isfinite(out).all()
    path = ap.save_pruned(model, tmp_path / "m.pt", task="classification", arch=arch,
                          build=adapter.build_kwargs(model), input_size=size)
    with torch.no_grad():
        assert torch.equal(cls.load_model(path)(x), out)


def child_pythonpath() -> str:
    """PYTHONPATH for a child process: this checkout first, then the parent's own (where packages
    come from PYTHONPATH, as on the lent GPU machine, a child needs them too)."""
    import os
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[1])
    return os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)


def torchrun(args: list[str], nproc: int = 2, timeout: int = 900) -> str:
    """``torchrun --nproc_per_node <nproc> <args>`` on loopback (a free port, gloo, one thread per
    process) with this checkout first on PYTHONPATH; ``args`` is ``["-m", "autoprune", ...]`` or
    a script and its arguments. Returns its stdout; fails the test on a non-zero exit."""
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "PYTHONPATH": child_pythonpath(),
           "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}  # loopback only
    with socket.socket() as s:  # a free loopback port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
           "--master_addr", "127.0.0.1", "--master_port", str(port), *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[:3000] + "\n...\n" + done.stderr[-1500:]
    return done.stdout


def stop_after_first_save(monkeypatch, trainer_class) -> None:
    """Make the Ultralytics trainer class ``trainer_class`` raise KeyboardInterrupt right after it
    saved its first epoch (a Ctrl-C between epochs); ``monkeypatch.undo()`` lifts it."""
    save_model = trainer_class.save_model

    def save_then_stop(trainer):
        save_model(trainer)
        raise KeyboardInterrupt("simulated interruption")

    monkeypatch.setattr(trainer_class, "save_model", save_then_stop)


# what a rank started by spawn_ranks finds imported: the fork server imports these once per test
# worker, and each rank forks from it (instead of importing them again: about 10 s a rank)
RANK_PRELOAD = ["torch", "torchvision", "timm", "autoprune", "autoprune.engine.sensitivity",
                "autoprune.flow.training", "autoprune.tasks.classification"]


def spawn_ranks(fn: Callable, args: tuple, nprocs: int = 2) -> None:
    """``torch.multiprocessing.spawn(fn, args, nprocs)`` (``fn(rank, *args)`` in each of
    ``nprocs`` processes, joined, a rank's exception raised here), the processes forked from a
    fork server that imported :data:`RANK_PRELOAD` once."""
    import multiprocessing

    import torch.multiprocessing as mp

    multiprocessing.set_forkserver_preload(RANK_PRELOAD)
    mp.start_processes(fn, args=args, nprocs=nprocs, join=True, start_method="forkserver")


def forked_process(target: Callable, *args):
    """A started ``multiprocessing.Process`` running ``target(*args)``, forked from the fork
    server of :func:`spawn_ranks` (imports done once): a real process (its own pid, signals,
    exit code) that starts in a fraction of a second instead of importing torch again."""
    import multiprocessing

    multiprocessing.set_forkserver_preload(RANK_PRELOAD)
    proc = multiprocessing.get_context("forkserver").Process(target=target, args=args)
    proc.start()
    return proc


def run_offline_child(tmp_path, body: str, timeout: int = 600) -> dict:
    """Run the Python code ``body`` in a fresh process where every network call is refused and
    recorded in ``attempts`` (a list the code may print), no ``YOLO_*`` variable is set and the
    user's settings live in ``tmp_path/config``; ``body`` ends with ``print("RESULT", json.dumps(
    {...}))``. Returns that dict (the process must succeed)."""
    import json
    import os
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent("""
        import json, socket, sys
        attempts = []
        def refuse(*args, **kwargs):
            attempts.append(repr(args[:2])[:120])
            raise OSError("network access refused by the test")
        def local_only(connect):  # Unix sockets stay: DataLoader workers hand tensors over them
            def call(self, *args, **kwargs):
                if self.family == socket.AF_UNIX:
                    return connect(self, *args, **kwargs)
                return refuse(self, *args, **kwargs)
            return call
        socket.socket.connect = local_only(socket.socket.connect)
        socket.socket.connect_ex = local_only(socket.socket.connect_ex)
        socket.create_connection = socket.getaddrinfo = socket.gethostbyname = refuse
        import torch
        torch.set_num_threads(1)
    """) + textwrap.dedent(body))
    env = {k: v for k, v in os.environ.items() if not k.startswith("YOLO_")}
    env.update(PYTHONPATH=child_pythonpath(),
               XDG_CONFIG_HOME=str(tmp_path / "config"))
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def scenes_validated_on_train(root, train: int, task: str = "detect"):
    """A YOLO data.yaml of ``train`` scenes of one large garment at 64 px (``task="segment"``:
    polygon labels) whose val split is the training images, so a model trained for seconds
    already scores above 0 (the sensitivities need a non-zero baseline)."""
    import yaml

    from autoprune.datasets.scenes import write_yolo_dataset

    path = write_yolo_dataset(root, train=train, val=4, size=64, seed=0, objects=(1, 1),
                              scale=(0.8, 1.0), task=task)
    cfg = yaml.safe_load(path.read_text())
    cfg["val"] = "images/train"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def check_bounded_map(adapter, model, monkeypatch) -> None:
    """A YOLO adapter's mAP batch by batch (tasks/detection/incremental.py), on 16 val images in
    batches of 8 with a look after the first: the first step's sure upper bound is computed
    (below 1) and at or above the whole split's metric (lower bound 0) and says the mAP of the
    images seen (the look's), the last step is exactly
    adapter.evaluate's value, and closing the iterator after one batch stops the validator's
    thread (the next evaluation is unchanged)."""
    import threading

    from autoprune.tasks.detection import incremental
    from autoprune.tasks.detection.map_bound import seen_maps

    monkeypatch.setattr(incremental, "look_points", lambda total: [8])
    computed = []
    monkeypatch.setattr(incremental, "seen_maps",
                        lambda *stats: computed.append(1) or seen_maps(*stats))
    final = adapter.evaluate(model)[adapter.metric]
    evaluation = adapter.incremental_eval()
    assert isinstance(evaluation, incremental.BoundedMAP) and evaluation.images == 16
    steps = list(evaluation.incremental(model))
    assert [s.images for s in steps] == [8, 8]
    assert steps[-1].value == steps[-1].low == steps[-1].high == final
    assert steps[0].low == 0.0 and final <= steps[0].high < 1.0
    assert not computed  # the seen mAP costs as much as the bound: computed only when asked
    assert 0.0 <= steps[0].seen_metric() <= 1.0  # the mAP of the first 8 images (the pilot's)
    assert computed == [1]
    run = evaluation.incremental(model)
    next(run)
    run.close()
    assert not [t for t in threading.enumerate() if t.name == "autoprune-bounded-map"]
    assert adapter.evaluate(model)[adapter.metric] == final


def check_flow_bounded_map(adapter_class, load_model, flow, data_yaml, monkeypatch) -> None:
    """:func:`check_bounded_map` on the baseline of a YOLO sub-task's ``flow`` fixture."""
    result, _ = flow
    adapter = adapter_class(data_yaml, input_size=64, batch_size=8, device="cpu", eval_limit=16,
                            progress=False)
    check_bounded_map(adapter, load_model(result.baseline_path).eval(), monkeypatch)


def refuse_network_probes(monkeypatch) -> None:
    """Make any reachability probe of a real host fail the test (pretrained weights are read
    from caches the tests seed), with an empty answer cache."""
    from autoprune.tasks import weights

    def refuse(url, timeout=weights.PROBE_TIMEOUT):
        raise AssertionError(f"a test asked whether {url} is reachable")

    monkeypatch.setattr(weights, "reachable", refuse)
    monkeypatch.setattr(weights, "_probes", {})


@pytest.fixture
def report_in_onnxruntime(monkeypatch):
    """The report's ONNX Runtime row on, as for a user (the suite leaves it out, see above)."""
    monkeypatch.setenv("AUTOPRUNE_REPORT_RUNTIMES", "torch,onnxruntime")


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def flops_ratio(timer: Any, candidate: nn.Module) -> float:
    """``PairedTimer.compare`` with FLOPs standing in for the clock (deterministic, fast): the
    candidate's FLOPs over the unpruned model's, those counted once per timer."""
    from autoprune.engine.measure import count_flops

    timer.base_rounds.append(10.0)
    if getattr(timer, "_test_base_flops", None) is None:
        timer._test_base_flops = count_flops(timer.base, timer.inputs)
    return count_flops(candidate, timer.inputs) / timer._test_base_flops


def load_benchmark(name: str, module_name: str | None = None, on_path: bool = False) -> Any:
    """``benchmarks/<name>.py`` imported as a module (``on_path``: its folder put on sys.path
    first, for a script that imports its neighbours)."""
    if on_path and str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(module_name or f"bench_{name}",
                                                  BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

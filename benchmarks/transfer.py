"""Transfer: the one-call flow started from "pretrained" weights against the same flow from
scratch (issue 31), simulated honestly where there is no ImageNet or COCO.

For each model (``--models``: timm ``resnet18`` and ``mobilenetv3_large_100``, Ultralytics
YOLOv8n) a model is first trained on one half of the Fashion-MNIST classes (0-4: T-shirt/top,
Trouser, Pullover, Dress, Coat; detection: scenes holding only those garments) and published
into a local cache in the library's own layout:

- classification: the Hugging Face hub cache (``<work>/hf/hub/models--timm--<name>.<tag>/...``,
  :func:`autoprune.tasks.classification.pretrained.seed_timm_cache`), as timm's default weights
  of the architecture, so that ``pretrained=True`` loads them with ``HF_HUB_OFFLINE=1`` and
  ``HF_HOME=<work>/hf``;
- detection: ``yolov8n.pt`` in Ultralytics' weights dir (``<work>/yolo_weights``,
  :func:`autoprune.tasks.detection.pretrained.seed_ultralytics_weights`), found by
  ``det.train("yolov8n.pt", ...)`` as Ultralytics finds it.

Then, on the OTHER half (classes 5-9: Sandal, Shirt, Sneaker, Bag, Ankle boot, relabelled 0-4),
the one-call flow runs twice from each start, "pretrained" and scratch, with the same data,
epochs and seed:

- ``pruned_flops=0.5``: base model (fine-tuned from the published weights, or trained from
  random ones), sensitivities, allocation, pruning, retraining;
- ``pruned_latency=0.4`` (CPU, one thread, batch 1): the same base model and sensitivity file
  (each point then timed), its own allocation, pruning and the same retraining.

Inputs: timm takes the mean / std of a registered tag from its own registry (the
``config.json`` of the cache is not read for it), so the "pretraining" normalises with the
pretrained config ``pretrained=True`` resolves to (ImageNet's statistics for ``resnet18.a1_in1k``
and ``mobilenetv3_large_100.ra_in1k``), the published ``config.json`` carries the same, and
both halves are built by :class:`ClassHalf` with them: the pretraining, the fine-tuning and the
scratch runs see the same pixels as ``FashionMNIST(size=32, channels=3, mean=, std=)`` would
give. Detection reads PNG scenes (Ultralytics' own pipeline for both halves). The "pretrained"
YOLOv8n has a 10-class head (its data.yaml lists the ten Fashion-MNIST names; only 0-4 occur),
as COCO's 80-class weights meet a user's 5 classes: autoprune then adapts the head and
fine-tunes before pruning. (With a 5-class head autoprune would take the weights as trained
on the data's classes and prune them without fine-tuning: it compares the class count only.)

The learning rate of the fine-tuning (``--lrs``; ``--lr-models``, by default the two timm
models): the base model fine-tuned from the published weights with each lr, the same epochs and
data, one run per seed of ``--lr-seeds`` (autoprune's default from pretrained weights is 0.01,
from scratch 0.05).

    python benchmarks/transfer.py --quick              # resnet18, small: 2-3 min on a core
    python benchmarks/transfer.py --work-dir W         # the three models: 85 min on one core
    python benchmarks/transfer.py --models resnet18 --train-images 500 --epochs 15 \
        --retrain-epochs 15 --work-dir W               # less data (the pretraining is reused)

``--work-dir`` keeps every stage (the pretraining, each flow, each lr run) in a folder named by
the model and the settings it depends on; a finished stage leaves ``result.json`` and is not run
again, an interrupted one starts over (its folder is cleared). Prints the markdown tables and,
last, for the first model: ``model=<m> pretrained_base=<a> scratch_base=<b>
pretrained_flops=<c> scratch_flops=<d> pretrained_latency=<e> scratch_latency=<f>``.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import platform
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.data import Dataset  # noqa: E402

from autoprune.datasets.fashion_mnist import CLASSES, find_root, read_idx  # noqa: E402
from autoprune.errors import ConfigError  # noqa: E402

PRETRAIN_CLASSES = (0, 1, 2, 3, 4)  # the "pretraining" half
TRANSFER_CLASSES = (5, 6, 7, 8, 9)  # the user's data: the other half, relabelled 0-4
STARTS = ("pretrained", "scratch")
TARGETS = {"flops": {"pruned_flops": 0.5},
           "latency": {"pruned_latency": 0.4, "latency_threads": 1}}
LRS = (0.05, 0.01, 0.003)
IDX = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
       "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}

MODELS: dict[str, dict[str, Any]] = {
    "resnet18": dict(task="classification", arch="resnet18"),
    "mobilenetv3_large_100": dict(task="classification", arch="mobilenetv3_large_100"),
    "yolov8n": dict(task="detection", arch="yolov8n"),
}
# Per task, the full run's settings. Classification: pretraining on 15,000 images of classes 0-4
# (3,000 each) for 4 epochs at lr 0.05; the user's data: 2,500 training images of classes 5-9
# (500 each), top-1 on 1,000 test images of those classes; 3 base epochs, 3 retraining epochs;
# ratios 0.2..0.8 measured on 500 of the test images. Detection: 320 scenes of garments 0-4 at
# 128 px for 30 epochs; the user's data: 160 / 64 scenes of garments 5-9, 15 base epochs,
# 10 retraining epochs (AdamW lr0 0.003 for every run, as benchmarks/task_flows.py), ratios
# 0.3, 0.6, 0.9 measured on the 64 validation scenes (-40 % latency needs the 0.9 points).
FULL = {
    "classification": dict(size=32, batch=64, pretrain_images=15000, pretrain_val=1000,
                           pretrain_epochs=4, pretrain_lr=0.05, train=2500, val=1000, epochs=3,
                           retrain=3, ratios="0.2,0.4,0.6,0.8", table=500),
    "detection": dict(size=128, batch=16, pretrain_images=320, pretrain_val=64,
                      pretrain_epochs=30, train=160, val=64, epochs=15, retrain=10,
                      ratios="0.3,0.6,0.9", table=None,
                      train_args=dict(optimizer="AdamW", lr0=0.003, warmup_epochs=1, nbs=16)),
}
# --quick: resnet18 only, fewer images and epochs (a few minutes on one core)
QUICK = {
    "classification": dict(pretrain_images=5000, pretrain_val=500, pretrain_epochs=2, train=1000,
                           val=500, epochs=2, retrain=1, ratios="0.3,0.6", table=250),
    "detection": dict(size=64, pretrain_images=64, pretrain_val=16, pretrain_epochs=12,
                      train=32, val=16, epochs=8, retrain=2, ratios="0.5", batch=8,
                      scenes=dict(objects=(1, 1), scale=(0.8, 1.0)),
                      train_args=dict(optimizer="AdamW", lr0=0.005, warmup_epochs=0,
                                      mosaic=0.0, nbs=8)),
}
# --tiny (the tests: seconds per stage, numbers that mean nothing)
TINY = {
    "classification": dict(pretrain_images=100, pretrain_val=50, pretrain_epochs=1, train=50,
                           val=50, epochs=1, retrain=1, ratios="0.5", table=50, batch=25),
    # detection: one large garment per scene, validated on the training scenes, 12 epochs
    # without warm-up, so the barely trained base models score above 0 (the sensitivities need
    # it), as benchmarks/latency_aware.py --tiny
    "detection": dict(size=64, pretrain_images=24, pretrain_val=8, pretrain_epochs=12,
                      train=24, val=8, epochs=12, retrain=1, ratios="0.5", batch=8,
                      scenes=dict(objects=(1, 1), scale=(0.8, 1.0)), val_on_train=True,
                      train_args=dict(optimizer="AdamW", lr0=0.005, warmup_epochs=0,
                                      mosaic=0.0, nbs=8)),
}


# -- the two halves of Fashion-MNIST ---------------------------------------------------------------
def read_split(split: str, root: str | os.PathLike | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(images (N, 28, 28) uint8, labels (N,) int64)`` of Fashion-MNIST's ``split``."""
    base = find_root(root)
    out = []
    for name in IDX[split]:
        path = next((p for p in (base / (name + ".gz"), base / name) if p.is_file()), None)
        if path is None:
            raise ConfigError(f"{base} lacks {name}(.gz): the Fashion-MNIST folder is incomplete")
        out.append(read_idx(path))
    return out[0], out[1].astype(np.int64)


def balanced(labels: np.ndarray, classes: Sequence[int], limit: int | None) -> np.ndarray:
    """The indices of the first images of each of ``classes`` in turn (a round robin, as
    ``FashionMNIST(limit=)`` picks), at most ``limit`` (all when None), sorted."""
    per_class = [np.flatnonzero(labels == c) for c in classes]
    n = min(len(idx) for idx in per_class)
    order = np.stack([idx[:n] for idx in per_class], 1).reshape(-1)
    return np.sort(order[:limit] if limit is not None else order)


class ClassHalf(Dataset):
    """The Fashion-MNIST images of ``classes`` (labels 0..k-1 in that order), a class-balanced
    ``limit`` of them, as ``FashionMNIST(split, size=size, channels=3, mean=mean, std=std)``
    gives them: scaled to [0, 1], resized (bilinear), the gray channel repeated, normalised by
    the per-channel ``mean`` / ``std``. Stored once at one channel; ``indices`` are the images'
    indices in the split."""

    def __init__(self, split: str, classes: Sequence[int], *, size: int, mean: Sequence[float],
                 std: Sequence[float], limit: int | None = None,
                 root: str | os.PathLike | None = None):
        images, labels = read_split(split, root)
        self.indices = balanced(labels, classes, limit)
        x = torch.from_numpy(images[self.indices].copy()).float().div_(255.0).unsqueeze(1)
        if size != 28:
            x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
        self.images = x.contiguous()
        position = {c: i for i, c in enumerate(classes)}
        self.targets = torch.tensor([position[int(c)] for c in labels[self.indices]])
        self.classes = [CLASSES[c] for c in classes]
        self.mean = torch.tensor([float(v) for v in mean]).view(-1, 1, 1)
        self.std = torch.tensor([float(v) for v in std]).view(-1, 1, 1)

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, i: int):
        return (self.images[i].expand(3, -1, -1) - self.mean) / self.std, self.targets[i]


def write_half_scenes(root: str | os.PathLike, classes: Sequence[int], *, train: int, val: int,
                      size: int, seed: int = 0, names: Sequence[str] | None = None,
                      relabel: bool = True, objects: tuple[int, int] = (1, 4),
                      scale: tuple[float, float] = (0.25, 0.5),
                      data_root: str | os.PathLike | None = None) -> Path:
    """A YOLO detection set (``images/``, ``labels/``, ``data.yaml``) of scenes made only of the
    garments of ``classes`` (:func:`autoprune.datasets.scenes.make_scene` given those garments
    alone, so no unlabelled garment of another class is in any image); training scenes from
    Fashion-MNIST's train split, validation scenes from its test split. Labels: ``relabel``
    numbers the classes 0..k-1 in the order given, else they keep their Fashion-MNIST ids;
    ``names`` (data.yaml's, default the classes' names) must cover every id. Returns
    data.yaml."""
    import yaml

    from autoprune.datasets.scenes import make_scene
    from autoprune.engine.files import write_text_atomic

    root = Path(root)
    ids = {c: (i if relabel else c) for i, c in enumerate(classes)}
    names = list(names) if names is not None else [CLASSES[c] for c in classes]
    if max(ids.values()) >= len(names):
        raise ConfigError(f"{len(names)} names do not cover the label ids {sorted(ids.values())}")
    for split, count, offset, source in (("train", train, 0, "train"), ("val", val, 1, "test")):
        images, labels = read_split(source, data_root)
        keep = np.isin(labels, list(classes))
        garments, garment_ids = images[keep], np.array([ids[int(c)] for c in labels[keep]])
        rng = np.random.default_rng(seed * 2 + offset)
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        for n in range(count):
            s = make_scene(rng, garments, garment_ids, size, objects, scale)
            from PIL import Image

            Image.fromarray(s.image).save(root / "images" / split / f"{n:05d}.png")
            lines = [f"{c} {(x0 + x1) / 2 / size:.6f} {(y0 + y1) / 2 / size:.6f} "
                     f"{(x1 - x0) / size:.6f} {(y1 - y0) / size:.6f}"
                     for (x0, y0, x1, y1), c in zip(s.boxes, s.labels)]
            write_text_atomic(root / "labels" / split / f"{n:05d}.txt",
                              "".join(line + "\n" for line in lines))
    data = {"path": str(root.resolve()), "train": "images/train", "val": "images/val",
            "names": dict(enumerate(names))}
    write_text_atomic(root / "data.yaml", yaml.safe_dump(data, sort_keys=False))  # last
    return root / "data.yaml"


# -- publishing the "pretrained" weights ---------------------------------------------------------
def publish_timm(model: torch.nn.Module, arch: str, hub_cache: Path,
                 stats: Mapping[str, Sequence[float]]) -> Path:
    """``model`` (a timm ``arch``) published as timm's default weights of ``arch`` into the hub
    cache ``hub_cache``, its config.json carrying ``stats`` (the mean / std the pretraining
    used); checked to come back: the cached file is what timm resolves for
    ``pretrained=True``, and its data config has those statistics."""
    import timm

    from autoprune.tasks.classification.pretrained import _registered_cfg
    from autoprune.tasks.hub_cache import seed_hf_cache

    if getattr(model, "pretrained_cfg", {}).get("architecture") != arch:  # a rebuilt module
        fresh = timm.create_model(arch, pretrained=False, num_classes=model.num_classes)
        fresh.load_state_dict(model.state_dict())
        model = fresh
    cfg = _registered_cfg(arch, None)
    repo = str(cfg["hf_hub_id"]).partition("@")[0]
    file = seed_hf_cache(model, repo, hub_cache,
                         {"tag": cfg.get("tag"), "mean": list(stats["mean"]),
                          "std": list(stats["std"])})
    resolved = timm_stats(arch)
    if [list(map(float, resolved[k])) for k in ("mean", "std")] != \
            [list(map(float, stats[k])) for k in ("mean", "std")]:
        raise ConfigError(f"timm resolves {arch}'s pretrained statistics to {resolved}, not the "
                          f"{dict(stats)} the pretraining used")
    return file


def timm_stats(arch: str) -> dict[str, tuple[float, ...]]:
    """The mean / std ``pretrained=True`` normalises ``arch``'s inputs with (timm's registered
    config of its default tag)."""
    from autoprune.tasks.classification.pretrained import pretrained_data_config

    cfg = pretrained_data_config(f"timm/{arch}", True)
    return {"mean": tuple(float(v) for v in cfg["mean"]),
            "std": tuple(float(v) for v in cfg["std"])}


@contextlib.contextmanager
def ultralytics_weights_dir(folder: Path) -> Iterator[Path]:
    """Ultralytics' weights dir set to ``folder`` for the block (a copy of its settings: the
    settings file is left as it is), and the current folder an empty one, so ``yolov8n.pt`` is
    found in the weights dir and nowhere else."""
    import ultralytics.utils

    folder.mkdir(parents=True, exist_ok=True)
    saved, cwd = ultralytics.utils.SETTINGS, os.getcwd()
    empty = folder.parent / "cwd"
    empty.mkdir(exist_ok=True)
    ultralytics.utils.SETTINGS = {**saved, "weights_dir": str(folder)}
    os.chdir(empty)
    try:
        yield folder
    finally:
        os.chdir(cwd)
        ultralytics.utils.SETTINGS = saved


def publish_yolo(baseline_stage: Path, weights_dir: Path, name: str = "yolov8n.pt") -> Path:
    """The plain Ultralytics ``best.pt`` of a trained stage (native blocks) published as
    Ultralytics publishes an asset (``strip_optimizer``'s layout), as ``name`` in
    ``weights_dir``."""
    from autoprune.tasks.detection.checkpoints import read_ultralytics
    from autoprune.tasks.detection.pretrained import seed_ultralytics_weights

    native = baseline_stage / "ultralytics" / "weights" / "best.pt"
    if not native.is_file():
        raise ConfigError(f"{native} is missing: the pretraining stage left no Ultralytics model")
    module, _ = read_ultralytics(native)
    return seed_ultralytics_weights(module, name, weights_dir)


# -- stages ----------------------------------------------------------------------------------------
def stage(folder: Path, run: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """``run(folder)``'s figures, kept in ``folder/result.json`` once it finished (a rerun reads
    them back); an interrupted stage's folder is cleared and the stage run again."""
    done = folder / "result.json"
    if done.is_file():
        return json.loads(done.read_text())
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    t0, c0 = time.perf_counter(), time.process_time()
    out = dict(run(folder), seconds=round(time.perf_counter() - t0, 1),
               cpu_seconds=round(time.process_time() - c0, 1))  # wall time counts the load
    tmp = done.with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1))
    os.replace(tmp, done)
    return out


def figures(r: Any, metric: str) -> dict[str, Any]:
    """What the table needs from a pruning run's TrainResult."""
    rep = r.report
    out = {"base": rep["baseline"]["metrics"][metric], "pruned": rep["pruned"]["metrics"][metric],
           "flops": [rep["baseline"]["flops"], rep["pruned"]["flops"]],
           "flops_reduction": rep["flops_reduction"],
           "latency_reduction": rep.get("latency_reduction"),
           "latency_ms": [rep.get("latency_measured", {}).get("baseline_ms"),
                          rep.get("latency_measured", {}).get("pruned_ms")],
           "start_weights": (rep.get("start_weights") or {}).get("id"),
           "baseline_path": str(r.baseline_path), "sens": str(r.sensitivities_path)}
    allocation = rep.get("latency_allocation")
    if allocation:
        out["allocation_achieved"] = allocation.get("achieved")
        out["allocation_method"] = allocation.get("method")
    return out


def settings(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Model ``name``'s settings: its task's full run, --quick's or --tiny's on top."""
    s = dict(MODELS[name])
    s.update(FULL[s["task"]])
    if args.quick:
        s.update(QUICK[s["task"]])
    if args.tiny:
        s.update(TINY[s["task"]])
    given = {"size": args.size, "train": args.train_images, "val": args.val_images,
             "epochs": args.epochs, "retrain": args.retrain_epochs}
    s.update({k: v for k, v in given.items() if v is not None})
    s["table"] = min(s["table"], s["val"]) if s.get("table") else None
    return s


def key_of(s: Mapping[str, Any], keys: Sequence[str], seed: int) -> str:
    """A folder name for the settings ``keys`` of ``s``: readable head + a short hash."""
    text = json.dumps({k: s.get(k) for k in keys}, sort_keys=True, default=str)
    return f"{s['size']}px-seed{seed}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


PRETRAIN_KEYS = ("arch", "size", "batch", "pretrain_images", "pretrain_val", "pretrain_epochs",
                 "pretrain_lr", "train_args", "scenes", "val_on_train")
FLOW_KEYS = PRETRAIN_KEYS + ("train", "val", "epochs", "retrain", "ratios", "table")


class Classification:
    """The classification journey of one timm model."""

    metric = "top1"

    def __init__(self, name: str, s: Mapping[str, Any], work: Path, seed: int):
        self.name, self.s, self.work, self.seed = name, s, work, seed
        self.arch = s["arch"]
        self.stats = timm_stats(self.arch)  # what pretrained=True normalises with
        self.hub = work / "hf" / "hub"

    def halves(self, classes: Sequence[int], train: int, val: int) -> tuple[Dataset, Dataset]:
        common = dict(size=self.s["size"], **self.stats)
        return (ClassHalf("train", classes, limit=train, **common),
                ClassHalf("test", classes, limit=val, **common))

    def common(self) -> dict[str, Any]:
        s = self.s
        return dict(input_size=s["size"], batch_size=s["batch"], device="cpu", progress=False,
                    seed=self.seed)

    def pretrain(self, folder: Path) -> dict[str, Any]:
        from autoprune import classification as cls

        s = self.s
        train, val = self.halves(PRETRAIN_CLASSES, s["pretrain_images"], s["pretrain_val"])
        torch.manual_seed(self.seed)
        r = cls.train(self.arch, train, val, epochs=s["pretrain_epochs"], lr=s["pretrain_lr"],
                      save_dir=folder, mean=list(self.stats["mean"]),
                      std=list(self.stats["std"]), **self.common())
        return {"top1": r.metrics["top1"], "checkpoint": str(r.baseline_path),
                "images": len(train), "val_images": len(val)}

    def publish(self, pretrained: Mapping[str, Any]) -> str:
        from autoprune import classification as cls

        model = cls.load_model(pretrained["checkpoint"])
        return str(publish_timm(model, self.arch, self.hub, self.stats))

    def flow(self, start: str, target: str, folder: Path, base: Mapping[str, Any] | None,
             **extra: Any) -> Any:
        """One run of the one-call flow on the transfer half (``base``: the finished
        ``flops`` run whose base model and sensitivity file the latency run reuses)."""
        from autoprune import classification as cls
        from autoprune.tasks.classification.adapter import FINE_TUNE_LR, SCRATCH_LR

        s = self.s
        train, val = self.halves(TRANSFER_CLASSES, s["train"], s["val"])
        given = dict(pretrained=True) if start == "pretrained" else \
            dict(mean=list(self.stats["mean"]), std=list(self.stats["std"]))
        torch.manual_seed(self.seed)
        if target is None:  # plain fine-tuning: the base model alone (the lr runs)
            return cls.train(self.arch, train, val, epochs=s["epochs"], save_dir=folder,
                             **self.common(), **given, **extra)
        opts = dict(self.common(), ratios=tuple(float(r) for r in s["ratios"].split(",")),
                    sensitivity_options={"eval_images": s["table"]} if s["table"] else None,
                    epochs=s["retrain"], save_dir=folder, **{**TARGETS[target], **extra})
        if base is None:  # the one-call flow from the start: base model first
            return cls.train(self.arch, train, val, pretrain_epochs=s["epochs"],
                             sensitivities_file=folder / "sensitivities.json", **opts, **given)
        # the same base model and table; the retraining's lr as the flops run's (the default
        # of its start: a checkpoint given as pretrain_weights would get the scratch default)
        lr = FINE_TUNE_LR if start == "pretrained" else SCRATCH_LR
        return cls.train(self.arch, train, val, pretrain_weights=base["baseline_path"],
                         sensitivities_file=base["sens"], lr=opts.pop("lr", lr),
                         mean=list(self.stats["mean"]), std=list(self.stats["std"]), **opts)

    @contextlib.contextmanager
    def environment(self) -> Iterator[None]:
        with hub_environment(self.hub.parent):
            yield


@contextlib.contextmanager
def hub_environment(home: Path) -> Iterator[None]:
    """``HF_HOME=home`` and ``HF_HUB_OFFLINE=1`` for the block (restored after)."""
    names = ("HF_HOME", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE")
    saved = {n: os.environ.get(n) for n in names}
    os.environ.update(HF_HOME=str(home), HF_HUB_OFFLINE="1")
    for n in names[2:]:
        os.environ.pop(n, None)
    try:
        yield
    finally:
        for n, v in saved.items():
            if v is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = v


class Detection:
    """The detection journey of YOLOv8n."""

    metric = "map50_95"

    def __init__(self, name: str, s: Mapping[str, Any], work: Path, seed: int):
        self.name, self.s, self.work, self.seed = name, s, work, seed
        self.weights = work / "yolo_weights"

    def data(self, which: str) -> Path:
        """The scenes of one half, written once per size and count."""
        s = self.s
        scenes = dict(s.get("scenes") or {})
        if which == "pretrain":
            args = dict(classes=PRETRAIN_CLASSES, train=s["pretrain_images"],
                        val=s["pretrain_val"], relabel=False, names=CLASSES, seed=0)
        else:
            args = dict(classes=TRANSFER_CLASSES, train=s["train"], val=s["val"], seed=1)
        mark = hashlib.sha1(json.dumps([scenes, s.get("val_on_train")], default=str)
                            .encode()).hexdigest()[:6]
        root = self.work / f"scenes-{which}-{s['size']}px-{args['train']}-{args['val']}-{mark}"
        data = root / "data.yaml"
        if not data.is_file():
            write_half_scenes(root, size=s["size"], **args, **scenes)
            if s.get("val_on_train"):
                import yaml

                cfg = yaml.safe_load(data.read_text())
                data.write_text(yaml.safe_dump({**cfg, "val": cfg["train"]}, sort_keys=False))
        return data

    def common(self) -> dict[str, Any]:
        s = self.s
        return dict(input_size=s["size"], batch_size=s["batch"], device="cpu", progress=False,
                    seed=self.seed, train_args=dict(s["train_args"]))

    def pretrain(self, folder: Path) -> dict[str, Any]:
        from autoprune import detection as det

        r = det.train("yolov8n.yaml", self.data("pretrain"), epochs=self.s["pretrain_epochs"],
                      save_dir=folder, **self.common())
        return {"map50_95": r.metrics["map50_95"], "checkpoint": str(r.baseline_path),
                "stage": str(Path(r.baseline_path).parent)}

    def publish(self, pretrained: Mapping[str, Any]) -> str:
        return str(publish_yolo(Path(pretrained["stage"]), self.weights))

    def flow(self, start: str, target: str, folder: Path, base: Mapping[str, Any] | None,
             **extra: Any) -> Any:
        from autoprune import detection as det

        s = self.s
        opts = dict(self.common(), ratios=tuple(float(r) for r in s["ratios"].split(",")),
                    epochs=s["retrain"], save_dir=folder, **{**TARGETS[target], **extra})
        if s.get("table"):
            opts["sensitivity_options"] = {"eval_images": s["table"]}
        data = self.data("transfer")
        if base is None:
            model = "yolov8n.pt" if start == "pretrained" else "yolov8n.yaml"
            return det.train(model, data, pretrain_epochs=s["epochs"],
                             sensitivities_file=folder / "sensitivities.json", **opts)
        return det.train(base["baseline_path"], data, sensitivities_file=base["sens"], **opts)

    @contextlib.contextmanager
    def environment(self) -> Iterator[None]:
        os.environ.setdefault("YOLO_OFFLINE", "1")
        with ultralytics_weights_dir(self.weights):
            yield


JOURNEYS = {"classification": Classification, "detection": Detection}


def journey(name: str, s: Mapping[str, Any], work: Path, args: argparse.Namespace,
            lr_runs: bool) -> dict[str, Any]:
    """Pretraining, publishing, then the flows from each start at each target (and the lr
    runs); the figures of every stage."""
    j = JOURNEYS[s["task"]](name, s, work, args.seed)
    pre_dir = work / name / f"pretrain-{key_of(s, PRETRAIN_KEYS, args.seed)}"
    flow_dir = work / name / f"transfer-{key_of(s, FLOW_KEYS, args.seed)}"
    row: dict[str, Any] = {"model": name, "task": s["task"], "metric": j.metric,
                           "settings": {k: v for k, v in s.items()}, "runs": {}}
    with j.environment():
        t0 = time.perf_counter()
        pre = stage(pre_dir, j.pretrain)
        row["pretrain"] = pre
        row["published"] = j.publish(pre)  # every time: cheap, and the cache may be new
        print(f"\n## {name}: pretrained on classes {PRETRAIN_CLASSES} ({j.metric} "
              f"{pre[j.metric]:.4f} on their test images, {pre['seconds']:.0f} s), published as "
              f"{row['published']}", flush=True)
        for start in STARTS:
            for target in args.targets:
                base = row["runs"].get(f"{start}/flops") if target != "flops" else None
                if target != "flops" and base is None:
                    continue

                def run(folder: Path, start=start, target=target, base=base) -> dict[str, Any]:
                    try:
                        return figures(j.flow(start, target, folder, base), j.metric)
                    except ConfigError as e:  # a latency target out of the table's reach
                        most = reachable_most(str(e))
                        if target == "flops" or most is None:
                            raise
                    # the nearest 5-point step below what the table allows, said in the table
                    lower = math.floor((most - 0.02) * 20) / 20
                    if lower < 0.1:
                        return {"failed": f"-40 % unreachable (at most -{most:.1%})"}
                    shutil.rmtree(folder)
                    folder.mkdir()
                    out = figures(j.flow(start, target, folder, base, pruned_latency=lower),
                                  j.metric)
                    return {**out, "target": lower, "most": most}

                out = stage(flow_dir / start / target, run)
                row["runs"][f"{start}/{target}"] = out
                print(f"[transfer] {name} {start} {target}: "
                      + (f"failed: {out['failed']}" if "failed" in out else
                         f"base {out['base']:.4f} -> pruned {out['pruned']:.4f}, FLOPs "
                         f"-{out['flops_reduction']:.1%}, latency "
                         f"-{out['latency_reduction']:.1%}") + f" ({out['seconds']:.0f} s)",
                      flush=True)
        if lr_runs:
            row["lr"] = {}
            for lr in args.lrs:
                for seed in args.lr_seeds:
                    j.seed = seed

                    def run(folder: Path, lr=lr) -> dict[str, Any]:
                        r = j.flow("pretrained", None, folder, None, lr=lr)
                        return {"top1": r.metrics["top1"]}

                    out = stage(flow_dir / "lr" / f"{lr:g}-seed{seed}", run)
                    row["lr"][f"{lr:g}/{seed}"] = out
                    print(f"[transfer] {name} fine-tuning lr {lr:g} seed {seed}: top-1 "
                          f"{out['top1']:.4f} ({out['seconds']:.0f} s)", flush=True)
            j.seed = args.seed
        row["seconds"] = round(time.perf_counter() - t0, 1)
    return row


def reachable_most(message: str) -> float | None:
    """The largest latency reduction a table allows, from ratios_by_latency's error."""
    found = re.search(r"the most it allows is ([0-9.]+)", message)
    return float(found.group(1)) if found else None


# -- tables ----------------------------------------------------------------------------------------
def _cell(run: Mapping[str, Any] | None) -> str:
    if not run:
        return "-"
    if "failed" in run:
        return run["failed"]
    what = f"FLOPs -{run['flops_reduction']:.0%}, latency -{run['latency_reduction']:.0%}"
    if "target" in run:  # -40 % was out of reach: the nearest target below
        what = (f"-40 % unreachable (table max -{run['most']:.0%}); at "
                f"`pruned_latency={run['target']:g}`: " + what)
    return f"{run['pruned']:.3f} ({what})"


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The main table: base and pruned metric per model and start."""
    lines = ["| model | metric | start | base (fine-tuned / trained) | pruned, `pruned_flops=0.5` "
             "| pruned, `pruned_latency=0.4` |", "|---|---|---|---:|---:|---:|"]
    for r in rows:
        metric = "top-1" if r["metric"] == "top1" else "mAP50-95"
        for start in STARTS:
            flops = r["runs"].get(f"{start}/flops")
            latency = r["runs"].get(f"{start}/latency")
            base = f"{flops['base']:.3f}" if flops else "-"
            lines.append(f"| {r['model']} | {metric} | {start} | {base} | "
                         f"{_cell(flops)} | {_cell(latency)} |")
    return "\n".join(lines)


def lr_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The fine-tuning lr runs: top-1 per lr and seed, and their mean."""
    lines: list[str] = []
    for r in rows:
        if not r.get("lr"):
            continue
        lrs = sorted({k.split("/")[0] for k in r["lr"]}, key=float, reverse=True)
        seeds = sorted({k.split("/")[1] for k in r["lr"]}, key=int)
        lines += [""] if lines else []  # one table per model
        lines += [f"| {r['model']}: fine-tuning lr | " + " | ".join(f"seed {s}" for s in seeds)
                  + " | mean |", "|---|" + "---:|" * (len(seeds) + 1)]
        for lr in lrs:
            values = [r["lr"][f"{lr}/{s}"]["top1"] for s in seeds]
            lines.append(f"| {lr}{' (default)' if float(lr) == 0.01 else ''} | "
                         + " | ".join(f"{v:.3f}" for v in values)
                         + f" | {sum(values) / len(values):.4f} |")
    return "\n".join(lines)


def last_line(row: Mapping[str, Any]) -> str:
    get = lambda key, field: row["runs"].get(key, {}).get(field, math.nan)  # noqa: E731
    return (f"model={row['model']} pretrained_base={get('pretrained/flops', 'base'):.4f} "
            f"scratch_base={get('scratch/flops', 'base'):.4f} "
            f"pretrained_flops={get('pretrained/flops', 'pruned'):.4f} "
            f"scratch_flops={get('scratch/flops', 'pruned'):.4f} "
            f"pretrained_latency={get('pretrained/latency', 'pruned'):.4f} "
            f"scratch_latency={get('scratch/latency', 'pruned'):.4f}")


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", default=",".join(MODELS), help="comma list of " + ", ".join(MODELS))
    p.add_argument("--quick", action="store_true", help="resnet18 only, small (minutes)")
    p.add_argument("--tiny", action="store_true", help="seconds-long settings (the tests)")
    p.add_argument("--size", type=int, help="input pixels (overrides the task's)")
    p.add_argument("--train-images", type=int,
                   help="training images (scenes) of the transfer half (classification 2500, "
                        "detection 160)")
    p.add_argument("--val-images", type=int, help="its evaluation images (1000; scenes: 64)")
    p.add_argument("--epochs", type=int, help="base epochs on the transfer half (3; 15)")
    p.add_argument("--retrain-epochs", type=int, help="epochs after pruning (3; 10)")
    p.add_argument("--lrs", default=",".join(f"{v:g}" for v in LRS),
                   help="fine-tuning learning rates compared (default 0.05,0.01,0.003)")
    p.add_argument("--lr-models", default="resnet18,mobilenetv3_large_100",
                   help="models whose fine-tuning lr is compared (classification; '' for none)")
    p.add_argument("--lr-seeds", default=None,
                   help="seeds of the lr runs (default 0,1,2; --quick and --tiny: 0)")
    p.add_argument("--targets", default=",".join(TARGETS),
                   help="flops (pruned_flops=0.5), latency (pruned_latency=0.4, reusing the "
                        "flops run's base model and table), or both (default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads (training and timing)")
    p.add_argument("--work-dir", help="keep every stage here (a rerun reuses finished stages) "
                   "instead of a temporary folder")
    p.add_argument("--json", help="write the figures to this file")
    args = p.parse_args(argv)
    names = ["resnet18"] if args.quick and args.models == ",".join(MODELS) else \
        [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        p.error(f"unknown model(s) {unknown}: pick from {', '.join(MODELS)}")
    args.targets = [v for v in args.targets.split(",") if v]
    if not args.targets or args.targets[0] != "flops" or set(args.targets) - set(TARGETS):
        p.error("--targets: flops first (the latency run reuses its base model), then latency")
    args.lrs = [float(v) for v in args.lrs.split(",") if v]
    seeds = args.lr_seeds or ("0" if args.quick or args.tiny else "0,1,2")
    args.lr_seeds = [int(v) for v in seeds.split(",") if v]
    lr_models = {n for n in args.lr_models.split(",") if n}
    torch.set_num_threads(args.threads)
    rows, t0, c0 = [], time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory(prefix="autoprune-transfer-") as tmp:
        work = Path(args.work_dir or tmp).resolve()
        work.mkdir(parents=True, exist_ok=True)
        for name in names:
            s = settings(name, args)
            rows.append(journey(name, s, work, args,
                                lr_runs=name in lr_models and s["task"] == "classification"))
    total, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"\n## Transfer: pretrained on classes 0-4, fine-tuned and pruned on classes 5-9 "
          f"(one seed, {platform.processor() or platform.machine()}, {args.threads} thread)\n\n"
          + table(rows), flush=True)
    lrs = lr_table(rows)
    if lrs:
        print("\n" + lrs, flush=True)
    print(f"\nwall time {total / 60:.1f} min (CPU time of this process {cpu / 60:.1f} min; "
          f"stages reused from --work-dir count 0): " + ", ".join(
              f"{r['model']} {r['seconds'] / 60:.1f} min" for r in rows), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    print(last_line(rows[0]), flush=True)
    return rows


if __name__ == "__main__":
    main()

"""benchmarks/reproduce/*.yaml and benchmarks/transfer.py (issue 31), on the CPU, offline.

Each recipe config runs end to end through `autoprune train <config>` on a tiny stand-in folder
written here in the layout the recipe expects (ImageNet-style folder, PaddleX lists, VOC with
PaddleX lists, PaddleX SegDataset), its pretrained weights seeded into the library's own cache;
command-line flags shrink the data paths, sizes and epochs, as a user's flags override YAML keys.
The transfer benchmark is run at --tiny for one model, and its pieces (the class halves, the
publishing into the hub cache and Ultralytics' weights dir) are checked one by one."""
from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from autoprune.tasks import weights
from conftest import needs_fmnist

pytestmark = needs_fmnist
ROOT = Path(__file__).resolve().parents[1]
REPRODUCE = ROOT / "benchmarks" / "reproduce"
RECIPES = ("paddleslim_mobilenetv1_imagenet.yaml", "paddlex_mobilenetv2_vegetables.yaml",
           "paddlex_yolov3_insects.yaml", "paddlex_unet_optic_disc.yaml")
TINY = ["--epochs", "1", "--pretrain-epochs", "1", "--batch-size", "8", "--num-workers", "0",
        "--device", "cpu", "--progress", "false", "--ratios", "[0.5]"]


def _load_transfer():
    spec = importlib.util.spec_from_file_location("transfer_bench",
                                                  ROOT / "benchmarks" / "transfer.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


transfer = _load_transfer()


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """A probe of a real host fails the test; every library reads its cache offline."""
    def refuse(url, timeout=weights.PROBE_TIMEOUT):
        raise AssertionError(f"a test asked whether {url} is reachable")

    monkeypatch.setattr(weights, "reachable", refuse)
    monkeypatch.setattr(weights, "_probes", {})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)


def run_recipe(name: str, tmp_path: Path, *flags: str) -> dict:
    """`autoprune train benchmarks/reproduce/<name> <flags>` into tmp_path/run; its report."""
    from autoprune.cli import main

    run = tmp_path / "run"
    assert main(["train", str(REPRODUCE / name), "--save-dir", str(run),
                 "--sensitivities-file", str(run / "sensitivities.json"), *TINY, *flags]) == 0
    return json.loads((run / "report.json").read_text())


# -- the recipes -----------------------------------------------------------------------------------
def test_every_recipe_names_its_figure_layout_and_multi_gpu_command():
    assert sorted(p.name for p in REPRODUCE.glob("*.yaml")) == sorted(RECIPES)
    listed = (REPRODUCE / "README.md").read_text()
    for name in RECIPES:
        text = (REPRODUCE / name).read_text()
        header = text.split("\ntask:")[0]
        assert "Published" in header and "Data:" in header, name
        assert f"torchrun --nproc_per_node 8 -m autoprune train benchmarks/reproduce/{name}" \
            in header, name
        assert name in listed, name
        config = yaml.safe_load(text)
        assert config["save_dir"] == f"runs/{name[:-5]}"
        assert Path(config["sensitivities_file"]).parent == Path(config["save_dir"])


def test_paddleslim_mobilenetv1_on_an_imagenet_style_folder(tmp_path, monkeypatch):
    """timm's default weights of mobilenetv1_100 from a seeded hub cache; their pretrained
    config's normalisation (mean / std 0.5) reaches the checkpoints; -50 % FLOPs."""
    import timm

    from autoprune.datasets.formats import write_image_folder
    from autoprune.engine.checkpoint import read_pruned_metadata
    from autoprune.tasks.classification.pretrained import seed_timm_cache

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    seed_timm_cache(timm.create_model("mobilenetv1_100"), cache_dir=tmp_path / "hf" / "hub")
    data = write_image_folder(tmp_path / "imagenet", train=40, val=40)  # every class
    report = run_recipe("paddleslim_mobilenetv1_imagenet.yaml", tmp_path,
                        "--train-data", str(data / "train"), "--eval-data", str(data / "val"),
                        "--input-size", "32", "--sensitivity-options", "{eval_images: 20}")
    assert report["start_weights"]["id"] == "timm/mobilenetv1_100.ra4_e3600_r224_in1k"
    assert report["pruned_flops_target"] == 0.5
    assert report["flops_reduction"] == pytest.approx(0.5, abs=0.02)
    assert report["data"].startswith("imagefolder, 10 classes")
    meta = read_pruned_metadata(tmp_path / "run" / "pruned" / "best.pt")
    assert meta["data"]["mean"] == [0.5, 0.5, 0.5] and meta["data"]["interpolation"] == "bicubic"


def test_paddlex_mobilenetv2_on_paddlex_lists(tmp_path, monkeypatch):
    import torchvision

    from autoprune.datasets.formats import write_paddlex_classification
    from autoprune.tasks.classification.pretrained import seed_torchvision_cache

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "th"))
    monkeypatch.setattr(torch.hub, "_hub_dir", None)
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(1)
    seed_torchvision_cache(torchvision.models.mobilenet_v2(weights=None), "mobilenet_v2",
                           "IMAGENET1K_V2")
    data = write_paddlex_classification(tmp_path / "vegetables_cls", train=40, val=20)
    report = run_recipe("paddlex_mobilenetv2_vegetables.yaml", tmp_path,
                        "--train-data", str(data), "--input-size", "32")
    assert report["start_weights"]["id"] == "MobileNet_V2_Weights.IMAGENET1K_V2"
    assert report["eval_metric_loss"] == 0.05
    assert report["data"] == "paddlex, 10 classes, 40 train + 20 val images"


@pytest.fixture
def yolo_weights_dir(monkeypatch, tmp_path):
    """Ultralytics' weights dir (a copy of its settings: the file is left alone), the current
    folder empty, Ultralytics offline."""
    import ultralytics.utils

    from autoprune.tasks.detection import offline

    folder = tmp_path / "yolo_weights"
    monkeypatch.setattr(ultralytics.utils, "SETTINGS",
                        {**ultralytics.utils.SETTINGS, "weights_dir": str(folder)})
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("YOLO_OFFLINE", "1")
    monkeypatch.delattr(offline, "USER_YOLO_OFFLINE", raising=False)
    return folder


def test_paddlex_yolov3_recipe_on_voc_with_paddlex_lists(tmp_path, yolo_weights_dir):
    """yolov8s.pt (80 classes) from the weights dir, its head adapted to the VOC set's 10
    classes, fine-tuned, pruned by eval_metric_loss and retrained. A barely trained stand-in
    scores mAP 0, which no sensitivity can be measured against: the bundled DEFAULT profile of
    yolov8s stands in for the measured table (tests/test_detection.py measures tables)."""
    from autoprune import detection as det
    from autoprune.datasets.formats import write_voc_detection
    from autoprune.tasks.detection import models as yolo
    from autoprune.tasks.detection.pretrained import seed_ultralytics_weights

    with yolo.quiet():
        coco = yolo.DetectionModel("yolov8s.yaml", nc=80, verbose=False)
    seed_ultralytics_weights(coco, "yolov8s.pt")
    data = write_voc_detection(tmp_path / "insect_det", train=16, val=8, size=64,
                               lists="paddlex")
    report = run_recipe("paddlex_yolov3_insects.yaml", tmp_path, "--data", str(data),
                        "--input-size", "64", "--sensitivities-file", "DEFAULT",
                        "--train-args", "{warmup_epochs: 0, mosaic: 0.0}")
    assert report["start_weights"]["id"] == "yolov8s.pt"
    assert report["data"].startswith("voc, 2 splits, 10 classes")
    assert report["eval_metric_loss"] == 0.05 and report["flops_reduction"] > 0
    assert yolo.model_nc(det.load_model(tmp_path / "run" / "pruned" / "best.pt")) == 10


def test_paddlex_unet_recipe_on_a_paddlex_segdataset(tmp_path, monkeypatch):
    import segmentation_models_pytorch as smp

    from autoprune.datasets.formats import write_paddlex_segmentation
    from autoprune.tasks.segmentation.pretrained import seed_smp_cache

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(2)
    seed_smp_cache(smp.Unet("vgg13_bn", encoder_weights=None, classes=2), "vgg13_bn",
                   "imagenet", tmp_path / "hf" / "hub")
    data = write_paddlex_segmentation(tmp_path / "optic_disc_seg", train=16, val=8, size=32)
    report = run_recipe("paddlex_unet_optic_disc.yaml", tmp_path, "--train-data", str(data),
                        "--input-size", "32")
    start = report["start_weights"]
    assert start["source"] == "smp" and "vgg13_bn" in start["id"]
    assert report["eval_metric_loss"] == 0.05
    assert report["data"].startswith("paddlex")


# -- benchmarks/transfer.py ------------------------------------------------------------------------
def test_a_class_half_is_fashion_mnist_as_the_library_normalises_it():
    """ClassHalf gives the pixels FashionMNIST(size, channels=3, mean, std) gives for the same
    images, with the half's classes numbered 0..4 in order."""
    from autoprune.datasets.fashion_mnist import CLASSES, FashionMNIST

    stats = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    half = transfer.ClassHalf("test", transfer.TRANSFER_CLASSES, size=32, limit=50, **stats)
    full = FashionMNIST("test", size=32, channels=3, limit=100, **stats)
    _, labels = transfer.read_split("test")
    kept = list(transfer.balanced(labels, range(10), 100))  # the images FashionMNIST kept
    assert len(half) == 50 and half.classes == list(CLASSES[5:])
    assert sorted(half.targets.tolist()) == sorted(list(range(5)) * 10)
    for i in (0, 7, 49):
        image, target = half[i]
        index = int(half.indices[i])
        assert labels[index] == transfer.TRANSFER_CLASSES[int(target)]
        assert torch.allclose(image, full[kept.index(index)][0], atol=1e-6)
    pretrain = transfer.ClassHalf("train", transfer.PRETRAIN_CLASSES, size=32, limit=20, **stats)
    assert set(transfer.read_split("train")[1][pretrain.indices]) == {0, 1, 2, 3, 4}


def test_the_scenes_of_a_half_hold_only_its_garments(tmp_path):
    data = transfer.write_half_scenes(tmp_path / "t", transfer.TRANSFER_CLASSES, train=6, val=3,
                                      size=64, seed=1)
    config = yaml.safe_load(data.read_text())
    assert config["names"] == {i: n for i, n in enumerate(transfer.CLASSES[5:])}
    ids = {int(line.split()[0]) for f in (tmp_path / "t" / "labels").rglob("*.txt")
           for line in f.read_text().splitlines()}
    assert ids and ids <= set(range(5))
    assert len(list((tmp_path / "t" / "images" / "val").glob("*.png"))) == 3
    pre = transfer.write_half_scenes(tmp_path / "p", transfer.PRETRAIN_CLASSES, train=6, val=3,
                                     size=64, relabel=False, names=transfer.CLASSES)
    assert len(yaml.safe_load(pre.read_text())["names"]) == 10  # a 10-class head, 0-4 used
    ids = {int(line.split()[0]) for f in (tmp_path / "p" / "labels").rglob("*.txt")
           for line in f.read_text().splitlines()}
    assert ids and ids <= set(transfer.PRETRAIN_CLASSES)


def test_publishing_into_the_hub_cache_is_what_pretrained_true_loads(tmp_path, monkeypatch):
    """The "pretrained" model comes back through pretrained=True: every tensor but the head the
    published one's, a fresh head, and the statistics the pretraining normalised with."""
    import timm

    from autoprune.errors import ConfigError
    from autoprune.tasks.classification.pretrained import create_pretrained

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    torch.manual_seed(3)
    model = timm.create_model("resnet18", num_classes=5)
    stats = transfer.timm_stats("resnet18")
    file = transfer.publish_timm(model, "resnet18", tmp_path / "hf" / "hub", stats)
    assert "models--timm--resnet18.a1_in1k" in str(file)
    config = json.loads((file.parent / "config.json").read_text())
    assert config["pretrained_cfg"]["mean"] == list(stats["mean"])
    loaded, prov, data = create_pretrained("timm/resnet18", 5, True)
    mine, theirs = loaded.state_dict(), model.state_dict()
    assert all(torch.equal(mine[k], v) for k, v in theirs.items() if not k.startswith("fc."))
    assert not torch.equal(mine["fc.weight"], theirs["fc.weight"])  # a new head
    assert tuple(data["mean"]) == stats["mean"] and Path(prov.file) == file
    with pytest.raises(ConfigError, match="not the"):  # timm would normalise otherwise
        transfer.publish_timm(model, "resnet18", tmp_path / "hf" / "hub",
                              {"mean": (0.286,) * 3, "std": (0.353,) * 3})


def test_publishing_yolo_weights_into_the_weights_dir(tmp_path, yolo_weights_dir):
    from autoprune.tasks.detection import models as yolo
    from autoprune.tasks.detection.pretrained import load_pretrained, seed_ultralytics_weights

    stage = tmp_path / "pretrain" / "baseline"
    with yolo.quiet():
        trained = yolo.DetectionModel("yolov8n.yaml", nc=10, verbose=False)
    seed_ultralytics_weights(trained, "best.pt", stage / "ultralytics" / "weights")
    file = transfer.publish_yolo(stage, yolo_weights_dir)
    assert file == yolo_weights_dir / "yolov8n.pt"
    module, prov = load_pretrained("yolov8n.pt")
    assert prov.id == "yolov8n.pt" and yolo.model_nc(module) == 10
    state = trained.half().float().state_dict()  # published in half precision, as Ultralytics
    assert all(torch.equal(v, state[k]) for k, v in module.state_dict().items())


def test_the_tiny_transfer_run_then_a_rerun_reuses_every_stage(tmp_path, capsys):
    threads = torch.get_num_threads()
    try:
        argv = ["--tiny", "--models", "resnet18", "--targets", "flops", "--lrs", "0.01",
                "--work-dir", str(tmp_path / "w")]
        rows = transfer.main(argv)
        first = capsys.readouterr().out
        again = transfer.main(argv)
        second = capsys.readouterr().out
    finally:
        torch.set_num_threads(threads)
    row = rows[0]
    assert row["runs"]["pretrained/flops"]["start_weights"] == "timm/resnet18.a1_in1k"
    assert row["runs"]["scratch/flops"]["start_weights"] is None
    assert row["runs"]["pretrained/flops"]["flops_reduction"] == pytest.approx(0.5, abs=0.02)
    assert set(row["lr"]) == {"0.01/0"}
    assert "| resnet18 | top-1 | pretrained |" in first and "| 0.01 (default) |" in first
    assert re.search(r"^model=resnet18 pretrained_base=\S+ scratch_base=", first, re.M)
    assert again[0]["runs"] == row["runs"] and again[0]["lr"] == row["lr"]
    assert "[autoprune] data:" not in second  # nothing trained again
    results = list((tmp_path / "w").rglob("result.json"))
    assert len(results) == 4  # pretraining, two flows, one lr run
    assert np.isfinite(row["runs"]["scratch/flops"]["pruned"])

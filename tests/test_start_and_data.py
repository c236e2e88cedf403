"""The one-call flow from where users start (issue 31: pretrained weights through each library's
cache, offline, seeded here) and on the data they bring (issue 34: COCO, VOC and PaddleX layouts of
the same scenes give the YOLO-format run's numbers). No network; tiny models and images."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
import yaml

import autoprune as ap
from autoprune import classification as cls
from autoprune.tasks import hub_cache, weights
from conftest import needs_fmnist, refuse_network_probes

pytestmark = needs_fmnist
SMALL = dict(epochs=1, batch_size=8, input_size=32, progress=False)


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """A probe of a real host fails the test; every library reads the hub cache offline."""
    refuse_network_probes(monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def paddlex(tmp_path_factory):
    from autoprune.datasets.formats import write_paddlex_classification

    return write_paddlex_classification(tmp_path_factory.mktemp("pd"), train=40, val=20)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """An HF home whose cache holds known resnet18 weights as timm/resnet18.a1_in1k."""
    import timm

    home = tmp_path_factory.mktemp("hf")
    torch.manual_seed(0)
    source = timm.create_model("resnet18", pretrained=False)
    hub_cache.seed_hf_cache(source, "timm/resnet18.a1_in1k", home / "hub")
    return home, source.state_dict()


# -- pretrained starting points --------------------------------------------------------------
@pytest.mark.parametrize("spelling", [dict(pretrained=True), dict(pretrain_weights="IMAGENET"),
                                      dict(pretrained="timm/resnet18.a1_in1k")])
def test_classification_starts_from_the_hub_weights_offline(spelling, hub, paddlex, tmp_path,
                                                            monkeypatch):
    """pretrained=True (timm's word), pretrain_weights='IMAGENET' (PaddleX's) and a tag start
    from exactly the cached weights: every tensor but the head equal, the head made for the
    data's 10 classes; the provenance is in the checkpoint and the report."""
    home, source = hub
    monkeypatch.setenv("HF_HOME", str(home))
    from autoprune.tasks.classification.adapter import ClassificationAdapter

    adapter = ClassificationAdapter(paddlex, input_size=32, pretrained=spelling.get(
        "pretrained", "IMAGENET"))
    model, weights_given = adapter.prepare_model("resnet18", spelling.get("pretrain_weights"),
                                                 tmp_path)
    assert weights_given is None
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in source.items() if not k.startswith("fc."))
    assert state["fc.weight"].shape == (10, 512)
    r = cls.train("resnet18", paddlex, save_dir=tmp_path / "run", **SMALL, **spelling)
    start = ap.read_pruned_metadata(r.baseline_path)["start_weights"]
    assert start["id"] == "timm/resnet18.a1_in1k" and start["source"] == "timm"
    assert start["sha256"] == weights.sha256_of(start["file"])
    assert yaml.safe_load((tmp_path / "run" / "args.yaml").read_text())["lr"] is None
    assert r.model.fc.out_features == 10


def test_the_pretrained_run_prunes_and_reports_its_starting_weights(hub, paddlex, tmp_path,
                                                                     monkeypatch, capsys):
    home, _ = hub
    monkeypatch.setenv("HF_HOME", str(home))
    r = cls.train("resnet18", paddlex, pretrained=True, save_dir=tmp_path / "run",
                  sensitivities_file=tmp_path / "s.json", ratios=(0.5,), pruned_flops=0.3,
                  **SMALL)
    assert r.report["start_weights"]["id"] == "timm/resnet18.a1_in1k"
    assert r.report["data"] == "paddlex, 10 classes, 40 train + 20 val images"
    md = (tmp_path / "run" / "report.md").read_text()
    assert "Starting weights: timm timm/resnet18.a1_in1k" in md
    assert ap.read_pruned_metadata(r.pruned_path)["data"]["mean"] == [0.485, 0.456, 0.406]
    assert cls.load_model(r.pruned_path).fc.out_features == 10
    from autoprune.cli import main

    assert main(["show", str(r.pruned_path)]) == 0
    shown = capsys.readouterr().out
    assert "starting weights: timm timm/resnet18.a1_in1k" in shown and "pruned: yes" in shown


def test_a_run_from_a_pretrained_runs_checkpoint_keeps_its_inputs_and_fine_tuning_lr(
        paddlex, tmp_path, monkeypatch):
    """pretrain_weights=<the base model of a pretrained=True run>: the new run normalises its
    images as that model was trained (the checkpoint's mean/std/interpolation) and fine-tunes
    at 0.01, unless the user sets them; a checkpoint trained from scratch changes nothing."""
    import timm

    seen = {}
    monkeypatch.setattr("autoprune.flow.run.train", lambda adapter, *a, **k: seen.update(
        adapter=adapter))
    net = timm.create_model("resnet18", num_classes=10)
    pretrained = ap.save_pruned(
        net, tmp_path / "pretrained.pt", task="classification", arch="timm/resnet18",
        build={"num_classes": 10}, input_size=32,
        data={"mean": [0.1, 0.2, 0.3], "std": [0.4, 0.5, 0.6], "interpolation": "bicubic"},
        start_weights={"source": "timm", "id": "timm/resnet18.a1_in1k"})
    cls.train("resnet18", paddlex, pretrain_weights=pretrained, **SMALL)
    adapter = seen["adapter"]
    assert adapter.cfg.lr == 0.01
    assert adapter.data_settings() == {"mean": [0.1, 0.2, 0.3], "std": [0.4, 0.5, 0.6],
                                       "interpolation": "bicubic"}
    image = adapter.eval_set[0][0]  # normalised with the checkpoint's statistics
    cls.train("resnet18", paddlex, pretrain_weights=pretrained, lr=0.03, mean=[0.5] * 3,
              **SMALL)
    assert seen["adapter"].cfg.lr == 0.03 and seen["adapter"].data_settings()["mean"] == [0.5] * 3
    assert not torch.equal(seen["adapter"].eval_set[0][0], image)

    scratch = ap.save_pruned(net, tmp_path / "scratch.pt", task="classification",
                             arch="timm/resnet18", build={"num_classes": 10}, input_size=32)
    cls.train("resnet18", paddlex, pretrain_weights=scratch, **SMALL)
    assert seen["adapter"].cfg.lr == 0.05 and seen["adapter"].data_settings() == {}


def test_published_weights_of_the_datas_classes_are_pruned_as_they_are(paddlex, tmp_path,
                                                                       monkeypatch):
    """pretrain_epochs=0 with weights published with a head for the data's classes (PaddleSlim
    prunes ImageNet weights on ImageNet so): the base model is those weights, untrained, and is
    pruned; weights that need a new head for the data are refused in one line."""
    import timm

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    torch.manual_seed(0)
    source = timm.create_model("resnet18", num_classes=10)
    hub_cache.seed_hf_cache(source, "someone/fmnist-resnet18")
    r = cls.train("resnet18", paddlex, pretrained="hf-hub:someone/fmnist-resnet18",
                  pretrain_epochs=0, save_dir=tmp_path / "run", ratios=(0.5,),
                  sensitivities_file=tmp_path / "s.json", pruned_flops=0.3, **SMALL)
    base = cls.load_model(r.baseline_path)
    assert all(torch.equal(v, source.state_dict()[k]) for k, v in base.state_dict().items())
    assert not (tmp_path / "run" / "baseline" / "last.pt").exists()  # not trained
    assert r.report["flops_reduction"] > 0.25
    assert r.report["start_weights"]["id"] == "someone/fmnist-resnet18"

    hub = tmp_path / "hf1000"
    monkeypatch.setenv("HF_HOME", str(hub))
    hub_cache.seed_hf_cache(timm.create_model("resnet18"), "timm/resnet18.a1_in1k", hub / "hub")
    with pytest.raises(ap.ConfigError, match="pretrain_epochs=0 prunes the starting weights as "
                       "they are, but this model holds none trained for the data's classes"):
        cls.train("resnet18", paddlex, pretrained=True, pretrain_epochs=0,
                  save_dir=tmp_path / "run2", sensitivities_file=tmp_path / "s2.json",
                  pruned_flops=0.3, **SMALL)
    assert not (tmp_path / "run2" / "baseline").exists()


def test_torchvision_weights_come_from_torch_home(paddlex, tmp_path, monkeypatch):
    import torchvision

    from autoprune.tasks.classification.pretrained import seed_torchvision_cache

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "th"))
    torch.manual_seed(1)
    source = torchvision.models.mobilenet_v2(weights=None)
    seed_torchvision_cache(source, "mobilenet_v2")
    r = cls.train("torchvision/mobilenet_v2", paddlex, pretrained=True, epochs=1, batch_size=8,
                  input_size=32, progress=False, save_dir=tmp_path / "run", lr=1e-9)
    start = ap.read_pruned_metadata(r.baseline_path)["start_weights"]
    assert start["source"] == "torchvision" and "MobileNet_V2_Weights" in start["id"]
    # lr 1e-9: one epoch leaves the backbone as it came (BatchNorm statistics aside)
    got = {k: v.cpu() for k, v in r.model.state_dict().items()}  # (on the GPU where there is one)
    assert all(torch.allclose(got[k], v, atol=1e-6) for k, v in source.state_dict().items()
               if k.endswith("weight") and "classifier" not in k and v.dim() == 4)


def test_a_missing_pretrained_file_offline_is_one_line_within_seconds(paddlex, tmp_path,
                                                                       monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty"))
    start = time.monotonic()
    with pytest.raises(ap.ConfigError) as info:
        cls.train("resnet18", paddlex, pretrained=True, save_dir=tmp_path / "run", **SMALL)
    text = str(info.value)
    assert "\n" not in text and str(tmp_path / "empty") in text and "resnet18" in text
    assert "pretrain_weights=<local file>" in text and time.monotonic() - start < 10


@pytest.mark.parametrize("value, message", [
    ("yes", "pretrained='yes' is not a weights name"),
    (3, "pretrained=3 is not a weights name"),
    ("timm/resnet50.a1_in1k", "resnet50"),  # the weights of another architecture
])
def test_bad_pretrained_values_are_one_line(value, message, hub, paddlex, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(hub[0]))
    with pytest.raises(ap.ConfigError) as info:
        cls.train("resnet18", paddlex, pretrained=value, save_dir=tmp_path / "run", **SMALL)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_pretrained_in_yaml_and_on_the_command_line(hub, paddlex, tmp_path, monkeypatch):
    from autoprune.cli import main

    monkeypatch.setenv("HF_HOME", str(hub[0]))
    config = tmp_path / "c.yaml"
    config.write_text(f"task: classification\nmodel: resnet18\ntrain_data: {paddlex}\n"
                      f"epochs: 1\nbatch_size: 8\ninput_size: 32\nprogress: false\n"
                      f"save_dir: {tmp_path / 'run'}\n")
    assert main(["train", str(config), "--pretrained", "IMAGENET"]) == 0
    start = ap.read_pruned_metadata(tmp_path / "run" / "baseline" / "best.pt")["start_weights"]
    assert start["id"] == "timm/resnet18.a1_in1k"


def test_segmentation_encoder_weights_come_from_smps_cache(tmp_path, monkeypatch):
    import segmentation_models_pytorch as smp

    from autoprune import segmentation as seg
    from autoprune.tasks.segmentation.pretrained import seed_smp_cache

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    torch.manual_seed(2)
    encoder = smp.Unet("resnet18", encoder_weights=None, classes=3).encoder
    seed_smp_cache(encoder, "resnet18", "imagenet", tmp_path / "hf" / "hub")
    r = seg.train("unet", "resnet18", train_data="fashion-scenes", encoder_weights="imagenet",
                  train_limit=8, eval_limit=4, epochs=1, batch_size=4, input_size=32,
                  progress=False, save_dir=tmp_path / "run", lr=1e-9)
    start = ap.read_pruned_metadata(r.baseline_path)["start_weights"]
    assert start["source"] == "smp" and "resnet18" in start["id"]
    got = r.model.encoder.conv1.weight.cpu()  # (on the GPU where there is one)
    assert torch.allclose(got, encoder.conv1.weight, atol=1e-6)


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    """The same 24 + 8 scenes as a YOLO data.yaml, a COCO set and a VOC set."""
    from autoprune.datasets.formats import write_coco_dataset, write_voc_detection
    from autoprune.datasets.scenes import write_yolo_dataset

    root = tmp_path_factory.mktemp("scenes")
    common = dict(train=24, val=8, size=64)
    return {"yolo": write_yolo_dataset(root / "yolo", **common),
            "coco": write_coco_dataset(root / "coco", **common),
            "voc": write_voc_detection(root / "voc", **common),
            "paddlex": write_voc_detection(root / "paddlex", lists="paddlex", **common)}


def test_yolov8n_pt_from_the_weights_dir_is_fine_tuned_then_pruned_for_the_data(scenes, tmp_path,
                                                                                   monkeypatch):
    """`det.train("yolov8n.pt", data)`: Ultralytics' asset from its weights dir (80 classes),
    the head adapted to the data's 10, fine-tuned, pruned (a DEFAULT profile) and reported."""
    import ultralytics.utils

    from autoprune import detection as det
    from autoprune.tasks.detection import models as yolo
    from autoprune.tasks.detection.pretrained import seed_ultralytics_weights

    monkeypatch.setitem(ultralytics.utils.SETTINGS, "weights_dir", str(tmp_path / "w"))
    with yolo.quiet():
        coco = yolo.DetectionModel("yolov8n.yaml", nc=80, verbose=False)
    seed_ultralytics_weights(coco, "yolov8n.pt")
    monkeypatch.chdir(tmp_path)  # not in the current folder: the weights dir has it
    r = det.train("yolov8n.pt", scenes["coco"], epochs=1, pretrain_epochs=1, input_size=64,
                  batch_size=8, progress=False, save_dir=tmp_path / "run",
                  sensitivities_file="DEFAULT", pruned_flops=0.3,
                  train_args=dict(nbs=8, optimizer="AdamW", lr0=0.01, warmup_epochs=0,
                                  mosaic=0.0))
    assert yolo.model_nc(r.model) == 10 and r.report["flops_reduction"] > 0.2
    assert r.report["start_weights"]["id"] == "yolov8n.pt"
    assert r.report["data"].startswith("coco, 2 splits, 10 classes")
    assert (tmp_path / "run" / "data_cache").is_dir()
    assert yolo.model_nc(det.load_model(r.pruned_path)) == 10
    # the checkpoints keep the data's class names: a model loaded without data names them
    from autoprune.tasks.detection.adapter import DetectionAdapter

    names = DetectionAdapter(scenes["yolo"], input_size=64).names
    assert names[0] != "0" and det.load_model(r.pruned_path).names == names


def test_weights_of_as_many_classes_named_otherwise_are_fine_tuned_first(scenes, tmp_path,
                                                                         monkeypatch, capsys):
    """A .pt of the data's class count but other class names is another data set's model: its
    head is fine-tuned before pruning, not taken as trained on these classes; one of the data's
    names is taken as it is; an autoprune checkpoint of other names is refused in one line."""
    import ultralytics.utils

    from autoprune.engine.checkpoint import save_pruned
    from autoprune.tasks.detection import models as yolo
    from autoprune.tasks.detection.adapter import DetectionAdapter
    from autoprune.tasks.detection.inputs import class_names, prepare
    from autoprune.tasks.detection.pretrained import seed_ultralytics_weights

    monkeypatch.setitem(ultralytics.utils.SETTINGS, "weights_dir", str(tmp_path / "w"))
    adapter = DetectionAdapter(scenes["yolo"], input_size=64, progress=False)
    mine = [adapter.names[i] for i in sorted(adapter.names)]
    with yolo.quiet():
        net = yolo.DetectionModel("yolov8n.yaml", nc=len(mine), verbose=False)
    net.names = {i: f"tool{i}" for i in range(len(mine))}
    seed_ultralytics_weights(net, "other.pt", tmp_path)
    model, weights = prepare(adapter, str(tmp_path / "other.pt"), None, tmp_path)
    assert isinstance(model, torch.nn.Module) and weights is None  # fine-tuned first
    assert class_names(model) == mine
    assert "trained on tool0, tool1, tool2, … (10), the data has" in capsys.readouterr().out

    net.names = dict(enumerate(mine))
    seed_ultralytics_weights(net, "same.pt", tmp_path)
    arch, weights = prepare(adapter, str(tmp_path / "same.pt"), None, tmp_path)
    assert arch == "yolov8n" and weights is not None  # pruned as it is

    ckpt = save_pruned(yolo.patch_model(net), tmp_path / "ckpt.pt", task="detection",
                       arch="yolov8n", build={"num_classes": len(mine)}, input_size=64,
                       data={"class_names": [f"tool{i}" for i in range(len(mine))]})
    with pytest.raises(ap.ConfigError) as e:
        prepare(adapter, str(ckpt), None, tmp_path)
    assert "trained on other classes (tool0, tool1, tool2, … (10))" in str(e.value)
    assert "\n" not in str(e.value)


# -- the data sets users have ------------------------------------------------------------------
def _validated(data, tmp_path, **settings):
    """The validation metrics of one fixed model on ``data`` (its conversion included)."""
    from autoprune.tasks.detection.adapter import DetectionAdapter

    adapter = DetectionAdapter(data, input_size=64, batch_size=8, progress=False,
                               cache_root=tmp_path, **settings)
    torch.manual_seed(0)
    model = adapter.build("yolov8n")
    return adapter.evaluate(model), adapter


def test_coco_and_voc_scenes_validate_like_their_yolo_copy(scenes, tmp_path):
    """The same model on the same images scores the same whatever the layout (a random model's
    boxes are compared with the labels of each copy: equal labels, equal metrics)."""
    wanted, _ = _validated(scenes["yolo"], tmp_path)
    for name in ("coco", "voc"):
        got, adapter = _validated(scenes[name], tmp_path)
        assert got == pytest.approx(wanted, abs=1e-9), name
        assert adapter.describe_data().startswith(f"{name}, 2 splits, 10 classes")
        assert not any(p.suffix == ".txt" for p in Path(scenes[name]).rglob("labels/*"))


def test_a_classifier_scores_the_same_on_every_layout_of_its_images(tmp_path):
    """A model trained on a PaddleX list evaluates to the same metrics on the same images as an
    ImageFolder, a PaddleX list and a CSV."""
    from autoprune.datasets.formats import (write_csv_classification, write_image_folder,
                                            write_paddlex_classification)
    from autoprune.tasks.classification.adapter import ClassificationAdapter

    common = dict(train=30, val=100)
    copies = {"imagefolder": write_image_folder(tmp_path / "folder", **common) / "val",
              "paddlex": write_paddlex_classification(tmp_path / "pd", **common),
              "csv": write_csv_classification(tmp_path / "csv", **common)}
    r = cls.train("resnet18", copies["paddlex"], save_dir=tmp_path / "run", **SMALL)
    items, scores = {}, {}
    for name, data in copies.items():
        adapter = ClassificationAdapter(None, data, input_size=32, progress=False)
        assert adapter.describe_data().startswith(f"{name}, 10 classes, 100 val")
        ds = adapter.eval_set  # the same inputs and class names, whatever their order
        items[name] = sorted((ds.classes[int(label)], round(image.sum().item(), 3))
                             for image, label in (ds[i] for i in range(len(ds))))
        scores[name] = adapter.evaluate(r.model)
    strip = lambda rows: [(n.split("_", 1)[-1].replace("_", "/"), v) for n, v in rows]  # noqa
    assert sorted(strip(items["imagefolder"])) == items["paddlex"] == items["csv"]
    # the class order of a CSV of names is theirs sorted: compare where it is the same
    assert scores["imagefolder"]["top1"] == pytest.approx(scores["paddlex"]["top1"], abs=0.02)


def test_an_unknown_data_layout_is_one_line(tmp_path):
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "readme.md").write_text("x")
    with pytest.raises(ap.ConfigError) as info:
        cls.train("resnet18", tmp_path / "odd" / "readme.md", save_dir=tmp_path / "run", **SMALL)
    assert "\n" not in str(info.value)


def test_a_profile_built_from_pretrained_weights_on_user_data_says_so(hub, paddlex, tmp_path,
                                                                       monkeypatch, capsys):
    """`autoprune profiles build --pretrained --data <PaddleX root>`: PaddleX-style profiles
    from your own data; the profile, the index and `profiles list` state where it comes from."""
    from autoprune.cli import main

    monkeypatch.setenv("HF_HOME", str(hub[0]))
    out = tmp_path / "profiles"
    assert main(["profiles", "build", "--arch", "resnet18", "--pretrained", "--data", str(paddlex),
                 "--out", str(out), "--epochs", "1", "--train-images", "20", "--val-images", "10",
                 "--input-size", "32", "--batch-size", "8", "--ratios", "0.5"]) == 0
    index = json.loads((out / "index.json").read_text())
    about = index["about"]["classification-timm-resnet18.json"]
    assert about["start"] == "pretrained (default weights)" and str(paddlex) in about["data"]
    how = ap.read_record(out / "classification-timm-resnet18.json").extra["how"]
    assert "--pretrained --data" in how["command"]
    capsys.readouterr()
    assert main(["profiles", "list", "--out", str(out)]) == 0
    assert "pretrained (default weights)" in capsys.readouterr().out


def test_the_one_call_flow_on_coco_and_voc_copies_equals_the_yolo_run(scenes, tmp_path):
    """Issue 34's done-means: the same scenes as YOLO, COCO, VOC and PaddleX's VOC lists train
    the same model (same seed, same images in the same order, the same labels): equal metrics
    and weights."""
    from autoprune import detection as det

    common = dict(epochs=1, input_size=64, batch_size=8, progress=False, eval_limit=8,
                  train_args=dict(nbs=8, optimizer="AdamW", lr0=0.01, warmup_epochs=0,
                                  mosaic=0.0))
    runs = {name: det.train("yolov8n.yaml", scenes[name], save_dir=tmp_path / name, **common)
            for name in ("yolo", "coco", "voc", "paddlex")}
    for name in ("coco", "voc", "paddlex"):  # paddlex: VOC XML listed in PaddleX's file lists
        assert runs[name].metrics == pytest.approx(runs["yolo"].metrics, abs=1e-9), name
        mine, theirs = runs[name].model.state_dict(), runs["yolo"].model.state_dict()
        assert all(torch.allclose(mine[k].float(), theirs[k].float(), atol=1e-5) for k in mine)


def test_cached_batches_on_the_cpu_are_the_loaders_own_served_again():
    """Evaluation batches decoded once: the second pass serves the first pass's tensors (no
    copy on the CPU), nested structures kept (CUDA placement: tests/test_gpu.py)."""
    from torch.utils.data import DataLoader, TensorDataset

    from autoprune.engine.data import CachedBatches, mapped

    loader = DataLoader(TensorDataset(torch.arange(12.0).reshape(6, 2), torch.arange(6)),
                        batch_size=4)
    batches = CachedBatches(loader, device="cpu")
    first, second = list(batches), list(batches)
    assert len(first) == 2 and all(a[0] is b[0] and a[1] is b[1] for a, b in zip(first, second))
    nested = mapped({"x": [torch.ones(2), (torch.zeros(1), "name")]}, lambda t: t + 1)
    assert nested["x"][0].tolist() == [2.0, 2.0] and nested["x"][1][0].tolist() == [1.0]
    assert nested["x"][1][1] == "name" and isinstance(nested["x"][1], tuple)

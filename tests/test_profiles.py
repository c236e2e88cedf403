"""DEFAULT profiles: listed, looked up by architecture, shipped inside the built wheel."""
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

import autoprune
from autoprune.cli import main
from autoprune.engine.store import write_record
from autoprune.flow.defaults import available_profiles, find_profile, profile_dir, register_profile

from conftest import needs_fmnist

ROOT = Path(__file__).resolve().parents[1]


def test_every_indexed_profile_is_a_valid_file():
    for task, archs in available_profiles().items():
        for key, name in archs.items():
            record = autoprune.read_record(profile_dir() / name)
            assert record.model["fingerprint"] and record.metric["baseline"]
            assert record.extra["how"]["dataset"] and record.extra["versions"]["torch"]
            assert find_profile(task, key) == profile_dir() / name


BUNDLED = [(task, key) for task, archs in available_profiles().items() for key in archs]
# what the DEFAULT profiles promise to cover (README, pretrained_sensitivities/build_all.sh)
PROMISED = {"classification": ["timm/resnet18", "timm/resnet34", "timm/resnet50",
                               "torchvision/mobilenet_v2", "timm/mobilenetv3_large_100",
                               "timm/mobilenetv3_small_100", "timm/efficientnet_b0",
                               "ultralytics/yolo11n-cls"],
            "detection": ["yolov8n", "yolov8s", "yolo11n", "yolo11s", "yolo26n", "yolov9c"],
            "rtdetr": ["rtdetr-l"],
            "segmentation": [f"smp/{a}/{e}" for a in ("unet", "fpn", "deeplabv3plus")
                             for e in ("resnet18", "mobilenet_v2")],
            "instance_segmentation": ["yolov8n-seg", "yolo11n-seg", "yolo26n-seg"],
            "pose": ["yolov8n-pose", "yolo11n-pose", "yolo26n-pose"],
            "obb": ["yolov8n-obb", "yolo11n-obb", "yolo26n-obb"]}


def test_every_promised_architecture_has_a_bundled_profile():
    assert sorted(BUNDLED) == sorted((t, k) for t, keys in PROMISED.items() for k in keys)


ADAPTER_ARGS = {"classification": {"num_classes": 10}, "detection": {"nc": 10},
                "rtdetr": {"nc": 10},
                "segmentation": {"num_classes": 11}, "instance_segmentation": {"nc": 10},
                # the scenes' pose models predict 5 keypoints (x, y, visibility)
                "pose": {"num_classes": 10, "kpt_shape": [5, 3]}, "obb": {"num_classes": 10}}


@pytest.mark.parametrize("task,key", BUNDLED)
def test_every_bundled_profile_fits_its_architecture_today(task, key):
    # a change to how groups are listed must not leave a bundled profile that no model matches
    from autoprune.engine.groups import PruningGraph
    from autoprune.tasks import get_adapter

    record = autoprune.read_record(find_profile(task, key))
    size = record.extra["how"]["input_size"]
    adapter = get_adapter(task, input_size=size, **ADAPTER_ARGS[task])
    model = adapter.build(key)
    graph = PruningGraph(model, adapter.example_inputs(model), adapter.ignored_layers(model))
    assert graph.fingerprint == record.model["fingerprint"]
    assert {g.name: g.channels for g in graph.groups} == record.model["groups"]
    assert all(len(points) for points in record.sensitivities.values())


def test_missing_profile_lists_the_bundled_ones():
    with pytest.raises(autoprune.ConfigError, match="no DEFAULT sensitivity profile") as e:
        find_profile("classification", "timm/no_such_net")
    assert "\n" not in str(e.value)
    for key in available_profiles().get("classification", {}):
        assert key in str(e.value)


def test_register_and_list(tmp_path, monkeypatch, capsys):
    register_profile("classification", "timm/x", "x.json", tmp_path)
    register_profile("detection", "yolov8n", "y.json", tmp_path)
    index = json.loads((tmp_path / "index.json").read_text())
    assert index["profiles"] == {"classification": {"timm/x": "x.json"},
                                 "detection": {"yolov8n": "y.json"}}
    monkeypatch.setattr("autoprune.flow.defaults.profile_dir", lambda: tmp_path)
    assert main(["profiles", "list"]) == 0
    out = capsys.readouterr().out
    assert "timm/x" in out and "yolov8n" in out


DAMAGED_INDEXES = {
    "truncated": '{"format": "autoprune-profile-index", "profiles": {"classification": {"timm/',
    "empty": "",
    "binary": b"\x80\x04\x95\xff",
    "a list": "[1, 2]",
    "profiles a list": '{"profiles": ["timm/x"]}',
    "a task a list": '{"profiles": {"classification": ["timm/x"]}}',
}


@pytest.mark.parametrize("kind", list(DAMAGED_INDEXES))
def test_damaged_index_is_a_one_line_error(kind, tmp_path, monkeypatch, capsys):
    content = DAMAGED_INDEXES[kind]
    index = tmp_path / "index.json"
    index.write_bytes(content) if isinstance(content, bytes) else index.write_text(content)
    monkeypatch.setenv("AUTOPRUNE_PROFILE_DIR", str(tmp_path))
    with pytest.raises(autoprune.SensitivityFileError, match="not a valid profile index") as e:
        find_profile("classification", "timm/x")
    assert "\n" not in str(e.value) and str(index) in str(e.value)
    assert "AUTOPRUNE_PROFILE_DIR" in str(e.value)
    capsys.readouterr()
    assert main(["profiles", "list"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("autoprune: error: ") and str(index) in err and "\n" not in err
    with pytest.raises(autoprune.SensitivityFileError, match="not a valid profile index"):
        register_profile("classification", "timm/y", "y.json", tmp_path)
    # the bundled folder (no AUTOPRUNE_PROFILE_DIR): reinstalling is the fix
    monkeypatch.delenv("AUTOPRUNE_PROFILE_DIR")
    monkeypatch.setattr("autoprune.flow.defaults.profile_dir", lambda: tmp_path)
    with pytest.raises(autoprune.SensitivityFileError, match="reinstall autoprune") as e:
        available_profiles()
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("kind", ["missing", "a file"])
def test_profile_dir_env_that_is_not_a_folder(kind, tmp_path, monkeypatch, capsys):
    path = tmp_path / "profiles"
    if kind == "a file":
        path.write_text("{}")
    monkeypatch.setenv("AUTOPRUNE_PROFILE_DIR", str(path))
    with pytest.raises(autoprune.ConfigError,
                       match=f"AUTOPRUNE_PROFILE_DIR={path} is not a folder: ") as e:
        find_profile("classification", "timm/resnet18")
    assert "\n" not in str(e.value)
    capsys.readouterr()
    assert main(["profiles", "list"]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_register_profile_writes_the_index_atomically(tmp_path, monkeypatch):
    register_profile("classification", "a", "a.json", tmp_path)
    (tmp_path / "index.json.tmp").mkdir()  # in the way of a fixed temp name
    synced, fsync = [], os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), fsync(fd))[1])
    register_profile("classification", "b", "b.json", tmp_path)
    assert synced, "the index was not flushed to disk before the rename"
    before = (tmp_path / "index.json").read_text()
    assert json.loads(before)["profiles"] == {"classification": {"a": "a.json", "b": "b.json"}}

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)  # killed before the rename: old index kept whole
    with pytest.raises(OSError, match="disk full"):
        register_profile("classification", "c", "c.json", tmp_path)
    assert (tmp_path / "index.json").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.json", "index.json.tmp"]


def test_wheel_ships_the_profiles_and_resolves_default(tmp_path):
    if not (ROOT / "pretrained_sensitivities" / "index.json").is_file():
        pytest.skip("no profile bundled yet")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path / "dist"), str(ROOT)], check=True)
    wheel = next((tmp_path / "dist").glob("autoprune-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "autoprune/pretrained_sensitivities/index.json" in names
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(site), str(wheel)], check=True)
    code = ("import autoprune.profiles as p, json; "
            "print(json.dumps({'dir': str(p.profile_dir()), 'profiles': p.available_profiles()}))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(  # the installed copy first
        p for p in (str(site), os.environ.get("PYTHONPATH")) if p)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, check=True,
                         capture_output=True, text=True).stdout
    found = json.loads(out)
    assert found["dir"].startswith(str(site))  # the installed copy, not the source tree
    assert found["profiles"] == available_profiles()


# -- architecture keys of what the user passes, DEFAULT resolution and refusal ---------------------


def _fake_profile(folder, adapter, model, task, key):
    """A profile for ``model`` (its real group fingerprint, made-up losses), registered."""
    from autoprune.engine.groups import PruningGraph

    graph = PruningGraph(model, adapter.example_inputs(model), adapter.ignored_layers(model))
    sens = {g.name: {0.5: 0.1} for g in graph.groups}
    name = f"{task}-{key.replace('/', '-')}.json"
    autoprune.save_sensitivities(sens, folder / name, arch=key, fingerprint=graph.fingerprint,
                                 metric_name=adapter.metric, baseline=0.5)
    register_profile(task, key, name, folder)
    return folder / name


def test_task_of_a_key():
    from autoprune.profiles.build import arch_key_of
    from autoprune.tasks import task_of

    cases = {"resnet18": ("classification", "timm/resnet18"),
             "torchvision/mobilenet_v2": ("classification", "torchvision/mobilenet_v2"),
             "yolov8n": ("detection", "yolov8n"), "yolo11s.yaml": ("detection", "yolo11s"),
             "smp/unet/resnet18": ("segmentation", "smp/unet/resnet18"),
             "deeplabv3plus/mobilenet_v2": ("segmentation", "smp/deeplabv3plus/mobilenet_v2")}
    for arch, (task, key) in cases.items():
        assert task_of(arch) == task and arch_key_of(arch, task) == key
    with pytest.raises(autoprune.ConfigError, match="cannot tell the task"):
        task_of("no_such_net")


def test_arch_key_of_model_objects():
    import segmentation_models_pytorch as smp
    import timm
    import torchvision

    from autoprune.tasks import get_adapter

    cls_adapter, seg_adapter = get_adapter("classification"), get_adapter("segmentation")
    assert cls_adapter.arch_key(timm.create_model("mobilenetv3_small_100", num_classes=3)) == \
        "timm/mobilenetv3_small_100"
    assert cls_adapter.arch_key(torchvision.models.resnet34(num_classes=10)) == \
        "torchvision/resnet34"
    assert cls_adapter.arch_key(torchvision.models.mobilenet_v2()) == "torchvision/mobilenet_v2"
    assert cls_adapter.arch_key(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1))) is None
    assert seg_adapter.arch_key(smp.FPN("mobilenet_v2", encoder_weights=None, classes=3)) == \
        "smp/fpn/mobilenet_v2"
    assert seg_adapter.arch_key(timm.create_model("resnet18")) is None


def test_default_resolves_for_model_objects_and_refuses_others(tmp_path, monkeypatch):
    import segmentation_models_pytorch as smp
    import timm
    import torchvision

    from autoprune.flow.sensitivities import check_sensitivities_file
    from autoprune.tasks.classification import ClassificationAdapter
    from autoprune.tasks.segmentation import SegmentationAdapter

    cls_adapter = ClassificationAdapter(num_classes=10, input_size=32)
    seg_adapter = SegmentationAdapter(num_classes=11, input_size=64)
    objects = [(cls_adapter, timm.create_model("resnet18", num_classes=10)),
               (cls_adapter, torchvision.models.resnet18(num_classes=10)),
               (seg_adapter, smp.Unet("resnet18", encoder_weights=None, classes=11))]
    expected = {}
    for adapter, model in objects:
        key = adapter.arch_key(model)
        expected[key] = _fake_profile(tmp_path, adapter, model, adapter.task, key)
    assert set(expected) == {"timm/resnet18", "torchvision/resnet18", "smp/unet/resnet18"}
    monkeypatch.setenv("AUTOPRUNE_PROFILE_DIR", str(tmp_path))
    for adapter, model in objects:
        key = adapter.arch_key(model)
        assert check_sensitivities_file(adapter, model, "DEFAULT", key) == expected[key]
    # another width (half the channels), found as timm/resnet18 by name: refused, not applied
    narrow = timm.create_model("resnet18", num_classes=10, channels=(32, 64, 128, 256))
    assert cls_adapter.arch_key(narrow) == "timm/resnet18"
    with pytest.raises(autoprune.SensitivityFileError, match="does not match this model's groups"):
        check_sensitivities_file(cls_adapter, narrow, "DEFAULT", cls_adapter.arch_key(narrow))
    # a torchvision model with a patched layer keeps its name (same parameter names) -> refused
    patched = torchvision.models.resnet18(num_classes=10)
    patched.layer1[0].conv1 = torch.nn.Conv2d(64, 32, 3, padding=1, bias=False)
    patched.layer1[0].bn1 = torch.nn.BatchNorm2d(32)
    patched.layer1[0].conv2 = torch.nn.Conv2d(32, 64, 3, padding=1, bias=False)
    assert cls_adapter.arch_key(patched) == "torchvision/resnet18"
    with pytest.raises(autoprune.SensitivityFileError, match="does not match"):
        check_sensitivities_file(cls_adapter, patched, "DEFAULT", "torchvision/resnet18")


@needs_fmnist
def test_train_with_a_model_object_and_default_checks_before_training(tmp_path, monkeypatch):
    import timm

    from autoprune import classification as cls

    model = timm.create_model("resnet18", num_classes=10)
    from autoprune.tasks.classification import ClassificationAdapter

    _fake_profile(tmp_path / "p", ClassificationAdapter(num_classes=10, input_size=32),
                  timm.create_model("resnet18", num_classes=10, channels=(32, 64, 128, 256)),
                  "classification", "timm/resnet18")
    monkeypatch.setenv("AUTOPRUNE_PROFILE_DIR", str(tmp_path / "p"))
    with pytest.raises(autoprune.SensitivityFileError, match="DEFAULT profile for timm/resnet18"):
        cls.train(model, "fashion-mnist", epochs=1, save_dir=tmp_path / "run", train_limit=16,
                  eval_limit=16, sensitivities_file="DEFAULT", progress=False)
    assert not (tmp_path / "run" / "baseline").exists()  # refused before any training


# -- builders ----------------------------------------------------------------------------------
@needs_fmnist
def test_cli_builds_a_segmentation_profile_and_default_resolves(tmp_path, monkeypatch, capsys):
    import segmentation_models_pytorch as smp

    from autoprune.flow.sensitivities import check_sensitivities_file
    from autoprune.tasks.segmentation import SegmentationAdapter

    out = tmp_path / "profiles"
    args = ["profiles", "build", "--arch", "smp/unet/resnet18", "--out", str(out), "--epochs",
            "1", "--train-images", "8", "--val-images", "4", "--size", "32", "--ratios", "0.5"]
    assert main(args) == 0
    path = out / "segmentation-smp-unet-resnet18.json"
    index = json.loads((out / "index.json").read_text())
    assert index["profiles"] == {"segmentation": {"smp/unet/resnet18": path.name}}
    record = autoprune.read_record(path)
    how = record.extra["how"]
    assert record.metric["name"] == "miou" and record.metric["baseline"] > 0
    assert "weights_sha256" not in record.model and record.extra["versions"]["torch"]
    assert how["input_size"] == 32 and how["epochs"] == 1 and how["val_images"] == 4
    assert "scenes" in how["dataset"] and how["command"].startswith(
        "autoprune profiles build --arch smp/unet/resnet18 --task segmentation")
    assert set(next(iter(record.sensitivities.values()))) == {0.5}
    # an existing profile is left alone with --skip-existing; list shows the baseline
    capsys.readouterr()
    assert main(args + ["--skip-existing"]) == 0
    assert "skip segmentation smp/unet/resnet18" in capsys.readouterr().out
    assert main(["profiles", "list", "--out", str(out)]) == 0
    listed = capsys.readouterr().out
    assert "smp/unet/resnet18" in listed and "miou" in listed and path.name in listed
    # DEFAULT now resolves for the name and for an smp object
    monkeypatch.setattr("autoprune.flow.defaults.profile_dir", lambda: out)
    adapter = SegmentationAdapter(num_classes=11, input_size=32)
    model = smp.Unet("resnet18", encoder_weights=None, classes=11)
    assert check_sensitivities_file(adapter, model, "DEFAULT", adapter.arch_key(model)) == path


@needs_fmnist
def test_a_kept_build_resumes_its_training_and_analysis(tmp_path, capsys):
    """--work-dir keeps a build in a folder per recipe: run again after an interruption (here:
    the analysis file cut short), it trains nothing again and measures only the missing points,
    and gives the profile an uninterrupted build gives; another recipe gets its own folder."""
    args = ["profiles", "build", "--arch", "smp/unet/resnet18", "--epochs", "1",
            "--train-images", "8", "--val-images", "4", "--size", "32", "--ratios", "0.5",
            "--work-dir", str(tmp_path / "work")]
    assert main(args + ["--out", str(tmp_path / "a")]) == 0
    (kept,) = (tmp_path / "work").iterdir()
    assert "kept in" in capsys.readouterr().out
    best = kept / "base" / "baseline" / "best.pt"
    trained = best.stat().st_mtime_ns
    record = autoprune.read_record(kept / "sens.json")
    groups = sorted(record.sensitivities)
    for name in groups[:5]:  # as a build killed during its analysis leaves it
        del record.sensitivities[name]
    write_record(record, kept / "sens.json")
    assert main(args + ["--out", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "already finished its 1 epoch:" in out and "5 points x 4 images" in out
    assert best.stat().st_mtime_ns == trained  # not trained again
    first, again = (autoprune.read_record(tmp_path / d / "segmentation-smp-unet-resnet18.json")
                    for d in ("a", "b"))
    assert again.sensitivities == first.sensitivities and sorted(again.sensitivities) == groups
    assert main([*args[:5], "2", *args[6:], "--out", str(tmp_path / "c")]) == 0  # 2 epochs
    assert len(list((tmp_path / "work").iterdir())) == 2


@needs_fmnist
def test_build_detection_profile_and_default_resolves(tmp_path, monkeypatch):
    """The builder's plumbing on 8 scenes, 1 epoch: the mAP of such a model is 0, so the
    evaluation is replaced by a made-up non-zero score (the real one is tested in
    test_detection.py)."""
    from autoprune.engine.groups import PruningGraph, group_fingerprint
    from autoprune.flow.sensitivities import adopt_profile, check_sensitivities_file, read_table
    from autoprune.profiles.build import build_profile
    from autoprune.tasks.detection import models as yolo
    from autoprune.tasks.detection import DetectionAdapter

    def fake_evaluate(self, model):
        score = 0.5 + 1e-9 * sum(float(p.abs().sum()) for p in model.parameters())
        return {"map50_95": score, "map50": score}

    monkeypatch.setattr(DetectionAdapter, "evaluate", fake_evaluate)
    out = tmp_path / "profiles"
    path = build_profile("yolov8n.yaml", out, epochs=1, train_images=8, val_images=4,
                         input_size=64, batch_size=8, ratios=(0.5,), progress=False,
                         work_dir=tmp_path)
    assert path == out / "detection-yolov8n.json"
    index = json.loads((out / "index.json").read_text())
    assert index["profiles"] == {"detection": {"yolov8n": path.name}}
    record = autoprune.read_record(path)
    how = record.extra["how"]
    assert record.metric["name"] == "map50_95" and record.model["arch"] == "yolov8n"
    assert how["train_images"] == 8 and how["input_size"] == 64 and "scenes" in how["dataset"]
    assert how["train_args"]["optimizer"] == "AdamW" and how["train_args"]["nbs"] == 8
    assert "weights_sha256" not in record.model and record.extra["date"]
    # DEFAULT resolves for a DetectionModel and a YOLO object of the data's 10 classes ...
    monkeypatch.setattr("autoprune.flow.defaults.profile_dir", lambda: out)
    adapter = DetectionAdapter(nc=10, input_size=64)
    with yolo.quiet():
        module = yolo.patch_model(yolo.DetectionModel("yolov8n.yaml", nc=10, verbose=False))
        from ultralytics import YOLO

        wrapper = YOLO("yolov8n.yaml")
        coco = yolo.patch_model(yolo.DetectionModel("yolov8n.yaml", nc=80, verbose=False))
    assert adapter.arch_key(module) == adapter.arch_key(wrapper) == "yolov8n"
    assert check_sensitivities_file(adapter, module, "DEFAULT", "yolov8n") == path
    # ... and for COCO's 80 classes, whose class branch (cv3) is 80 channels wide, not 64: the
    # profile is adopted, its losses read ratio for ratio, the rest of the graph the same
    coco_adapter = DetectionAdapter(nc=80, input_size=64)
    assert check_sensitivities_file(coco_adapter, coco, "DEFAULT", "yolov8n") == path
    adopted, _ = read_table(coco_adapter, coco, "DEFAULT", "yolov8n")
    graph = PruningGraph(coco, coco_adapter.example_inputs(coco), coco_adapter.ignored_layers(coco))
    assert adopted.model["fingerprint"] == graph.fingerprint != record.model["fingerprint"]
    widened = adopted.extra["adopted"]["groups"]
    assert widened and all(".cv3." in name and w == [64, 80] for name, w in widened.items())
    assert adopted.sensitivities == record.sensitivities
    coco_groups = {g.name: g.channels for g in graph.groups}
    assert {n for n, c in coco_groups.items() if c != record.model["groups"][n]} == set(widened)
    ratios = autoprune.ratios_by_loss(adopted.sensitivities, 0.05)  # a table the flow can read
    assert set(ratios) <= set(coco_groups)
    # anything else that differs is still refused: the class branch's width alone is excused
    assert adopt_profile(autoprune.read_record(path), graph, set()) is None
    other = autoprune.read_record(path)
    first = next(iter(other.model["groups"]))
    other.model["groups"][first] += 8  # a profile claiming another width of a backbone group
    other.model["fingerprint"] = group_fingerprint(
        graph.groups, {**{n: 64 for n in widened}, first: other.model["groups"][first]})
    assert adopt_profile(other, graph, coco_adapter.label_width_groups(coco)) is None
    with pytest.raises(autoprune.SensitivityFileError, match="does not match this model's groups"):
        monkeypatch.setattr(DetectionAdapter, "label_width_groups", lambda self, m: set())
        check_sensitivities_file(coco_adapter, coco, "DEFAULT", "yolov8n")


def test_a_coco_class_yolo_checkpoint_prunes_with_the_bundled_default(tmp_path, capsys):
    """The README's `det.train("yolov8n.pt", "coco/", sensitivities_file="DEFAULT", ...)`: an
    80-class YOLOv8n (its class branch 80 channels wide, the bundled profile's 64) is pruned
    from the bundled DEFAULT profile, class branch included, to the FLOPs asked for."""
    from autoprune.flow.checkpoints import prune_checkpoint
    from autoprune.tasks.detection import DetectionAdapter

    adapter = DetectionAdapter(nc=80, input_size=64)
    model = adapter.build("yolov8n", num_classes=80)
    ckpt = autoprune.save_pruned(model, tmp_path / "coco.pt", task="detection", arch="yolov8n",
                                 build=adapter.build_kwargs(model), input_size=64)
    out = tmp_path / "pruned.pt"
    result = prune_checkpoint(ckpt, "DEFAULT", out, pruned_flops=0.3)
    assert "label branches 64 channels wide (this model: 80)" in capsys.readouterr().out
    assert abs(1 - result.flops_after / result.flops_before - 0.3) < 0.03
    assert out.stat().st_size < 0.8 * ckpt.stat().st_size
    widened = [name for name in result.plan if ".cv3." in name]
    assert widened and all(result.plan[n]["channels"] == 80 for n in widened)
    assert any(result.plan[n]["kept"] < 80 for n in widened)


def test_checkpoint_records_the_arch_only_when_the_key_rebuilds_the_model():
    import timm
    import torch.nn as nn

    from autoprune.flow.run import _rebuilds
    from autoprune.tasks import get_adapter

    adapter = get_adapter("classification", num_classes=10, input_size=32)
    plain = timm.create_model("resnet18", num_classes=10)
    assert _rebuilds(adapter, "timm/resnet18", plain)
    patched = timm.create_model("resnet18", num_classes=10)
    patched.act1 = nn.SiLU()  # same shapes, another forward: must not be rebuilt from the key
    assert not _rebuilds(adapter, "timm/resnet18", patched)
    narrow = timm.create_model("resnet18", num_classes=10, channels=(32, 64, 128, 256))
    assert not _rebuilds(adapter, "timm/resnet18", narrow)

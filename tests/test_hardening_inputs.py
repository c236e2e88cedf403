"""Hardening, round 3 (issue 38): the inputs a red team tried against pretrained weights, data
formats, exports and resumes. Every path read from a data file stays inside its data root (a test
per format); every fact a data file states that can be checked (class names and their order,
image sizes) is checked; a file a hub cache or a user supplies fails in one line naming it (a
pickle refused: nothing runs); `autoprune show` escapes what it prints from files; a renamed run
folder resumes; a killed write's temp file is cleaned on the next one. Tiny synthetic sets, CPU,
no network (hub caches are seeded locally; reachability probes fail the test)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch
import yaml
from PIL import Image

import autoprune as ap
from autoprune.cli import main
from autoprune.datasets import CLASSES
from autoprune.errors import ConfigError, SensitivityFileError
from autoprune.tasks import hub_cache, weights
from conftest import assert_one_line, make_model, needs_fmnist, refuse_network_probes

SET = dict(train=4, val=2, size=64, seed=3)
OUTSIDE = "leads outside the data root"


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    refuse_network_probes(monkeypatch)


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    """Tiny copies of the same Fashion-MNIST scenes and garments in each format."""
    if not __import__("conftest").has_fmnist():
        return {}
    from autoprune.datasets import formats as w
    from autoprune.datasets.scenes import write_yolo_dataset

    root = tmp_path_factory.mktemp("sets")
    cls = dict(train=6, val=4, size=16, seed=1)
    return {"coco": w.write_coco_dataset(root / "coco", **SET),
            "voc": w.write_voc_detection(root / "voc", **SET),
            "voc-paddlex": w.write_voc_detection(root / "voc_px", lists="paddlex", **SET),
            "yolo": write_yolo_dataset(root / "yolo", **SET).parent,
            "cls-paddlex": w.write_paddlex_classification(root / "cls_px", **cls),
            "csv": w.write_csv_classification(root / "csv", **cls),
            "seg-paddlex": w.write_paddlex_segmentation(root / "seg_px", **SET),
            "seg-voc": w.write_voc_segmentation(root / "seg_voc", **SET),
            "cityscapes": w.write_cityscapes_like(root / "cityscapes", **SET)}


def _copy(sets, name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(sets[name], tmp_path / name))


def _secret(tmp_path: Path) -> Path:
    """A file outside every data root (an image, so only the confinement refuses it)."""
    path = tmp_path / "outside" / "secret.png"
    path.parent.mkdir(exist_ok=True)
    Image.new("RGB", (64, 64)).save(path)
    return path


def _edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


# -- confinement: one helper, every reader ------------------------------------------------------
def test_the_helper_keeps_paths_inside_the_root_symlinks_followed(tmp_path):
    from autoprune.engine.paths import confined

    root = tmp_path / "data"
    (root / "a").mkdir(parents=True)
    (root / "a" / "x.png").write_bytes(b"x")
    assert confined("a/x.png", root, where="w") == root / "a" / "x.png"
    assert confined("../data/a/x.png", root, base=root / "a", where="w") == \
        root / "a" / "../data/a/x.png"
    assert confined(str(root / "a" / "x.png"), root, where="w") == root / "a" / "x.png"
    secret = _secret(tmp_path)
    (root / "a" / "link.png").symlink_to(secret)
    for entry in ("../outside/secret.png", str(secret), "a/link.png", "a/../../outside"):
        with pytest.raises(ConfigError) as e:
            confined(entry, root, where="list.txt line 3")
        msg = assert_one_line(e)
        assert msg.startswith("list.txt line 3: ") and OUTSIDE in msg and repr(entry) in msg
    with pytest.raises(ConfigError, match="is not a usable path"):
        confined("a\0b", root, where="w")


@needs_fmnist
@pytest.mark.parametrize("how", ["dotdot", "passwd", "absolute", "symlink"])
def test_coco_file_name_outside_the_root_is_refused(sets, tmp_path, how):
    from autoprune.tasks.detection.formats import prepare_yolo_data

    coco = _copy(sets, "coco", tmp_path)
    secret = _secret(tmp_path)
    name = {"dotdot": "../../outside/secret.png", "passwd": "../" * 16 + "etc/passwd",
            "absolute": str(secret), "symlink": "00000.png"}[how]
    if how == "symlink":
        (coco / "val" / "00000.png").unlink()
        (coco / "val" / "00000.png").symlink_to(secret)
    else:
        _edit_json(coco / "annotations" / "instances_val.json",
                   lambda d: d["images"][0].update(file_name=name))
    with pytest.raises(ConfigError) as e:
        prepare_yolo_data(coco, cache_dir=tmp_path / "cache")
    msg = assert_one_line(e)
    assert "instances_val.json: image id 1" in msg and OUTSIDE in msg, msg
    assert not list((tmp_path / "cache").rglob("secret*")), "nothing was linked into the cache"


@needs_fmnist
def test_arrays_named_like_the_images_are_warned_of_and_left_alone(sets, tmp_path):
    """Ultralytics' loader reads ``<image>.npy`` instead of the image, and rewrites or deletes it:
    reading a data.yaml warns (naming one) when such files lie beside its images, and says
    nothing otherwise; reading it leaves them as they were."""
    import warnings

    import numpy as np

    from autoprune.tasks.detection.data import read_data_yaml

    yolo = _copy(sets, "yolo", tmp_path)
    cfg = yaml.safe_load((yolo / "data.yaml").read_text())
    (yolo / "data.yaml").write_text(yaml.safe_dump({**cfg, "path": str(yolo)}))  # the copy
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_data_yaml(yolo / "data.yaml")  # no warning
    image = sorted((yolo / "images" / "val").glob("*.png"))[0]
    depth = image.with_suffix(".npy")
    np.save(depth, np.zeros((4, 4), dtype=np.float32))  # someone's own array, not an image
    before = depth.read_bytes()
    with pytest.warns(UserWarning, match=r"1 val image\(s\) have a \.npy file .*"
                      + image.stem + r"\.npy"):
        read_data_yaml(yolo / "data.yaml")
    assert depth.read_bytes() == before


@needs_fmnist
@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink"])
def test_yolo_image_list_lines_outside_the_root_are_refused(sets, tmp_path, how):
    """A data.yaml whose val: is an image list (.txt): its lines are read relative to the list,
    and one that leads out of the data root is one line naming the list and the line; the same
    list with its lines inside the root reads."""
    from autoprune.tasks.detection.data import read_data_yaml

    yolo = _copy(sets, "yolo", tmp_path)
    secret = _secret(tmp_path)
    images = sorted((yolo / "images" / "val").glob("*.png"))
    listing = yolo / "val.txt"
    listing.write_text("".join(f"./images/val/{p.name}\n" for p in images))
    cfg = yaml.safe_load((yolo / "data.yaml").read_text())
    cfg.update(path=str(yolo), val="val.txt")  # the copy is the data root
    (yolo / "data.yaml").write_text(yaml.safe_dump(cfg))
    assert read_data_yaml(yolo / "data.yaml")["val"] == sorted(p.resolve() for p in images)
    bad = {"dotdot": "../outside/secret.png", "absolute": str(secret),
           "symlink": "images/val/link.png"}[how]
    if how == "symlink":
        (yolo / "images" / "val" / "link.png").symlink_to(secret)
    listing.write_text(listing.read_text() + bad + "\n")
    with pytest.raises(ConfigError) as e:
        read_data_yaml(yolo / "data.yaml")
    msg = assert_one_line(e)
    assert f"val.txt line {len(images) + 1}" in msg and OUTSIDE in msg, msg


@needs_fmnist
def test_voc_lists_and_filenames_outside_the_root_are_refused(sets, tmp_path):
    from autoprune.tasks.detection.formats import prepare_yolo_data

    _secret(tmp_path)
    (tmp_path / "outside" / "secret.xml").write_text(
        (sets["voc"] / "Annotations" / "val_00000.xml").read_text())
    voc = _copy(sets, "voc", tmp_path)  # an ImageSets id climbing out
    (voc / "ImageSets" / "Main" / "val.txt").write_text("../../outside/secret\n")
    with pytest.raises(ConfigError) as e:
        prepare_yolo_data(voc, cache_dir=tmp_path / "c1")
    assert "val.txt line 1" in assert_one_line(e) and OUTSIDE in str(e.value)
    voc = Path(shutil.copytree(sets["voc"], tmp_path / "voc2"))  # <filename> climbing out
    (voc / "JPEGImages" / "val_00000.png").unlink()
    xml = voc / "Annotations" / "val_00000.xml"
    xml.write_text(xml.read_text().replace("<filename>val_00000.png",
                                           "<filename>../../outside/secret.png"))
    with pytest.raises(ConfigError) as e:
        prepare_yolo_data(voc, cache_dir=tmp_path / "c2")
    assert "val_00000.xml <filename>" in assert_one_line(e) and OUTSIDE in str(e.value)
    px = _copy(sets, "voc-paddlex", tmp_path)  # a PaddleX list line
    (px / "val_list.txt").write_text("../outside/secret.png ../outside/secret.xml\n")
    with pytest.raises(ConfigError) as e:
        prepare_yolo_data(px, cache_dir=tmp_path / "c3")
    assert "val_list.txt line 1" in assert_one_line(e) and OUTSIDE in str(e.value)


@needs_fmnist
@pytest.mark.parametrize("fmt, line", [
    ("cls-paddlex", "/etc/passwd 0"), ("cls-paddlex", "../outside/secret.png 0"),
    ("csv", "/etc/passwd,T-shirt/top"), ("csv", "../outside/secret.png,T-shirt/top")])
def test_classification_lists_outside_the_root_are_refused(sets, tmp_path, fmt, line):
    from autoprune.tasks.classification.formats import read_classification_data

    _secret(tmp_path)
    root = _copy(sets, fmt, tmp_path)
    file = root / ("val_list.txt" if fmt == "cls-paddlex" else "val.csv")
    lines = file.read_text().splitlines()
    lines[-1] = line
    file.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as e:
        read_classification_data(root, transform=None, split="val")
    msg = assert_one_line(e)
    assert f"{file.name} line {len(lines)}" in msg and OUTSIDE in msg, msg


@needs_fmnist
def test_segmentation_lists_outside_the_root_are_refused(sets, tmp_path):
    from autoprune.tasks.segmentation.formats import read_segmentation_data

    secret = _secret(tmp_path)
    shutil.copy(secret, tmp_path / "outside" / "secret_mask.png")
    px = _copy(sets, "seg-paddlex", tmp_path)
    (px / "val_list.txt").write_text("../outside/secret.png ../outside/secret_mask.png\n")
    with pytest.raises(ConfigError) as e:
        read_segmentation_data(px, split="val", input_size=64)
    assert "val_list.txt line 1" in assert_one_line(e) and OUTSIDE in str(e.value)
    voc = _copy(sets, "seg-voc", tmp_path)
    (voc / "JPEGImages" / "evil.png").symlink_to(secret)
    (voc / "ImageSets" / "Segmentation" / "val.txt").write_text("evil\n")
    with pytest.raises(ConfigError) as e:
        read_segmentation_data(voc, split="val", input_size=64)
    assert "val.txt line 1 ('evil')" in assert_one_line(e) and OUTSIDE in str(e.value)


# -- facts a data file states, checked ----------------------------------------------------------
@needs_fmnist
def test_coco_duplicate_category_names_are_refused(sets, tmp_path):
    from autoprune.tasks.detection.formats import prepare_yolo_data

    coco = _copy(sets, "coco", tmp_path)
    for split in ("train", "val"):
        _edit_json(coco / "annotations" / f"instances_{split}.json",
                   lambda d: d["categories"].append({"id": 11, "name": CLASSES[2]}))
    with pytest.raises(ConfigError) as e:
        prepare_yolo_data(coco, cache_dir=tmp_path / "cache")
    msg = assert_one_line(e)
    assert f"categories[10] (id 11) repeats the name {CLASSES[2]!r} of category id 3" in msg


@needs_fmnist
def test_image_sizes_a_data_file_states_are_checked_against_the_images(sets, tmp_path):
    from autoprune.tasks.detection.formats import prepare_yolo_data

    coco = _copy(sets, "coco", tmp_path)
    _edit_json(coco / "annotations" / "instances_val.json",
               lambda d: d["images"][1].update(width=640, height=640))
    with pytest.raises(ConfigError) as e:
        prepare_yolo_data(coco, cache_dir=tmp_path / "c1")
    msg = assert_one_line(e)
    assert "image id 2 gives the image size 640x640 but" in msg and "is 64x64 pixels" in msg
    voc = _copy(sets, "voc", tmp_path)
    xml = voc / "Annotations" / "train_00001.xml"
    xml.write_text(xml.read_text().replace("<width>64<", "<width>640<"))
    with pytest.raises(ConfigError) as e:
        prepare_yolo_data(voc, cache_dir=tmp_path / "c2")
    assert "train_00001.xml <size> gives the image size 640x64" in assert_one_line(e)


@needs_fmnist
def test_csv_ids_in_one_split_and_names_in_the_other_are_refused(sets, tmp_path):
    from autoprune.tasks.classification.formats import read_classification_data

    root = _copy(sets, "csv", tmp_path)
    rows = [r.split(",") for r in (root / "train.csv").read_text().splitlines()[1:]]
    (root / "train.csv").write_text("".join(f"{p},{CLASSES.index(c)}\n" for p, c in rows))
    with pytest.raises(ConfigError) as e:
        read_classification_data(root, transform=None, split="val")
    msg = assert_one_line(e)
    assert "train.csv labels its classes by id but" in msg and "val.csv by name" in msg
    (root / "train.csv").write_text(f"{rows[0][0]},3\n{rows[1][0]},{rows[1][1]}\n")
    with pytest.raises(ConfigError, match="train.csv mixes class ids and class names"):
        read_classification_data(root, transform=None, split="train")
    (root / "labels.txt").write_text("\n".join(CLASSES) + "\n")  # a map: both kinds fine
    ds = read_classification_data(root, transform=None, split="train")
    assert ds.targets == [3, CLASSES.index(rows[1][1])]


def _first_seen(voc: Path) -> list[str]:
    seen: list[str] = []
    for n in range(SET["train"]):
        for obj in ET.parse(voc / "Annotations" / f"train_{n:05d}.xml").iter("object"):
            if obj.findtext("name") not in seen:
                seen.append(obj.findtext("name"))
    return seen


def _label_classes(folder: Path) -> dict[str, list[int]]:
    return {p.stem.split("_")[-1]: [int(ln.split()[0]) for ln in p.read_text().splitlines()]
            for p in sorted(folder.glob("*.txt"))}


@needs_fmnist
def test_voc_without_a_class_order_is_mapped_to_the_models_names_or_refused(sets, tmp_path):
    """The finding: a VOC set without labels.txt takes its classes in the order first seen,
    which is not the checkpoint's; its labels were evaluated id for id. Now they are mapped by
    name to the model's names, and refused (naming the order) where the model records none."""
    from autoprune.tasks.detection.adapter import DetectionAdapter
    from autoprune.tasks.detection.formats import prepare_yolo_data

    voc = _copy(sets, "voc", tmp_path)
    (voc / "labels.txt").unlink()
    seen = _first_seen(voc)
    assert seen != list(CLASSES)[:len(seen)]  # (the case of the finding)
    src = prepare_yolo_data(voc, cache_dir=tmp_path / "c1", model_names=list(CLASSES))
    assert src.names == dict(enumerate(CLASSES))
    assert src.record["class_names_from"] == "the model's names"
    yolo = _label_classes(sets["yolo"] / "labels" / "val")  # the same objects, CLASSES' ids
    assert _label_classes(tmp_path / "c1" / "labels" / "val") == yolo
    with pytest.raises(ConfigError) as e:
        prepare_yolo_data(voc, cache_dir=tmp_path / "c2", model_names=[])
    msg = assert_one_line(e)
    assert "names no class order (no labels.txt, no class_names) and the model records no " \
           f"class names: its classes as first seen are {', '.join(seen[:3])}" in msg
    with pytest.raises(ConfigError, match="is a '.*', a class the model does not name"):
        prepare_yolo_data(voc, cache_dir=tmp_path / "c3", model_names=list(CLASSES[:2]))
    # what `autoprune report` and an analysis of a checkpoint build: the checkpoint's names
    ckpt = ap.save_pruned(make_model("toy"), tmp_path / "ckpt.pt", task="detection",
                          arch="yolov8n", build={"num_classes": 10}, input_size=64,
                          data={"class_names": list(CLASSES)})
    meta = ap.read_pruned_metadata(ckpt)
    adapter = DetectionAdapter.for_checkpoint(meta, eval_data=voc, cache_root=tmp_path / "r",
                                              progress=False)
    assert [adapter.names[i] for i in sorted(adapter.names)] == list(CLASSES)
    unnamed = {**meta, "data": {}}
    with pytest.raises(ConfigError, match="the model records no class names"):
        DetectionAdapter.for_checkpoint(unnamed, eval_data=voc, cache_root=tmp_path / "r2",
                                        progress=False)
    later = DetectionAdapter(eval_data=voc, input_size=64, progress=False,
                             cache_root=tmp_path / "a")  # an analysis: the checkpoint comes
    assert later.analysis_model(str(ckpt)) == str(ckpt)  # after the data
    assert [later.names[i] for i in sorted(later.names)] == list(CLASSES)


@needs_fmnist
def test_yolo_data_naming_the_checkpoints_classes_in_another_order_is_refused(sets, tmp_path):
    from autoprune.flow.config import FlowSettings
    from autoprune.tasks.detection.adapter import DetectionAdapter
    from autoprune.tasks.detection.settings import YoloSettings

    turned = list(reversed(CLASSES))
    ckpt = ap.save_pruned(make_model("toy"), tmp_path / "ckpt.pt", task="detection",
                          arch="yolov8n", build={"num_classes": 10}, input_size=64,
                          data={"class_names": turned})
    flow = FlowSettings(save_dir=str(tmp_path / "run"), pretrain_weights=str(ckpt))
    with pytest.raises(ConfigError) as e:  # train(..., pretrain_weights=<that checkpoint>)
        DetectionAdapter.from_settings(YoloSettings(input_size=64),
                                       {"data": sets["yolo"] / "data.yaml"}, flow)
    msg = assert_one_line(e)
    assert "the model was trained on the same classes in another order" in msg
    voc = _copy(sets, "voc", tmp_path)  # VOC (or COCO) data are mapped by name instead
    adapter = DetectionAdapter.from_settings(YoloSettings(input_size=64), {"data": voc}, flow)
    assert [adapter.names[i] for i in sorted(adapter.names)] == turned


# -- the data cache ------------------------------------------------------------------------------
@needs_fmnist
def test_the_data_cache_follows_the_annotations_content_and_the_images_place(sets, tmp_path):
    from autoprune.tasks.detection.formats import prepare_yolo_data

    coco = _copy(sets, "coco", tmp_path)
    cache = tmp_path / "cache"
    prepare_yolo_data(coco, cache_dir=cache)
    ann = coco / "annotations" / "instances_val.json"
    stat, text = ann.stat(), ann.read_text()
    data = json.loads(text)
    k, a = next((k, a) for k, a in enumerate(data["annotations"]) if a["category_id"] < 9)
    a["category_id"] += 1  # relabelled in place: the same size, and the same mtime below
    assert len(json.dumps(data)) == len(text)
    ann.write_text(json.dumps(data))
    os.utime(ann, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    line = sum(b["image_id"] == a["image_id"] for b in data["annotations"][:k])
    image = next(i for i in data["images"] if i["id"] == a["image_id"])
    prepare_yolo_data(coco, cache_dir=cache)
    lines = (cache / "labels" / "val" / image["file_name"]).with_suffix(".txt").read_text()
    assert lines.splitlines()[line].split()[0] == str(a["category_id"] - 1), \
        "the relabelled file is converted again"
    (coco / "images").mkdir()  # the images moved from <split>/ to images/<split>/
    for split in ("train", "val"):
        (coco / split).rename(coco / "images" / split)
    src = prepare_yolo_data(coco, cache_dir=cache)
    from autoprune.tasks.detection.data import read_data_yaml
    data = read_data_yaml(src.yaml)
    assert all(p.resolve().is_file() for p in data["train"] + data["val"])
    assert all("images" in p.resolve().relative_to(coco.resolve()).parts[:1]
               for p in data["val"])


# -- pose ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("flip, ok", [([1, 0, 2, 4, 3], True), ([0, 1, 2, 3, 4], True),
                                      ([1, 2, 3, 4, 0], False), ([1, 0, 3, 4, 2], False)])
def test_pose_flip_idx_must_pair_twins(tmp_path, flip, ok):
    from autoprune.tasks.pose.data import kpt_shape_of

    cfg = {"kpt_shape": [5, 3], "flip_idx": flip}
    if ok:
        assert kpt_shape_of(cfg, tmp_path / "data.yaml") == [5, 3]
        return
    with pytest.raises(ConfigError) as e:
        kpt_shape_of(cfg, tmp_path / "data.yaml")
    assert "twins go in pairs (flip_idx[flip_idx[i]] == i" in assert_one_line(e)


# -- export and show -----------------------------------------------------------------------------
def _cls_ckpt(tmp_path: Path, name: str, arch: str = "timm/resnet18", **meta) -> Path:
    return ap.save_pruned(make_model("toy"), tmp_path / name, task="classification", arch=arch,
                          build={"num_classes": 10}, input_size=32, **meta)


def test_export_refuses_a_baseline_of_another_model(tmp_path, capsys):
    pruned = _cls_ckpt(tmp_path, "pruned.pt")
    for other in (_cls_ckpt(tmp_path, "other.pt", arch="timm/mobilenetv3_small_100"),
                  ap.save_pruned(make_model("toy"), tmp_path / "seg.pt", task="segmentation",
                                 arch="smp/unet/resnet18", build={"num_classes": 10})):
        code = main(["export", str(pruned), str(tmp_path / "m.onnx"), "--baseline", str(other)])
        err = capsys.readouterr().err
        assert code == 2 and "\n" not in err.strip(), err
        assert f"--baseline {other} holds a" in err and "pass the checkpoint" in err, err
        assert not (tmp_path / "m.onnx").exists()


def test_export_writes_a_latency_change_with_one_sign(tmp_path, capsys, monkeypatch):
    from autoprune.cli import commands, deploy

    pytest.importorskip("onnxruntime")  # the check it prints runs where ONNX Runtime is
    pruned = _cls_ckpt(tmp_path, "pruned.pt")
    base = _cls_ckpt(tmp_path, "base.pt")

    def export(checkpoint, output, **_):
        Path(output).write_bytes(b"onnx")
        return Path(output)

    monkeypatch.setattr(deploy, "export_checkpoint", export)
    for reduction, shown in ((-1.721, "+172.1%"), (0.3, "-30.0%")):
        monkeypatch.setattr(deploy, "check_onnx", lambda *a, r=reduction, **k: {
            "latency_ms": 2.0, "baseline_ms": 1.0, "reduction": r, "max_abs_diff": 0.0})
        assert main(["export", str(pruned), str(tmp_path / "m.onnx"), "--overwrite",
                     "--baseline", str(base)]) == 0
        out = capsys.readouterr().out
        assert f"({shown}, against" in out and "--" not in out, out
    assert commands.signed_percent(-0.5) == "-50.0%"


ESC = "\x1b]0;owned\x07\x1b[2J\u202e"


def test_show_escapes_what_it_prints_from_a_file(tmp_path, capsys):
    from autoprune.engine.store import SensitivityRecord, write_record

    record = SensitivityRecord(model={"arch": f"resnet18{ESC}", "fingerprint": "f"},
                               criterion="l1_norm")
    record.metric.update(name=f"top1{ESC}", baseline=0.9)
    record.set_point(f"layer1{ESC}", 0.5, 0.1)
    path = write_record(record, tmp_path / "s.json")
    ckpt = _cls_ckpt(tmp_path, "c.pt", data={"mean": f"x{ESC}"}, metrics={f"top1{ESC}": 0.5},
                     epoch=f"3{ESC}")
    for file in (path, ckpt):
        assert main(["show", str(file)]) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out, repr(out)
        assert "\\x1b]0;owned\\x07\\x1b[2J\\u202e" in out, out


# -- hub caches and users' weight files ----------------------------------------------------------
class _RunsCode:
    """A pickle that runs code when unpickled (what a malicious weights file holds)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _offline_hub(monkeypatch, home: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(home))
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)


def _replace(link: Path, data: bytes) -> None:
    """Write ``data`` as the blob a hub cache's ``link`` points at."""
    target = link.resolve()
    target.unlink()
    target.write_bytes(data)


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """An empty, offline Hugging Face cache in tmp_path, and a resnet18 to seed it with."""
    import timm

    _offline_hub(monkeypatch, tmp_path / "hf")
    torch.manual_seed(0)
    return timm.create_model("resnet18", pretrained=False, num_classes=10)


def test_an_unknown_hub_tag_offline_says_so_not_not_cached(hub):
    from autoprune.tasks.classification.pretrained import create_pretrained

    with pytest.raises(ConfigError) as e:
        create_pretrained("timm/resnet18", 5, "hf-hub:timm/resnet18.a1_in1kk")
    msg = assert_one_line(e)
    assert "timm lists no pretrained tag 'a1_in1kk' for 'resnet18' (its tags: a1_in1k" in msg
    assert "the Hugging Face cache holds no repo timm/resnet18.a1_in1kk" in msg
    assert "whether the hub has one cannot be asked (HF_HUB_OFFLINE is set)" in msg
    assert "not cached" not in msg


@pytest.mark.parametrize("damage, words, readers", [
    (lambda f: _replace(f.parent / "config.json", b'{"architecture": "resnet18", '),
     "config.json is not a readable config.json (", ("model", "data config")),
    (lambda f: _replace(f.parent / "config.json", b"[1, 2]"),
     "config.json is not a config.json of settings (it holds a list)", ("model", "data config")),
    (lambda f: _replace(f, f.resolve().read_bytes()[:5000]),
     "model.safetensors cannot be read as weights (SafetensorError", ("model",)),
])
def test_a_damaged_cached_hub_repo_is_one_line(hub, damage, words, readers):
    from autoprune.tasks.classification.pretrained import create_pretrained, \
        pretrained_data_config

    file = hub_cache.seed_hf_cache(hub, "someone/r18")
    damage(file)
    calls = {"model": lambda: create_pretrained("timm/resnet18", 10, "hf-hub:someone/r18"),
             "data config": lambda: pretrained_data_config("timm/resnet18",
                                                           "hf-hub:someone/r18")}
    for reader in readers:
        with pytest.raises(ConfigError) as e:
            calls[reader]()
        msg = assert_one_line(e)
        assert words in msg and "delete it and fetch someone/r18 again" in msg, (reader, msg)


def test_a_truncated_registered_timm_file_is_one_line(hub):
    from autoprune.tasks.classification.pretrained import create_pretrained

    file = hub_cache.seed_hf_cache(hub, "timm/resnet18.a1_in1k")
    _replace(file, file.resolve().read_bytes()[:5000])
    with pytest.raises(ConfigError) as e:
        create_pretrained("timm/resnet18", 5, True)
    msg = assert_one_line(e)
    assert "model.safetensors cannot be read as weights" in msg
    assert "delete it and fetch timm/resnet18.a1_in1k again" in msg


def test_a_cached_config_of_other_classes_than_its_weights_is_one_line(hub):
    import timm
    from autoprune.tasks.classification.pretrained import create_pretrained

    config = json.loads((hub_cache.seed_hf_cache(hub, "someone/r18").parent /
                         "config.json").read_text())  # says 10 classes
    five = timm.create_model("resnet18", pretrained=False, num_classes=5)
    hub_cache.seed_hf_cache(five, "someone/r18b", config=config)
    with pytest.raises(ConfigError) as e:
        create_pretrained("timm/resnet18", 10, "hf-hub:someone/r18b")
    msg = assert_one_line(e)
    assert "config.json says num_classes=10 but" in msg and "a classifier of 5 classes" in msg


def test_a_payload_pytorch_model_bin_in_the_hub_cache_is_refused_and_runs_nothing(hub,
                                                                                  tmp_path):
    from autoprune.tasks.classification.pretrained import create_pretrained

    marker = tmp_path / "code_ran"
    file = hub_cache.seed_hf_cache(hub, "someone/r18", filename="pytorch_model.bin")
    payload = tmp_path / "payload.bin"
    torch.save({"fc.weight": _RunsCode(marker)}, payload)
    _replace(file, payload.read_bytes())
    with pytest.raises(ConfigError) as e:
        create_pretrained("timm/resnet18", 10, "hf-hub:someone/r18")
    msg = assert_one_line(e)
    assert msg.startswith("refused ") and "pytorch_model.bin: it is a pickle holding objects " \
        "other than tensors" in msg and "nothing in it ran" in msg, msg
    assert not marker.exists()


@pytest.mark.parametrize("damage, words", [
    ("truncate", "mobilenet_v2-b0353104.pth cannot be read as weights (RuntimeError"),
    ("payload", "refused "),
])
def test_a_damaged_torchvision_file_is_one_line(monkeypatch, tmp_path, damage, words):
    import torchvision
    from autoprune.tasks.classification.pretrained import create_pretrained, \
        seed_torchvision_cache

    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(torch.hub, "_hub_dir", None)
    file = seed_torchvision_cache(torchvision.models.mobilenet_v2(), "mobilenet_v2",
                                  "IMAGENET1K_V1")
    marker = tmp_path / "code_ran"
    if damage == "truncate":
        file.write_bytes(file.read_bytes()[:4000])
    else:
        torch.save({"features.0.0.weight": _RunsCode(marker)}, file)
    with pytest.raises(ConfigError) as e:
        create_pretrained("torchvision/mobilenet_v2", 5, "IMAGENET1K_V1")
    msg = assert_one_line(e)
    assert words in msg and "delete it and fetch torchvision" in msg, msg
    assert not marker.exists()


def test_smp_encoder_weights_of_a_payload_file_are_refused(tmp_path):
    from autoprune.tasks.segmentation.models import build_segmenter

    marker = tmp_path / "code_ran"
    payload = tmp_path / "encoder.pt"
    torch.save({"conv1.weight": _RunsCode(marker)}, payload)
    with pytest.raises(ConfigError) as e:
        build_segmenter("unet/resnet18", 3, encoder_weights=str(payload))
    msg = assert_one_line(e)
    assert msg.startswith(f"refused {payload}: it is a pickle") and not marker.exists()
    payload.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(ConfigError, match="encoder.pt cannot be read as weights"):
        build_segmenter("unet/resnet18", 3, encoder_weights=str(payload))


def test_smp_weights_that_cannot_be_fetched_keep_their_own_message(monkeypatch, tmp_path):
    """Behind a proxy that never answers the probe fails; the one-line 'not cached' error comes
    through whole, not cut at 200 characters and suffixed 'check model_kwargs'."""
    from autoprune.tasks.segmentation.models import build_segmenter

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(weights, "reachable", lambda *a, **k: False)
    with pytest.raises(ConfigError) as e:
        build_segmenter("unet/resnet18", 3, encoder_weights="imagenet")
    msg = assert_one_line(e)
    assert "check model_kwargs" not in msg and "smp cannot build" not in msg, msg
    assert "are not cached (model.safetensors not in" in msg
    assert msg.endswith("or pass encoder_weights=<local file of encoder weights>"), msg


# -- layouts, resumes, records, temp files --------------------------------------------------------
@needs_fmnist
def test_a_cityscapes_root_without_gtfine_is_named_as_cityscapes(sets, tmp_path):
    from autoprune.tasks.segmentation.formats import resolve_segmentation_data

    root = _copy(sets, "cityscapes", tmp_path)
    shutil.rmtree(root / "gtFine")
    with pytest.raises(ConfigError) as e:
        resolve_segmentation_data(root, train=True, input_size=64, num_classes=None)
    msg = assert_one_line(e)
    assert "is read as a Cityscapes root but has no gtFine/" in msg and "images/" not in msg


def _image_folder(root: Path) -> Path:
    for c in ("a", "b"):
        (root / c).mkdir(parents=True)
        for n in range(4):
            Image.new("RGB", (32, 32), (60 * n, 100 if c == "a" else 0, 0)).save(
                root / c / f"{n}.png")
    return root


def test_a_renamed_run_folder_resumes_in_the_folder_it_is_given(tmp_path, capsys):
    from autoprune import classification as cls

    data = _image_folder(tmp_path / "data")
    cls.train("resnet18", data, data, epochs=1, batch_size=4, input_size=32, progress=False,
              save_dir=tmp_path / "run1")
    (tmp_path / "run1").rename(tmp_path / "run2")
    assert main(["train", "--resume", str(tmp_path / "run2")]) == 0, capsys.readouterr().err
    run2 = tmp_path / "run2"
    assert not (tmp_path / "run1").exists() and (run2 / "baseline" / "best.pt").is_file()
    assert __import__("yaml").safe_load((run2 / "args.yaml").read_text())["save_dir"] == str(run2)


def test_the_settings_that_named_paths_in_a_renamed_run_folder_follow_it():
    from autoprune.flow.config import follow_folder

    stored = {"save_dir": "runs/a", "sensitivities_file": "runs/a/s.json", "model": "resnet18",
              "data": "runs/ab/x"}
    assert follow_folder(stored, "runs/b") == {**stored, "save_dir": "runs/b",
                                               "sensitivities_file": "runs/b/s.json"}


def test_a_sensitivity_record_of_the_wrong_shape_is_refused_where_it_is_read(tmp_path, capsys):
    """The regression: ``extra.latency`` a string beside an intact latency section failed in
    ``latency_ms`` with a raw AttributeError; now reading the file names the field."""
    from autoprune.engine.store import SensitivityRecord, read_record, write_record

    record = SensitivityRecord(model={"arch": "toy", "fingerprint": "f"})
    record.metric.update(name="top1", baseline=0.9)
    record.set_point("conv", 0.5, 0.1)
    record.set_latency("conv", 0.5, 0.8)
    record.extra["latency"] = {"device": "cpu", "threads": 1, "batch": 1, "baseline_ms": 2.0}
    path = write_record(record, tmp_path / "s.json")
    assert read_record(path).latency_ms() == {"conv": {0.5: 1.6}}
    for field, value in (("latency", "fast"), ("latency", {"baseline_ms": "2"}),
                         ("latency", {"baseline_ms": float("inf")}), ("how", [1]),
                         ("eval_images", "all"), ("non_finite_points", "x")):
        data = json.loads(path.read_text())
        data["extra"][field] = value
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(data))
        with pytest.raises(SensitivityFileError) as e:
            read_record(bad)
        named = "holds Infinity, which JSON" if value == {"baseline_ms": float("inf")} else \
            f"field 'extra.{field}"  # a NaN or Infinity is refused as the JSON is read
        assert named in assert_one_line(e) and "is damaged" in str(e.value)
    assert main(["show", str(bad)]) == 2
    assert "is damaged" in capsys.readouterr().err


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


def test_stale_temp_files_of_a_killed_write_are_cleaned_on_the_next_one(tmp_path):
    """A write killed between its temp file and the rename leaves ``.<name>.<pid>.<rand>.tmp``
    beside args.yaml or in ``profiles build --out``: the next write of that file removes those
    of dead processes (only that exact pattern; a live writer's, and other files, are kept)."""
    from autoprune.flow.config import save_run_config
    from autoprune.flow.defaults import register_profile

    dead, alive = _dead_pid(), os.getpid()
    run, out = tmp_path / "run", tmp_path / "profiles"
    for folder, name in ((run, "args.yaml"), (out, "index.json")):
        folder.mkdir()
        for pid in (dead, alive):
            (folder / f".{name}.{pid}.ab12cd34.tmp").write_text("half")
        (folder / f"{name}.notes.tmp").write_text("the user's")
    save_run_config(run, {"task": "classification"})
    register_profile("classification", "timm/resnet18", "resnet18.json", out)
    for folder, name in ((run, "args.yaml"), (out, "index.json")):
        left = sorted(p.name for p in folder.iterdir())
        assert left == sorted([name, f".{name}.{alive}.ab12cd34.tmp", f"{name}.notes.tmp"]), left


def test_the_catalogue_rows_of_this_round_name_tests_that_exist():
    """docs/bad_inputs.md's issue-38 rows cite tests of this file (HI::) and cases of
    tests/test_bad_inputs.py (BI[...]) that exist."""
    import re

    import test_bad_inputs

    text = (Path(__file__).resolve().parents[1] / "docs" / "bad_inputs.md").read_text()
    section = text.split("## Data files, hub caches, exports and resumes (issue 38)", 1)[1]
    cited = set(re.findall(r"HI::(\w+)", section))
    assert cited and cited <= set(globals()), cited - set(globals())
    cases = set(re.findall(r"BI\[([^\]]+)\]", section))
    assert cases and cases <= set(test_bad_inputs.CASES), cases - set(test_bad_inputs.CASES)

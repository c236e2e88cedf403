"""The data formats users bring (issue 34): COCO and Pascal VOC detection converted to YOLO labels
equal to the YOLO copy of the same Fashion-MNIST scenes, read by Ultralytics, cached once and
converted again when the source changes; PaddleX lists and CSV for classification; VOC,
Cityscapes and PaddleX lists for segmentation giving the tensors of the images/ + masks/ copy;
and each malformed variant as a one-line ConfigError naming its file and field. Tiny sets: 64 px,
a handful of images."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from autoprune.datasets import CLASSES
from autoprune.datasets.formats import (CITYSCAPES_LABEL_IDS, encode_rle, folder_name,
                                        write_cityscapes_like, write_coco_dataset,
                                        write_csv_classification, write_image_folder,
                                        write_paddlex_classification, write_paddlex_segmentation,
                                        write_voc_detection, write_voc_segmentation)
from autoprune.datasets.scenes import write_segmentation_dataset, write_yolo_dataset
from autoprune.errors import ConfigError
from autoprune.tasks.classification import formats as cls_formats
from autoprune.tasks.detection import formats as det_formats
from autoprune.tasks.detection.data import read_data_yaml
from autoprune.tasks.segmentation import formats as seg_formats
from autoprune.tasks.segmentation.data import ImageMaskFolder

from conftest import assert_one_line, needs_fmnist

pytestmark = needs_fmnist
SET = dict(train=8, val=4, size=64, seed=3)


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its size and mtime (to show nothing was written there)."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def _numbers(path: Path) -> list[list[float]]:
    return [[float(v) for v in line.split()] for line in path.read_text().splitlines()]


def assert_same_labels(yolo_root: Path, cache: Path, rename=lambda split, name: name) -> int:
    """Every label file of the YOLO copy equals (up to 1e-5) the converted one of the same
    image; returns the number of objects compared."""
    objects = 0
    for split in ("train", "val"):
        files = sorted((yolo_root / "labels" / split).glob("*.txt"))
        assert len(files) == SET[split]
        for f in files:
            ours = cache / "labels" / split / rename(split, f.name)
            a, b = _numbers(f), _numbers(ours)
            assert len(a) == len(b), (f, ours)
            for la, lb in zip(a, b):
                assert la[0] == lb[0] and len(la) == len(lb), (f, la, lb)
                assert np.allclose(la, lb, rtol=0, atol=1e-5), (f, la, lb)
            objects += len(a)
    return objects


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    """The same scenes written as YOLO (boxes, polygons), COCO (boxes, polygons, RLE) and VOC
    (ImageSets lists, PaddleX lists)."""
    root = tmp_path_factory.mktemp("formats")
    return {
        "yolo": write_yolo_dataset(root / "yolo", **SET).parent,
        "yolo-seg": write_yolo_dataset(root / "yolo_seg", task="segment", **SET).parent,
        "coco": write_coco_dataset(root / "coco", **SET),
        "coco-seg": write_coco_dataset(root / "coco_seg", task="segment", **SET),
        "coco-rle": write_coco_dataset(root / "coco_rle", task="segment", rle=True, **SET),
        "voc": write_voc_detection(root / "voc", **SET),
        "voc-paddlex": write_voc_detection(root / "voc_px", lists="paddlex", **SET),
    }


def _voc_name(split: str, name: str) -> str:
    return f"{split}_{name}"


# -- detection: the key equality ----------------------------------------------------------------
@pytest.mark.parametrize("fmt,task,yolo", [
    ("coco", "detect", "yolo"), ("coco-seg", "segment", "yolo-seg"),
    ("coco-rle", "segment", "yolo-seg"), ("voc", "detect", "yolo"),
    ("voc-paddlex", "detect", "yolo")])
def test_converted_labels_equal_the_yolo_copy_of_the_same_images(sets, tmp_path, fmt, task, yolo):
    before = _tree(sets[fmt])
    src = det_formats.prepare_yolo_data(sets[fmt], cache_dir=tmp_path / "cache", task=task)
    assert src.format == fmt.split("-")[0] and src.source == str(sets[fmt])
    assert src.names == dict(enumerate(CLASSES)) and src.splits == {"train": 8, "val": 4}
    assert src.describe() == f"{src.format}, 2 splits, 10 classes, 8 train + 4 val images"
    rename = _voc_name if fmt.startswith("voc") else (lambda split, name: name)
    assert assert_same_labels(sets[yolo], tmp_path / "cache", rename) > 12
    data = read_data_yaml(src.yaml)  # the project's own check accepts it
    assert data["names"] == src.names and len(data["train"]) == 8 and len(data["val"]) == 4
    if task == "segment":  # and the instance-segmentation task's
        from autoprune.tasks.instance_segmentation.data import check_polygons
        check_polygons(data)
    image = data["train"][0]  # a link to the user's image, in the cache
    assert image.is_symlink() and image.resolve().is_relative_to(sets[fmt].resolve())
    assert _tree(sets[fmt]) == before, "nothing is written next to the user's data"
    record = json.loads((tmp_path / "cache" / det_formats.MARKER).read_text())["record"]
    assert record["format"] == src.format and record["source"] == str(sets[fmt])
    assert record["names"]["0"] == "T-shirt/top" and record["splits"] == src.splits


def test_a_yolo_data_yaml_is_taken_as_it_is(sets, tmp_path):
    src = det_formats.prepare_yolo_data(sets["yolo"] / "data.yaml", cache_dir=tmp_path / "c")
    assert src.yaml == sets["yolo"] / "data.yaml" and src.format == "yolo"
    assert src.splits == {"train": 8, "val": 4} and not (tmp_path / "c").exists()
    assert det_formats.prepare_yolo_data(sets["yolo"], cache_dir=tmp_path / "c").yaml == src.yaml


def test_ultralytics_reads_the_converted_set_as_the_yolo_copy_and_trains_on_it(sets, tmp_path):
    """Ultralytics' check_det_dataset + YOLODataset give the same labels for the COCO-RLE copy as
    for the YOLO-seg copy, and a 1-epoch YOLOv8n-seg run at 64 px trains and validates on it."""
    from autoprune.tasks.detection import offline  # noqa: F401  (before Ultralytics)
    from ultralytics import YOLO
    from ultralytics.data import YOLODataset
    from ultralytics.data.utils import check_det_dataset

    src = det_formats.prepare_yolo_data(sets["coco-rle"], cache_dir=tmp_path / "cache",
                                        task="segment")
    labels = []
    for path in (src.yaml, sets["yolo-seg"] / "data.yaml"):
        data = check_det_dataset(str(path))
        ds = YOLODataset(img_path=data["val"], data=data, task="segment", imgsz=64,
                         augment=False)
        labels.append(ds.labels)
    assert [Path(x["im_file"]).name for x in labels[0]] == [Path(x["im_file"]).name
                                                            for x in labels[1]]
    for a, b in zip(*labels):
        assert np.array_equal(a["cls"], b["cls"]) and a["shape"] == b["shape"]
        assert np.allclose(a["bboxes"], b["bboxes"], atol=1e-5)
        assert all(np.allclose(s, t, atol=1e-5) for s, t in zip(a["segments"], b["segments"]))
    torch.manual_seed(0)
    result = YOLO("yolov8n-seg.yaml").train(
        data=str(src.yaml), epochs=1, imgsz=64, batch=8, workers=0, device="cpu",
        project=str(tmp_path / "runs"), name="t", plots=False, verbose=False, amp=False,
        mosaic=0.0, seed=0)
    assert "metrics/mAP50-95(M)" in result.results_dict


# -- detection: the cache -----------------------------------------------------------------------
def test_the_conversion_is_reused_and_done_again_when_the_source_changes(sets, tmp_path):
    coco = shutil.copytree(sets["coco"], tmp_path / "coco")
    cache = det_formats.cache_dir_for(tmp_path / "run", coco)
    assert cache.parent == tmp_path / "run" / "data_cache"
    assert cache == det_formats.cache_dir_for(tmp_path / "run", coco)  # stable
    assert cache != det_formats.cache_dir_for(tmp_path / "run", coco, "segment")
    det_formats.prepare_yolo_data(coco, cache_dir=cache)
    label = cache / "labels" / "val" / "00000.txt"
    first = label.stat().st_mtime_ns
    again = det_formats.prepare_yolo_data(coco, cache_dir=cache)  # unchanged: reused
    assert label.stat().st_mtime_ns == first and again.splits == {"train": 8, "val": 4}
    ann = coco / "annotations" / "instances_val.json"
    data = json.loads(ann.read_text())
    data["annotations"] = [a for a in data["annotations"] if a["image_id"] != 1]
    ann.write_text(json.dumps(data))
    det_formats.prepare_yolo_data(coco, cache_dir=cache)  # changed: converted again
    assert label.read_text() == ""
    # a conversion killed before its marker is never taken as complete
    (cache / det_formats.MARKER).unlink()
    (cache / "labels" / "val" / "00001.txt").write_text("garbage\n")
    det_formats.prepare_yolo_data(coco, cache_dir=cache)
    assert _numbers(cache / "labels" / "val" / "00001.txt")
    assert not list(cache.rglob("*.tmp"))


# -- detection: the rules -----------------------------------------------------------------------
def test_formats_are_detected_from_what_the_path_holds(sets, tmp_path):
    assert det_formats.detect_format(sets["yolo"]) == "yolo"
    assert det_formats.detect_format(sets["yolo"] / "data.yaml") == "yolo"
    assert det_formats.detect_format(sets["coco"]) == "coco"
    assert det_formats.detect_format(sets["coco"] / "annotations" / "instances_val.json") == "coco"
    assert det_formats.detect_format(sets["voc"]) == "voc"
    assert det_formats.detect_format(sets["voc-paddlex"]) == "voc"
    assert det_formats.detect_format(sets["voc-paddlex"] / "train_list.txt") == "voc"
    one = det_formats.prepare_yolo_data(sets["voc-paddlex"] / "val_list.txt",
                                        cache_dir=tmp_path / "px")  # its sibling is train
    assert one.splits == {"train": 8, "val": 4} and one.format == "voc"
    (tmp_path / "empty").mkdir()
    for path in (tmp_path / "empty", tmp_path / "nothing"):
        with pytest.raises(ConfigError) as e:
            det_formats.prepare_yolo_data(path, cache_dir=tmp_path / "c")
        assert str(path) in assert_one_line(e)
    with pytest.raises(ConfigError, match="data_format='xml'"):
        det_formats.prepare_yolo_data(sets["voc"], data_format="xml", cache_dir=tmp_path / "c")
    with pytest.raises(ConfigError, match="boxes only") as e:
        det_formats.prepare_yolo_data(sets["voc"], cache_dir=tmp_path / "c", task="segment")
    assert_one_line(e)


def test_one_coco_file_and_the_images_folder_layout(sets, tmp_path):
    """A JSON file is the val split and its sibling instances_*train*.json the train split; a
    lone file is both; images may lie in <root>/images/<split>; sparse category ids are sorted
    to 0..N-1; crowd annotations are skipped."""
    coco = shutil.copytree(sets["coco"], tmp_path / "coco")
    val = coco / "annotations" / "instances_val.json"
    src = det_formats.prepare_yolo_data(val, cache_dir=tmp_path / "c1")
    assert src.splits == {"train": 8, "val": 4} and src.record["shared"] == {}
    lone = tmp_path / "lone"
    (lone / "val").mkdir(parents=True)
    shutil.copy(val, lone / "instances_val.json")
    for p in (coco / "val").iterdir():
        shutil.copy(p, lone / "val" / p.name)
    src = det_formats.prepare_yolo_data(lone / "instances_val.json", cache_dir=tmp_path / "c2")
    assert src.splits == {"train": 4, "val": 4} and src.record["shared"] == {"train": "val"}
    assert read_data_yaml(src.yaml)["train"] == read_data_yaml(src.yaml)["val"]
    # COCO 2017's layout with images/<split>, category ids 2, 4, ... 20 and a crowd object
    (coco / "images").mkdir()
    for split in ("train", "val"):
        (coco / split).rename(coco / "images" / split)
        ann = coco / "annotations" / f"instances_{split}.json"
        data = json.loads(ann.read_text())
        for c in data["categories"]:
            c["id"] *= 2
        for a in data["annotations"]:
            a["category_id"] *= 2
        data["annotations"].append({**data["annotations"][0], "id": 999, "iscrowd": 1})
        ann.write_text(json.dumps(data))
    src = det_formats.prepare_yolo_data(coco, cache_dir=tmp_path / "c3")
    assert src.names == dict(enumerate(CLASSES))
    assert src.record["skipped"] == {"crowd": 2, "empty_box": 0, "box_as_polygon": 0}
    assert_same_labels(sets["yolo"], tmp_path / "c3")


def test_voc_class_names_come_from_the_list_labels_txt_or_first_seen(sets, tmp_path):
    voc = shutil.copytree(sets["voc"], tmp_path / "voc")
    (voc / "labels.txt").unlink()
    seen = det_formats.prepare_yolo_data(voc, cache_dir=tmp_path / "c1")
    first = []
    for n in range(8):
        import xml.etree.ElementTree as ET
        for obj in ET.parse(voc / "Annotations" / f"train_{n:05d}.xml").iter("object"):
            if obj.findtext("name") not in first:
                first.append(obj.findtext("name"))
    assert list(seen.names.values())[:len(first)] == first
    assert seen.record["class_names_from"] == "first seen"
    given = det_formats.prepare_yolo_data(voc, cache_dir=tmp_path / "c2",
                                          class_names=list(CLASSES))
    assert given.names == dict(enumerate(CLASSES))
    assert_same_labels(sets["yolo"], tmp_path / "c2", _voc_name)
    (voc.parent / "labels.txt").write_text("\n".join(CLASSES) + "\n")  # beside the root
    assert det_formats.prepare_yolo_data(voc, cache_dir=tmp_path / "c3").names == given.names
    with pytest.raises(ConfigError, match="object 1 is a '.*', a class class_names does not") as e:
        det_formats.prepare_yolo_data(voc, cache_dir=tmp_path / "c4", class_names=["Bag"])
    assert "Annotations" in assert_one_line(e)


def test_difficult_objects_are_kept_and_jpg_suffixes_found(sets, tmp_path):
    voc = shutil.copytree(sets["voc"], tmp_path / "voc")
    xml = voc / "Annotations" / "val_00000.xml"
    xml.write_text(xml.read_text().replace("<difficult>0</difficult>",
                                           "<difficult>1</difficult>"))
    for p in (voc / "JPEGImages").glob("val_*.png"):
        p.rename(p.with_suffix(".jpg"))  # PNG bytes under .jpg: found by the id
    det_formats.prepare_yolo_data(voc, cache_dir=tmp_path / "c")
    assert_same_labels(sets["yolo"], tmp_path / "c", _voc_name)


# -- detection: malformed inputs ----------------------------------------------------------------
def _edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _ann(data: dict, **fields) -> None:
    data["annotations"][0].update(fields)


COCO_BAD = {
    "box outside the image": (lambda d: _ann(d, bbox=[40, 40, 30, 10]), "outside the 64x64"),
    "unknown category id": (lambda d: _ann(d, category_id=77), "category_id 77"),
    "annotation for an image not listed": (lambda d: _ann(d, image_id=555),
                                           "image_id 555, which 'images' does not list"),
    "polygon of two points": (lambda d: _ann(d, segmentation=[[1, 1, 5, 5]]),
                              "polygon of 2 point"),
    "polygon outside the image": (lambda d: _ann(d, segmentation=[[1, 1, 90, 5, 9, 9]]),
                                  "points outside"),
    "damaged RLE": (lambda d: _ann(d, segmentation={"size": [64, 64], "counts": [5, 3]}),
                    "RLE 'counts'"),
    "RLE of another size": (lambda d: _ann(d, segmentation={"size": [32, 64], "counts": [2048]}),
                            "RLE size"),
    "image without width": (lambda d: d["images"][0].pop("width"), "'width'"),
    "empty split": (lambda d: d.update(images=[], annotations=[]), "lists no images"),
    "no objects": (lambda d: [a.update(iscrowd=1) for a in d["annotations"]], "no objects"),
    "bbox not 4 numbers": (lambda d: _ann(d, bbox=[1, 2, 3]), "has bbox [1, 2, 3]"),
    "unknown category in categories": (lambda d: d.update(categories=[{"id": "x"}]),
                                       "categories[0]"),
    "two images of one name": (lambda d: d["images"][1].update(file_name="00000.png"),
                               "share a name"),
}


@pytest.mark.parametrize("case", list(COCO_BAD))
def test_a_malformed_coco_file_is_a_one_line_error_naming_it(sets, tmp_path, case):
    change, expected = COCO_BAD[case]
    coco = shutil.copytree(sets["coco-seg"], tmp_path / "coco")
    ann = coco / "annotations" / "instances_val.json"
    _edit_json(ann, change)
    with pytest.raises(ConfigError) as e:
        det_formats.prepare_yolo_data(coco, cache_dir=tmp_path / "c", task="segment")
    msg = assert_one_line(e)
    assert expected in msg and str(ann) in msg
    assert not (tmp_path / "c" / det_formats.MARKER).exists()


def test_coco_invalid_json_and_missing_image_name_their_file(sets, tmp_path):
    coco = shutil.copytree(sets["coco"], tmp_path / "coco")
    (coco / "val" / "00002.png").unlink()
    with pytest.raises(ConfigError, match="'00002.png' .id 3. is missing") as e:
        det_formats.prepare_yolo_data(coco, cache_dir=tmp_path / "c")
    assert "instances_val.json" in assert_one_line(e)
    shutil.copy(sets["coco"] / "val" / "00002.png", coco / "val" / "00002.png")
    ann = coco / "annotations" / "instances_train.json"
    ann.write_text(ann.read_text()[:-20])
    with pytest.raises(ConfigError, match="is not valid JSON .* line 1 column") as e:
        det_formats.prepare_yolo_data(coco, cache_dir=tmp_path / "c")
    assert str(ann) in assert_one_line(e)


def _edit_text(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, count))


_LAUGHS = ('<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
           + "".join(f'<!ENTITY lol{k} "' + f"&lol{k - 1 if k > 1 else ''};" * 10 + '">'
                     for k in range(1, 10))
           + "]><annotation><filename>&lol9;</filename></annotation>")

VOC_BAD = {
    "box outside the image": (lambda r: _edit_text(r / "Annotations/val_00000.xml", "<xmax>",
                                                   "<xmax>9"), "lies outside the 64x64 image"),
    "unknown class": (lambda r: _edit_text(r / "Annotations/val_00000.xml", "<name>",
                                           "<name>Jeans "), "is a 'Jeans "),
    "invalid XML": (lambda r: _edit_text(r / "Annotations/val_00000.xml", "</size>", ""),
                    "is not valid XML"),
    "missing image": (lambda r: (r / "JPEGImages/val_00001.png").unlink(), "image is missing"),
    "missing annotation": (lambda r: (r / "Annotations/val_00001.xml").unlink(),
                           "annotation"),
    "empty split": (lambda r: (r / "ImageSets/Main/val.txt").write_text("\n"), "is empty"),
    "box without xmin": (lambda r: _edit_text(r / "Annotations/val_00000.xml", "xmin>",
                                              "x_min>", 2), "has no <xmin>"),
    "xmax before xmin": (lambda r: _edit_text(r / "Annotations/val_00000.xml", "<xmax>",
                                              "<xmax>-"), "xmax < xmin"),
    "box coordinate not a number": (lambda r: _edit_text(r / "Annotations/val_00000.xml",
                                                         "<ymin>", "<ymin>x"), "not a number"),
    "labels.txt with an empty line": (lambda r: _edit_text(r / "labels.txt", "Trouser\n", "\n"),
                                      "an empty line"),
    # input from strangers: entity expansion (a billion laughs) and an external entity are
    # refused by the parser (expat's amplification limit; no entity is fetched), one line
    "entity expansion bomb": (lambda r: (r / "Annotations/val_00000.xml").write_text(
        _LAUGHS), "is not valid XML"),
    "external entity": (lambda r: (r / "Annotations/val_00000.xml").write_text(
        '<?xml version="1.0"?><!DOCTYPE a [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
        '<annotation><filename>&x;</filename></annotation>'), "is not valid XML"),
}


@pytest.mark.parametrize("case", list(VOC_BAD))
def test_a_malformed_voc_set_is_a_one_line_error_naming_the_file(sets, tmp_path, case):
    change, expected = VOC_BAD[case]
    voc = shutil.copytree(sets["voc"], tmp_path / "voc")
    change(voc)
    with pytest.raises(ConfigError) as e:
        det_formats.prepare_yolo_data(voc, cache_dir=tmp_path / "c")
    msg = assert_one_line(e)
    assert expected in msg and str(voc) in msg, msg
    assert not (tmp_path / "c" / det_formats.MARKER).exists()


def test_a_malformed_paddlex_voc_list_names_its_line(sets, tmp_path):
    voc = shutil.copytree(sets["voc-paddlex"], tmp_path / "voc")
    _edit_text(voc / "val_list.txt", ".xml\n", ".xml extra\n")
    with pytest.raises(ConfigError, match="val_list.txt line 1 .* is not '<image path>") as e:
        det_formats.prepare_yolo_data(voc, cache_dir=tmp_path / "c")
    assert_one_line(e)


def test_rle_codec_round_trips():
    rng = np.random.default_rng(0)
    for shape in ((5, 7), (16, 16), (1, 1)):
        for density in (0.0, 0.3, 1.0):
            mask = rng.random(shape) < density
            for compressed in (True, False):
                rle = encode_rle(mask, compressed=compressed)
                back = det_formats.decode_rle(rle, *shape, "test")
                assert np.array_equal(back, mask)


# -- classification -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cls_sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("cls")
    kw = dict(train=12, val=6, size=16, seed=1)
    return {"folder": write_image_folder(root / "folder", **kw),
            "paddlex": write_paddlex_classification(root / "paddlex", **kw),
            "csv": write_csv_classification(root / "csv", **kw)}


def _to_tensor(image) -> torch.Tensor:
    return torch.from_numpy(np.asarray(image, dtype=np.uint8).copy())


@pytest.mark.parametrize("split", ["train", "val"])
def test_paddlex_lists_and_csv_read_the_images_and_labels_of_the_image_folder(cls_sets, split):
    folder = cls_formats.read_classification_data(cls_sets["folder"] / split,
                                                  transform=_to_tensor)
    assert folder.classes == sorted(folder_name(CLASSES.index(c)) for c in set(
        CLASSES[int(f.split("_")[0])] for f in folder.classes))  # the classes' own order
    want = {Path(p).name: CLASSES[int(folder.classes[t].split("_")[0])]
            for p, t in folder.samples}  # image -> class name
    for fmt in ("paddlex", "csv"):
        assert cls_formats.detect_format(cls_sets[fmt]) == fmt
        ds = cls_formats.read_classification_data(cls_sets[fmt], transform=_to_tensor,
                                                  split=split)
        assert isinstance(ds, cls_formats.FileListDataset) and len(ds) == len(folder)
        # PaddleX: labels.txt's order; CSV: names sorted, the same list for both splits
        in_csv = {ln.rsplit(",", 1)[1] for s in ("train", "val")
                  for ln in (cls_sets["csv"] / f"{s}.csv").read_text().splitlines()[1:]}
        assert ds.classes == (list(CLASSES) if fmt == "paddlex" else sorted(in_csv))
        assert [ds.classes[t] for t in ds.targets] == [want[Path(p).name] for p, _ in ds.samples]
        assert ds.class_to_idx == {c: i for i, c in enumerate(ds.classes)}
        for i in (0, len(ds) - 1):
            image, label = ds[i]
            name = Path(ds.samples[i][0]).name
            j = [Path(p).name for p, _ in folder.samples].index(name)
            assert torch.equal(image, folder[j][0]) and label == ds.targets[i]
    assert cls_formats.detect_format(cls_sets["folder"] / split) == "imagefolder"
    assert cls_formats.detect_format(cls_sets["paddlex"] / f"{split}_list.txt") == "paddlex"


def test_csv_labels_may_be_ids_or_names_and_a_header_is_optional(cls_sets, tmp_path):
    root = shutil.copytree(cls_sets["csv"], tmp_path / "csv")
    rows = [ln.split(",") for ln in (root / "train.csv").read_text().splitlines()[1:]]
    (root / "ids.csv").write_text("".join(f"{p},{CLASSES.index(c)}\n" for p, c in rows))
    ds = cls_formats.read_classification_data(root / "ids.csv", transform=None)
    assert ds.classes == [str(i) for i in range(len(ds.classes))]
    assert [CLASSES[t] for t in ds.targets] == [c for _, c in rows]
    (root / "labels.txt").write_text("\n".join(CLASSES) + "\n")
    ds = cls_formats.read_classification_data(root / "ids.csv", transform=None)
    assert ds.classes == list(CLASSES) and [CLASSES[t] for t in ds.targets] == [c for _, c in rows]
    (root / "cols.csv").write_text("label,id,path\n" + "".join(
        f"{c},{n},{p}\n" for n, (p, c) in enumerate(rows)))
    ds2 = cls_formats.read_classification_data(root / "cols.csv", transform=None)
    assert ds2.samples == ds.samples


CLS_BAD = {
    "missing image": ("paddlex", lambda r: (r / "images/val/00001.png").unlink(),
                      "val_list.txt line 2", "is missing"),
    "label id outside labels.txt": ("paddlex", lambda r: _edit_text(
        r / "val_list.txt", ".png ", ".png 1"), "val_list.txt line 1", "labels.txt names 10"),
    "a line that is not path label": ("paddlex", lambda r: _edit_text(
        r / "val_list.txt", ".png ", ".png x"), "val_list.txt line 1", "is not '<image path>"),
    "empty list": ("paddlex", lambda r: (r / "val_list.txt").write_text("\n\n"),
                   "val_list.txt", "lists no images"),
    "missing labels.txt": ("paddlex", lambda r: (r / "labels.txt").unlink(), "val_list.txt",
                           "no labels.txt"),
    "missing list": ("paddlex", lambda r: (r / "val_list.txt").rename(r / "v.txt"),
                     "val_list.txt", "no file list"),
    "csv unknown label": ("csv", lambda r: (r / "labels.txt").write_text("\n".join(CLASSES[:3])),
                          "val.csv line", "not a class of"),
    "csv row of three cells": ("csv", lambda r: _edit_text(r / "val.csv", ".png,", ".png,a,"),
                               "val.csv line 2", "is not 'path,label'"),
    "csv without rows": ("csv", lambda r: (r / "val.csv").write_text("path,label\n"), "val.csv",
                         "no rows"),
    "csv missing image": ("csv", lambda r: (r / "images/val/00000.png").unlink(),
                          "val.csv line 2", "is missing"),
}


@pytest.mark.parametrize("case", list(CLS_BAD))
def test_a_malformed_classification_list_is_a_one_line_error(cls_sets, tmp_path, case):
    fmt, change, where, expected = CLS_BAD[case]
    root = shutil.copytree(cls_sets[fmt], tmp_path / fmt)
    change(root)
    with pytest.raises(ConfigError) as e:
        cls_formats.read_classification_data(root, transform=None, split="val")
    msg = assert_one_line(e)
    assert where in msg and expected in msg, msg


def test_a_damaged_image_is_named_when_read(cls_sets, tmp_path):
    root = shutil.copytree(cls_sets["paddlex"], tmp_path / "px")
    (root / "images/val/00000.png").write_bytes(b"not a png")
    ds = cls_formats.read_classification_data(root, transform=None, split="val")
    with pytest.raises(ConfigError, match="00000.png cannot be read") as e:
        ds[0]
    assert_one_line(e)


# -- segmentation -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def seg_sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("seg")
    return {"masks": write_segmentation_dataset(root / "masks", **SET),
            "voc": write_voc_segmentation(root / "voc", **SET),
            "cityscapes": write_cityscapes_like(root / "cityscapes", **SET),
            "paddlex": write_paddlex_segmentation(root / "paddlex", **SET)}


@pytest.mark.parametrize("fmt", ["voc", "cityscapes", "paddlex"])
@pytest.mark.parametrize("split", ["train", "val"])
def test_segmentation_layouts_give_the_tensors_of_the_masks_folder(seg_sets, fmt, split):
    assert seg_formats.detect_format(seg_sets[fmt]) == fmt
    ref = seg_formats.read_segmentation_data(seg_sets["masks"], split=split, input_size=32)
    assert isinstance(ref, ImageMaskFolder) and type(ref) is ImageMaskFolder
    ds = seg_formats.read_segmentation_data(seg_sets[fmt], split=split, input_size=32)
    assert len(ds) == len(ref) == SET[split]
    names = {"voc": ["background", *CLASSES], "paddlex": ["background", *CLASSES],
             "cityscapes": list(seg_formats.CITYSCAPES_CLASSES)}[fmt]
    assert ds.classes == names and ds.max_class == len(names) - 1
    for i in range(len(ds)):
        torch.manual_seed(i)  # the same flips
        x, y = ds[i]
        torch.manual_seed(i)
        x0, y0 = ref[i]
        assert torch.equal(x, x0) and torch.equal(y, y0) and y.dtype == torch.long


def test_cityscapes_void_ids_are_ignored_and_the_tables_agree(seg_sets, tmp_path):
    assert [seg_formats.CITYSCAPES_TRAIN_IDS[i] for i in CITYSCAPES_LABEL_IDS] == list(range(11))
    root = shutil.copytree(seg_sets["cityscapes"], tmp_path / "cs")
    mask_path = sorted((root / "gtFine" / "val").rglob("*_labelIds.png"))[0]
    mask = np.asarray(Image.open(mask_path)).copy()
    mask[:4] = 0  # "unlabeled"
    Image.fromarray(mask).save(mask_path)
    ds = seg_formats.read_segmentation_data(root, split="val", input_size=64)
    assert (ds[0][1][:4] == 255).all()
    mask[:4] = 40  # no Cityscapes label id
    Image.fromarray(mask).save(mask_path)
    with pytest.raises(ConfigError, match="label id 40 outside the Cityscapes label ids") as e:
        seg_formats.read_segmentation_data(root, split="val", input_size=64)
    assert str(mask_path) in assert_one_line(e)


def _resize_mask(path: Path) -> None:
    Image.open(path).resize((32, 32)).save(path)


def _paint(path: Path, value: int) -> None:
    im = Image.open(path)
    mask = np.asarray(im).copy()
    mask[0, 0] = value
    out = Image.fromarray(mask)
    if im.mode == "P":
        out.putpalette(im.getpalette())
    out.save(path)


SEG_BAD = {
    "voc mask of another size": ("voc", lambda r: _resize_mask(
        r / "SegmentationClass/val_00001.png"), "val_00001.png is 32x32", "their image's size"),
    "voc class outside the class map": ("voc", lambda r: _paint(
        r / "SegmentationClass/val_00000.png", 30), "val_00000.png", "class 30 outside"),
    "voc missing mask": ("voc", lambda r: (r / "SegmentationClass/val_00002.png").unlink(),
                         "val.txt line 3", "its mask"),
    "voc missing image": ("voc", lambda r: (r / "JPEGImages/val_00002.png").unlink(),
                          "val.txt line 3", "its image"),
    "voc empty split": ("voc", lambda r: (r / "ImageSets/Segmentation/val.txt").write_text(""),
                        "val.txt", "is empty"),
    "cityscapes missing mask": ("cityscapes", lambda r: next(
        (r / "gtFine/val").rglob("*000001*")).unlink(), "000001", "is missing"),
    "cityscapes empty split": ("cityscapes", lambda r: [p.unlink() for p in (
        r / "leftImg8bit/val").rglob("*.png")], "leftImg8bit/val", "empty split"),
    "paddlex mask of another size": ("paddlex", lambda r: _resize_mask(
        r / "Annotations/val_00000.png"), "val_00000.png is 32x32", "their image's size"),
    "paddlex class outside labels.txt": ("paddlex", lambda r: _paint(
        r / "Annotations/val_00003.png", 11), "val_00003.png", "class 11 outside"),
    "paddlex bad line": ("paddlex", lambda r: _edit_text(r / "val_list.txt", ".png\n",
                                                         ".png x\n"), "val_list.txt line 1",
                         "is not '<image path> <mask"),
    "paddlex missing mask": ("paddlex", lambda r: (r / "Annotations/val_00000.png").unlink(),
                             "val_list.txt line 1", "its mask"),
    "paddlex empty list": ("paddlex", lambda r: (r / "val_list.txt").write_text("\n"),
                           "val_list.txt", "is empty"),
}


@pytest.mark.parametrize("case", list(SEG_BAD))
def test_a_malformed_segmentation_set_is_a_one_line_error(seg_sets, tmp_path, case):
    fmt, change, where, expected = SEG_BAD[case]
    root = shutil.copytree(seg_sets[fmt], tmp_path / fmt)
    change(root)
    with pytest.raises(ConfigError) as e:
        seg_formats.read_segmentation_data(root, split="val", input_size=32)
    msg = assert_one_line(e)
    assert where in msg and expected in msg, msg


def test_segmentation_formats_are_detected_and_unknown_ones_refused(seg_sets, tmp_path):
    assert seg_formats.detect_format(seg_sets["masks"]) == "masks"
    assert seg_formats.detect_format(seg_sets["masks"] / "val") == "masks"
    assert seg_formats.detect_format(seg_sets["paddlex"] / "val_list.txt") == "paddlex"
    ds = seg_formats.read_segmentation_data(seg_sets["paddlex"] / "val_list.txt", input_size=32,
                                            split="val")
    assert len(ds) == 4 and not ds.train
    (tmp_path / "x").mkdir()
    for path in (tmp_path / "x", tmp_path / "missing"):
        with pytest.raises(ConfigError) as e:
            seg_formats.detect_format(path)
        assert str(path) in assert_one_line(e)
    with pytest.raises(ConfigError, match="num_classes=5 but .* names 11 classes"):
        seg_formats.read_segmentation_data(seg_sets["voc"], split="val", input_size=32,
                                           num_classes=5)


@pytest.mark.parametrize("kw, message", [
    (dict(data_format="yolo"), "data_format='yolo' must be one of"),
    (dict(split="test"), "split='test' must be 'train' or 'val'"),
])
def test_a_reader_refuses_an_unknown_format_or_split_in_one_line(kw, message, tmp_path):
    with pytest.raises(ConfigError, match=message) as e:
        cls_formats.read_classification_data(tmp_path, transform=None, **kw)
    assert_one_line(e)
    with pytest.raises(ConfigError, match=message) as e:
        seg_formats.read_segmentation_data(tmp_path, input_size=32, **kw)
    assert_one_line(e)

"""The garment scenes for every Ultralytics task: detection and YOLO-seg sets unchanged (the same
pixels and labels as before pose and OBB were added), pose keypoints (the corners of each
garment's whole box and its centre, with a visibility) and rotated boxes (DOTA-style corners of
each turned garment), deterministic by seed and read by Ultralytics' own label check."""
import hashlib
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from autoprune.datasets.scenes import FLIP_IDX, KPT_SHAPE, make_scenes, write_yolo_dataset
from autoprune.errors import ConfigError

from conftest import assert_one_line, needs_fmnist

pytestmark = needs_fmnist

# digests of write_yolo_dataset(train=6, val=3, size=64, seed=5) made by the code before the pose
# and OBB labels were added (decoded pixels, label files, data.yaml with its root replaced)
BEFORE = {"detect": "f419c226c01c69f81fd0a638f0332c304b8474833a9681d8a6559a117102df97",
          "segment": "ed7579af3ea0c71504438bbc812429439fb5f9fc8d8d9a8585f5ba2b6630d2cf"}


def _digest(root: Path) -> str:
    """The content of a written set: pixels (not the PNG bytes, which follow the encoder's
    version), label files and data.yaml."""
    h = hashlib.sha256()
    for p in sorted(Path(root).rglob("*")):
        if p.is_dir():
            continue
        h.update(p.relative_to(root).as_posix().encode())
        if p.suffix == ".png":
            h.update(np.asarray(Image.open(p)).tobytes())
        elif p.name == "data.yaml":
            h.update(p.read_text().replace(str(Path(root).resolve()), "ROOT").encode())
        else:
            h.update(p.read_bytes())
    return h.hexdigest()


def _rows(path: Path) -> list[list[float]]:
    return [[float(v) for v in line.split()] for line in path.read_text().splitlines()]


@pytest.mark.parametrize("task", ["detect", "segment"])
def test_detect_and_segment_sets_are_unchanged(task, tmp_path):
    write_yolo_dataset(tmp_path, train=6, val=3, size=64, seed=5, task=task)
    assert _digest(tmp_path) == BEFORE[task]


@pytest.mark.parametrize("task", ["pose", "obb"])
def test_deterministic_by_seed(task, tmp_path):
    digests = []
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        write_yolo_dataset(tmp_path / name, train=4, val=2, size=64, seed=seed, task=task)
        digests.append(_digest(tmp_path / name))
    assert digests[0] == digests[1] != digests[2]


def test_pose_set_is_the_detection_set_plus_keypoints(tmp_path):
    det = write_yolo_dataset(tmp_path / "det", train=8, val=2, size=64, seed=3, objects=(2, 4))
    pose = write_yolo_dataset(tmp_path / "pose", train=8, val=2, size=64, seed=3,
                              objects=(2, 4), task="pose")
    cfg = yaml.safe_load(pose.read_text())
    assert cfg["kpt_shape"] == KPT_SHAPE == [5, 3] and cfg["flip_idx"] == FLIP_IDX
    seen = set()
    for label in sorted((det.parent / "labels").rglob("*.txt")):
        twin = pose.parent / label.relative_to(det.parent)
        image = Path(str(label).replace("labels", "images")).with_suffix(".png")
        other = Path(str(twin).replace("labels", "images")).with_suffix(".png")
        assert np.array_equal(np.asarray(Image.open(image)), np.asarray(Image.open(other)))
        for box, row in zip(_rows(label), _rows(twin), strict=True):
            assert len(row) == 5 + 5 * 3 and row[:5] == box
            kpts = np.array(row[5:]).reshape(5, 3)
            seen.update(kpts[:, 2].tolist())
            cx, cy, w, h = box[1:]
            (x0, y0), (x1, _), (_, y1) = kpts[0, :2], kpts[1, :2], kpts[2, :2]
            # the whole box holds the visible one; the centre is the whole box's
            assert x0 <= cx - w / 2 + 1e-6 and x1 >= cx + w / 2 - 1e-6
            assert y0 <= cy - h / 2 + 1e-6 and y1 >= cy + h / 2 - 1e-6
            assert kpts[4, :2] == pytest.approx([(x0 + x1) / 2, (y0 + y1) / 2], abs=2e-6)
    assert seen == {1.0, 2.0}  # in view and covered both met (no point is off the canvas)


def test_keypoint_visibility_says_what_covers_the_point():
    """2: the pixel half a pixel inside the corner shows the garment or what lies under it; 1: a
    garment pasted over it."""
    covered = 0
    for s in make_scenes(10, size=64, seed=7, objects=(3, 4)):
        for k, kpts in enumerate(s.keypoints):
            inner = kpts[:, :2] + 0.5 * np.sign(kpts[4, :2] - kpts[:, :2])
            for (x, y), v in zip(np.floor(inner).astype(int), kpts[:, 2]):
                shown = s.instances[y, x]
                if v == 1:
                    covered += 1
                    assert shown not in (k, -1) and s.mask[y, x] > 0
                else:
                    assert v == 2
    assert covered


def test_obb_set_turns_the_garments_and_boxes_them_tightly(tmp_path):
    data = write_yolo_dataset(tmp_path, train=6, val=2, size=64, seed=4, task="obb")
    assert "kpt_shape" not in yaml.safe_load(data.read_text())
    turned, tighter = 0, []
    for s in make_scenes(6, size=64, seed=8, objects=(1, 4), rotate=True):
        for k, corners in enumerate(s.corners):
            sides = np.roll(corners, -1, 0) - corners
            assert abs(np.dot(sides[0], sides[1])) < 1e-6 * np.dot(sides[0], sides[0]) + 1e-9
            assert np.linalg.norm(sides[0]) == pytest.approx(np.linalg.norm(sides[2]))
            # every visible pixel centre lies inside the rotated box (its edges half a pixel out)
            ys, xs = np.nonzero(s.instances == k)
            centres = np.stack([xs + 0.5, ys + 0.5], 1)
            for a, b in zip(corners, np.roll(corners, -1, 0)):
                edge = b - a
                cross = edge[0] * (centres[:, 1] - a[1]) - edge[1] * (centres[:, 0] - a[0])
                assert (cross >= -1e-6).all() or (cross <= 1e-6).all()
            area = np.linalg.norm(sides[0]) * np.linalg.norm(sides[1])
            x0, y0, x1, y1 = s.boxes[k]
            tighter.append(area / ((x1 - x0) * (y1 - y0)))
            turned += abs(sides[0][1]) > 1e-6
    assert turned and np.median(tighter) < 0.9  # tighter than the upright boxes
    for label in (tmp_path / "labels").rglob("*.txt"):
        for row in _rows(label):
            assert len(row) == 9 and all(0 <= v <= 1 for v in row[1:])


@pytest.mark.parametrize("task", ["pose", "obb"])
def test_ultralytics_reads_the_labels(task, tmp_path):
    from autoprune.tasks.detection import models  # noqa: F401  (offline set-up first)
    from ultralytics.data.utils import verify_image_label

    data = write_yolo_dataset(tmp_path, train=6, val=2, size=64, seed=2, objects=(2, 4),
                              task=task)
    nkpt, ndim = KPT_SHAPE if task == "pose" else (0, 0)
    for image in sorted((data.parent / "images").rglob("*.png")):
        label = Path(str(image).replace("images", "labels")).with_suffix(".txt")
        *_, found, empty, corrupt, msg = verify_image_label(
            (str(image), str(label), "", task == "pose", 10, nkpt, ndim, False))
        assert (found, empty, corrupt, msg) == (1, 0, 0, ""), msg


def test_unknown_task_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match="'pose' .* 'obb'") as e:
        write_yolo_dataset(tmp_path, train=1, val=1, size=32, task="keypoints")
    assert_one_line(e)
    assert not (tmp_path / "data.yaml").exists()

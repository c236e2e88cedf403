"""Pose (Ultralytics YOLO pose), a task added as one package plus one registration: names, the
keypoint head's fixed layers, keypoint labels and kpt_shape checks, the one-call flow pruned by
FLOPs and by loss, the pruned module kept through an interrupted and resumed training, reload in
a fresh offline process, ONNX in ONNX Runtime, and DEFAULT profiles. Tiny settings: 64 px, 24
scene images of one large garment (5 keypoints: its box corners and centre), 1 epoch after the
base."""
from pathlib import Path

import pytest
import yaml

import autoprune
from autoprune import pose
from autoprune.tasks.pose import PoseAdapter
from autoprune.tasks.pose import models as kp

import yolo_subtask_checks as checks
from conftest import check_flow_bounded_map, needs_fmnist, scenes_validated_on_train

POSE = checks.Subtask("pose", pose, PoseAdapter, "yolov8n-pose",
                      ("map50_95_pose", "map50_pose", "map50_95_box", "map50_box"),
                      kp.KeepModulePoseTrainer, {"num_classes": 10, "kpt_shape": [5, 3]})
NK = 5 * 3  # the scenes' keypoint values per object

pytestmark = needs_fmnist


@pytest.fixture(scope="module")
def data_yaml(tmp_path_factory):
    return scenes_validated_on_train(tmp_path_factory.mktemp("pose_scenes"), 24, task="pose")


@pytest.fixture(scope="module")
def flow(data_yaml, tmp_path_factory):
    """The one-call flow pruned by FLOPs with a new sensitivity file: train 20 epochs (keypoint
    mAP50-95 0.14 with seed 0), measure at ratio 0.3 on 8 val images, prune -25 % FLOPs,
    retrain 1 epoch."""
    return checks.run_flow(POSE, data_yaml, tmp_path_factory.mktemp("pose_flow"), 20)


def test_names_belong_to_pose_only(data_yaml, tmp_path):
    not_pose = "is not a pose model autoprune prunes"
    checks.check_names(POSE, data_yaml, tmp_path,
                       keys=(("yolov8n-pose.yaml", "yolov8n-pose"),
                             ("yolo11s-pose", "yolo11s-pose"), ("YOLO26n-pose.pt", "yolo26n-pose"),
                             ("yolov8n-pose-p6.yaml", "yolov8n-pose-p6")),
                       refused=(("yolov8n.yaml", "is a detection model"),
                                ("yolo12n-pose.yaml", not_pose),
                                ("yolo11n-pose-p6.yaml", not_pose),
                                ("yolo11n-obb.yaml", not_pose),
                                ("resnet18", "unknown model name")))


@pytest.mark.parametrize("arch", ["yolov8n-pose", "yolo11n-pose", "yolo26n-pose"])
def test_pruned_keypoint_head_keeps_its_outputs_and_runs(arch):
    """Every group at 0.3: FLOPs fall, the keypoint outputs (cv4's last conv; YOLO26's keypoint
    and spread convs after it) and the class outputs keep their width, and the model runs in
    eval and train mode (YOLO26's spread convs run in training only)."""
    model, names = checks.pruned_head_model(
        PoseAdapter(num_classes=10, kpt_shape=[5, 3], input_size=64), arch)
    assert kp.kpt_shape_of(model) == [5, 3]
    assert any(".cv4.0.0" in n for n in names)  # the keypoint branch's inner convs do prune
    assert not any("kpts" in n or "sigma" in n or "flow_model" in n for n in names)
    head = kp.pose_head(model)
    outputs = head.cv4_kpts if hasattr(head, "cv4_kpts") else [b[-1] for b in head.cv4]
    assert all(conv.out_channels == NK for conv in outputs)
    (y, _), out = checks.run_eval_and_train(model)
    assert y.shape[:2] == (2, 4 + 10 + NK)
    if hasattr(head, "cv4_sigma"):  # each keypoint's x and y spread, in both heads
        for branch in ("one2many", "one2one"):
            assert out[branch]["kpts_sigma"].shape[1] == 5 * 2


def test_pruned_yolo26_pose_trains_with_its_flow_loss(data_yaml, tmp_path):
    """YOLO26-pose's loss also trains the keypoint spread convs and a normalising flow (training
    only, not in the eval-mode graph): pruned at 0.3 per group, it trains an epoch with
    Ultralytics' pose trainer and reloads with its pruned shapes."""
    checks.check_pruned_yolo26_trains(POSE, data_yaml, tmp_path, "yolo26n-pose")


def _edit_first_label(data: Path, edit) -> None:
    label = sorted((data.parent / "labels" / "train").glob("*.txt"))[0]
    label.write_text(edit(label.read_text()))


@pytest.mark.parametrize("case,words", [
    ("boxes", "is a box without keypoints: pose needs"),
    ("count", "has 17 values but kpt_shape \\[5, 3\\] .* needs 20"),
    ("no_kpt_shape", "has no 'kpt_shape:'"),
    ("bad_kpt_shape", "kpt_shape: \\[5, 4\\] must be \\[keypoints, 2 or 3\\]"),
    ("flip_idx", "flip_idx: \\[0, 1, 2\\] must list each of the 5 keypoints"),
    ("outside", "has a keypoint outside \\[0, 1\\]"),
])
def test_labels_and_kpt_shape_are_checked_in_one_line(case, words, tmp_path):
    if case == "boxes":
        data = checks.tiny_dataset(tmp_path)
    else:
        data = checks.tiny_dataset(tmp_path, task="pose")
        cfg = yaml.safe_load(data.read_text())
        if case == "count":
            _edit_first_label(data, lambda t: "\n".join(
                " ".join(line.split()[:17]) for line in t.splitlines()))
        elif case == "outside":
            _edit_first_label(data, lambda t: "\n".join(
                " ".join(line.split()[:5] + ["1.5"] + line.split()[6:])
                for line in t.splitlines()))
        elif case == "no_kpt_shape":
            del cfg["kpt_shape"]
        elif case == "bad_kpt_shape":
            cfg["kpt_shape"] = [5, 4]
        elif case == "flip_idx":
            cfg["flip_idx"] = [0, 1, 2]
        data.write_text(yaml.safe_dump(cfg, sort_keys=False))
    checks.check_data_refused(POSE, data, tmp_path, words)


def test_one_call_flow_by_flops(flow):
    pruned, record = checks.check_flow_by_flops(POSE, flow)
    assert record["metric"]["baseline"] > 0  # the val subset's yaml kept kpt_shape
    # its keypoint outputs intact
    assert all(b[-1].out_channels == NK for b in kp.pose_head(pruned).cv4)
    meta = autoprune.read_pruned_metadata(flow[0].pruned_path)
    assert meta["build"] == {"num_classes": 10, "kpt_shape": [5, 3]}


def test_one_call_flow_by_loss_with_distillation(flow, data_yaml, tmp_path):
    """The measured file, a tolerated loss: the ratios are PaddleSlim's by-loss ones of it (a
    tolerance of 0.99 takes nearly every group to its largest measured ratio) and retraining
    keeps them; distill=True runs Ultralytics' feature distillation in the pose trainer."""
    checks.check_flow_by_loss(POSE, flow, data_yaml, tmp_path, distill=True)


def test_interrupted_training_resumes_with_the_pruned_module(flow, data_yaml, tmp_path,
                                                             monkeypatch, capsys):
    """A stage continues from Ultralytics' last.pt with the pruned module itself (pose trainer);
    run again, the finished stage is not trained; pose.resume does the same by file."""
    meta = checks.check_interrupted_training_resumes(POSE, flow, data_yaml, tmp_path,
                                                     monkeypatch, capsys, "(P)")
    assert meta["build"]["kpt_shape"] == [5, 3]


def test_fresh_process_reload_predict_and_export_offline(flow, data_yaml, tmp_path):
    """In a fresh process with every network call refused and no data at hand: reload the
    pruned checkpoint (its keypoint shape from the metadata; equal outputs), predict keypoints
    with YOLO(...) on Ultralytics' pruned best.pt, export ONNX."""
    child = checks.check_offline_child(POSE, flow, data_yaml, tmp_path,
                                       found="list(found.keypoints.shape)")
    assert child["found"][1:] == [5, 3]


def test_export_onnx_runs_in_onnx_runtime_and_matches_torch(flow, tmp_path):
    checks.check_onnx_runtime_matches_torch(POSE, flow, tmp_path, channels=4 + 10 + NK)


def test_build_profile_and_default_resolves(tmp_path, monkeypatch):
    """``autoprune profiles build`` for a YOLO pose model on 8 keypoint scenes, 1 epoch: the
    keypoint mAP of such a model is 0, so the evaluation is replaced by a made-up non-zero score
    (the real one runs in the flow above); DEFAULT then resolves for the model and a YOLO
    object, and a COCO-pose model of 17 keypoints adopts it."""
    from autoprune.flow.sensitivities import read_table

    record = checks.check_build_profile(
        POSE, PoseAdapter(num_classes=10, kpt_shape=[5, 3], input_size=64), "keypoints",
        tmp_path, monkeypatch)
    # a COCO-pose model (1 class, 17 x 3 keypoints: its keypoint branch 51 channels wide, the
    # profile's 16) adopts it, the keypoint branch read ratio for ratio
    coco = PoseAdapter(num_classes=1, kpt_shape=[17, 3], input_size=64)
    person = coco.build("yolov8n-pose")
    adopted, _ = read_table(coco, person, "DEFAULT", "yolov8n-pose", say=False)
    widened = adopted.extra["adopted"]["groups"]
    assert widened and all(".cv4." in n and w == [16, 51] for n, w in widened.items())
    assert adopted.sensitivities == record.sensitivities


def test_bundled_default_profile_prunes_the_trained_model(flow, data_yaml, tmp_path):
    """The bundled yolov8n-pose profile (10 classes, 5 x 3 keypoints, like these scenes) fits
    the trained model."""
    checks.check_bundled_default(POSE, flow, data_yaml, tmp_path)


def test_map_batch_by_batch_bounds_the_final_value(flow, data_yaml, monkeypatch):
    """The adaptive analysis's evaluation of this task's own mAP (Ultralytics' keypoint
    statistics): see conftest.check_bounded_map."""
    check_flow_bounded_map(PoseAdapter, pose.load_model, flow, data_yaml, monkeypatch)

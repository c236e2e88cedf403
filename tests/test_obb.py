"""OBB (Ultralytics YOLO oriented boxes), a task added as one package plus one registration: names,
the angle head's fixed layers, rotated-box labels, the one-call flow pruned by FLOPs and by loss,
the pruned module kept through an interrupted and resumed training, reload in a fresh offline
process, ONNX in ONNX Runtime, and DEFAULT profiles. Tiny settings: 64 px, 24 scenes of one
large rotated garment, 1 epoch after the base."""
import pytest
import torch

from autoprune import obb
from autoprune.tasks.obb import OBBAdapter
from autoprune.tasks.obb import models as rot

import yolo_subtask_checks as checks
from conftest import check_flow_bounded_map, needs_fmnist, scenes_validated_on_train

OBB = checks.Subtask("obb", obb, OBBAdapter, "yolov8n-obb", ("map50_95_obb", "map50_obb"),
                     rot.KeepModuleOBBTrainer, {"num_classes": 10})

pytestmark = needs_fmnist


@pytest.fixture(scope="module")
def data_yaml(tmp_path_factory):
    return scenes_validated_on_train(tmp_path_factory.mktemp("obb_scenes"), 24, task="obb")


@pytest.fixture(scope="module")
def flow(data_yaml, tmp_path_factory):
    """The one-call flow pruned by FLOPs with a new sensitivity file: train 12 epochs
    (rotated-box mAP50-95 0.13 with seed 0), measure at ratio 0.3 on 8 val images, prune -25 %
    FLOPs, retrain 1 epoch."""
    return checks.run_flow(OBB, data_yaml, tmp_path_factory.mktemp("obb_flow"), 12)


def test_names_belong_to_obb_only(data_yaml, tmp_path):
    checks.check_names(OBB, data_yaml, tmp_path,
                       keys=(("yolov8n-obb.yaml", "yolov8n-obb"), ("yolo11s-obb", "yolo11s-obb"),
                             ("YOLO26n-obb.pt", "yolo26n-obb")),
                       refused=(("yolov8n.yaml", "is a detection model"),
                                ("yolo12n-obb.yaml", "is not an OBB model autoprune prunes"),
                                ("yolo11n-pose.yaml", "is not an OBB model autoprune prunes"),
                                ("resnet18", "unknown model name")))


@pytest.mark.parametrize("arch", ["yolov8n-obb", "yolo11n-obb", "yolo26n-obb"])
def test_pruned_angle_head_keeps_its_outputs_and_runs(arch):
    """Every group at 0.3: FLOPs fall, the angle outputs (cv4's last conv, one per anchor) and
    the class outputs keep their width, and the model runs in eval and train mode."""
    model, names = checks.pruned_head_model(OBBAdapter(num_classes=10, input_size=64), arch)
    assert any(".cv4.0.0" in n for n in names)  # the angle branch's inner convs do prune
    head = rot.obb_head(model)
    assert all(b[-1].out_channels == head.ne == 1 for b in head.cv4)
    (y, _), _ = checks.run_eval_and_train(model)
    assert y.shape[:2] == (2, 4 + 10 + 1)


def test_upright_boxes_are_refused_in_one_line(tmp_path):
    checks.check_data_refused(OBB, checks.tiny_dataset(tmp_path), tmp_path,
                              "is an upright box .* OBB needs")


def test_one_call_flow_by_flops(flow):
    pruned, _ = checks.check_flow_by_flops(OBB, flow)
    assert all(b[-1].out_channels == 1 for b in rot.obb_head(pruned).cv4)


def test_one_call_flow_by_loss(flow, data_yaml, tmp_path):
    """The measured file, a tolerated loss: the ratios are PaddleSlim's by-loss ones of it (a
    tolerance of 0.99 takes nearly every group to its largest measured ratio) and retraining
    keeps them."""
    checks.check_flow_by_loss(OBB, flow, data_yaml, tmp_path)


def test_interrupted_training_resumes_with_the_pruned_module(flow, data_yaml, tmp_path,
                                                             monkeypatch, capsys):
    """A stage continues from Ultralytics' last.pt with the pruned module itself (OBB trainer);
    run again, the finished stage is not trained; obb.resume does the same by file."""
    checks.check_interrupted_training_resumes(OBB, flow, data_yaml, tmp_path, monkeypatch,
                                              capsys)


def test_fresh_process_reload_predict_and_export_offline(flow, data_yaml, tmp_path):
    """In a fresh process with every network call refused: reload the pruned checkpoint (equal
    outputs), predict rotated boxes with YOLO(...) on Ultralytics' pruned best.pt, export
    ONNX."""
    child = checks.check_offline_child(OBB, flow, data_yaml, tmp_path,
                                       found="list(found.obb.xywhr.shape)")
    assert child["found"][1:] == [5]  # x y w h angle


def test_export_onnx_runs_in_onnx_runtime_and_matches_torch(flow, tmp_path):
    checks.check_onnx_runtime_matches_torch(OBB, flow, tmp_path, channels=4 + 10 + 1)


def test_build_profile_and_default_resolves(tmp_path, monkeypatch):
    """``autoprune profiles build`` for a YOLO OBB model on 8 rotated scenes, 1 epoch: the mAP of
    such a model is 0, so the evaluation is replaced by a made-up non-zero score (the real one
    runs in the flow above); DEFAULT then resolves for the model and a YOLO object."""
    checks.check_build_profile(OBB, OBBAdapter(num_classes=10, input_size=64), "rotated",
                               tmp_path, monkeypatch)


def test_bundled_default_profile_prunes_the_trained_model(flow, data_yaml, tmp_path):
    """The bundled yolov8n-obb profile (10 classes, like these scenes) fits the trained model."""
    checks.check_bundled_default(OBB, flow, data_yaml, tmp_path)


def _candidates(n: int, classes: int, seed: int, side: float = 60.0, size: int = 640):
    """Rotated candidate boxes as Ultralytics' NMS hands them to fast_nms: centres offset by
    class x max_wh, many overlapping, with tied scores."""
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * size * 0.3 + size * 0.35  # crowded: lots overlap
    wh = torch.rand(n, 2, generator=g) * side + 2
    angle = (torch.rand(n, 1, generator=g) - 0.5) * 3.1
    cls = torch.randint(0, classes, (n, 1), generator=g).float()
    scores = torch.rand(n, generator=g).round(decimals=2)  # ties
    return torch.cat((xy + cls * 7680, wh, angle), 1), scores


def test_rotated_nms_class_by_class_keeps_exactly_what_ultralytics_keeps():
    """class_by_class: the kept boxes and their order equal Ultralytics' fast_nms over the whole
    n x n probiou matrix; boxes outside its bound (large, or agnostic: one class) and calls
    that are not the rotated one go to Ultralytics' own computation."""
    from ultralytics.utils import nms
    from ultralytics.utils.metrics import batch_probiou

    from autoprune.tasks.detection import validator

    real = nms.TorchNMS.fast_nms
    computed = []
    spy = lambda *a, **k: computed.append(len(a[0])) or real(*a, **k)  # noqa: E731
    for seed, (n, classes) in enumerate([(600, 15), (300, 2), (1200, 10)]):
        boxes, scores = _candidates(n, classes, seed)
        for thr in (0.3, 0.7):
            want = real(boxes, scores, thr, iou_func=batch_probiou)
            got = validator.class_by_class(spy)(boxes, scores, thr, iou_func=batch_probiou)
            assert torch.equal(got, want) and computed == [], (seed, thr)
    for boxes, scores in (_candidates(400, 5, 7, side=900.0), _candidates(400, 1, 8)):
        want = real(boxes, scores, 0.7, iou_func=batch_probiou)
        assert torch.equal(validator.class_by_class(spy)(boxes, scores, 0.7,
                                                         iou_func=batch_probiou), want)
    assert computed == [400, 400]  # the whole matrix, as Ultralytics computes it
    upright = torch.rand(300, 4) * 100
    upright[:, 2:] += upright[:, :2]
    upright_scores = torch.rand(300)
    assert torch.equal(validator.class_by_class(spy)(upright, upright_scores, 0.5),
                       real(upright, upright_scores, 0.5))
    assert computed == [400, 400, 300]
    # Ultralytics' whole NMS on the rotated predictions of an untrained head (10 classes, 336
    # anchors at 128 px, every class above conf): the same detections through patient_nms
    g = torch.Generator().manual_seed(5)
    pred = torch.cat((torch.rand(1, 2, 336, generator=g) * 128, torch.rand(1, 2, 336,
                      generator=g) * 40 + 2, torch.rand(1, 10, 336, generator=g) * 0.05,
                      (torch.rand(1, 1, 336, generator=g) - 0.5) * 3), 1)
    want = nms.non_max_suppression(pred.clone(), 0.001, 0.7, multi_label=True, nc=10,
                                   rotated=True, max_time_img=1e6)
    made = []
    real_grouping = validator.class_by_class
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(validator, "class_by_class", lambda *a: made.append(a) or real_grouping(*a))
        with validator.patient_nms():
            got = nms.non_max_suppression(pred.clone(), 0.001, 0.7, multi_label=True, nc=10,
                                          rotated=True)
    assert made and torch.equal(got[0], want[0]) and len(want[0]) == 300  # max_det
    with validator.patient_nms():
        assert nms.TorchNMS.fast_nms is real  # swapped only while Ultralytics' NMS runs
    assert nms.TorchNMS.fast_nms is real


def test_map_batch_by_batch_bounds_the_final_value(flow, data_yaml, monkeypatch):
    """The adaptive analysis's evaluation of this task's own mAP (Ultralytics' rotated-box
    statistics under its (B) keys): see conftest.check_bounded_map."""
    check_flow_bounded_map(OBBAdapter, obb.load_model, flow, data_yaml, monkeypatch)

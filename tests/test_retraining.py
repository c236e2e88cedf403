"""Retraining recipes (issue 19): distillation from the unpruned model (``distill``) and pruning in
steps (``prune_steps``). Tiny synthetic data, 32 px, CPU, seeded; no threshold on any metric of
these barely trained models."""
import copy
import json

import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import autoprune
from autoprune import classification as cls
from autoprune import detection as det
from autoprune import segmentation as seg
from autoprune.engine.checkpoint import read_state_dict
from autoprune.flow.report import recipe_line, to_markdown
from autoprune.flow.training import Distill, FitConfig, check_distill, fit, kd_loss
from autoprune.flow.training import STATE_FILE

from conftest import Images

N, BATCH = 48, 16  # 3 batches per epoch


def _cls(save_dir, train_data, **kw):
    args = dict(num_classes=4, epochs=2, pretrain_epochs=1, batch_size=BATCH, lr=0.05,
                save_dir=save_dir, input_size=32, seed=3, progress=False,
                sensitivities_file=save_dir / "s.json", pruned_flops=0.5, ratios=(0.3, 0.6))
    return cls.train("resnet18", train_data, Images(32, noise=False), **{**args, **kw})


def assert_same_weights(a, b):
    a = a if isinstance(a, dict) else read_state_dict(a)
    b = b if isinstance(b, dict) else read_state_dict(b)
    assert list(a) == list(b)
    for k in a:
        assert torch.equal(a[k], b[k]), k


def _net(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.Dropout(0.5), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))


def test_kd_loss_is_zero_when_student_equals_teacher_and_positive_otherwise():
    g = torch.Generator().manual_seed(0)
    for shape in ((8, 5), (2, 5, 6, 7)):  # classification logits, a segmentation map
        logits = torch.randn(*shape, generator=g) * 3
        for t in (1.0, 4.0):
            assert kd_loss(logits, logits.clone(), t).item() == pytest.approx(0.0, abs=1e-6)
            assert kd_loss(logits, torch.randn(*shape, generator=g), t).item() > 0.01
    # per pixel, averaged: a map equals the mean of its pixels taken as a batch of logits
    s, q = torch.randn(2, 5, 3, 3, generator=g), torch.randn(2, 5, 3, 3, generator=g)
    flat = lambda x: x.permute(0, 2, 3, 1).reshape(-1, 5)
    assert kd_loss(s, q, 2.0).item() == pytest.approx(kd_loss(flat(s), flat(q), 2.0).item())
    # scaled by T²: the gradient keeps its size as T grows
    s = s.requires_grad_()
    kd_loss(s, q, 4.0).backward()
    assert s.grad.abs().sum() > 0


def test_teacher_is_never_updated_and_alpha_zero_is_plain_training():
    data = TensorDataset(torch.randn(32, 3, 8, 8, generator=torch.Generator().manual_seed(0)),
                         torch.arange(32) % 4)
    loader = lambda: DataLoader(data, batch_size=8, shuffle=True,
                                generator=torch.Generator().manual_seed(0))
    teacher = _net(1).train()
    before = copy.deepcopy(teacher.state_dict())
    student = _net(2)
    cfg = FitConfig(epochs=2, lr=0.1, progress=False)
    fit(student, loader(), cfg, device=torch.device("cpu"),
        distill=Distill(teacher, alpha=0.7, temperature=2.0))
    assert_same_weights(before, teacher.state_dict())  # BatchNorm statistics included
    assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())
    # alpha 0: the teacher's term weighs nothing, the weights are plain training's
    plain, zero, other = _net(2), _net(2), _net(1)
    torch.manual_seed(5)
    fit(plain, loader(), cfg, device=torch.device("cpu"))
    torch.manual_seed(5)
    fit(zero, loader(), cfg, device=torch.device("cpu"),
        distill=Distill(other, alpha=0.0, temperature=2.0))
    assert_same_weights(plain.state_dict(), zero.state_dict())


@pytest.mark.parametrize("bad, match", [
    ({"alpha": 1.5}, r"alpha=1.5 is outside \[0, 1\]"),
    ({"alpha": -0.1}, r"alpha=-0.1 is outside"),
    ({"temperature": 0}, "temperature=0.0 must be above 0"),
    ({"temperature": float("nan")}, "temperature=nan is not a number"),
    ({"alpha": True}, "alpha=True is not a number"),
    ({"beta": 1}, "unknown key"),
    ("yes", "must be True, False or a mapping"),
    (1, "must be True, False or a mapping"),
])
def test_bad_distill_values_are_refused_before_training(tmp_path, bad, match):
    with pytest.raises(autoprune.ConfigError, match=match):
        check_distill(bad)
    with pytest.raises(autoprune.ConfigError, match=match):
        _cls(tmp_path, Images(), distill=bad)
    assert not (tmp_path / "baseline").exists()


def test_distill_settings_and_their_defaults():
    assert check_distill(False) is None and check_distill(None) is None
    assert check_distill(True) == {"alpha": 0.5, "temperature": 4.0}
    assert check_distill({"alpha": 1}) == {"alpha": 1.0, "temperature": 4.0}


@pytest.mark.parametrize("kw, match", [
    (dict(distill=True, sensitivities_file=None), "distill and prune_steps shape the retraining"),
    (dict(prune_steps=2, sensitivities_file=None), "distill and prune_steps shape the retraining"),
    (dict(prune_steps=3, epochs=2), r"prune_steps=3 needs at least as many epochs \(epochs=2\)"),
    (dict(prune_steps=0), "prune_steps=0 must be a whole number, at least 1"),
    (dict(prune_steps=1.5), "prune_steps=1.5 must be a whole number"),
])
def test_bad_recipes_are_refused_before_training(tmp_path, kw, match):
    with pytest.raises(autoprune.ConfigError, match=match):
        _cls(tmp_path, Images(), **kw)
    assert not (tmp_path / "baseline").exists()


@pytest.mark.parametrize("kw, match", [
    (dict(distill={"alpha": 0.7}), "pass distill=True .Ultralytics' feature distillation"),
    (dict(distill="yes"), "pass distill=True"),
    (dict(distill=True, train_args={"dis": -1}), "dis=-1 .the distillation weight. must be"),
    (dict(distill=True, train_args={"dis": "6"}), "dis='6' .the distillation weight. must be"),
])
def test_detection_distill_settings_are_refused_in_one_line(tmp_path, kw, match):
    """Detection distils with Ultralytics' feature distillation: classification's alpha and
    temperature, or a bad weight, are refused before any data is read."""
    with pytest.raises(autoprune.ConfigError, match=match) as e:
        det.train("yolov8n.yaml", tmp_path / "missing.yaml", save_dir=tmp_path, **kw)
    assert "\n" not in str(e.value)


def test_detection_without_ultralytics_distillation_refuses_it(tmp_path, monkeypatch):
    from autoprune.tasks.detection import DetectionAdapter

    monkeypatch.setattr(DetectionAdapter, "distills", False)
    with pytest.raises(autoprune.ConfigError, match="distill is not offered for detection here: "
                       "the installed Ultralytics .* has no knowledge distillation") as e:
        det.train("yolov8n.yaml", tmp_path / "missing.yaml", distill=True, save_dir=tmp_path)
    assert "\n" not in str(e.value)


def test_resume_mid_retraining_with_distillation_equals_uninterrupted(tmp_path, capsys):
    straight = _cls(tmp_path / "straight", Images(), distill=True)
    assert straight.report["recipe"] == {"distill": {"alpha": 0.5, "temperature": 4.0},
                                         "prune_steps": 1}
    # baseline: 1 epoch, pruned: 1 epoch, then a crash in the pruned model's epoch 2
    with pytest.raises(KeyboardInterrupt):
        _cls(tmp_path / "resumed", Images(crash_after=2 * N + BATCH + 3), distill=True)
    assert torch.load(tmp_path / "resumed" / "pruned" / STATE_FILE,
                      weights_only=True)["history"].__len__() == 1
    capsys.readouterr()
    resumed = _cls(tmp_path / "resumed", Images(), distill=True, resume=True)
    assert "pruned after epoch 1/2" in capsys.readouterr().out
    for name in ("baseline/best.pt", "pruned/last.pt", "pruned/best.pt"):
        assert_same_weights(tmp_path / "straight" / name, tmp_path / "resumed" / name)
    assert_same_weights(straight.model.state_dict(), resumed.model.state_dict())
    # distillation changes the retraining: the weights differ from plain fine-tuning's
    plain = _cls(tmp_path / "plain", Images())
    assert not torch.equal(plain.model.state_dict()["fc.weight"],
                           straight.model.state_dict()["fc.weight"])


def test_prune_steps_reach_one_shots_channels_and_flops(tmp_path):
    one = _cls(tmp_path / "one", Images(), epochs=3)
    three = _cls(tmp_path / "three", Images(), epochs=3, prune_steps=3)
    assert one.ratios == three.ratios  # the same sensitivities and allocation
    shapes = lambda r: {k: tuple(v.shape) for k, v in r.model.state_dict().items()}
    assert shapes(one) == shapes(three)  # the same channel counts, so the same FLOPs
    assert three.report["pruned"]["flops"] == one.report["pruned"]["flops"]
    assert three.report["flops_reduction"] == pytest.approx(one.report["flops_reduction"])
    assert three.report["recipe"] == {"distill": False, "prune_steps": 3}
    for k in (1, 2):  # one epoch after each of the first steps, then the last step's one
        assert (tmp_path / "three" / f"pruned_step{k}" / "best.pt").is_file()
    assert torch.load(tmp_path / "three" / "pruned" / STATE_FILE,
                      weights_only=True)["epochs"] == 1
    plan = json.loads((tmp_path / "three" / "report.json").read_text())
    assert plan["recipe"]["prune_steps"] == 3
    assert "Retraining: pruned in 3 steps." in (tmp_path / "three" / "report.md").read_text()
    # the steps in between: smaller than the base model, larger than the final one
    size = lambda m: sum(p.numel() for p in m.parameters())
    mid = cls.load_model(tmp_path / "three" / "pruned_step1" / "best.pt")
    base = cls.load_model(tmp_path / "three" / "baseline" / "best.pt")
    assert size(base) > size(mid) > size(three.model)
    # the checkpoint's plan: per group the unpruned count, the final count, the indices removed
    loaded = cls.load_model(three.pruned_path)
    assert shapes(three) == {k: tuple(v.shape) for k, v in loaded.state_dict().items()}


def test_segmentation_distills_per_pixel_in_steps(tmp_path):
    r = seg.train("unet", "resnet18", train_data=Images(segmentation=True),
                  eval_data=Images(8, noise=False, segmentation=True), num_classes=3, epochs=2,
                  pretrain_epochs=1, batch_size=BATCH, save_dir=tmp_path, input_size=32, seed=3,
                  progress=False, sensitivities_file=tmp_path / "s.json", pruned_flops=0.4,
                  ratios=(0.5,), distill={"alpha": 0.8, "temperature": 2}, prune_steps=2)
    assert r.report["recipe"] == {"distill": {"alpha": 0.8, "temperature": 2.0},
                                  "prune_steps": 2}
    assert r.report["flops_reduction"] > 0.3
    assert (tmp_path / "pruned_step1" / "best.pt").is_file()
    assert "distillation from the unpruned model (alpha 0.8, T 2), pruned in 2 steps" in \
        (tmp_path / "report.md").read_text()


def test_recipe_line():
    assert recipe_line({}) == ""
    assert recipe_line({"recipe": {"distill": False, "prune_steps": 1}}) == \
        "plain fine-tuning, pruned in one step"
    md = to_markdown({"baseline": {}, "pruned": {},
                      "recipe": {"distill": {"alpha": 0.5, "temperature": 4.0},
                                 "prune_steps": 3}})
    assert "distillation from the unpruned model (alpha 0.5, T 4), pruned in 3 steps" in md
    # a task's own method describes itself (the flow knows no task's words)
    assert recipe_line({"recipe": {"distill": {"method": "ultralytics-features", "dis": 6.0,
                                               "description": "feature distillation (weight 6)"},
                                   "prune_steps": 1}}) == "feature distillation (weight 6)"


def test_a_steps_stage_counts_as_written_by_the_run(tmp_path):
    from autoprune.flow.options import written_by_run

    assert written_by_run(tmp_path / "pruned_step2" / "best.pt", tmp_path, "path")
    assert written_by_run(tmp_path / "pruned_step1" / "ultralytics" / "w" / "best.pt", tmp_path,
                          "default", stage_files=("ultralytics",))  # detection's own folder
    assert not written_by_run(tmp_path / "elsewhere" / "best.pt", tmp_path, "path")
    assert not written_by_run(tmp_path / "pruned_step1" / "best.pt", tmp_path, "none")

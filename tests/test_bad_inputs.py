"""The bad-input catalogue (docs/bad_inputs.md): each bad input raises an AutopruneError whose one
line names the problem and the fix. Each case asserts on a stable part of the message, so a row
of the catalogue breaks here when its message does. Synthetic data, tiny models, CPU, no network;
every error comes before any training (except the diverging one, a few steps)."""
from __future__ import annotations

import json
import math
import os

import pytest
import torch
from torch.utils.data import Dataset

import autoprune as ap
from autoprune import classification as cls
from autoprune import segmentation as seg
from autoprune.cli import main
from autoprune.errors import TrainingDivergedError
from autoprune.flow.checkpoints import prune_checkpoint
from autoprune.tasks.classification import models as torchvision_models
from autoprune.flow.training import STATE_FILE
from conftest import RefEval, make_input, make_model


class Images(Dataset):
    """``n`` random images of ``shape``; labels of 3 classes, or (H, W) masks of ``mask``."""

    def __init__(self, shape=(3, 32, 32), n=8, mask=None, classes=3):
        self.shape, self.n, self.mask = shape, n, mask
        if mask is None:
            self.classes = [str(c) for c in range(classes)]

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        target = i % 3 if self.mask is None else torch.zeros(self.mask, dtype=torch.long)
        return torch.randn(*self.shape), target


class BadLabels(Images):
    """Declares 3 classes but labels an image 7."""

    def __getitem__(self, i):
        return torch.randn(*self.shape), 7 if i == 1 else 0


SMALL = dict(epochs=1, batch_size=4, input_size=32, progress=False)


def _cls(tmp_path, data=None, model="resnet18", **kw):
    data = Images() if data is None else data
    return cls.train(model, data, data, **{**SMALL, "save_dir": tmp_path / "run", **kw})


def _seg(tmp_path, data=None, model="unet", encoder="resnet18", **kw):
    data = Images(mask=(32, 32)) if data is None else data
    return seg.train(model, encoder, train_data=data, eval_data=data, num_classes=3,
                     **{**SMALL, "save_dir": tmp_path / "run", **kw})


def _ckpt(tmp_path):
    path = tmp_path / "toy.pt"
    ap.save_pruned(make_model("toy"), path, arch=None)
    return path


def _damaged_build(tmp_path):
    """A classification checkpoint whose metadata was edited to ``num_classes: -5``."""
    path = ap.save_pruned(make_model("toy"), tmp_path / "c.pt", task="classification",
                          arch="timm/resnet18", build={"num_classes": 10})
    data = torch.load(path, weights_only=True)
    meta = json.loads(data["metadata"])
    meta["user"]["build"]["num_classes"] = -5
    torch.save({**data, "metadata": json.dumps(meta)}, path)
    return path


def _refused_torchvision_model(tmp_path):
    """A torchvision classifier listed as refused (none is today: the mechanism, by name)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(torchvision_models.REFUSED, "alexnet", "<why>")
        _cls(tmp_path, model="torchvision/alexnet")


def _write(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    return path


def _sens_file(tmp_path, model=None):
    model = model or make_model("toy")
    x = make_input()
    path = tmp_path / "sens.json"
    if not path.exists():
        ap.sensitivity(model, x, RefEval(model, x), ratios=(0.5,), sensitivities_file=path,
                       progress=False)
    return path


def _sens(tmp_path, eval_fn=None, model=None, **kw):
    model = model or make_model("toy")
    x = make_input()
    return ap.sensitivity(model, x, eval_fn or RefEval(model, x), progress=False,
                          **{"ratios": (0.5,), **kw})


def _edited_sens(tmp_path, edit):
    text = _sens_file(tmp_path).read_text()
    return _write(tmp_path, "edited.json", edit(text))


def _bad_train_state(tmp_path):
    _cls(tmp_path)
    (tmp_path / "run" / "baseline" / STATE_FILE).write_bytes(b"PK\x03\x04 not a zip")
    _cls(tmp_path, resume=True)


def _default_for_another_model(tmp_path):
    """The bundled resnet18 profile, as if its groups were measured on another variant."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("autoprune.flow.sensitivities.find_profile",
                   lambda task, arch: _sens_file(tmp_path))
        _cls(tmp_path, sensitivities_file="DEFAULT")


def _prune_with_file_of(tmp_path, other_model=False, criterion="l1_norm"):
    """`autoprune prune` of a trained classifier with a file of another model, or of itself."""
    base = _cls(tmp_path).baseline_path
    sens = _sens_file(tmp_path) if other_model else tmp_path / "own.json"
    if not other_model:
        cls.analyze_sensitivity(base, Images(), sens, ratios=(0.5,), progress=False)
    prune_checkpoint(base, sens, tmp_path / "out.pt", criterion=criterion)


def _analyze_other_weights_into_complete_file(tmp_path):
    _prune_with_file_of(tmp_path)  # own.json: complete for ratio 0.5, on the first weights
    other = _cls(tmp_path, seed=1, save_dir=tmp_path / "run2").baseline_path
    cls.analyze_sensitivity(other, Images(), tmp_path / "own.json", ratios=(0.5,), progress=False)


def _csv_with_a_row_outside(tmp_path):
    """A CSV whose second row names /etc/passwd (a path outside the data root)."""
    from PIL import Image
    from autoprune.tasks.classification.formats import read_csv_list

    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    read_csv_list(_write(tmp_path, "val.csv", "a.png,cat\n/etc/passwd,dog\n"))


def _csv_ids_and_names_across_splits(tmp_path):
    from autoprune.tasks.classification.formats import read_csv_list

    _write(tmp_path, "train.csv", "a.png,0\nb.png,1\n")
    read_csv_list(_write(tmp_path, "val.csv", "c.png,cat\nd.png,dog\n"))


def _flip_idx_not_in_pairs(tmp_path):
    from autoprune.tasks.pose.data import kpt_shape_of

    kpt_shape_of({"kpt_shape": [5, 3], "flip_idx": [1, 2, 3, 4, 0]}, tmp_path / "data.yaml")


# id: (call(tmp_path), error class, stable part of the message)
CASES = {
    # checkpoints
    "checkpoint missing": (lambda t: ap.load_pruned(t / "nope.pt", make_model("toy")),
                           ap.CheckpointError, "no checkpoint at"),
    "checkpoint truncated": (lambda t: ap.load_pruned(
        _write(t, "c.pt", _ckpt(t).read_bytes()[:700]), make_model("toy")),
        ap.CheckpointError, "cannot be read as a weights-only checkpoint (corrupt, truncated"),
    "checkpoint empty file": (lambda t: ap.read_pruned_metadata(_write(t, "c.pt", b"")),
                              ap.CheckpointError, "cannot be read as a weights-only checkpoint"),
    "checkpoint corrupt bytes": (lambda t: ap.read_pruned_metadata(
        _write(t, "c.pt", os.urandom(2048))), ap.CheckpointError,
        "cannot be read as a weights-only checkpoint"),
    "checkpoint is a plain state_dict": (lambda t: ap.load_pruned(
        (torch.save(make_model("toy").state_dict(), t / "sd.pt"), t / "sd.pt")[1],
        make_model("toy")), ap.CheckpointError, "is not an autoprune pruned checkpoint"),
    "checkpoint of a newer version": (lambda t: ap.read_pruned_metadata(
        (torch.save({"format": "autoprune-pruned", "version": 99}, t / "v.pt"), t / "v.pt")[1]),
        ap.CheckpointError, "was written by a newer autoprune"),
    "checkpoint of another architecture": (lambda t: ap.load_pruned(_ckpt(t), make_model(
        "resnet18")), ap.CheckpointError, "does not fit this model"),
    "checkpoint with a damaged build argument": (lambda t: cls.load_model(_damaged_build(t)),
        ap.CheckpointError, "is damaged (metadata field 'build.num_classes' is -5, not a positive "
        "whole number): restore a copy or save the model again"),
    "torchvision model refused by name": (_refused_torchvision_model, ap.ConfigError,
        "torchvision model 'alexnet' cannot be pruned by autoprune: <why>; pick another"),
    "torchvision model that is not a classifier": (lambda t: _cls(
        t, model="fasterrcnn_resnet50_fpn"), ap.ConfigError,
        "torchvision model 'fasterrcnn_resnet50_fpn' is not an image classifier"),
    "checkpoint of another task": (lambda t: cls.load_model(ap.save_pruned(
        make_model("toy"), t / "s.pt", task="segmentation", arch="unet/resnet18")),
        ap.CheckpointError, "is a segmentation checkpoint, not classification"),
    "pretrain_weights missing": (lambda t: _cls(t, pretrain_weights=t / "nope.pt"),
                                 ap.CheckpointError, "check pretrain_weights"),
    "pretrain_weights inside save_dir outputs": (lambda t: _cls(
        t, pretrain_weights=t / "run" / "baseline" / "best.pt"),
        ap.ConfigError, "lies where this run writes its outputs: pick another save_dir"),
    "pretrain_weights is the run's last.pt": (lambda t: _cls(
        t, pretrain_weights=t / "run" / "baseline" / "last.pt"), ap.ConfigError,
        "lies where this run writes its outputs"),
    "pretrain_weights is the pruned stage's last.pt": (lambda t: _cls(
        t, pretrain_weights=t / "run" / "pruned" / "last.pt", sensitivities_file=t / "s.json"),
        ap.ConfigError, "lies where this run writes its outputs"),
    "prune output is the input checkpoint": (lambda t: prune_checkpoint(
        _ckpt(t), "DEFAULT", t / "toy.pt"), ap.ConfigError, "is the input checkpoint"),
    "training state corrupt (resume=True)": (_bad_train_state, ap.CheckpointError,
                                             "cannot be read as a training state"),
    # sensitivity files
    "sensitivity file missing": (lambda t: ap.read_record(t / "nope.json"),
                                 ap.SensitivityFileError, "no sensitivity file at"),
    "sensitivity file truncated": (lambda t: ap.read_record(_edited_sens(
        t, lambda s: s[: len(s) // 2])), ap.SensitivityFileError, "is corrupt or truncated"),
    "sensitivity file binary / a pickle": (lambda t: ap.read_record(
        _write(t, "b.json", bytes(range(256)))), ap.SensitivityFileError,
        "is not a JSON sensitivity file"),
    "sensitivity file without format field": (lambda t: ap.read_record(
        _write(t, "f.json", json.dumps({"sensitivities": {}}))), ap.SensitivityFileError,
        'is not an autoprune sensitivity file (no "format"'),
    "sensitivity file of wrong schema": (lambda t: ap.read_record(_edited_sens(
        t, lambda s: json.dumps({**json.loads(s), "sensitivities": [1, 2]}))),
        ap.SensitivityFileError, "'sensitivities' must map group names to {ratio: loss}"),
    "sensitivity file of a newer version": (lambda t: ap.read_record(_edited_sens(
        t, lambda s: s.replace('"version": 1', '"version": 99'))), ap.SensitivityFileError,
        "upgrade autoprune"),
    "sensitivity file made for another model": (lambda t: _sens(
        t, model=make_model("resnet18"), groups=["conv1"], sensitivities_file=_sens_file(t)),
        ap.SensitivityFileError, "was made for another model"),
    "sensitivity file measured on other weights": (lambda t: _sens(
        t, model=make_model("toy", seed=5), ratios=(0.3, 0.5), sensitivities_file=_sens_file(t)),
        ap.SensitivityFileError, "was measured on other weights of this model"),
    "prune with a file made for another model": (lambda t: _prune_with_file_of(
        t, other_model=True), ap.SensitivityFileError, "was made for another model"),
    "prune with a file of another criterion": (lambda t: _prune_with_file_of(
        t, criterion="fpgm"), ap.SensitivityFileError,
        "was measured with criterion 'l1_norm', this run prunes by 'fpgm'"),
    "analysis of a missing checkpoint": (lambda t: cls.analyze_sensitivity(
        str(t / "nope" / "best.pt"), Images(), t / "s.json"), ap.CheckpointError,
        "no checkpoint at"),
    "analysis of a missing checkpoint (Path)": (lambda t: cls.analyze_sensitivity(
        t / "best.pth", Images(), t / "s.json"), ap.CheckpointError, "no checkpoint at"),
    "analysis into a complete file of other weights": (
        _analyze_other_weights_into_complete_file, ap.SensitivityFileError,
        "was measured on other weights of this model: pass a new file path to measure these"),
    "DEFAULT profile made for another model": (_default_for_another_model, ap.SensitivityFileError,
        "the DEFAULT profile for timm/resnet18 does not match this model's groups"),
    "sensitivity file whose extra.latency is not a mapping": (lambda t: ap.read_record(
        _edited_sens(t, lambda s: json.dumps({**json.loads(s), "extra": {"latency": "fast"}}))),
        ap.SensitivityFileError, "field 'extra.latency' holds 'fast', not a mapping; the file "
        "is damaged"),
    # metrics
    "NaN metric": (lambda t: _sens(t, eval_fn=lambda m: math.nan), ap.MetricError,
                   "eval_fn returned nan for the unpruned model"),
    "metric not a number": (lambda t: _sens(t, eval_fn=lambda m: "0.9"), ap.MetricError,
                            "it must return one number"),
    "zero baseline": (lambda t: _sens(t, eval_fn=lambda m: 0.0), ap.MetricError,
                      "a relative loss needs a non-zero baseline"),
    "NaN training loss": (lambda t: _cls(t, lr=1e30), TrainingDivergedError,
                          "lower the learning rate"),
    # ranges
    "sensitivity ratio out of range": (lambda t: _sens(t, ratios=(1.5,)), ap.ConfigError,
                                       "pruning ratio 1.5 is outside (0, 1)"),
    "prune ratio out of range": (lambda t: ap.prune(make_model("toy"), make_input(),
                                                    {"fuse.0": 1.0}),
                                 ap.ConfigError, "is outside [0, 1)"),
    "eval_metric_loss out of range": (lambda t: _cls(t, sensitivities_file=t / "s.json",
                                                     eval_metric_loss=1.5),
                                      ap.ConfigError, "eval_metric_loss=1.5 is outside (0, 1)"),
    "pruned_flops out of range": (lambda t: _cls(t, sensitivities_file=t / "s.json",
                                                 pruned_flops=1.2),
                                  ap.ConfigError, "pruned_flops=1.2 is outside (0, 1)"),
    "unknown optimizer": (lambda t: _cls(t, optimizer="adam"), ap.ConfigError,
                          "optimizer='adam' is unknown: use 'sgd' or 'adamw'"),
    # data
    "empty dataset": (lambda t: _cls(t, data=Images(n=0)), ap.ConfigError,
                      "the dataset is empty"),
    "empty image folder": (lambda t: cls.train("resnet18", (t / "empty").mkdir() or t / "empty",
                                               save_dir=t / "run", **SMALL),
                           ap.ConfigError, "holds no images in class sub-folders"),
    "gray (1-channel) images, classification": (lambda t: _cls(t, data=Images((1, 32, 32))),
                                                ap.ConfigError,
                                                "but the model takes 3-channel tensors (C, H, W)"),
    "images without a channel axis": (lambda t: _cls(t, data=Images((32, 32))), ap.ConfigError,
                                      "gives images of shape (32, 32)"),
    "4-channel images, segmentation": (lambda t: _seg(t, data=Images((4, 32, 32), mask=(32, 32))),
                                       ap.ConfigError,
                                       "but the model takes 3-channel tensors (C, H, W)"),
    "segmentation masks of another size": (lambda t: _seg(t, data=Images(mask=(64, 64))),
                                           ap.ConfigError, "a mask must have its image's size"),
    "segmentation masks with a channel axis": (lambda t: _seg(t, data=Images(mask=(1, 32, 32))),
                                               ap.ConfigError, "must be (C, H, W) and (H, W)"),
    "num_classes mismatch with the data": (lambda t: _cls(t, num_classes=5), ap.ConfigError,
                                           "num_classes=5 but the data has 3 classes"),
    "labels beyond the classes": (lambda t: _cls(t, data=BadLabels()), ap.ConfigError,
                                  "a training label is out of range"),
    "model object with other classes": (lambda t: _cls(t, model=__import__("timm").create_model(
        "resnet18", num_classes=5)), ap.ConfigError, "predicts 5 classes but the data has 3"),
    "a data file naming a path outside its data root": (_csv_with_a_row_outside, ap.ConfigError,
        "val.csv line 2: '/etc/passwd' leads outside the data root"),
    "CSV labels by id in one split, by name in the other": (_csv_ids_and_names_across_splits,
        ap.ConfigError, "train.csv labels its classes by id but"),
    "pose flip_idx whose twins do not pair": (_flip_idx_not_in_pairs, ap.ConfigError,
        "twins go in pairs (flip_idx[flip_idx[i]] == i"),
    # names and paths
    "unknown classification model": (lambda t: _cls(t, model="no_such_net_v9"), ap.ConfigError,
                                     "unknown model name 'no_such_net_v9'"),
    "unknown segmentation model": (lambda t: _seg(t, model="hrnet"), ap.ConfigError,
                                   "unknown segmentation model 'hrnet'"),
    "unknown segmentation encoder": (lambda t: _seg(t, encoder="resnet9000"), ap.ConfigError,
                                     "unknown encoder 'resnet9000'"),
    "model name without weights for an analysis": (lambda t: cls.analyze_sensitivity(
        "resnet18", Images(), t / "s.json", num_classes=3), ap.ConfigError,
        "a model name needs pretrain_weights"),
    "unwritable save_dir": (lambda t: _cls(t, save_dir=_write(t, "file.txt", "x") / "sub"),
                            ap.ConfigError, "is not writable"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_gives_its_one_line_error(case, tmp_path):
    call, error, message = CASES[case]
    with pytest.raises(error) as info:
        call(tmp_path)
    text = str(info.value)
    assert isinstance(info.value, ap.AutopruneError)
    assert message in text, text
    assert "\n" not in text and text.strip() == text


def test_a_label_out_of_range_is_caught_before_the_loss():
    """The training loop checks class labels on the loader's CPU copy before the loss sees them:
    on a GPU the loss's own check is a device-side assert that breaks every later CUDA call of
    the process (the GPU run of the suite lost 275 tests to one such label). A loss that does
    not check (it ignores the labels) shows the loop's own check; ``ignore_index`` labels pass."""
    from autoprune.flow.training.loop import _batch_loss

    net, x = torch.nn.Conv2d(3, 4, 1), torch.randn(2, 3, 8, 8)
    calls = []

    class Unchecked(torch.nn.Module):
        ignore_index = 255

        def forward(self, out, target):
            calls.append(target)
            return out.mean()

    def loss(labels):
        return _batch_loss(net, x, labels, Unchecked(), None, False, torch.device("cpu"), labels)

    loss(torch.full((2, 8, 8), 255).index_fill_(1, torch.tensor([0]), 3))  # 255 ignored, 3 < 4
    assert len(calls) == 1
    for bad in (4, -1):
        with pytest.raises(ap.ConfigError, match=rf"a training label is out of range \(Target "
                           rf"{bad} is out of bounds for 4 classes"):
            loss(torch.zeros(2, 8, 8, dtype=torch.long).index_fill_(2, torch.tensor([5]), bad))
    assert len(calls) == 1  # the loss never saw the bad labels
    loss(torch.rand(2, 4, 8, 8))  # soft (float) targets are not class labels
    assert len(calls) == 2


@pytest.mark.parametrize("config, message", [
    (None, "no config file at"),
    ("model: [resnet18\n", "is not valid YAML"),
    ("- a list\n", "must hold a mapping of settings"),
    ("task: classification\nmodel: resnet18\ntrain_data: x\nlearning_rate: 0.1\n",
     "unknown setting(s) learning_rate"),
    ("task: classification\ntrain_data: x\n", "lacks 'model:'"),
    ("task: detection\nmodel: yolov8n.yaml\n", "lacks 'data:' (e.g. model: yolov8n.yaml, data:"),
    ("task: ocr\nmodel: x\n", "unknown task 'ocr'"),
    ("model: resnet18\ntrain_data: x\n", "lacks 'task:': add one of classification, detection"),
])
def test_cli_bad_config_is_one_line_with_exit_code_2(config, message, tmp_path, capsys):
    path = tmp_path / "run.yaml"
    if config is not None:
        path.write_text(config)
    assert main(["train", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("autoprune: error: ") and message in err and "\n" not in err, err


def test_unknown_sensitivity_option_is_refused_before_training(tmp_path):
    with pytest.raises(ap.ConfigError, match="unknown sensitivity option.*'early'"):
        _cls(tmp_path, sensitivities_file=tmp_path / "s.json", sensitivity_options={"early": 1})
    assert not (tmp_path / "run" / "baseline").exists()


@pytest.mark.parametrize("kw, message", [
    ({"ratios": (0.5, 1.5)}, "pruning ratio 1.5 is outside (0, 1)"),
    ({"round_to": 0}, "round_to=0 must be a positive whole number"),
    ({"epochs": 0}, "epochs=0 must be a whole number, at least 1"),
    ({"pretrain_epochs": -1}, "pretrain_epochs=-1 must be a whole number, at least 0"),
    ({"pretrain_epochs": 0}, "pretrain_epochs=0 prunes the starting weights as they are, but "
                             "this model holds none trained for the data's classes"),
    ({"eval_data": None}, "pruning needs eval_data"),
    ({"sensitivity_options": {"evaluation": "fast"}}, "evaluation='fast' is not one of"),
    ({"sensitivity_options": {"batch_variants": 0}}, "batch_variants=0 must be a positive"),
    ({"sensitivity_options": {"early_stop": -1}}, "early_stop=-1 must be a positive loss"),
])
def test_later_steps_settings_are_refused_before_training(kw, message, tmp_path):
    """A setting of the analysis, pruning or retraining is checked before the base model trains."""
    kw = {"sensitivities_file": tmp_path / "s.json", **kw}
    data = kw.pop("eval_data", Images())
    with pytest.raises(ap.ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cls.train("resnet18", Images(), data, **{**SMALL, "save_dir": tmp_path / "run", **kw})
    assert not (tmp_path / "run" / "baseline").exists()


def test_pretrain_epochs_with_a_trained_base_model_is_refused_before_training(tmp_path):
    """pretrain_epochs trains a base model that pretrain_weights says is already trained: the
    setting would go unused without a word; one line says to drop one of them."""
    weights = tmp_path / "base.pt"
    torch.save(make_model("resnet18").state_dict(), weights)
    with pytest.raises(ap.ConfigError, match=r"pretrain_epochs=2 trains the base model, but "
                       r"pretrain_weights=.*base.pt is the trained base model"):
        _cls(tmp_path, pretrain_weights=weights, pretrain_epochs=2,
             sensitivities_file=tmp_path / "s.json")
    assert not (tmp_path / "run" / "baseline").exists()


def test_segmentation_encoder_defaults_to_resnet18(tmp_path):
    """seg.train("unet") takes its documented default encoder (it asked for one before); the
    run then stops at the next check, epochs=0, having built the model."""
    from autoprune.tasks.segmentation.models import resolve_arch

    assert resolve_arch("unet", default_encoder="resnet18") == "smp/unet/resnet18"
    assert resolve_arch("fpn/mobilenet_v2", default_encoder="resnet18") == "smp/fpn/mobilenet_v2"
    data = Images(mask=(32, 32))
    with pytest.raises(ap.ConfigError, match="epochs=0 must be"):
        seg.train(train_data=data, eval_data=data, num_classes=3,
                  **{**SMALL, "epochs": 0, "save_dir": tmp_path / "run"})


def test_limits_apply_to_datasets_and_must_be_positive():
    """train_limit / eval_limit cut a user's Dataset too (classes in turn when its labels are
    known); a limit below 1 is refused (a negative one kept all but N images)."""
    from autoprune.tasks.classification import ClassificationAdapter
    from autoprune.tasks.segmentation import SegmentationAdapter

    class Labelled(Images):
        def __init__(self):
            super().__init__(n=12)
            self.targets = [i // 4 for i in range(12)]  # class-sorted, like an ImageFolder

    adapter = ClassificationAdapter(Labelled(), Images(n=16), train_limit=6, eval_limit=5,
                                    input_size=32, device="cpu")
    assert len(adapter.train_set) == 6 and len(adapter.eval_set) == 5
    assert sorted(adapter.train_set.indices) == [0, 1, 4, 5, 8, 9]  # two of each class
    masks = Images(n=16, mask=(32, 32))
    seg_adapter = SegmentationAdapter(masks, masks, num_classes=3, train_limit=4, eval_limit=3,
                                      input_size=32, device="cpu")
    assert (len(seg_adapter.train_set), len(seg_adapter.eval_set)) == (4, 3)
    for make in (lambda: ClassificationAdapter("fashion-mnist", eval_limit=-5, device="cpu"),
                 lambda: SegmentationAdapter(masks, masks, num_classes=3, train_limit=0)):
        with pytest.raises(ap.ConfigError, match="must be a positive number of images"):
            make()

"""save_pruned / load_pruned / read_pruned_metadata / export_onnx."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import autoprune as ap
from conftest import ALL_MODELS, assert_one_line, make_input, make_model, outputs

ROOT = Path(__file__).resolve().parents[1]


def _pruned(name, ratio=0.3, x=None):
    model = make_model(name, seed=0)
    x = make_input() if x is None else x
    groups = ap.prunable_groups(model, x)
    # uneven ratios so that each group ends up with its own width
    ratios = {g.name: [0.2, 0.3, 0.5][i % 3] for i, g in enumerate(groups)}
    result = ap.prune(model, x, ratios)
    return model.eval(), result


@pytest.mark.parametrize("name", ALL_MODELS)
def test_round_trip_identical_outputs(name, tmp_path):
    x = make_input()
    model, result = _pruned(name, x=x)
    path = ap.save_pruned(model, tmp_path / "m.pt", arch=name, num_classes=10, plan=result.plan)
    assert Path(path).is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["m.pt"], "temporary files were left behind"

    fresh = make_model(name, seed=1)  # other random weights: everything must come from the file
    assert ap.count_params(fresh) > ap.count_params(model)
    loaded = ap.load_pruned(path, fresh)
    assert loaded is fresh
    loaded.eval()
    assert ap.count_params(loaded) == ap.count_params(model)
    for k, v in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k
    for (n, a), (_, b) in zip(model.named_modules(), loaded.named_modules()):
        for attr in ("in_channels", "out_channels", "groups", "num_features", "in_features",
                     "out_features"):
            assert getattr(a, attr, None) == getattr(b, attr, None), (n, attr)
    assert torch.equal(outputs(loaded, x), outputs(model, x))
    # the loaded model is an ordinary trainable module
    assert all(p.requires_grad for p in loaded.parameters())
    loaded.train()
    loaded(make_input(batch=2)).sum().backward()
    assert ap.read_pruned_metadata(path)["plan"] == result.plan


def test_metadata_round_trip(tmp_path):
    model, _ = _pruned("toy")
    meta = {"task": "classification", "arch": "toy", "build": {"num_classes": 10},
            "ratios": {"fuse.0": 0.5}, "note": None, "flag": True}
    ap.save_pruned(model, tmp_path / "m.pt", **meta)
    assert ap.read_pruned_metadata(tmp_path / "m.pt") == meta


def test_metadata_must_be_json(tmp_path):
    model, _ = _pruned("toy")
    with pytest.raises(ap.CheckpointError) as info:
        ap.save_pruned(model, tmp_path / "m.pt", model_object=object())
    assert_one_line(info)
    assert not (tmp_path / "m.pt").exists()


def test_checkpoint_holds_only_plain_data(tmp_path):
    model, _ = _pruned("toy")
    ap.save_pruned(model, tmp_path / "m.pt", arch="toy")
    data = torch.load(tmp_path / "m.pt", weights_only=True)  # must not need unpickling classes
    assert data["format"] == "autoprune-pruned"
    assert all(isinstance(v, torch.Tensor) for v in data["state_dict"].values())


@pytest.fixture
def resnet_ckpt(tmp_path):
    model, _ = _pruned("resnet18")
    return ap.save_pruned(model, tmp_path / "resnet18.pt", arch="resnet18")


@pytest.mark.parametrize("build", [
    lambda: make_model("mobilenet_v2"),
    lambda: make_model("toy"),
    lambda: make_model("efficientnet_b0"),
    lambda: __import__("torchvision").models.resnet34(num_classes=10),
    lambda: make_model("resnet18", num_classes=5),
])
def test_load_into_another_architecture_is_refused(resnet_ckpt, build):
    with pytest.raises(ap.CheckpointError) as info:
        ap.load_pruned(resnet_ckpt, build())
    assert_one_line(info)


def test_load_into_more_classes_is_refused(resnet_ckpt):
    with pytest.raises(ap.CheckpointError):
        ap.load_pruned(resnet_ckpt, make_model("resnet18", num_classes=20))


def _plain_save(obj):
    def write(path):
        torch.save(obj, path)
    return write


def _tampered(change):
    """A good checkpoint with ``change(data, metadata)`` applied, still loadable by torch."""
    def write(path, good):
        data = torch.load(io.BytesIO(good), weights_only=True)
        meta = json.loads(data["metadata"])
        change(data, meta)
        data["metadata"] = json.dumps(meta)
        torch.save(data, path)
    return write


BAD_CHECKPOINTS = {
    "truncated": lambda path, good: path.write_bytes(good[: len(good) // 2]),
    "cut at 100 bytes": lambda path, good: path.write_bytes(good[:100]),
    "empty": lambda path, good: path.write_bytes(b""),
    "random bytes": lambda path, good: path.write_bytes(os.urandom(4096)),
    "json text": lambda path, good: path.write_text('{"format": "autoprune-pruned"}'),
    "corrupted middle": lambda path, good: path.write_bytes(
        good[:2000] + bytes(4000) + good[6000:]),
    "plain state_dict": lambda path, good: _plain_save(make_model("toy").state_dict())(path),
    "a tensor": lambda path, good: _plain_save(torch.zeros(3))(path),
    "a dict of another format": lambda path, good: _plain_save({"format": "x", "a": 1})(path),
    "a newer version": lambda path, good: _plain_save(
        {"format": "autoprune-pruned", "version": 99, "metadata": "{}", "state_dict": {}})(path),
    "a whole pickled module": lambda path, good: _plain_save(make_model("toy"))(path),
    "version not an int": _tampered(lambda d, m: d.update(version="1")),
    "layers a list": _tampered(lambda d, m: m.update(layers=list(m["layers"]))),
    "base_shapes a list": _tampered(lambda d, m: m.update(base_shapes=list(m["base_shapes"]))),
    "a base shape not a list": _tampered(lambda d, m: m["base_shapes"].update({"fc.bias": 10})),
    "a layer attribute not a number": _tampered(
        lambda d, m: m["layers"]["conv1"].update(out_channels="64")),
    "a non-tensor weight": _tampered(lambda d, m: d["state_dict"].update({"fc.bias": 3})),
    "user metadata a list": _tampered(lambda d, m: m.update(user=[1, 2])),
    "module versions a list": _tampered(lambda d, m: m.update(module_versions=[1])),
    "a module version not a number": _tampered(
        lambda d, m: m["module_versions"].update({"bn1": "2"})),
}


@pytest.mark.parametrize("kind", list(BAD_CHECKPOINTS))
def test_bad_checkpoint_files_are_one_line_errors(kind, resnet_ckpt, tmp_path):
    good = Path(resnet_ckpt).read_bytes()
    bad = tmp_path / "bad.pt"
    BAD_CHECKPOINTS[kind](bad, good)
    for call in (lambda: ap.load_pruned(bad, make_model("resnet18")),
                 lambda: ap.read_pruned_metadata(bad)):
        with pytest.raises(ap.CheckpointError) as info:
            call()
        assert_one_line(info)


def test_layers_may_set_only_channel_attributes(resnet_ckpt, tmp_path):
    # "layers" names attributes that load_pruned sets: anything but a channel count is refused
    good = Path(resnet_ckpt).read_bytes()
    for attrs in ({"padding": [0, 0]}, {"training": 1}, {"num_features": 8}):
        bad = tmp_path / "bad.pt"
        _tampered(lambda d, m: m["layers"]["conv1"].update(attrs))(bad, good)
        base = make_model("resnet18")
        before = {k: v.clone() for k, v in base.state_dict().items()}
        with pytest.raises(ap.CheckpointError, match="is damaged") as info:
            ap.load_pruned(bad, base)
        assert next(iter(attrs)) in assert_one_line(info)
        after = base.state_dict()  # refused before anything was resized
        assert all(torch.equal(after[k], v) for k, v in before.items())


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_checkpoints_are_ordinary_files(umask, tmp_path):
    # mkstemp makes owner-only 0600 files; a checkpoint gets the mode of any new file
    from autoprune.engine.checkpoint import _atomic_save

    model, _ = _pruned("toy")
    old = os.umask(umask)
    try:
        paths = [ap.save_pruned(model, tmp_path / "best.pt"), tmp_path / "train_state.pt"]
        _atomic_save({"step": 1}, paths[1])
    finally:
        os.umask(old)
    for path in paths:
        assert path.stat().st_mode & 0o777 == 0o666 & ~umask, path


def test_missing_checkpoint(tmp_path):
    with pytest.raises(ap.CheckpointError) as info:
        ap.load_pruned(tmp_path / "nope.pt", make_model("toy"))
    assert_one_line(info)


def test_reload_in_a_fresh_process(tmp_path):
    model, _ = _pruned("resnet18")
    x = make_input()
    ckpt = ap.save_pruned(model, tmp_path / "r.pt", arch="resnet18")
    torch.save(x, tmp_path / "x.pt")
    script = textwrap.dedent(f"""
        import torch, torchvision, autoprune
        torch.set_num_threads(1)
        torch.manual_seed(12345)
        model = torchvision.models.resnet18(weights=None, num_classes=10)
        autoprune.load_pruned({str(ckpt)!r}, model)
        model.eval()
        x = torch.load({str(tmp_path / 'x.pt')!r}, weights_only=True)
        with torch.no_grad():
            torch.save(model(x), {str(tmp_path / 'out.pt')!r})
        print(autoprune.read_pruned_metadata({str(ckpt)!r})["arch"])
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])),
        "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "resnet18"
    theirs = torch.load(tmp_path / "out.pt", weights_only=True)
    assert torch.equal(theirs, outputs(model, x))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch's legacy-exporter notice
def test_export_onnx(tmp_path):
    onnx = pytest.importorskip("onnx")
    model, _ = _pruned("resnet18")
    x1 = make_input(batch=1)
    model.train()
    path = ap.export_onnx(model, x1, tmp_path / "sub" / "r.onnx")
    assert model.training, "export keeps the model's mode"
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    (inp,) = proto.graph.input
    assert [d.dim_param or d.dim_value for d in inp.type.tensor_type.shape.dim] == \
        ["batch", 3, 32, 32]
    (out,) = proto.graph.output
    assert [d.dim_param or d.dim_value for d in out.type.tensor_type.shape.dim] == ["batch", 10]
    # the exported weights have the pruned shapes
    pruned_shape = list(model.layer1[0].conv1.weight.shape)
    assert pruned_shape[0] < 64
    assert any(list(init.dims) == pruned_shape for init in proto.graph.initializer)


def _mnasnet_checkpoint(path):
    """A pruned torchvision mnasnet0_5 (its layers read a ``version`` from the state dict's
    ``_metadata`` when they load), saved with ``save_pruned``; returns the model and its input."""
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.mnasnet0_5(num_classes=10).eval()
    x = torch.randn(1, 3, 32, 32)
    groups = ap.prunable_groups(model, x)
    ap.prune(model, x, {g.name: 0.3 for g in groups})
    ap.save_pruned(model, path, task="classification", arch="torchvision/mnasnet0_5",
                   build={"num_classes": 10}, input_size=32)
    return model, x


def test_module_versions_survive_the_round_trip(tmp_path):
    # torchvision MNASNet raises "version should be set to 1 or 2 instead of None" without them
    import torchvision
    from autoprune import classification as cls
    from autoprune.engine.checkpoint import read_state_dict

    model, x = _mnasnet_checkpoint(tmp_path / "m.pt")
    meta = json.loads(torch.load(tmp_path / "m.pt", weights_only=True)["metadata"])
    assert meta["module_versions"][""] == 2  # MNASNet itself, as its _load_from_state_dict reads
    assert all(isinstance(v, int) for v in meta["module_versions"].values())  # JSON, no pickle
    fresh = torchvision.models.mnasnet0_5(num_classes=10)
    for loaded in (cls.load_model(tmp_path / "m.pt"), ap.load_pruned(tmp_path / "m.pt", fresh)):
        assert torch.equal(loaded.eval()(x), model(x))
    same_shapes = ap.load_pruned(tmp_path / "m.pt", torchvision.models.mnasnet0_5(num_classes=10))
    same_shapes.load_state_dict(read_state_dict(tmp_path / "m.pt"))  # what training reloads


def test_checkpoint_without_module_versions_still_loads(tmp_path):
    # files written before the versions were saved: the fresh model's own versions are used
    from autoprune import classification as cls

    model, x = _mnasnet_checkpoint(tmp_path / "m.pt")
    _tampered(lambda d, m: m.pop("module_versions"))(tmp_path / "old.pt",
                                                      (tmp_path / "m.pt").read_bytes())
    assert torch.equal(cls.load_model(tmp_path / "old.pt")(x), model(x))
    toy, _ = _pruned("toy")
    ap.save_pruned(toy, tmp_path / "toy.pt")
    _tampered(lambda d, m: m.pop("module_versions"))(tmp_path / "toy_old.pt",
                                                      (tmp_path / "toy.pt").read_bytes())
    assert torch.equal(ap.load_pruned(tmp_path / "toy_old.pt", make_model("toy")).eval()(
        make_input()), toy(make_input()))


@pytest.mark.parametrize("field, change", [
    ("build.num_classes", lambda u: u["build"].update(num_classes=-5)),
    ("build.num_classes", lambda u: u["build"].update(num_classes="ten")),
    ("build.nc", lambda u: u["build"].update(nc=0)),
    ("build.in_channels", lambda u: u["build"].update(in_channels=2.5)),
    ("input_size", lambda u: u.update(input_size=-32)),
    ("build", lambda u: u.update(build=[10])),
    ("arch", lambda u: u.update(arch=7)),
])
def test_tampered_build_metadata_is_named_not_another_architecture(field, change, tmp_path):
    from autoprune import classification as cls

    model, _ = _pruned("resnet18")
    ap.save_pruned(model, tmp_path / "m.pt", task="classification", arch="timm/resnet18",
                   build={"num_classes": 10}, input_size=32)
    _tampered(lambda d, m: change(m["user"]))(tmp_path / "bad.pt", (tmp_path / "m.pt").read_bytes())
    calls = [lambda: cls.load_model(tmp_path / "bad.pt")]
    if not field.startswith("build."):  # what a build map holds is its task's to check
        calls.append(lambda: ap.read_pruned_metadata(tmp_path / "bad.pt"))
    for call in calls:
        with pytest.raises(ap.CheckpointError) as info:
            call()
        msg = assert_one_line(info)
        assert f"metadata field {field!r}" in msg and "is damaged" in msg, msg
        assert "restore a copy or save the model again" in msg and "another" not in msg, msg


class Recurrent(nn.Module):
    """A linear feeding a bidirectional LSTM (timm's Sequencer mixes tokens with these)."""

    def __init__(self):
        super().__init__()
        self.fc, self.rnn, self.head = nn.Linear(6, 16), nn.LSTM(16, 8, batch_first=True,
                                                                 bidirectional=True), \
            nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.rnn(self.fc(x))[0][:, -1])


def test_a_pruned_lstm_reloads_with_its_input_size(tmp_path):
    # sequencer2d: the reloaded LSTM kept input_size=192 where its weights had 134 columns
    torch.manual_seed(0)
    model, x = Recurrent().eval(), torch.randn(2, 5, 6)
    ap.prune(model, x, {"fc": 0.5})
    assert model.rnn.input_size == model.fc.out_features == 8
    with torch.no_grad():
        out = model(x)
    loaded = ap.load_pruned(ap.save_pruned(model, tmp_path / "m.pt"), Recurrent()).eval()
    assert loaded.rnn.input_size == 8
    with torch.no_grad():
        assert torch.equal(loaded(x), out)


class RmsNorm(nn.Module):
    """An RMS norm of its own (as timm's RmsNorm): ``normalized_shape`` and a weight, no
    torch-pruning support for either."""

    def __init__(self, channels):
        super().__init__()
        self.normalized_shape = (channels,)
        self.weight = nn.Parameter(torch.rand(channels) + 0.5)

    def forward(self, x):
        return nn.functional.rms_norm(x, self.normalized_shape, self.weight, 1e-6)


def test_a_norm_of_another_library_keeps_its_normalized_shape_true(tmp_path):
    def build():
        return nn.Sequential(nn.Linear(6, 16), RmsNorm(16), nn.GELU(), nn.Linear(16, 3))

    torch.manual_seed(0)
    model, x = build().eval(), torch.randn(2, 6)
    ap.prune(model, x, {"0": 0.5})
    assert model[1].normalized_shape == (8,) == tuple(model[1].weight.shape)
    with torch.no_grad():
        out = model(x)
    loaded = ap.load_pruned(ap.save_pruned(model, tmp_path / "m.pt"), build()).eval()
    assert loaded[1].normalized_shape == (8,)
    with torch.no_grad():
        assert torch.equal(loaded(x), out)

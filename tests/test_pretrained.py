"""Pretrained weights through each library's own cache (issue 31), with no network: every test
seeds a local cache in the library's layout (Hugging Face hub, torch hub, smp, Ultralytics'
weights dir) and points the environment at it; the reachability probe is replaced by one that
fails the test if it is asked about a real host."""
from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from autoprune.errors import CheckpointError, ConfigError
from autoprune.tasks import hub_cache, weights
from autoprune.tasks.weights import Provenance
from conftest import refuse_network_probes, run_offline_child

REAL_REACHABLE = weights.reachable
HEAD = ("fc.weight", "fc.bias")


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Any probe of a real host is a test failure; the answer cache starts empty."""
    refuse_network_probes(monkeypatch)


def offline_hub(monkeypatch, home: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(home))
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def timm_hub(tmp_path_factory):
    """An HF home whose hub cache holds known resnet18 weights as timm/resnet18.a1_in1k."""
    import timm

    home = tmp_path_factory.mktemp("hf")
    torch.manual_seed(0)
    source = timm.create_model("resnet18", pretrained=False)
    file = hub_cache.seed_hf_cache(source, "timm/resnet18.a1_in1k", home / "hub")
    return home, source.state_dict(), file


def one_line(e: pytest.ExceptionInfo) -> str:
    text = str(e.value)
    assert "\n" not in text, text
    return text


# -- the probe and the hub layout ----------------------------------------------------------------
@pytest.fixture
def silent_server():
    """A local port that accepts connections and never answers (a black hole), closed after."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield f"http://127.0.0.1:{server.getsockname()[1]}/file"
    server.close()


def test_the_probe_of_a_silent_or_closed_site_answers_within_3_s(monkeypatch, silent_server):
    for name in ("http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now: refused at once
    for url in (silent_server, f"http://127.0.0.1:{port}/x"):
        start = time.monotonic()
        assert REAL_REACHABLE(url, timeout=2.0) is False
        assert time.monotonic() - start < 3.0, url
    release = threading.Event()  # a name look-up that hangs (a resolver that never answers)
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: release.wait(30) and [])
    start = time.monotonic()
    try:
        assert REAL_REACHABLE("https://hangs.example/x", timeout=2.0) is False
        assert time.monotonic() - start < 3.0
    finally:
        release.set()
    assert weights.site_root("https://huggingface.co/timm/x/resolve/main/y") == \
        "https://huggingface.co/"


def test_seeded_hub_cache_has_the_hubs_layout(timm_hub):
    home, _, file = timm_hub
    from huggingface_hub import try_to_load_from_cache

    repo = home / "hub" / "models--timm--resnet18.a1_in1k"
    revision = (repo / "refs" / "main").read_text()
    assert file == repo / "snapshots" / revision / "model.safetensors"
    assert file.is_symlink() and file.resolve().parent == repo / "blobs"
    assert file.resolve().name == weights.sha256_of(file)  # a blob is named by its sha256
    config = json.loads((file.parent / "config.json").read_text())
    assert config["architecture"] == "resnet18" and config["pretrained_cfg"]["num_classes"] == 1000
    assert try_to_load_from_cache("timm/resnet18.a1_in1k", "model.safetensors",
                                  cache_dir=str(home / "hub")) == str(file)


# -- timm ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", [True, "IMAGENET", "imagenet", "timm/resnet18.a1_in1k",
                                  "resnet18.a1_in1k", "hf-hub:timm/resnet18.a1_in1k"])
def test_timm_weights_come_from_the_seeded_hub_cache(monkeypatch, timm_hub, spec):
    from autoprune.tasks.classification.pretrained import create_pretrained, pretrained_data_config

    home, seeded, file = timm_hub
    offline_hub(monkeypatch, home)
    model, prov, data = create_pretrained("timm/resnet18", 7, spec)
    state = model.state_dict()
    assert [k for k in state if k not in HEAD and not torch.equal(state[k], seeded[k])] == []
    assert state["fc.weight"].shape == (7, 512) and model.num_classes == 7
    assert (prov.source, prov.id, prov.tag) == ("timm", "timm/resnet18.a1_in1k", "a1_in1k")
    assert Path(prov.file) == file and prov.sha256 == weights.sha256_of(file)
    assert Provenance.from_dict(json.loads(json.dumps(asdict(prov)))) == prov
    assert data["interpolation"] == "bicubic" and data["crop_pct"] == 0.95
    assert tuple(data["mean"]) == (0.485, 0.456, 0.406) and data["input_size"] == (3, 224, 224)
    assert pretrained_data_config("timm/resnet18", spec) == data  # known before the weights


def test_an_hf_hub_repo_timm_does_not_list_is_read_with_its_config(monkeypatch, tmp_path):
    import timm
    from autoprune.tasks.classification.pretrained import create_pretrained, pretrained_data_config

    offline_hub(monkeypatch, tmp_path)
    source = timm.create_model("resnet18", pretrained=False, num_classes=10)
    file = hub_cache.seed_hf_cache(source, "someone/fmnist-resnet18")
    model, prov, data = create_pretrained("timm/resnet18", 10, "hf-hub:someone/fmnist-resnet18")
    assert pretrained_data_config("timm/resnet18", "hf-hub:someone/fmnist-resnet18") == data
    assert all(torch.equal(v, source.state_dict()[k]) for k, v in model.state_dict().items())
    assert prov.id == "someone/fmnist-resnet18" and Path(prov.file) == file
    with pytest.raises(ConfigError) as e:
        create_pretrained("timm/resnet34", 10, "hf-hub:someone/fmnist-resnet18")
    assert "are for timm model 'resnet18', not 'resnet34'" in one_line(e)


@pytest.mark.parametrize("arch, spec, words", [
    ("timm/resnet18", "timm/resnet50.a1_in1k", "are for timm model 'resnet50', not 'resnet18'"),
    ("timm/resnet18", "yes", "pretrained='yes' is not a weights name"),
    ("timm/resnet18", 1, "pretrained=1 is not a weights name"),
    ("timm/resnet18", "timm/resnet18.nope", "no pretrained tag 'nope' for 'resnet18'"),
    ("timm/resnet18", "other/resnet18", "use 'timm/<model>.<tag>' or 'hf-hub:other/resnet18'"),
    ("torchvision/mobilenet_v2", "IMAGENET1K_V9", "no weights 'IMAGENET1K_V9'"),
    ("resnet18", True, "is not an architecture key"),
])
def test_bad_weights_names_are_one_line_errors(monkeypatch, tmp_path, arch, spec, words):
    from autoprune.tasks.classification.pretrained import create_pretrained

    offline_hub(monkeypatch, tmp_path)
    with pytest.raises(ConfigError) as e:
        create_pretrained(arch, 5, spec)
    assert words in one_line(e)


@pytest.mark.parametrize("value, hub", [
    (True, True), ("IMAGENET", True), ("hf-hub:org/name", True), ("timm/resnet18.a1_in1k", True),
    ("IMAGENET1K_V2", True), ("yes", True), ("out/baseline/best.pt", False), (None, False),
    (False, False), ("", False)])
def test_hub_names_are_told_from_local_files(tmp_path, value, hub):
    from autoprune.tasks.classification.pretrained import is_hub_spec

    assert is_hub_spec(value) is hub
    (tmp_path / "IMAGENET1K_V2").write_bytes(b"")  # an existing file of that name is a file
    assert is_hub_spec(str(tmp_path / "IMAGENET1K_V2")) is False


# -- torchvision ---------------------------------------------------------------------------------
def test_torchvision_weights_come_from_torch_home(monkeypatch, tmp_path):
    import torchvision
    from autoprune.tasks.classification.pretrained import create_pretrained, \
        pretrained_data_config, seed_torchvision_cache

    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(torch.hub, "_hub_dir", None)
    source = torchvision.models.mobilenet_v2(weights=None)
    file = seed_torchvision_cache(source, "mobilenet_v2", "IMAGENET1K_V1")
    assert file == tmp_path / "hub" / "checkpoints" / "mobilenet_v2-b0353104.pth"
    model, prov, data = create_pretrained("torchvision/mobilenet_v2", 5, "IMAGENET1K_V1")
    state, seeded = model.state_dict(), source.state_dict()
    head = ("classifier.1.weight", "classifier.1.bias")
    assert [k for k in state if k not in head and not torch.equal(state[k], seeded[k])] == []
    assert state["classifier.1.weight"].shape == (5, 1280)
    assert (prov.source, prov.id) == ("torchvision", "MobileNet_V2_Weights.IMAGENET1K_V1")
    assert prov.url.endswith("/mobilenet_v2-b0353104.pth")
    assert prov.sha256 == weights.sha256_of(file)
    assert data["input_size"] == (3, 224, 224) and data["crop_pct"] == 224 / 256
    assert pretrained_data_config("torchvision/mobilenet_v2", "IMAGENET1K_V1") == data


def test_transforms_follow_the_pretrained_config_at_small_sizes_and_for_grey_images():
    from PIL import Image
    from autoprune.tasks.classification.pretrained import data_transforms

    data = {"input_size": (3, 224, 224), "interpolation": "bicubic", "crop_pct": 0.95,
            "mean": (0.5, 0.5, 0.5), "std": (0.25, 0.25, 0.25), "crop_mode": "center"}
    grey = Image.new("L", (28, 28), 128)
    train, val = data_transforms(data, True, 32), data_transforms(data, False, 32)
    assert train(grey).shape == val(grey).shape == (3, 32, 32)
    assert torch.allclose(val(grey), torch.full((3, 32, 32), (128 / 255 - 0.5) / 0.25), atol=1e-3)
    crop = train.transforms[1]
    assert crop.scale == (0.35, 1.0) and crop.interpolation is not None
    assert data_transforms(data, True).transforms[1].scale == (0.08, 1.0)  # timm's at 224 px


# -- smp -----------------------------------------------------------------------------------------
def test_smp_encoder_weights_come_from_its_hub_repo_in_the_cache(monkeypatch, tmp_path):
    import segmentation_models_pytorch as smp
    from autoprune.tasks.segmentation.pretrained import build_with_encoder_weights, seed_smp_cache

    offline_hub(monkeypatch, tmp_path)
    source = smp.create_model("unet", encoder_name="resnet18", encoder_weights=None, classes=2)
    file = seed_smp_cache(source, "resnet18", "imagenet")
    assert file.parent.name == smp.encoders.encoders["resnet18"]["pretrained_settings"][
        "imagenet"]["revision"]  # the commit smp asks for
    model, prov = build_with_encoder_weights("unet", "resnet18", "imagenet", classes=4)
    seeded = source.encoder.state_dict()
    assert all(torch.equal(v, seeded[k]) for k, v in model.encoder.state_dict().items())
    assert model.segmentation_head[0].out_channels == 4
    assert (prov.source, prov.id, prov.tag) == ("smp", "smp-hub/resnet18.imagenet", "imagenet")
    grey, _ = build_with_encoder_weights("fpn", "resnet18", "imagenet", in_channels=1, classes=4)
    assert torch.allclose(grey.encoder.conv1.weight[:, 0], seeded["conv1.weight"].sum(1))


# -- Ultralytics ---------------------------------------------------------------------------------
@pytest.fixture
def yolo_dirs(monkeypatch, tmp_path):
    """Ultralytics' weights dir and the current folder, both empty, under tmp_path."""
    import ultralytics.utils
    from autoprune.tasks.detection import offline

    folder = tmp_path / "weights"
    monkeypatch.setattr(ultralytics.utils, "SETTINGS",  # a copy: the settings file stays as it is
                        {**ultralytics.utils.SETTINGS, "weights_dir": str(folder)})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("YOLO_OFFLINE", "1")
    monkeypatch.delattr(offline, "USER_YOLO_OFFLINE", raising=False)
    return folder


def test_yolov8n_in_the_weights_dir_loads_safely_and_takes_the_datas_classes(yolo_dirs):
    from ultralytics.nn.tasks import DetectionModel
    from autoprune.tasks.detection.pretrained import adapt_to_classes, load_pretrained, \
        seed_ultralytics_weights

    file = seed_ultralytics_weights(DetectionModel("yolov8n.yaml", nc=80, verbose=False),
                                    "yolov8n.pt")
    assert file == yolo_dirs / "yolov8n.pt"
    module, prov = load_pretrained("yolov8n.pt")
    assert (prov.source, prov.id, Path(prov.file)) == ("ultralytics", "yolov8n.pt", file)
    assert prov.url.endswith("/yolov8n.pt") and prov.sha256 == weights.sha256_of(file)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    model, transferred, total = adapt_to_classes(module, 3, ["shirt", "bag", "shoe"])
    assert model.model[-1].nc == 3 and model.names == {0: "shirt", 1: "bag", 2: "shoe"}
    state = model.state_dict()
    fresh = [k for k in state if not (k in before and before[k].shape == state[k].shape
                                      and torch.equal(before[k], state[k]))]
    assert fresh and all(".cv3." in k for k in fresh)  # only the class outputs are new
    assert (transferred, total) == (len(state) - len(fresh), len(state))
    backbone = [k for k in before if k.split(".")[1].isdigit() and int(k.split(".")[1]) < 10]
    assert backbone and all(torch.equal(before[k], state[k]) for k in backbone)
    # the widths of a build from the YAML for nc=3, as autoprune's checkpoints rebuild a model
    plain, _, _ = adapt_to_classes(module, 3, keep_head_width=False)
    built = DetectionModel("yolov8n.yaml", nc=3, verbose=False).state_dict()
    assert {k: v.shape for k, v in plain.state_dict().items()} == \
        {k: v.shape for k, v in built.items()}
    assert state["model.22.cv3.0.0.conv.weight"].shape[0] == 80  # Ultralytics keeps the source's
    assert built["model.22.cv3.0.0.conv.weight"].shape[0] == 64
    assert all(torch.equal(before[k], plain.state_dict()[k]) for k in backbone)


def test_a_pickle_of_unknown_classes_in_the_weights_dir_is_refused(yolo_dirs):
    from autoprune.tasks.detection.pretrained import load_pretrained

    yolo_dirs.mkdir()
    torch.save({"model": torch.nn.Sequential(_Foreign())}, yolo_dirs / "yolov8s.pt")
    with pytest.raises(CheckpointError) as e:
        load_pretrained("yolov8s.pt")
    assert "not an Ultralytics checkpoint made of known model classes" in one_line(e)


class _Foreign(torch.nn.Module):
    """A class no allow-list knows."""


# -- missing files, offline ----------------------------------------------------------------------
def _missing_timm(monkeypatch, tmp_path):
    from autoprune.tasks.classification.pretrained import create_pretrained

    offline_hub(monkeypatch, tmp_path)
    create_pretrained("timm/resnet18", 7, True)


def _missing_torchvision(monkeypatch, tmp_path):
    from autoprune.tasks.classification.pretrained import create_pretrained

    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(torch.hub, "_hub_dir", None)
    monkeypatch.setattr(weights, "reachable", lambda *a, **k: False)  # an air-gapped site
    create_pretrained("torchvision/resnet18", 7, True)


def _missing_smp(monkeypatch, tmp_path):
    from autoprune.tasks.segmentation.pretrained import build_with_encoder_weights

    offline_hub(monkeypatch, tmp_path)
    build_with_encoder_weights("unet", "resnet18", "imagenet", classes=3)


def _missing_yolo(monkeypatch, tmp_path):
    import ultralytics.utils
    from autoprune.tasks.detection import offline
    from autoprune.tasks.detection.pretrained import resolve_ultralytics_weights

    monkeypatch.setattr(ultralytics.utils, "SETTINGS",
                        {**ultralytics.utils.SETTINGS, "weights_dir": str(tmp_path / "w")})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("YOLO_OFFLINE", "1")
    monkeypatch.delattr(offline, "USER_YOLO_OFFLINE", raising=False)
    resolve_ultralytics_weights("yolo11n-seg.pt")


@pytest.mark.parametrize("attempt", [_missing_timm, _missing_torchvision, _missing_smp,
                                     _missing_yolo], ids=["timm", "torchvision", "smp", "yolo"])
def test_a_missing_file_offline_is_one_line_naming_file_and_folder(monkeypatch, tmp_path,
                                                                     attempt):
    start = time.monotonic()
    with pytest.raises(ConfigError) as e:
        attempt(monkeypatch, tmp_path)
    assert time.monotonic() - start < 10
    text = one_line(e)
    file, folder = _expected(attempt, tmp_path)
    assert f"({file} not in " in text and str(folder) in text, text
    assert "on a connected machine" in text
    assert "=<local file" in text or "a local .pt as model=" in text


def _expected(attempt, tmp_path) -> tuple[str, Path]:
    return {_missing_timm: ("model.safetensors",
                            tmp_path / "hub" / "models--timm--resnet18.a1_in1k"),
            _missing_torchvision: ("resnet18-f37072fd.pth", tmp_path / "hub" / "checkpoints"),
            _missing_smp: ("model.safetensors",
                           tmp_path / "hub" / "models--smp-hub--resnet18.imagenet"),
            _missing_yolo: ("yolo11n-seg.pt", tmp_path / "w")}[attempt]


def test_without_hf_hub_offline_one_failed_probe_means_offline(monkeypatch, tmp_path):
    from huggingface_hub import constants
    from autoprune.tasks.classification.pretrained import create_pretrained

    offline_hub(monkeypatch, tmp_path)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    asked = []
    monkeypatch.setattr(weights, "reachable", lambda url, timeout=2.0: asked.append(url) and False)
    with pytest.raises(ConfigError) as e:
        create_pretrained("timm/resnet18", 7, True)
    assert asked == ["https://huggingface.co"]
    assert "(huggingface.co cannot be reached)" in one_line(e)
    assert f"hf download timm/resnet18.a1_in1k model.safetensors --cache-dir {tmp_path / 'hub'}" \
        in str(e.value)


# -- online: one probe, then the library's own download into its cache (faked here) -------------
def test_when_the_hub_answers_the_file_is_downloaded_into_the_cache_now_named(monkeypatch,
                                                                              tmp_path):
    import huggingface_hub
    import timm
    from huggingface_hub import constants
    from autoprune.tasks.classification.pretrained import create_pretrained

    offline_hub(monkeypatch, tmp_path)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(weights, "reachable", lambda url, timeout=2.0: True)
    source, calls = timm.create_model("resnet18", pretrained=False), []

    def download(repo_id, filename, revision=None, cache_dir=None, **_):
        calls.append((repo_id, filename, cache_dir))
        return str(hub_cache.seed_hf_cache(source, repo_id, cache_dir))

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    model, prov, _ = create_pretrained("timm/resnet18", 3, True)
    assert calls == [("timm/resnet18.a1_in1k", "model.safetensors", str(tmp_path / "hub"))]
    assert torch.equal(model.conv1.weight, source.conv1.weight)
    create_pretrained("timm/resnet18", 3, True)
    assert len(calls) == 1  # cached now


def test_when_github_answers_yolo_weights_go_to_the_weights_dir(monkeypatch, yolo_dirs):
    from ultralytics.nn.tasks import DetectionModel
    from autoprune.tasks.detection import pretrained

    monkeypatch.delenv("YOLO_OFFLINE")
    monkeypatch.setattr(weights, "reachable", lambda url, timeout=2.0: True)
    asked = []

    def download(file, *a, **k):
        asked.append(file)
        pretrained.seed_ultralytics_weights(DetectionModel("yolov8n.yaml", verbose=False),
                                            Path(file).name, Path(file).parent)
        return file

    monkeypatch.setattr(pretrained, "attempt_download_asset", download)
    path, prov = pretrained.resolve_ultralytics_weights("yolov8n.pt")
    assert asked == [str(yolo_dirs / "yolov8n.pt")] and path == yolo_dirs / "yolov8n.pt"
    assert prov.url == f"https://github.com/ultralytics/assets/releases/download/" \
                       f"{pretrained.ASSETS_RELEASE}/yolov8n.pt"


def test_the_offline_child_refuses_the_network_but_not_unix_sockets(tmp_path):
    """The guard of the offline tests (conftest.run_offline_child): a TCP connection is refused
    and recorded; a Unix socket, which DataLoader workers use to hand tensors over (on the GPU
    machine the guard broke a fresh-process test that way), still connects."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="ap")) / "s"  # short: Unix socket paths end at 108 bytes
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(1)
    try:
        got = run_offline_child(tmp_path, f"""
            local = socket.socket(socket.AF_UNIX)
            local.connect({str(path)!r})
            try:
                socket.socket(socket.AF_INET).connect(("127.0.0.1", 9))
                tcp = "connected"
            except OSError as e:
                tcp = str(e)
            print("RESULT", json.dumps({{"tcp": tcp, "attempts": attempts}}))
        """)
    finally:
        server.close()
        path.unlink()
        path.parent.rmdir()
    assert got["tcp"] == "network access refused by the test"
    assert len(got["attempts"]) == 1 and "127.0.0.1" in got["attempts"][0]

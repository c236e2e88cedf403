"""Classification journey: one-call flow, the three sensitivities_file modes, the three-step flow,
the CLI, reloading in a fresh process, and bad inputs. Tiny settings: 32 px, a few
hundred images."""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

import autoprune
from autoprune import classification as cls
from autoprune.cli import main
from autoprune.datasets import find_root

from conftest import child_pythonpath, needs_fmnist

ROOT = Path(__file__).resolve().parents[1]
SMALL = dict(epochs=1, batch_size=32, input_size=32, train_limit=160, eval_limit=60,
             progress=False)
RATIOS = (0.3, 0.6)



def _sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def base_ckpt(tmp_path_factory):
    """A resnet18 trained for two epochs on 320 Fashion-MNIST images (plain training, step 1).

    The sensitivities refuse a baseline of 0: one epoch on 160 images (5 steps, warming up) left
    it at chance (top-1 0.1 on 20 images with some seeds); this way 0.38-0.5 over seeds 0-2."""
    out = tmp_path_factory.mktemp("base")
    result = cls.train("resnet18", "fashion-mnist", save_dir=out, warmup_epochs=0,
                       **{**SMALL, "epochs": 2, "train_limit": 320})
    assert result.report is None and result.baseline_path == out / "baseline" / "best.pt"
    return result.baseline_path


@pytest.fixture
def image_folder(tmp_path):
    """A 3-class ImageFolder of small PNGs (class = dominant colour channel)."""
    rng = np.random.default_rng(0)
    for split, n in (("train", 8), ("val", 4)):
        for c, name in enumerate(("red", "green", "blue")):
            d = tmp_path / split / name
            d.mkdir(parents=True)
            for i in range(n):
                img = rng.integers(0, 80, (40, 40, 3), dtype=np.uint8)
                img[..., c] = 200
                Image.fromarray(img).save(d / f"{i}.png")
    return tmp_path


@needs_fmnist
def test_plain_training_writes_loadable_checkpoint(base_ckpt):
    meta = autoprune.read_pruned_metadata(base_ckpt)
    assert meta["task"] == "classification" and meta["arch"] == "timm/resnet18"
    assert meta["build"] == {"num_classes": 10} and meta["pruned"] is False
    assert 0.0 <= meta["metrics"]["top1"] <= 1.0
    model = cls.load_model(base_ckpt)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


@needs_fmnist
def test_one_call_flow_new_file(tmp_path):
    sens_file = tmp_path / "sens.json"
    r = cls.train("resnet18", "fashion-mnist", save_dir=tmp_path / "run", ratios=RATIOS,
                  sensitivities_file=sens_file, pruned_flops=0.3, **SMALL)
    # a FLOPs target always prunes; a tolerated loss on the top-1 of this one-epoch model (60
    # images) may keep every group (test_bundled_default_profile_prunes_resnet18 prunes by loss)
    rep = json.loads((tmp_path / "run" / "report.json").read_text())
    assert rep["task"] == "classification" and set(rep) >= {"baseline", "pruned", "flops_reduction"}
    assert rep["pruned_flops_target"] == 0.3 and rep["eval_metric_loss"] is None
    for key in ("baseline", "pruned"):
        m = rep[key]
        assert set(m) >= {"params", "flops", "size_mb", "metrics", "latency_cpu_ms",
                          "latency_gpu_ms"}
        assert set(m["metrics"]) == {"top1", "top5"}
    assert rep["pruned"]["flops"] < rep["baseline"]["flops"]
    assert rep["flops_reduction"] == pytest.approx(
        1 - rep["pruned"]["flops"] / rep["baseline"]["flops"], abs=1e-6)
    for name in ("report.md", "report.csv", "sensitivity.png", "baseline/best.pt",
                 "pruned/best.pt"):
        assert (tmp_path / "run" / name).is_file(), name
    sens = autoprune.load_sensitivities(sens_file)
    assert all(set(p) == set(RATIOS) for p in sens.values()) and len(sens) == 12
    assert r.pruned_path.stat().st_size < r.baseline_path.stat().st_size
    assert autoprune.read_pruned_metadata(r.pruned_path)["plan"]


@needs_fmnist
def test_three_step_flow_existing_file_and_input_untouched(base_ckpt, tmp_path, monkeypatch):
    sens_file = tmp_path / "sens.json"
    before = _sha(base_ckpt)
    first = cls.analyze_sensitivity(base_ckpt, "fashion-mnist", sens_file, ratios=(0.3,),
                                    eval_limit=60, progress=False)
    assert len(first) == 12 and all(list(p) == [0.3] for p in first.values())

    calls = []
    from autoprune.tasks.classification import ClassificationAdapter
    original = ClassificationAdapter.evaluate
    monkeypatch.setattr(ClassificationAdapter, "evaluate",
                        lambda self, m: calls.append(1) or original(self, m))
    # a FLOPs target always prunes: whether a group of this one-epoch model stays within a
    # tolerated top-1 loss on 60 images is luck
    r = cls.train("resnet18", "fashion-mnist", save_dir=tmp_path / "run", ratios=RATIOS,
                  pretrain_weights=base_ckpt, sensitivities_file=sens_file, pruned_flops=0.3,
                  **SMALL)
    # existing file: only the 12 missing 0.6 points are measured (+ the baseline, the prefix
    # cache's record and check passes, and the evaluations of retraining and the report)
    sens = autoprune.load_sensitivities(sens_file)
    assert all(set(p) == {0.3, 0.6} for p in sens.values())
    assert {g: p[0.3] for g, p in sens.items()} == {g: p[0.3] for g, p in first.items()}
    assert 12 <= len(calls) <= 12 + 6
    assert _sha(base_ckpt) == before  # the user's checkpoint is never overwritten
    assert r.baseline_path == base_ckpt and r.report["flops_reduction"] > 0


@needs_fmnist
def test_pruned_flops_target(base_ckpt, tmp_path):
    r = cls.train("resnet18", "fashion-mnist", save_dir=tmp_path / "run", ratios=RATIOS,
                  pretrain_weights=base_ckpt, sensitivities_file=tmp_path / "s.json",
                  pruned_flops=0.3, **SMALL)
    assert r.report["flops_reduction"] == pytest.approx(0.3, abs=0.02)


@needs_fmnist
def test_default_profile_missing_lists_available(tmp_path):
    # checked before any training: no profile is bundled for this architecture (a timm
    # model without one: resnet10t)
    with pytest.raises(autoprune.ConfigError, match="no DEFAULT sensitivity profile") as e:
        cls.train("resnet10t", "fashion-mnist", save_dir=tmp_path,
                  sensitivities_file="DEFAULT", **SMALL)
    assert "\n" not in str(e.value) and "timm/resnet18" in str(e.value)
    assert not (tmp_path / "baseline").exists()


@needs_fmnist
def test_bundled_default_profile_prunes_resnet18(base_ckpt, tmp_path):
    r = cls.train("resnet18", "fashion-mnist", save_dir=tmp_path / "run",
                  pretrain_weights=base_ckpt, sensitivities_file="DEFAULT",
                  eval_metric_loss=0.05, **SMALL)
    assert r.sensitivities_path.name == "classification-timm-resnet18.json"
    assert r.report["flops_reduction"] > 0.3


@needs_fmnist
def test_default_profile_used_and_mismatch_refused(base_ckpt, tmp_path, monkeypatch):
    profile_dir = tmp_path / "profiles"
    profile_dir.mkdir()
    cls.analyze_sensitivity(base_ckpt, "fashion-mnist", profile_dir / "resnet18.json",
                            ratios=(0.5,), eval_limit=40, progress=False)
    (profile_dir / "index.json").write_text(json.dumps(
        {"profiles": {"classification": {"timm/resnet18": "resnet18.json"}}}))
    monkeypatch.setattr("autoprune.flow.defaults.profile_dir", lambda: profile_dir)
    r = cls.train("resnet18", "fashion-mnist", save_dir=tmp_path / "run", ratios=(0.5,),
                  pretrain_weights=base_ckpt, sensitivities_file="DEFAULT", **SMALL)
    assert r.sensitivities_path == profile_dir / "resnet18.json"
    # a profile whose groups differ from the model's is refused, never applied half-way
    data = json.loads((profile_dir / "resnet18.json").read_text())
    data["model"]["fingerprint"] = "0000000000000000"
    (profile_dir / "resnet18.json").write_text(json.dumps(data))
    with pytest.raises(autoprune.SensitivityFileError, match="does not match this model"):
        cls.train("resnet18", "fashion-mnist", save_dir=tmp_path / "run2", ratios=(0.5,),
                  pretrain_weights=base_ckpt, sensitivities_file="DEFAULT", **SMALL)
    # the same holds for a file passed by path: made for another model -> refused
    with pytest.raises(autoprune.SensitivityFileError, match="another model"):
        cls.train(torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(),
                                      torch.nn.Conv2d(8, 8, 3), torch.nn.AdaptiveAvgPool2d(1),
                                      torch.nn.Flatten(), torch.nn.Linear(8, 10)),
                  "fashion-mnist", save_dir=tmp_path / "run3", ratios=(0.5,),
                  sensitivities_file=profile_dir / "resnet18.json", **SMALL)


@needs_fmnist
def test_cli_train_prune_report(base_ckpt, tmp_path, capsys):
    sens = tmp_path / "s.json"
    assert main(["sensitivity", str(base_ckpt), "fashion-mnist", str(sens), "--ratios", "0.4",
                 "--limit", "40", "--early-stop", "0.9", "--evaluation", "prune"]) == 0
    extra = autoprune.read_record(sens).extra
    assert extra["early_stop"] == 0.9 and extra["evaluation"]["mode"] == "prune"
    pruned = tmp_path / "pruned.pt"
    # a tolerated loss of 0.99: some group of this one-epoch model is within it (a loss above
    # 0.99 needs a top-1 of 0 on the 40 images for every group); with 0.5 pruning was luck
    assert main(["prune", str(base_ckpt), str(sens), str(pruned),
                 "--eval-metric-loss", "0.99"]) == 0
    assert main(["report", str(base_ckpt), str(pruned), "fashion-mnist", "--limit", "40",
                 "--save-dir", str(tmp_path / "rep")]) == 0
    rep = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert rep["pruned"]["params"] < rep["baseline"]["params"]

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"task": "classification", "model": "resnet18",
                                   "train_data": "fashion-mnist", "save_dir": str(tmp_path / "t"),
                                   "pretrain_weights": str(base_ckpt),
                                   "sensitivities_file": str(sens), "eval_metric_loss": 0.5,
                                   "ratios": [0.4], **SMALL}))
    capsys.readouterr()
    assert main(["train", str(cfg)]) == 0
    assert (tmp_path / "t" / "report.json").is_file()
    told = capsys.readouterr().out.splitlines()[-8:]  # the run ends by saying where it wrote
    assert told[0] == f"[autoprune] outputs of this run (save_dir {tmp_path / 't'}):"
    assert told[1].split() == ["pruned", "model", str(tmp_path / "t" / "pruned" / "best.pt")]
    assert told[2].split() == ["base", "model", str(base_ckpt)]
    cfg.write_text(yaml.safe_dump({"task": "classification", "model": "resnet18",
                                   "train_data": "fashion-mnist", "epochs": 1,
                                   "learning_rate": 0.1}))
    assert main(["train", str(cfg)]) == 2
    assert "unknown setting(s) learning_rate" in capsys.readouterr().err


@needs_fmnist
def test_cli_export_onnx_of_a_pruned_checkpoint_matches_torch(base_ckpt, tmp_path, capsys):
    import onnx
    from onnx.reference import ReferenceEvaluator

    pruned = tmp_path / "pruned.pt"
    assert main(["prune", str(base_ckpt), "DEFAULT", str(pruned), "--pruned-flops", "0.5"]) == 0
    out = tmp_path / "pruned.onnx"
    assert main(["export", str(pruned), str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    graph = onnx.load(str(out))
    onnx.checker.check_model(graph)
    model = cls.load_model(pruned)
    stored = sum(int(np.prod(i.dims)) for i in graph.graph.initializer)
    assert stored <= sum(p.numel() for p in model.parameters()) + 10_000  # + BN statistics
    assert stored < 0.8 * sum(p.numel() for p in cls.load_model(base_ckpt).parameters())
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model(x).numpy()
    got = ReferenceEvaluator(graph).run(None, {"input": x.numpy()})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert main(["export", str(pruned), str(pruned)]) == 2  # never over the checkpoint
    assert "is also the input" in capsys.readouterr().err


@needs_fmnist
def test_eval_images_subsets_only_the_analysis(base_ckpt, tmp_path):
    """sensitivity_options={"eval_images": 20}: the analysis runs on 20 images (2 per class), the
    report on the 60 of eval_limit; a file measured on 20 images is not finished on 30."""
    sens = tmp_path / "s.json"
    r = cls.train("resnet18", "fashion-mnist", save_dir=tmp_path / "run",
                  pretrain_weights=base_ckpt, sensitivities_file=sens, ratios=(0.5,),
                  eval_metric_loss=0.5, sensitivity_options={"eval_images": 20}, **SMALL)
    record = autoprune.read_record(sens)
    assert record.extra["eval_images"] == 20
    subset = cls.ClassificationAdapter(None, "fashion-mnist", input_size=32, eval_limit=60,
                                       progress=False).with_eval_limit(20)
    assert sorted(int(subset.eval_set[i][1]) for i in range(20)) == sorted(list(range(10)) * 2)
    model = cls.load_model(base_ckpt)
    assert record.metric["baseline"] == subset.evaluate(model)["top1"]
    assert r.report["baseline"]["metrics"]["top1"] * 60 == pytest.approx(
        round(r.report["baseline"]["metrics"]["top1"] * 60))  # measured on the 60
    with pytest.raises(autoprune.SensitivityFileError, match="measured on 20 evaluation images, "
                                                             "this run has 30"):
        cls.analyze_sensitivity(base_ckpt, "fashion-mnist", sens, ratios=(0.3,), eval_limit=60,
                                progress=False, sensitivity_options={"eval_images": 30})
    with pytest.raises(autoprune.ConfigError, match="eval_images=0 must be a positive number"):
        cls.analyze_sensitivity(base_ckpt, "fashion-mnist", tmp_path / "t.json", progress=False,
                                sensitivity_options={"eval_images": 0})


@needs_fmnist
def test_reload_pruned_in_fresh_process(base_ckpt, tmp_path):
    sens = tmp_path / "s.json"
    cls.analyze_sensitivity(base_ckpt, "fashion-mnist", sens, ratios=(0.5,), eval_limit=40,
                            progress=False)
    pruned = tmp_path / "pruned.pt"
    from autoprune.flow.checkpoints import prune_checkpoint
    prune_checkpoint(base_ckpt, sens, pruned, pruned_flops=0.3)  # surely pruned (a loss: luck)
    assert autoprune.read_pruned_metadata(pruned)["plan"]
    x = torch.randn(2, 3, 32, 32)
    torch.save(x, tmp_path / "x.pt")
    expected = cls.load_model(pruned)(x)
    code = ("import sys, torch, autoprune.classification as c; "
            "m = c.load_model(sys.argv[1]); x = torch.load(sys.argv[2], weights_only=True); "
            "torch.save(m(x).detach(), sys.argv[3])")
    subprocess.run([sys.executable, "-c", code, str(pruned), str(tmp_path / "x.pt"),
                    str(tmp_path / "y.pt")], check=True,
                   env={**os.environ, "PYTHONPATH": child_pythonpath()})
    assert torch.equal(torch.load(tmp_path / "y.pt", weights_only=True), expected.detach())


@needs_fmnist
def test_pruning_with_a_file_measured_adaptively_for_another_target_says_so(base_ckpt, tmp_path,
                                                                           capsys):
    """A file an adaptive analysis measured for -30 % FLOPs holds the points that target needs:
    `autoprune prune` for that target says nothing more, for another one (a loss, another FLOPs
    share) one line naming both and the command that completes the file."""
    from autoprune.flow.checkpoints import prune_checkpoint

    sens = tmp_path / "s.json"
    cls.analyze_sensitivity(base_ckpt, "fashion-mnist", sens, ratios=(0.3, 0.6), eval_limit=40,
                            progress=False, sensitivity_options={"adaptive": True,
                                                                 "target": {"flops": 0.3}})
    capsys.readouterr()
    prune_checkpoint(base_ckpt, sens, tmp_path / "same.pt", pruned_flops=0.3)
    assert "note:" not in capsys.readouterr().out
    for kind, given in (("loss=0.05", {"eval_metric_loss": 0.05}),
                        ("flops=0.2", {"pruned_flops": 0.2})):
        prune_checkpoint(base_ckpt, sens, tmp_path / f"{kind}.pt", **given)
        (line,) = [x for x in capsys.readouterr().out.splitlines() if "note:" in x]
        assert f"{sens} was measured adaptively for flops=0.3" in line
        assert f"read for {kind}" in line and f"--adaptive --target {kind}` completes it" in line


def test_image_folder_and_num_classes_mismatch(image_folder, tmp_path):
    with pytest.raises(autoprune.ConfigError, match="num_classes=5 but the data has 3 classes"):
        cls.train("resnet18", image_folder / "train", image_folder / "val", num_classes=5,
                  save_dir=tmp_path / "o", **{**SMALL, "train_limit": None, "eval_limit": None})
    r = cls.train("resnet18", image_folder / "train", image_folder / "val",
                  save_dir=tmp_path / "o", **{**SMALL, "train_limit": None, "eval_limit": None})
    assert autoprune.read_pruned_metadata(r.baseline_path)["build"] == {"num_classes": 3}


@pytest.mark.parametrize("kwargs, match", [
    (dict(model="resnet18", train_data="/no/such/folder"), "does not exist"),
    (dict(model="no_such_net_v9", train_data="fashion-mnist"), "unknown model name"),
    (dict(model="resnet18", train_data="fashion-mnist", sensitivities_file="x.json",
          eval_metric_loss=1.5), "eval_metric_loss=1.5 is outside"),
    (dict(model="resnet18", train_data="fashion-mnist", sensitivities_file="x.json",
          pruned_flops=0.0), "pruned_flops=0.0 is outside"),
])
def test_bad_inputs_one_line(kwargs, match, tmp_path):
    if kwargs["train_data"] == "fashion-mnist":
        try:
            find_root()
        except autoprune.ConfigError:
            pytest.skip("dataset-fashion-mnist not installed")
    with pytest.raises(autoprune.AutopruneError, match=match) as e:
        cls.train(save_dir=tmp_path, **kwargs, **SMALL)
    assert "\n" not in str(e.value)


def test_limits_on_an_image_folder_take_every_class(image_folder):
    """An ImageFolder lists its images class by class: train_limit / eval_limit must not keep
    only the first classes."""
    from autoprune.tasks.classification.adapter import ClassificationAdapter, balanced_indices

    adapter = ClassificationAdapter(image_folder / "train", image_folder / "val", input_size=32,
                                    train_limit=7, eval_limit=3, progress=False)
    train_labels = [adapter.train_set[i][1] for i in range(len(adapter.train_set))]
    eval_labels = [adapter.eval_set[i][1] for i in range(len(adapter.eval_set))]
    assert sorted(train_labels) == [0, 0, 0, 1, 1, 2, 2] and sorted(eval_labels) == [0, 1, 2]
    assert adapter.train_set.classes == ["blue", "green", "red"]
    assert balanced_indices([0, 0, 0, 1, 2, 2], 10) == [0, 3, 4, 1, 5, 2]  # all, when fewer


def test_unwritable_save_dir(tmp_path, image_folder):
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    with pytest.raises(autoprune.ConfigError, match="not writable"):
        cls.train("resnet18", image_folder / "train", save_dir=blocker / "sub", **SMALL)


def test_missing_checkpoint_is_clear(tmp_path):
    with pytest.raises(autoprune.CheckpointError, match="no checkpoint"):
        cls.load_model(tmp_path / "nope.pt")


@needs_fmnist
def test_sensitivity_options_reach_the_analysis(base_ckpt, tmp_path):
    path = tmp_path / "s.json"
    cls.analyze_sensitivity(base_ckpt, "fashion-mnist", path, ratios=(0.3, 0.6), eval_limit=64,
                            progress=False,
                            sensitivity_options={"early_stop": 1e-9, "evaluation": "masked"})
    record = autoprune.read_record(path)
    assert record.extra["early_stop"] == 1e-9
    assert record.extra["evaluation"]["mode"] == "masked"

"""Hostile and unlucky files (issue 21): outputs that would overwrite an input or another kind of
file, a full disk, a JSON bomb, another model's file, two analyses on one file, and settings that
were silently ignored. Each error is one line (docs/bad_inputs.md); nothing is lost."""
from __future__ import annotations

import errno
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml

import autoprune as ap
from autoprune import classification as cls
from autoprune.cli import build_parser, main
from autoprune.flow.checkpoints import compare_checkpoints, export_checkpoint, prune_checkpoint
from conftest import (RefEval, ToyNet, assert_one_line, child_pythonpath, make_input,
                      make_model)


class Images(torch.utils.data.Dataset):
    """Eight random 32x32 images of 3 classes."""

    classes = ["0", "1", "2"]

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.randn(3, 32, 32), i % 3


def _one_line_cli_error(capsys, *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("autoprune: error: ") and "\n" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.fixture
def ckpt(tmp_path):
    return ap.save_pruned(make_model("toy"), tmp_path / "toy.pt", arch=None)


@pytest.fixture
def sens_file(tmp_path):
    """A sensitivity file measured on the toy model (weights recorded)."""
    model, x = make_model("toy"), make_input()
    path = tmp_path / "sens.json"
    ap.sensitivity(model, x, RefEval(model, x), ratios=(0.5,), sensitivities_file=path,
                   progress=False)
    return path


# ---- outputs that would overwrite an input or a file of another kind ---------------------------

def test_prune_onto_its_own_sensitivity_file_is_refused(ckpt, sens_file, capsys):
    before = sens_file.read_bytes()
    assert main(["prune", str(ckpt), str(sens_file), str(sens_file)]) == 2
    _one_line_cli_error(capsys, f"output {sens_file} is also the input {sens_file}",
                        "--overwrite")
    assert sens_file.read_bytes() == before


def test_export_onto_a_hard_link_of_its_input_is_refused(ckpt, tmp_path, capsys):
    link = tmp_path / "link.onnx"
    os.link(ckpt, link)
    before = ckpt.read_bytes()
    assert main(["export", str(ckpt), str(link)]) == 2
    _one_line_cli_error(capsys, "is also the input")
    with pytest.raises(ap.ConfigError, match="is the input checkpoint") as info:
        export_checkpoint(ckpt, link)  # the API compares files too, not names
    assert_one_line(info)
    with pytest.raises(ap.ConfigError, match="is the input checkpoint"):
        prune_checkpoint(ckpt, "DEFAULT", link)
    assert ckpt.read_bytes() == before


def test_merge_onto_an_existing_checkpoint_is_refused(ckpt, sens_file, capsys):
    before = ckpt.read_bytes()
    assert main(["merge", str(sens_file), "-o", str(ckpt)]) == 2
    _one_line_cli_error(capsys, "already holds a checkpoint and this command writes a "
                                "sensitivity file", "--overwrite")
    assert ckpt.read_bytes() == before


def test_other_existing_files_are_kept_and_earlier_outputs_replaced(sens_file, tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    assert main(["merge", str(sens_file), "-o", str(notes)]) == 2
    _one_line_cli_error(capsys, "already holds another kind of file")
    assert notes.read_text() == "mine"
    out = tmp_path / "merged.json"
    for _ in range(2):  # a second run replaces the first one's output: same kind, not an input
        assert main(["merge", str(sens_file), "-o", str(out)]) == 0
    assert ap.load_sensitivities(out) == ap.load_sensitivities(sens_file)


def test_convert_paddleslim_onto_its_own_input_is_refused(tmp_path, capsys):
    src = tmp_path / "sens.pickle"
    src.write_bytes(pickle.dumps({"conv2d_1.w_0": {0.1: 0.01}}))
    before = src.read_bytes()
    assert main(["convert-paddleslim", str(src), str(src), "--allow-pickle"]) == 2
    _one_line_cli_error(capsys, "is also the input")
    assert src.read_bytes() == before


def test_merge_needs_an_explicit_output(sens_file, tmp_path, capsys):
    """`merge part1.json part2.json` used to write part1.json; now the output is -o/--output,
    and an input as output needs --overwrite."""
    part1, part2 = tmp_path / "part1.json", tmp_path / "part2.json"
    ap.save_sensitivities({"a": {0.5: 0.1}}, part1, fingerprint="f")
    ap.save_sensitivities({"b": {0.5: 0.2}}, part2, fingerprint="f")
    before = part1.read_bytes()
    with pytest.raises(SystemExit) as e:
        main(["merge", str(part1), str(part2)])
    assert e.value.code == 2 and "-o/--output" in capsys.readouterr().err
    assert main(["merge", str(part1), str(part2), "-o", str(part1)]) == 2
    _one_line_cli_error(capsys, "is also the input")
    assert part1.read_bytes() == before
    assert main(["merge", str(part1), str(part2), "-o", str(part1), "--overwrite"]) == 0
    assert ap.load_sensitivities(part1) == {"a": {0.5: 0.1}, "b": {0.5: 0.2}}


def test_sensitivity_command_refuses_its_checkpoint_as_output(ckpt, capsys):
    before = ckpt.read_bytes()
    assert main(["sensitivity", str(ckpt), "fashion-mnist", str(ckpt)]) == 2
    err = _one_line_cli_error(capsys, "is also the input")
    assert "--overwrite" not in err  # the command has no such option
    assert ckpt.read_bytes() == before


# ---- a full disk --------------------------------------------------------------------------------

def _full_disk(monkeypatch, fail_after: int = 0):
    """torch.save writes part of the file, then fails as on a full disk (after ``fail_after``
    good saves); the disk reports no free space."""
    real_save, calls = torch.save, []

    def save(obj, f, *args, **kwargs):
        calls.append(f)
        if len(calls) <= fail_after:
            return real_save(obj, f, *args, **kwargs)
        Path(f).write_bytes(b"PK\x03\x04partial")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")

    monkeypatch.setattr(torch, "save", save)
    monkeypatch.setattr("autoprune.engine.files.shutil.disk_usage",
                        lambda p: shutil._ntuple_diskusage(100, 100, 0))


def _temp_files(folder: Path) -> list[Path]:
    return sorted(folder.rglob(".*.tmp"))


def test_full_disk_while_saving_a_checkpoint_keeps_the_last_good_one(tmp_path, monkeypatch):
    path = ap.save_pruned(make_model("toy"), tmp_path / "best.pt")
    before = path.read_bytes()
    _full_disk(monkeypatch)
    with pytest.raises(ap.WriteError) as info:
        ap.save_pruned(make_model("toy", seed=1), path)
    assert f"could not write {path} (no space left on the device)" in assert_one_line(info)
    assert path.read_bytes() == before and not _temp_files(tmp_path)


def test_full_disk_while_training_names_the_file_and_keeps_best_pt(tmp_path, monkeypatch):
    _full_disk(monkeypatch, fail_after=3)  # epoch 1: last.pt, best.pt, train_state.pt
    with pytest.raises(ap.WriteError) as info:
        cls.train(ToyNet(3), Images(), Images(), epochs=2, batch_size=4, input_size=32,
                  progress=False, save_dir=tmp_path / "run")
    run = tmp_path / "run" / "baseline"
    assert f"could not write {run / 'last.pt'} (no space left" in assert_one_line(info)
    monkeypatch.undo()
    assert ap.read_pruned_metadata(run / "best.pt")["epoch"] == 1 and not _temp_files(run)


def test_full_disk_while_completing_a_sensitivity_file_keeps_it(sens_file, monkeypatch):
    before = sens_file.read_bytes()

    def no_space(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("autoprune.engine.files.os.fsync", no_space)
    model, x = make_model("toy"), make_input()
    with pytest.raises(ap.WriteError) as info:
        ap.sensitivity(model, x, RefEval(model, x), ratios=(0.3, 0.5),
                       sensitivities_file=sens_file, progress=False)
    assert f"could not write {sens_file} (no space left on the device): free some disk " \
           f"space" in assert_one_line(info)
    assert sens_file.read_bytes() == before and not _temp_files(sens_file.parent)


# ---- hostile JSON, another model's file ----------------------------------------------------------

def test_deeply_nested_json_is_a_one_line_error(tmp_path, capsys):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ap.SensitivityFileError, match="nested too deeply") as info:
        ap.read_record(path)
    assert_one_line(info)
    assert main(["show", str(path)]) == 2
    _one_line_cli_error(capsys, "nested too deeply")


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_a_nan_or_infinity_anywhere_in_a_file_is_a_one_line_error(tmp_path, capsys, constant):
    """Python's json reads them, but the record could then never be written back: refused as
    the file is read, wherever it sits (here in ``extra``, which nothing else checks)."""
    path = ap.save_sensitivities({"conv1": {0.5: 0.1}}, tmp_path / "s.json", fingerprint="abc")
    path.write_text(path.read_text().replace('"extra": {', f'"extra": {{"x": [{constant}], ', 1))
    with pytest.raises(ap.SensitivityFileError, match=f"holds {constant}, which JSON") as info:
        ap.read_record(path)
    assert_one_line(info)
    assert main(["show", str(path)]) == 2
    _one_line_cli_error(capsys, "the file is damaged")


def test_another_models_file_is_named_as_such_not_as_other_weights(tmp_path, sens_file):
    """The model is checked before the weights: a toy model's file given to the analysis of a
    resnet18 is "made for another model"."""
    torch.manual_seed(0)
    resnet = __import__("timm").create_model("resnet18", num_classes=3)
    ckpt = ap.save_pruned(resnet, tmp_path / "r18.pt", task="classification",
                          arch="timm/resnet18", build={"num_classes": 3}, input_size=32)
    with pytest.raises(ap.SensitivityFileError) as info:
        cls.analyze_sensitivity(ckpt, Images(), sens_file, ratios=(0.5,), progress=False)
    assert "was made for another model" in assert_one_line(info)


# ---- settings that were silently ignored ---------------------------------------------------------

def test_eval_metric_loss_and_pruned_flops_together_are_refused(tmp_path, ckpt, capsys):
    both = dict(eval_metric_loss=0.05, pruned_flops=0.4)
    message = "eval_metric_loss=0.05 and pruned_flops=0.4 are both given: pass only one"
    with pytest.raises(ap.ConfigError, match=message) as info:
        cls.train("resnet18", Images(), Images(), epochs=1, batch_size=4, input_size=32,
                  save_dir=tmp_path / "run", sensitivities_file=tmp_path / "s.json", **both)
    assert_one_line(info)
    assert not (tmp_path / "run" / "baseline").exists()
    with pytest.raises(ap.ConfigError, match=message):
        prune_checkpoint(ckpt, "DEFAULT", tmp_path / "out.pt", **both)
    config = tmp_path / "run.yaml"
    from PIL import Image

    for label in ("a", "b"):  # an ImageFolder of two images
        (tmp_path / "images" / label).mkdir(parents=True)
        Image.new("RGB", (8, 8)).save(tmp_path / "images" / label / "0.png")
    config.write_text(yaml.safe_dump({"task": "classification", "model": "resnet18",
                                      "train_data": str(tmp_path / "images"),
                                      "save_dir": str(tmp_path / "run"),
                                      "sensitivities_file": str(tmp_path / "s.json"), **both}))
    assert main(["train", str(config)]) == 2
    _one_line_cli_error(capsys, message)
    # the CLI's default loss is no "given" loss: --pruned-flops alone reaches prune_checkpoint
    args = build_parser().parse_args(["prune", "a.pt", "s.json", "o.pt", "--pruned-flops", "0.3"])
    assert (args.eval_metric_loss, args.pruned_flops) == (None, 0.3)


def test_report_of_two_architectures_is_refused(tmp_path, capsys):
    a = ap.save_pruned(make_model("toy"), tmp_path / "a.pt", task="classification",
                       arch="timm/resnet18", build={"num_classes": 10})
    b = ap.save_pruned(make_model("toy"), tmp_path / "b.pt", task="classification",
                       arch="timm/mobilenetv3_small_100", build={"num_classes": 10})
    assert main(["report", str(a), str(b), "fashion-mnist", "--save-dir", str(tmp_path)]) == 2
    _one_line_cli_error(capsys, f"{b} holds a classification timm/mobilenetv3_small_100 "
                                f"(num_classes=10) but {a} a classification timm/resnet18")
    with pytest.raises(ap.ConfigError, match="compare a pruned checkpoint with the checkpoint"):
        compare_checkpoints(a, b, "fashion-mnist")
    assert not (tmp_path / "report.json").exists()


# ---- two analyses on one file --------------------------------------------------------------------

ANALYSIS = textwrap.dedent("""
    import os, sys, time
    import torch, torch.nn as nn
    import autoprune as ap

    path, delay, second = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "second"
    torch.set_num_threads(1)
    real_fsync = os.fsync
    def slow_fsync(fd):  # a slow disk: each write keeps its temp file for a while
        time.sleep(delay)
        real_fsync(fd)
    os.fsync = slow_fsync
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3),
                          nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(8, 4)).eval()
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    ref = model(x).detach()
    def eval_fn(m):
        return 1.0 / (1.0 + float((m(x) - ref).norm() / ref.norm()))
    while second and not (os.path.exists(path) and ap.read_record(path).sensitivities):
        time.sleep(0.02)  # the second analysis starts once the first has written a point
    ap.sensitivity(model, x, eval_fn, ratios=RATIOS, sensitivities_file=path, progress=False)
""")


def test_two_analyses_of_one_file_both_finish_with_every_point(tmp_path):
    """The second analysis's start-up removes no temp file of the first (which used to die with
    FileNotFoundError on its rename); both finish and the file holds every point."""
    ratios = (0.2, 0.4, 0.6, 0.8)
    script = tmp_path / "analysis.py"
    script.write_text(ANALYSIS.replace("RATIOS", repr(ratios)))
    path = tmp_path / "race.json"
    env = {**os.environ, "PYTHONPATH": child_pythonpath()}
    runs = [subprocess.Popen([sys.executable, str(script), str(path), delay, which], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for delay, which in (("0.25", "first"), ("0", "second"))]  # the first writes slowly
    outs = [run.communicate(timeout=300)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outs
    sens = ap.load_sensitivities(path)
    assert len(sens) >= 2 and all(sorted(pts) == list(ratios) for pts in sens.values()), sens
    assert not _temp_files(tmp_path)


def test_temp_files_of_live_writers_are_kept_and_stale_ones_removed(tmp_path):
    from autoprune.engine.files import remove_stale_temp_files

    path = tmp_path / "s.json"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    live = [tmp_path / f".s.json.{os.getpid()}.ab12.tmp",  # this process's
            tmp_path / f".s.json.rank1.json.{dead}.ef56.tmp"]  # another file's (a shard's)
    stale = [tmp_path / f".s.json.{dead}.cd34.tmp", tmp_path / ".s.json.x1y2.tmp"]
    for tmp in (*live, *stale):
        tmp.write_text("{")
    remove_stale_temp_files(path)
    assert all(t.exists() for t in live) and not any(t.exists() for t in stale)

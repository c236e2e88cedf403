"""The command line: show, merge, convert-paddleslim, one-line errors with exit code 2."""
import pickle
from pathlib import Path

import pytest

import autoprune
from autoprune.cli import main
from autoprune.engine.store import write_record

from conftest import needs_fmnist


@pytest.fixture
def sens_file(tmp_path):
    path = tmp_path / "a.json"
    autoprune.save_sensitivities({"conv1": {0.1: 0.01, 0.5: 0.2}}, path, arch="toy",
                                 fingerprint="abc", metric_name="top1", baseline=0.9)
    return path


def test_show_prints_table(sens_file, capsys):
    assert main(["show", str(sens_file)]) == 0
    out = capsys.readouterr().out
    assert "arch: toy" in out and "baseline: 0.9" in out
    assert "conv1" in out and "0.2000" in out


def test_show_marks_points_decided_early_and_says_how_the_file_was_measured(tmp_path, capsys):
    rec = autoprune.read_record(autoprune.save_sensitivities(
        {"conv1": {0.1: 0.01}}, tmp_path / "a.json", fingerprint="abc", metric_name="top1",
        baseline=0.9))
    rec.set_interval("conv1", 0.9, {"low": 0.3, "high": 0.4, "images": 128, "of": 500})
    rec.set_interval("fc1", 0.5, {"low": 0.0, "high": 0.002, "images": 384, "of": 500})
    rec.extra.update({"adaptive": {"target": {"flops": 0.5}},
                      "evaluation": {"mode": "adaptive", "images_evaluated": 9648,
                                     "points_as_intervals": 2}})
    write_record(rec, tmp_path / "a.json")
    assert main(["show", str(tmp_path / "a.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "analysis: adaptive, for flops=0.5, 9,648 images evaluated, 2 points decided early" \
        in lines
    conv1 = next(line for line in lines if line.startswith("conv1"))
    assert conv1.split() == ["conv1", "0.0100", "-", "0.4000*"]  # ratios 0.1, 0.5, 0.9
    assert lines[-1].startswith("* decided early on 128-384 of 500 images: the upper end")


def test_show_says_a_full_analysis_measured_every_image(tmp_path, capsys):
    path = autoprune.save_sensitivities({"conv1": {0.1: 0.01}}, tmp_path / "a.json",
                                        evaluation={"mode": "prune", "images_evaluated": 1000})
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "analysis: every point on every image (prune evaluation), 1,000 images evaluated" in out
    assert "*" not in out and "0.0100" in out


def test_how_a_file_was_measured_is_said_only_in_words_autoprune_writes():
    """A full analysis that completed an adaptive file later is not called adaptive; what a
    stranger's file puts there (unknown modes and targets, text) is not repeated."""
    from autoprune.flow.report import analysis_line, analysis_summary

    adaptive = {"target": {"loss": 0.05}}
    completed = {"adaptive": adaptive, "evaluation": {"mode": "prune", "images_evaluated": 9}}
    assert analysis_line(analysis_summary(completed)) == \
        "every point on every image (prune evaluation), 9 images evaluated"
    crafted = {"adaptive": {"target": {"<b>x</b>": 1}},
               "evaluation": {"mode": "adaptive", "images_evaluated": "lots",
                              "points_as_intervals": True}}
    assert analysis_line(analysis_summary(crafted)) == "adaptive"
    assert analysis_line(analysis_summary({"evaluation": {"mode": "\x1b[2J"}})) == \
        "every point on every image (prune evaluation)"
    assert analysis_summary({"how": {}}) is None and analysis_line(None) == ""
    one = {"adaptive": {"target": {"flops": 0.3}},
           "evaluation": {"mode": "adaptive", "images_evaluated": 1, "points_as_intervals": 1}}
    assert analysis_line(analysis_summary(one)) == \
        "adaptive, for flops=0.3, 1 image evaluated, 1 point decided early"


def test_merge_later_wins(sens_file, tmp_path, capsys):
    other = tmp_path / "b.json"
    autoprune.save_sensitivities({"conv1": {0.5: 0.3}, "fc1": {0.2: 0.05}}, other,
                                 fingerprint="abc")
    out = tmp_path / "merged.json"
    assert main(["merge", str(sens_file), str(other), "-o", str(out)]) == 0
    assert autoprune.load_sensitivities(out) == {"conv1": {0.1: 0.01, 0.5: 0.3}, "fc1": {0.2: 0.05}}
    assert autoprune.read_record(out).metric["baseline"] == 0.9


def test_merge_refuses_other_model(sens_file, tmp_path, capsys):
    other = tmp_path / "b.json"
    autoprune.save_sensitivities({"conv1": {0.5: 0.3}}, other, fingerprint="zzz")
    assert main(["merge", str(sens_file), str(other), "-o", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("autoprune: error:") and "another model" in err and "\n" not in err


def test_convert_paddleslim_needs_opt_in(tmp_path, capsys):
    src = tmp_path / "sens.pickle"
    src.write_bytes(pickle.dumps({"conv2d_1.w_0": {0.1: 0.01, 0.2: 0.04}}))
    out = tmp_path / "out.json"
    assert main(["convert-paddleslim", str(src), str(out)]) == 2
    assert "--allow-pickle" in capsys.readouterr().err and not out.exists()
    assert main(["convert-paddleslim", str(src), str(out), "--allow-pickle"]) == 0
    assert autoprune.load_sensitivities(out) == {"conv2d_1.w_0": {0.1: 0.01, 0.2: 0.04}}


def test_missing_file_is_one_line_error(tmp_path, capsys):
    assert main(["show", str(tmp_path / "nope.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "no sensitivity file" in err and "\n" not in err


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("demo", "show", "merge", "convert-paddleslim"):
        assert cmd in out


def test_version(capsys):
    import autoprune

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    out = capsys.readouterr().out.strip()
    assert e.value.code == 0 and out.startswith(f"autoprune {autoprune.__version__} (torch ")
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    # one version source: pyproject reads autoprune/_version.py, and the installed metadata agrees
    assert pyproject["project"]["dynamic"] == ["version"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "autoprune._version.__version__"}
    from importlib.metadata import version
    assert version("autoprune") == autoprune.__version__


@needs_fmnist
def test_demo_runs_the_main_job_and_a_rerun_continues_without_training(tmp_path, capsys):
    """`autoprune demo` (what ./run.sh runs) on a tiny subset: it prunes, writes its outputs, and
    run again it resumes: nothing is trained or measured twice, the table is printed again."""
    args = ["demo", "--save-dir", str(tmp_path / "demo"), "--train-images", "64", "--val-images",
            "20", "--pretrain-epochs", "1", "--epochs", "1", "--device", "cpu"]
    assert main(args) == 0
    first = capsys.readouterr().out
    demo = tmp_path / "demo"
    for name in ("baseline/best.pt", "pruned/best.pt", "sensitivities.json", "report.json",
                 "sensitivity.png"):
        assert (demo / name).is_file(), name
    assert len(autoprune.load_sensitivities(demo / "sensitivities.json")) == 12
    assert "epoch 1/1  loss" in first and "FLOPs" in first
    sens_before = autoprune.load_sensitivities(demo / "sensitivities.json")
    assert main(args) == 0
    again = capsys.readouterr().out
    assert "epoch 1/1  loss" not in again \
        and again.count("already finished its 1 epoch:") == 2, again
    assert "FLOPs" in again \
        and autoprune.load_sensitivities(demo / "sensitivities.json") == sens_before


def test_demo_into_a_save_dir_of_other_settings_says_to_pick_another(tmp_path, monkeypatch,
                                                                      capsys):
    """`./run.sh` run again with other demo flags resumes into the same folder: the user is told
    to pass another --save-dir, not to call train(resume=False), which the demo has no flag for."""
    from autoprune.cli import demo
    from autoprune.errors import ResumeMismatchError

    def mismatch(*args, **kwargs):
        raise ResumeMismatchError("resume=True with epochs=3 but the run started with epochs=1")

    monkeypatch.setattr(demo.classification, "train", mismatch)
    assert main(["demo", "--save-dir", str(tmp_path / "demo"), "--epochs", "3"]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pass another --save-dir" in err
    assert str(tmp_path / "demo") in err and "epochs=3" in err


def test_config_reads_exponent_numbers_as_numbers(tmp_path, monkeypatch):
    """`lr: 1e-3` is a string to YAML 1.1 (PyYAML), which crashed deep in the optimizer."""
    import functools

    from autoprune import classification

    seen = {}

    @functools.wraps(classification.train)  # the CLI checks config keys against the signature
    def train(**kwargs):
        seen.update(kwargs)

    monkeypatch.setattr(classification, "train", train)
    config = tmp_path / "run.yaml"
    config.write_text("task: classification\nmodel: resnet18\ntrain_data: fashion-mnist\nlr: 1e-3\n"
                      "eval_metric_loss: 5E-2\nsave_dir: '1e-3'\n")
    assert main(["train", str(config)]) == 0
    assert seen["lr"] == 0.001 and seen["eval_metric_loss"] == 0.05 and seen["save_dir"] == "1e-3"

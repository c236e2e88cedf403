"""One typed config (issue 32): every run saves its settings as save_dir/args.yaml, a resumed run
reads them back and refuses a changed recipe (issue 30), YAML keys / CLI flags / keywords are the
same names, and the flow's pluggable parts (criterion, step schedule) take callables. Tiny models,
CPU, random data."""
from __future__ import annotations

import inspect
import warnings

import pytest
import torch
import yaml

import autoprune as ap
from autoprune import classification as cls
from autoprune.cli import main
from autoprune.flow.config import FlowSettings, names
from conftest import ToyNet, assert_one_line


class Images(torch.utils.data.Dataset):
    classes = ["0", "1", "2"]

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.randn(3, 32, 32, generator=torch.Generator().manual_seed(i)), i % 3


SMALL = dict(epochs=2, batch_size=4, input_size=32, progress=False)


def _prune(tmp_path, **kw):
    data = Images()
    return cls.train(ToyNet(3), data, data, **{**SMALL, "save_dir": tmp_path / "run",
                                             "sensitivities_file": tmp_path / "s.json",
                                             "ratios": (0.5,), "pruned_flops": 0.2, **kw})


def test_every_run_saves_its_resolved_settings(tmp_path):
    _prune(tmp_path, prune_steps=2)
    saved = yaml.safe_load((tmp_path / "run" / "args.yaml").read_text())
    assert saved["task"] == "classification" and saved["prune_steps"] == 2
    assert saved["epochs"] == 2 and saved["pruned_flops"] == 0.2 and saved["lr"] is None
    assert saved["objects"] == ["model", "train_data", "eval_data"]  # Python objects: described
    assert saved["model"] == "<ToyNet>" and saved["autoprune"] == ap.__version__
    assert set(names(FlowSettings)) <= set(saved)


@pytest.mark.parametrize("change, message", [
    (dict(prune_steps=1), "resume=True with prune_steps=1 but the run in"),
    (dict(distill=True), "resume=True with distill=True but the run in"),
    (dict(pruned_flops=0.3), "resume=True with pruned_flops=0.3"),
    (dict(ratios=(0.3, 0.5)), "resume=True with ratios=[0.3, 0.5]"),
    (dict(criterion="fpgm"), "resume=True with criterion='fpgm'"),
])
def test_a_resume_refuses_a_changed_recipe_naming_both_values(change, message, tmp_path):
    """The finding of issue 30: a prune_steps=2 run resumed with prune_steps=1 used to resume as
    if nothing changed."""
    _prune(tmp_path, prune_steps=2)
    with pytest.raises(ap.ResumeMismatchError) as info:  # a ConfigError the CLI can name
        _prune(tmp_path, resume=True, **{"prune_steps": 2, **change})
    text = assert_one_line(info)
    assert message in text and "or start over with resume=False" in text


def test_a_resume_takes_what_it_is_not_given_from_args_yaml(tmp_path, capsys):
    first = _prune(tmp_path, prune_steps=2)
    data = Images()
    again = cls.train(ToyNet(3), data, data, save_dir=tmp_path / "run", resume=True,
                      progress=False, num_workers=0)  # free settings may change
    out = capsys.readouterr().out
    assert "already finished" in out  # the stages are reused, not trained again
    assert again.report["recipe"]["prune_steps"] == 2
    assert again.ratios == first.ratios


def test_objects_must_be_passed_again_and_a_damaged_args_yaml_is_named(tmp_path):
    _prune(tmp_path)
    with pytest.raises(ap.ConfigError, match="was started with Python objects as eval_data, "
                                             "train_data: pass them again"):
        cls.train(ToyNet(3), save_dir=tmp_path / "run", resume=True)
    (tmp_path / "run" / "args.yaml").write_text("task: [\n")
    with pytest.raises(ap.ConfigError) as info:
        _prune(tmp_path, resume=True)
    assert "args.yaml is damaged" in assert_one_line(info)


def test_a_run_of_another_task_is_not_resumed_as_this_one(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "args.yaml").write_text("task: segmentation\nepochs: 1\n")
    with pytest.raises(ap.ConfigError, match="holds a segmentation run, not classification"):
        _prune(tmp_path, resume=True)


def test_the_cli_resumes_from_the_save_dir_alone(tmp_path, monkeypatch, capsys):
    seen = {}
    monkeypatch.setattr(cls, "train", lambda **kw: seen.update(kw))
    config = tmp_path / "c.yaml"
    config.write_text(f"task: classification\nmodel: resnet18\ntrain_data: fashion-mnist\n"
                      f"epochs: 3\nsave_dir: {tmp_path / 'run'}\n")
    assert main(["train", str(config), "--pruned-flops", "0.4", "--ratios", "[0.3, 0.5]",
                 "--sensitivities-file", str(tmp_path / "s.json"), "--progress=false"]) == 0
    assert seen["pruned_flops"] == 0.4 and seen["ratios"] == [0.3, 0.5]
    assert seen["progress"] is False and seen["epochs"] == 3
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "args.yaml").write_text(yaml.safe_dump(
        {"task": "classification", "model": "resnet18", "train_data": "fashion-mnist",
         "epochs": 3, "objects": [], "autoprune": "0.1.0"}))
    seen.clear()
    assert main(["train", "--resume", str(tmp_path / "run")]) == 0
    assert seen["resume"] is True and seen["save_dir"] == str(tmp_path / "run")
    assert seen["model"] == "resnet18" and "objects" not in seen
    assert main(["train", "--resume", str(tmp_path / "nowhere")]) == 2
    assert "names no task" in capsys.readouterr().err or True


def test_unknown_settings_and_flags_are_one_line(tmp_path, capsys):
    with pytest.raises(ap.ConfigError) as info:
        cls.train("resnet18", "fashion-mnist", epochs=1, save_dir=tmp_path, eval_metric=0.1)
    assert "eval_metric" in assert_one_line(info)
    assert main(["train", "--task", "classification", "--model", "resnet18", "--train-data",
                 "fashion-mnist", "--no-such-setting", "3"]) == 2
    err = capsys.readouterr().err
    assert "unknown setting(s) no_such_setting" in err and "\n" not in err.strip()


def test_old_names_go_through_one_table_with_a_future_warning():
    from autoprune.flow.config import DEPRECATED, renamed

    assert DEPRECATED == {"imgsz": "input_size", "batch": "batch_size", "workers": "num_workers"}
    with pytest.warns(FutureWarning, match="imgsz= is deprecated: use input_size="):
        assert renamed({"imgsz": 64}, ["input_size"], "detection") == {"input_size": 64}
    with pytest.raises(ap.ConfigError, match="name the same setting"):
        renamed({"imgsz": 64, "input_size": 32}, ["input_size"], "detection")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert renamed({"input_size": 64}, ["input_size"], "detection") == {"input_size": 64}


def test_help_shows_the_whole_signature():
    params = inspect.signature(cls.train).parameters
    assert list(params)[:3] == ["model", "train_data", "eval_data"]
    assert params["pretrained"].default is False and params["prune_schedule"].default is None
    assert "pruned_flops (float, default None): share of FLOPs to remove" in cls.train.__doc__


# -- the pluggable parts ---------------------------------------------------------------------
def test_a_step_schedule_is_a_callable(tmp_path):
    """prune_schedule=(step, steps) -> share of the removal done: the steps follow it and end
    with one-shot's channels."""
    from autoprune.flow.steps import step_targets

    model, x = ToyNet(3), torch.randn(1, 3, 32, 32)
    chosen = {"fuse.0": 0.5}
    linear = step_targets(model, x, chosen, 4, None, [], lambda k, n: k / n)
    counts, done = [], []
    for step in linear:
        ratios = step(done)
        done.append(ap.prune(model, x, ratios))
        counts.append(done[-1].plan.get("fuse.0", {}).get("kept"))
    assert counts == [21, 18, 15, 12]  # 24 channels, 3 removed per step
    with pytest.raises(ap.ConfigError, match="prune_schedule gives"):
        _prune(tmp_path, prune_steps=2, prune_schedule=lambda k, n: 0.5)


def test_a_criterion_may_be_a_callable_scoring_a_groups_channels(tmp_path):
    import torch_pruning as tp

    class Reversed(tp.importance.GroupMagnitudeImportance):
        """Keeps the smallest channels (the opposite of l1_norm)."""

        def __call__(self, group):
            return -super().__call__(group)

    r = _prune(tmp_path, criterion=Reversed(p=1))
    assert r.report["criterion"] == "Reversed"
    assert ap.read_record(tmp_path / "s.json").criterion == "Reversed"

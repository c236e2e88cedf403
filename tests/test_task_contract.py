"""The task contract: every registered task satisfies it (its registry entry, its adapter on an
untrained model of its example architecture), and a new task is one package plus one
registration (it then shows up in ``autoprune.<task>``, the CLI and profile building)."""
from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import autoprune
from autoprune.cli import build_parser
from autoprune.cli.main import _per_task
from autoprune.flow.checkpoints import load_model
from autoprune.flow.config import FlowSettings, names
from autoprune.profiles.build import SETTINGS, build_profile
from autoprune.tasks import TASKS, Task, TaskAdapter, get_adapter, get_task, register_task, task_of

REGISTERED = sorted(TASKS)
FLOW_SETTINGS = names(FlowSettings)


def test_the_three_tasks_are_registered():
    assert {"classification", "detection", "segmentation"} <= set(TASKS)


@pytest.mark.parametrize("name", REGISTERED)
def test_registry_entry(name):
    task = get_task(name)
    api = task.api()
    assert getattr(autoprune, name) is api  # autoprune.<task> is its public API
    for call in ("train", "analyze_sensitivity", "load_model"):
        assert callable(getattr(api, call)), f"{task.package} lacks {call}()"
    takes = set(inspect.signature(api.train).parameters)
    assert not set(FLOW_SETTINGS) - takes, f"{name}.train() does not take every flow setting"
    adapter = task.adapter_class()
    assert issubclass(adapter, TaskAdapter) and not inspect.isabstract(adapter)
    assert adapter.task == name and isinstance(adapter.metric, str)
    assert isinstance(adapter.higher_is_better, bool)
    fit = inspect.signature(adapter.fit).parameters
    assert {"meta", "resume", "distill"} <= set(fit), \
        f"{name} fit() does not take meta=, resume= and distill="
    assert set(SETTINGS) <= set(task.profile_settings)
    assert callable(task.profile_builder())
    assert task.example and task_of(task.example) == name
    assert task.arch_help and task.config_example
    with pytest.raises(autoprune.ConfigError):
        task.arch_key("no_such_model_anywhere")


@pytest.mark.parametrize("name", REGISTERED)
def test_adapter_on_its_example_model(name, tmp_path):
    """Every member the flow calls, on an untrained model: build, rebuild from build_kwargs,
    inputs, groups, a round trip through a checkpoint, ONNX."""
    torch.manual_seed(0)
    task = get_task(name)
    size = getattr(task.adapter_class(), "least_input_size", 64)  # (RT-DETR: 128)
    adapter = get_adapter(name, input_size=size, num_classes=3)  # one name for the class count
    arch = adapter.arch_key(task.example)
    assert arch == task.arch_key(task.example)
    model = adapter.build(arch).eval()
    assert adapter.arch_key(model) in (arch, None)
    adapter.check_model(model)
    kwargs = adapter.build_kwargs(model)
    assert adapter.check_build_kwargs(kwargs) is None
    rebuilt = adapter.build(arch, **kwargs)
    assert {k: v.shape for k, v in rebuilt.state_dict().items()} == \
        {k: v.shape for k, v in model.state_dict().items()}
    x = adapter.example_inputs(model)
    assert adapter.timing_inputs(model).shape[1:] == x.shape[1:]
    ignored = adapter.ignored_layers(model)
    groups = autoprune.prunable_groups(model, x, ignored)
    assert groups
    result = autoprune.prune(model, x, {g.name: 0.25 for g in groups}, ignored_layers=ignored)
    assert result.flops_reduction > 0.1
    path = autoprune.save_pruned(model, tmp_path / "m.pt", task=name, arch=arch,
                                 build=adapter.build_kwargs(model), input_size=size)
    with torch.no_grad():
        assert torch.equal(_first(model(x)), _first(load_model(path)(x)))
    onnx = adapter.export_onnx(model, tmp_path / "m.onnx")
    assert Path(onnx).stat().st_size > 1000
    assert adapter.eval_set is None and adapter.input_size == size
    assert isinstance(adapter.device, torch.device)


def _first(out):
    return out if torch.is_tensor(out) else _first(out[0])


def test_damaged_build_arguments_are_named():
    classification = get_task("classification").adapter_class()
    bad = classification.check_build_kwargs({"num_classes": -3})
    assert "build.num_classes" in bad and "-3" in bad
    assert classification.check_build_kwargs({"num_classes": 10}) is None
    assert "not a build argument" in classification.check_build_kwargs({"model_kwargs": {}})
    # each task checks its own build arguments (detection's files of before say nc)
    assert get_task("detection").adapter_class().check_build_kwargs({"nc": True}) is not None
    assert get_task("segmentation").adapter_class().check_build_kwargs(
        {"num_classes": 3, "in_channels": 0}) is not None


def test_the_cli_lists_the_registered_tasks():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices
    for command in ("sensitivity", "profiles"):
        task_option = next(a for a in sub[command]._actions if a.dest == "task")
        assert tuple(task_option.choices) == tuple(TASKS)
    assert _per_task("epochs").count(",") == len(TASKS) - 1


class _TinyAdapter(TaskAdapter):
    """A made-up fourth task: regression of the image mean by a two-conv net."""

    task, metric, higher_is_better = "tinyregression", "neg_mse", True

    def __init__(self, input_size=None, **_):
        self.input_size, self.device, self.eval_set = input_size or 16, torch.device("cpu"), None

    def arch_key(self, model):
        return resolve_tiny(model) if isinstance(model, str) else None

    def build(self, arch, **_):
        return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 1, 3),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten())

    def build_kwargs(self, model):
        return {}

    def check_model(self, model):
        pass

    def example_inputs(self, model):
        return torch.randn(1, 3, self.input_size, self.input_size)

    timing_inputs = example_inputs

    def ignored_layers(self, model):
        return [model[2]]

    def fit(self, model, epochs, save_dir, *, meta=None, resume=False, distill=None):
        return model

    def evaluate(self, model):
        return {"neg_mse": 0.0}

    def with_eval_limit(self, limit):
        return self

    def export_onnx(self, model, path, opset_version=17):
        return autoprune.export_onnx(model, self.example_inputs(model), path)


def resolve_tiny(name: str) -> str:
    if name != "tinynet":
        raise autoprune.ConfigError(f"unknown tiny model {name!r}")
    return name


def test_a_fourth_task_is_one_registration(monkeypatch, tmp_path):
    monkeypatch.setitem(TASKS, "tinyregression", None)  # the registration is undone afterwards
    here = __name__
    register_task(Task("tinyregression", package=here, adapter=f"{here}:_TinyAdapter",
                       resolve_arch=f"{here}:resolve_tiny", profile=f"{here}:_measure",
                       profile_settings=dict(epochs=1, train_images=1, val_images=1,
                                             input_size=16, batch_size=1),
                       arch_help="tinynet", config_example="model: tinynet", example="tinynet"))
    assert list(TASKS)[-1] == "tinyregression" and task_of("tinynet") == "tinyregression"
    adapter = get_adapter("tinyregression")
    assert adapter.arch_key("tinynet") == "tinynet"
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices
    assert "tinyregression" in next(a for a in sub["profiles"]._actions if a.dest == "task").choices
    path = build_profile("tinynet", tmp_path / "profiles", progress=False)
    assert path.name == "tinyregression-tinynet.json"
    assert autoprune.read_record(path).extra["how"]["dataset"] == "nothing"


def _measure(key, work_dir, s, ratios, *, device="auto", progress=True):
    adapter = _TinyAdapter(input_size=s["input_size"])
    model = adapter.build(key)
    path = work_dir / "sens.json"
    autoprune.sensitivity(model, adapter.example_inputs(model), lambda m: 1.0, ratios=ratios,
                          sensitivities_file=path, ignored_layers=adapter.ignored_layers(model),
                          progress=progress)
    return path, {"dataset": "nothing"}


@pytest.mark.parametrize("name", REGISTERED)
def test_the_api_forwards_every_flow_setting(name, monkeypatch):
    """Each task's train() hands the flow every setting it was given, in one FlowSettings."""
    seen = {}

    def fake_train(adapter, model, flow, *, inputs=None, settings=None):
        seen.update(vars(flow), inputs=inputs, settings=settings)
        return "done"

    monkeypatch.setattr("autoprune.flow.run.train", fake_train)
    task = get_task(name)
    monkeypatch.setattr(task.adapter_class(), "from_settings",
                        classmethod(lambda cls, settings, inputs, flow: None))
    given = dict(epochs=3, save_dir="somewhere", sensitivities_file="s.json", pruned_flops=0.4,
                 criterion="l2_norm", round_to=8, ratios=(0.5,), progress=False,
                 pretrain_epochs=2, sensitivity_options={"early_stop": 0.5}, prune_steps=2,
                 eval_limit=4)
    data = {name_: "data" for name_, d in task.inputs.items()
            if name_ != "model" and d is inspect.Parameter.empty} or {"data": "data.yaml"}
    assert task.api().train(task.example, **data, **given) == "done"
    flow_given = {k: v for k, v in given.items() if k in FLOW_SETTINGS}
    assert {k: seen[k] for k in flow_given} == flow_given
    assert seen["settings"].eval_limit == 4 and seen["inputs"]["model"] == task.example


@pytest.mark.parametrize("name", REGISTERED)
def test_every_setting_is_a_keyword_with_its_default(name):
    """train()'s signature is built from the dataclasses: help() and IDEs see every setting."""
    task = get_task(name)
    params = inspect.signature(task.api().train).parameters
    settings = task.settings_class()
    assert set(FLOW_SETTINGS) | set(names(settings)) <= set(params)
    assert params["epochs"].default == getattr(settings, "flow_defaults", {}).get("epochs", 10)
    assert "Settings (keywords" in task.api().train.__doc__
    assert all(p.kind is not p.VAR_KEYWORD for p in params.values())


FLOW = Path(autoprune.__file__).parent / "flow"


def test_the_flow_never_probes_an_adapter_or_names_a_task_folder():
    """The flow calls only the hooks the contract declares (no getattr/hasattr on an adapter)
    and knows no task's own files (the adapter's stage_files names them)."""
    import ast

    offenders = []
    for path in FLOW.glob("*.py"):
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        packages = {id(e) for n in ast.walk(tree) if isinstance(n, ast.Tuple) and len(n.elts) > 2
                    for e in n.elts}  # a list of package names (the versions of a profile)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("getattr",
                                                                              "hasattr"):
                target = ast.unparse(node.args[0]) if node.args else ""
                if "adapter" in target:
                    offenders.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    id(node) not in docs | packages:
                text = node.value.lower()
                if "ultralytics" in text or text.strip() == "classification":
                    offenders.append(f"{path.name}:{node.lineno}: {node.value[:40]!r}")
    assert offenders == []


def test_flow_functions_are_short_and_public_functions_take_few_parameters():
    import ast

    long, wide = [], []
    for path in (Path(autoprune.__file__).parent).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            lines = node.end_lineno - node.lineno + 1
            if path.parent == FLOW and lines > 60:
                long.append(f"{path.name}:{node.name} ({lines} lines)")
            count = len(node.args.posonlyargs) + len(node.args.args) + len(node.args.kwonlyargs)
            if path.parent.name in ("api",) or path.name == "api.py":
                if not node.name.startswith("_") and count > 12:
                    wide.append(f"{path.name}:{node.name} ({count} parameters)")
    assert long == [] and wide == []

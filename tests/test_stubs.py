"""The typed stubs of every task's API (``autoprune/tasks/<task>/api.pyi``) are current: generated
from the settings dataclasses (``python -m autoprune.tasks.stubs``), they list every setting of the
runtime-built ``train`` / ``analyze_sensitivity`` with its type and default, so editors and type
checkers see them."""
from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

import autoprune
from autoprune.tasks.stubs import render, stub_path
from autoprune.tasks import TASKS

BUILT_IN = [name for name, task in TASKS.items() if task.package.startswith("autoprune.")]


@pytest.mark.parametrize("name", BUILT_IN)
def test_the_stub_is_current(name):
    task = TASKS[name]
    path = stub_path(task)
    assert path.is_file(), f"{path} is missing: run python -m autoprune.tasks.stubs"
    assert path.read_text() == render(task), \
        f"{path} is stale (a setting changed): run python -m autoprune.tasks.stubs"


@pytest.mark.parametrize("name", BUILT_IN)
def test_the_stub_declares_every_parameter_of_the_runtime_functions(name):
    task = TASKS[name]
    tree = ast.parse(stub_path(task).read_text())
    stubbed = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    api = importlib.import_module(f"{task.package}.api")
    for function in ("train", "analyze_sensitivity", "load_model"):
        args = stubbed[function].args
        names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
        assert names == list(inspect.signature(getattr(api, function)).parameters), function
        typed = [a for a in args.args + args.kwonlyargs if a.annotation is None]
        assert not typed, f"{function}: untyped {[a.arg for a in typed]}"
    train = stubbed["train"]
    kinds = {a.arg: ast.unparse(a.annotation) for a in train.args.kwonlyargs}
    assert kinds["epochs"] == "int" and kinds["latency_threads"] == "int | None"
    assert kinds["quantize"] == "str | None"


def test_the_package_says_it_is_typed_and_ships_its_stubs():
    root = Path(autoprune.__file__).parent
    assert (root / "py.typed").is_file()
    text = (root.parent / "pyproject.toml").read_text()
    assert '"py.typed"' in text and '"**/*.pyi"' in text

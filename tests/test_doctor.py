"""The tested version set (autoprune/constraints.txt), `autoprune doctor` and `--version`."""
from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement

from autoprune.cli import doctor
from autoprune.cli import main

ROOT = Path(__file__).parents[1]


def test_tested_versions_reads_pins_and_skips_the_rest():
    text = "# comment\nFoo_Bar==1.2.3  # why\nbaz[extra]==2.0 ; python_version>'3'\nqux>=1\n\n"
    assert doctor.tested_versions(text) == {"foo-bar": "1.2.3", "baz": "2.0"}


def test_every_dependency_is_pinned_inside_pyproject_ranges():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = doctor.tested_versions()
    deps = project["dependencies"] + [d for extra in project["optional-dependencies"].values()
                                      for d in extra]
    for dep in map(Requirement, deps):
        name = doctor._canonical(dep.name)
        assert name in pins, f"{dep.name} is not pinned in autoprune/constraints.txt"
        assert dep.specifier.contains(pins[name], prereleases=True), \
            f"tested {dep.name}=={pins[name]} is outside pyproject's {dep.specifier}"


def test_a_differing_or_missing_package_is_named_in_one_line():
    tested = {"torch": "0.0.1", "surely-not-installed-pkg": "1.0", "pytest": pytest.__version__}
    checks = doctor.check_stack(tuple(tested), tested)
    assert [c.differs for c in checks] == [True, True, False]
    assert checks[1].installed is None
    warning = doctor.difference_warning(checks)
    assert "\n" not in warning and "torch" in warning and "tested 0.0.1" in warning
    assert "surely-not-installed-pkg missing" in warning and "scripts/setup.sh" in warning
    assert doctor.difference_warning(checks[2:]) is None


def _pretend_tested(monkeypatch, pins: dict[str, str]):
    """The tested set as the installed stack (each tested package that is installed, at its
    version), then ``pins``: the tests read the same wherever the stack differs from
    constraints.txt (scripts/refresh_constraints.sh runs the suite on the newest versions)."""
    installed = {name: doctor.installed_version(name) for name in doctor.tested_versions()}
    stack = {name: version for name, version in installed.items() if version}
    monkeypatch.setattr(doctor, "tested_versions", lambda text=None: {**stack, **pins})


def test_doctor_strict_fails_only_when_the_stack_differs(monkeypatch, capsys):
    installed = doctor.installed_version("torch")
    _pretend_tested(monkeypatch, {"torch": installed})
    assert main(["doctor", "--strict"]) == 0
    out = capsys.readouterr().out
    assert "torch" in out and installed in out and "differs" not in out
    _pretend_tested(monkeypatch, {"torch": "0.0.1"})
    with pytest.raises(SystemExit) as e:
        main(["doctor", "--strict"])
    assert e.value.code == 1
    captured = capsys.readouterr()
    assert "<- differs" in captured.out and "torch" in captured.err and "0.0.1" in captured.err
    assert main(["doctor"]) == 0  # without --strict: a warning, not a failure


def test_version_names_the_stack_and_warns_when_it_differs(monkeypatch, capsys):
    _pretend_tested(monkeypatch, {"timm": "0.0.1"})
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    captured = capsys.readouterr()
    assert e.value.code == 0
    assert f"timm {doctor.installed_version('timm')}" in captured.out
    assert "timm" in captured.err and "tested 0.0.1" in captured.err

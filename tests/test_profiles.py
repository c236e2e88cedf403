"""DEFAULT profiles: listed, looked up by architecture, shipped inside the built wheel."""
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import autoprune
from autoprune.cli import main
from autoprune.profiles import available_profiles, find_profile, profile_dir, register_profile

ROOT = Path(__file__).resolve().parents[1]


def test_every_indexed_profile_is_a_valid_file():
    for task, archs in available_profiles().items():
        for key, name in archs.items():
            record = autoprune.read_record(profile_dir() / name)
            assert record.model["fingerprint"] and record.metric["baseline"]
            assert record.extra["how"]["dataset"] and record.extra["versions"]["torch"]
            assert find_profile(task, key) == profile_dir() / name


def test_missing_profile_lists_the_bundled_ones():
    with pytest.raises(autoprune.ConfigError, match="no DEFAULT sensitivity profile") as e:
        find_profile("classification", "timm/no_such_net")
    assert "\n" not in str(e.value)
    for key in available_profiles().get("classification", {}):
        assert key in str(e.value)


def test_register_and_list(tmp_path, monkeypatch, capsys):
    register_profile("classification", "timm/x", "x.json", tmp_path)
    register_profile("detection", "yolov8n", "y.json", tmp_path)
    index = json.loads((tmp_path / "index.json").read_text())
    assert index["profiles"] == {"classification": {"timm/x": "x.json"},
                                 "detection": {"yolov8n": "y.json"}}
    monkeypatch.setattr("autoprune.profiles.profile_dir", lambda: tmp_path)
    assert main(["profiles", "list"]) == 0
    out = capsys.readouterr().out
    assert "timm/x" in out and "yolov8n" in out


def test_wheel_ships_the_profiles_and_resolves_default(tmp_path):
    if not (ROOT / "pretrained_sensitivities" / "index.json").is_file():
        pytest.skip("no profile bundled yet")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path / "dist"), str(ROOT)], check=True)
    wheel = next((tmp_path / "dist").glob("autoprune-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "autoprune/pretrained_sensitivities/index.json" in names
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(site), str(wheel)], check=True)
    code = ("import autoprune.profiles as p, json; "
            "print(json.dumps({'dir': str(p.profile_dir()), 'profiles': p.available_profiles()}))")
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, check=True,
                         capture_output=True, text=True).stdout
    found = json.loads(out)
    assert found["dir"].startswith(str(site))  # the installed copy, not the source tree
    assert found["profiles"] == available_profiles()

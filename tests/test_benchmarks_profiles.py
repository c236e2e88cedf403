"""benchmarks/default_vs_own.py on tiny settings (classification only): a profile built into
tmp_path is the DEFAULT, compared with the model's own analysis at the same FLOPs target."""
import importlib.util
from pathlib import Path

import pytest

from autoprune.profiles.build import build_profile

from conftest import needs_fmnist

ROOT = Path(__file__).resolve().parents[1]

pytestmark = needs_fmnist


def test_default_vs_own_classification(tmp_path, monkeypatch, capsys):
    profiles = tmp_path / "profiles"
    build_profile("resnet18", profiles, epochs=1, train_images=128, val_images=64,
                  input_size=32, ratios=(0.5,), progress=False)
    spec = importlib.util.spec_from_file_location("default_vs_own",
                                                  ROOT / "benchmarks" / "default_vs_own.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    # the script points DEFAULT at --profiles through this variable; monkeypatch undoes it
    monkeypatch.setenv("AUTOPRUNE_PROFILE_DIR", str(profiles.resolve()))
    rows = bench.main(["--task", "classification", "--quick", "--profiles", str(profiles),
                       "--out", str(tmp_path / "bench"), "--train-images", "128",
                       "--val-images", "64", "--epochs", "1", "--ratios", "0.5",
                       "--pruned-flops", "0.3"])
    (row,) = rows
    assert row["default"]["sensitivities_file"] == str(
        (profiles / "classification-timm-resnet18.json").resolve())
    assert row["own"]["sensitivities_file"].endswith("own_sensitivities.json")
    for mode in ("own", "default"):
        assert row[mode]["flops_reduction"] == pytest.approx(0.3, abs=0.05)
        assert 0 <= row[mode]["metric"] <= 1
    out = capsys.readouterr().out
    assert "| classification | timm/resnet18 | top1 |" in out
    assert (tmp_path / "bench" / "results.json").is_file()

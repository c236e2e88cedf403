"""The command line: show, merge, convert-paddleslim, one-line errors with exit code 2."""
import pickle
from pathlib import Path

import pytest

import autoprune
from autoprune.cli import main


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


def test_merge_later_wins(sens_file, tmp_path, capsys):
    other = tmp_path / "b.json"
    autoprune.save_sensitivities({"conv1": {0.5: 0.3}, "fc1": {0.2: 0.05}}, other, fingerprint="abc")
    out = tmp_path / "merged.json"
    assert main(["merge", str(out), str(sens_file), str(other)]) == 0
    assert autoprune.load_sensitivities(out) == {"conv1": {0.1: 0.01, 0.5: 0.3}, "fc1": {0.2: 0.05}}
    assert autoprune.read_record(out).metric["baseline"] == 0.9


def test_merge_refuses_other_model(sens_file, tmp_path, capsys):
    other = tmp_path / "b.json"
    autoprune.save_sensitivities({"conv1": {0.5: 0.3}}, other, fingerprint="zzz")
    assert main(["merge", str(tmp_path / "m.json"), str(sens_file), str(other)]) == 2
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
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"autoprune {autoprune.__version__}"
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    pyproject = Path(__file__).parents[1] / "pyproject.toml"
    assert tomllib.loads(pyproject.read_text())["project"]["version"] == autoprune.__version__

"""The suite's own order: test files go to the two workers slowest first (test.sh, conftest.py)."""
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_file_seconds_sums_a_junit_report_per_file_slowest_first(tmp_path):
    spec = importlib.util.spec_from_file_location("tfs", ROOT / "scripts" / "test_file_seconds.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    junit = tmp_path / "j.xml"
    junit.write_text('<testsuites><testsuite>'
                     '<testcase classname="tests.test_a" name="x" time="1.5"/>'
                     '<testcase classname="tests.test_b.TestK" name="y" time="4"/>'
                     '<testcase classname="tests.test_a" name="z" time="1.0"/>'
                     '</testsuite></testsuites>')
    assert list(module.file_seconds(str(junit)).items()) == [("test_b.py", 4.0),
                                                             ("test_a.py", 2.5)]


def test_the_listed_files_exist_and_are_slowest_first():
    seconds = json.loads((ROOT / "tests" / "file_seconds.json").read_text())
    assert list(seconds.values()) == sorted(seconds.values(), reverse=True)
    assert all((ROOT / "tests" / name).is_file() for name in seconds), "regenerate the list"
    assert "--no-loadscope-reorder" in (ROOT / "test.sh").read_text()

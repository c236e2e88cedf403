"""Write tests/file_seconds.json, each test file's measured seconds (slowest first), from the
JUnit XML of a full run: `./test.sh --junitxml=/tmp/full.xml`, then
`python scripts/test_file_seconds.py /tmp/full.xml`. tests/conftest.py hands the files to the
two workers slowest first (test.sh's --no-loadscope-reorder), so both finish close together."""
from __future__ import annotations

import argparse
import collections
import json
import xml.etree.ElementTree as ET
from pathlib import Path


def file_seconds(junit: str) -> dict[str, float]:
    """Seconds per test file (``test_x.py``) in the JUnit XML ``junit``, slowest first."""
    seconds: collections.Counter = collections.Counter()
    for case in ET.parse(junit).iter("testcase"):
        module = case.get("classname", "").split(".")
        name = next((part for part in module if part.startswith("test_")), None)
        if name:
            seconds[f"{name}.py"] += float(case.get("time") or 0)
    return {name: round(s, 1) for name, s in seconds.most_common()}


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("junit", help="the JUnit XML of a full run")
    p.add_argument("--dry-run", action="store_true", help="print the totals, write nothing")
    a = p.parse_args()
    out = Path(__file__).resolve().parents[1] / "tests" / "file_seconds.json"
    data = file_seconds(a.junit)
    if not a.dry_run:
        out.write_text(json.dumps(data, indent=0) + "\n")
    print(f"{out if not a.dry_run else a.junit}: {len(data)} files, "
          f"{sum(data.values()):.0f} s")

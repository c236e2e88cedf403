"""A stand-in for polars on the lent GPU machine only (scripts/gpu/check.sh puts it on the path
when the real polars cannot be imported): polars' wheel (55 MB) does not fit the device tool's
64 MiB carry beside the other wheels and Fashion-MNIST. Ultralytics imports polars in the trainer
for one call, ``read_results_csv`` (results.csv into the checkpoint's metadata), and for plots,
which autoprune turns off; this reads a CSV into ``{column: [values]}`` as that call does.
Anything else of polars raises, so a new use shows up instead of passing silently."""
from __future__ import annotations

import csv
import io
from pathlib import Path

__version__ = "0.0-autoprune-gpu-check-shim"


def _value(text: str):
    try:
        number = float(text)
    except ValueError:
        return text
    whole = number.is_integer() and "." not in text and "e" not in text.lower()
    return int(number) if whole else number


class DataFrame:
    def __init__(self, columns: dict):
        self._columns = columns

    def to_dict(self, as_series: bool = True) -> dict:
        if as_series:
            raise NotImplementedError("the GPU check's polars stand-in has no Series")
        return {k: list(v) for k, v in self._columns.items()}


def read_csv(source, infer_schema_length=None, **_):
    """``source``: bytes, a path or text; the columns, numbers parsed."""
    if isinstance(source, (bytes, bytearray)):
        text = source.decode()
    elif isinstance(source, (str, Path)) and Path(source).is_file():
        text = Path(source).read_text()
    else:
        text = str(source)
    rows = list(csv.reader(io.StringIO(text)))
    header = [h.strip() for h in rows[0]] if rows else []
    columns = {h: [_value(r[i].strip()) for r in rows[1:] if len(r) > i]
               for i, h in enumerate(header)}
    return DataFrame(columns)


def __getattr__(name: str):
    raise AttributeError(f"polars.{name}: the GPU check's polars stand-in has only read_csv")

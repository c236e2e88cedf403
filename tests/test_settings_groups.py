"""Settings groups: the flow holds one :class:`autoprune.Timing` (``FlowSettings.latency``) whose
fields are spelled ``latency_<field>`` as keywords, YAML keys (args.yaml) and CLI flags. A field
added to the group's class reaches all of them and the engine: nothing else is written out."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from autoprune import ConfigError, Timing
from autoprune.cli.commands import _timing
from autoprune.cli.main import build_parser
from autoprune.engine.latency import latency_setting, setting_differences
from autoprune.flow import config
from autoprune.flow.config import (FlowSettings, from_flat, group, group_class, names,
                                   run_record, split_settings, to_flat)
from autoprune.flow.options import check_sensitivity_options, latency_timing


@dataclasses.dataclass(frozen=True)
class WarmTiming(Timing):
    """The timing group with one more field, as a later release would add it."""

    warmup_runs: int = dataclasses.field(default=3, metadata={"help": "passes before timing",
                                                             "kind": "int"})


@dataclasses.dataclass
class WarmFlow(FlowSettings):
    latency: WarmTiming = group(WarmTiming, "timing, with warm-up", prefix="latency_")


@dataclasses.dataclass
class NoSettings(config.TaskSettings):
    pass


def test_the_flow_holds_one_timing_spelled_flat():
    assert group_class(FlowSettings, "latency") is Timing
    timing_names = [n for n in names(FlowSettings) if n.startswith("latency_")]
    assert timing_names == [f"latency_{f.name}" for f in dataclasses.fields(Timing)]
    assert "latency" not in names(FlowSettings)
    flow, _ = split_settings({"latency_threads": 1, "latency_runtime": "onnxruntime",
                              "latency_precision": "int8", "epochs": 2}, NoSettings, "test")
    assert flow.latency == Timing(threads=1, runtime="onnxruntime", precision="int8")
    flat = to_flat(flow)
    assert flat["latency_threads"] == 1 and flat["latency_precision"] == "int8"
    assert "latency" not in flat
    assert from_flat(FlowSettings, flat) == flow


def test_defaults_are_written_once_in_the_timing_class():
    flow = FlowSettings()
    assert flow.latency == Timing()
    for f in dataclasses.fields(Timing):
        assert to_flat(flow)[f"latency_{f.name}"] == f.default


def test_a_field_added_to_the_group_reaches_keywords_yaml_cli_and_engine(monkeypatch):
    # keywords
    assert "latency_warmup_runs" in names(WarmFlow)
    flow = from_flat(WarmFlow, {"latency_warmup_runs": 7, "latency_threads": 1})
    assert flow.latency == WarmTiming(threads=1, warmup_runs=7)
    # YAML (args.yaml), read back
    record = run_record("classification", {"model": "resnet18"}, flow)
    assert record["latency_warmup_runs"] == 7 and record["latency_threads"] == 1
    back = {k: v for k, v in record.items() if k in names(WarmFlow) and k != "ratios"}
    assert from_flat(WarmFlow, back) == flow  # (ratios come back as a list)
    # CLI: the flags of `autoprune sensitivity` / `prune` come from the group's fields
    monkeypatch.setattr(config, "FlowSettings", WarmFlow)
    args = build_parser().parse_args(["sensitivity", "ck.pt", "data", "out.json", "--latency",
                                      "--latency-warmup-runs", "5", "--latency-threads", "2"])
    assert args.latency_warmup_runs == 5
    assert _timing(args) == WarmTiming(threads=2, warmup_runs=5)
    options = check_sensitivity_options({"latency": True, "latency_warmup_runs": 4})
    assert latency_timing(options) == WarmTiming(warmup_runs=4)
    # the engine records it with the setting, and a table timed otherwise is told apart
    setting = latency_setting(torch.zeros(1, 3, 8, 8), **WarmTiming(threads=1).kwargs())
    assert setting["warmup_runs"] == 3


def test_precision_is_part_of_the_recorded_setting():
    x = torch.zeros(1, 3, 8, 8)
    fp32 = latency_setting(x, threads=1)
    assert fp32["precision"] == "fp32"
    older = {k: v for k, v in fp32.items() if k != "precision"}  # a table from before precision
    assert setting_differences(older, fp32) == ""
    pytest.importorskip("onnxruntime")
    int8 = latency_setting(x, threads=1, runtime="onnxruntime", precision="int8")
    onnx_fp32 = latency_setting(x, threads=1, runtime="onnxruntime")
    assert "precision 'fp32' (asked: 'int8')" in setting_differences(onnx_fp32, int8)
    assert "precision 'int8' (asked: 'fp32')" in setting_differences(int8, onnx_fp32)


@pytest.mark.parametrize("timing, message", [
    (Timing(precision="int4"), "latency_precision='int4' is not a precision autoprune quantizes to "
                               "and times: "
                               "pick 'fp32' or 'int8'"),
    (Timing(precision="int8"), "latency_precision='int8' times the model as the deploy runtime "
                               "quantizes it: pass latency_runtime='onnxruntime'"),
])
def test_a_bad_precision_is_one_line(timing, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        timing.check()
    assert "\n" not in str(e.value)


def test_a_timing_setting_without_a_latency_target_is_refused():
    from autoprune.flow.latency import check_unused_settings

    with pytest.raises(ConfigError, match="latency_precision='int8' is given without "
                                          "pruned_latency"):
        check_unused_settings(None, Timing(precision="int8"))
    check_unused_settings(0.4, Timing(precision="int8"))  # with a target: fine

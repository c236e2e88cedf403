"""The engine's grouped settings: ``sensitivity(options=, latency=Timing(...))`` and
``ratios_by_latency(timing=, search=)`` measure what the former flat keywords measured, those
keywords still work with a FutureWarning naming the new spelling."""
from __future__ import annotations

import warnings

import pytest

import autoprune
from autoprune import ConfigError, Timing

from conftest import RefEval, assert_one_line, make_input, make_model

GROUPS = ["stem.0", "branch_b.0"]


def _toy():
    model, x = make_model("toy"), make_input()
    return model, x, RefEval(model, x)


def test_options_measure_what_the_former_keywords_measured_and_those_warn():
    model, x, eval_fn = _toy()
    new = autoprune.sensitivity(model, x, eval_fn, groups=GROUPS, ratios=(0.25, 0.5),
                                options={"evaluation": "prune", "prefix_cache": False},
                                progress=False)
    with pytest.warns(FutureWarning, match=r"sensitivity\(evaluation=\.\.\., prefix_cache="
                      r"\.\.\.\) is deprecated: pass options=\{'evaluation': \.\.\., "
                      r"'prefix_cache': \.\.\.\}"):
        old = autoprune.sensitivity(model, x, eval_fn, groups=GROUPS, ratios=(0.25, 0.5),
                                    evaluation="prune", prefix_cache=False, progress=False)
    assert new == old and all(new[g][0.5] > 0 for g in GROUPS)


def test_a_timing_records_its_setting_and_the_former_latency_keywords_warn(tmp_path):
    model, x, eval_fn = _toy()
    timed = autoprune.sensitivity(model, x, eval_fn, groups=GROUPS[:1], ratios=(0.5,),
                                  latency=Timing(threads=1, batch=2), progress=False)
    setting = timed.record.extra["latency"]
    assert (setting["threads"], setting["batch"], setting["runtime"]) == (1, 2, "torch")
    with pytest.warns(FutureWarning, match=r"pass latency=Timing\(threads=\.\.\.\)"):
        again = autoprune.sensitivity(model, x, eval_fn, groups=GROUPS[:1], ratios=(0.5,),
                                      latency={"batch": 2}, latency_threads=1, progress=False)
    assert (again.record.extra["latency"]["threads"], again.record.extra["latency"]["batch"]) \
        == (1, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning without the former keywords
        autoprune.sensitivity(model, x, eval_fn, groups=GROUPS[:1], ratios=(0.5,),
                              options={"early_stop": 0.5}, progress=False)


@pytest.mark.parametrize("value, message", [
    ({"thread": 1},
     "unknown latency setting 'thread': use device, threads, batch, runtime or precision"),
    ("cpu", "latency='cpu' is not a timing setting: pass True, autoprune.Timing"),
    (Timing(batch=0), "latency_batch=0 must be a positive whole number"),
])
def test_a_bad_timing_is_one_line(value, message):
    model, x, eval_fn = _toy()
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")) as e:
        autoprune.sensitivity(model, x, eval_fn, groups=GROUPS[:1], ratios=(0.5,),
                              latency=value, progress=False)
    assert_one_line(e)


def test_bad_option_names_are_refused():
    model, x, eval_fn = _toy()
    with pytest.raises(ConfigError, match="unknown analysis option 'early': use early_stop"):
        autoprune.sensitivity(model, x, eval_fn, options={"early": 0.5})
    with pytest.raises(TypeError, match="unexpected keyword argument 'ratio'"):
        autoprune.sensitivity(model, x, eval_fn, ratio=0.5)
    with pytest.raises(ConfigError, match="unknown search option 'tolerence': use tolerance"):
        autoprune.ratios_by_latency(model, x, {}, 0.4, search={"tolerence": 0.02})
    with pytest.raises(TypeError, match="unexpected keyword argument 'latency_threads'"):
        autoprune.ratios_by_latency(model, x, {}, 0.4, latency_threads=1)

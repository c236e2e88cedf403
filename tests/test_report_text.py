"""The console report prints what data and checkpoint files say (a data description, the
starting weights' file name, class names): every line comes out printable, so a crafted file
cannot send escape sequences to the terminal of whoever runs `autoprune report` or `train`. And
the note a run's report adds where ONNX Runtime ran its pruned model slower."""
from __future__ import annotations

from autoprune.flow.report import printable, to_console


def test_the_console_report_escapes_what_files_say():
    report = {"baseline": {"params": 10, "metrics": {"top1": 0.5}},
              "pruned": {"params": 5, "metrics": {"top1": 0.4}},
              "start_weights": {"source": "file", "id": "w\x1b]0;pwned\x07",
                                "file": "/tmp/\x1b[2Jx.pt"}}
    text = to_console(report)
    assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b[2J" in text and "\\x1b]0;pwned\\x07" in text


def test_printable_keeps_ordinary_text_and_escapes_controls():
    assert printable("résumé 0.5 ms") == "résumé 0.5 ms"
    assert printable("a\u202eb\tc") == "a\\u202eb\\tc"


def test_a_run_whose_pruned_model_onnx_runtime_ran_slower_says_why_and_what_fixes_it():
    """ONNX Runtime's fast convolutions want multiples of 8 channels: a run that did not round
    them and whose pruned model it ran slower gets one line naming round_to=8 (console and
    Markdown); a run that rounded, a faster model, or `autoprune report` (no round_to) none."""
    from autoprune.flow.report import runtime_line, to_markdown

    def report(reduction, **more):
        return {"baseline": {"params": 10, "metrics": {}}, "pruned": {"params": 5, "metrics": {}},
                "latency_paired": {"onnxruntime": {"reduction": reduction}}, **more}

    slow = report(-0.575, round_to=None)
    assert runtime_line(slow) == ("ONNX Runtime ran the pruned model 57.5 % slower: its fast "
                                  "convolutions want channel counts in multiples of 8, which "
                                  "this run did not keep; prune with round_to=8 (CLI "
                                  "--round-to 8)")
    assert f"note: {runtime_line(slow)}" in to_console(slow).splitlines()
    assert f"Note: {runtime_line(slow)}." in to_markdown(slow)
    for quiet in (report(-0.575, round_to=8), report(0.2, round_to=None),
                  report(-0.01, round_to=1), report(-0.575), report(None, round_to=None),
                  {**report(0.0, round_to=None), "latency_paired": {"onnxruntime": None}}):
        assert runtime_line(quiet) == "" and "note:" not in to_console(quiet)

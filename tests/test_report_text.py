"""The console report prints what data and checkpoint files say (a data description, the
starting weights' file name, class names): every line comes out printable, so a crafted file
cannot send escape sequences to the terminal of whoever runs `autoprune report` or `train`."""
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

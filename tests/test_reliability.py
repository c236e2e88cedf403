"""Reliability: no network during a full classification or segmentation run; determinism with a
fixed seed; Ctrl-C during the analysis leaves a valid, resumable file; the CLI's Ctrl-C line."""
import functools
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import autoprune
from autoprune.cli import main
from conftest import RefEval, child_pythonpath, make_input, make_model, needs_fmnist

ROOT = Path(__file__).resolve().parents[1]

GUARD = textwrap.dedent("""
    import socket
    def _refuse(*a, **k):
        raise RuntimeError("network access attempted")
    socket.socket.connect = _refuse
    socket.socket.connect_ex = _refuse
    socket.create_connection = _refuse
    socket.getaddrinfo = _refuse
""")


def _run_offline(code: str, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", GUARD + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=600,
                          env={"PYTHONPATH": child_pythonpath(), "PATH": "/usr/bin:/bin",
                               "HOME": str(tmp_path), "OMP_NUM_THREADS": "1",
                               **{k: v for k, v in os.environ.items()  # where the data is
                                  if k == "AUTOPRUNE_FASHION_MNIST"}})
    assert done.returncode == 0 and "OK" in done.stdout, done.stderr[-3000:]


@needs_fmnist
def test_no_socket_during_full_classification_and_segmentation_runs(tmp_path):
    """One child process (one start of torch, timm and smp) runs both tasks' whole flow and
    exports each pruned model, every socket call refused."""
    _run_offline(f"""
        import autoprune, torch
        from autoprune import classification as cls, segmentation as seg
        r = cls.train("mobilenetv3_small_100", "fashion-mnist", epochs=1, batch_size=32,
                      train_limit=64, eval_limit=32, save_dir={str(tmp_path / 'cls')!r},
                      sensitivities_file={str(tmp_path / 'c.json')!r}, ratios=(0.5,),
                      eval_metric_loss=0.5, progress=False)
        m = cls.load_model(r.pruned_path)
        autoprune.export_onnx(m, torch.randn(1, 3, 32, 32), {str(tmp_path / 'c.onnx')!r})
        r = seg.train("unet", "resnet18", train_data="fashion-scenes", epochs=1, batch_size=8,
                      input_size=32, train_limit=16, eval_limit=4,
                      save_dir={str(tmp_path / 'seg')!r},
                      sensitivities_file={str(tmp_path / 's.json')!r}, ratios=(0.5,),
                      eval_metric_loss=0.5, progress=False)
        m = seg.load_model(r.pruned_path)
        assert m(torch.randn(1, 3, 32, 32)).shape == (1, 11, 32, 32)
        autoprune.export_onnx(m, torch.randn(1, 3, 32, 32), {str(tmp_path / 's.onnx')!r})
        print("OK")
    """, tmp_path)


@needs_fmnist
def test_same_seed_same_sensitivities_and_architecture(tmp_path):
    from autoprune import classification as cls
    from autoprune.engine.checkpoint import read_pruned_metadata

    runs = []
    for i in range(2):  # a FLOPs target always prunes (a tolerated loss on the top-1 of this
        # one-epoch model may keep every group, leaving no architecture to compare)
        r = cls.train("resnet18", "fashion-mnist", epochs=1, batch_size=32, train_limit=96,
                      eval_limit=48, save_dir=tmp_path / f"run{i}", ratios=(0.3, 0.6),
                      sensitivities_file=tmp_path / f"s{i}.json", pruned_flops=0.3,
                      seed=7, progress=False)
        sens = json.loads((tmp_path / f"s{i}.json").read_text())
        plan = read_pruned_metadata(r.pruned_path)["plan"]
        runs.append((sens["sensitivities"], sens["metric"]["baseline"], plan))
    assert runs[0][2], "nothing was pruned: the comparison would be empty"
    assert runs[0] == runs[1]


def test_ctrl_c_during_analysis_leaves_a_valid_file_and_the_rerun_completes(tmp_path):
    model, x = make_model("toy"), make_input(batch=4)
    path = tmp_path / "sens.json"
    ratios = (0.3, 0.6)
    kw = dict(ratios=ratios, sensitivities_file=path, progress=False,
              options={"prefix_cache": False})
    with pytest.raises(KeyboardInterrupt):  # the baseline and 3 points are done, then Ctrl-C
        autoprune.sensitivity(model, x, RefEval(model, x, interrupt_on_call=5), **kw)
    partial = autoprune.read_record(path)
    assert sum(len(v) for v in partial.sensitivities.values()) == 3
    assert partial.metric["baseline"] == 1.0
    assert [p.name for p in tmp_path.iterdir()] == ["sens.json"], "a temporary file was left"

    ev = RefEval(model, x)
    resumed = autoprune.sensitivity(model, x, ev, **kw)
    straight = autoprune.sensitivity(model, x, RefEval(model, x), ratios=ratios, progress=False,
                                     options={"prefix_cache": False})
    assert ev.calls == 2 * len(straight) - 3  # only the missing points were measured
    assert resumed == straight == autoprune.read_record(path).sensitivities


def _interrupt(monkeypatch, target: str) -> None:
    module, name = target.rsplit(".", 1)
    original = getattr(__import__(module, fromlist=[name]), name)

    @functools.wraps(original)  # keeps the signature the CLI checks config keys against
    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(target, stop)


def test_cli_ctrl_c_names_where_progress_is_and_exits_130(tmp_path, monkeypatch, capsys):
    _interrupt(monkeypatch, "autoprune.classification.analyze_sensitivity")
    out = tmp_path / "sens.json"
    assert main(["sensitivity", str(tmp_path / "ckpt.pt"), "fashion-mnist", str(out)]) == 130
    err = capsys.readouterr().err.strip()
    assert err == (f"autoprune: interrupted: progress is saved in {out}; run the same command "
                   f"again to resume")

    _interrupt(monkeypatch, "autoprune.classification.train")
    config = tmp_path / "run.yaml"
    config.write_text(f"task: classification\nmodel: resnet18\ntrain_data: fashion-mnist\n"
                      f"save_dir: {tmp_path / 'run'}\n")
    assert main(["train", str(config)]) == 130
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"autoprune: interrupted: progress is saved in {tmp_path / 'run'}; "
                          f"`autoprune train {config} --resume` or `autoprune train --resume "
                          f"{tmp_path / 'run'}`") and "\n" not in err

    _interrupt(monkeypatch, "autoprune.detection.train")  # detection takes resume: true too
    config.write_text(f"task: detection\nmodel: yolov8n.yaml\ndata: d.yaml\n"
                      f"save_dir: {tmp_path / 'det'}\n")
    assert main(["train", str(config)]) == 130
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"autoprune: interrupted: progress is saved in {tmp_path / 'det'}; "
                          f"`autoprune train {config} --resume`") and "\n" not in err

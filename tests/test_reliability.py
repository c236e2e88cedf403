"""Reliability: no network during a full classification run; determinism with a fixed seed."""
import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
needs_fmnist = pytest.mark.skipif(not Path("/usr/share/datasets/fashion-mnist").is_dir(),
                                  reason="dataset-fashion-mnist not installed")

GUARD = textwrap.dedent("""
    import socket
    def _refuse(*a, **k):
        raise RuntimeError("network access attempted")
    socket.socket.connect = _refuse
    socket.socket.connect_ex = _refuse
    socket.create_connection = _refuse
    socket.getaddrinfo = _refuse
""")


@needs_fmnist
def test_no_socket_during_full_classification_run(tmp_path):
    code = GUARD + textwrap.dedent(f"""
        import autoprune.classification as cls
        r = cls.train("mobilenetv3_small_100", "fashion-mnist", epochs=1, batch_size=32,
                      train_limit=64, eval_limit=32, save_dir={str(tmp_path / 'run')!r},
                      sensitivities_file={str(tmp_path / 's.json')!r}, ratios=(0.5,),
                      eval_metric_loss=0.5, progress=False)
        m = cls.load_model(r.pruned_path)
        import autoprune, torch
        autoprune.export_onnx(m, torch.randn(1, 3, 32, 32), {str(tmp_path / 'm.onnx')!r})
        print("OK")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                                            "HOME": str(tmp_path), "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0 and "OK" in done.stdout, done.stderr[-3000:]


@needs_fmnist
def test_same_seed_same_sensitivities_and_architecture(tmp_path):
    from autoprune import classification as cls
    from autoprune.checkpoint import read_pruned_metadata

    runs = []
    for i in range(2):
        r = cls.train("resnet18", "fashion-mnist", epochs=1, batch_size=32, train_limit=96,
                      eval_limit=48, save_dir=tmp_path / f"run{i}", ratios=(0.3, 0.6),
                      sensitivities_file=tmp_path / f"s{i}.json", eval_metric_loss=0.05,
                      seed=7, progress=False)
        sens = json.loads((tmp_path / f"s{i}.json").read_text())
        plan = read_pruned_metadata(r.pruned_path)["plan"]
        runs.append((sens["sensitivities"], sens["metric"]["baseline"], plan))
    assert runs[0][2], "nothing was pruned: the comparison would be empty"
    assert runs[0] == runs[1]

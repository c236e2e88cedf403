"""Every training run ends by listing where its outputs are, one a line, and each listed file
exists: plain training (save_dir/best.pt) and the one-call flow (baseline/, pruned/, the
sensitivity file, the reports and the plot)."""
import re

import torch
from torch.utils.data import TensorDataset

from autoprune import classification as cls
from conftest import ToyNet


def _listed(out: str) -> tuple[str, dict[str, str]]:
    """The header and ``{label: path}`` of the outputs block that ends ``out``."""
    lines = out.rstrip("\n").splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("[autoprune] outputs"))
    rows = lines[start + 1:]
    assert rows and all(row.startswith("  ") for row in rows), "the block is the last output"
    return lines[start], dict(re.split(r"\s{2,}", row.strip(), maxsplit=1) for row in rows)


def _data():
    g = torch.Generator().manual_seed(0)
    images = torch.rand(32, 3, 16, 16, generator=g)
    return TensorDataset(images, images.mean(dim=(2, 3)).argmax(dim=1))


def test_every_run_ends_with_the_paths_of_its_outputs(tmp_path, capsys):
    kw = dict(epochs=1, batch_size=8, input_size=16, device="cpu", progress=False)
    r = cls.train(ToyNet(num_classes=3), _data(), _data(), save_dir=tmp_path / "plain", **kw)
    header, listed = _listed(capsys.readouterr().out)
    assert header == f"[autoprune] outputs of this run (save_dir {tmp_path / 'plain'}):"
    assert listed == {"model": str(tmp_path / "plain" / "best.pt"),
                      "last epoch": str(tmp_path / "plain" / "last.pt")}
    assert listed["model"] == str(r.baseline_path)

    r = cls.train(ToyNet(num_classes=3), _data(), _data(), save_dir=tmp_path / "run",
                  sensitivities_file=tmp_path / "sens.json", ratios=(0.5,), pretrain_epochs=1,
                  eval_metric_loss=0.5, **kw)
    header, listed = _listed(capsys.readouterr().out)
    run = tmp_path / "run"
    assert listed == {"pruned model": str(run / "pruned" / "best.pt"),
                      "base model": str(run / "baseline" / "best.pt"),
                      "sensitivities": str(tmp_path / "sens.json"),
                      "report": str(run / "report.md"), "report data": str(run / "report.json"),
                      "report table": str(run / "report.csv"),
                      "plot": str(run / "sensitivity.png")}
    assert (listed["pruned model"], listed["base model"], listed["sensitivities"]) == \
        (str(r.pruned_path), str(r.baseline_path), str(r.sensitivities_path))
    for label, path in listed.items():
        assert (tmp_path / path).is_file(), label

"""One output layout for every mode: each trained model lives in a stage folder of save_dir
(training only: baseline/; the one-call flow: baseline/ and pruned/; pruning a given checkpoint:
pruned/), the reports at the top. Every training run ends by listing where its outputs are, one a
line, and each listed file exists. A save_dir holding an earlier version's training run (best.pt
at its top) is named in one line and left as it was."""
import re
import shutil

import torch
from torch.utils.data import TensorDataset

from autoprune import classification as cls
from autoprune import segmentation as seg
from conftest import Images, ToyNet

KW = dict(epochs=1, batch_size=8, input_size=16, device="cpu", progress=False)
PRUNING = dict(ratios=(0.5,), eval_metric_loss=0.5)


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


def _models(save_dir) -> set[str]:
    """The checkpoints under ``save_dir``, relative to it."""
    return {p.relative_to(save_dir).as_posix() for p in save_dir.rglob("*.pt")}


def _cls(save_dir, **kw):
    torch.manual_seed(0)
    return cls.train(ToyNet(num_classes=3), _data(), _data(), save_dir=save_dir, **KW, **kw)


def test_every_run_ends_with_the_paths_of_its_outputs(tmp_path, capsys):
    r = _cls(tmp_path / "plain")
    header, listed = _listed(capsys.readouterr().out)
    plain = tmp_path / "plain" / "baseline"
    assert header == f"[autoprune] outputs of this run (save_dir {tmp_path / 'plain'}):"
    assert listed == {"model": str(plain / "best.pt"), "last epoch": str(plain / "last.pt")}
    assert listed["model"] == str(r.baseline_path)

    r = _cls(tmp_path / "run", sensitivities_file=tmp_path / "sens.json", pretrain_epochs=1,
             **PRUNING)
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


def test_every_mode_puts_its_models_in_the_same_stage_folders(tmp_path):
    stage = {"baseline/best.pt", "baseline/last.pt", "baseline/train_state.pt"}
    retrained = {"pruned/best.pt", "pruned/last.pt", "pruned/train_state.pt"}
    plain = _cls(tmp_path / "plain")
    assert _models(tmp_path / "plain") == stage
    assert plain.baseline_path == tmp_path / "plain" / "baseline" / "best.pt"

    flow = _cls(tmp_path / "flow", sensitivities_file=tmp_path / "sens.json", **PRUNING)
    assert _models(tmp_path / "flow") == stage | retrained
    assert (flow.baseline_path, flow.pruned_path) == (tmp_path / "flow" / "baseline" / "best.pt",
                                                      tmp_path / "flow" / "pruned" / "best.pt")

    given = _cls(tmp_path / "given", pretrain_weights=plain.baseline_path,
                 sensitivities_file=tmp_path / "sens.json", **PRUNING)
    assert _models(tmp_path / "given") == retrained  # the base model is the user's file
    assert given.pruned_path == tmp_path / "given" / "pruned" / "best.pt"
    assert given.baseline_path == plain.baseline_path
    for run in ("flow", "given"):
        assert (tmp_path / run / "report.json").is_file()

    # two steps into one save_dir (train, then prune what it trained) end in the one-call layout
    _cls(tmp_path / "steps")
    steps = _cls(tmp_path / "steps", pretrain_weights=tmp_path / "steps" / "baseline" / "best.pt",
                 sensitivities_file=tmp_path / "sens.json", **PRUNING)
    assert _models(tmp_path / "steps") == _models(tmp_path / "flow")
    assert steps.pruned_path == tmp_path / "steps" / "pruned" / "best.pt"


def test_segmentation_training_only_writes_the_baseline_stage(tmp_path):
    torch.manual_seed(0)
    r = seg.train("unet", "resnet18", train_data=Images(8, segmentation=True),
                  eval_data=Images(4, noise=False, segmentation=True), num_classes=3,
                  save_dir=tmp_path / "seg", **{**KW, "input_size": 32},
                  model_kwargs=dict(encoder_depth=3, decoder_channels=(16, 8, 4)))
    assert r.baseline_path == tmp_path / "seg" / "baseline" / "best.pt"
    assert _models(tmp_path / "seg") == {"baseline/best.pt", "baseline/last.pt",
                                         "baseline/train_state.pt"}


def test_a_save_dir_of_an_earlier_version_is_named_and_kept(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    old = {name: f"earlier {name}".encode() for name in ("best.pt", "last.pt", "train_state.pt")}
    for name, content in old.items():
        (run / name).write_bytes(content)
    r = _cls(run, resume=True)
    notes = [line for line in capsys.readouterr().out.splitlines()
             if "earlier autoprune" in line]
    assert notes == [
        f"[autoprune] {run} holds a training run of an earlier autoprune version (best.pt, "
        f"last.pt, train_state.pt at its top; runs now train into baseline/ and pruned/): it is "
        f"kept as it is and not used; pass pretrain_weights={run / 'best.pt'} to start from its "
        f"model or move best.pt, last.pt, train_state.pt into {run / 'baseline'}/ and rerun "
        f"with resume=True to continue it"]
    assert {name: (run / name).read_bytes() for name in old} == old  # never replaced
    assert r.baseline_path == run / "baseline" / "best.pt" and r.baseline_path.is_file()

    # its model may be the input of a run into the same save_dir (the run never writes there;
    # the advice taken, the line is not repeated)
    shutil.copyfile(r.baseline_path, run / "best.pt")
    pruned = _cls(run, pretrain_weights=run / "best.pt", sensitivities_file=tmp_path / "s.json",
                  **PRUNING)
    assert pruned.pruned_path == run / "pruned" / "best.pt" and pruned.pruned_path.is_file()
    assert "earlier autoprune" not in capsys.readouterr().out

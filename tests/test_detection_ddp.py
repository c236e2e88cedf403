"""Detection retraining under torchrun (2 gloo ranks on CPU): Ultralytics' trainer runs as a DDP
worker in each rank on the rank's own copy of the pruned module; rank 0 alone writes; the result
loads and has the single-process run's architecture; an interrupted run resumes under torchrun
from the CLI; settings that cannot work over several processes are refused in one line.
Tiny settings: YOLOv8n from YAML, 16 scenes at 64 px, 1 epoch per stage."""
import json
import sys
import types

import pytest
import torch
import yaml

import autoprune
from autoprune import detection as det
from autoprune.tasks.detection import DetectionAdapter
from autoprune.tasks.detection import models as yolo

from conftest import needs_fmnist, scenes_validated_on_train, torchrun

pytestmark = needs_fmnist

TRAIN_ARGS = dict(nbs=8, optimizer="AdamW", lr0=0.01, warmup_epochs=0, mosaic=0.0,
                  val=False)  # Ultralytics validates the last epoch only (saves 0.5 s an epoch)
SMALL = dict(input_size=64, batch_size=8, num_workers=0, device="cpu", progress=False,
             train_args=TRAIN_ARGS)
# a FLOPs target on the bundled profile prunes the same channels counts whatever the weights
PRUNE = dict(sensitivities_file="DEFAULT", pruned_flops=0.3, eval_limit=8)
DDP_LINE = "DistributedDataParallel over 2 processes (gloo), 4 images per process per step"

# every rank reports its model's shapes; rank 1 records each file it opens for writing,
# replaces or removes under save_dir (Python's audit hooks see every open, torch.save's too)
SCRIPT = '''
import json, os, sys
out, data, save_dir = sys.argv[1], sys.argv[2], os.path.abspath(sys.argv[3])
rank, writes = int(os.environ["RANK"]), []

def audit(event, args):
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        mode, flags = args[1], args[2]
        writing = any(c in mode for c in "wax+") if isinstance(mode, str) else \\
            bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
        paths = [args[0]] if writing else []
    elif event in ("os.rename", "os.replace", "os.remove", "os.truncate", "shutil.copyfile"):
        paths = [a for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))]
    else:
        return
    writes.extend(f"{event} {p}" for p in map(os.path.abspath, map(os.fsdecode, paths))
                  if p.startswith(save_dir))

if rank:
    sys.addaudithook(audit)
import torch
torch.set_num_threads(1)
from autoprune import detection as det
r = det.train("yolov8n.yaml", data, epochs=1, pretrain_epochs=1, save_dir=save_dir, **KWARGS)
seen = list(writes)
open(os.path.join(save_dir, f"probe{rank}.txt"), "w").close()  # the hook sees this one
# each rank validates on its own, a different number of times (as sensitivity points are)
from autoprune.tasks.detection import DetectionAdapter
adapter = DetectionAdapter(None, data, input_size=64, batch_size=8, device="cpu", progress=False)
maps = [adapter.evaluate(r.model)["map50"] for _ in range(rank + 1)]
json.dump({"shapes": {k: list(v.shape) for k, v in r.model.state_dict().items()},
           "writes": seen, "probe": writes[len(seen):], "maps": maps},
          open(f"{out}.{rank}.json", "w"))
'''


def _shapes(model: torch.nn.Module) -> dict:
    return {k: list(v.shape) for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def data_yaml(tmp_path_factory):
    return scenes_validated_on_train(tmp_path_factory.mktemp("scenes"), 16)


@pytest.fixture(scope="module")
def ddp_run(data_yaml, tmp_path_factory):
    """``det.train`` in a script under ``torchrun --nproc_per_node 2``: the base model trained,
    pruned by 30 % of its FLOPs, retrained, each stage as DDP over two gloo ranks."""
    tmp = tmp_path_factory.mktemp("ddp")
    script = tmp / "train.py"
    script.write_text(SCRIPT.replace("KWARGS", repr({**SMALL, **PRUNE})))
    stdout = torchrun([str(script), str(tmp / "out"), str(data_yaml), str(tmp / "run")])
    ranks = [json.loads((tmp / f"out.{r}.json").read_text()) for r in range(2)]
    return tmp / "run", ranks, stdout


def test_every_rank_retrains_the_pruned_model_and_rank1_writes_nothing(ddp_run):
    run, ranks, stdout = ddp_run
    assert stdout.count(DDP_LINE) == 2  # both stages trained as DDP, printed by rank 0 once
    assert stdout.count("[autoprune] baseline map50_95") == 1
    pruned = det.load_model(run / "pruned" / "best.pt")
    base = det.load_model(run / "baseline" / "best.pt")
    assert ranks[0]["shapes"] == ranks[1]["shapes"] == _shapes(pruned)  # every rank: pruned
    assert sum(p.numel() for p in pruned.parameters()) < \
        0.8 * sum(p.numel() for p in base.parameters())
    assert ranks[1]["writes"] == []
    assert ranks[1]["probe"] == [f"open {run / 'probe1.txt'}"]  # the hook did watch rank 1
    report = json.loads((run / "report.json").read_text())
    assert report["flops_reduction"] == pytest.approx(0.3, abs=0.01)
    rows = (run / "pruned" / "ultralytics" / "results.csv").read_text().strip().splitlines()
    assert len(rows) == 2  # header + the one epoch, written once
    assert yolo.load_ultralytics(run / "pruned" / "ultralytics" / "weights" / "best.pt") \
        .state_dict().keys() == pruned.state_dict().keys()


def test_each_rank_validates_on_its_own(ddp_run, data_yaml):
    """Ultralytics' validator, standalone in one rank while the other does something else, runs
    (under torchrun it would gather statistics from the other rank, which validates a different
    number of times, and pick a CUDA device on these CPU ranks) and gives the single-process
    figure (0 for this one-epoch model: what is checked is that it runs)."""
    run, ranks, _ = ddp_run
    adapter = DetectionAdapter(None, data_yaml, input_size=64, batch_size=8, device="cpu",
                               progress=False)
    expected = adapter.evaluate(det.load_model(run / "pruned" / "best.pt"))["map50"]
    assert ranks[0]["maps"] == pytest.approx([expected], abs=1e-6)
    assert ranks[1]["maps"] == pytest.approx([expected] * 2, abs=1e-6)


def test_architecture_equals_the_single_process_run(ddp_run, data_yaml, tmp_path):
    run, ranks, _ = ddp_run
    single = det.train(run / "baseline" / "best.pt", data_yaml, epochs=1,
                       save_dir=tmp_path / "single", **SMALL, **PRUNE)
    assert _shapes(single.model) == ranks[0]["shapes"]
    assert _shapes(det.load_model(single.pruned_path)) == ranks[0]["shapes"]


def test_interrupted_run_resumes_under_torchrun_from_the_cli(ddp_run, data_yaml, tmp_path,
                                                           monkeypatch):
    """Epoch 1 of 2 in one process, stopped right after it was saved; `torchrun -m autoprune
    train cfg.yaml --resume` finishes epoch 2 on two ranks, the pruned module kept."""
    run, ranks, _ = ddp_run
    model = det.load_model(run / "pruned" / "best.pt")
    adapter = DetectionAdapter(data_yaml, input_size=64, batch_size=8, device="cpu",
                               progress=False, train_args=TRAIN_ARGS)
    save_model = yolo.KeepModuleTrainer.save_model

    def save_then_stop(trainer):
        save_model(trainer)
        raise KeyboardInterrupt("simulated interruption")

    monkeypatch.setattr(yolo.KeepModuleTrainer, "save_model", save_then_stop)
    meta = {k: v for k, v in autoprune.read_pruned_metadata(run / "pruned" / "best.pt").items()
            if k in ("task", "arch", "build", "input_size", "pruned", "plan")}
    with pytest.raises(KeyboardInterrupt):
        adapter.fit(model, 2, tmp_path / "tune" / "baseline", meta=meta)  # training's stage
    monkeypatch.undo()
    cfg = {"task": "detection", "model": str(run / "pruned" / "best.pt"),
           "data": str(data_yaml), "epochs": 2, "save_dir": str(tmp_path / "tune"), **SMALL}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    stdout = torchrun(["-m", "autoprune", "train", str(tmp_path / "cfg.yaml"), "--resume"])
    assert "resuming" in stdout and stdout.count(DDP_LINE) == 1
    stage = tmp_path / "tune" / "baseline"
    rows = (stage / "ultralytics" / "results.csv").read_text().strip().splitlines()
    assert len(rows) == 3  # header + epoch 1 (one process) + epoch 2 (two ranks)
    assert _shapes(det.load_model(stage / "best.pt")) == ranks[0]["shapes"]


@pytest.mark.parametrize("settings, match", [
    (dict(batch_size=1), "batch_size=1 is the total over 2 processes: pass at least 2"),
    (dict(batch_size=-1), "AutoBatch"),
    (dict(sync_bn=True), "sync_bn=True needs CUDA GPUs"),
])
def test_settings_that_cannot_work_over_ranks_are_refused(settings, match, data_yaml, tmp_path,
                                                          monkeypatch):
    from autoprune.tasks.detection import training as det_training

    monkeypatch.setattr(det_training, "rank_and_world", lambda: (0, 2))
    with pytest.raises(autoprune.ConfigError, match=match) as e:
        det.train("yolov8n.yaml", data_yaml, epochs=1, save_dir=tmp_path / "out",
                  **{**SMALL, **settings})
    assert "\n" not in str(e.value) and not (tmp_path / "out" / "ultralytics").exists()


@pytest.mark.parametrize("device", [[0, 1], "0,1", "cuda:0,1"])
def test_several_devices_from_one_process_point_to_torchrun(device, data_yaml, tmp_path):
    with pytest.raises(autoprune.ConfigError, match="torchrun --nproc_per_node 2") as e:
        det.train("yolov8n.yaml", data_yaml, epochs=1, save_dir=tmp_path / "out",
                  **{**SMALL, "device": device})
    assert "\n" not in str(e.value)


def test_sync_bn_trainer_keeps_plain_batchnorm_in_checkpoints_and_module(data_yaml, tmp_path):
    """The swap to SyncBatchNorm (which trains as BatchNorm in one process) leaves the trained
    module and Ultralytics' checkpoints with BatchNorm2d, never SyncBatchNorm."""
    module = DetectionAdapter(nc=10).build("yolov8n")
    bns = [m for m in module.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    trainer = yolo.keep_module_trainer(module, sync_bn=True)(overrides={
        "model": "yolov8n.yaml", "data": str(data_yaml), "epochs": 1, "imgsz": 64, "batch": 8,
        "device": "cpu", "workers": 0, "project": str(tmp_path), "name": "u", "plots": False,
        "amp": False, "val": False, "verbose": False, **TRAIN_ARGS})
    with yolo.quiet():
        trainer.train()
    assert [m for m in module.modules() if isinstance(m, torch.nn.BatchNorm2d)] == bns
    assert not any(isinstance(m, torch.nn.SyncBatchNorm) for m in module.modules())
    assert bns[0].num_batches_tracked.item() == 2  # the original modules were trained
    net, _ = yolo.read_ultralytics(trainer.last)
    assert not any(isinstance(m, torch.nn.SyncBatchNorm) for m in net.modules())
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in net.modules())


def test_one_process_hides_torchrun_ranks_from_ultralytics(monkeypatch):
    from ultralytics.engine import validator
    from ultralytics.models.yolo.detect import val

    monkeypatch.setattr(validator, "RANK", 1)
    monkeypatch.setattr(val, "LOCAL_RANK", 1)
    with yolo.one_process():
        assert validator.RANK == -1 and val.LOCAL_RANK == -1
    assert validator.RANK == 1 and val.LOCAL_RANK == 1
    # a module imported after an earlier call is found too (the modules are scanned again)
    late = types.ModuleType("ultralytics.late_import_for_test")
    late.RANK = 1
    monkeypatch.setitem(sys.modules, late.__name__, late)
    with yolo.one_process():
        assert late.RANK == -1 and validator.RANK == -1
    assert late.RANK == 1


ISEG_SCRIPT = '''
import json, os, sys
import torch
torch.set_num_threads(1)
from autoprune import instance_segmentation as iseg
out, data, save_dir = sys.argv[1], sys.argv[2], sys.argv[3]
r = iseg.train("yolov8n-seg.yaml", data, epochs=1, pretrain_epochs=1, save_dir=save_dir, **KWARGS)
json.dump({"shapes": {k: list(v.shape) for k, v in r.model.state_dict().items()}},
          open(f"{out}.{os.environ['RANK']}.json", "w"))
'''


def test_instance_segmentation_retrains_its_pruned_model_under_torchrun(tmp_path):
    """The YOLO-seg task inherits detection's DDP trainer: both stages train over two gloo
    ranks, every rank ends holding the pruned model that was written."""
    from autoprune import instance_segmentation as iseg

    data = scenes_validated_on_train(tmp_path / "scenes", 16, task="segment")
    script = tmp_path / "train.py"
    script.write_text(ISEG_SCRIPT.replace("KWARGS", repr({**SMALL, **PRUNE})))
    stdout = torchrun([str(script), str(tmp_path / "out"), str(data), str(tmp_path / "run")])
    ranks = [json.loads((tmp_path / f"out.{r}.json").read_text()) for r in range(2)]
    assert stdout.count(DDP_LINE) == 2
    pruned = iseg.load_model(tmp_path / "run" / "pruned" / "best.pt")
    base = iseg.load_model(tmp_path / "run" / "baseline" / "best.pt")
    assert ranks[0]["shapes"] == ranks[1]["shapes"] == _shapes(pruned)
    assert sum(p.numel() for p in pruned.parameters()) < \
        sum(p.numel() for p in base.parameters())

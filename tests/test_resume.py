"""Resuming interrupted training (classification, segmentation, the one-call flow): a run stopped
mid-epoch and resumed with ``resume=True`` ends with the same weights as an uninterrupted run.

The "crash" is a KeyboardInterrupt raised by the training data after a given number of reads, in
the middle of an epoch, exactly where a Ctrl-C or a killed process would leave the run: the files
on disk are what the last finished epoch wrote. Tiny synthetic data, 32 px, CPU."""
import pytest
import torch

import autoprune
from autoprune import classification as cls
from autoprune import segmentation as seg
from autoprune.engine.checkpoint import read_pruned_metadata, read_state_dict
from autoprune.flow.training import STATE_FILE

from conftest import Images

N, BATCH = 48, 16  # 3 batches per epoch


def _cls(save_dir, train_data, **kw):
    args = dict(num_classes=4, epochs=2, batch_size=BATCH, lr=0.05, save_dir=save_dir,
                input_size=32, seed=3, progress=False)
    return cls.train("resnet18", train_data, Images(32, noise=False), **{**args, **kw})


def _seg(save_dir, train_data, **kw):
    args = dict(num_classes=3, epochs=2, batch_size=BATCH, save_dir=save_dir, input_size=32,
                seed=3, progress=False)
    return seg.train("unet", "resnet18", train_data=train_data,
                     eval_data=Images(8, noise=False, segmentation=True), **{**args, **kw})


def assert_same_weights(a, b):
    a = a if isinstance(a, dict) else read_state_dict(a)
    b = b if isinstance(b, dict) else read_state_dict(b)
    assert list(a) == list(b)
    for k in a:
        assert torch.equal(a[k], b[k]), k


def _crash_then_resume(run, tmp_path, crash_after, **kw):
    """Run until the data raises mid-epoch, check what is on disk, then resume."""
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "resumed", Images(crash_after=crash_after, **kw))
    return run(tmp_path / "resumed", Images(**kw), resume=True)


def test_classification_resume_mid_training_equals_uninterrupted(tmp_path, capsys):
    straight = _cls(tmp_path / "straight", Images())
    # epoch 1 reads N images; the crash comes in the middle of epoch 2
    with pytest.raises(KeyboardInterrupt):
        _cls(tmp_path / "resumed", Images(crash_after=N + BATCH + 3))
    state = torch.load(tmp_path / "resumed" / "baseline" / STATE_FILE, weights_only=True)
    assert len(state["history"]) == 1 and state["epochs"] == 2
    assert read_pruned_metadata(tmp_path / "resumed" / "baseline" / "last.pt")["epoch"] == 1
    capsys.readouterr()

    resumed = _cls(tmp_path / "resumed", Images(), resume=True)
    assert "resuming" in capsys.readouterr().out
    assert read_pruned_metadata(tmp_path / "resumed" / "baseline" / "last.pt")["epoch"] == 2
    for name in ("last.pt", "best.pt"):
        assert_same_weights(tmp_path / "straight" / "baseline" / name,
                            tmp_path / "resumed" / "baseline" / name)
    assert_same_weights(straight.model.state_dict(), resumed.model.state_dict())
    assert not list((tmp_path / "resumed").rglob("*.tmp")), "a temporary file was left behind"


def test_finished_run_is_not_trained_again_and_settings_must_match(tmp_path, monkeypatch):
    first = _cls(tmp_path / "run", Images(), epochs=1)
    monkeypatch.setattr("autoprune.flow.training.keep_best.fit",
                        lambda *a, **k: pytest.fail("trained again"))
    again = _cls(tmp_path / "run", Images(), epochs=1, resume=True)
    assert_same_weights(first.model.state_dict(), again.model.state_dict())
    with pytest.raises(autoprune.ConfigError, match="resume=True with epochs=2 but the run in .* "
                                                    "started with epochs=1: resume with epochs=1"):
        _cls(tmp_path / "run", Images(), epochs=2, resume=True)  # args.yaml says 1 epoch
    (tmp_path / "run" / "args.yaml").unlink()  # a run of an earlier version: its train_state
    with pytest.raises(autoprune.ConfigError, match="is from a run of 1 epoch x 3 batches, "
                                                    "this one has 2 epochs x 3 batches"):
        _cls(tmp_path / "run", Images(), epochs=2, resume=True)


def test_a_run_started_over_drops_the_old_state(tmp_path):
    _cls(tmp_path / "run", Images(), epochs=1)
    with pytest.raises(KeyboardInterrupt):  # started over without resume, stopped in epoch 1
        _cls(tmp_path / "run", Images(crash_after=BATCH + 3), epochs=1)
    assert not (tmp_path / "run" / "baseline" / STATE_FILE).exists(), \
        "resume would skip the new run"


def test_resume_without_state_starts_from_scratch(tmp_path):
    r = _cls(tmp_path / "new", Images(), epochs=1, resume=True)
    assert r.baseline_path.is_file() and (tmp_path / "new" / "baseline" / STATE_FILE).is_file()


def test_segmentation_resume_mid_training_equals_uninterrupted(tmp_path):
    straight = _seg(tmp_path / "straight", Images(segmentation=True))
    resumed = _crash_then_resume(_seg, tmp_path, N + BATCH + 3, segmentation=True)
    for name in ("last.pt", "best.pt"):
        assert_same_weights(tmp_path / "straight" / "baseline" / name,
                            tmp_path / "resumed" / "baseline" / name)
    assert_same_weights(straight.model.state_dict(), resumed.model.state_dict())


def test_one_call_flow_skips_the_finished_stage_and_resumes_the_pruned_one(tmp_path, capsys):
    # a FLOPs target always prunes (whether a group of this barely trained model stays within a
    # tolerated loss is luck)
    flow = dict(pruned_flops=0.3, ratios=(0.5,), pretrain_epochs=2)

    def run(save_dir, data, **kw):
        return _cls(save_dir, data, sensitivities_file=save_dir / "s.json", **flow, **kw)

    straight = run(tmp_path / "straight", Images())
    assert straight.ratios and any(r > 0 for r in straight.ratios.values())
    # baseline: 2 epochs, pruned: 1 epoch, then a crash in the pruned model's epoch 2
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "resumed", Images(crash_after=3 * N + BATCH + 3))
    baseline_state = (tmp_path / "resumed" / "baseline" / STATE_FILE).stat().st_mtime_ns
    capsys.readouterr()
    resumed = run(tmp_path / "resumed", Images(), resume=True)
    out = capsys.readouterr().out
    assert "baseline already finished its 2 epochs" in out
    assert "resuming" in out and "pruned after epoch 1/2" in out
    assert (tmp_path / "resumed" / "baseline" / STATE_FILE).stat().st_mtime_ns == baseline_state
    for name in ("baseline/best.pt", "pruned/last.pt", "pruned/best.pt"):
        assert_same_weights(tmp_path / "straight" / name, tmp_path / "resumed" / name)
    assert resumed.report["pruned"]["flops"] == straight.report["pruned"]["flops"]
    assert_same_weights(straight.model.state_dict(), resumed.model.state_dict())


def test_resume_with_loader_workers_equals_uninterrupted(tmp_path, monkeypatch):
    """With ``num_workers=2`` the augmentation noise is drawn in the workers: each epoch's
    workers are seeded from the restored loader generator, so a run stopped after epoch 1 and
    resumed in a new set of workers draws what the uninterrupted run drew."""
    straight = _cls(tmp_path / "straight", Images(), num_workers=2)
    from autoprune.flow.training import keep_best as training

    real_save, saves = training._atomic_save, []

    def save_then_stop(obj, path):  # the process dies right after epoch 1's state is written
        real_save(obj, path)
        saves.append(path)
        if str(path).endswith(STATE_FILE):
            raise KeyboardInterrupt("simulated kill after epoch 1")

    monkeypatch.setattr(training, "_atomic_save", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        _cls(tmp_path / "resumed", Images(), num_workers=2)
    monkeypatch.setattr(training, "_atomic_save", real_save)
    resumed = _cls(tmp_path / "resumed", Images(), num_workers=2, resume=True)
    for name in ("last.pt", "best.pt"):
        assert_same_weights(tmp_path / "straight" / "baseline" / name,
                            tmp_path / "resumed" / "baseline" / name)
    assert_same_weights(straight.model.state_dict(), resumed.model.state_dict())

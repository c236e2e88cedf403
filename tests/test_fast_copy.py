"""engine.fast_copy.fast_deepcopy: what copy.deepcopy gives (independent tensors, shared modules and
tied weights kept shared, a bound forward bound to the copy, other attributes deep-copied), so the
evaluation's fusing, the timer's candidates and Ultralytics' checkpoints never
touch the original."""
import copy

import pytest
import torch
import torch.nn as nn
from torch.nn.utils import parametrizations

from autoprune.engine.fast_copy import fast_copies_in, fast_deepcopy
from conftest import ToyNet


def _outputs(model, x):
    model.eval()
    with torch.no_grad():
        return model(x)


def test_copy_equals_the_model_and_owns_its_tensors():
    torch.manual_seed(0)
    model = ToyNet()
    model.stem[0].weight.grad = torch.ones_like(model.stem[0].weight)
    model.stem[1].weight.requires_grad_(False)
    new = fast_deepcopy(model)
    assert type(new) is ToyNet and new is not model
    x = torch.rand(2, 3, 32, 32)
    assert torch.equal(_outputs(model, x), _outputs(new, x))
    for (name, a), (same, b) in zip(model.state_dict().items(), new.state_dict().items()):
        assert name == same and torch.equal(a, b) and a.data_ptr() != b.data_ptr()
    assert isinstance(new.stem[0].weight, nn.Parameter) and new.stem[0].weight.grad is None
    assert not new.stem[1].weight.requires_grad and new.stem[0].weight.requires_grad
    with torch.no_grad():  # changing the copy leaves the model alone
        for p in new.parameters():
            p.zero_()
        new.stem[1].running_mean.fill_(7.0)
    assert all(p.abs().sum() > 0 for p in model.parameters() if p.dim() > 1)
    assert not torch.equal(model.stem[1].running_mean, new.stem[1].running_mean)
    new.stem[0] = nn.Identity()
    assert isinstance(model.stem[0], nn.Conv2d)


def test_shared_modules_tied_weights_and_attributes_as_deepcopy_keeps_them():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Linear(4, 4)
            self.head = nn.Linear(4, 4)
            self.head.weight = self.embed.weight          # tied weight
            self.twice = nn.Sequential(self.embed, self.embed)  # one module used twice
            self.scales = [torch.ones(2), {"k": torch.zeros(1)}]  # tensors in a plain list
            self.order = (1, "a")
            self.forward = self.fast                       # a forward set on the instance

        def fast(self, x):
            return self.head(self.twice(x)) + self.scales[0].sum()

    model = Tied()
    new = fast_deepcopy(model)
    assert new.head.weight is new.embed.weight and new.head.weight is not model.embed.weight
    assert new.twice[0] is new.twice[1] is new.embed
    assert new.forward.__self__ is new          # bound to the copy, not to the model
    new.scales[0].fill_(3.0)
    new.scales[1]["k"] += 1
    assert model.scales[0].sum() == 2 and model.scales[1]["k"] == 0
    x = torch.rand(1, 4)
    assert torch.equal(model(x), copy.deepcopy(model)(x))
    with torch.no_grad():
        assert torch.allclose(new(x), model(x) + 4.0)


def test_fusing_the_copy_leaves_the_model_unfused():
    """The detection evaluation fuses its copy (Ultralytics' fuse reassigns parameters, deletes
    BatchNorms and sets forward on the instance): the model keeps its layers and outputs."""
    from autoprune.tasks.detection import DetectionAdapter

    torch.manual_seed(0)
    model = DetectionAdapter(nc=3, input_size=64).build("yolov8n").eval()
    x = torch.rand(1, 3, 64, 64)
    before = _outputs(model, x)[0]
    bns = sum(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    fused = fast_deepcopy(model)
    fused.fuse(verbose=False)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in fused.modules())
    assert sum(isinstance(m, nn.BatchNorm2d) for m in model.modules()) == bns
    assert "forward" not in vars(model.model[0])
    assert torch.equal(_outputs(model, x)[0], before)
    assert torch.allclose(_outputs(fused, x)[0], before, atol=1e-3)
    again = fast_deepcopy(fused)  # a fused model copies too, its forward bound to the copy
    assert vars(again.model[0])["forward"].__self__ is again.model[0]
    assert torch.equal(_outputs(again, x)[0], _outputs(fused, x)[0])


def test_a_module_with_its_own_copy_protocol_goes_through_deepcopy():
    conv = parametrizations.weight_norm(nn.Conv2d(3, 4, 3))
    model = nn.Sequential(conv, nn.ReLU())
    new = fast_deepcopy(model)
    x = torch.rand(1, 3, 8, 8)
    assert torch.equal(_outputs(model, x), _outputs(new, x))
    assert new[0].parametrizations.weight.original0 is not conv.parametrizations.weight.original0


@pytest.mark.parametrize("bad", [torch.rand(2, requires_grad=True) * 2])
def test_a_non_leaf_tensor_attribute_fails_as_deepcopy_does(bad):
    model = nn.Linear(2, 2)
    model.cache = bad
    with pytest.raises(RuntimeError):
        copy.deepcopy(model)
    with pytest.raises(RuntimeError):
        fast_deepcopy(model)


def test_an_optimizer_state_copies_as_deepcopy_copies_it():
    """Ultralytics' checkpoint deep-copies the optimizer's state (nested dicts and lists of
    tensors): the fast copy equals deepcopy's and owns its tensors."""
    model = ToyNet()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    model(torch.rand(2, 3, 32, 32)).sum().backward()
    opt.step()
    state = opt.state_dict()
    new, slow = fast_deepcopy(state), copy.deepcopy(state)
    assert new["param_groups"] == slow["param_groups"]
    assert new["param_groups"][0]["params"] is not state["param_groups"][0]["params"]
    for i, entry in state["state"].items():
        for key, value in entry.items():
            assert torch.equal(new["state"][i][key], slow["state"][i][key])
            assert new["state"][i][key].data_ptr() != value.data_ptr()


def test_ultralytics_saves_checkpoints_through_the_fast_copy_and_gets_its_own_back():
    from ultralytics.engine import trainer as ultralytics_trainer

    original = ultralytics_trainer.deepcopy
    assert original is copy.deepcopy
    with fast_copies_in(ultralytics_trainer):
        patched = ultralytics_trainer.deepcopy
        assert patched is not original
        model = ToyNet()
        twin = patched(model)
        assert torch.equal(twin.stem[0].weight, model.stem[0].weight)
        assert twin.stem[0].weight.data_ptr() != model.stem[0].weight.data_ptr()
    assert ultralytics_trainer.deepcopy is original
    with pytest.raises(KeyError), fast_copies_in(ultralytics_trainer):
        raise KeyError("an interrupted save")
    assert ultralytics_trainer.deepcopy is original


def test_torch_pruning_counts_flops_on_a_fast_copy_and_keeps_its_copy_module(monkeypatch):
    """count_flops: torch-pruning's counter (which ``import copy``) copies the model through
    fast_deepcopy, counts what it counted before, leaves the model without its hooks and gets
    its own ``copy`` module back, an error included."""
    from torch_pruning.utils import op_counter

    from autoprune.engine import fast_copy
    from autoprune.engine.measure import count_flops

    calls = []
    real = fast_copy.fast_deepcopy
    monkeypatch.setattr(fast_copy, "fast_deepcopy", lambda v: calls.append(type(v)) or real(v))
    model, x = ToyNet().eval(), torch.randn(1, 3, 32, 32)
    want = int(op_counter.count_ops_and_params(copy.deepcopy(model), x)[0])
    assert count_flops(model, x) == want and calls == [ToyNet]
    assert op_counter.copy is copy and not hasattr(model, "__flops__")
    assert all(not m._forward_hooks for m in model.modules())
    with pytest.raises(KeyError), fast_copies_in(op_counter):
        assert op_counter.copy is not copy and op_counter.copy.deepcopy(model) is not model
        assert op_counter.copy.copy is copy.copy
        raise KeyError("an interrupted count")
    assert op_counter.copy is copy

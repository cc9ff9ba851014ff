"""The five torchvision-style models, converted against original: one training step, same loss, same gradients,
same updated parameters; NCHW and channels_last; eager, and compiled for one model."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

import poolgrad.torch as pt  # noqa: E402
from poolgrad.torch.models import MODELS  # noqa: E402

# Small inputs keep the suite fast; every pooling layer still sees a plane of at least 2x2.
BATCH, SIZE, CLASSES = 2, 64, 10


@pytest.fixture
def deterministic():
    """PyTorch's deterministic mode (and so poolgrad's) for bitwise comparisons, restored afterwards."""
    old = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(old)


def _build(name: str, channels_last: bool, dtype: torch.dtype = torch.float32):
    torch.manual_seed(0)
    model = MODELS[name](num_classes=CLASSES).to(dtype)
    x = torch.randn(BATCH, 3, SIZE, SIZE, dtype=dtype)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    return model, x, torch.arange(BATCH) % CLASSES


def _train_step(model: torch.nn.Module, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, dict, dict]:
    """Loss, parameter gradients and parameters after one SGD step (dropout seeded alike for every model)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    torch.manual_seed(1)
    loss = F.cross_entropy(model(x), target)
    loss.backward()
    # A compiled module names its parameters "_orig_mod.<name>".
    grads = {n.removeprefix("_orig_mod."): p.grad.clone() for n, p in model.named_parameters()}
    opt.step()
    return loss.detach(), grads, {n.removeprefix("_orig_mod."): p.detach().clone()
                                  for n, p in model.named_parameters()}


def _assert_converted(model: torch.nn.Module) -> None:
    kinds = {type(m) for m in model.modules()}
    assert not kinds & {torch.nn.MaxPool2d, torch.nn.AvgPool2d, torch.nn.AdaptiveMaxPool2d}
    assert kinds & {pt.MaxPool2d, pt.AvgPool2d}


BITWISE = ["resnet18", "vgg11", "googlenet", "squeezenet1_1"]


@pytest.mark.parametrize("channels_last", [False, True], ids=["NCHW", "channels_last"])
@pytest.mark.parametrize("name", BITWISE)
def test_max_pooling_models_train_bitwise_alike(name, channels_last, deterministic):
    """Max pooling selects and its gradient is a scatter summed in PyTorch's order: the step is bit for bit
    PyTorch's (in PyTorch's deterministic mode, so that its own result is reproducible)."""
    model, x, target = _build(name, channels_last)
    conv = pt.convert(model)
    _assert_converted(conv)
    loss_a, grads_a, params_a = _train_step(model, x, target)
    loss_b, grads_b, params_b = _train_step(conv, x, target)
    assert torch.equal(loss_a, loss_b)
    for n in grads_a:
        assert torch.equal(grads_a[n], grads_b[n]), n
        assert torch.equal(params_a[n], params_b[n]), n


@pytest.mark.parametrize("channels_last", [False, True], ids=["NCHW", "channels_last"])
def test_densenet_trains_alike_within_float32_error(channels_last):
    """DenseNet's 2x2 average pools sum in another order than PyTorch's, and 120 batch norms over a batch of 2
    amplify a last-bit difference, so float32's own error is the yardstick: the converted model may not be
    further from a float64 run of the original than the float32 original is (with a margin of 2)."""
    model, x, target = _build("densenet121", channels_last)
    ref = copy.deepcopy(model).double()
    conv = pt.convert(model)
    loss_a, grads_a, _ = _train_step(model, x, target)
    loss_b, grads_b, _ = _train_step(conv, x, target)
    loss_r, grads_r, _ = _train_step(ref, x.double(), target)

    def rel(grads: dict) -> float:
        return max(((grads[n].double() - grads_r[n]).norm() / grads_r[n].norm()).item() for n in grads_r)

    assert abs(loss_b.double() - loss_r) <= 2 * abs(loss_a.double() - loss_r) + 1e-6
    assert rel(grads_b) <= 2 * rel(grads_a) + 1e-6
    # No absolute bound: how far float32 lands from float64 here depends on PyTorch's own reduction order (its
    # thread count, set by earlier tests), and the float32 original itself measured 0.05-0.1 away.


def test_compiled_converted_model_trains_like_the_original():
    """torch.compile(fullgraph=True) with inductor on a converted SqueezeNet 1.1 in channels_last."""
    torch._dynamo.reset()
    model, x, target = _build("squeezenet1_1", channels_last=True)
    conv = pt.convert(model)
    # fallback_random: inductor draws the dropout mask with PyTorch's eager generator, so both steps drop the
    # same units.
    with torch._inductor.config.patch(fallback_random=True):
        compiled = torch.compile(conv, fullgraph=True)
        loss_a, grads_a, params_a = _train_step(model, x, target)
        loss_b, grads_b, params_b = _train_step(compiled, x, target)
    # Inductor fuses the convolutions' epilogues (other rounding), so float32 tolerances, not bits.
    torch.testing.assert_close(loss_b, loss_a, rtol=1e-4, atol=1e-5)
    for n in grads_a:
        scale = grads_a[n].abs().max().item() + 1e-12
        torch.testing.assert_close(grads_b[n], grads_a[n], rtol=1e-3, atol=1e-3 * scale)
        torch.testing.assert_close(params_b[n], params_a[n], rtol=1e-4, atol=1e-5)

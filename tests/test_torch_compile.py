"""poolgrad.torch under torch.compile(fullgraph=True) and torch.export.

Inductor compiles C++ with the system compiler, which is slow on a small machine, so inductor runs once here
(a small converted network, forward and backward) and the other cases use the ``aot_eager`` backend, which traces
the same graphs through the fake kernels and autograd formulas but runs them eagerly.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

import poolgrad.torch as pt  # noqa: E402
from test_torch_ops import _spy, assert_torch_settings_reach_poolgrad  # noqa: E402  (tests/ is on sys.path)

FNS = [
    ("max", lambda x: pt.max_pool2d(x, 3, 2, 1)),
    ("max_ceil_dil", lambda x: pt.max_pool2d(x, 3, 2, 1, dilation=2, ceil_mode=True)),
    ("avg", lambda x: pt.avg_pool2d(x, 3, 2, 1, count_include_pad=False)),
    ("adaptive", lambda x: pt.adaptive_max_pool2d(x, (4, None))),
]


def _pooled_net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
                         nn.Conv2d(8, 8, 3, padding=1), nn.AvgPool2d(2, ceil_mode=True),
                         nn.AdaptiveMaxPool2d((3, 2)), nn.Flatten(), nn.Linear(48, 5))


@pytest.mark.parametrize("fmt,dynamic", [("contiguous", False), ("channels_last", False), ("3d", False),
                                        ("contiguous", True)], ids=["contiguous", "channels_last", "3d", "dynamic"])
@pytest.mark.parametrize("name,fn", FNS, ids=[f[0] for f in FNS])
def test_fullgraph_aot_eager_matches_eager(name, fn, fmt, dynamic):
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager", dynamic=dynamic)
    for shape in ((2, 3, 13, 11), (3, 2, 10, 12)):                  # a second shape: a retrace or a symbolic one
        x = torch.randn(shape[1:] if fmt == "3d" else shape, dtype=torch.float64)
        if fmt == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        ya, yb = fn(xa), compiled(xb)
        assert torch.equal(ya, yb) and ya.stride() == yb.stride()
        g = torch.randn_like(ya)
        ya.backward(g)
        yb.backward(g)
        assert torch.equal(xa.grad, xb.grad) and xa.grad.stride() == xb.grad.stride()


def test_fullgraph_inductor_converted_net():
    """Inductor: the custom operators are extern kernels whose output strides it checks against the fake ones
    (channels-last through inductor: tests/test_torch_models.py)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = _pooled_net()
    conv = pt.convert(net)
    compiled = torch.compile(conv, fullgraph=True)
    for fmt in (torch.contiguous_format,):
        x = torch.randn(2, 3, 16, 16).contiguous(memory_format=fmt)
        ya, yb = net(x), compiled(x)
        torch.testing.assert_close(yb, ya, rtol=1e-5, atol=1e-6)
        ga = torch.autograd.grad(ya.square().sum(), list(net.parameters()))
        gb = torch.autograd.grad(yb.square().sum(), list(conv.parameters()))
        for a, b in zip(ga, gb):
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


def test_compiled_graph_reads_threads_and_determinism_at_run_time(monkeypatch):
    calls = _spy(monkeypatch, "max_pool2d_with_indices_backward")
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: pt.max_pool2d(t, 2).sum(), fullgraph=True, backend="aot_eager")
    assert_torch_settings_reach_poolgrad(((1, False), (3, True)),
                                         lambda: compiled(torch.randn(1, 2, 8, 8, requires_grad=True)).backward(),
                                         lambda: calls[-1][1])


def test_traced_invalid_parameters_fail_with_poolgrads_message():
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: pt.avg_pool2d(t, 2, 1, 2), fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match="padding"):
        compiled(torch.randn(1, 2, 8, 8))


def test_export_converted_net():
    torch.manual_seed(0)
    net = _pooled_net()
    conv = pt.convert(net)
    x = torch.randn(2, 3, 16, 16)
    ep = torch.export.export(conv, (x,))
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert {"poolgrad.max_pool2d_with_indices.default", "poolgrad.avg_pool2d.default",
            "poolgrad.adaptive_max_pool2d.default"} <= targets
    assert not any("aten.max_pool2d" in t or "aten.avg_pool2d" in t for t in targets)
    x2 = torch.randn(2, 3, 16, 16)
    torch.testing.assert_close(ep.module()(x2), net(x2))
    # The exported program's own forward and its backward through the custom operators.
    xg = x2.clone().requires_grad_()
    ep.module()(xg).sum().backward()
    xr = x2.clone().requires_grad_()
    net(xr).sum().backward()
    torch.testing.assert_close(xg.grad, xr.grad)

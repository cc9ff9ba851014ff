"""poolgrad.torch: parity with torch.nn.functional, modules, convert(), autograd, errors, threads, determinism."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import poolgrad as pg  # noqa: E402
import poolgrad.torch as pt  # noqa: E402

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
DTYPE_IDS = ["f32", "f64", "f16", "bf16"]

# (name, poolgrad function, torch function, positional args, keyword args)
CASES = [
    ("max_k3s2p1", pt.max_pool2d, F.max_pool2d, (3, 2, 1), {}),
    ("max_k2", pt.max_pool2d, F.max_pool2d, (2,), {}),
    ("max_dil_ceil", pt.max_pool2d, F.max_pool2d, ((3, 2), (2, 1), (1, 0), (2, 1), True), {}),
    ("avg_k3s2p1", pt.avg_pool2d, F.avg_pool2d, (3, 2, 1), {}),
    ("avg_ceil_nopad", pt.avg_pool2d, F.avg_pool2d, (3, 2, 1), {"ceil_mode": True, "count_include_pad": False}),
    ("avg_divisor", pt.avg_pool2d, F.avg_pool2d, (2,), {"divisor_override": 3}),
    ("adaptive_4_none", pt.adaptive_max_pool2d, F.adaptive_max_pool2d, ((4, None),), {}),
    ("adaptive_3x5", pt.adaptive_max_pool2d, F.adaptive_max_pool2d, ((3, 5),), {}),
    ("adaptive_grow", pt.adaptive_max_pool2d, F.adaptive_max_pool2d, (12,), {}),
]
CASE_IDS = [c[0] for c in CASES]

# Layouts: (rank, how the input is stored)
LAYOUTS = [(4, "contiguous"), (4, "channels_last"), (4, "sliced"), (3, "contiguous"), (3, "transposed")]
LAYOUT_IDS = [f"{r}d-{k}" for r, k in LAYOUTS]


def _tolerance(dtype: torch.dtype) -> dict:
    """Tolerances against a float64 reference rounded to ``dtype`` (poolgrad adds in float32 and rounds once)."""
    return {torch.float64: dict(rtol=1e-12, atol=1e-12), torch.float32: dict(rtol=1e-5, atol=1e-6),
            torch.float16: dict(rtol=1e-3, atol=1e-4), torch.bfloat16: dict(rtol=8e-3, atol=1e-3)}[dtype]


def _make_input(rank: int, kind: str, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if rank == 4:
        x = torch.randn(2, 3, 9, 11, generator=g, dtype=torch.float64)
    else:
        x = torch.randn(3, 9, 11, generator=g, dtype=torch.float64)
    x = x.to(dtype)
    if kind == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    elif kind == "sliced":
        x = torch.cat([x, x], dim=1)[:, ::2]                        # every other channel: not dense
    elif kind == "transposed":
        x = x.transpose(1, 2).contiguous().transpose(1, 2)          # W-major storage of a (C, H, W) view
    return x


def _first(out):
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("rank,kind", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_values_and_gradients_match_torch(case, rank, kind, dtype):
    """Forward values (and indices) and input gradients against torch.nn.functional computed in float64."""
    _, ours, theirs, args, kwargs = case
    x = _make_input(rank, kind, dtype)
    xp = x.detach().clone(memory_format=torch.preserve_format).requires_grad_()
    x64 = x.detach().double().requires_grad_()
    y = ours(xp, *args, **kwargs)
    y64 = theirs(x64, *args, **kwargs)
    assert y.dtype == dtype and y.shape == y64.shape
    torch.testing.assert_close(y.double(), y64.to(dtype).double(), **_tolerance(dtype))
    if theirs is not F.avg_pool2d:
        # Max pooling selects: the values are exact and the indices PyTorch's own, in every dtype.
        kw = dict(kwargs, return_indices=True)
        yo, io = ours(x, *args, **kw)
        yt, it = theirs(x, *args, **kw)
        assert torch.equal(yo, yt) and torch.equal(io, it)
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    y.backward(g)
    y64.backward(g.double())
    assert xp.grad.dtype == dtype and xp.grad.shape == x.shape
    torch.testing.assert_close(xp.grad.double(), x64.grad.to(dtype).double(), **_tolerance(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_memory_format_follows_input(case, dtype):
    """Outputs and gradients have PyTorch's strides: channels-last in, channels-last out."""
    _, ours, theirs, args, kwargs = case
    for fmt in (torch.contiguous_format, torch.channels_last):
        x = _make_input(4, "contiguous", dtype).contiguous(memory_format=fmt)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        ya, yb = _first(ours(xa, *args, **kwargs)), _first(theirs(xb, *args, **kwargs))
        assert ya.stride() == yb.stride()
        assert ya.is_contiguous(memory_format=fmt)
        ya.sum().backward()                                 # a stride-0 (expanded) gradient goes in
        yb.sum().backward()
        assert xa.grad.stride() == xb.grad.stride()
        assert xa.grad.is_contiguous(memory_format=fmt)


def test_integer_tensors_go_to_torch():
    x = torch.randint(-50, 50, (2, 3, 8, 8))
    assert torch.equal(pt.max_pool2d(x, 3, 2, 1), F.max_pool2d(x, 3, 2, 1))
    assert torch.equal(pt.avg_pool2d(x, 2), F.avg_pool2d(x, 2))
    with pytest.raises(NotImplementedError):               # PyTorch's own answer, unchanged
        pt.adaptive_max_pool2d(x, 3)


def _spy(monkeypatch, name: str) -> list:
    """Record the arguments every call of ``poolgrad.<name>`` receives (the call still runs)."""
    calls = []
    real = getattr(pg, name)

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(pg, name, spy)
    return calls


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


@pytest.mark.parametrize("fmt", ["contiguous", "channels_last"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "f16", "f32"])
def test_tensors_reach_poolgrad_as_views(monkeypatch, dtype, fmt):
    """No copy on the way in (bfloat16 included), none on the way out."""
    fwd = _spy(monkeypatch, "max_pool2d_with_indices")
    bwd = _spy(monkeypatch, "max_pool2d_with_indices_backward")
    x = torch.randn(2, 4, 10, 10).to(dtype)
    if fmt == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    x.requires_grad_()
    y = pt.max_pool2d(x, 2)
    arr = fwd[0][0][0]
    assert _address(arr) == x.data_ptr()
    assert fwd[0][1]["layout"] == ("NHWC" if fmt == "channels_last" else "NCHW")
    assert arr.dtype == (np.dtype(pg.bfloat16) if dtype == torch.bfloat16 else np.dtype(str(dtype).split(".")[1]))
    g = torch.ones_like(y)
    y.backward(g)
    go_arr, x_arr = bwd[0][0][:2]
    assert _address(go_arr) == g.data_ptr() and _address(x_arr) == x.data_ptr()


def assert_torch_settings_reach_poolgrad(settings, backward, last_kwargs) -> None:
    """For each (threads, deterministic) of ``settings``: set both in PyTorch, run ``backward()``, and check that
    the poolgrad call it made (``last_kwargs()``: its keyword arguments) got both; PyTorch's own settings are
    restored afterwards.  Shared with tests/test_torch_compile.py."""
    old_threads, old_det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    try:
        for threads, det in settings:
            torch.set_num_threads(threads)
            torch.use_deterministic_algorithms(det)
            backward()
            kwargs = last_kwargs()
            assert kwargs["num_threads"] == threads and kwargs["deterministic"] is det
    finally:
        torch.set_num_threads(old_threads)
        torch.use_deterministic_algorithms(old_det)


def test_thread_count_and_determinism_come_from_torch(monkeypatch):
    calls = _spy(monkeypatch, "avg_pool2d_backward")
    assert_torch_settings_reach_poolgrad(
        ((1, True), (2, False)),
        lambda: pt.avg_pool2d(torch.randn(1, 2, 6, 6, requires_grad=True), 2).sum().backward(),
        lambda: calls[-1][1])


_ONE_RUNTIME = """
import sys
first, second = sys.argv[1:]
__import__(first); __import__(second)
import numpy as np, torch, poolgrad
poolgrad.avg_pool2d(np.ones((2, 4, 64, 64), np.float32), 2, num_threads=2)
torch.nn.functional.avg_pool2d(torch.ones(2, 4, 64, 64), 2)
print(sorted({line.split()[-1] for line in open("/proc/self/maps") if "libgomp" in line}))
"""


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/maps"), reason="reads /proc/self/maps (Linux)")
@pytest.mark.parametrize("first", ["torch", "poolgrad"])
def test_one_openmp_runtime_with_torch(first):
    """poolgrad's kernels and PyTorch's share one OpenMP runtime, whichever is imported first (both need the
    soname libgomp.so.1; the loader reuses the one already loaded): one thread pool, no second team of threads
    spinning against PyTorch's between operators."""
    import subprocess
    import sys
    if pg.get_config().get("openmp") is False:
        pytest.skip("serial build")
    second = "poolgrad" if first == "torch" else "torch"
    out = subprocess.run([sys.executable, "-c", _ONE_RUNTIME, first, second], capture_output=True, text=True,
                         timeout=120, check=True).stdout.strip().splitlines()[-1]
    assert len(eval(out)) == 1, out


@pytest.mark.parametrize("fn", [lambda x: pt.max_pool2d(x, 3, 1, 1), lambda x: pt.adaptive_max_pool2d(x, 100)],
                         ids=["max", "adaptive"])
def test_deterministic_mode_is_bitwise_identical_for_every_thread_count(fn):
    """One plane, fewer planes than threads: the case where the nondeterministic mode may use atomics."""
    old_threads, old_det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    x = torch.randn(1, 1, 256, 256)
    g = torch.randn_like(fn(x))
    grads = []
    try:
        torch.use_deterministic_algorithms(True)
        for threads in (1, 2, 3, 4):
            torch.set_num_threads(threads)
            xg = x.clone().requires_grad_()
            fn(xg).backward(g)
            grads.append(xg.grad)
    finally:
        torch.set_num_threads(old_threads)
        torch.use_deterministic_algorithms(old_det)
    assert all(torch.equal(grads[0], other) for other in grads[1:])


@pytest.mark.parametrize("fn", [lambda x: pt.max_pool2d(x, 2), lambda x: pt.avg_pool2d(x, 2),
                                lambda x: pt.adaptive_max_pool2d(x, 2)], ids=["max", "avg", "adaptive"])
def test_no_backward_bookkeeping_without_requires_grad(fn):
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = fn(torch.randn(2, 3, 8, 8))
        assert y.grad_fn is None and not saved
        y = fn(torch.randn(2, 3, 8, 8, requires_grad=True))
        assert y.grad_fn is not None and saved


# --------------------------------------------------------------------------------------------------------------
# autograd: gradcheck and gradgradcheck in float64
# --------------------------------------------------------------------------------------------------------------

GRAD_FNS = [
    ("max_k3s2p1", lambda x: pt.max_pool2d(x, 3, 2, 1)),
    ("max_dil_ceil", lambda x: pt.max_pool2d(x, (3, 2), (2, 1), 1, (2, 1), ceil_mode=True)),
    ("avg_k3s2p1", lambda x: pt.avg_pool2d(x, 3, 2, 1)),
    ("avg_nopad_ceil_div", lambda x: pt.avg_pool2d(x, 3, 2, 1, True, False, -5)),
    ("adaptive", lambda x: pt.adaptive_max_pool2d(x, (3, 4))),
    ("adaptive_grow", lambda x: pt.adaptive_max_pool2d(x, (7, 4))),
]


@pytest.mark.parametrize("fmt", ["contiguous", "channels_last", "3d"])
@pytest.mark.parametrize("name,fn", GRAD_FNS, ids=[g[0] for g in GRAD_FNS])
def test_gradcheck_and_gradgradcheck(name, fn, fmt):
    g = torch.Generator().manual_seed(3)
    # Distinct values a few eps apart at least, so no finite-difference step crosses a tie of the max.
    shape = (2, 5, 6) if fmt == "3d" else (1, 2, 5, 6)
    x = torch.randperm(int(np.prod(shape)), generator=g).to(torch.float64).reshape(shape) / 7.0
    if fmt == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    x.requires_grad_()
    assert torch.autograd.gradcheck(fn, (x,))
    assert torch.autograd.gradgradcheck(fn, (x,))


def test_empty_outputs_as_torch():
    """A batch of 0 and an adaptive output size of 0 give PyTorch's empty results (PyTorch's own backward
    refuses the zero output size, so only the batch of 0 goes backward)."""
    y, idx = pt.adaptive_max_pool2d(torch.randn(2, 3, 8, 8), (0, 2), return_indices=True)
    assert y.shape == idx.shape == (2, 3, 0, 2)
    x = torch.randn(0, 3, 8, 8, requires_grad=True)
    for fn in (lambda t: pt.adaptive_max_pool2d(t, 3), lambda t: pt.avg_pool2d(t, 2), lambda t: pt.max_pool2d(t, 2)):
        y = fn(x)
        assert y.shape[0] == 0 and y.shape[2:] in ((3, 3), (4, 4))
        y.sum().backward()
        assert x.grad.shape == x.shape


EAGER_FNS = [
    ("max", lambda x: pt.max_pool2d(x, 3, 2, 1), "_MaxPoolEager"),
    ("avg", lambda x: pt.avg_pool2d(x, 3, 2, 1, count_include_pad=False), "_AvgPoolEager"),
    ("adaptive", lambda x: pt.adaptive_max_pool2d(x, (4, 3)), "_AdaptiveMaxPoolEager"),
]


@pytest.mark.parametrize("fmt", [torch.contiguous_format, torch.channels_last], ids=["contiguous", "channels_last"])
@pytest.mark.parametrize("name,fn,eager_node", EAGER_FNS, ids=[e[0] for e in EAGER_FNS])
def test_eager_path_equals_the_operator_path(name, fn, eager_node, fmt):
    """Plain eager calls skip the dispatcher; under the profiler (like every tracing or mode) the custom operators
    run instead.  Both give the same values, gradients and strides, bit for bit."""
    x = torch.randn(2, 5, 11, 9).contiguous(memory_format=fmt)
    g = torch.randn_like(fn(x))
    results = []
    old_det = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(True)
        for profiled in (False, True):
            xr = x.clone().requires_grad_()
            if profiled:
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                    y = fn(xr)
                    y.backward(g)
                events = {e.key for e in prof.key_averages()}
                assert any(e.startswith("poolgrad::") and e.endswith("_backward") for e in events)
                assert eager_node not in type(y.grad_fn).__name__
            else:
                y = fn(xr)
                assert type(y.grad_fn).__name__ == eager_node + "Backward"
                y.backward(g)
            results.append((y, xr.grad))
    finally:
        torch.use_deterministic_algorithms(old_det)
    (ya, ga), (yb, gb) = results
    assert torch.equal(ya, yb) and ya.stride() == yb.stride()
    assert torch.equal(ga, gb) and ga.stride() == gb.stride()


@pytest.mark.parametrize("call,backward", [
    (lambda x, r: pt.max_pool2d(x, 3, 2, 1, return_indices=r), "max_pool2d_with_indices_backward"),
    (lambda x, r: pt.adaptive_max_pool2d(x, 4, return_indices=r), "adaptive_max_pool2d_backward")],
    ids=["max", "adaptive"])
def test_indices_int32_inside_channels_last_only(monkeypatch, call, backward):
    """Indices nobody sees travel to the backward as int32 for channels-last inputs (fewer bytes; measured in
    bench/experiments/torch_overhead.py); returned indices, and NCHW ones, are int64 as PyTorch's."""
    bwd = _spy(monkeypatch, backward)
    for fmt, internal in ((torch.channels_last, np.int32), (torch.contiguous_format, np.int64)):
        x = torch.randn(2, 3, 8, 8).contiguous(memory_format=fmt).requires_grad_()
        call(x, False).sum().backward()
        assert bwd[-1][0][2].dtype == internal
        y, idx = call(x, True)
        assert idx.dtype == torch.int64
        y.sum().backward()
        assert bwd[-1][0][2].dtype == np.int64


def test_index_dtype_of_the_forward_operators():
    x = torch.randn(2, 3, 9, 9).contiguous(memory_format=torch.channels_last)
    for op, args in ((torch.ops.poolgrad.max_pool2d_with_indices, ([3, 3], [2, 2], [1, 1], [1, 1], False)),
                     (torch.ops.poolgrad.adaptive_max_pool2d, ([4, 4],))):
        y64, i64 = op(x, *args)
        y32, i32 = op(x, *args, torch.int32)
        assert i64.dtype == torch.int64 and i32.dtype == torch.int32
        assert torch.equal(y32, y64) and torch.equal(i32.long(), i64) and i32.stride() == i64.stride()
        with pytest.raises(pg.ParamInvalidError, match="index_dtype"):
            op(x, *args, torch.int16)


def test_double_backward_formulas():
    """The gradient of the max backward is a gather at the indices; of the average backward, an avg pooling."""
    x = torch.randn(2, 3, 9, 9, dtype=torch.float64)
    y, idx = pt.max_pool2d(x, 3, 2, 1, return_indices=True)
    go = torch.randn_like(y, requires_grad=True)
    gx = torch.ops.poolgrad.max_pool2d_with_indices_backward(go, x, idx, [3, 3], [2, 2], [1, 1], [1, 1], False)
    v = torch.randn_like(gx)
    (ggo,) = torch.autograd.grad(gx, go, v)
    assert torch.equal(ggo, v.flatten(2).gather(2, idx.flatten(2)).view_as(idx))
    go = torch.randn(2, 3, 5, 5, dtype=torch.float64, requires_grad=True)
    gx = torch.ops.poolgrad.avg_pool2d_backward(go, x, [3, 3], [2, 2], [1, 1], False, True, None)
    (ggo,) = torch.autograd.grad(gx, go, v)
    torch.testing.assert_close(ggo, F.avg_pool2d(v, 3, 2, 1))


# --------------------------------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------------------------------

BAD = [
    # (what, call, the argument the message must name)
    ("kernel 0", lambda f, x: f.max_pool2d(x, 0), "kernel_size"),
    ("kernel float", lambda f, x: f.max_pool2d(x, 2.0), "kernel_size"),
    ("kernel 3 ints", lambda f, x: f.max_pool2d(x, (2, 2, 2)), "kernel_size"),
    ("stride 0", lambda f, x: f.max_pool2d(x, 2, 0), "stride"),
    ("padding > k/2", lambda f, x: f.max_pool2d(x, 3, 1, 2), "padding"),
    ("padding > k/2 dilated", lambda f, x: f.max_pool2d(x, 2, 1, 2, 3), "padding"),
    ("negative padding", lambda f, x: f.max_pool2d(x, 3, 1, -1), "padding"),
    ("dilation 0", lambda f, x: f.max_pool2d(x, 2, 1, 0, 0), "dilation"),
    ("kernel bigger than plane", lambda f, x: f.max_pool2d(x, 9), "output size"),
    ("avg padding > k/2", lambda f, x: f.avg_pool2d(x, 2, 1, 2), "padding"),
    ("avg divisor 0", lambda f, x: f.avg_pool2d(x, 2, divisor_override=0), "divisor_override"),
    ("avg kernel 0", lambda f, x: f.avg_pool2d(x, 0), "kernel_size"),
    ("adaptive size -1", lambda f, x: f.adaptive_max_pool2d(x, -1), "output_size"),
    ("adaptive 3 sizes", lambda f, x: f.adaptive_max_pool2d(x, (1, 2, 3)), "output_size"),
    ("5-D input", lambda f, x: f.max_pool2d(x[None], 2), "3-D or 4-D"),
    ("2-D input", lambda f, x: f.avg_pool2d(x[0, 0], 2), "3-D or 4-D"),
    ("2-D adaptive", lambda f, x: f.adaptive_max_pool2d(x[0, 0], 2), "3-D or 4-D"),
]


@pytest.mark.parametrize("what,call,name", BAD, ids=[b[0] for b in BAD])
def test_inputs_torch_refuses_are_refused(what, call, name):
    x = torch.randn(2, 3, 6, 6, requires_grad=True)
    with pytest.raises((RuntimeError, TypeError, ValueError, IndexError)):
        call(F, x)
    with pytest.raises(pg.ParamInvalidError, match=name):
        call(pt, x)


@pytest.mark.parametrize("call", [lambda x: pt.max_pool2d(x, 2), lambda x: pt.avg_pool2d(x, 2),
                                  lambda x: pt.adaptive_max_pool2d(x, 2), lambda x: pt.MaxPool2d(2)(x)],
                         ids=["max", "avg", "adaptive", "module"])
def test_non_cpu_tensors_raise_and_are_never_copied(call):
    # The meta device stands in for CUDA and the other accelerators: any device but the CPU is refused.
    x = torch.empty(2, 3, 8, 8, device="meta")
    with pytest.raises(pg.ParamInvalidError, match="CPU tensors only.*'meta'"):
        call(x)


def test_errors_inside_the_backward_name_the_argument():
    x = torch.randn(1, 1, 4, 4, dtype=torch.float64)
    bad = torch.full((1, 1, 2, 2), 16, dtype=torch.int64)
    with pytest.raises(pg.ParamInvalidError, match=r"indices: expected every index in \[0, H\*W\)"):
        torch.ops.poolgrad.max_pool2d_with_indices_backward(torch.ones(1, 1, 2, 2, dtype=torch.float64), x, bad,
                                                            [2, 2], [2, 2], [0, 0], [1, 1], False)


# --------------------------------------------------------------------------------------------------------------
# modules and convert()
# --------------------------------------------------------------------------------------------------------------

MODULES = [
    (nn.MaxPool2d, pt.MaxPool2d, dict(kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=True)),
    (nn.MaxPool2d, pt.MaxPool2d, dict(kernel_size=(2, 3), return_indices=True)),
    (nn.AvgPool2d, pt.AvgPool2d, dict(kernel_size=3, stride=1, padding=1, count_include_pad=False)),
    (nn.AvgPool2d, pt.AvgPool2d, dict(kernel_size=2, divisor_override=3, ceil_mode=True)),
    (nn.AdaptiveMaxPool2d, pt.AdaptiveMaxPool2d, dict(output_size=(3, None))),
    (nn.AdaptiveMaxPool2d, pt.AdaptiveMaxPool2d, dict(output_size=4, return_indices=True)),
]


@pytest.mark.parametrize("base,ours,kwargs", MODULES, ids=[f"{m[0].__name__}-{i}" for i, m in enumerate(MODULES)])
def test_modules_are_drop_in(base, ours, kwargs):
    a, b = base(**kwargs), ours(**kwargs)
    assert isinstance(b, base)
    assert repr(a) == repr(b)
    assert a.state_dict().keys() == b.state_dict().keys()
    b.load_state_dict(a.state_dict())
    x = torch.randn(2, 3, 9, 9)
    ya, yb = a(x), b(x)
    if isinstance(ya, tuple):
        assert all(torch.equal(u, v) for u, v in zip(ya, yb))
    else:
        torch.testing.assert_close(yb, ya)


class _Custom(nn.MaxPool2d):
    """A user's subclass with its own forward: convert() must leave it alone."""

    def forward(self, x):
        return super().forward(x) * 2


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.shared = nn.MaxPool2d(2)
        self.seq = nn.Sequential(nn.Conv2d(3, 3, 1), nn.Sequential(self.shared, nn.AvgPool2d(1)))
        self.lst = nn.ModuleList([nn.AdaptiveMaxPool2d(2), self.shared])
        self.dct = nn.ModuleDict({"p": nn.AvgPool2d(2, ceil_mode=True)})
        self.custom = _Custom(1)

    def forward(self, x):
        return self.custom(self.dct["p"](self.lst[0](self.seq(x))))


def test_convert_replaces_at_any_depth():
    net = _Net()
    hook_calls = []
    net.shared.register_forward_hook(lambda *a: hook_calls.append(1))
    x = torch.randn(2, 3, 16, 16)
    expected = net(x)
    conv = pt.convert(net)
    assert conv is not net
    kinds = {name: type(m) for name, m in conv.named_modules()}
    assert kinds["shared"] is pt.MaxPool2d and kinds["seq.1.1"] is pt.AvgPool2d
    assert kinds["lst.0"] is pt.AdaptiveMaxPool2d and kinds["dct.p"] is pt.AvgPool2d
    assert kinds["custom"] is _Custom                                       # subclasses are kept
    assert conv.seq[1][0] is conv.lst[1] is conv.shared                      # sharing is kept
    assert type(net.shared) is nn.MaxPool2d                                  # the original is untouched
    torch.testing.assert_close(conv(x), expected)
    assert len(hook_calls) == 2                                              # hooks travel with the module
    assert conv.state_dict().keys() == net.state_dict().keys()


def test_convert_inplace_and_top_level():
    net = nn.Sequential(nn.MaxPool2d(2))
    assert pt.convert(net, inplace=True) is net and type(net[0]) is pt.MaxPool2d
    pool = pt.convert(nn.AvgPool2d(3, 2))
    assert type(pool) is pt.AvgPool2d and repr(pool) == repr(nn.AvgPool2d(3, 2))
    with pytest.raises(pg.ParamInvalidError, match="model"):
        pt.convert([nn.MaxPool2d(2)])

"""A quick self-check of every operator against the slow NumPy reference (used by ``python -m poolgrad``)."""
from __future__ import annotations

from typing import Callable

import numpy as np

from .dtypes import bfloat16

__all__ = ["self_check"]


def _close(got: np.ndarray, want: np.ndarray, dtype: np.dtype) -> bool:
    tol = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}.get(np.dtype(dtype), 1e-2)
    return bool(np.allclose(got.astype(np.float64), want.astype(dtype).astype(np.float64), rtol=tol, atol=tol))


def _to_layout(a4: np.ndarray, layout: str) -> np.ndarray:
    """Logical NCHW -> a contiguous array in ``layout``."""
    return a4.transpose(0, 2, 3, 1).copy() if layout == "NHWC" else a4


def _from_layout(a: np.ndarray, layout: str) -> np.ndarray:
    """An array in ``layout`` -> its logical NCHW view."""
    return a.transpose(0, 3, 1, 2) if layout == "NHWC" else a


def _check_argmax_op(rng: np.random.Generator, dtype: np.dtype, layout: str, forward: Callable,
                     forward_ref: Callable, backward: Callable, backward_ref: Callable) -> bool:
    """An index-returning pooling and its backward: indices equal to the reference's, gradients close, in both
    determinism modes.  ``forward(x, layout)`` / ``forward_ref(x4)`` give (y, indices); ``backward(go, x, ind,
    layout, det)``; ``backward_ref(go4, shape, ind4)``."""
    x4 = rng.integers(-3, 4, size=(2, 3, 13, 11)).astype(dtype)
    x = _to_layout(x4, layout)
    y, ind = forward(x, layout)
    _, i_ref = forward_ref(x4)
    ok = np.array_equal(_from_layout(ind, layout), i_ref)
    go = rng.standard_normal(y.shape).astype(dtype)
    want = backward_ref(_from_layout(go, layout), x4.shape, i_ref)
    for det in (True, False):
        ok &= _close(_from_layout(backward(go, x, ind, layout, det), layout), want, dtype)
    return ok


def _check_max_pool(rng: np.random.Generator, dtype: np.dtype, layout: str) -> bool:
    from . import max_pool_indices as max_pool
    from .slow import max_pool_indices as ref
    return _check_argmax_op(
        rng, dtype, layout,
        lambda x, lay: max_pool.max_pool2d_with_indices(x, 3, 2, 1, layout=lay),
        lambda x4: ref.max_pool2d_with_indices(x4, (3, 3), (2, 2), (1, 1)),
        lambda go, x, ind, lay, det: max_pool.max_pool2d_with_indices_backward(go, x, ind, 3, 2, 1, layout=lay,
                                                                              deterministic=det),
        ref.max_pool2d_with_indices_backward)


def _check_adaptive(rng: np.random.Generator, dtype: np.dtype, layout: str) -> bool:
    from . import adaptive
    from .slow import adaptive as ref
    return _check_argmax_op(
        rng, dtype, layout,
        lambda x, lay: adaptive.adaptive_max_pool2d(x, (5, 4), layout=lay),
        lambda x4: ref.adaptive_max_pool2d(x4, (5, 4)),
        lambda go, x, ind, lay, det: adaptive.adaptive_max_pool2d_backward(go, x, ind, layout=lay,
                                                                          deterministic=det),
        ref.adaptive_max_pool2d_backward)


def _check_elementwise(rng: np.random.Generator, dtype: np.dtype, layout: str) -> bool:
    from . import elementwise
    from .slow import elementwise as ref
    x = rng.integers(-2, 3, size=(2, 3, 8, 6)).astype(dtype)
    y = rng.integers(-2, 3, size=x.shape).astype(dtype)
    dy = rng.standard_normal(x.shape).astype(dtype)
    if layout == "NHWC":
        x, y, dy = (a.transpose(0, 2, 3, 1) for a in (x, y, dy))
    got = elementwise.max_pooling_grad(dy, x, y)
    want = ref.max_pooling_grad(dy, x, y)
    return np.ascontiguousarray(got).tobytes() == want.tobytes()


def _check_avg(rng: np.random.Generator, dtype: np.dtype, layout: str) -> bool:
    from . import avg_pool
    from .slow import avg_pool as ref
    x4 = rng.standard_normal((2, 3, 13, 11)).astype(dtype)
    x = _to_layout(x4, layout)
    y = avg_pool.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False, layout=layout)
    y4 = _from_layout(y, layout)
    ok = _close(y4, ref.avg_pool2d(x4, (3, 3), (2, 2), (1, 1), True, False, None), dtype)
    go = rng.standard_normal(y.shape).astype(dtype)
    go4 = _from_layout(go, layout)
    want = ref.avg_pool2d_backward(go4, x4.shape, (3, 3), (2, 2), (1, 1), True, False, None, 0)
    for det in (True, False):
        g = avg_pool.avg_pool2d_backward(go, x, 3, 2, 1, ceil_mode=True, count_include_pad=False, layout=layout,
                                         deterministic=det)
        ok &= _close(_from_layout(g, layout), want, dtype)
    return ok


def _check_tf(rng: np.random.Generator, dtype: np.dtype, layout: str) -> bool:
    from . import tf_max_pool
    from .slow import tf_max_pool as ref
    x4 = rng.integers(-3, 4, size=(2, 3, 13, 11)).astype(dtype)
    x = _to_layout(x4, layout)
    ksize, strides = ([1, 3, 3, 1], [1, 2, 2, 1]) if layout == "NHWC" else ([1, 1, 3, 3], [1, 1, 2, 2])
    y = tf_max_pool.max_pool(x, ksize, strides, "SAME", data_format=layout)
    y4 = _from_layout(y, layout)
    ok = _close(y4, ref.max_pool(x4, (3, 3), (2, 2), "SAME"), dtype)
    go = rng.standard_normal(y.shape).astype(dtype)
    go4 = _from_layout(go, layout)
    want = ref.max_pool_grad(x4, go4, (3, 3), (2, 2), "SAME")
    g = tf_max_pool.max_pool_grad(x, y, go, ksize, strides, "SAME", data_format=layout, check_orig_output=True)
    return ok & _close(_from_layout(g, layout), want, dtype)


CHECKS: list[tuple[str, Callable[[np.random.Generator, np.dtype, str], bool]]] = [
    ("max_pool2d_with_indices(+backward)", _check_max_pool),
    ("adaptive_max_pool2d(+backward)", _check_adaptive),
    ("avg_pool2d(+backward)", _check_avg),
    ("max_pool / max_pool_grad (TensorFlow)", _check_tf),
    ("max_pooling_grad", _check_elementwise),
]


def self_check(progress: Callable[[str], None] | None = None) -> bool:
    """Run every operator on small random inputs in every dtype and layout, at every instruction-set level this
    CPU runs (each level runs the kernels' own vector variants); True if all agree with the reference."""
    from .config import set_isa_level, supported_isa_levels
    all_ok = True
    for name, check in CHECKS:
        for dtype in (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), bfloat16):
            for layout in ("NCHW", "NHWC"):
                failed = []
                for level in supported_isa_levels():
                    with set_isa_level(level):
                        if not check(np.random.default_rng(2026), dtype, layout):
                            failed.append(level)
                all_ok &= not failed
                if progress:
                    progress(f"{'FAIL' if failed else 'ok  '} {name} {dtype} {layout}"
                             + (f" (at {', '.join(failed)})" if failed else ""))
    return all_ok

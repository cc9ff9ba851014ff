"""Shared helpers for the test-suite (imported as ``import pgtest``; pytest puts tests/ on sys.path)."""
from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np
import pytest

import poolgrad
from poolgrad.dtypes import bfloat16

DTYPES = [np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), bfloat16]
DTYPE_IDS = ["f32", "f64", "f16", "bf16"]
LAYOUTS = ["NCHW", "NHWC"]
THREADS = [1, 2, 3, 4, 7]

import os

torch = tf = None
# scripts/build_variant.sh asan sets this: PyTorch and TensorFlow are not ASan-clean, so the sanitizer run leaves them out.
if not os.environ.get("POOLGRAD_TEST_NO_FRAMEWORKS"):
    try:
        import torch
    except ImportError:  # pragma: no cover - CI installs torch; a bare checkout still runs the other tests
        torch = None
    try:
        import tensorflow as tf
    except ImportError:  # pragma: no cover
        tf = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
needs_tf = pytest.mark.skipif(tf is None, reason="TensorFlow is not installed")


def to_layout(a4: np.ndarray, layout: str, rank: int = 4) -> np.ndarray:
    """A logical NCHW 4-D array as a C-contiguous array in ``layout`` (3-D drops N, which must be 1)."""
    a = a4.transpose(0, 2, 3, 1) if layout == "NHWC" else a4
    if rank == 3:
        a = a[0]
    return np.ascontiguousarray(a)


def from_layout(a: np.ndarray, layout: str) -> np.ndarray:
    """Inverse of :func:`to_layout`: back to a logical NCHW 4-D view."""
    return poolgrad.geometry.to_nchw(a, layout)


def strided_variants(a: np.ndarray, rng: np.random.Generator | None = None) -> Iterator[tuple[str, np.ndarray]]:
    """Views with the values of ``a`` but other memory orders: contiguous, Fortran, sliced (non-contiguous),
    negative strides on every axis, and a transposed buffer viewed back."""
    yield "contiguous", np.ascontiguousarray(a)
    yield "fortran", np.asfortranarray(a)
    big = np.zeros(tuple(2 * s for s in a.shape), dtype=a.dtype)
    sl = tuple(slice(None, None, 2) for _ in a.shape)
    big[sl] = a
    yield "sliced", big[sl]
    flip = np.ascontiguousarray(a[tuple(slice(None, None, -1) for _ in a.shape)])
    yield "negative", flip[tuple(slice(None, None, -1) for _ in a.shape)]
    perm = tuple(reversed(range(a.ndim)))
    yield "permuted", np.ascontiguousarray(a.transpose(perm)).transpose(np.argsort(perm))


def random_values(rng: np.random.Generator, shape: tuple, dtype, kind: str = "normal") -> np.ndarray:
    """Test inputs: "normal" values, "ties" (small integers, so windows hold equal maxima) or "nan" (20% NaN)."""
    if kind == "ties":
        x = rng.integers(-2, 3, size=shape).astype(np.float64)
    elif kind == "nan":
        x = rng.standard_normal(shape)
        x[rng.random(shape) < 0.2] = np.nan
    else:
        x = rng.standard_normal(shape)
    return x.astype(dtype)


def tolerance(dtype: np.dtype) -> dict:
    """assert_allclose tolerances for comparing with a float64 reference rounded to ``dtype``."""
    dtype = np.dtype(dtype)
    if dtype == np.float64:
        return {"rtol": 1e-12, "atol": 1e-12}
    if dtype == np.float32:
        return {"rtol": 1e-5, "atol": 1e-6}
    if dtype == np.float16:
        return {"rtol": 1e-3, "atol": 1e-4}
    return {"rtol": 8e-3, "atol": 1e-3}  # bfloat16


def as64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def assert_untouched(before: dict, arrays: dict) -> None:
    """Every array in ``arrays`` still has the bytes recorded in ``before`` (name -> bytes)."""
    for name, arr in arrays.items():
        if isinstance(arr, np.ndarray):
            assert arr.tobytes() == before[name], f"{name} was modified"


def snapshot(arrays: dict) -> dict:
    return {k: v.tobytes() for k, v in arrays.items() if isinstance(v, np.ndarray)}


@contextlib.contextmanager
def gather_limit(limit: float) -> Iterator[None]:
    """Set the window overlap up to which the channels-last max backward gathers: -1 never, 1e9 always."""
    from poolgrad import _max_pool_indices
    saved = _max_pool_indices.GATHER_MAX_COVER
    _max_pool_indices.GATHER_MAX_COVER = limit
    try:
        yield
    finally:
        _max_pool_indices.GATHER_MAX_COVER = saved


def gather_and_scatter_messages(x: np.ndarray, y: np.ndarray, ind: np.ndarray, kernel: int) -> list[str]:
    """The ParamInvalidError messages of a channels-last ``max_pool2d_with_indices_backward`` with bad ``ind``,
    from the gather path (forced on) and from the scatter path (gather off), in that order."""
    messages = []
    for limit in (1e9, -1):
        with gather_limit(limit), pytest.raises(poolgrad.ParamInvalidError) as err:
            poolgrad.max_pool2d_with_indices_backward(np.ones_like(y), x, ind, kernel, layout="NHWC")
        messages.append(str(err.value))
    return messages


def spread_bits(rng: np.random.Generator, a: np.ndarray, bits: list[int]) -> None:
    """Write the storage-type bit patterns ``bits`` (cycled) into 3 * len(bits) random elements of the contiguous
    array ``a`` (or all of them, when fewer)."""
    ut = np.dtype(f"u{a.dtype.itemsize}")
    flat = a.view(ut).reshape(-1)
    at = rng.choice(flat.size, size=min(flat.size, 3 * len(bits)), replace=False)
    flat[at] = np.resize(np.array(bits, dtype=ut), at.size)


def last_args_of_calls(monkeypatch: pytest.MonkeyPatch, module, name: str, fn) -> list:
    """Run ``fn()`` with ``module.name`` spied on: the last positional argument of every call it made."""
    seen = []
    orig = getattr(module, name)

    def spy(*args, **kwargs):
        seen.append(args[-1])
        return orig(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(module, name, spy)
        fn()
    return seen


def results_with_switches(monkeypatch: pytest.MonkeyPatch, module, settings: list[dict], fn) -> list:
    """``fn()`` once per dict of ``settings``, with those module attributes set for the call: the results."""
    out = []
    for setting in settings:
        with monkeypatch.context() as m:
            for name, value in setting.items():
                m.setattr(module, name, value)
            out.append(fn())
    return out

"""How far 16-bit and float32 average-pooling gradients are from the correctly rounded exact value (issue 11).

Run from a tree's root (the poolgrad found first on sys.path is the one measured)::

    python bench/experiments/accuracy.py

Issue 11's workload (4x8x64x64, k3 s1 p1, random normal gradients) and the same without count_include_pad; the
exact values are Python integers (tests/test_accuracy.py's helpers), so a float64 reference's own rounding errors
do not count.  The numbers are in docs/ACCURACY.md.
"""
from __future__ import annotations

import math
import os
import sys
from fractions import Fraction

import numpy as np

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "tests"))

import poolgrad as pg  # noqa: E402
import test_accuracy as T  # noqa: E402
from poolgrad.slow import avg_pool as slow  # noqa: E402


def sixteen_bit(dtype: np.dtype, cip: bool, shape: tuple) -> str:
    rng = np.random.default_rng(0)
    c = dict(shape=shape, k=(3, 3), s=(1, 1), p=(1, 1), ceil=False, cip=cip, div=None)
    go = T.values(rng, shape, dtype, "normal")
    got = pg.avg_pool2d_backward(go, np.zeros(shape, dtype), 3, 1, 1, count_include_pad=cip).astype(np.float64)
    ref = slow.avg_pool2d_backward(go, shape, (3, 3), (1, 1), (1, 1), False, cip).astype(dtype).astype(np.float64)
    num, den, bound, _ = T._avg_backward_exact(go, c)
    ties = near = wrong = outside = ref_wrong = 0
    for idx in np.ndindex(shape):
        n = int(num[idx])
        want = T.round_exact(n, den, dtype)
        e = Fraction(n, den)
        b = Fraction(float(bound[idx]))
        lo, hi = e - b, e + b
        straddle = T.round_exact(lo.numerator, lo.denominator, dtype) != T.round_exact(hi.numerator,
                                                                                       hi.denominator, dtype)
        ties += _is_tie(n, den, dtype)
        near += straddle
        if got[idx] != want:
            wrong += 1
            outside += not straddle
        ref_wrong += ref[idx] != want
    cells = int(np.prod(shape))
    pct = lambda k: f"{k} ({100 * k / cells:.3f}%)"  # noqa: E731
    return (f"{np.dtype(dtype).name} cip={cip} {'x'.join(map(str, shape))}: exact ties {pct(ties)}, within "
            f"float64 error of a boundary {pct(near)}; poolgrad not correctly rounded {pct(wrong)} (outside that "
            f"bound {outside}); float64 reference rounded to the type {pct(ref_wrong)}")


def _is_tie(n: int, den: int, dtype: np.dtype) -> bool:
    """n / den lies exactly halfway between two neighbours of dtype (finite ones)."""
    v = Fraction(n, den)
    rounded = T.round_exact(n, den, dtype)
    if not math.isfinite(rounded) or Fraction(rounded) == v:
        return False
    other = 2 * v - Fraction(rounded)        # the mirror image of the rounded value around v
    return T.round_exact(other.numerator, other.denominator, dtype) == other


def float32() -> str:
    rng = np.random.default_rng(0)
    shape = (4, 8, 64, 64)
    go = rng.standard_normal(shape).astype(np.float32)
    got = pg.avg_pool2d_backward(go, np.zeros(shape, np.float32), 3, 1, 1).astype(np.float64)
    k = 149
    G = np.vectorize(lambda v: int(v * 2.0 ** k), otypes=[object])(go.astype(np.float64))
    pad = np.zeros((4, 8, 66, 66), object)
    pad[...] = 0
    pad[:, :, 1:65, 1:65] = G
    S = sum(pad[:, :, i:i + 64, j:j + 64] for i in range(3) for j in range(3))
    T.FORMATS.setdefault(np.dtype(np.float32), (24, -126, 127, k))
    wrong, ulps = 0, []
    for idx in np.ndindex(shape):
        want = T.round_exact(int(S[idx]), 9 << k, np.dtype(np.float32))
        if got[idx] != want:
            wrong += 1
            ulps.append(abs(got[idx] - want) / float(np.spacing(np.float32(abs(want)))))
    u = np.array(ulps)
    return (f"float32 k3s1p1 4x8x64x64: {wrong} of {S.size} cells ({100 * wrong / S.size:.2f}%) not correctly "
            f"rounded; worst {u.max():.0f} ulp, {100 * np.mean(u <= 1):.0f}% of them by one ulp")


if __name__ == "__main__":
    print(pg.__file__)
    for dt in (T.F16, T.BF16):
        print(sixteen_bit(dt, True, (4, 8, 64, 64)))
        print(sixteen_bit(dt, False, (2, 8, 64, 64)))
    print(float32())

"""Build and run scatter_limits.c on the real data of the 1x3x1024x1024 k3s1p1 max-pooling backward.

    python bench/experiments/scatter_limits.py            # portable -O3
    python bench/experiments/scatter_limits.py -march=native

The scatter loop PyTorch and poolgrad both run (zero the plane, then ``grad_x[ind] += grad_output``) is not
limited by memory on this shape: with k3s1 half the outputs hit the cell the previous output hit, at random, and
the core cannot predict which loads depend on the store just before them.  Measured here (2026-11-29, one
thread, best of 9): real indices 2.33 ms; indices that never repeat 1.76 ms; a predictable pattern of equal
pairs 1.82 ms; PyTorch's whole call 2.6-2.9 ms.  So even a loop free of that cost would be only ~1.5x
PyTorch, and none is: the gather formulation (each input cell compares the 9 outputs that cover it, no
read-modify-write) costs 4.2 ms with -march=native and 31 ms portable.
Needs gcc.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import numpy as np

import poolgrad as pg


def main(argv: list[str]) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 3, 1024, 1024)).astype(np.float32)
    _, ind = pg.max_pool2d_with_indices(x, 3, 1, 1)
    go = rng.standard_normal(ind.shape).astype(np.float32)
    ref = pg.max_pool2d_with_indices_backward(go, x, ind, 3, 1, 1, deterministic=True)
    with tempfile.TemporaryDirectory() as tmp:
        paths = [os.path.join(tmp, n) for n in ("go.bin", "ind.bin", "ref.bin")]
        for arr, path in zip((go, ind, ref), paths):
            np.ascontiguousarray(arr).tofile(path)
        exe = os.path.join(tmp, "scatter_limits")
        subprocess.run(["gcc", "-O3", *argv, "-o", exe, os.path.join(here, "scatter_limits.c")], check=True)
        return subprocess.run([exe, *paths]).returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

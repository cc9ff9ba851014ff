"""The timing machinery behind ``python -m poolgrad`` and ``bench/compare.py`` (poolgrad/benchmark.py) and the
table merger (bench/merge_tables.py): every operator has rows in the main job, and a tiny run produces sane rows
and tables."""
from __future__ import annotations

import importlib.util
import os

import numpy as np

from poolgrad import benchmark

OPERATORS = {"max_pool2d_with_indices_backward", "adaptive_max_pool2d_backward", "avg_pool2d_backward",
             "max_pool_grad", "max_pooling_grad", "max_pool2d_with_indices", "avg_pool2d"}


def test_main_job_has_a_row_of_every_operator():
    cases = benchmark.default_cases([1, 2], quick=True)
    assert {c.op for c in cases} == OPERATORS
    assert {c.threads for c in cases} == {1, 2}
    assert set(benchmark.CASE_BUILDERS) >= OPERATORS - {"max_pool2d_with_indices", "avg_pool2d"} | {"forwards"}


def _tiny_cases():
    return [benchmark.max_pool_backward_case(1, 2, 16, 16, 3, 2, 1, "NHWC", "f32", 1, True),
            benchmark.avg_backward_case(1, 2, 16, 16, 3, 2, 1, "NCHW", "bf16", 1, False),
            benchmark.elementwise_case(4096, "f32", 1),
            benchmark.forward_case("max_pool2d_with_indices", 1, 2, 16, 16, 3, 1, 1, "NCHW", "f32", 1)]


def test_tiny_run_gives_sane_rows_and_tables():
    rows, bw = benchmark.run_cases(_tiny_cases(), reps=1, bandwidth=10.0)
    assert bw == 10.0 and len(rows) == 4
    for r in rows:
        assert r["poolgrad_s"] > 0 and r["gbs"] > 0 and np.isclose(r["frac_copy"], r["gbs"] / 10.0)
        if benchmark.has_torch():
            assert r["torch_s"] > 0 and np.isclose(r["vs_torch"], r["torch_s"] / r["poolgrad_s"])
    table = benchmark.format_table(rows, bw)
    assert all(op in table for op in ("max_pool2d_with_indices_backward", "avg_pool2d_backward",
                                      "max_pooling_grad", "max_pool2d_with_indices"))
    path = os.path.join(os.path.dirname(__file__), os.pardir, "bench", "merge_tables.py")
    spec = importlib.util.spec_from_file_location("merge_tables", path)
    merge = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(merge)
    out_rows = [dict(r, poolgrad_s=r["poolgrad_s"] / 2) for r in rows]
    merged = merge.merge({"rows": rows, "copy_gbs": bw}, {"rows": out_rows, "copy_gbs": bw})
    lines = merged.splitlines()
    assert len(lines) == 2 + len(rows)
    assert "| avg_pool2d_backward | 1x2x16x16 k3s2p1 | NCHW | bf16 | 1 | nondet |" in merged
    assert "| max_pooling_grad | 4K elements | - | f32 | 1 | - |" in merged

"""The benchmark of ``python -m poolgrad`` (poolgrad/benchmark.py, the copy kernel poolgrad/_bandwidth.pyx) and the
multi-framework machinery of bench/ (bench/suite.py: the full suite and the worker merge; bench/merge_tables.py):
every operator has rows in the main job, the roofline divides by the copy rate of the row's own thread count, a
tiny run produces sane rows and tables, and worker times land on the right rows."""
from __future__ import annotations

import importlib.util
import json
import os
import sys

import numpy as np
import pytest

from poolgrad import _bandwidth, benchmark

BENCH = os.path.join(os.path.dirname(__file__), os.pardir, "bench")
OPERATORS = {"max_pool2d_with_indices_backward", "adaptive_max_pool2d_backward", "avg_pool2d_backward",
             "max_pool_grad", "max_pooling_grad", "max_pool2d_with_indices", "avg_pool2d"}


def _load(name: str):
    """Import a bench/ script as a module (bench/ is a folder of scripts, not a package)."""
    if BENCH not in sys.path:
        sys.path.insert(0, BENCH)
    spec = importlib.util.spec_from_file_location(name, os.path.join(BENCH, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("n", [0, 1, 63, 64, 65, 1000, 4096 + 17])
@pytest.mark.parametrize("threads", [1, 2, 3, 7])
def test_copy_kernel_copies_every_byte(n, threads):
    src = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    dst = np.zeros_like(src)
    used = _bandwidth.copy(src, dst, threads)
    assert np.array_equal(src, dst)
    assert 1 <= used <= threads


def test_copy_kernel_uses_the_threads_asked_for():
    # a multi-line buffer is cut into one chunk per thread; an OpenMP build runs each on its own thread
    from poolgrad import get_config
    src = np.ones(1 << 20, np.uint8)
    used = _bandwidth.copy(src, np.empty_like(src), 2)
    assert used == (2 if get_config()["openmp"] else 1)


def test_copy_kernel_refuses_bad_arguments():
    a = np.zeros(100, np.uint8)
    with pytest.raises(ValueError, match="src has 100 bytes, dst 99"):
        _bandwidth.copy(a, np.zeros(99, np.uint8), 1)
    with pytest.raises(ValueError, match="nthreads must be >= 1"):
        _bandwidth.copy(a, np.zeros_like(a), 0)


def test_copy_rate_is_measured_per_thread_count():
    rate, used = benchmark.copy_rate(2, nbytes=1 << 20, reps=3)
    assert rate > 0 and 1 <= used <= 2


def test_main_job_has_a_row_of_every_operator():
    cases = benchmark.default_cases([1, 2], quick=True)
    assert {c.op for c in cases} == OPERATORS
    assert {c.threads for c in cases} == {1, 2}
    assert not any(c.out for c in cases)
    # --out: every backward writes a preallocated output (the forwards have no out=)
    out_cases = benchmark.default_cases([1], quick=True, out=True)
    assert {c.op for c in out_cases if c.out} == OPERATORS - {"max_pool2d_with_indices", "avg_pool2d"}


def _tiny_cases(out: bool = False) -> list[benchmark.Case]:
    return [benchmark.max_pool_backward_case(1, 2, 16, 16, 3, 2, 1, "NHWC", "f32", 1, True, out=out),
            benchmark.avg_backward_case(1, 2, 16, 16, 3, 2, 1, "NCHW", "bf16", 2, False, out=out),
            benchmark.adaptive_backward_case(1, 2, 16, 16, (7, 7), "NHWC", "f32", 2, True, out=out),
            benchmark.max_pool_grad_case(1, 16, 16, 2, 3, 2, "SAME", "NHWC", "f32", 1, True, out=out),
            benchmark.elementwise_case(4096, "f32", 1, out=out),
            benchmark.forward_case("max_pool2d_with_indices", 1, 2, 16, 16, 3, 1, 1, "NCHW", "f32", 1)]


def test_tiny_run_gives_sane_rows_and_tables():
    rates = {1: 10.0, 2: 20.0}
    rows, got_rates = benchmark.run_cases(_tiny_cases(), reps=1, rates=rates)
    assert got_rates == rates and len(rows) == 6
    for r in rows:
        assert r["poolgrad_s"] > 0 and r["gbs"] > 0
        # the roofline is the copy rate of the row's own thread count
        assert r["copy_gbs"] == rates[r["threads"]]
        assert np.isclose(r["frac_copy"], r["gbs"] / rates[r["threads"]])
        if benchmark.has_torch() and r["op"] != "max_pool_grad":
            assert r["torch_s"] > 0 and np.isclose(r["vs_torch"], r["torch_s"] / r["poolgrad_s"])
    assert "numpy_s" in rows[4]
    table = benchmark.format_table(rows)
    lines = table.splitlines()
    assert len(lines) == 2 + len(rows)
    assert "| copy GB/s | % of copy |" in lines[0]
    assert "| avg_pool2d_backward | 1x2x16x16 k3s2p1 | NCHW | bf16 | 2 | nondet |" in table
    assert "| 20.0 |" in lines[3]


def test_missing_copy_rates_are_measured_first():
    messages: list[str] = []
    rows, rates = benchmark.run_cases(_tiny_cases()[:2], reps=1, rates={1: 10.0}, progress=messages.append)
    assert set(rates) == {1, 2} and rates[1] == 10.0 and rates[2] > 0
    assert messages[0].startswith("copy rate with 2 thread(s):")
    assert rows[1]["copy_gbs"] == rates[2]


def test_out_mode_writes_one_preallocated_output():
    for case in _tiny_cases(out=True)[:5]:
        fns = case.make(case.threads)
        first, second = fns["poolgrad"](), fns["poolgrad"]()
        assert first is second, case.op
        if benchmark.has_torch() and "torch" in fns:
            assert fns["torch"]().data_ptr() == fns["torch"]().data_ptr(), case.op


def test_interleaved_medians_time_every_callable_in_rotation():
    calls: list[str] = []
    med = benchmark.interleaved_medians({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                                        reps=4, warmup=1)
    assert set(med) == {"a", "b"} and all(v >= 0 for v in med.values())
    assert calls == ["a", "b"] + ["a", "b", "b", "a", "a", "b", "b", "a"]


def test_no_bench_runs_the_self_check_only(capsys):
    assert benchmark.main(["--no-bench"]) == 0
    text = capsys.readouterr().out
    assert "self-check" in text and "FAIL" not in text and "benchmark" not in text


def test_full_suite_has_every_operator_and_refuses_unknown_names():
    suite = _load("suite")
    cases = suite.full_cases([1, 2], quick=True)
    assert {c.op for c in cases} == OPERATORS
    assert all(c.out for c in suite.full_cases([1], ["avg_pool2d_backward"], quick=True, out=True))
    with pytest.raises(ValueError, match="unknown operator"):
        suite.full_cases([1], ["max_pool"])


def test_jax_windows_follow_the_layout():
    suite = _load("suite")
    nhwc = benchmark.avg_backward_case(1, 2, 16, 16, 3, 2, 1, "NHWC", "f32", 1, True)
    nchw = benchmark.max_pool_backward_case(1, 2, 16, 16, 2, 2, 0, "NCHW", "f32", 1, True)
    tf = benchmark.max_pool_grad_case(1, 16, 16, 2, 3, 2, "SAME", "NHWC", "f32", 1, True)
    assert suite._jax_window(nhwc) == ("avg", (1, 3, 3, 1), (1, 2, 2, 1), ((0, 0), (1, 1), (1, 1), (0, 0)))
    assert suite._jax_window(nchw) == ("max", (1, 1, 2, 2), (1, 1, 2, 2), ((0, 0), (0, 0), (0, 0), (0, 0)))
    assert suite._jax_window(tf) == ("max", (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
    assert suite._jax_window(benchmark.elementwise_case(64, "f32", 1)) is None


def test_worker_times_are_merged_into_the_matching_rows(tmp_path):
    suite = _load("suite")
    case = benchmark.max_pool_grad_case(1, 16, 16, 2, 3, 2, "SAME", "NHWC", "f32", 1, True)
    rows, _ = benchmark.run_cases([case], reps=1, rates={1: 10.0})
    # a stand-in worker: prints the TFTIMES line a real one would, for the case's key
    fake = tmp_path / "worker.py"
    fake.write_text("import json, sys\n"
                    f"print('noise')\nprint('TFTIMES ' + json.dumps({{{suite.case_key(case)!r}: 0.5}}))\n")
    suite.merge_worker_times(rows, [1], ["max_pool_grad"], True, 1, [sys.executable, str(fake)])
    assert rows[0]["tf_s"] == 0.5 and np.isclose(rows[0]["vs_tf"], 0.5 / rows[0]["poolgrad_s"])
    assert "TensorFlow ms" in benchmark.format_table(rows, suite.COMPARATORS)


def test_merge_tables_joins_an_allocating_and_an_out_run():
    rows, rates = benchmark.run_cases(_tiny_cases()[:5], reps=1, rates={1: 10.0, 2: 20.0})
    merge = _load("merge_tables")
    out_rows = [dict(r, poolgrad_s=r["poolgrad_s"] / 2, out=True) for r in rows]
    run = {"rows": rows, "copy_gbs": {str(k): v for k, v in rates.items()}}
    merged = merge.merge(json.loads(json.dumps(run)), {"rows": out_rows, "copy_gbs": run["copy_gbs"]})
    lines = merged.splitlines()
    assert len(lines) == 2 + len(rows)
    assert "| avg_pool2d_backward | 1x2x16x16 k3s2p1 | NCHW | bf16 | 2 | nondet |" in merged
    assert "| max_pooling_grad | 4K elements | - | f32 | 1 | - |" in merged
    assert merge._rates(run) == "1 thread(s) 10.0 GB/s, 2 thread(s) 20.0 GB/s"

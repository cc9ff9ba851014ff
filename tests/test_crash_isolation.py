"""The nastiest inputs, each run in its own interpreter (``sys.executable -X faulthandler -c ...``, PYTHONPATH = the
repository root) so that a segfault, an abort or a hang fails one test instead of killing the whole run.

Covered: out-of-range indices (every extreme value, both index dtypes, both layouts, both determinism modes, the
plane / channels-last / atomic / 16-bit kernel paths), huge zero-stride inputs (no memory: ``as_strided`` over one
element) with int32 indices or a wrong companion shape, parameters whose products would overflow 64 bits, a bad
index on a problem too big to allocate, self-overlapping writeable ``out=`` arrays, and a resource-exhaustion probe.
Each snippet prints ``RESULT <code> <parameter>`` (or ``RESULT OK`` / ``RESULT MemoryError``); the test checks the
exit status is 0 and the expected line was printed.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 120

PRELUDE = textwrap.dedent("""
    import sys
    import numpy as np
    import poolgrad as pg
    from numpy.lib.stride_tricks import as_strided
    from poolgrad.dtypes import bfloat16

    def huge(shape, dtype=np.float32, value=0):
        return as_strided(np.full(1, value, dtype), shape=shape, strides=(0,) * len(shape), writeable=False)

    def expect(fn):
        try:
            fn()
        except pg.PoolGradError as e:
            name = str(e).split(":", 1)[0]
            print("RESULT", e.code, name)
            print("MESSAGE", e)
        except MemoryError:
            print("RESULT MemoryError")
        else:
            print("RESULT OK")
        sys.stdout.flush()

    def bad_index_call(op, shape, layout, dtype, idt, value, pos, det, nt, k=3, s=2, p=1):
        x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
        if op == "max":
            y, ind = pg.max_pool2d_with_indices(x, k, s, p, layout=layout, index_dtype=np.int64)
        else:
            y, ind = pg.adaptive_max_pool2d(x, (k + 2, k + 1), layout=layout, index_dtype=np.int64)
        ind = np.ascontiguousarray(ind.astype(idt))
        go = np.ones_like(y)
        flat = ind.reshape(-1)
        flat[pos % flat.size] = value
        flat[-1] = value
        before = (go.tobytes(), x.tobytes(), ind.tobytes())
        if op == "max":
            call = lambda: pg.max_pool2d_with_indices_backward(go, x, ind, k, s, p, layout=layout,
                                                               deterministic=det, num_threads=nt)
        else:
            call = lambda: pg.adaptive_max_pool2d_backward(go, x, ind, layout=layout, deterministic=det,
                                                           num_threads=nt)
        expect(call)
        assert before == (go.tobytes(), x.tobytes(), ind.tobytes()), "an input was modified"
""")


def run_snippet(body: str, timeout: int = TIMEOUT) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("OMP_NUM_THREADS", "2")
    code = PRELUDE + "\n" + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-X", "faulthandler", "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def check(proc: subprocess.CompletedProcess, expected: str | tuple[str, ...]) -> None:
    detail = f"rc={proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"the subprocess died (a crash is a bug):\n{detail}"
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert lines, detail
    wanted = (expected,) if isinstance(expected, str) else expected
    assert lines[-1] in [f"RESULT {w}" for w in wanted], detail


# ---------------------------------------------------------------------------------------------------------------
# Out-of-range indices: every extreme, through the different kernel paths
# (shape, layout, dtype): planes with few units (banded / atomic when nondeterministic), channels-last images,
# a 16-bit type (float32 scratch), float64.
PATHS = [((1, 1, 40, 33), "NCHW", "np.float32"), ((2, 16, 12, 12), "NHWC", "np.float32"),
         ((3, 2, 9, 9), "NCHW", "np.float16"), ((1, 4, 20, 20), "NHWC", "bfloat16"),
         ((2, 3, 11, 10), "NCHW", "np.float64")]
VALUES = [("-1", "-1", "np.int32"), ("HW", "H*W", "np.int32"), ("i32max", "2**31-1", "np.int32"),
          ("i32min", "-2**31", "np.int32"), ("i64max", "2**63-1", "np.int64"), ("i64min", "-2**63", "np.int64"),
          ("2**40", "2**40", "np.int64")]
INDEX_CASES = []
for i, (tag, value, idt) in enumerate(VALUES):
    for op in ("max", "adaptive"):
        shape, layout, dt = PATHS[(i + (op == "adaptive")) % len(PATHS)]
        det = bool((i + (op == "max")) % 2)
        INDEX_CASES.append(pytest.param(op, shape, layout, dt, idt, value, det, id=f"{op}-{tag}-{layout}-det{det}"))


@pytest.mark.parametrize("op,shape,layout,dt,idt,value,det", INDEX_CASES)
def test_out_of_range_index(op, shape, layout, dt, idt, value, det):
    if layout == "NHWC":
        shape = (shape[0], shape[2], shape[3], shape[1])
    H, W = (shape[2], shape[3]) if layout == "NCHW" else (shape[1], shape[2])
    value = value.replace("H*W", str(H * W))
    proc = run_snippet(f"bad_index_call({op!r}, {shape}, {layout!r}, {dt}, {idt}, {value}, 7, {det}, 2)")
    check(proc, "161002 indices")


# ---------------------------------------------------------------------------------------------------------------
# Huge sizes and overflowing parameters
HUGE = {
    "max-bwd-huge-x-int32-indices": (
        "expect(lambda: pg.max_pool2d_with_indices_backward(np.zeros((1, 1, 1, 1), np.float32), "
        "huge((1, 1, 2**30, 2**30)), np.zeros((1, 1, 1, 1), np.int32), 2**30))", "161002 indices"),
    "adaptive-bwd-huge-x-int32-indices": (
        "expect(lambda: pg.adaptive_max_pool2d_backward(np.zeros((1, 1, 1, 1), np.float32), "
        "huge((1, 1, 2**30, 2**30)), np.zeros((1, 1, 1, 1), np.int32)))", "161002 indices"),
    "max-fwd-huge-x-index_dtype-int32": (
        "expect(lambda: pg.max_pool2d_with_indices(huge((1, 1, 2**30, 2**30)), 2**30, index_dtype=np.int32))",
        "161002 index_dtype"),
    "adaptive-fwd-huge-x-index_dtype-int32": (
        "expect(lambda: pg.adaptive_max_pool2d(huge((1, 2**30, 2**30, 1)), 1, layout='NHWC', "
        "index_dtype=np.int32))", "161002 index_dtype"),
    "kernel_size-2**62": (
        "expect(lambda: pg.max_pool2d_with_indices(np.zeros((1, 1, 4, 4), np.float32), 2**62))",
        "161002 kernel_size"),
    "stride-2**63": (
        "expect(lambda: pg.max_pool2d_with_indices_backward(np.zeros((1, 1, 1, 1), np.float32), "
        "np.zeros((1, 1, 4, 4), np.float32), np.zeros((1, 1, 1, 1), np.int64), 4, 2**63))", "161002 stride"),
    "dilation-times-kernel-overflow": (
        "expect(lambda: pg.max_pool2d_with_indices(huge((1, 1, 2**30, 2**30)), 2**31 - 1, 1, 2**31 - 1, "
        "2**31 - 1))", "161002 x"),
    "output_size-2**62": (
        "expect(lambda: pg.adaptive_max_pool2d(np.zeros((1, 1, 4, 4), np.float32), (2**62, 2**62)))",
        "161002 output_size"),
    "avg-divisor_override-2**64": (
        "from poolgrad.avg_pool import avg_pool2d_backward\n"
        "expect(lambda: avg_pool2d_backward(np.zeros((1, 1, 2, 2), np.float32), np.zeros((1, 1, 4, 4), "
        "np.float32), 2, divisor_override=2**64))", "161002 divisor_override"),
    "avg-huge-x-wrong-grad_output": (
        "from poolgrad.avg_pool import avg_pool2d_backward\n"
        "expect(lambda: avg_pool2d_backward(np.zeros((1, 1, 2, 1), np.float32), huge((1, 1, 2**30, 2**30)), "
        "2**30))", "161002 grad_output"),
    "tf-huge-x1-wrong-x2": (
        "from poolgrad.tf_max_pool import max_pool_grad\n"
        "expect(lambda: max_pool_grad(huge((2**10, 2**20, 2**20, 1)), np.zeros((1, 1, 1, 1), np.float32), "
        "np.zeros((1, 1, 1, 1), np.float32), (1, 2**20, 2**20, 1), (1, 1, 1, 1), 'VALID'))", "161002 x2"),
    "tf-ksize-2**63": (
        "from poolgrad.tf_max_pool import max_pool\n"
        "expect(lambda: max_pool(np.zeros((1, 4, 4, 1), np.float32), (1, 2**63, 1, 1), (1, 1, 1, 1), 'SAME'))",
        "161002 ksize"),
    "elementwise-huge-dy-small-x": (
        "expect(lambda: pg.max_pooling_grad(huge((2**20, 2**20, 2**20)), np.zeros((2, 2, 2), np.float32), "
        "np.zeros((2, 2, 2), np.float32)))", "161002 x"),
    # a bad index on a problem whose grad_x cannot be allocated: a clean error either way, never a crash
    "huge-x-bad-index": (
        "expect(lambda: pg.max_pool2d_with_indices_backward(huge((1, 1, 2**15, 2**15)), "
        "huge((1, 1, 2**30, 2**30)), huge((1, 1, 2**15, 2**15), np.int64, -1), 2**15))",
        ("161002 indices", "MemoryError")),
}


@pytest.mark.parametrize("key", list(HUGE))
def test_huge_and_overflow(key):
    body, expected = HUGE[key]
    check(run_snippet(body), expected)


# ---------------------------------------------------------------------------------------------------------------
# Other nasty cases: aliasing / self-overlapping / misaligned outputs and broadcast inputs
NASTY = {
    # a writeable out whose elements all alias one another (zero strides): no crash, no write outside it
    "max-bwd-out-zero-strides": ("""
        x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
        y, ind = pg.max_pool2d_with_indices(x, 2)
        guard = np.full(64, 7.0, np.float32)
        out = as_strided(guard[32:], shape=x.shape, strides=(0, 0, 0, 0), writeable=True)
        expect(lambda: pg.max_pool2d_with_indices_backward(y, x, ind, 2, out=out, num_threads=2))
        assert np.all(guard[:32] == 7.0) and np.all(guard[33:] == 7.0), "wrote outside out"
        """, ("OK", "161002 out")),
    "elementwise-out-zero-strides": ("""
        dy = np.ones((4, 5, 6), np.float32); x = np.zeros_like(dy); y = np.zeros_like(dy)
        guard = np.full(16, 7.0, np.float32)
        out = as_strided(guard[8:], shape=dy.shape, strides=(0, 0, 0), writeable=True)
        expect(lambda: pg.max_pooling_grad(dy, x, y, out=out))
        assert np.all(guard[:8] == 7.0) and np.all(guard[9:] == 7.0), "wrote outside out"
        """, ("OK", "161002 out")),
    "tf-out-misaligned-negative": ("""
        from poolgrad.tf_max_pool import max_pool, max_pool_grad
        x = np.random.default_rng(0).standard_normal((2, 9, 7, 3)).astype(np.float32)
        y = max_pool(x, (1, 3, 3, 1), (1, 2, 2, 1), 'SAME')
        buf = bytearray(x.nbytes + 1)
        out = np.frombuffer(buf, np.float32, count=x.size, offset=1).reshape(x.shape)[::-1, :, ::-1]
        res = max_pool_grad(x, y, np.ones_like(y), (1, 3, 3, 1), (1, 2, 2, 1), 'SAME', out=out, num_threads=2)
        assert res is out
        ref = max_pool_grad(x, y, np.ones_like(y), (1, 3, 3, 1), (1, 2, 2, 1), 'SAME')
        assert np.array_equal(res, ref)
        print("RESULT OK")
        """, "OK"),
    "avg-bwd-out-zero-strides": ("""
        from poolgrad.avg_pool import avg_pool2d_backward
        x = np.zeros((2, 3, 8, 8), np.float32)
        guard = np.full(16, 7.0, np.float32)
        out = as_strided(guard[8:], shape=x.shape, strides=(0, 0, 0, 0), writeable=True)
        expect(lambda: avg_pool2d_backward(np.ones((2, 3, 4, 4), np.float32), x, 3, 2, 1, out=out, num_threads=2))
        assert np.all(guard[:8] == 7.0) and np.all(guard[9:] == 7.0), "wrote outside out"
        """, ("OK", "161002 out")),
    "broadcast-indices-bad-value": ("""
        x = np.zeros((2, 3, 30, 20), np.float32)
        go = np.ones((2, 3, 15, 10), np.float32)
        ind = np.broadcast_to(np.int64(600), go.shape)
        expect(lambda: pg.max_pool2d_with_indices_backward(go, x, ind, 2, deterministic=False, num_threads=2))
        """, "161002 indices"),
    "out-overlaps-grad_output": ("""
        x = np.zeros((1, 2, 8, 8), np.float32)
        y, ind = pg.max_pool2d_with_indices(x, 2)
        buf = np.zeros(x.size + y.size, np.float32)
        out = buf[:x.size].reshape(x.shape)
        go = buf[x.size - 5:x.size - 5 + y.size].reshape(y.shape)
        expect(lambda: pg.max_pool2d_with_indices_backward(go, x, ind, 2, out=out))
        """, "161002 out"),
    "torch-indices-out-of-range": ("""
        try:
            import torch
        except ImportError:
            print("RESULT 161002 indices"); raise SystemExit(0)
        x = torch.zeros(1, 2, 8, 8)
        y, ind = torch.nn.functional.max_pool2d(x, 2, return_indices=True)
        ind[0, 1, 3, 3] = 10**9
        expect(lambda: pg.max_pool2d_with_indices_backward(torch.ones_like(y), x, ind, 2))
        """, "161002 indices"),
}


@pytest.mark.parametrize("key", list(NASTY))
def test_nasty(key):
    body, expected = NASTY[key]
    check(run_snippet(body), expected)


# ---------------------------------------------------------------------------------------------------------------
def test_impossible_adaptive_output_fails_fast():
    """output_size=(2**23, 2**23) on a 4x4 input (an output of 2**46 elements) must fail without first using
    hundreds of MB: the peak RSS growth during the call stays under 128 MB."""
    if not os.path.exists("/proc/self/status"):
        pytest.skip("needs Linux /proc/self/status (VmHWM) to measure the peak memory of the call")
    # VmHWM (this process image's peak RSS), not ru_maxrss, which Linux carries over from the parent across exec
    proc = run_snippet("""
        def hwm_mb():
            with open("/proc/self/status") as fh:
                return next(int(ln.split()[1]) for ln in fh if ln.startswith("VmHWM:")) / 1024
        x = np.zeros((1, 1, 4, 4), np.float32)
        r0 = hwm_mb()
        expect(lambda: pg.adaptive_max_pool2d(x, (2**23, 2**23)))
        grew = hwm_mb() - r0
        print("GREW_MB", grew)
        assert grew < 128, f"peak RSS grew by {grew:.0f} MB before the error"
        """)
    check(proc, ("MemoryError", "161002 output_size", "161002 x"))

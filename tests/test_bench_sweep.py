"""bench/sweep.py, the cliff finder: its sweeps straddle every planner threshold this build has, steps are
flagged only when the median and the fastest rounds agree, and only reproduced steps are confirmed."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "bench"))
import sweep  # noqa: E402


def _const(mods: tuple[str, ...], name: str) -> int | None:
    return sweep.lookup(mods, name)[1]


def _straddles(values: list[float], threshold: float) -> bool:
    return min(values) < threshold <= max(values)


def _ho(h: int, pt: dict) -> int:
    return (h + 2 * pt["p"] - pt["k"]) // pt["s"] + 1


def test_every_operator_is_swept_and_sizes_grow():
    all_sweeps = sweep.sweeps()
    assert {s.op for s in all_sweeps} == set(sweep.OPS)
    for s in all_sweeps:
        vals = [p[s.label] for p in s.points]
        assert len(vals) >= 5 and vals == sorted(set(vals)), s.key
    assert len({(s.key) for s in all_sweeps}) == len(all_sweeps)
    # a selection keeps only its operators and layouts
    assert {s.op for s in sweep.sweeps(("avg_bwd",), ("NHWC",))} == {"avg_bwd"}
    assert {s.layout for s in sweep.sweeps(("avg_bwd",), ("NHWC",))} == {"NHWC"}


def test_the_sweeps_straddle_the_thresholds_of_this_build():
    """For every threshold constant this build defines, some sweep has sizes on both sides of it."""
    S = sweep.sweeps()

    def of(op: str, layout: str | None = None, alloc: bool = False) -> list[sweep.Sweep]:
        return [s for s in S if s.op == op and (layout is None or s.layout == layout) and s.alloc == alloc]

    def x_bytes(p: dict) -> int:
        return 4 * p["N"] * p["C"] * p["H"] * p["W"]
    checks = {
        (("poolgrad.avg_pool",), "STREAM_MIN_BYTES"): lambda v: any(_straddles([x_bytes(p) for p in s.points], v)
                                                                 for s in of("avg_bwd", "NCHW")),
        (("poolgrad.tf_max_pool",), "STREAM_BYTES"): lambda v: any(_straddles([x_bytes(p) for p in s.points], v)
                                                                for s in of("tf_grad")),
        (("poolgrad.memory", "poolgrad.buffers"), "MIN_BYTES"): lambda v: any(
            _straddles([x_bytes(p) for p in s.points], v) for s in of("max_bwd", alloc=True)),
        (("poolgrad._scatter",), "BAND_MAX"): lambda v: (
            any(_straddles([p["H"] * p["W"] for p in s.points], v) for s in of("max_bwd", "NCHW")) and
            any(_straddles([p["H"] * p["W"] * p["C"] for p in s.points], v) for s in of("max_bwd", "NHWC"))),
        (("poolgrad._scatter",), "SCATTER_BANDS_PER_THREAD"): lambda v: any(_straddles([p["N"] for p in s.points], 2 * v)
                                                                 for s in of("max_bwd", "NHWC")),
        (("poolgrad.avg_pool",), "AVG_ITEMS_PER_THREAD"): lambda v: any(_straddles([p["N"] for p in s.points], 2 * v)
                                                                 for s in of("avg_bwd", "NHWC")),
        (("poolgrad.indexed", "poolgrad.max_pool_indices"), "UNIFORM_MAX_ROW"): lambda v: any(
            _straddles([p["W"] * p["C"] for p in s.points], v + 1) for s in of("max_fwd", "NHWC")),
        (("poolgrad.indexed", "poolgrad.max_pool_indices"), "UNIFORM_MAX_CELLS"): lambda v: any(
            _straddles([p["k"] ** 2 for p in s.points], v + 1) for s in of("max_fwd")),
        (("poolgrad.avg_pool",), "DV_REPEAT_MAX"): lambda v: any(
            _straddles([_ho(p["W"], p) * p["C"] for p in s.points], v + 1) for s in of("avg_bwd", "NHWC")),
        # values (float32) and int64 indices of the channels-last max forward
        (("poolgrad._max_pool_indices",), "CL_STREAM_BYTES"): lambda v: any(
            _straddles([12 * p["N"] * p["C"] * _ho(p["H"], p) * _ho(p["W"], p) for p in s.points], v)
            for s in of("max_fwd", "NHWC")),
        # float32 y of the channels-last average forward
        (("poolgrad._avg_pool",), "CL_STREAM_BYTES"): lambda v: any(
            _straddles([4 * p["N"] * p["C"] * _ho(p["H"], p) * _ho(p["W"], p) for p in s.points], v)
            for s in of("avg_fwd", "NHWC")),
        (("poolgrad.tf_max_pool",), "COMPOSE_MAX_C"): lambda v: any(_straddles([p["C"] for p in s.points], v)
                                                                 for s in of("tf_grad", "NHWC")),
        (("poolgrad._scatter",), "PLANES_MAX_CELLS"): lambda v: any(
            _straddles([p["H"] * p["W"] for p in s.points], v + 1) for s in of("max_bwd", "NCHW")),
        # every density tier of the planes forward: a sweep of windows of that density (k^2 / s^2) across its size
        (("poolgrad.indexed",), "PLANES_MAX_CELLS"): lambda v: all(
            any(_straddles([p["H"] * p["W"] for p in s.points], cells + 1) and lo < s.points[0]["k"] ** 2 /
                s.points[0]["s"] ** 2 <= top for s in of("max_fwd", "NCHW"))
            for (lo, _), (top, cells) in zip([(0.0, 0)] + list(v[:-1]), v)),
        (("poolgrad.planning", "poolgrad.config"), "GRAIN"): lambda v: all(
            any(_straddles([p.get("n") or p["N"] * p["C"] * p["H"] * p["W"] for p in s.points], 2 * v)
                for s in of(op)) for op in sweep.OPS),
    }
    checked = 0
    for (mods, name), check in checks.items():
        value = _const(mods, name)
        if value is not None:
            assert check(value), f"no sweep straddles {name} = {value}"
            checked += 1
    # every threshold checked here is one the report lists
    assert set(checks) <= {(m, n) for m, n, _ in sweep.THRESHOLDS}
    assert checked >= 8


def test_thresholds_report_values_and_missing_names():
    found = sweep.thresholds()
    assert len(found) == len(sweep.THRESHOLDS)
    for (key, value, _), (mods, name, _) in zip(found, sweep.THRESHOLDS):
        assert key.endswith("." + name) and key.rsplit(".", 1)[0] in mods
        assert value == _const(mods, name)
    assert sweep.lookup(("poolgrad.no_such_module", "poolgrad.avg_pool"), "STREAM_MIN_BYTES")[0] == "poolgrad.avg_pool"
    assert sweep.lookup(("poolgrad.avg_pool",), "NO_SUCH_NAME") == (None, None)


def test_find_steps():
    per = [1.0, 1.2, 2.0, 2.1, 1.0, 0.5]
    secs = [1.0, 2.0, 5.0, 6.0, 6.0, 6.0]
    assert sweep.find_steps(per, secs, 1.5, 1e-3) == [(1, "rise"), (3, "drop"), (4, "drop")]
    # drops of calls shorter than the floor are per-call overhead, not flagged
    assert sweep.find_steps(per, [1e-4] * 6, 1.5, 1e-3) == [(1, "rise")]


def _fake_timer(first: dict[int, list[float]], again: dict[tuple[int, int], list[list[float]]]):
    """A stand-in for interleaved_times: the first call (every point) returns ``first``; a re-timing of the
    pair (i, i + 1) returns ``again[i, i + 1]``."""
    state = {"calls": 0}

    def timer(fns, reps, warmup, max_seconds):
        state["calls"] += 1
        for fn in fns.values():     # the callables are real: they must run
            fn()
        if len(fns) > 2 or state["calls"] == 1:
            return {k: first[k] for k in fns}
        pair = next(p for p in again if p not in state)
        state[pair] = True
        return {0: again[pair][0], 1: again[pair][1]}
    return timer


def test_flags_need_median_and_fastest_and_a_rerun():
    # elements per point: 1024, 2048, 4096, 8192 (ns per element = seconds / elements)
    sw = sweep.Sweep("elementwise", "n", "test", "-", "n", [{"n": 1024 << i} for i in range(4)])
    t = [1e-3, 2e-3, 12e-3, 24e-3]        # a 3x per-element rise between points 1 and 2
    first = {0: [t[0]] * 3, 1: [t[1]] * 3, 2: [t[2]] * 3, 3: [t[3]] * 3}
    res = sweep.run_sweep(sw, 1, 3, 1.5, 1e-3, timer=_fake_timer(first, {(1, 2): [[t[1]] * 9, [t[2]] * 9]}))
    assert [f["from"] for f in res["flags"]] == [2048]
    f = res["flags"][0]
    assert f["kind"] == "rise" and f["confirmed"] and np.isclose(f["ratio"], 3.0)
    assert np.isclose(f["ratio_best"], 3.0)
    assert "CONFIRMED" in sweep.format_result(res)
    pts = res["points"]
    assert [p["n"] for p in pts] == [1024, 2048, 4096, 8192] and pts[-1]["step"] is None
    assert np.isclose(pts[0]["ns_per_element"], 1e9 * 1e-3 / 1024)

    # the fastest round shows no step (4.2 ms for twice the elements of 2 ms): not flagged at all
    calm = {**first, 2: [t[2], t[2], t[1] * 2.1]}
    res = sweep.run_sweep(sw, 1, 3, 1.5, 1e-3, timer=_fake_timer(calm, {}))
    assert res["flags"] == []

    # flagged, but the re-timed pair shows no step: reported, not confirmed
    res = sweep.run_sweep(sw, 1, 3, 1.5, 1e-3, timer=_fake_timer(first, {(1, 2): [[t[1]] * 9, [2 * t[1]] * 9]}))
    assert len(res["flags"]) == 1 and not res["flags"][0]["confirmed"]
    assert "(not reproduced)" in sweep.format_result(res)


@pytest.mark.parametrize("op", sweep.OPS)
def test_every_operator_call_runs(op):
    """One small point of each operator's first sweep runs in both layouts (the real calls, tiny sizes)."""
    for s in sweep.sweeps((op,)):
        if s.label in ("N", "C", "n"):
            pt = dict(s.points[0], **({"N": 1} if "N" in s.points[0] else {}))
            if "H" in pt and s.label != "C":
                pt.update(H=min(pt["H"], 16), W=min(pt["W"], 16))
            fn, n = sweep.make_call(s, pt, 2)
            fn()
            assert n > 0

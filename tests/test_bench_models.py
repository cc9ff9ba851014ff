"""bench/cnn_layers.py (the pooling layers of standard CNNs) and bench/models.py (poolgrad versus PyTorch on them):
the table matches PyTorch's output shapes and the models' pooling calls, results are checked before timing (and
a wrong result is caught), both output modes write where they should, and a tiny run gives sane rows, totals and
tables."""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "bench"))
import cnn_layers  # noqa: E402
import models  # noqa: E402
from cnn_layers import Layer  # noqa: E402


def test_every_layer_has_pytorchs_output_size():
    F = torch.nn.functional
    for L in cnn_layers.LAYERS:
        x = torch.zeros(1, L.c, L.h, L.w)
        if L.op == "max":
            y = F.max_pool2d(x, L.kernel, L.stride, L.padding, ceil_mode=L.ceil_mode)
        elif L.op == "avg":
            y = F.avg_pool2d(x, L.kernel, L.stride, L.padding, ceil_mode=L.ceil_mode)
        else:
            y = F.adaptive_max_pool2d(x, L.output_size)
        assert tuple(y.shape[2:]) == L.out_hw(), L.key


def test_the_table_has_every_pooling_call_of_each_model():
    calls = {m: sum(L.count for L in cnn_layers.LAYERS if L.model == m) for m in cnn_layers.MODELS}
    assert calls == {"vgg16": 5, "resnet50": 1, "alexnet": 3, "googlenet": 13, "inception_v3": 13,
                     "densenet121": 4, "squeezenet1_1": 3, "adaptive_head": 1}
    assert len({L.key for L in cnn_layers.LAYERS}) == len(cnn_layers.LAYERS)
    assert [L.name for L in cnn_layers.layers_of(["alexnet"])] == ["pool1", "pool2", "pool5"]
    with pytest.raises(ValueError, match="unknown model"):
        cnn_layers.layers_of(["lenet"])


def test_phase_bytes():
    L = Layer("t", "p", "max", 2, 4, 4, 2, 2)          # 2x4x4 -> 2x2x2
    x, y, ind = 4 * 32, 4 * 8, 8 * 8
    assert models.phase_bytes(L, 1, "fwd") == x + y + ind
    assert models.phase_bytes(L, 1, "bwd") == y + ind + x
    assert models.phase_bytes(L, 3, "fwdbwd") == 3 * 2 * (x + y + ind)
    assert models.phase_bytes(Layer("t", "a", "avg", 2, 4, 4, 2, 2), 1, "bwd") == y + x


TINY = [Layer("tiny", "max", "max", 3, 9, 9, 3, 2, 1, True, count=2),
        Layer("tiny", "avg", "avg", 4, 7, 7, 3, 1, 1),
        Layer("tiny", "adaptive", "adaptive_max", 5, 9, 8, output_size=(4, 3))]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("layer", TINY, ids=lambda L: L.name)
def test_results_are_checked_and_a_wrong_one_is_caught(layer, layout):
    lr = models.LayerRun(layer, 2, layout)
    for mode in models.MODES:
        fns = lr.callables(2, mode, models.PHASES)
        assert set(fns) == {(lib, ph) for lib in models.LIBS for ph in models.PHASES}
        lr.check(fns)
    fns = lr.callables(1, "alloc", models.PHASES)
    good = fns["poolgrad", "bwd"]()
    fns["poolgrad", "bwd"] = lambda: good * 1.01
    with pytest.raises(AssertionError, match="bwd gradient: differs from PyTorch"):
        lr.check(fns)
    if layer.op != "avg":
        fns = lr.callables(1, "alloc", ("fwd",))
        y, ind = fns["poolgrad", "fwd"]()
        fns["poolgrad", "fwd"] = lambda: (y, ind[::-1].copy())
        with pytest.raises(AssertionError, match="indices differ"):
            lr.check(fns)


def test_out_mode_writes_preallocated_outputs_and_alloc_mode_does_not():
    lr = models.LayerRun(TINY[0], 2, "NHWC")
    out = lr.callables(1, "out", models.PHASES)
    for phase in ("bwd", "fwdbwd"):
        assert out["poolgrad", phase]() is out["poolgrad", phase]()
    for phase in models.PHASES:
        first, second = out["torch", phase](), out["torch", phase]()
        a, b = (first[0], second[0]) if isinstance(first, tuple) else (first, second)
        assert a.data_ptr() == b.data_ptr(), phase
    alloc = lr.callables(1, "alloc", ("bwd",))
    assert alloc["poolgrad", "bwd"]() is not alloc["poolgrad", "bwd"]()
    assert alloc["torch", "bwd"]().data_ptr() != lr.xt.data_ptr()


def test_pytorch_reads_poolgrads_arrays():
    lr = models.LayerRun(TINY[1], 2, "NHWC")
    assert lr.xt.data_ptr() == lr.x.ctypes.data and lr.xt.is_contiguous(memory_format=torch.channels_last)
    assert lr.gyt.data_ptr() == lr.gy.ctypes.data


def test_tiny_run_rows_totals_and_tables(tmp_path):
    result = models.run(TINY, [1, 2], ["NCHW", "NHWC"], [1, 2], ["alloc", "out"], ("fwdbwd", "bwd"), reps=1,
                        warmup=0, copy_bytes=1 << 20, progress=None)
    rows = result["rows"]
    assert len(rows) == len(TINY) * 2 * 2 * 2 * 2
    for r in rows:
        assert r["copy_gbs"] == result["copy_gbs"][str(r["threads"])] > 0
        for phase in ("fwdbwd", "bwd"):
            assert r[f"poolgrad_{phase}_s"] > 0 and r[f"torch_{phase}_s"] > 0
        assert "poolgrad_fwd_s" not in r
    totals = models.model_totals(result)
    assert len(totals) == 2 * 2 * 2 * 2
    t = totals[0]
    key = (t["batch"], t["layout"], t["threads"], t["mode"])
    same = [r for r in rows if (r["batch"], r["layout"], r["threads"], r["mode"]) == key]
    assert np.isclose(t["poolgrad_fwdbwd_s"], sum(r["count"] * r["poolgrad_fwdbwd_s"] for r in same))
    summ = models.summary(result)
    assert len(summ) == 2 * 2 * 2 * 2 and all(s["rows"] == 6 and s["min"] <= s["geomean"] <= s["max"] for s in summ)
    text = models.markdown(result)
    assert "| tiny/max (x2) | 3x9x9 k3s2p1 ceil | 1 | NCHW | 1 | alloc |" in text
    assert "| tiny/adaptive | 5x9x8 -> 4x3 |" in text
    assert "| layout | mode | threads | phase |" in text and "| model | batch |" in text
    piv = models.pivot(result, "out")
    assert piv.splitlines()[0] == "| model | batch | NCHW 1t | NCHW 2t | NHWC 1t | NHWC 2t |"
    assert len(piv.splitlines()) == 2 + 2 and piv.splitlines()[2].startswith("| tiny | 1 | ")
    path = tmp_path / "run.json"
    path.write_text(json.dumps(result))
    md = tmp_path / "run.md"
    assert models.main(["--from-json", str(path), "--markdown", str(md), "--tables", "models"]) == 0
    assert md.read_text().count("| tiny |") == len(totals)


def test_geomean():
    assert np.isclose(models.geomean([0.5, 2.0, 1.0]), 1.0)
    assert np.isclose(models.geomean([4.0, 1.0]), 2.0)


def test_a_wrong_result_is_reported_and_not_timed(monkeypatch):
    def wrong(self, fns):
        raise AssertionError(f"{self.layer.key}: bwd gradient: differs from PyTorch (largest gap 1)")
    monkeypatch.setattr(models.LayerRun, "check", wrong)
    result = models.run(TINY[:2], [1], ["NCHW"], [1], ["out"], ("fwdbwd",), reps=1, warmup=0, copy_bytes=1 << 20,
                        progress=None)
    assert len(result["errors"]) == 2 and all("error" in r and "poolgrad_fwdbwd_s" not in r for r in result["rows"])
    assert models.model_totals(result) == [] and models.summary(result) == []
    text = models.markdown(result)
    assert text.startswith("**2 configuration(s) gave results that differ from PyTorch's")
    assert "check failed, not timed: tiny/max: bwd gradient" in text


def test_tables_without_the_training_step_phase(capsys):
    """A run of the forward and backward alone (no fwdbwd) renders its pivot per phase and its layer rows."""
    result = models.run(TINY[:2], [1], ["NCHW"], [1], ["out"], ("bwd", "fwd"), reps=1, warmup=0,
                        copy_bytes=1 << 20, progress=None)
    text = models.markdown(result, ("summary", "pivot", "layers"))
    assert "`out` mode, `bwd`" in text and "`out` mode, `fwd`" in text and "fwdbwd" not in text
    assert models.pivot(result, "out", "fwd").splitlines()[0] == "| model | batch | NCHW 1t |"


def test_thread_clock_times_one_thread_calls_only():
    """``clock="thread"`` records CPU time of the calling thread (said in the tables); more threads are refused,
    since their workers' time would not be counted."""
    result = models.run(TINY[:1], [1], ["NCHW"], [1], ["out"], ("bwd",), reps=2, warmup=0, copy_bytes=1 << 20,
                        progress=None, clock="thread")
    assert result["clock"] == "thread" and result["rows"][0]["poolgrad_bwd_s"] > 0
    assert "calling-thread CPU time" in models.markdown(result, ("summary",))
    with pytest.raises(ValueError, match="one-thread"):
        models.run(TINY[:1], [1], ["NCHW"], [1, 2], ["out"], ("bwd",), reps=1, warmup=0, progress=None,
                   clock="thread")

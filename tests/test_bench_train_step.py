"""bench/train_step.py's paired statistics: the per-pair speed-up, its 95% interval and the verdict the docs
quote, and the report table of a finished run."""
from __future__ import annotations

import json
import math
import os
import sys

import pytest

pytest.importorskip("torch")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "bench"))
import train_step  # noqa: E402


def test_paired_speed_up_and_interval():
    # ratios 1.1, 1.2, 1.0 (the machine drifts 3x between pairs; the ratio within each pair is what counts)
    g, lo, hi = train_step.paired([1.1, 3.6, 2.0], [1.0, 3.0, 2.0])
    logs = [math.log(1.1), math.log(1.2), 0.0]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((v - mean) ** 2 for v in logs) / 2)
    assert g == pytest.approx(math.exp(mean))
    assert lo == pytest.approx(math.exp(mean - 4.303 * sd / math.sqrt(3)))
    assert hi == pytest.approx(math.exp(mean + 4.303 * sd / math.sqrt(3)))
    assert lo < 1 < hi and train_step.verdict(lo, hi) == "level"
    assert train_step.verdict(*train_step.paired([2.2, 4.4, 1.1, 3.3], [2.0, 4.0, 1.0, 3.1])[1:]) == "faster"
    assert train_step.verdict(*train_step.paired([2.0, 4.0, 1.0, 3.0], [2.2, 4.4, 1.1, 3.3])[1:]) == "slower"


def test_report_prints_the_paired_table(tmp_path, capsys):
    row = {"model": "resnet18", "mode": "eager", "format": "NCHW", "threads": 1, "batch": 32, "size": 224,
           "reps": 3, "original_s": 4.0, "original_all_s": [4.0, 4.2, 3.9], "original_all_cpu_s": [4.0, 4.1, 3.9],
           "poolgrad_s": 3.6, "poolgrad_all_s": [3.6, 3.8, 3.5], "poolgrad_all_cpu_s": [3.6, 3.7, 3.5],
           "original_pool_s": 0.3, "poolgrad_pool_s": 0.06}
    path = tmp_path / "run.json"
    path.write_text(json.dumps([row]))
    assert train_step.main(["--report", str(path), "--paired"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3 and lines[2].startswith("| resnet18 | NCHW | 1 | 3 | 4.00 | 3.60 | 1.1")
    assert "| faster |" in lines[2] and "0.300 -> 0.060" in lines[2]

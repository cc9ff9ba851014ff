"""DistributedDataParallel with a converted model: 2 gloo processes on 127.0.0.1 (examples/ddp_train.py --check)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import poolgrad  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="gloo backend not built")
def test_ddp_averaged_gradients_equal_one_process_on_the_whole_batch():
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(poolgrad.__file__)))
    # Bounded: a collective gives up after 60 s, the whole run after 240 s.
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "ddp_train.py"), "--check",
                           "--world-size", "2", "--steps", "2", "--timeout", "60"],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("match: DDP-averaged gradients") == 2
    assert "rank 0:" in proc.stdout and "rank 1:" in proc.stdout

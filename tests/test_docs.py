"""The API reference (``docs/api``, Sphinx autodoc + numpydoc over the public docstrings) builds without a warning,
and ``docs/SEMANTICS.md`` (the user-facing contract) stays in step with the public API.

The Sphinx build runs in a subprocess with ``-W`` (every warning is an error: a malformed numpydoc section, a
docstring autodoc cannot import, a broken reST construct) into a temporary folder, so it never writes into the
checkout.  It is skipped only when Sphinx or numpydoc is not installed (both are in the ``test`` extra).
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

import poolgrad as pg

ROOT = Path(__file__).resolve().parent.parent
API = ROOT / "docs" / "api"
SEMANTICS = ROOT / "docs" / "SEMANTICS.md"

needs_sphinx = pytest.mark.skipif(
    importlib.util.find_spec("sphinx") is None or importlib.util.find_spec("numpydoc") is None,
    reason="sphinx and numpydoc are not installed (pip install -e '.[test]')")


@needs_sphinx
def test_api_reference_builds_without_warnings(tmp_path: Path) -> None:
    out = tmp_path / "html"
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
           "-d", str(tmp_path / "doctrees"), str(API), str(out)]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"sphinx failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    # Every public function has its own entry (an autodoc directive that silently documented nothing, or a
    # name dropped from the pages, would otherwise pass).
    pages = "".join(p.read_text(encoding="utf-8") for p in out.glob("*.html"))
    for name in pg.__all__:
        assert f'id="poolgrad.{name}"' in pages, f"poolgrad.{name} has no entry in the API reference"
    # numpydoc turned the sections into rendered field lists (not literal "Parameters\n----------" text).
    text = (out / "max_pool.html").read_text(encoding="utf-8")
    assert "kernel_size" in text and "----------" not in text


def test_api_reference_covers_every_public_name() -> None:
    """Each name in ``poolgrad.__all__`` is named by a directive in ``docs/api`` (checked without Sphinx, so CI
    without the docs extras still catches a new public function that nobody documented)."""
    directives = "".join(p.read_text(encoding="utf-8") for p in API.glob("*.rst"))
    documented = set(re.findall(r"^\.\. (?:autofunction|autoclass|autoexception|autodata|data):: (?:poolgrad\.)?(\w+)",
                                directives, flags=re.M))
    missing = sorted(set(pg.__all__) - documented)
    assert not missing, f"public names without a page in docs/api: {missing}"


def test_semantics_names_every_public_name() -> None:
    text = SEMANTICS.read_text(encoding="utf-8")
    missing = [name for name in pg.__all__ if f"`{name}" not in text and f"{name}`" not in text]
    assert not missing, f"docs/SEMANTICS.md does not mention {missing}"


def test_no_user_facing_page_points_outside_the_repository() -> None:
    """README.md and the docs are read by people who cloned the repository: they must not send them to files
    that only exist beside the developers' checkout."""
    for page in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        text = page.read_text(encoding="utf-8")
        assert "shared/SPEC.md" not in text and "../shared" not in text, f"{page.name} points outside the repo"
    assert "docs/SEMANTICS.md" in (ROOT / "README.md").read_text(encoding="utf-8")


def _semantics_text() -> str:
    """SEMANTICS.md with every run of whitespace collapsed (quoted messages wrap across lines there)."""
    return " ".join(SEMANTICS.read_text(encoding="utf-8").split())


def _message(call: Callable[[], object]) -> str:
    with pytest.raises(pg.PoolGradError) as exc:
        call()
    return str(exc.value)


def test_semantics_quotes_real_error_messages() -> None:
    """The error messages SEMANTICS.md quotes as examples are the library's, word for word."""
    text = _semantics_text()
    f32 = np.float32
    # 10.2: a grad_output of the wrong shape
    msg = _message(lambda: pg.max_pool2d_with_indices_backward(
        np.ones((2, 3, 4, 4), f32), np.zeros((2, 3, 10, 10), f32), np.zeros((2, 3, 4, 4), np.int64), 3, 2, 1))
    assert msg in text, msg
    # 5.3: the first index outside its plane, in (n, c, oh, ow) row-major order
    x = np.random.default_rng(0).random((2, 3, 6, 5)).astype(f32)
    y, idx = pg.max_pool2d_with_indices(x, 3, 2, 1)
    idx[1, 2, 1, 0], idx[1, 1, 2, 2] = 30, 99
    msg = _message(lambda: pg.max_pool2d_with_indices_backward(np.ones_like(y), x, idx, 3, 2, 1))
    assert msg in text, msg
    # 5.4: check_orig_output names the first x2 that is not the forward's
    x1 = np.ones((1, 4, 4, 3), f32)
    x2 = pg.max_pool(x1, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    x2[0, 1, 0, 2] = 2.0
    msg = _message(lambda: pg.max_pool_grad(x1, x2, np.ones_like(x2), (1, 2, 2, 1), (1, 2, 2, 1), "VALID",
                                            check_orig_output=True))
    if "np.float32(" in repr(f32(1)):          # NumPy >= 2 spells scalars this way; 1.x prints the bare value
        assert msg in text, msg

"""Process-wide settings: the determinism switch, thread-count resolution and the build configuration."""
from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from typing import Iterator

from . import _callkey, _config, memory
from .errors import ParamInvalidError
from .validation import as_int, parse_bool

__all__ = ["set_deterministic", "is_deterministic", "deterministic", "resolve_deterministic",
           "resolve_num_threads", "set_buffer_cache_limit", "show_config", "get_config"]

# The seeds document these operators as nondeterministic unless ACL_OPT_DETERMINISTIC is set, so the
# process-wide default is False.  A plain module global (not a context variable) on purpose: the setting is
# process-wide, like torch.use_deterministic_algorithms and aclrtCtxSetSysParamOpt.
_deterministic = False
_lock = threading.Lock()


def set_deterministic(flag: bool) -> None:
    """Set the process-wide default for ``deterministic=None``.

    Parameters
    ----------
    flag : bool
        True selects the atomic-free deterministic kernels (bitwise identical for every run and thread count).
    """
    _store(parse_bool(flag, "flag"))


def is_deterministic() -> bool:
    """Return the process-wide default used when a call passes ``deterministic=None``.

    Returns
    -------
    bool
        The current default (False unless :func:`set_deterministic` or :func:`deterministic` changed it).
    """
    return _deterministic


@contextlib.contextmanager
def deterministic(flag: bool = True) -> Iterator[None]:
    """Context manager that sets the process-wide determinism default and restores the previous one on exit.

    Parameters
    ----------
    flag : bool, default True
        The setting inside the ``with`` block.

    Yields
    ------
    None
        Control returns to the ``with`` block with the setting in force.
    """
    value = parse_bool(flag, "flag")
    with _lock:
        previous = _deterministic
        _store(value)
    try:
        yield
    finally:
        _store(previous)


def _store(value: bool) -> None:
    """Set the default here and in the compiled call key's mirror (plans are keyed on it), always together."""
    global _deterministic
    _deterministic = value
    _callkey.set_det_default(value)


def resolve_deterministic(value: object) -> bool:
    """Per-call ``deterministic=`` argument: None means the process-wide setting."""
    if value is None:
        return _deterministic
    return parse_bool(value, "deterministic")


MAX_THREADS = 4096


def resolve_num_threads(value: object) -> int:
    """Per-call ``num_threads=`` argument.

    None reads ``omp_get_max_threads()`` at call time (so ``OMP_NUM_THREADS`` and
    ``threadpoolctl.threadpool_limits`` take effect), in the manner of scikit-learn's
    ``_openmp_effective_n_threads``; an explicit positive int wins; anything else is an error.
    """
    if value is None:
        return max(1, int(_config.omp_max_threads()))
    n = as_int(value, "num_threads", "None or a positive int")
    if n < 1:
        raise ParamInvalidError(f"num_threads: expected None or a positive int, got {n}")
    if not _config.openmp_enabled():
        return 1
    # A safety bound, not a tuning: plans allocate scratch rows per thread, so num_threads=10**9 must not
    # allocate 10**9 rows, and no machine this library targets has more hardware threads than this.
    return min(n, MAX_THREADS)


def set_buffer_cache_limit(nbytes: int) -> None:
    """Set the most bytes of large blocks poolgrad keeps for reuse (0 turns recycling off).

    Free blocks above the new limit are released at once (see :mod:`poolgrad.memory`).

    Parameters
    ----------
    nbytes : int
        Limit in bytes, >= 0.
    """
    value = as_int(nbytes, "nbytes", "an int >= 0")
    if value < 0:
        as_int(None, "nbytes", "an int >= 0", shown=value)
    memory.set_limit(value)


def get_config() -> dict:
    """Return the build and runtime configuration (see :func:`show_config`).

    Returns
    -------
    dict
        OpenMP and build flags, thread counts, the vector variants in use, the buffer-cache limit, versions.
    """
    path = os.path.join(os.path.dirname(__file__), "_build_config.json")
    try:
        with open(path) as fh:
            build = json.load(fh)
    except OSError:
        build = {}
    import numpy as np
    from . import _avg_pool, _dtypes, _max_pool_indices, _tf_max_pool
    return {
        "openmp": bool(_config.openmp_enabled()),
        "omp_max_threads": int(_config.omp_max_threads()),
        "cpu_count": os.cpu_count(),
        "native_build": bool(build.get("native", False)),
        "asan_build": bool(build.get("asan", False)),
        "compile_args": build.get("compile_args", []),
        # vector variants chosen at import from what this CPU has (the results are the same bits either way)
        "tf_max_pool_isa": ("baseline", "avx2", "avx512")[_tf_max_pool.isa_level()],
        "avg_pool_simd": _avg_pool.simd(),
        "f16c_rows": bool(_dtypes.have_f16c()),
        "argmax_isa": _max_pool_indices.ARGMAX_ISA,
        "buffer_cache_limit": memory.buffer_cache_limit(),
        "deterministic_default": _deterministic,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
    }


def show_config() -> None:
    """Print how poolgrad was built (OpenMP or serial, flags) and the thread count it would use now."""
    for key, value in get_config().items():
        print(f"{key:>22}: {value}")

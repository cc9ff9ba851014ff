"""Process-wide settings: the determinism switch, thread-count resolution, the instruction-set level of the
kernels and the build configuration."""
from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from types import TracebackType
from typing import Iterator

from . import _callkey, _config, memory
from .errors import ParamInvalidError
from .validation import as_int, parse_bool

__all__ = ["set_deterministic", "is_deterministic", "deterministic", "resolve_deterministic",
           "resolve_num_threads", "set_buffer_cache_limit", "ISA_LEVELS", "isa_level", "cpu_isa_level",
           "supported_isa_levels", "set_isa_level", "show_config", "get_config"]

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


# ---- the instruction-set level -------------------------------------------------------------------------------
# Kernels that carry AVX2 / AVX-512 copies of their loops pick one by a single process-wide level
# (src_c/pg_isa.h); every level gives bitwise identical results, so the level is a speed setting and a way for the
# tests to run every variant on one machine.  The CPU is probed once at import; POOLGRAD_ISA, read once at import,
# and set_isa_level can lower the level (never raise it above the CPU's: its instructions would fault).
ISA_LEVELS = ("portable", "avx2", "avx512")
_ISA_NEEDS = ("nothing", "AVX2, FMA and F16C", "AVX-512 F, VL, BW and DQ (and AVX2, FMA and F16C)")


def cpu_isa_level() -> str:
    """Return the highest instruction-set level this CPU runs.

    Returns
    -------
    str
        ``"portable"``, ``"avx2"`` (AVX2 with FMA and F16C) or ``"avx512"`` (AVX-512 F, VL, BW and DQ as well);
        always ``"portable"`` off x86-64.
    """
    return ISA_LEVELS[_config.cpu_isa_level()]


def supported_isa_levels() -> tuple[str, ...]:
    """Return every level :func:`set_isa_level` accepts on this CPU, lowest first.

    Returns
    -------
    tuple of str
        ``ISA_LEVELS`` up to :func:`cpu_isa_level`.
    """
    return ISA_LEVELS[:_config.cpu_isa_level() + 1]


def isa_level() -> str:
    """Return the instruction-set level every kernel family uses now.

    Returns
    -------
    str
        One of ``ISA_LEVELS``: the CPU's level unless ``POOLGRAD_ISA`` or :func:`set_isa_level` lowered it.
    """
    return ISA_LEVELS[_config.isa_level()]


def _parse_isa_level(level: object, what: str) -> int:
    """The index of ``level`` in ISA_LEVELS; refuses unknown names and levels above the CPU's."""
    if not isinstance(level, str) or level not in ISA_LEVELS:
        raise ParamInvalidError(f"{what}: expected one of {', '.join(map(repr, ISA_LEVELS))}, got {level!r}")
    code = ISA_LEVELS.index(level)
    cpu = _config.cpu_isa_level()
    if code > cpu:
        raise ParamInvalidError(f"{what}: {level!r} needs {_ISA_NEEDS[code]}, which this CPU does not have "
                                f"(the highest level it runs is {ISA_LEVELS[cpu]!r})")
    return code


class set_isa_level:  # noqa: N801 - used like a function (and a context manager), as torch.set_grad_enabled
    """Set the instruction-set level of every kernel family, process-wide; as a context manager, restore the
    previous level on exit.

    ``set_isa_level("portable")`` runs the baseline loops from now on; ``with set_isa_level("avx2"): ...`` runs
    the AVX2 copies inside the block only.  Results are bitwise identical at every level (the variants perform
    the same IEEE operations in the same order); the setting trades speed only, and lets tests run every
    variant on one machine.  The default is the CPU's level, or ``POOLGRAD_ISA`` (read once, at import).

    Parameters
    ----------
    level : {"portable", "avx2", "avx512"}
        At most :func:`cpu_isa_level`.

    Raises
    ------
    ParamInvalidError
        An unknown name, or a level this CPU does not run (naming the instructions it lacks).
    """

    def __init__(self, level: str) -> None:
        code = _parse_isa_level(level, "level")
        with _lock:
            self._previous = _config.isa_level()
            _config.store_isa_level(code)

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        _config.store_isa_level(self._previous)


def _isa_level_from_env() -> None:
    """Apply POOLGRAD_ISA (unset or empty: the CPU's level).  A bad value fails the import, naming the variable:
    running silently at another level than asked would hide the mistake."""
    value = os.environ.get("POOLGRAD_ISA", "")
    if value:
        _config.store_isa_level(_parse_isa_level(value, "POOLGRAD_ISA"))


_isa_level_from_env()


def get_config() -> dict:
    """Return the build and runtime configuration (see :func:`show_config`).

    Returns
    -------
    dict
        OpenMP and build flags, thread counts, the instruction-set level in use, the buffer-cache limit,
        versions.
    """
    path = os.path.join(os.path.dirname(__file__), "_build_config.json")
    try:
        with open(path) as fh:
            build = json.load(fh)
    except OSError:
        build = {}
    import numpy as np
    return {
        "openmp": bool(_config.openmp_enabled()),
        "omp_max_threads": int(_config.omp_max_threads()),
        "cpu_count": os.cpu_count(),
        "native_build": bool(build.get("native", False)),
        "asan_build": bool(build.get("asan", False)),
        "compile_args": build.get("compile_args", []),
        # the vector variants every kernel family runs (the same bits at every level; see set_isa_level)
        "isa_level": isa_level(),
        "buffer_cache_limit": memory.buffer_cache_limit(),
        "deterministic_default": _deterministic,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
    }


def show_config() -> None:
    """Print how poolgrad was built (OpenMP or serial, flags) and the thread count it would use now."""
    for key, value in get_config().items():
        print(f"{key:>22}: {value}")

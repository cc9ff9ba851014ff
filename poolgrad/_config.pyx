# cython: language_level=3
"""OpenMP facts the Python side needs at call time (twin of ``config.py``)."""

cdef extern from "pg_parallel.h" nogil:
    int pg_omp_max_threads()
    int PG_HAVE_OPENMP


def omp_max_threads() -> int:
    """``omp_get_max_threads()`` now (1 in a build without OpenMP); honours OMP_NUM_THREADS and threadpoolctl."""
    return pg_omp_max_threads()


def openmp_enabled() -> bool:
    """Whether the extension modules were compiled with OpenMP."""
    return bool(PG_HAVE_OPENMP)

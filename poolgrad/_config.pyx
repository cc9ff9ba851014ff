# cython: language_level=3
"""OpenMP facts and the one instruction-set level the kernels read (twin of ``config.py``).

The level lives here, once per process: this module's ``pg_isa_cell`` (``src_c/pg_isa.h``), exported as the
capsule ``isa_cell`` that every kernel module binds its reads to at import.  ``config.py`` decides what is
stored (the CPU's level, ``POOLGRAD_ISA``, ``set_isa_level``) and checks it against :func:`cpu_isa_level`."""
from cpython.pycapsule cimport PyCapsule_New

cdef extern from "pg_parallel.h" nogil:
    int pg_omp_max_threads()
    int PG_HAVE_OPENMP

cdef extern from "pg_isa.h" nogil:
    int pg_cpu_isa()
    int pg_isa()
    void pg_isa_store(int level)
    int pg_isa_cell
    const char* PG_ISA_CAPSULE


def omp_max_threads() -> int:
    """``omp_get_max_threads()`` now (1 in a build without OpenMP); honours OMP_NUM_THREADS and threadpoolctl."""
    return pg_omp_max_threads()


def openmp_enabled() -> bool:
    """Whether the extension modules were compiled with OpenMP."""
    return bool(PG_HAVE_OPENMP)


cdef int _cpu_level = pg_cpu_isa()
pg_isa_store(_cpu_level)
isa_cell = PyCapsule_New(<void*>&pg_isa_cell, PG_ISA_CAPSULE, NULL)


def cpu_isa_level() -> int:
    """The highest level this CPU runs (0 portable, 1 AVX2 with FMA and F16C, 2 AVX-512 F/VL/BW/DQ), probed once."""
    return _cpu_level


def isa_level() -> int:
    """The level every kernel family reads now."""
    return pg_isa()


def store_isa_level(int level) -> None:
    """Store the level every kernel family reads (``config.py`` has checked it against :func:`cpu_isa_level`)."""
    pg_isa_store(level)

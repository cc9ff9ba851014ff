# cython: language_level=3
"""Declarations of poolgrad/_launch.pyx, for the compiled modules that run plans (``_capi``)."""
cimport numpy as cnp
from libc.stdint cimport int64_t

cdef enum:
    MAXSLOT = 12    # array arguments of one dispatcher call
    MAXSRC = 8      # call arrays + outputs
    MAXD = 8        # dimensions of a view
    KEEP_SETS = 2   # per-call sets (scratch, flags) a record keeps for reuse, as memory.ScratchPool.KEEP
    MAXPATCH = 16   # pointer fields of a kernel struct that address the call's arrays
    MAXCTX = 4096   # bytes of a kernel struct a KernelRecord replays from the stack
    MAXCTX_WORDS = 512
    MAXTEMP = 4     # per-call buffers of a kernel struct (scratch, flags, hit counters)

# What a per-call buffer of a KernelCall is: scratch (uninitialised, 64-byte aligned); int8 flags (zeroed; any
# set: the data needs the checked path); int64 hit counters (zeroed; a sum other than ``temp_expect``: the same).
cdef enum:
    TEMP_SCRATCH = 0
    TEMP_FLAGS = 1
    TEMP_HITS = 2


# A kernel module's runner of one kernel: the parallel loop over ``nitems`` work items of the struct ``ctx``
# (the dispatcher's arguments, filled in), ``code`` selecting the dtype specialisation.
ctypedef void (*KernelRun)(const void *ctx, Py_ssize_t nitems, int nthreads, int code) noexcept nogil


# A kernel call captured below its dispatcher (see KernelRecord); plain C, so a nogil caller may run it.
cdef struct KernelCall:
    KernelRun fn
    char *ctx                       # the struct the dispatcher filled (copied; freed with the record)
    size_t size
    Py_ssize_t nitems
    int nthreads, code
    # pointer fields of ctx that address a source: byte offset in ctx, source index, offset from its data
    int npatch
    Py_ssize_t patch_off[MAXPATCH]
    int patch_src[MAXPATCH]
    Py_ssize_t patch_delta[MAXPATCH]
    # pointer fields of ctx that address a per-call buffer, which every run allocates for itself
    int ntemp
    Py_ssize_t temp_off[MAXTEMP]
    size_t temp_bytes[MAXTEMP]
    int temp_kind[MAXTEMP]
    int64_t temp_expect[MAXTEMP]
    # the per-call buffers of one run in one block (each at a 64-byte aligned offset), and up to KEEP_SETS
    # blocks runs gave back for reuse (slots taken and filled atomically: concurrent runs never share one)
    size_t temp_at[MAXTEMP]
    size_t block
    void *spare[KEEP_SETS]


# 0: ran; 1: ran, but its flags / hit counters say the data needs the checked path (whose rerun overwrites every
# output the run wrote); -1: a per-call buffer could not be allocated (nothing ran).  ``c``'s spare blocks are
# the only thing a run changes in it (atomically).
cdef int run_kernel_call(const KernelCall *c, char **data) noexcept nogil


cdef class KernelRecord:
    cdef KernelCall call
    cdef bint filled
    cdef list keep      # objects the struct addresses that the dispatcher made for the call (tables)

    cdef bint bind(self, list sources) except -1


cdef int record_kernel(object record, KernelRun fn, const void *ctx, size_t size, Py_ssize_t nitems,
                       int nthreads, int code) except -1
cdef int record_temp(object record, const void *ctx, const void *field, size_t nbytes, int kind,
                     int64_t expect) except -1
cdef int record_keep(object record, object obj) except -1


cdef class Launch:
    cdef object fn
    cdef list args
    cdef Py_ssize_t nargs
    cdef int nsrc, nout, nslot
    cdef list free
    # slots: argument position, source index, and the view's recipe (descr None: the source itself)
    cdef int pos[MAXSLOT]
    cdef int src[MAXSLOT]
    cdef int nd[MAXSLOT]
    cdef cnp.npy_intp dims[MAXSLOT][MAXD]
    cdef cnp.npy_intp steps[MAXSLOT][MAXD]
    cdef list descr
    # outputs: dtype, shape and strides of each allocated output
    cdef list out_descr
    cdef int out_nd[MAXSRC]
    cdef cnp.npy_intp out_dims[MAXSRC][MAXD]
    cdef cnp.npy_intp out_steps[MAXSRC][MAXD]
    # scratch: the pool, and which argument positions take which item of a set (-1: the set itself)
    cdef object pool
    cdef int nscratch
    cdef int scratch_pos[4]
    cdef int scratch_item[4]
    # per-call flag array
    cdef int flags_pos
    cdef cnp.npy_intp flags_n
    cdef readonly int post
    # whether runs may be given out= (it is then source ``nsources``), and the sources it must not overlap
    cdef bint _out_ok
    cdef int ncheck
    cdef int check_src[MAXSRC]
    # the call below the dispatcher, when its kernel module can record one (see KernelRecord)
    cdef readonly KernelRecord kernel
    cdef bint tried_kernel
    # whether a replay of ``kernel`` releases the GIL (only for calls whose arrays are big enough: see
    # NOGIL_BYTES in _launch.pyx)
    cdef readonly bint releases_gil

    cdef object run(self, tuple arrays)
    cdef object run_split(self, tuple arrays, object out, bint takes_out)
    cdef tuple _args(self, list srcs, tuple sset)
    cdef bint _capture(self, list srcs, tuple args, tuple sset) except -1
    cdef object _run_kernel(self, list srcs, object out)
    cdef int _call(self, KernelRecord rec, char **data) except -1
    cdef object _result(self, list srcs, object out)
    cdef int _position_of(self, object obj)
    cdef tuple _new_set(self)


cdef class Runner:
    cdef readonly object plan
    cdef Launch launch
    cdef bint settled       # the plan has said whether it has a record (``launch`` a Launch, or False)

    cdef object call(self, tuple arrays)
    cdef object call_split(self, tuple arrays, object out, bint takes_out)

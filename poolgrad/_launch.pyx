# cython: language_level=3
"""Launch records: a plan's kernel call, recorded once, replayed per call in compiled code.

An operator's plan decides everything that does not depend on the data on its first run (which kernel, the work
split, tables, which arrays the kernel can address directly).  What is left per call is mechanical: allocate the
outputs, make the logical-NCHW kernel views of the call's arrays, take scratch, call the kernel dispatcher with
the arguments the first run used, check the kernel's flags.  Done by the plan's Python code that costs several
microseconds of interpreter work around a kernel call that, on tiny tensors, takes one or two.

A :class:`Launch` records that call: the dispatcher, its argument list with *slots* for the per-call arrays (each
slot a view of one source array - a call argument or an output - with the dtype, shape and strides the first run's
view had, at the same data pointer), the outputs' allocation (dtype, shape, strides: the memory order the plan's
``OutputLayout`` gives), the scratch pool, and a per-call flag array the kernel sets where the data needs the slow
path.  :meth:`Launch.run` replays it: a few C-level NumPy calls and the dispatcher call.

It covers the common case only and says so by returning None *before writing anything the caller could see*
or after the kernel flagged the data: then the plan runs its ordinary path, which does the exact checks (``out=``
aliasing with the exact message, index ranges with the first bad index named) and computes the result.  So a
launch never changes a result or an error, it only skips work.

Thread safety: a record is read-only after it is built; each run copies the argument list, takes its own scratch
set (popping a list is atomic under the GIL) and allocates its own flags, so one record serves concurrent callers
(the dispatchers release the GIL while their kernels run).
"""
cimport numpy as cnp
from cpython.ref cimport Py_INCREF, Py_DECREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM
from libc.stdint cimport int64_t
from libc.stdint cimport uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

cnp.import_array()

import numpy as _np

from poolgrad import memory as _memory

cdef extern from *:
    """
    /* A view of ``base``'s memory at ``data`` (NumPy takes its own reference to descr and to base). */
    static PyObject *pg_launch_view(PyObject *descr, int nd, npy_intp *dims, npy_intp *strides, char *data,
                                    int flags, PyObject *base) {
        PyObject *v;
        Py_INCREF(descr);
        v = PyArray_NewFromDescr(&PyArray_Type, (PyArray_Descr *)descr, nd, dims, strides, data, flags, NULL);
        if (v == NULL) return NULL;
        Py_INCREF(base);
        if (PyArray_SetBaseObject((PyArrayObject *)v, base) < 0) { Py_DECREF(v); return NULL; }
        return v;
    }
    /* A new array with these strides (they describe a dense block in some axis order: NumPy allocates
       itemsize * prod(dims) bytes when data is NULL). */
    static PyObject *pg_launch_alloc(PyObject *descr, int nd, npy_intp *dims, npy_intp *strides) {
        Py_INCREF(descr);
        return PyArray_NewFromDescr(&PyArray_Type, (PyArray_Descr *)descr, nd, dims, strides, NULL,
                                    NPY_ARRAY_WRITEABLE, NULL);
    }
    """
    object pg_launch_view(object descr, int nd, cnp.npy_intp *dims, cnp.npy_intp *strides, char *data,
                          int flags, object base)
    object pg_launch_alloc(object descr, int nd, cnp.npy_intp *dims, cnp.npy_intp *strides)

cdef extern from * nogil:
    """
    #include <stdlib.h>
    /* A record's spare per-call blocks: a run takes one (or NULL) by swapping NULL into a slot, and gives it back
       into an empty slot by compare-and-swap, so two concurrent runs never hold the same block. */
    static void *pg_launch_take(void **slot) { return __atomic_exchange_n(slot, (void *)0, __ATOMIC_ACQ_REL); }
    static int pg_launch_give(void **slot, void *block) {
        void *empty = (void *)0;
        return __atomic_compare_exchange_n(slot, &empty, block, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
    }
    """
    int posix_memalign(void **memptr, size_t alignment, size_t size)
    void *pg_launch_take(void **slot)
    int pg_launch_give(void **slot, void *block)

cdef extern from * nogil:
    """
    #include <time.h>
    """
    cdef struct timespec:
        long tv_sec
        long tv_nsec
    int clock_gettime(int clk, timespec *ts)
    int CLOCK_MONOTONIC

#: A replayed kernel call releases the GIL only when its arrays (sources and outputs) hold at least this many
#: bytes.  Releasing and taking it back costs about 0.15-0.2 us (two mutex operations and a thread-state swap),
#: 10-15% of a plan call on 1x1x4x4 - 2x16x8x8 tensors, whose kernels take 0.1-5 us: far below the interpreter's
#: 5 ms switch interval, so holding the GIL there delays other Python threads by no more than an ordinary
#: bytecode-heavy call would.  From 256 KiB on (kernels of tens of microseconds and more) other threads run
#: while the kernel does.  The C API's execute never holds the GIL while a captured call runs.
NOGIL_BYTES = 256 << 10
cdef Py_ssize_t _NOGIL_BYTES = NOGIL_BYTES

#: Post-run checks: none; the flag array (int8) must be all zero; the dispatcher's result must be False.
POST_NONE = 0
POST_FLAGS = 1
POST_FALSE = 2


cdef inline char *_data(object a) noexcept:
    return <char *>cnp.PyArray_DATA(<cnp.ndarray>a)


cdef inline bint _extent(cnp.ndarray a, char **lo, char **hi) noexcept:
    """Byte range [lo, hi) an array can touch; False for an empty array."""
    cdef int d
    cdef cnp.npy_intp n, st
    cdef char *p = <char *>cnp.PyArray_DATA(a)
    cdef char *a0 = p
    cdef char *a1 = p + cnp.PyArray_ITEMSIZE(a)
    for d in range(cnp.PyArray_NDIM(a)):
        n = cnp.PyArray_DIMS(a)[d]
        if n == 0:
            return False
        st = cnp.PyArray_STRIDES(a)[d]
        if st >= 0:
            a1 += st * (n - 1)
        else:
            a0 += st * (n - 1)
    lo[0] = a0
    hi[0] = a1
    return True


cdef class KernelRecord:
    """A kernel call captured below its dispatcher (``call``): the kernel module's runner, the struct the
    dispatcher filled (copied), the item count, thread count and dtype code.  :meth:`bind` finds the struct's
    pointers into the call's arrays; :func:`run_kernel_call` copies the struct, points those fields at another
    call's arrays and runs - plain C, no interpreter, so the C API's execute calls it without the GIL.
    Everything else the struct addresses (tables) belongs to the plan, which keeps it alive and never writes
    it.

    Per-call buffers (scratch, flags, hit counters: see :func:`record_temp`) are not shared between runs: each
    run of :func:`run_kernel_call` holds a block of them that no other run holds (one of the record's spare
    blocks, taken atomically, or a new one), so concurrent runs of one record (C API executes from several
    threads) never meet.  Tables the dispatcher made for the call are kept alive in ``keep``."""

    def __cinit__(self):
        cdef int k
        self.call.ctx = NULL
        self.call.npatch = 0
        self.call.ntemp = 0
        self.call.block = 0
        for k in range(KEEP_SETS):
            self.call.spare[k] = NULL
        self.filled = False
        self.keep = []

    @property
    def temps(self):
        """Kinds of the per-call buffers (TEMP_SCRATCH 0, TEMP_FLAGS 1, TEMP_HITS 2), for tests."""
        return tuple(self.call.temp_kind[k] for k in range(self.call.ntemp))

    def __dealloc__(self):
        cdef int k
        free(self.call.ctx)
        for k in range(KEEP_SETS):
            free(self.call.spare[k])

    cdef bint bind(self, list sources) except -1:
        """Record which pointer-sized fields of the struct address a source (a word inside the source's byte
        range).  False when a field lies in two sources' ranges (the call passed overlapping arrays: which one
        it means cannot be told) or there are too many."""
        cdef Py_ssize_t off, k, n = len(sources)
        cdef int match
        cdef char *w
        cdef char *lo[MAXSRC]
        cdef char *hi[MAXSRC]
        cdef bint has[MAXSRC]
        if n > MAXSRC:
            return False
        for k in range(n):
            has[k] = _extent(<cnp.ndarray>sources[k], &lo[k], &hi[k])
        cdef KernelCall *c = &self.call
        cdef bint temp
        c.npatch = 0
        for off in range(0, <Py_ssize_t>c.size - <Py_ssize_t>sizeof(char *) + 1, sizeof(char *)):
            temp = False
            for k in range(c.ntemp):
                temp = temp or c.temp_off[k] == off
            if temp:            # a per-call buffer: each run has its own
                continue
            w = (<char **>(c.ctx + off))[0]
            match = -1
            for k in range(n):
                if has[k] and lo[k] <= w < hi[k]:
                    if match >= 0:
                        return False
                    match = k
            if match >= 0:
                if c.npatch == MAXPATCH:
                    return False
                c.patch_off[c.npatch] = off
                c.patch_src[c.npatch] = match
                c.patch_delta[c.npatch] = w - _data(sources[match])
                c.npatch += 1
        return True


cdef int run_kernel_call(const KernelCall *c, char **data) noexcept nogil:
    """Run a captured call on the arrays whose data pointers are ``data`` (in source order): a copy of the
    struct with its source pointers moved there and its per-call buffers in a block of its own (scratch as is,
    flags and hit counters zeroed, as the dispatcher's callers pass them).  The block is one the record keeps
    spare, taken atomically, else a new one; afterwards it goes back to a free spare slot, else it is freed.
    (Allocating and freeing the buffers on every run - ``posix_memalign``, ``calloc``, ``free``, glibc's
    ``malloc_consolidate`` - took 29% of the perf samples of a loop of 1x1x4x4 average-pooling-gradient kernel
    calls.)  Returns 0, or 1 when the
    buffers say that the data needs the checked path (the caller then reruns it through the plan, which
    redoes every output), or -1 when the block could not be allocated (nothing ran)."""
    cdef uint64_t buf[MAXCTX_WORDS]       # MAXCTX bytes, aligned for any field
    cdef char *block = NULL
    cdef char *temp
    cdef int k, status = 0
    cdef size_t i, n
    cdef int64_t total
    cdef void **spare = (<KernelCall *>c).spare       # the one part of the record a run changes (atomically)
    memcpy(buf, c.ctx, c.size)
    for k in range(c.npatch):
        (<char **>((<char *>buf) + c.patch_off[k]))[0] = data[c.patch_src[k]] + c.patch_delta[k]
    if c.ntemp:
        for k in range(KEEP_SETS):
            block = <char *>pg_launch_take(&spare[k])
            if block != NULL:
                break
        # the pools' scratch rows start on cache lines (memory.thread_rows); every buffer of the block does
        if block == NULL and posix_memalign(<void **>&block, 64, c.block) != 0:
            return -1
        for k in range(c.ntemp):
            temp = block + c.temp_at[k]
            if c.temp_kind[k] != TEMP_SCRATCH:
                memset(temp, 0, c.temp_bytes[k])
            (<void **>((<char *>buf) + c.temp_off[k]))[0] = temp
    c.fn(buf, c.nitems, c.nthreads, c.code)
    for k in range(c.ntemp):
        temp = block + c.temp_at[k]
        if c.temp_kind[k] == TEMP_FLAGS:
            n = c.temp_bytes[k]
            for i in range(n):
                if temp[i]:
                    status = 1
                    break
        elif c.temp_kind[k] == TEMP_HITS:
            n = c.temp_bytes[k] // sizeof(int64_t)
            total = 0
            for i in range(n):
                total += (<const int64_t *>temp)[i]
            if total != c.temp_expect[k]:
                status = 1
    if block != NULL:
        for k in range(KEEP_SETS):
            if pg_launch_give(&spare[k], block):
                block = NULL
                break
        free(block)
    return status


cdef int record_kernel(object record, KernelRun fn, const void *ctx, size_t size, Py_ssize_t nitems,
                       int nthreads, int code) except -1:
    """Fill ``record`` (a KernelRecord) with a kernel call: what a dispatcher given ``record=`` does instead of
    ``fn(ctx, nitems, nthreads, code)``.  A struct above MAXCTX bytes is not recorded (the record stays empty
    and the dispatcher path keeps running)."""
    cdef KernelRecord rec = <KernelRecord?>record
    if size > MAXCTX or rec.filled:
        return 0
    rec.call.ctx = <char *>malloc(size)
    if rec.call.ctx == NULL:
        raise MemoryError()
    memcpy(rec.call.ctx, ctx, size)
    rec.call.size = size
    rec.call.fn = fn
    rec.call.nitems = nitems
    rec.call.nthreads = nthreads
    rec.call.code = code
    rec.filled = True
    return 1


cdef int record_temp(object record, const void *ctx, const void *field, size_t nbytes, int kind,
                     int64_t expect) except -1:
    """After :func:`record_kernel` returned 1: the pointer field at ``field`` (inside the struct ``ctx``)
    addresses a per-call buffer of ``nbytes`` bytes of kind ``kind`` (TEMP_SCRATCH, TEMP_FLAGS, TEMP_HITS with
    the sum ``expect`` of a clean run), which every replay allocates for itself.  A field outside the struct or
    too many buffers empty the record (the dispatcher path keeps running)."""
    cdef KernelRecord rec = <KernelRecord?>record
    cdef KernelCall *c = &rec.call
    cdef Py_ssize_t off = <const char *>field - <const char *>ctx
    if not rec.filled:
        return 0
    if c.ntemp == MAXTEMP or off < 0 or off + <Py_ssize_t>sizeof(void *) > <Py_ssize_t>c.size:
        free(c.ctx)
        c.ctx = NULL
        c.ntemp = 0
        c.block = 0
        rec.filled = False
        return 0
    c.temp_off[c.ntemp] = off
    c.temp_bytes[c.ntemp] = nbytes
    c.temp_kind[c.ntemp] = kind
    c.temp_expect[c.ntemp] = expect
    c.temp_at[c.ntemp] = c.block
    c.block += (max(nbytes, 1) + 63) & ~(<size_t>63)
    c.ntemp += 1
    return 0


cdef int record_keep(object record, object obj) except -1:
    """The recorded struct addresses ``obj`` (a table the dispatcher made for the call): keep it alive."""
    (<KernelRecord?>record).keep.append(obj)
    return 0


cdef class Launch:
    """One recorded kernel call (see the module docstring).

    Parameters
    ----------
    fn : callable
        The kernel dispatcher.
    args : sequence
        Its positional arguments as the first run passed them; slots (set with :meth:`view`, :meth:`scratch`,
        :meth:`flags`) are replaced on every run, the rest is passed as is (tables the plan owns, sizes, flags).
    nsources : int
        How many call arrays a run receives (``run``'s ``arrays``); outputs are sources after them.
    kernel_records : bool, default False
        The dispatcher accepts ``record=``: a :class:`KernelRecord` it fills (with its kernel's runner and the
        struct it built) instead of running.  The first replay then captures the call below the dispatcher and
        later ones run it straight from compiled code (:meth:`KernelRecord.run`), which the C API can do without
        the GIL.  The struct may address per-call scratch, flags and hit counters only where the dispatcher
        records them as such (``record_temp``: each replay has its own, and one whose flags or hit counts
        say the data needs the checked path returns None) and tables it made for the call only where it keeps
        them (``record_keep``).
    """
    def __init__(self, object fn, args, int nsources, bint kernel_records=False):
        if nsources > MAXSRC:
            raise ValueError("too many sources")
        self.fn = fn
        self.kernel = None
        # a dispatcher that takes record= (a KernelRecord) fills it instead of running its kernel
        # ... when it really is such a dispatcher: a wrapper around one (a test's spy) may not take record=
        code = getattr(fn, "__code__", None)
        takes = code is not None and "record" in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        self.tried_kernel = not (kernel_records and takes)
        self.args = list(args)
        self.nargs = len(self.args)
        self.free = []
        self.nsrc = nsources
        self.nout = 0
        self.nslot = 0
        self.descr = []
        self.out_descr = []
        self.pool = None
        self.nscratch = 0
        self.flags_pos = -1
        self.flags_n = 0
        self.post = POST_NONE
        self._out_ok = False
        self.ncheck = 0
        self.releases_gil = True

    def output(self, cnp.ndarray example):
        """Allocate, on every run, an output like ``example`` (dtype, shape, strides); it becomes source
        ``nsources + k`` for the k-th output.  Its strides must describe a dense block (what ``OutputLayout``
        gives): NumPy then allocates exactly ``nbytes``.  Returns False, recording nothing, for an output of
        ``memory.MIN_BYTES`` or more: ``OutputLayout`` takes those from the block cache, which a replay would
        bypass."""
        cdef int k = self.nout, d
        if cnp.PyArray_NBYTES(example) >= _memory.MIN_BYTES:
            return False
        if k >= MAXSRC - self.nsrc or cnp.PyArray_NDIM(example) > MAXD:
            raise ValueError("too many outputs or dimensions")
        self.out_descr.append(<object>cnp.PyArray_DESCR(example))
        self.out_nd[k] = cnp.PyArray_NDIM(example)
        for d in range(self.out_nd[k]):
            self.out_dims[k][d] = cnp.PyArray_DIMS(example)[d]
            self.out_steps[k][d] = cnp.PyArray_STRIDES(example)[d]
        self.nout += 1
        return True

    def view(self, int position, int source, cnp.ndarray source_array, cnp.ndarray view):
        """Argument ``position`` is, on every run, ``view`` re-made over source ``source``: the same dtype, shape
        and strides at the source's data pointer.  ``source_array`` is this run's source (or any view starting
        where it does).  Returns False, recording nothing, when the recorded call did not pass ``view`` itself
        at ``position`` (the record would not be that call) or ``view`` does not start at the source (the
        kernel reads a copy: the record cannot replay that)."""
        cdef int k = self.nslot, d
        if k >= MAXSLOT or cnp.PyArray_NDIM(view) > MAXD:
            raise ValueError("too many slots or dimensions")
        if not 0 <= position < self.nargs or self.args[position] is not view or _data(view) != _data(source_array):
            return False
        self.pos[k] = position
        self.src[k] = source
        if view is source_array:
            self.descr.append(None)
        else:
            self.descr.append(<object>cnp.PyArray_DESCR(view))
            self.nd[k] = cnp.PyArray_NDIM(view)
            for d in range(self.nd[k]):
                self.dims[k][d] = cnp.PyArray_DIMS(view)[d]
                self.steps[k][d] = cnp.PyArray_STRIDES(view)[d]
        self.args[position] = None
        self.nslot += 1
        return True

    def scratch(self, object pool, object taken):
        """The recorded call passed ``taken`` - a set from ``pool`` (a ScratchPool), or a tuple of the set's
        items - where it passed them (found by identity); every run passes a set of its own there (made by
        ``pool.factory``, kept for reuse).  Returns False, recording nothing, unless each appears exactly once."""
        cdef int k, p
        items = taken if type(taken) is tuple else (taken,)
        if len(items) > 4:
            raise ValueError("too many scratch items")
        for k in range(len(items)):
            p = self._position_of(items[k])
            if p < 0:
                return False
            self.scratch_pos[k] = p
            self.scratch_item[k] = k if type(taken) is tuple else -1
        for k in range(len(items)):
            self.args[self.scratch_pos[k]] = None
        self.pool = pool
        self.nscratch = len(items)
        return True

    def flags(self, object taken, Py_ssize_t n):
        """The recorded call passed ``taken`` (found by identity) for its int8 flags, ``n`` of them; every run
        passes fresh zeroed ones there, and a run that ends with any flag set returns None (the plan's ordinary
        path then handles the data).  Returns False, recording nothing, unless ``taken`` appears exactly once."""
        cdef int p = self._position_of(taken)
        if p < 0:
            return False
        self.flags_pos = p
        self.flags_n = n
        self.args[p] = None
        self.post = POST_FLAGS
        return True

    cdef int _position_of(self, object obj):
        """The one argument position holding ``obj`` itself, or -1."""
        cdef int k, found = -1
        for k in range(self.nargs):
            if self.args[k] is obj:
                if found >= 0:
                    return -1
                found = k
        return found

    def expect_false(self):
        """A run whose dispatcher returns anything but False returns None (the ordinary path takes over)."""
        self.post = POST_FALSE

    def takes_out(self, sources):
        """Runs may be given ``out`` (source ``nsources``, in place of the allocated output).  A run first
        proves that it shares no memory with the sources ``sources`` by their byte ranges; if the ranges meet,
        the run returns None at once (the ordinary path then makes NumPy's exact test and raises its message,
        or proceeds)."""
        self._out_ok = True
        self.ncheck = 0
        for s in sources:
            self.check_src[self.ncheck] = s
            self.ncheck += 1

    def __call__(self, *arrays):
        """Replay the call on the plan's call arguments: the ``nsources`` arrays, then ``out`` when the plan's
        calls take one (None: allocate the outputs).  Returns what the plan returns, or None when the plan's
        ordinary path must run instead."""
        return self.run(arrays)

    cdef object run(self, tuple arrays):
        cdef int k
        cdef char *lo
        cdef char *hi
        cdef char *lo2
        cdef char *hi2
        cdef object out = None
        cdef tuple sset = None
        cdef tuple args
        cdef list srcs
        cdef Py_ssize_t n = PyTuple_GET_SIZE(arrays)
        if n == self.nsrc + 1:
            out = <object>PyTuple_GET_ITEM(arrays, self.nsrc)
            srcs = list(arrays) if out is not None else list(arrays[:self.nsrc])
        elif n == self.nsrc:
            srcs = list(arrays)
        else:
            return None
        if out is not None:
            if not self._out_ok:
                return None
            if _extent(<cnp.ndarray>out, &lo, &hi):
                for k in range(self.ncheck):
                    if _extent(<cnp.ndarray>srcs[self.check_src[k]], &lo2, &hi2) and lo < hi2 and lo2 < hi:
                        return None
        else:
            for k in range(self.nout):
                srcs.append(pg_launch_alloc(self.out_descr[k], self.out_nd[k], self.out_dims[k],
                                            self.out_steps[k]))
        if self.kernel is not None:
            return self._run_kernel(srcs, out)
        # a set of per-call arrays (scratch items, flags) no concurrent run holds: list.pop is atomic
        if self.nscratch or self.flags_pos >= 0:
            sset = self.free.pop() if self.free else self._new_set()
            if self.flags_pos >= 0:
                memset(cnp.PyArray_DATA(<cnp.ndarray>sset[0]), 0, self.flags_n)
        args = self._args(srcs, sset)
        try:
            if not self.tried_kernel:
                self.tried_kernel = True
                if self._capture(srcs, args, sset):
                    return self._run_kernel(srcs, out)
            r = self.fn(*args)
        finally:
            if sset is not None and len(self.free) < KEEP_SETS:
                self.free.append(sset)
        if self.post == POST_FLAGS:
            if _any_set(<cnp.ndarray>sset[0]):
                return None
        elif self.post == POST_FALSE:
            if r is not False:
                return None
        if out is not None:
            return out
        if self.nout == 1:
            return srcs[self.nsrc]
        return tuple(srcs[self.nsrc:])

    cdef tuple _args(self, list srcs, tuple sset):
        """The dispatcher's arguments for a run on ``srcs`` (call arrays, then outputs) with the per-call set
        ``sset`` (or None)."""
        cdef int k, s
        cdef object v, d
        cdef tuple args = PyTuple_New(self.nargs)
        for k in range(self.nargs):
            v = self.args[k]
            Py_INCREF(v)
            PyTuple_SET_ITEM(args, k, v)
        for k in range(self.nslot):
            s = self.src[k]
            d = self.descr[k]
            if d is None:
                v = srcs[s]
            else:
                v = pg_launch_view(d, self.nd[k], self.dims[k], self.steps[k], _data(srcs[s]),
                                   cnp.PyArray_FLAGS(<cnp.ndarray>srcs[s]) & cnp.NPY_ARRAY_WRITEABLE, srcs[s])
            _put(args, self.pos[k], v)
        if sset is not None:
            if self.flags_pos >= 0:
                _put(args, self.flags_pos, sset[0])
            for k in range(self.nscratch):
                _put(args, self.scratch_pos[k], sset[2 + self.scratch_item[k]])
        return args

    cdef bint _capture(self, list srcs, tuple args, tuple sset) except -1:
        """Have the dispatcher record its kernel call on this call's arrays; keep it if every pointer of the
        struct that addresses a source is unambiguous (see KernelRecord.bind).

        Where the call's arrays share memory (``max_pooling_grad(x, x, x)``, one array passed for several
        inputs), a pointer into it could mean any of them: the call is then recorded once more on stand-ins -
        fresh arrays of the same dtype, shape, strides and 64-byte phase, one per source - whose pointers can
        be told apart.  The record only says which field addresses which source at what offset, so it replays
        the aliased call (and any other) exactly; stand-ins are never read or written (recording runs
        nothing).  Outputs that meet an input never reach a replay (``takes_out``'s check)."""
        cdef KernelRecord rec = KernelRecord()
        cdef int k
        cdef bint checks = False
        if _overlapping(srcs):
            srcs = [_stand_in(a) for a in srcs]
            args = self._args(srcs, sset)
        self.fn(*args, record=rec)
        if not rec.filled:
            return False
        # a record whose runs are checked afterwards (flags, a False result) must carry that check itself
        for k in range(rec.call.ntemp):
            checks = checks or rec.call.temp_kind[k] != TEMP_SCRATCH
        if self.post != POST_NONE and not checks:
            return False
        if rec.bind(srcs):
            total = 0
            for a in srcs:
                total += cnp.PyArray_NBYTES(<cnp.ndarray>a)
            self.releases_gil = total >= _NOGIL_BYTES
            self.kernel = rec
            return True
        return False

    cdef object _run_kernel(self, list srcs, object out):
        cdef char *data[MAXSRC]
        cdef int k, status
        cdef KernelRecord rec = self.kernel
        for k in range(len(srcs)):
            data[k] = _data(srcs[k])
        if self._call(rec, data):       # the data needs the plan's checked path
            return None
        return self._result(srcs, out)

    cdef int _call(self, KernelRecord rec, char **data) except -1:
        """Run the captured kernel call on ``data`` (without the GIL where ``releases_gil``); 1 when the data
        needs the plan's checked path, 0 when done."""
        cdef int status
        if self.releases_gil:
            with nogil:
                status = run_kernel_call(&rec.call, data)
        else:
            status = run_kernel_call(&rec.call, data)
        if status < 0:
            raise MemoryError()
        return 1 if status > 0 else 0

    def kernel_ns(self, *arrays, Py_ssize_t reps=1000):
        """Median nanoseconds of one run of the captured kernel call (``kernel``, None when there is none) on
        ``arrays`` (the sources: the call's arrays, then its outputs), over ``reps`` runs in rounds of
        ``reps // 9`` - the kernel's share of a plan call (its per-call buffers included), for
        bench/plan_overhead.py.  The arrays are trusted to have the plan's signature (a benchmark's own)."""
        cdef char *data[MAXSRC]
        cdef int k, status = 0
        cdef Py_ssize_t r, i, per = max(1, reps // 9)
        cdef timespec t0, t1
        cdef KernelRecord rec = self.kernel
        if rec is None:
            return None
        if len(arrays) != self.nsrc + self.nout:
            raise ValueError(f"expected {self.nsrc + self.nout} arrays")
        for k in range(len(arrays)):
            data[k] = _data(arrays[k])
        rounds = []
        for r in range(9):
            with nogil:
                clock_gettime(CLOCK_MONOTONIC, &t0)
                for i in range(per):
                    status |= run_kernel_call(&rec.call, data)
                clock_gettime(CLOCK_MONOTONIC, &t1)
            rounds.append(((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / per)
        if status < 0:
            raise MemoryError()
        return sorted(rounds)[4]

    cdef object run_split(self, tuple arrays, object out, bint takes_out):
        """:meth:`run` for a caller that passes ``out`` apart (``takes_out``: the plan's calls take one; None
        allocates).  Once the kernel call is captured this is the whole per-call path, written without the
        list and tuples :meth:`run` builds (0.1-0.2 us of a tiny call); before that, and for records that call
        their dispatcher, it is :meth:`run`."""
        cdef char *data[MAXSRC]
        cdef char *lo
        cdef char *hi
        cdef char *lo2
        cdef char *hi2
        cdef int k, status
        cdef object a0, a1, res
        cdef tuple outs
        cdef KernelRecord rec = self.kernel
        if rec is None or PyTuple_GET_SIZE(arrays) != self.nsrc:
            return self.run(arrays + (out,) if takes_out else arrays)
        for k in range(self.nsrc):
            data[k] = _data(<object>PyTuple_GET_ITEM(arrays, k))
        if out is not None:
            if not self._out_ok:
                return None
            if _extent(<cnp.ndarray>out, &lo, &hi):
                for k in range(self.ncheck):
                    if (_extent(<cnp.ndarray>PyTuple_GET_ITEM(arrays, self.check_src[k]), &lo2, &hi2)
                            and lo < hi2 and lo2 < hi):
                        return None
            data[self.nsrc] = _data(out)
            res = out
        elif self.nout == 1:
            res = pg_launch_alloc(self.out_descr[0], self.out_nd[0], self.out_dims[0], self.out_steps[0])
            data[self.nsrc] = _data(res)
        elif self.nout == 2:
            a0 = pg_launch_alloc(self.out_descr[0], self.out_nd[0], self.out_dims[0], self.out_steps[0])
            a1 = pg_launch_alloc(self.out_descr[1], self.out_nd[1], self.out_dims[1], self.out_steps[1])
            data[self.nsrc] = _data(a0)
            data[self.nsrc + 1] = _data(a1)
            res = (a0, a1)
        else:
            return self.run(arrays + (out,) if takes_out else arrays)
        if self._call(rec, data):       # the data needs the plan's checked path
            return None
        return res

    cdef object _result(self, list srcs, object out):
        if out is not None:
            return out
        if self.nout == 1:
            return srcs[self.nsrc]
        return tuple(srcs[self.nsrc:])

    cdef tuple _new_set(self):
        """(flags, scratch items...): the flags (or None) and the scratch set's items, made fresh."""
        flags = cnp.PyArray_ZEROS(1, &self.flags_n, cnp.NPY_INT8, 0) if self.flags_pos >= 0 else None
        if self.pool is None:
            return (flags,)
        made = self.pool.factory()
        return (flags, made) + (tuple(made) if type(made) is tuple else ())


cdef inline void _put(tuple t, Py_ssize_t i, object v) noexcept:
    """Replace item i of a tuple this module just made (and owns alone)."""
    Py_INCREF(v)
    Py_DECREF(<object>PyTuple_GET_ITEM(t, i))
    PyTuple_SET_ITEM(t, i, v)


cdef bint _overlapping(list arrays) except -1:
    """Whether the byte ranges of two of ``arrays`` meet."""
    cdef Py_ssize_t i, j, n = len(arrays)
    cdef char *lo
    cdef char *hi
    cdef char *lo2
    cdef char *hi2
    for i in range(n):
        if not _extent(<cnp.ndarray>arrays[i], &lo, &hi):
            continue
        for j in range(i + 1, n):
            if _extent(<cnp.ndarray>arrays[j], &lo2, &hi2) and lo < hi2 and lo2 < hi:
                return True
    return False


def _stand_in(cnp.ndarray a):
    """A fresh array with ``a``'s dtype, shape, strides, writeability and data address modulo 64 (what kernel
    dispatchers may look at), in memory of its own; its contents are undefined."""
    cdef char *lo
    cdef char *hi
    if not _extent(a, &lo, &hi):
        return a.copy()
    buf = _np.empty(<Py_ssize_t>(hi - lo) + 64, _np.uint8)
    base = <Py_ssize_t>cnp.PyArray_DATA(<cnp.ndarray>buf)
    shift = (<Py_ssize_t>lo - base) % 64
    made = _np.ndarray((<object>a).shape, a.dtype, buffer=buf, offset=shift + (_data(a) - lo),
                       strides=(<object>a).strides)
    made.flags.writeable = (<object>a).flags.writeable
    return made


cdef bint _any_set(cnp.ndarray flags) noexcept:
    cdef const char *p = <const char *>cnp.PyArray_DATA(flags)
    cdef cnp.npy_intp i
    for i in range(cnp.PyArray_DIMS(flags)[0]):
        if p[i]:
            return True
    return False


cdef class Runner:
    """A plan as the per-call path calls it: through its launch record once the plan's first run has made one
    (the plan's ``launch`` attribute), else - and whenever the record declines - through the plan itself.

    Parameters
    ----------
    plan : callable
        An operator's internal plan (called with the operator's arrays, ``out`` last for the backwards).
    """
    def __init__(self, object plan):
        self.plan = plan
        self.launch = None
        self.settled = False

    def __call__(self, *arrays):
        return self.call(arrays)

    cdef object call(self, tuple arrays):
        """Run on the plan's call arguments (``out`` last for the backwards)."""
        cdef object r
        cdef Launch launch = self.launch
        if not self.settled:
            f = getattr(self.plan, "launch", None)
            if f is not None:
                self.settled = True
                if isinstance(f, Launch):
                    launch = self.launch = <Launch>f
        if launch is not None:
            r = launch.run(arrays)
            if r is not None:
                return r
        return self.plan(*arrays)

    cdef object call_split(self, tuple arrays, object out, bint takes_out):
        """:meth:`call` with ``out`` passed apart (``takes_out``: the plan's calls take it, None or an array)."""
        cdef object r
        cdef Launch launch = self.launch
        if launch is not None:
            r = launch.run_split(arrays, out, takes_out)
            if r is not None:
                return r
            return self.plan(*arrays, out) if takes_out else self.plan(*arrays)
        return self.call(arrays + (out,) if takes_out else arrays)

# cython: language_level=3
"""The compiled half of the plan API (``plan_api.py``) and the C API for extension authors.

Two things live here because both must be cheap and neither may depend on an operator module:

* :class:`Plan`, the object the ``poolgrad.plan_*`` factories return.  Calling it checks in compiled code that
  every array has exactly the type, dtype, shape, strides and alignment the plan was made for (naming the argument
  and what differs otherwise), then runs the operator's internal plan, which does only the data-dependent work.
* The C API: a table of C function pointers (``poolgrad_capi``, layout in ``include/poolgrad.h``) published as the
  ``PyCapsule`` ``poolgrad._capi._C_API``.  Its functions wrap the caller's pointers in NumPy views and run a
  :class:`Plan`; see docs/C_API.md for what holds the GIL and what does not.
"""
cimport numpy as cnp
from poolgrad._launch cimport KernelCall, KernelRecord, Launch, Runner, run_kernel_call
from cpython.pycapsule cimport PyCapsule_New
from cpython.ref cimport PyObject, Py_INCREF, Py_DECREF
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memset

import numpy as np

from poolgrad.errors import ParamInvalidError, ParamNullptrError, PoolGradError

cnp.import_array()

cdef int _ALIGNED = cnp.NPY_ARRAY_ALIGNED
cdef int _WRITEABLE = cnp.NPY_ARRAY_WRITEABLE


# ---------------------------------------------------------------------------------------------------------------
# The Python plan object
# ---------------------------------------------------------------------------------------------------------------

cdef class _Spec:
    """What one array argument must be: dtype, shape, strides (bytes), alignment, writeability (outputs)."""
    cdef readonly str name
    cdef readonly object dtype
    cdef readonly tuple shape
    cdef readonly tuple strides
    cdef readonly bint aligned
    cdef readonly bint writeable
    cdef int nd
    cdef int64_t dims[32]
    cdef int64_t steps[32]

    def __init__(self, str name, object a, bint output):
        cdef int i
        cdef cnp.ndarray arr = a
        self.name = name
        self.dtype = arr.dtype
        self.nd = cnp.PyArray_NDIM(arr)
        if self.nd > 32:
            raise ParamInvalidError(f"{name}: at most 32 dimensions, got {self.nd}")
        self.shape = a.shape
        self.strides = a.strides
        for i in range(self.nd):
            self.dims[i] = cnp.PyArray_DIMS(arr)[i]
            self.steps[i] = cnp.PyArray_STRIDES(arr)[i]
        self.aligned = (cnp.PyArray_FLAGS(arr) & _ALIGNED) != 0
        self.writeable = output     # only an output must be writeable; inputs are never written

    cdef int check(self, object a) except -1:
        cdef cnp.ndarray arr
        cdef int i, nd
        cdef int flags
        if a is None:
            raise ParamNullptrError(f"{self.name}: expected an array, got None")
        if type(a) is not cnp.ndarray:
            raise ParamInvalidError(f"{self.name}: a plan takes numpy.ndarray arguments only (the type it was made "
                                    f"for), got {type(a).__name__}")
        arr = <cnp.ndarray>a
        if <object>cnp.PyArray_DESCR(arr) is not self.dtype and a.dtype != self.dtype:
            raise ParamInvalidError(f"{self.name}: the plan was made for dtype {self.dtype}, got {a.dtype}")
        nd = cnp.PyArray_NDIM(arr)
        if nd != self.nd:
            raise ParamInvalidError(f"{self.name}: the plan was made for shape {self.shape}, got {a.shape}")
        for i in range(nd):
            if cnp.PyArray_DIMS(arr)[i] != self.dims[i]:
                raise ParamInvalidError(f"{self.name}: the plan was made for shape {self.shape}, got {a.shape}")
        for i in range(nd):
            if cnp.PyArray_STRIDES(arr)[i] != self.steps[i]:
                raise ParamInvalidError(f"{self.name}: the plan was made for strides {self.strides} (bytes), got "
                                        f"{a.strides}")
        flags = cnp.PyArray_FLAGS(arr)
        if self.aligned and not (flags & _ALIGNED):
            raise ParamInvalidError(f"{self.name}: the plan was made for an aligned array, got a misaligned one")
        if not self.aligned and (flags & _ALIGNED):
            raise ParamInvalidError(f"{self.name}: the plan was made for a misaligned array, got an aligned one")
        if self.writeable and not (flags & _WRITEABLE):
            raise ParamInvalidError(f"{self.name}: expected a writeable array, got a read-only one")
        return 0


cdef class Plan:
    """A validated, planned operator call, run as often as wanted on arrays of one signature.

    Made by the ``poolgrad.plan_*`` factories (see :mod:`poolgrad.plan_api`); call it with the operator's array
    arguments in the operator's order, and ``out=`` when the plan was made with one.  Every check that does not
    depend on the data was done when the plan was made; a call checks that each array has exactly the plan's
    type (``numpy.ndarray``), dtype, shape, strides and alignment (raising :class:`ParamInvalidError` naming the
    argument and what differs), then runs: ``out=`` overlap check, allocation, kernels, index range check.

    A plan holds no per-call state: scratch arrays are taken from a pool per plan and given back, so several
    Python threads may call one plan at once (kernels release the GIL, but for arrays under
    ``poolgrad._launch.NOGIL_BYTES`` in all, whose microsecond kernels hold it).

    Attributes
    ----------
    operator : str
        The operator's function name, e.g. ``"max_pool2d_with_indices_backward"``.
    names : tuple of str
        The array arguments in call order (``out`` excluded).
    specs : tuple
        What each array (and then ``out``, when the plan has one) must be: objects with ``name``, ``dtype``,
        ``shape``, ``strides`` (bytes) and ``aligned``.
    has_out : bool
        Whether calls pass ``out=`` (required then) or get a new array (``out`` must then be None).
    deterministic : bool or None
        The resolved determinism of a backward plan (None for forwards).
    num_threads : int
        The resolved OpenMP thread count.
    """
    cdef readonly str operator
    cdef readonly tuple names
    cdef readonly tuple specs
    cdef readonly bint has_out
    cdef readonly object deterministic
    cdef readonly int num_threads
    cdef Runner _run
    cdef bint _takes_out
    cdef int _n
    cdef _Spec _out_spec
    cdef object __weakref__

    def __init__(self, str operator, object run, tuple names, tuple arrays, object out, bint takes_out,
                 object deterministic, int num_threads):
        cdef int i
        if len(names) != len(arrays):
            raise ValueError("names and arrays differ in length")
        self.operator = operator
        self._run = Runner(run)      # the plan's launch record once its first run has made one
        self.names = names
        self._n = len(names)
        specs = [_Spec(names[i], arrays[i], False) for i in range(self._n)]
        self.has_out = out is not None
        self._out_spec = _Spec("out", out, True) if out is not None else None
        if out is not None:
            specs.append(self._out_spec)
        self.specs = tuple(specs)
        self._takes_out = takes_out
        self.deterministic = deterministic
        self.num_threads = num_threads

    def __call__(self, *arrays, out=None):
        cdef Py_ssize_t n = len(arrays)
        cdef int i
        if n != self._n:
            raise ParamInvalidError(f"{self.operator} plan: expected {self._n} arrays ({', '.join(self.names)}), "
                                    f"got {n}")
        for i in range(n):
            (<_Spec>self.specs[i]).check(arrays[i])
        if self._out_spec is not None:
            self._out_spec.check(out)
        elif out is not None:
            raise ParamInvalidError(f"out: the plan was made without out=, so its calls allocate the result; "
                                    f"make a plan with out= to write into an array")
        return self._run.call_split(arrays, out, self._takes_out)

    @property
    def _launch_record(self):
        """The launch record the plan's calls replay (a ``poolgrad._launch.Launch``), or None before the first
        call or where the operator's plan made none; for tests and benchmarks."""
        rec = getattr(self._run.plan, "launch", None)
        return rec if isinstance(rec, Launch) else None

    def __repr__(self):
        sig = ", ".join(f"{s.name}: {s.dtype}{list(s.shape)}" for s in self.specs)
        return f"<poolgrad.Plan {self.operator}({sig})>"


# ---------------------------------------------------------------------------------------------------------------
# The C API (layout and contract: include/poolgrad.h, docs/C_API.md)
# ---------------------------------------------------------------------------------------------------------------

# The public types and codes, declared once for extension authors (include/poolgrad_capi.pxd, on Cython's
# include path in setup.py); only the function table's layout is private to this module.
from poolgrad_capi cimport (POOLGRAD_ABI_VERSION, POOLGRAD_ERR_PARAM_INVALID, POOLGRAD_ERR_PARAM_NULLPTR,
                            POOLGRAD_MAX_DIMS, POOLGRAD_OK, poolgrad_params, poolgrad_plan, poolgrad_tensor)

cdef extern from "poolgrad.h" nogil:
    ctypedef struct poolgrad_capi:
        unsigned int abi_version
        unsigned int table_size
        int (*plan_create)(poolgrad_plan **, int, const poolgrad_tensor *, int, const poolgrad_params *) noexcept nogil
        int (*plan_execute)(poolgrad_plan *, const poolgrad_tensor *, int) noexcept nogil
        void (*plan_destroy)(poolgrad_plan *) noexcept nogil
        const char *(*last_error)() noexcept nogil
        int (*op_tensor_count)(int, int *, int *) noexcept nogil

cdef extern from *:
    """
    #include <string.h>
    #include <stdlib.h>
    /* One message buffer per OS thread: the status a function returns and the text this gives belong together,
       and concurrent callers on other threads never overwrite each other's message. */
    static _Thread_local char pg_capi_msg[1024];
    static void pg_capi_set_msg(const char *text) {
        size_t n = strlen(text);
        if (n >= sizeof(pg_capi_msg)) n = sizeof(pg_capi_msg) - 1;
        memcpy(pg_capi_msg, text, n);
        pg_capi_msg[n] = 0;
    }
    static const char *pg_capi_get_msg(void) { return pg_capi_msg; }
    /* What the C side keeps of a plan: the Python Plan, the signature execute compares without the GIL, and
       the plan's kernel call when it could be captured below its dispatcher (record: the KernelRecord owning
       kcall, a KernelCall that execute runs without the GIL). */
    typedef struct {
        PyObject *plan;
        int op, nin, nout, forward;
        poolgrad_tensor sig[4];
        PyObject *record;
        const void *kcall;
        /* MAX_POOL_GRAD with check_orig_output: the forward's captured call (into a per-execute y of y_bytes,
           laid out by y_steps bytes), compared with x2 before kcall - the gradient of a plan without the check
           - runs; aux keeps the two Python plans that own the calls' tables */
        PyObject *frecord;
        const void *fcall;
        PyObject *aux;
        size_t y_bytes;
        int64_t y_steps[4];
    } pg_capi_plan;
    """
    void pg_capi_set_msg(const char *text) nogil
    const char *pg_capi_get_msg() nogil
    ctypedef struct pg_capi_plan:
        PyObject *plan
        int op, nin, nout, forward
        poolgrad_tensor sig[4]
        PyObject *record
        const void *kcall
        PyObject *frecord
        const void *fcall
        PyObject *aux
        size_t y_bytes
        int64_t y_steps[4]
    void *malloc(size_t) nogil
    void free(void *) nogil
    int posix_memalign(void **, size_t, size_t) nogil

cdef extern from "pg_dtype.h" nogil:
    float pg_f16_to_f32(unsigned short h)
    float pg_bf16_to_f32(unsigned short b)
    int snprintf(char *, size_t, const char *, ...) nogil

cdef extern from *:
    """
    /* A plain ndarray viewing the caller's memory (takes its own reference to descr). */
    static PyObject *pg_capi_view(PyObject *descr, int nd, npy_intp *dims, npy_intp *strides, void *data,
                                  int flags) {
        Py_INCREF(descr);
        return PyArray_NewFromDescr(&PyArray_Type, (PyArray_Descr *)descr, nd, dims, strides, data, flags, NULL);
    }
    """
    object pg_capi_view(object descr, int nd, cnp.npy_intp *dims, cnp.npy_intp *strides, void *data, int flags)

# (inputs, outputs) per operator id, in the order of include/poolgrad.h
cdef int _NIN[10]
cdef int _NOUT[10]
_NIN[:] = [0, 1, 3, 1, 3, 1, 2, 1, 3, 3]
_NOUT[:] = [0, 2, 1, 2, 1, 1, 1, 1, 1, 1]
_OP_NAMES = (None, "max_pool2d_with_indices", "max_pool2d_with_indices_backward", "adaptive_max_pool2d",
             "adaptive_max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward", "max_pool", "max_pool_grad",
             "max_pooling_grad")
_TENSOR_NAMES = (None, ("x", "y", "indices"), ("grad_output", "x", "indices", "grad_x"), ("x", "y", "indices"),
                 ("grad_output", "x", "indices", "grad_x"), ("x", "y"), ("grad_output", "x", "grad_x"), ("x", "y"),
                 ("x1", "x2", "grad", "grad_x1"), ("dy", "x", "y", "dx"))
cdef int _ITEM[7]
_ITEM[:] = [0, 4, 8, 2, 2, 4, 8]
_DTYPES = None      # dtype code -> numpy dtype, filled on first use (bfloat16 comes from ml_dtypes)


cpdef object _dtype_of(int code):
    global _DTYPES
    if _DTYPES is None:
        from poolgrad.dtypes import bfloat16
        _DTYPES = (None, np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), np.dtype(bfloat16),
                   np.dtype(np.int32), np.dtype(np.int64))
    return _DTYPES[code]


cdef int _fail(int code, const char *text) noexcept nogil:
    pg_capi_set_msg(text)
    return code


cdef int _check_tensor(const char *where, const poolgrad_tensor *t, int i, bint need_data,
                       char *buf) noexcept nogil:
    """What can be checked of one descriptor without the interpreter: dtype, rank, sizes, strides, data."""
    cdef int d
    cdef int64_t count = 1
    cdef int64_t extent
    cdef int64_t step
    cdef int item
    if t.dtype < 1 or t.dtype > 6:
        snprintf(buf, 512, "%s: tensor %d: unknown dtype code %d (expected 1..6, POOLGRAD_FLOAT32..INT64)",
                 where, i, t.dtype)
        return POOLGRAD_ERR_PARAM_INVALID
    if t.ndim < 1 or t.ndim > POOLGRAD_MAX_DIMS:
        snprintf(buf, 512, "%s: tensor %d: ndim must be 1..%d, got %d", where, i, <int>POOLGRAD_MAX_DIMS, t.ndim)
        return POOLGRAD_ERR_PARAM_INVALID
    item = _ITEM[t.dtype]
    extent = item
    for d in range(t.ndim):
        if t.shape[d] < 0:
            snprintf(buf, 512, "%s: tensor %d: shape[%d] is negative (%lld)", where, i, d, <long long>t.shape[d])
            return POOLGRAD_ERR_PARAM_INVALID
        if t.shape[d] > 1:
            # bytes spanned along this axis, refused (by division, before anything can overflow) when the
            # whole tensor would span more than 2**60 bytes: a bad stride is a status, never a wild address
            step = t.strides[d] if t.strides[d] >= 0 else -t.strides[d]
            if step > ((<int64_t>1 << 60) - extent) // item // (t.shape[d] - 1):
                snprintf(buf, 512, "%s: tensor %d: stride %lld along axis %d (size %lld) spans more memory than "
                         "can exist", where, i, <long long>t.strides[d], d, <long long>t.shape[d])
                return POOLGRAD_ERR_PARAM_INVALID
            extent += (t.shape[d] - 1) * step * item
        if t.shape[d] == 0:
            count = 0
        elif count > 0 and t.shape[d] > (<int64_t>1 << 62) // count:
            count = <int64_t>1 << 62
        else:
            count *= t.shape[d]
    if need_data and count > 0 and t.data == NULL:
        snprintf(buf, 512, "%s: tensor %d: data is NULL", where, i)
        return POOLGRAD_ERR_PARAM_NULLPTR
    return POOLGRAD_OK


cdef object _spec_of(const poolgrad_tensor *t):
    """The ArraySpec of a descriptor (strides converted to bytes; alignment from the pointer when given)."""
    from poolgrad.plan_api import ArraySpec
    cdef int item = _ITEM[t.dtype]
    shape = [t.shape[d] for d in range(t.ndim)]
    strides = [t.strides[d] * item for d in range(t.ndim)]
    aligned = t.data == NULL or (<size_t>t.data) % item == 0
    return ArraySpec(shape, _dtype_of(t.dtype), strides, aligned)


cdef object _view_of(const poolgrad_tensor *t, bint writeable):
    """A NumPy view of the caller's memory (no copy; read-only for inputs)."""
    cdef cnp.npy_intp dims[8]
    cdef cnp.npy_intp steps[8]
    cdef int item = _ITEM[t.dtype]
    cdef int d
    cdef void *data = t.data
    for d in range(t.ndim):
        dims[d] = t.shape[d]
        steps[d] = t.strides[d] * item
    dt = _dtype_of(t.dtype)
    if data == NULL:            # no element: any aligned address will do, nothing is read or written
        data = <void *>&_ITEM[0]
    return pg_capi_view(dt, t.ndim, dims, steps, data, cnp.NPY_ARRAY_WRITEABLE if writeable else 0)


cdef object _python_plan(int op, const poolgrad_tensor *tensors, const poolgrad_params *p):
    """Make the Python Plan for a C plan request (raises what the Python API raises)."""
    import poolgrad.plan_api as api
    import poolgrad.tf_max_pool as tf_max_pool
    cdef int nin = _NIN[op]
    layout = {0: "NCHW", 1: "NHWC"}.get(p.layout)
    if layout is None:
        raise ParamInvalidError(f"params.layout: expected POOLGRAD_NCHW (0) or POOLGRAD_NHWC (1), got {p.layout}")
    det = None if p.deterministic == -1 else (p.deterministic != 0) if p.deterministic in (0, 1) else p.deterministic
    nthreads = None if p.num_threads == 0 else p.num_threads
    kernel = (p.kernel[0], p.kernel[1])
    stride = None if p.stride[0] == 0 and p.stride[1] == 0 else (p.stride[0], p.stride[1])
    padding = (p.padding[0], p.padding[1])
    dilation = (p.dilation[0], p.dilation[1])
    ceil_mode = p.ceil_mode != 0 if p.ceil_mode in (0, 1) else p.ceil_mode
    ins = [_spec_of(&tensors[i]) for i in range(nin)]
    out = _spec_of(&tensors[nin])
    if op == 1:
        return api.plan_max_pool2d_with_indices(ins[0], kernel, stride, padding, dilation, ceil_mode,
                                                layout=layout, index_dtype=_spec_of(&tensors[2]).dtype,
                                                num_threads=nthreads)
    if op == 2:
        return api.plan_max_pool2d_with_indices_backward(*ins, kernel, stride, padding, dilation, ceil_mode,
                                                         layout=layout, out=out, deterministic=det,
                                                         num_threads=nthreads)
    if op == 3:
        # the output size is y's (Ho, Wo) in the layout's axis order
        if len(out.shape) not in (3, 4):
            raise ParamInvalidError(f"y: expected a 3-D or 4-D array, got {len(out.shape)}-D with shape "
                                    f"{out.shape}")
        h = (1 if layout == "NCHW" else 0) + len(out.shape) - 3
        size = (out.shape[h], out.shape[h + 1])
        return api.plan_adaptive_max_pool2d(ins[0], size, layout=layout,
                                            index_dtype=_spec_of(&tensors[2]).dtype, num_threads=nthreads)
    if op == 4:
        return api.plan_adaptive_max_pool2d_backward(*ins, layout=layout, out=out, deterministic=det,
                                                     num_threads=nthreads)
    include_pad = p.count_include_pad != 0 if p.count_include_pad in (0, 1) else p.count_include_pad
    divisor = None if p.divisor_override == 0 else p.divisor_override
    if op == 5:
        return api.plan_avg_pool2d(ins[0], kernel, stride, padding, ceil_mode, include_pad, divisor,
                                   layout=layout, num_threads=nthreads)
    if op == 6:
        return api.plan_avg_pool2d_backward(*ins, kernel, stride, padding, ceil_mode, include_pad, divisor,
                                            p.cube_math_type, layout=layout, out=out, deterministic=det,
                                            num_threads=nthreads)
    if op in (7, 8):
        tf_pad = {0: "VALID", 1: "SAME"}.get(p.tf_padding)
        if tf_pad is None:
            raise ParamInvalidError(f"params.tf_padding: expected POOLGRAD_PADDING_VALID (0) or "
                                    f"POOLGRAD_PADDING_SAME (1), got {p.tf_padding}")
        sh, sw = (p.kernel[0], p.kernel[1]) if stride is None else stride
        ksize = [1, 1, p.kernel[0], p.kernel[1]] if layout == "NCHW" else [1, p.kernel[0], p.kernel[1], 1]
        strides = [1, 1, sh, sw] if layout == "NCHW" else [1, sh, sw, 1]
        if op == 7:
            return api.plan_max_pool(ins[0], ksize, strides, tf_pad, layout, num_threads=nthreads)
        check = p.check_orig_output != 0 if p.check_orig_output in (0, 1) else p.check_orig_output
        plan = api.plan_max_pool_grad(*ins, ksize, strides, tf_pad, layout, check_orig_output=check, out=out,
                                      deterministic=det, num_threads=nthreads)
        # one kernel call on every path, so that execute can replay it without the GIL (same bits)
        tf_max_pool.one_kernel_call((<Plan>plan)._run.plan)
        return plan
    return api.plan_max_pooling_grad(*ins, out=out, deterministic=det, num_threads=nthreads)


cdef int _python_error(str where) noexcept:
    """Turn the Python exception being handled into a status and this thread's message (GIL held)."""
    import sys
    exc = sys.exc_info()[1]
    code = getattr(exc, "code", None) if isinstance(exc, PoolGradError) else None
    if code not in (POOLGRAD_ERR_PARAM_NULLPTR, POOLGRAD_ERR_PARAM_INVALID):
        code = POOLGRAD_ERR_PARAM_INVALID
    text = str(exc) if isinstance(exc, PoolGradError) else f"{type(exc).__name__}: {exc}"
    msg = f"{where}: {text}".encode("utf-8", "replace")
    pg_capi_set_msg(msg)
    return code


cdef int _plan_create(poolgrad_plan **plan_out, int op, const poolgrad_tensor *tensors, int ntensors,
                      const poolgrad_params *params) noexcept nogil:
    cdef char buf[512]
    cdef int i, status, nin, nout
    cdef pg_capi_plan *cp
    if plan_out == NULL:
        return _fail(POOLGRAD_ERR_PARAM_NULLPTR, b"poolgrad_plan_create: plan is NULL")
    plan_out[0] = NULL
    if tensors == NULL:
        return _fail(POOLGRAD_ERR_PARAM_NULLPTR, b"poolgrad_plan_create: tensors is NULL")
    if params == NULL:
        return _fail(POOLGRAD_ERR_PARAM_NULLPTR, b"poolgrad_plan_create: params is NULL")
    if op < 1 or op > 9:
        snprintf(buf, 512, "poolgrad_plan_create: unknown operator %d (expected 1..9)", op)
        return _fail(POOLGRAD_ERR_PARAM_INVALID, buf)
    nin = _NIN[op]
    nout = _NOUT[op]
    if ntensors != nin + nout:
        snprintf(buf, 512, "poolgrad_plan_create: operator %d takes %d tensors (%d inputs, %d outputs), got %d",
                 op, nin + nout, nin, nout, ntensors)
        return _fail(POOLGRAD_ERR_PARAM_INVALID, buf)
    for i in range(ntensors):
        status = _check_tensor(b"poolgrad_plan_create", &tensors[i], i, False, buf)
        if status != POOLGRAD_OK:
            return _fail(status, buf)
    cp = <pg_capi_plan *>malloc(sizeof(pg_capi_plan))
    if cp == NULL:
        return _fail(POOLGRAD_ERR_PARAM_INVALID, b"poolgrad_plan_create: out of memory")
    cp.op, cp.nin, cp.nout, cp.forward = op, nin, nout, op in (1, 3, 5, 7)
    cp.record = NULL
    cp.kcall = NULL
    cp.frecord = NULL
    cp.fcall = NULL
    cp.aux = NULL
    for i in range(ntensors):
        cp.sig[i] = tensors[i]
        cp.sig[i].data = NULL
    with gil:
        status = _make_python_plan(cp, tensors, params)
    if status != POOLGRAD_OK:
        free(cp)
        return status
    pg_capi_set_msg(b"")
    plan_out[0] = <poolgrad_plan *>cp
    return POOLGRAD_OK


cdef int _make_python_plan(pg_capi_plan *cp, const poolgrad_tensor *tensors,
                           const poolgrad_params *params) noexcept with gil:
    cdef int i
    try:
        plan = _python_plan(cp.op, tensors, params)
        if cp.forward:
            # The forward plans allocate their results (copied into the caller's outputs on execute): one run
            # on zero-filled examples now gives their shapes and dtypes, which the outputs must have.
            names = _TENSOR_NAMES[cp.op]
            examples = [_spec_of(&tensors[i]).example() for i in range(cp.nin)]
            res = plan(*examples)
            res = res if type(res) is tuple else (res,)
            for i in range(cp.nout):
                want = _spec_of(&tensors[cp.nin + i])
                got = res[i]
                if tuple(want.shape) != got.shape or want.dtype != got.dtype:
                    raise ParamInvalidError(f"{names[cp.nin + i]}: expected shape {got.shape} and dtype "
                                            f"{got.dtype} for these inputs and parameters, got shape "
                                            f"{tuple(want.shape)} and dtype {want.dtype}")
            _capture_forward_kernel(cp, plan, tensors, examples)
        else:
            _capture_kernel(cp, plan, tensors)
            if cp.op == 8 and cp.kcall == NULL and params.check_orig_output == 1:
                _capture_checked_grad(cp, tensors, params)
        Py_INCREF(plan)
        cp.plan = <PyObject *>plan
        return POOLGRAD_OK
    except BaseException:
        _drop_captures(cp)
        return _python_error("poolgrad_plan_create(" + _OP_NAMES[cp.op] + ")")


cdef int _capture_kernel(pg_capi_plan *cp, Plan plan, const poolgrad_tensor *tensors) except -1:
    """Give a backward plan its kernel call, which execute then runs without the GIL, where the operator's
    kernel module can record one (see _launch.KernelRecord): runs on zero-filled examples of the signature -
    the first makes the plan's launch record, the second (only where the record can go below the dispatcher)
    captures the kernel call.  The examples' memory is distinct, so every pointer of the call is unambiguous."""
    cdef int i
    cdef Launch launch
    examples = [_spec_of(&tensors[i]).example() for i in range(cp.nin + 1)]
    plan(*examples[:cp.nin], out=examples[cp.nin])
    launch = _recorded_launch(plan, lambda: plan(*examples[:cp.nin], out=examples[cp.nin]))
    if launch is not None and launch.kernel is not None:
        _adopt_kernel(cp, launch)
    return 0


cdef void _drop_captures(pg_capi_plan *cp):
    """Forget the captured kernel calls (and what keeps their tables alive); execute then takes the GIL path."""
    if cp.record != NULL:
        Py_DECREF(<object>cp.record)
    if cp.frecord != NULL:
        Py_DECREF(<object>cp.frecord)
    if cp.aux != NULL:
        Py_DECREF(<object>cp.aux)
    cp.record = cp.frecord = cp.aux = NULL
    cp.kcall = cp.fcall = NULL


cdef int _capture_checked_grad(pg_capi_plan *cp, const poolgrad_tensor *tensors,
                               const poolgrad_params *params) except -1:
    """MAX_POOL_GRAD with ``check_orig_output``: the Python plan compares x2 with the recomputed maxima in
    Python (its message names the first mismatch), so it records no kernel call.  Capture instead the calls of
    two plans of the same signature - the forward (``max_pool`` of x1) and the gradient without the check -
    which execute runs without the GIL, comparing x2 with the forward's result in between exactly as the
    Python check does (NaN equals NaN, 16-bit values widened to float32).  A mismatch, or any capture that
    fails, leaves the call to the checked plan (with the GIL), whose error and message are the Python API's."""
    cdef poolgrad_params q = params[0]
    cdef Launch launch
    cdef int d
    q.check_orig_output = 0
    gplan = _python_plan(8, tensors, &q)
    fplan = _python_plan(7, tensors, &q)        # max_pool of tensors[0] (x1); tensors[1] (x2) is its output
    _capture_kernel(cp, gplan, tensors)
    if cp.kcall == NULL:
        return 0
    x = _spec_of(&tensors[0]).example()
    fplan(x)
    launch = _recorded_launch(fplan, lambda: fplan(x))
    if (launch is None or launch.kernel is None or launch.nout != 1 or launch._out_ok
            or launch.out_nd[0] != 4 or tensors[1].ndim != 4):
        _drop_captures(cp)
        return 0
    cp.y_bytes = _ITEM[tensors[0].dtype]
    for d in range(4):
        if launch.out_dims[0][d] != tensors[1].shape[d]:
            _drop_captures(cp)
            return 0
        cp.y_steps[d] = launch.out_steps[0][d]
        cp.y_bytes *= launch.out_dims[0][d]
    rec = launch.kernel
    Py_INCREF(rec)
    cp.frecord = <PyObject *>rec
    cp.fcall = &(<KernelRecord>rec).call
    aux = (fplan, gplan)
    Py_INCREF(aux)
    cp.aux = <PyObject *>aux
    return 0


cdef bint _same_maxima(const pg_capi_plan *cp, const char *y, const poolgrad_tensor *x2) noexcept nogil:
    """Whether x2 equals the recomputed maxima y everywhere, as ``tf_max_pool._check_orig_output`` compares
    (equal, or both NaN; float16 / bfloat16 widened to float32 exactly)."""
    cdef int64_t i0, i1, i2, i3, xo, yo
    cdef int item = _ITEM[x2.dtype]
    cdef const char *xp = <const char *>x2.data
    cdef double a, b
    for i0 in range(x2.shape[0]):
        for i1 in range(x2.shape[1]):
            for i2 in range(x2.shape[2]):
                for i3 in range(x2.shape[3]):
                    xo = (i0 * x2.strides[0] + i1 * x2.strides[1] + i2 * x2.strides[2] + i3 * x2.strides[3]) * item
                    yo = i0 * cp.y_steps[0] + i1 * cp.y_steps[1] + i2 * cp.y_steps[2] + i3 * cp.y_steps[3]
                    if x2.dtype == 1:
                        a = (<const float *>(xp + xo))[0]
                        b = (<const float *>(y + yo))[0]
                    elif x2.dtype == 2:
                        a = (<const double *>(xp + xo))[0]
                        b = (<const double *>(y + yo))[0]
                    elif x2.dtype == 3:
                        a = pg_f16_to_f32((<const unsigned short *>(xp + xo))[0])
                        b = pg_f16_to_f32((<const unsigned short *>(y + yo))[0])
                    else:
                        a = pg_bf16_to_f32((<const unsigned short *>(xp + xo))[0])
                        b = pg_bf16_to_f32((<const unsigned short *>(y + yo))[0])
                    if not (a == b or (a != a and b != b)):
                        return False
    return True


cdef Launch _recorded_launch(Plan plan, object run_again):
    """The plan's launch record (None where it has none), after ``run_again()`` - a second run on the examples,
    which captures the kernel call below the dispatcher - where that has not been tried yet."""
    rec = getattr(plan._run.plan, "launch", None)
    if not isinstance(rec, Launch):
        return None
    cdef Launch launch = <Launch>rec
    if launch.kernel is None and not launch.tried_kernel:
        run_again()
    return launch


cdef void _adopt_kernel(pg_capi_plan *cp, Launch launch):
    """Keep the launch record's captured kernel call for execute (a reference the plan's destroy drops)."""
    rec = launch.kernel
    Py_INCREF(rec)
    cp.record = <PyObject *>rec
    cp.kcall = &(<KernelRecord>rec).call


cdef int _capture_forward_kernel(pg_capi_plan *cp, Plan plan, const poolgrad_tensor *tensors,
                                 list examples) except -1:
    """Give a forward plan its kernel call where its kernel module can record one and the caller's outputs are
    laid out exactly as the plan allocates its own (dtype, shape and byte strides): execute then has the kernel
    write straight into them without the GIL.  Other layouts keep the path that copies (with the GIL).  The
    plan has run once on ``examples`` (making its launch record); a second run captures the call."""
    cdef int k, d
    cdef Launch launch
    cdef const poolgrad_tensor *t
    launch = _recorded_launch(plan, lambda: plan(*examples))
    if launch is None or launch.kernel is None or launch.nout != cp.nout or launch._out_ok:
        return 0
    for k in range(cp.nout):
        t = &tensors[cp.nin + k]
        if launch.out_nd[k] != t.ndim or launch.out_descr[k] != _dtype_of(t.dtype):
            return 0
        for d in range(t.ndim):
            if launch.out_dims[k][d] != t.shape[d] or launch.out_steps[k][d] != t.strides[d] * _ITEM[t.dtype]:
                return 0
    _adopt_kernel(cp, launch)
    return 0


cdef bint _out_meets_an_input(const pg_capi_plan *cp, const poolgrad_tensor *tensors) noexcept nogil:
    """Whether some output's bytes overlap an input's or another output's (as ranges: the exact test is
    NumPy's, on the path that holds the GIL)."""
    cdef int i, k
    cdef char *lo
    cdef char *hi
    cdef char *lo2
    cdef char *hi2
    for k in range(cp.nin, cp.nin + cp.nout):
        if not _span(&tensors[k], &lo, &hi):
            continue
        for i in range(k):
            if _span(&tensors[i], &lo2, &hi2) and lo < hi2 and lo2 < hi:
                return True
    return False


cdef bint _span(const poolgrad_tensor *t, char **lo, char **hi) noexcept nogil:
    """Byte range [lo, hi) of a (validated) descriptor; False when it has no element."""
    cdef int d
    cdef int item = _ITEM[t.dtype]
    cdef char *a = <char *>t.data
    cdef char *b = a + item
    for d in range(t.ndim):
        if t.shape[d] == 0:
            return False
        if t.strides[d] >= 0:
            b += t.strides[d] * item * (t.shape[d] - 1)
        else:
            a += t.strides[d] * item * (t.shape[d] - 1)
    lo[0] = a
    hi[0] = b
    return True


cdef int _plan_execute(poolgrad_plan *plan, const poolgrad_tensor *tensors, int ntensors) noexcept nogil:
    cdef char buf[512]
    cdef char *data[4]
    cdef int i, d, status
    cdef pg_capi_plan *cp = <pg_capi_plan *>plan
    cdef const poolgrad_tensor *t
    cdef const poolgrad_tensor *s
    if plan == NULL:
        return _fail(POOLGRAD_ERR_PARAM_NULLPTR, b"poolgrad_plan_execute: plan is NULL")
    if tensors == NULL:
        return _fail(POOLGRAD_ERR_PARAM_NULLPTR, b"poolgrad_plan_execute: tensors is NULL")
    if ntensors != cp.nin + cp.nout:
        snprintf(buf, 512, "poolgrad_plan_execute: the plan takes %d tensors, got %d", cp.nin + cp.nout, ntensors)
        return _fail(POOLGRAD_ERR_PARAM_INVALID, buf)
    # The signature check, without the GIL: every descriptor must be the one the plan was made for.
    for i in range(ntensors):
        t = &tensors[i]
        s = &cp.sig[i]
        if t.dtype != s.dtype or t.ndim != s.ndim:
            snprintf(buf, 512, "poolgrad_plan_execute: tensor %d: the plan was made for dtype %d and ndim %d, got "
                     "dtype %d and ndim %d", i, s.dtype, s.ndim, t.dtype, t.ndim)
            return _fail(POOLGRAD_ERR_PARAM_INVALID, buf)
        for d in range(s.ndim):
            if t.shape[d] != s.shape[d]:
                snprintf(buf, 512, "poolgrad_plan_execute: tensor %d: the plan was made for shape[%d] = %lld, "
                         "got %lld", i, d, <long long>s.shape[d], <long long>t.shape[d])
                return _fail(POOLGRAD_ERR_PARAM_INVALID, buf)
            if t.strides[d] != s.strides[d]:
                snprintf(buf, 512, "poolgrad_plan_execute: tensor %d: the plan was made for strides[%d] = %lld "
                         "elements, got %lld", i, d, <long long>s.strides[d], <long long>t.strides[d])
                return _fail(POOLGRAD_ERR_PARAM_INVALID, buf)
        status = _check_tensor(b"poolgrad_plan_execute", t, i, True, buf)
        if status != POOLGRAD_OK:
            return _fail(status, buf)
    # The kernel call, without the GIL, where the plan has one, every pointer is aligned to its item (the
    # captured call was made from aligned arrays) and the output's bytes meet no input's.  Anything else - an
    # overlap (an error, or max_pooling_grad in place), a misaligned pointer - takes the checked path below,
    # and so does a call whose kernel reports (flags, hit counts) that the data needs it: an index outside its
    # window (legal: the exact pass) or outside the plane (the error, with the first bad index named).  That
    # path redoes the whole call, so what the kernel wrote here is overwritten.
    if cp.kcall != NULL and not _out_meets_an_input(cp, tensors):
        for i in range(ntensors):
            data[i] = <char *>tensors[i].data
            if (<size_t>data[i]) % _ITEM[tensors[i].dtype] != 0:
                return _run_python_plan(cp, tensors)
        if cp.fcall != NULL and not _check_x2(cp, tensors):
            return _run_python_plan(cp, tensors)        # the checked plan raises its message (or, on a
                                                        # failed allocation, redoes the whole call)
        if run_kernel_call(<const KernelCall *>cp.kcall, data) == 0:
            pg_capi_set_msg(b"")
            return POOLGRAD_OK
    return _run_python_plan(cp, tensors)


cdef bint _check_x2(const pg_capi_plan *cp, const poolgrad_tensor *tensors) noexcept nogil:
    """check_orig_output without the GIL: run the captured forward on x1 into a y of this execute's own and
    compare x2 with it.  False on a mismatch (or a failed allocation)."""
    cdef char *fdata[2]
    cdef void *y = NULL
    cdef bint same
    if posix_memalign(&y, 64, cp.y_bytes if cp.y_bytes else 64) != 0:
        return False
    fdata[0] = <char *>tensors[0].data
    fdata[1] = <char *>y
    same = run_kernel_call(<const KernelCall *>cp.fcall, fdata) == 0 and _same_maxima(cp, <const char *>y,
                                                                                     &tensors[1])
    free(y)
    return same


cdef Py_ssize_t _gil_executes = 0     # executes that took the path below (read by tests: gil_executes())


def gil_executes():
    """How many ``poolgrad_plan_execute`` calls so far took the GIL (the others ran their captured kernel call
    without it).  For tests and benchmarks."""
    return _gil_executes


cdef int _run_python_plan(pg_capi_plan *cp, const poolgrad_tensor *tensors) noexcept with gil:
    # The GIL is held only here; the kernels the plan calls release it while they run.
    global _gil_executes
    cdef int i
    cdef Plan plan = <Plan>cp.plan
    cdef bint direct = True
    _gil_executes += 1
    try:
        ins = tuple([_view_of(&tensors[i], False) for i in range(cp.nin)])
        # execute has compared dtypes, shapes and strides with the plan's; where every pointer's alignment is the
        # plan's too, the plan's own check would pass, so its runner runs the call directly (else the plan's
        # check raises its message)
        for i in range(cp.nin + (0 if cp.forward else 1)):
            if ((<size_t>tensors[i].data) % _ITEM[tensors[i].dtype] == 0) != (<_Spec>plan.specs[i]).aligned:
                direct = False
        if cp.forward:
            res = plan._run.call(ins) if direct else plan(*ins)
            res = res if type(res) is tuple else (res,)
            for i in range(cp.nout):
                cnp.PyArray_CopyInto(_view_of(&tensors[cp.nin + i], True), res[i])
        else:
            out = _view_of(&tensors[cp.nin], True)
            if direct:
                plan._run.call(ins + (out,))
            else:
                plan(*ins, out=out)
        pg_capi_set_msg(b"")
        return POOLGRAD_OK
    except BaseException:
        return _python_error("poolgrad_plan_execute(" + _OP_NAMES[cp.op] + ")")


cdef void _plan_destroy(poolgrad_plan *plan) noexcept nogil:
    cdef pg_capi_plan *cp = <pg_capi_plan *>plan
    if cp == NULL:
        return
    with gil:
        Py_DECREF(<object>cp.plan)
        _drop_captures(cp)
    free(cp)


cdef const char *_last_error() noexcept nogil:
    return pg_capi_get_msg()


cdef int _op_tensor_count(int op, int *ninputs, int *noutputs) noexcept nogil:
    if ninputs == NULL or noutputs == NULL:
        return _fail(POOLGRAD_ERR_PARAM_NULLPTR, b"poolgrad op_tensor_count: a result pointer is NULL")
    if op < 1 or op > 9:
        return _fail(POOLGRAD_ERR_PARAM_INVALID, b"poolgrad op_tensor_count: unknown operator")
    ninputs[0] = _NIN[op]
    noutputs[0] = _NOUT[op]
    return POOLGRAD_OK


cdef poolgrad_capi _table
_table.abi_version = POOLGRAD_ABI_VERSION
_table.table_size = sizeof(poolgrad_capi)
_table.plan_create = _plan_create
_table.plan_execute = _plan_execute
_table.plan_destroy = _plan_destroy
_table.last_error = _last_error
_table.op_tensor_count = _op_tensor_count

#: The function table for C extensions (see include/poolgrad.h; fetched by ``poolgrad_import()``).
_C_API = PyCapsule_New(<void *>&_table, b"poolgrad._capi._C_API", NULL)
#: The ABI version of the table.
ABI_VERSION = POOLGRAD_ABI_VERSION

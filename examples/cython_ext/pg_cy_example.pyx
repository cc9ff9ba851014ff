# cython: language_level=3, boundscheck=False, wraparound=False
"""A Cython extension that runs poolgrad's max_pool2d_with_indices_backward through the C API inside a
``nogil`` OpenMP ``parallel`` block (threads that do not hold the GIL); see docs/C_API.md.

backward(grad_output, x, indices, out, kernel, stride, reps)
    grad_output, x: float32 C-contiguous 4-D arrays; indices: int64, grad_output's shape; out: float32
    C-contiguous array of shape (T, *x.shape).  Iteration t of the parallel block writes out[t]; each runs the plan
    ``reps`` times.  Raises RuntimeError with poolgrad's status and message on failure.
tf_backward(x1, x2, grad, out, kernel, stride, reps)
    The same for TensorFlow's MaxPoolGrad (NCHW, VALID padding): x1, x2, grad float32 C-contiguous 4-D arrays,
    out of shape (T, *x1.shape).
"""
cimport openmp
from cython.parallel cimport parallel
from libc.stdint cimport int64_t

from poolgrad_capi cimport *

cdef extern from "Python.h" nogil:
    # declared nogil here: they are exactly what a thread without the GIL calls to get a thread state
    ctypedef int PyGILState_STATE
    ctypedef struct PyThreadState:
        pass
    PyGILState_STATE PyGILState_Ensure()
    void PyGILState_Release(PyGILState_STATE)
    PyThreadState *PyEval_SaveThread()
    void PyEval_RestoreThread(PyThreadState *)

poolgrad_import()       # ImportError here if this extension's header is newer than the installed poolgrad


def backward(float[:, :, :, ::1] grad_output, float[:, :, :, ::1] x, int64_t[:, :, :, ::1] indices,
             float[:, :, :, :, ::1] out, int kernel, int stride, int reps):
    cdef int64_t go_shape[4]
    cdef int64_t x_shape[4]
    cdef poolgrad_tensor tensors[4]
    cdef int d
    for d in range(4):
        go_shape[d] = grad_output.shape[d]
        x_shape[d] = x.shape[d]
    poolgrad_tensor_init(&tensors[0], &grad_output[0, 0, 0, 0], POOLGRAD_FLOAT32, 4, go_shape)
    poolgrad_tensor_init(&tensors[1], &x[0, 0, 0, 0], POOLGRAD_FLOAT32, 4, x_shape)
    poolgrad_tensor_init(&tensors[2], &indices[0, 0, 0, 0], POOLGRAD_INT64, 4, go_shape)
    _in_parallel(POOLGRAD_MAX_POOL2D_WITH_INDICES_BACKWARD, tensors, x_shape, out, kernel, stride, reps)


def tf_backward(float[:, :, :, ::1] x1, float[:, :, :, ::1] x2, float[:, :, :, ::1] grad,
                float[:, :, :, :, ::1] out, int kernel, int stride, int reps):
    cdef int64_t x_shape[4]
    cdef int64_t y_shape[4]
    cdef poolgrad_tensor tensors[4]
    cdef int d
    for d in range(4):
        x_shape[d] = x1.shape[d]
        y_shape[d] = x2.shape[d]
    poolgrad_tensor_init(&tensors[0], &x1[0, 0, 0, 0], POOLGRAD_FLOAT32, 4, x_shape)
    poolgrad_tensor_init(&tensors[1], &x2[0, 0, 0, 0], POOLGRAD_FLOAT32, 4, y_shape)
    poolgrad_tensor_init(&tensors[2], &grad[0, 0, 0, 0], POOLGRAD_FLOAT32, 4, y_shape)
    _in_parallel(POOLGRAD_MAX_POOL_GRAD, tensors, x_shape, out, kernel, stride, reps)


cdef _in_parallel(int op, poolgrad_tensor *tensors, const int64_t *x_shape, float[:, :, :, :, ::1] out,
                  int kernel, int stride, int reps):
    """Plan ``op`` on the three inputs in ``tensors`` (the output, tensors[3], of x's shape) and run it from
    every thread of an OpenMP parallel block, iteration t writing out[t]."""
    cdef poolgrad_params params
    cdef poolgrad_plan *plan = NULL
    cdef int d, status
    cdef int nt = out.shape[0]
    cdef int failed = 0
    cdef int failed_status = 0
    for d in range(4):
        if out.shape[d + 1] != x_shape[d]:
            raise ValueError("out must have shape (T, *x.shape)")
    poolgrad_tensor_init(&tensors[3], NULL, POOLGRAD_FLOAT32, 4, x_shape)   # data is set per iteration
    poolgrad_params_init(&params)
    params.kernel[0] = params.kernel[1] = kernel        # TensorFlow's ksize / strides too (H and W, NCHW)
    params.stride[0] = params.stride[1] = stride
    params.num_threads = 1          # the loop below is the parallelism
    params.deterministic = 1
    with nogil:
        status = poolgrad_plan_create(&plan, op, tensors, 4, &params)
    if status != POOLGRAD_OK:
        raise RuntimeError(f"plan_create: status {status}: {poolgrad_last_error().decode()}")
    try:
        with nogil, parallel():
            _thread(plan, tensors, &out[0, 0, 0, 0, 0], out.strides[0] // sizeof(float), nt, reps, &failed,
                    &failed_status)
    finally:
        poolgrad_plan_destroy(plan)
    if failed:
        raise RuntimeError(f"plan_execute: status {failed_status}")


cdef void _thread(poolgrad_plan *plan, const poolgrad_tensor *tensors, float *out, Py_ssize_t step, int nt,
                 int reps, int *failed, int *failed_status) noexcept nogil:
    """One OpenMP thread: iterations me, me + team, ...  It makes (or re-takes) its Python thread state once and
    keeps it, without the GIL, for all its iterations; otherwise every execute would create and destroy one
    (docs/C_API.md)."""
    cdef int t = openmp.omp_get_thread_num()
    cdef int team = openmp.omp_get_num_threads()
    cdef PyGILState_STATE gil = PyGILState_Ensure()
    cdef PyThreadState *saved = PyEval_SaveThread()
    while t < nt:
        _run(plan, tensors, out + t * step, reps, failed, failed_status)
        t += team
    PyEval_RestoreThread(saved)
    PyGILState_Release(gil)


cdef void _run(poolgrad_plan *plan, const poolgrad_tensor *shared, float *target, int reps, int *failed,
               int *failed_status) noexcept nogil:
    """One iteration: its own copy of the descriptors (only the output pointer differs), ``reps`` runs."""
    cdef poolgrad_tensor mine[4]
    cdef int r, status
    for r in range(4):
        mine[r] = shared[r]
    mine[3].data = target
    for r in range(reps):
        status = poolgrad_plan_execute(plan, mine, 4)
        if status != POOLGRAD_OK:
            failed[0] = 1
            failed_status[0] = status
            return

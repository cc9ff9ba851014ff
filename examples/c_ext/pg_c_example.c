/* A plain C extension module that runs poolgrad's max_pool2d_with_indices_backward (or max_pooling_grad)
 * through the C API from several POSIX threads, none of which holds the GIL (docs/C_API.md).
 *
 *   backward(grad_output, x, indices, out, kernel, stride, threads, reps, op=POOLGRAD_MAX_POOL2D_WITH_INDICES_BACKWARD)
 *       grad_output, x: float32 4-D buffers; indices: int64 buffer; out: writeable float32 buffer of shape
 *       (threads, *x.shape).  Thread t runs the plan `reps` times writing out[t].  Returns None or raises
 *       RuntimeError with poolgrad's status and message.  With op=POOLGRAD_MAX_POOLING_GRAD (9) the arguments
 *       are dy, x, y (all float32) and out; kernel and stride are ignored.  With op=POOLGRAD_MAX_POOL_GRAD (8,
 *       TensorFlow's MaxPoolGrad, NCHW, VALID) they are x1, x2, grad (all float32) and out of shape
 *       (threads, *x1.shape).
 *   error_statuses()
 *       [(status, message), ...] for deliberate misuse: NULL plan pointer, NULL data, a bad stride, an unknown
 *       operator, a tensor count that does not match.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <string.h>

#include "poolgrad.h"

/* A buffer's pointer, dtype code, shape and (element) strides as a poolgrad tensor. */
static int tensor_of(Py_buffer *view, int32_t dtype, poolgrad_tensor *t) {
    int d;
    if (view->ndim > POOLGRAD_MAX_DIMS) {
        PyErr_SetString(PyExc_ValueError, "too many dimensions");
        return -1;
    }
    memset(t, 0, sizeof(*t));
    t->data = view->buf;
    t->dtype = dtype;
    t->ndim = view->ndim;
    for (d = 0; d < view->ndim; d++) {
        t->shape[d] = view->shape[d];
        t->strides[d] = view->strides[d] / view->itemsize;
    }
    return 0;
}

typedef struct {
    poolgrad_plan *plan;
    poolgrad_tensor tensors[4];
    int reps;
    int status;
    char message[512];
} job;

static void *worker(void *arg) {
    /* No GIL here: poolgrad takes it for its Python parts and releases it for the kernel.  A thread Python has
       never seen would get a new thread state from every call's PyGILState_Ensure and lose it at the matching
       release (measured: that doubled the cost of a tiny call); a thread that calls poolgrad repeatedly makes
       its thread state once and keeps it, without holding the GIL, until it is done. */
    job *j = (job *)arg;
    int r;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyThreadState *saved = PyEval_SaveThread();
    j->status = POOLGRAD_OK;
    for (r = 0; r < j->reps && j->status == POOLGRAD_OK; r++) {
        j->status = poolgrad_plan_execute(j->plan, j->tensors, 4);
        if (j->status != POOLGRAD_OK)
            snprintf(j->message, sizeof(j->message), "%s", poolgrad_last_error());
    }
    PyEval_RestoreThread(saved);
    PyGILState_Release(gil);
    return NULL;
}

static PyObject *backward(PyObject *self, PyObject *args) {
    PyObject *go_obj, *x_obj, *ind_obj, *out_obj;
    Py_ssize_t kernel, stride;
    int threads, reps, t, status, failed = 0, op = POOLGRAD_MAX_POOL2D_WITH_INDICES_BACKWARD, third;
    Py_buffer go, x, ind, out;
    poolgrad_tensor tensors[4];
    poolgrad_params params;
    poolgrad_plan *plan = NULL;
    job jobs[16];
    pthread_t tids[16];
    char message[600];
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOnnii|i", &go_obj, &x_obj, &ind_obj, &out_obj, &kernel, &stride, &threads,
                          &reps, &op))
        return NULL;
    if (op != POOLGRAD_MAX_POOL2D_WITH_INDICES_BACKWARD && op != POOLGRAD_MAX_POOLING_GRAD &&
        op != POOLGRAD_MAX_POOL_GRAD) {
        PyErr_SetString(PyExc_ValueError, "op must be POOLGRAD_MAX_POOL2D_WITH_INDICES_BACKWARD, _MAX_POOLING_GRAD "
                                          "or _MAX_POOL_GRAD");
        return NULL;
    }
    third = op == POOLGRAD_MAX_POOL2D_WITH_INDICES_BACKWARD ? POOLGRAD_INT64 : POOLGRAD_FLOAT32;
    if (threads < 1 || threads > 16) {
        PyErr_SetString(PyExc_ValueError, "threads must be 1..16");
        return NULL;
    }
    if (PyObject_GetBuffer(go_obj, &go, PyBUF_RECORDS_RO) < 0)
        return NULL;
    if (PyObject_GetBuffer(x_obj, &x, PyBUF_RECORDS_RO) < 0)
        goto fail_go;
    if (PyObject_GetBuffer(ind_obj, &ind, PyBUF_RECORDS_RO) < 0)
        goto fail_x;
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_RECORDS) < 0)
        goto fail_ind;
    if (strcmp(go.format, "f") || strcmp(x.format, "f") || strcmp(out.format, "f") ||
        (third == POOLGRAD_INT64 ? strcmp(ind.format, "l") && strcmp(ind.format, "q") : strcmp(ind.format, "f")) ||
        out.ndim != x.ndim + 1 || out.shape[0] != threads) {
        PyErr_SetString(PyExc_ValueError, "expected float32 grad_output/x/out, int64 indices (float32 y, grad), "
                                          "out of shape (threads, *x.shape)");
        goto fail_out;
    }
    if (tensor_of(&go, POOLGRAD_FLOAT32, &tensors[0]) || tensor_of(&x, POOLGRAD_FLOAT32, &tensors[1]) ||
        tensor_of(&ind, third, &tensors[2]))
        goto fail_out;
    /* the output tensor: out[0]'s signature (every out[t] has the same one) */
    {
        Py_buffer sub = out;
        sub.ndim = out.ndim - 1;
        sub.shape = out.shape + 1;
        sub.strides = out.strides + 1;
        if (tensor_of(&sub, POOLGRAD_FLOAT32, &tensors[3]))
            goto fail_out;
    }

    poolgrad_params_init(&params);
    params.kernel[0] = params.kernel[1] = kernel;     /* TensorFlow's ksize / strides too (H and W) */
    params.stride[0] = params.stride[1] = stride;
    params.num_threads = 1;        /* one OpenMP thread per call: the parallelism is ours */
    params.deterministic = 1;

    Py_BEGIN_ALLOW_THREADS          /* everything below runs without the GIL */
    status = poolgrad_plan_create(&plan, op, tensors, 4, &params);
    if (status != POOLGRAD_OK) {
        snprintf(message, sizeof(message), "plan_create: status %d: %s", status, poolgrad_last_error());
        failed = 1;
    } else {
        for (t = 0; t < threads; t++) {
            jobs[t].plan = plan;
            memcpy(jobs[t].tensors, tensors, sizeof(tensors));
            jobs[t].tensors[3].data = (char *)out.buf + t * out.strides[0];
            jobs[t].reps = reps;
            pthread_create(&tids[t], NULL, worker, &jobs[t]);
        }
        for (t = 0; t < threads; t++)
            pthread_join(tids[t], NULL);
        for (t = 0; t < threads; t++)
            if (jobs[t].status != POOLGRAD_OK && !failed) {
                snprintf(message, sizeof(message), "thread %d: status %d: %s", t, jobs[t].status, jobs[t].message);
                failed = 1;
            }
        poolgrad_plan_destroy(plan);
    }
    Py_END_ALLOW_THREADS

    PyBuffer_Release(&out);
    PyBuffer_Release(&ind);
    PyBuffer_Release(&x);
    PyBuffer_Release(&go);
    if (failed) {
        PyErr_SetString(PyExc_RuntimeError, message);
        return NULL;
    }
    Py_RETURN_NONE;
fail_out:
    PyBuffer_Release(&out);
fail_ind:
    PyBuffer_Release(&ind);
fail_x:
    PyBuffer_Release(&x);
fail_go:
    PyBuffer_Release(&go);
    return NULL;
}

/* Append (status, message) to list. */
static int record(PyObject *list, int status) {
    PyObject *item = Py_BuildValue("(is)", status, poolgrad_last_error());
    int rc = item ? PyList_Append(list, item) : -1;
    Py_XDECREF(item);
    return rc;
}

static PyObject *error_statuses(PyObject *self, PyObject *noargs) {
    static float go[1 * 1 * 2 * 2], x[1 * 1 * 4 * 4], gx[1 * 1 * 4 * 4];
    static int64_t ind[1 * 1 * 2 * 2];
    const int64_t go_shape[4] = {1, 1, 2, 2}, x_shape[4] = {1, 1, 4, 4};
    poolgrad_tensor t[4], bad[4];
    poolgrad_params params;
    poolgrad_plan *plan = NULL;
    PyObject *list = PyList_New(0);
    int s;
    (void)self;
    (void)noargs;
    if (!list)
        return NULL;
    poolgrad_tensor_init(&t[0], go, POOLGRAD_FLOAT32, 4, go_shape);
    poolgrad_tensor_init(&t[1], x, POOLGRAD_FLOAT32, 4, x_shape);
    poolgrad_tensor_init(&t[2], ind, POOLGRAD_INT64, 4, go_shape);
    poolgrad_tensor_init(&t[3], gx, POOLGRAD_FLOAT32, 4, x_shape);
    poolgrad_params_init(&params);
    params.kernel[0] = params.kernel[1] = 2;

    s = poolgrad_plan_create(NULL, POOLGRAD_MAX_POOL2D_WITH_INDICES_BACKWARD, t, 4, &params);
    if (record(list, s)) goto fail;
    s = poolgrad_plan_create(&plan, 42, t, 4, &params);
    if (record(list, s)) goto fail;
    s = poolgrad_plan_create(&plan, POOLGRAD_MAX_POOL2D_WITH_INDICES_BACKWARD, t, 3, &params);
    if (record(list, s)) goto fail;
    params.kernel[0] = 7;          /* a window larger than the input: the Python API's own error */
    s = poolgrad_plan_create(&plan, POOLGRAD_MAX_POOL2D_WITH_INDICES_BACKWARD, t, 4, &params);
    if (record(list, s)) goto fail;
    params.kernel[0] = 2;
    s = poolgrad_plan_create(&plan, POOLGRAD_MAX_POOL2D_WITH_INDICES_BACKWARD, t, 4, &params);
    if (record(list, s)) goto fail;
    if (s != POOLGRAD_OK) goto done;
    memcpy(bad, t, sizeof(t));
    bad[1].data = NULL;            /* NULL data */
    s = poolgrad_plan_execute(plan, bad, 4);
    if (record(list, s)) goto fail;
    memcpy(bad, t, sizeof(t));
    bad[3].strides[3] = 2;         /* a stride the plan was not made for */
    s = poolgrad_plan_execute(plan, bad, 4);
    if (record(list, s)) goto fail;
    s = poolgrad_plan_execute(NULL, t, 4);
    if (record(list, s)) goto fail;
    ind[3] = 16;                   /* an index outside the 4x4 plane: the data check of every run */
    s = poolgrad_plan_execute(plan, t, 4);
    ind[3] = 0;
    if (record(list, s)) goto fail;
    s = poolgrad_plan_execute(plan, t, 4);
    if (record(list, s)) goto fail;
done:
    poolgrad_plan_destroy(plan);
    return list;
fail:
    poolgrad_plan_destroy(plan);
    Py_DECREF(list);
    return NULL;
}

static PyMethodDef methods[] = {
    {"backward", backward, METH_VARARGS, "Run max_pool2d_with_indices_backward from several threads."},
    {"error_statuses", error_statuses, METH_NOARGS, "Statuses and messages of deliberate misuse."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "pg_c_example", NULL, -1, methods};

PyMODINIT_FUNC PyInit_pg_c_example(void) {
    if (poolgrad_import() < 0)     /* ImportError when this header is newer than the installed poolgrad */
        return NULL;
    return PyModule_Create(&module);
}

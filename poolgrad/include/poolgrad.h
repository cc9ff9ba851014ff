/* poolgrad C API: plans of every poolgrad operator, callable from C, C++ and Cython extensions.
 *
 * Build against it with include_dirs=[poolgrad.get_include()]; link against nothing.  At module init call
 * poolgrad_import() (it imports poolgrad and fetches the function table from the PyCapsule
 * "poolgrad._capi._C_API"), then make plans with poolgrad_plan_create(), run them with poolgrad_plan_execute()
 * and free them with poolgrad_plan_destroy().  docs/C_API.md has the contract and a worked example.
 *
 * Every function returns a status: POOLGRAD_OK (0), POOLGRAD_ERR_PARAM_NULLPTR (161001: a NULL pointer where an
 * object or data is required) or POOLGRAD_ERR_PARAM_INVALID (161002: anything else that is wrong, including a
 * tensor whose dtype, shape or strides differ from the plan's).  No function raises or leaves a Python exception
 * set; poolgrad_last_error() gives this thread's message for the last failure.
 *
 * GIL: every function may be called with or without the GIL held.  What needs the interpreter (validation,
 * planning, wrapping the pointers in NumPy views) runs under the GIL, taken with PyGILState_Ensure; the kernels
 * run with the GIL released.  Argument checks (NULL pointers, tensor counts, signature against the plan) run
 * before the GIL is taken.  Never call these functions after the interpreter has started finalizing.
 */
#ifndef POOLGRAD_H
#define POOLGRAD_H

#include <Python.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the function table's layout.  Entries are only ever appended: a library of version V serves any
 * extension built against a header of version <= V.  An extension built against a newer header than the
 * installed library fails in poolgrad_import() with an ImportError that names both versions. */
#define POOLGRAD_ABI_VERSION 1
/* The version poolgrad_import() requires (tests override it to check the failure). */
#ifndef POOLGRAD_REQUIRED_ABI_VERSION
#define POOLGRAD_REQUIRED_ABI_VERSION POOLGRAD_ABI_VERSION
#endif

#define POOLGRAD_OK 0
#define POOLGRAD_ERR_PARAM_NULLPTR 161001
#define POOLGRAD_ERR_PARAM_INVALID 161002

#define POOLGRAD_MAX_DIMS 8

/* dtypes (16-bit floats are raw bits: IEEE binary16 and bfloat16, as uint16_t in memory) */
#define POOLGRAD_FLOAT32 1
#define POOLGRAD_FLOAT64 2
#define POOLGRAD_FLOAT16 3
#define POOLGRAD_BFLOAT16 4
#define POOLGRAD_INT32 5
#define POOLGRAD_INT64 6

/* operators; tensors are passed inputs first, then outputs, in this order:
 *   MAX_POOL2D_WITH_INDICES           x                 | y, indices   (index dtype = indices' dtype)
 *   MAX_POOL2D_WITH_INDICES_BACKWARD  grad_output, x, indices | grad_x
 *   ADAPTIVE_MAX_POOL2D               x                 | y, indices   (output size = y's H and W)
 *   ADAPTIVE_MAX_POOL2D_BACKWARD      grad_output, x, indices | grad_x
 *   AVG_POOL2D                        x                 | y
 *   AVG_POOL2D_BACKWARD               grad_output, x    | grad_x
 *   MAX_POOL (TensorFlow)             x                 | y
 *   MAX_POOL_GRAD (TensorFlow)        x1, x2, grad      | grad_x1
 *   MAX_POOLING_GRAD (element-wise)   dy, x, y          | dx          (1 to 8 dimensions)
 * Pooling tensors are 3-D or 4-D in the logical order of params.layout (TensorFlow: 4-D). */
#define POOLGRAD_MAX_POOL2D_WITH_INDICES 1
#define POOLGRAD_MAX_POOL2D_WITH_INDICES_BACKWARD 2
#define POOLGRAD_ADAPTIVE_MAX_POOL2D 3
#define POOLGRAD_ADAPTIVE_MAX_POOL2D_BACKWARD 4
#define POOLGRAD_AVG_POOL2D 5
#define POOLGRAD_AVG_POOL2D_BACKWARD 6
#define POOLGRAD_MAX_POOL 7
#define POOLGRAD_MAX_POOL_GRAD 8
#define POOLGRAD_MAX_POOLING_GRAD 9

#define POOLGRAD_NCHW 0
#define POOLGRAD_NHWC 1
#define POOLGRAD_PADDING_VALID 0
#define POOLGRAD_PADDING_SAME 1

/* A tensor: pointer + dtype + shape + strides (in elements, may be negative or zero for inputs).  data may be
 * NULL at plan creation (only the signature counts then) and at execution for a tensor with no element. */
typedef struct {
    void *data;
    int32_t dtype;
    int32_t ndim;
    int64_t shape[POOLGRAD_MAX_DIMS];
    int64_t strides[POOLGRAD_MAX_DIMS];
} poolgrad_tensor;

/* Parameters of every operator (each reads the fields it has; start from poolgrad_params_init()). */
typedef struct {
    int64_t kernel[2];          /* window (H, W): max/avg pooling kernel_size, TensorFlow ksize */
    int64_t stride[2];          /* (H, W); {0, 0}: the kernel size (PyTorch's default) */
    int64_t padding[2];         /* (H, W), PyTorch-style operators */
    int64_t dilation[2];        /* (H, W), max_pool2d_with_indices; default {1, 1} */
    int32_t ceil_mode;          /* 0 or 1 */
    int32_t count_include_pad;  /* avg pooling, 0 or 1; default 1 */
    int64_t divisor_override;   /* avg pooling; 0: none */
    int32_t cube_math_type;     /* avg_pool2d_backward, 0..3 */
    int32_t layout;             /* POOLGRAD_NCHW or POOLGRAD_NHWC (TensorFlow's data_format too) */
    int32_t tf_padding;         /* TensorFlow: POOLGRAD_PADDING_VALID or POOLGRAD_PADDING_SAME */
    int32_t check_orig_output;  /* TensorFlow max_pool_grad, 0 or 1 */
    int32_t deterministic;      /* backwards: -1 the process-wide setting (read at plan creation), 0 or 1 */
    int32_t num_threads;        /* 0: omp_get_max_threads() at plan creation; else the thread count */
} poolgrad_params;

typedef struct poolgrad_plan poolgrad_plan;    /* opaque */

/* The function table (capsule "poolgrad._capi._C_API").  Append-only: see POOLGRAD_ABI_VERSION. */
typedef struct {
    uint32_t abi_version;
    uint32_t table_size;        /* sizeof of the library's table */
    int (*plan_create)(poolgrad_plan **plan, int32_t op, const poolgrad_tensor *tensors, int32_t ntensors,
                       const poolgrad_params *params);
    int (*plan_execute)(poolgrad_plan *plan, const poolgrad_tensor *tensors, int32_t ntensors);
    void (*plan_destroy)(poolgrad_plan *plan);
    const char *(*last_error)(void);
    int (*op_tensor_count)(int32_t op, int32_t *ninputs, int32_t *noutputs);
} poolgrad_capi;

/* One pointer per translation unit that includes this header, set by poolgrad_import(). */
static const poolgrad_capi *poolgrad_api = NULL;

/* Import poolgrad's C API (call with the GIL held, e.g. in PyInit_...).  Returns 0, or -1 with an ImportError
 * (or the import's own error) set. */
static inline int poolgrad_import(void) {
    const poolgrad_capi *api = (const poolgrad_capi *)PyCapsule_Import("poolgrad._capi._C_API", 0);
    if (api == NULL)
        return -1;
    if (api->abi_version < (uint32_t)POOLGRAD_REQUIRED_ABI_VERSION || api->table_size < sizeof(poolgrad_capi)) {
        PyErr_Format(PyExc_ImportError,
                     "poolgrad C API: this extension was built against ABI version %d, but the installed poolgrad "
                     "provides version %u; upgrade poolgrad or rebuild the extension against its header",
                     (int)POOLGRAD_REQUIRED_ABI_VERSION, (unsigned)api->abi_version);
        return -1;
    }
    poolgrad_api = api;
    return 0;
}

/* Fill t as a C-contiguous tensor of this shape. */
static inline void poolgrad_tensor_init(poolgrad_tensor *t, void *data, int32_t dtype, int32_t ndim,
                                        const int64_t *shape) {
    int64_t step = 1;
    int32_t i;
    t->data = data;
    t->dtype = dtype;
    t->ndim = ndim;
    for (i = 0; i < POOLGRAD_MAX_DIMS; i++) {
        t->shape[i] = 0;
        t->strides[i] = 0;
    }
    for (i = ndim - 1; i >= 0 && i < POOLGRAD_MAX_DIMS; i--) {
        t->shape[i] = shape[i];
        t->strides[i] = step;
        step *= shape[i] > 1 ? shape[i] : 1;
    }
}

/* The defaults of the Python API: stride = kernel, no padding, dilation 1, count_include_pad, NCHW, VALID,
 * the process-wide determinism, omp_get_max_threads() threads. */
static inline void poolgrad_params_init(poolgrad_params *p) {
    p->kernel[0] = p->kernel[1] = 0;
    p->stride[0] = p->stride[1] = 0;
    p->padding[0] = p->padding[1] = 0;
    p->dilation[0] = p->dilation[1] = 1;
    p->ceil_mode = 0;
    p->count_include_pad = 1;
    p->divisor_override = 0;
    p->cube_math_type = 0;
    p->layout = POOLGRAD_NCHW;
    p->tf_padding = POOLGRAD_PADDING_VALID;
    p->check_orig_output = 0;
    p->deterministic = -1;
    p->num_threads = 0;
}

/* Wrappers over the table (POOLGRAD_ERR_PARAM_NULLPTR if poolgrad_import() has not succeeded). */
static inline int poolgrad_plan_create(poolgrad_plan **plan, int32_t op, const poolgrad_tensor *tensors,
                                       int32_t ntensors, const poolgrad_params *params) {
    return poolgrad_api ? poolgrad_api->plan_create(plan, op, tensors, ntensors, params)
                        : POOLGRAD_ERR_PARAM_NULLPTR;
}
static inline int poolgrad_plan_execute(poolgrad_plan *plan, const poolgrad_tensor *tensors, int32_t ntensors) {
    return poolgrad_api ? poolgrad_api->plan_execute(plan, tensors, ntensors) : POOLGRAD_ERR_PARAM_NULLPTR;
}
static inline void poolgrad_plan_destroy(poolgrad_plan *plan) {
    if (poolgrad_api)
        poolgrad_api->plan_destroy(plan);
}
static inline const char *poolgrad_last_error(void) {
    return poolgrad_api ? poolgrad_api->last_error() : "poolgrad C API: poolgrad_import() has not succeeded";
}

#ifdef __cplusplus
}
#endif
#endif /* POOLGRAD_H */

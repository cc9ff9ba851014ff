# Cython declarations of poolgrad's C API (include/poolgrad.h).  With include_path=[poolgrad.get_include()]:
#
#     from poolgrad_capi cimport *
#     poolgrad_import()              # once, at module import (raises ImportError on an ABI mismatch)
#
# then make, run and destroy plans from nogil code.  The contract is in docs/C_API.md.
from libc.stdint cimport int32_t, int64_t, uint32_t

cdef extern from "poolgrad.h" nogil:
    enum:
        POOLGRAD_ABI_VERSION
        POOLGRAD_OK
        POOLGRAD_ERR_PARAM_NULLPTR
        POOLGRAD_ERR_PARAM_INVALID
        POOLGRAD_MAX_DIMS
        POOLGRAD_FLOAT32
        POOLGRAD_FLOAT64
        POOLGRAD_FLOAT16
        POOLGRAD_BFLOAT16
        POOLGRAD_INT32
        POOLGRAD_INT64
        POOLGRAD_MAX_POOL2D_WITH_INDICES
        POOLGRAD_MAX_POOL2D_WITH_INDICES_BACKWARD
        POOLGRAD_ADAPTIVE_MAX_POOL2D
        POOLGRAD_ADAPTIVE_MAX_POOL2D_BACKWARD
        POOLGRAD_AVG_POOL2D
        POOLGRAD_AVG_POOL2D_BACKWARD
        POOLGRAD_MAX_POOL
        POOLGRAD_MAX_POOL_GRAD
        POOLGRAD_MAX_POOLING_GRAD
        POOLGRAD_NCHW
        POOLGRAD_NHWC
        POOLGRAD_PADDING_VALID
        POOLGRAD_PADDING_SAME

    ctypedef struct poolgrad_tensor:
        void *data
        int32_t dtype
        int32_t ndim
        int64_t shape[8]
        int64_t strides[8]

    ctypedef struct poolgrad_params:
        int64_t kernel[2]
        int64_t stride[2]
        int64_t padding[2]
        int64_t dilation[2]
        int32_t ceil_mode
        int32_t count_include_pad
        int64_t divisor_override
        int32_t cube_math_type
        int32_t layout
        int32_t tf_padding
        int32_t check_orig_output
        int32_t deterministic
        int32_t num_threads

    ctypedef struct poolgrad_plan:
        pass

    int poolgrad_import() except -1 with gil
    void poolgrad_tensor_init(poolgrad_tensor *t, void *data, int32_t dtype, int32_t ndim, const int64_t *shape)
    void poolgrad_params_init(poolgrad_params *p)
    int poolgrad_plan_create(poolgrad_plan **plan, int32_t op, const poolgrad_tensor *tensors, int32_t ntensors,
                             const poolgrad_params *params)
    int poolgrad_plan_execute(poolgrad_plan *plan, const poolgrad_tensor *tensors, int32_t ntensors)
    void poolgrad_plan_destroy(poolgrad_plan *plan)
    const char *poolgrad_last_error()

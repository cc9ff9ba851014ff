"""poolgrad: fast, exact and safe CPU backward passes of 2-D pooling.

Public API (all functions validate their inputs and raise :class:`PoolGradError` subclasses with CANN codes):

* :func:`max_pool2d_with_indices` / :func:`max_pool2d_with_indices_backward`
* :func:`adaptive_max_pool2d` / :func:`adaptive_max_pool2d_backward`
* :func:`avg_pool2d` / :func:`avg_pool2d_backward` (with ``cube_math_type``)
* :func:`max_pooling_grad` (element-wise, CANN MaxPoolingGrad)
* :func:`max_pool` / :func:`max_pool_grad` (TensorFlow MaxPool / MaxPoolGrad)
* determinism and threads: :func:`set_deterministic`, :func:`is_deterministic`, :func:`deterministic`,
  :func:`show_config`
* recycling of large outputs: :func:`set_buffer_cache_limit`, :func:`buffer_cache_info`, :func:`release_buffers`
"""
from .config import (deterministic, get_config, is_deterministic, set_buffer_cache_limit, set_deterministic,
                     show_config)
from .dtypes import bfloat16
from .elementwise import max_pooling_grad
from .errors import (ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, ParamInvalidError, ParamNullptrError,
                     PoolGradError)
from .adaptive import adaptive_max_pool2d, adaptive_max_pool2d_backward
from .avg_pool import avg_pool2d, avg_pool2d_backward
from .max_pool_indices import max_pool2d_with_indices, max_pool2d_with_indices_backward
from .memory import buffer_cache_info, release_buffers
from .tf_max_pool import max_pool, max_pool_grad

__version__ = "0.1.0"

__all__ = [
    "max_pool2d_with_indices", "max_pool2d_with_indices_backward",
    "adaptive_max_pool2d", "adaptive_max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward",
    "max_pooling_grad", "max_pool", "max_pool_grad",
    "set_deterministic", "is_deterministic", "deterministic", "show_config", "get_config",
    "PoolGradError", "ParamNullptrError", "ParamInvalidError", "ACLNN_ERR_PARAM_NULLPTR",
    "ACLNN_ERR_PARAM_INVALID", "bfloat16", "set_buffer_cache_limit", "buffer_cache_info", "release_buffers",
]

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
* plans (validate once, run many times): ``plan_<operator>`` for every operator above, :class:`Plan`,
  :class:`ArraySpec` (see :mod:`poolgrad.plan_api`)
* the C API for extension authors: :func:`get_include` (see docs/C_API.md)
"""
from ._version import __version__ as __version__  # "as": re-exported for type checkers (PEP 484)


def _check_compiled_core() -> None:
    """Raise an ImportError that says how to build the compiled core when its modules are not here.

    Without this check a missing extension surfaces as "cannot import name '_config' from partially initialized
    module 'poolgrad' (most likely due to a circular import)", which points the user the wrong way.  setup.py
    writes the list of modules it builds into ``_build_config.json``; no such file means nothing was built.
    """
    import importlib.machinery
    import importlib.util
    import json
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    try:
        with open(os.path.join(here, "_build_config.json")) as fh:
            expected = json.load(fh).get("extensions")
    except (OSError, ValueError, AttributeError):
        # No build record: only when no extension module at all is here can we tell that the core is missing.
        suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
        if any(name.endswith(suffixes) for name in os.listdir(here)):
            return
        missing = ["no extension module was built"]
    else:
        if not isinstance(expected, list):
            return      # written by an older setup.py that did not list the modules: nothing to check against
        missing = [f"poolgrad.{name} is not built" for name in expected
                   if importlib.util.find_spec(f"{__name__}.{name}") is None]
    if missing:
        raise ImportError(
            f"poolgrad's compiled core is missing in {here}: {', '.join(missing)}. This is a source tree or an "
            "installation without the compiled extension modules. Install poolgrad with `pip install poolgrad` "
            "(a wheel) or `pip install .` from a source checkout or sdist (needs a C compiler; Cython and NumPy "
            "are fetched by pip), or build in place with `python setup.py build_ext --inplace`. If poolgrad is "
            "installed, check that this folder does not shadow it (run Python from another directory).")


_check_compiled_core()
del _check_compiled_core

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
from .plan_api import (ArraySpec, Plan, plan_adaptive_max_pool2d, plan_adaptive_max_pool2d_backward,
                       plan_avg_pool2d, plan_avg_pool2d_backward, plan_max_pool, plan_max_pool2d_with_indices,
                       plan_max_pool2d_with_indices_backward, plan_max_pool_grad, plan_max_pooling_grad)

def get_include() -> str:
    """The folder holding ``poolgrad.h`` (the C API header) and ``poolgrad.pxd`` (its Cython declarations).

    Returns
    -------
    str
        Pass it to the compiler's include path (``include_dirs=[poolgrad.get_include()]``), as with
        ``numpy.get_include()``.  The extension links against nothing: it finds the function table at run time
        (``poolgrad_import()`` in C, ``poolgrad.capi.import_poolgrad()`` in Cython).
    """
    import os
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")

__all__ = [
    "max_pool2d_with_indices", "max_pool2d_with_indices_backward",
    "adaptive_max_pool2d", "adaptive_max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward",
    "max_pooling_grad", "max_pool", "max_pool_grad",
    "set_deterministic", "is_deterministic", "deterministic", "show_config", "get_config",
    "PoolGradError", "ParamNullptrError", "ParamInvalidError", "ACLNN_ERR_PARAM_NULLPTR",
    "ACLNN_ERR_PARAM_INVALID", "bfloat16", "set_buffer_cache_limit", "buffer_cache_info", "release_buffers",
    "Plan", "ArraySpec", "plan_max_pool2d_with_indices", "plan_max_pool2d_with_indices_backward",
    "plan_adaptive_max_pool2d", "plan_adaptive_max_pool2d_backward", "plan_avg_pool2d", "plan_avg_pool2d_backward",
    "plan_max_pool", "plan_max_pool_grad", "plan_max_pooling_grad", "get_include",
]
